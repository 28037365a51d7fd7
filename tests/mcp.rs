//! The MCP server (`--features mcp`) against a real sshd, with rmcp's own client in-process:
//! every tool, progress, cancellation, errors, the root. The `swiftide-ssh-mcp` binary over
//! stdio (rmcp's child-process transport and the Python `mcp` SDK) is tested in its own crate,
//! mcp/tests/stdio.rs.

mod common;
#[path = "common/mcp_client.rs"]
mod mcp_client;

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use rmcp::{
    ServiceExt,
    model::{
        CallToolRequestParams, CancelledNotificationParam, ClientRequest, Request, ServerResult,
    },
    service::{PeerRequestOptions, ServiceError},
};
use serde_json::json;
use swiftide_ssh_executor::{
    SshExecutor,
    adapters::mcp::{ServerOptions, SshMcpServer},
};
use swiftide_ssh_testbed::Testbed;

use common::{builder, job_cursor, job_section, remote_processes, testbed, token, wait_until_gone};
use mcp_client::{Client, Recorder, args, call, is_error, text};

/// Serves `server` over an in-process duplex pipe and connects rmcp's client to it.
async fn connect(server: SshMcpServer) -> Client {
    let (server_side, client_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let running = server.serve(server_side).await.expect("server handshake");
        let _ = running.waiting().await;
    });
    Recorder::default()
        .serve(client_side)
        .await
        .expect("client handshake")
}

/// A server on `tb` confined to a fresh directory under the testbed's scratch directory,
/// which is also the working directory; returns the directory's real local path.
async fn rooted_server(tb: &Testbed) -> (Client, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let executor = builder(tb).workdir(&root).build_lazy().unwrap();
    let server = SshMcpServer::new(executor, ServerOptions::default().root(&root));
    (connect(server).await, root, dir)
}

#[tokio::test]
async fn every_tool_works_through_rmcp_and_the_root_holds() {
    let started = Instant::now();
    let tb = testbed();
    let (client, root, _dir) = rooted_server(&tb).await;

    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "swiftide-ssh-mcp");
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "changes_since",
            "checkpoint",
            "close_terminal",
            "expose_port",
            "file_info",
            "glob",
            "grep",
            "job_output",
            "job_status",
            "kill_job",
            "list_directory",
            "list_jobs",
            "list_ports",
            "list_terminals",
            "open_terminal",
            "read_file",
            "rollback",
            "run_command",
            "start_job",
            "terminal_screen",
            "terminal_send",
            "write_file"
        ]
    );
    let run = tools.iter().find(|t| t.name == "run_command").unwrap();
    let schema = serde_json::to_value(&*run.input_schema).unwrap();
    assert_eq!(schema["required"], json!(["command"]), "{schema}");
    assert!(schema["properties"]["timeout_secs"].is_object(), "{schema}");
    assert!(
        schema["properties"]["working_directory"].is_object(),
        "{schema}"
    );

    // run_command: output, stderr, exit code (a nonzero exit is an error result).
    let ok = call(
        &client,
        "run_command",
        json!({"command": "echo hello; pwd"}),
    )
    .await;
    assert!(!is_error(&ok), "{ok:?}");
    assert_eq!(
        text(&ok),
        format!("hello\n{}\n[exit code 0]", root.display())
    );
    let failed = call(
        &client,
        "run_command",
        json!({"command": "echo out; echo oops >&2; exit 3"}),
    )
    .await;
    assert!(is_error(&failed));
    assert_eq!(text(&failed), "out\n[stderr]\noops\n[exit code 3]");
    assert_eq!(failed.structured_content.as_ref().unwrap()["exit_code"], 3);
    let timed_out = call(
        &client,
        "run_command",
        json!({"command": "sleep 5", "timeout_secs": 0.3}),
    )
    .await;
    assert!(is_error(&timed_out));
    assert!(
        text(&timed_out).contains("timed out after 0.3 s"),
        "{timed_out:?}"
    );

    // write_file / read_file, text and base64, parents created.
    let wrote = call(
        &client,
        "write_file",
        json!({"path": "sub/dir/a.txt", "content": "hi there\nsecond\n"}),
    )
    .await;
    assert!(!is_error(&wrote), "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("sub/dir/a.txt")).unwrap(),
        "hi there\nsecond\n"
    );
    let read = call(&client, "read_file", json!({"path": "sub/dir/a.txt"})).await;
    assert_eq!(text(&read), "hi there\nsecond\n");
    // The same rule as a push: an existing file keeps its mode, and one that already holds
    // the content is left alone (same inode) and said to be unchanged.
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let a = root.join("sub/dir/a.txt");
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).unwrap();
        let inode = std::fs::metadata(&a).unwrap().ino();
        let same = call(
            &client,
            "write_file",
            json!({"path": "sub/dir/a.txt", "content": "hi there\nsecond\n"}),
        )
        .await;
        assert!(!is_error(&same), "{same:?}");
        assert_eq!(
            text(&same),
            format!(
                "unchanged: {} already holds these 16 bytes; nothing written",
                a.display()
            )
        );
        assert_eq!(std::fs::metadata(&a).unwrap().ino(), inode);
        // The same size, another content: written, the mode kept.
        let edited = call(
            &client,
            "write_file",
            json!({"path": "sub/dir/a.txt", "content": "hi there\nthird!\n"}),
        )
        .await;
        assert_eq!(text(&edited), format!("wrote 16 bytes to {}", a.display()));
        let metadata = std::fs::metadata(&a).unwrap();
        assert_ne!(metadata.ino(), inode);
        assert_eq!(metadata.permissions().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "hi there\nthird!\n");
        std::fs::write(&a, "hi there\nsecond\n").unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    call(
        &client,
        "write_file",
        json!({"path": "bin.dat", "content": "AP8BAg==", "encoding": "base64"}),
    )
    .await;
    assert_eq!(std::fs::read(root.join("bin.dat")).unwrap(), [0, 255, 1, 2]);
    let binary = call(&client, "read_file", json!({"path": "bin.dat"})).await;
    assert!(is_error(&binary));
    assert!(text(&binary).contains("base64"), "{binary:?}");
    let binary = call(
        &client,
        "read_file",
        json!({"path": "bin.dat", "encoding": "base64"}),
    )
    .await;
    assert_eq!(text(&binary), "AP8BAg==");
    let missing = call(&client, "read_file", json!({"path": "nope.txt"})).await;
    assert!(is_error(&missing));
    assert!(text(&missing).contains("No such file"), "{missing:?}");

    // run_command in a working directory under the root.
    let in_sub = call(
        &client,
        "run_command",
        json!({"command": "pwd; ls", "working_directory": "sub"}),
    )
    .await;
    assert_eq!(
        text(&in_sub),
        format!("{}\ndir\n[exit code 0]", root.join("sub").display())
    );

    // list_directory, glob, grep, file_info.
    let listing = text(&call(&client, "list_directory", json!({})).await);
    assert!(listing.contains(" sub/\n"), "{listing}");
    assert!(listing.contains(" bin.dat\n"), "{listing}");
    let found = call(&client, "glob", json!({"pattern": "**/*.txt"})).await;
    assert_eq!(text(&found), "sub/dir/a.txt");
    let found = call(&client, "glob", json!({"pattern": "*.txt"})).await;
    assert!(text(&found).starts_with("no paths"), "{found:?}");
    let grep = call(&client, "grep", json!({"pattern": "sec.nd"})).await;
    assert_eq!(
        text(&grep),
        format!("{}:2:second", root.join("sub/dir/a.txt").display())
    );
    let grep = call(
        &client,
        "grep",
        json!({"pattern": "HI", "case_insensitive": true, "include": "*.txt", "path": "sub"}),
    )
    .await;
    assert!(text(&grep).ends_with("a.txt:1:hi there"), "{grep:?}");
    let none = call(&client, "grep", json!({"pattern": "absent-text"})).await;
    assert!(!is_error(&none) && text(&none).starts_with("no matches"));
    let info = call(&client, "file_info", json!({"path": "sub/dir/a.txt"})).await;
    let info = info.structured_content.unwrap();
    assert_eq!(info["type"], "file");
    assert_eq!(info["size"], 16);
    assert_eq!(info["permissions"], "0644");

    // The root: absolute paths outside, `..`, and symlinks pointing out are refused.
    std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd-link")).unwrap();
    for (tool, arguments) in [
        ("read_file", json!({"path": "/etc/passwd"})),
        ("read_file", json!({"path": "../../../etc/passwd"})),
        ("read_file", json!({"path": "escape/passwd"})),
        ("read_file", json!({"path": "passwd-link"})),
        (
            "write_file",
            json!({"path": "escape/new-file", "content": "x"}),
        ),
        ("list_directory", json!({"path": "escape"})),
        ("file_info", json!({"path": "passwd-link"})),
        ("glob", json!({"pattern": "*", "path": "/"})),
        ("grep", json!({"pattern": "root", "path": "escape"})),
        (
            "run_command",
            json!({"command": "true", "working_directory": "/"}),
        ),
    ] {
        let refused = call(&client, tool, arguments.clone()).await;
        assert!(is_error(&refused), "{tool} {arguments}: {refused:?}");
        assert!(
            text(&refused).contains("outside the root"),
            "{tool} {arguments}: {}",
            text(&refused)
        );
    }
    assert!(!Path::new("/etc/new-file").exists());

    // Bad arguments: schema violations and bad values are tool errors (rmcp 3.11 reports
    // argument deserialization failures as `isError` results, as the MCP spec asks); an
    // unknown tool is a JSON-RPC error; the server keeps serving.
    for (tool, arguments) in [
        ("run_command", json!({})),
        ("run_command", json!({"command": 5})),
        ("run_command", json!({"command": "true", "bogus": 1})),
        ("read_file", json!({"path": "a", "encoding": "rot13"})),
    ] {
        let refused = call(&client, tool, arguments.clone()).await;
        assert!(is_error(&refused), "{tool} {arguments}: {refused:?}");
        assert!(
            text(&refused).contains("failed to deserialize parameters"),
            "{tool} {arguments}: {}",
            text(&refused)
        );
    }
    for (tool, arguments) in [
        ("run_command", json!({"command": "  "})),
        (
            "run_command",
            json!({"command": "true", "timeout_secs": -1}),
        ),
        (
            "write_file",
            json!({"path": "x", "content": "!!", "encoding": "base64"}),
        ),
        ("glob", json!({"pattern": "[unclosed"})),
        ("read_file", json!({"path": ""})),
    ] {
        let refused = call(&client, tool, arguments.clone()).await;
        assert!(is_error(&refused), "{tool} {arguments}: {refused:?}");
    }
    match client
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await
    {
        Err(ServiceError::McpError(data)) => assert_eq!(data.code.0, -32602, "{data:?}"),
        other => panic!("unknown tool: {other:?}"),
    }
    let still = call(&client, "run_command", json!({"command": "echo alive"})).await;
    assert_eq!(text(&still), "alive\n[exit code 0]");
    client.cancel().await.unwrap();
    eprintln!("every tool: {:.2?}", started.elapsed());
}

#[tokio::test]
async fn output_streams_as_progress_and_cancellation_kills_the_remote_group() {
    let tb = testbed();
    let executor = builder(&tb).build_lazy().unwrap();
    let client = connect(SshMcpServer::new(executor, ServerOptions::default())).await;

    // Progress: each line arrives as a notification before the result.
    let params = CallToolRequestParams::new("run_command").with_arguments(args(json!({
        "command": "for i in 1 2 3; do echo line$i; sleep 0.3; done; echo err >&2"
    })));
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let response = handle.await_response().await.unwrap();
    let ServerResult::CallToolResult(result) = response else {
        panic!("unexpected response {response:?}");
    };
    assert_eq!(
        text(&result),
        "line1\nline2\nline3\n[stderr]\nerr\n[exit code 0]"
    );
    // Notifications are handled in tasks of their own: give the last one a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    let progress = loop {
        let progress = client.service().progress.lock().unwrap().clone();
        if progress.last().is_some_and(|p| p.progress >= 22.0) || Instant::now() > deadline {
            break progress;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(progress.len() >= 3, "{progress:?}");
    let streamed: String = progress.iter().filter_map(|p| p.message.clone()).collect();
    assert_eq!(streamed, "line1\nline2\nline3\nerr\n");
    assert_eq!(progress.last().unwrap().progress, 22.0);

    // Cancellation: notifications/cancelled drops the executor's future.
    let t = token();
    let pattern = format!("sleep 300.{t}");
    let params = CallToolRequestParams::new("run_command").with_arguments(args(json!({
        "command": format!("{pattern} & {pattern}")
    })));
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(&format!("^{pattern}")).len() < 2 {
        assert!(Instant::now() < deadline, "the sleeps never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled_at = Instant::now();
    client
        .notify_cancelled(CancelledNotificationParam::new(
            Some(handle.id.clone()),
            Some("test".to_owned()),
        ))
        .await
        .unwrap();
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "survivors after cancellation: {left:?}");
    eprintln!(
        "cancel kill: group gone {:.2?} after notifications/cancelled",
        cancelled_at.elapsed()
    );
    let still = call(&client, "run_command", json!({"command": "echo alive"})).await;
    assert_eq!(text(&still), "alive\n[exit code 0]");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn expose_port_reaches_a_server_the_model_started_as_a_job() {
    let tb = testbed();
    let executor = builder(&tb).build_lazy().unwrap();
    let site = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    std::fs::write(site.path().join("status"), "ok\n").unwrap();
    std::fs::set_permissions(
        site.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (job, port) = common::http_server_job(&executor, site.path()).await;
    let client = connect(SshMcpServer::new(
        executor.clone(),
        ServerOptions::default(),
    ))
    .await;

    let exposed = call(&client, "expose_port", json!({ "port": port })).await;
    assert!(!is_error(&exposed), "{}", text(&exposed));
    let structured = exposed.structured_content.clone().unwrap();
    let address = structured["address"].as_str().unwrap().to_owned();
    assert_eq!(structured["url"], format!("http://{address}/"));
    assert!(text(&exposed).contains(&address), "{}", text(&exposed));
    let page = common::http_get(&address, "/status").await;
    assert!(
        page.starts_with("HTTP/1.0 200") && page.ends_with("\nok\n"),
        "{page}"
    );
    let listed = text(&call(&client, "list_ports", json!({})).await);
    assert!(
        listed.starts_with("1 of at most 16 ports exposed:"),
        "{listed}"
    );
    let refused = call(&client, "expose_port", json!({ "port": 0 })).await;
    assert!(is_error(&refused), "{}", text(&refused));

    // The server gone: its ports close.
    client.cancel().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(&address).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "an exposed port outlived the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    job.kill(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn a_dead_host_is_a_clear_tool_error() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let executor = SshExecutor::builder()
        .host("127.0.0.1")
        .port(port)
        .user("nobody")
        .insecure_accept_any_host_key()
        .build_lazy()
        .unwrap();
    let client = connect(SshMcpServer::new(executor, ServerOptions::default())).await;
    let expected = format!("could not connect to 127.0.0.1:{port}");
    for (tool, arguments) in [
        ("run_command", json!({"command": "true"})),
        ("read_file", json!({"path": "/etc/hostname"})),
        ("list_directory", json!({"path": "/"})),
        ("start_job", json!({"command": "true"})),
        ("list_jobs", json!({})),
    ] {
        let result = call(&client, tool, arguments).await;
        assert!(is_error(&result), "{tool}: {result:?}");
        let message = text(&result);
        assert!(message.contains(&expected), "{tool}: {message}");
        assert!(message.contains("refused"), "{tool}: {message}");
    }
    // A terminal cannot start: the same reason, as an error result.
    let result = call(&client, "open_terminal", json!({})).await;
    assert!(is_error(&result), "{result:?}");
    assert!(text(&result).contains(&expected), "{result:?}");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 22);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn jobs_start_poll_by_cursor_wait_kill_and_list_through_mcp() {
    let tb = testbed();
    let (client, root, _dir) = rooted_server(&tb).await;
    let t = token();
    let build = format!("mcp-build-{t}");

    let tools = client.list_all_tools().await.unwrap();
    let schema = |name: &str| {
        let tool = tools.iter().find(|tool| tool.name == name).unwrap();
        serde_json::to_value(&*tool.input_schema).unwrap()
    };
    assert_eq!(schema("start_job")["required"], json!(["command"]));
    assert_eq!(schema("job_output")["required"], json!(["id"]));
    assert!(schema("job_output")["properties"]["cursor"].is_object());
    assert!(schema("job_status")["properties"]["wait_secs"].is_object());

    std::fs::create_dir(root.join("sub")).unwrap();
    let started = call(
        &client,
        "start_job",
        json!({"command": "pwd; echo oops >&2; sleep 0.3; printf 'é😀'; exit 2", "id": build,
               "working_directory": "sub", "labels": [{"key": "door", "value": "mcp"}]}),
    )
    .await;
    assert!(!is_error(&started), "{started:?}");
    assert_eq!(started.structured_content.as_ref().unwrap()["id"], build);
    assert_eq!(job_cursor(&text(&started)), "stdout=0,stderr=0");

    // Cursor in, cursor out, until the end; the structured content carries the same cursor.
    let mut cursor = job_cursor(&text(&started));
    let mut stdout = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let polled = call(
            &client,
            "job_output",
            json!({"id": build, "cursor": cursor}),
        )
        .await;
        assert!(!is_error(&polled), "{polled:?}");
        let body = text(&polled);
        stdout.push_str(&job_section(&body, "stdout"));
        cursor = job_cursor(&body);
        let structured = polled.structured_content.clone().unwrap();
        assert_eq!(structured["cursor"], cursor.as_str());
        if structured["finished"] == true {
            break body;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let sub = root.join("sub");
    assert_eq!(stdout, format!("{}\né😀\n", sub.display()));
    let bytes = sub.display().to_string().len() + 1 + "é😀".len();
    assert_eq!(cursor, format!("stdout={bytes},stderr=5"));
    assert!(
        last.starts_with(&format!("job {build}: exited with code 2")),
        "{last}"
    );
    assert!(last.contains("[end of output]"), "{last}");

    let status = call(
        &client,
        "job_status",
        json!({"id": build, "wait_secs": 0.5}),
    )
    .await;
    assert!(!is_error(&status));
    assert!(
        text(&status).contains(r#"labels: "door"="mcp""#),
        "{status:?}"
    );

    // A kill takes the whole group, grandchildren included.
    let server = format!("mcp-server-{t}");
    let pattern = format!("sleep 30{t}");
    let started = call(
        &client,
        "start_job",
        json!({"command": format!("{pattern} & {pattern}; echo never"), "id": server}),
    )
    .await;
    assert!(!is_error(&started), "{started:?}");
    let waited = call(
        &client,
        "job_status",
        json!({"id": server, "wait_secs": 0.3}),
    )
    .await;
    assert!(text(&waited).contains("running (pid "), "{waited:?}");
    let killed = call(&client, "kill_job", json!({"id": server})).await;
    assert_eq!(
        text(&killed),
        format!("job {server}: killed by signal TERM")
    );
    assert!(
        wait_until_gone(&pattern, Duration::from_secs(5))
            .await
            .is_empty()
    );

    let listed = text(&call(&client, "list_jobs", json!({})).await);
    let ours: Vec<_> = listed
        .lines()
        .filter(|line| {
            line.split(':')
                .next()
                .unwrap_or_default()
                .ends_with(&format!("-{t}"))
        })
        .collect();
    assert_eq!(ours.len(), 2, "{listed}");
    assert!(
        ours[0].starts_with(&format!("{build}: exited with code 2")),
        "{listed}"
    );
    assert!(
        ours[1].starts_with(&format!("{server}: killed by signal TERM")),
        "{listed}"
    );

    // Mistakes are error results; the root holds for the job's directory too.
    let outside = call(
        &client,
        "start_job",
        json!({"command": "true", "working_directory": "/"}),
    )
    .await;
    assert!(
        is_error(&outside) && text(&outside).contains("outside the root"),
        "{outside:?}"
    );
    let missing = call(&client, "job_output", json!({"id": "no-such-job"})).await;
    assert!(
        is_error(&missing) && text(&missing).contains("no-such-job"),
        "{missing:?}"
    );
    let bad = call(&client, "job_output", json!({"id": build, "cursor": "x"})).await;
    assert!(
        is_error(&bad) && text(&bad).contains("stdout=N,stderr=M"),
        "{bad:?}"
    );

    let executor = builder(&tb).build().await.unwrap();
    for id in [build, server] {
        executor.job(&id).await.unwrap().remove().await.unwrap();
    }
}

/// The rows of the screen in a terminal tool's text (everything after the `[screen ...]`
/// header line).
fn screen_rows(text: &str) -> Vec<&str> {
    let mut lines = text.lines();
    assert!(
        lines.by_ref().any(|line| line.starts_with("[screen ")),
        "no screen in {text:?}"
    );
    lines.collect()
}

#[tokio::test]
async fn terminals_open_type_read_wait_and_close_through_mcp() {
    let tb = testbed();
    let (client, root, _dir) = rooted_server(&tb).await;
    let tools = client.list_all_tools().await.unwrap();
    let schema = |name: &str| {
        let tool = tools.iter().find(|tool| tool.name == name).unwrap();
        serde_json::to_value(&*tool.input_schema).unwrap()
    };
    assert_eq!(schema("terminal_send")["required"], json!(["id"]));
    assert!(schema("terminal_send")["properties"]["keys"].is_object());
    assert!(schema("terminal_screen")["properties"]["scrollback_lines"].is_object());

    // Under the root, in a directory below it; the id comes structured too.
    std::fs::create_dir(root.join("sub")).unwrap();
    let opened = call(
        &client,
        "open_terminal",
        json!({"command": "PS1='$ ' exec /bin/sh -i", "working_directory": "sub"}),
    )
    .await;
    assert!(!is_error(&opened), "{opened:?}");
    assert_eq!(opened.structured_content.as_ref().unwrap()["id"], "term-1");
    let body = text(&opened);
    assert!(
        body.starts_with("terminal term-1 opened (80x24): command \"PS1='$ ' exec /bin/sh -i\"\n"),
        "{body}"
    );
    assert_eq!(screen_rows(&body), ["$"], "{body}");
    let sent = call(
        &client,
        "terminal_send",
        json!({"id": "term-1", "text": "pwd; echo $((6*7))", "keys": ["Enter"], "wait_for": "^42$"}),
    )
    .await;
    assert!(!is_error(&sent), "{sent:?}");
    let body = text(&sent);
    assert!(body.contains(r#"wait_for "^42$" matched"#), "{body}");
    assert_eq!(
        screen_rows(&body)[1..3],
        [root.join("sub").display().to_string().as_str(), "42"],
        "{body}"
    );

    // A cancelled wait ends the call; the terminal stays open and usable.
    let t = token();
    let pattern = format!("sleep 304{t}");
    let params = CallToolRequestParams::new("terminal_send").with_arguments(args(json!({
        "id": "term-1", "text": pattern, "keys": ["Enter"], "wait_for": "never", "timeout_secs": 60
    })));
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(&pattern).is_empty() {
        assert!(Instant::now() < deadline, "the sleep never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .notify_cancelled(CancelledNotificationParam::new(
            Some(handle.id.clone()),
            Some("test".to_owned()),
        ))
        .await
        .unwrap();
    let interrupted = call(
        &client,
        "terminal_send",
        json!({"id": "term-1", "keys": ["Ctrl-C"], "wait_for": "^\\$$"}),
    )
    .await;
    assert!(text(&interrupted).contains("matched"), "{interrupted:?}");
    assert!(
        wait_until_gone(&pattern, Duration::from_secs(10))
            .await
            .is_empty()
    );
    let screen = call(&client, "terminal_screen", json!({"id": "term-1"})).await;
    assert!(
        text(&screen).starts_with("terminal term-1: the program is running\n[screen 24 rows"),
        "{screen:?}"
    );
    let listed = call(&client, "list_terminals", json!({})).await;
    assert_eq!(
        text(&listed),
        "1 of at most 8 terminals open:\nterm-1: running, 80x24, command \"PS1='$ ' exec \
         /bin/sh -i\""
    );

    // Mistakes are error results; the root holds for the terminal's directory.
    for (tool, arguments, expected) in [
        (
            "open_terminal",
            json!({"working_directory": "/"}),
            "outside the root",
        ),
        (
            "terminal_send",
            json!({"id": "term-1", "keys": ["Hyper-X"]}),
            "Nothing was sent",
        ),
        (
            "terminal_screen",
            json!({"id": "term-1", "wait_for": "["}),
            "not a valid regular expression",
        ),
        ("terminal_screen", json!({"id": "term-7"}), "no terminal"),
    ] {
        let refused = call(&client, tool, arguments.clone()).await;
        assert!(is_error(&refused), "{tool} {arguments}: {refused:?}");
        assert!(
            text(&refused).contains(expected),
            "{tool} {arguments}: {}",
            text(&refused)
        );
    }

    // close_terminal kills the whole session, a command still running in it included.
    let killed = format!("sleep 305{t}");
    call(
        &client,
        "terminal_send",
        json!({"id": "term-1", "text": killed, "keys": ["Enter"]}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(&killed).is_empty() {
        assert!(Instant::now() < deadline, "the sleep never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let closed = call(&client, "close_terminal", json!({"id": "term-1"})).await;
    assert!(!is_error(&closed), "{closed:?}");
    assert!(
        text(&closed).starts_with("terminal term-1 closed: its session was killed; "),
        "{closed:?}"
    );
    assert!(
        wait_until_gone(&killed, Duration::from_secs(10))
            .await
            .is_empty()
    );
    let gone = call(
        &client,
        "terminal_send",
        json!({"id": "term-1", "text": "x"}),
    )
    .await;
    assert!(
        is_error(&gone) && text(&gone).contains("was closed"),
        "{gone:?}"
    );

    // The client going away ends the server, which kills the terminals still open.
    let last = format!("sleep 306{t}");
    call(
        &client,
        "open_terminal",
        json!({"command": format!("echo up; {last}")}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(&last).is_empty() {
        assert!(Instant::now() < deadline, "the sleep never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.cancel().await.unwrap();
    assert!(
        wait_until_gone(&last, Duration::from_secs(10))
            .await
            .is_empty(),
        "a terminal survived the server"
    );
}

#[tokio::test]
async fn checkpoint_tools_record_list_and_roll_back_within_the_root() {
    let tb = testbed();
    let (client, root, _dir) = rooted_server(&tb).await;
    std::fs::create_dir_all(root.join("work")).unwrap();
    std::fs::write(root.join("work/a.txt"), "one").unwrap();
    let taken = call(&client, "checkpoint", json!({"path": "work"})).await;
    assert!(!is_error(&taken), "{taken:?}");
    let said = text(&taken);
    let id = said.split_whitespace().nth(1).unwrap().to_owned();
    assert!(said.starts_with("checkpoint "), "{said}");

    std::fs::write(root.join("work/a.txt"), "two").unwrap();
    std::fs::write(root.join("work/b.txt"), "new").unwrap();
    let changes = text(&call(&client, "changes_since", json!({"path": "work", "id": id})).await);
    assert_eq!(changes, "modified a.txt\nadded b.txt", "{changes}");
    let rolled = call(&client, "rollback", json!({"path": "work", "id": id})).await;
    assert!(!is_error(&rolled), "{rolled:?}");
    assert!(
        text(&rolled).ends_with("modified a.txt\nadded b.txt"),
        "{}",
        text(&rolled)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("work/a.txt")).unwrap(),
        "one"
    );
    assert!(!root.join("work/b.txt").exists());
    let none = text(&call(&client, "changes_since", json!({"path": "work", "id": id})).await);
    assert_eq!(none, "no changes since the checkpoint");

    // Outside the root, and an unknown id: errors the model reads.
    let outside = call(&client, "checkpoint", json!({"path": "/etc"})).await;
    assert!(is_error(&outside), "{outside:?}");
    let unknown = call(
        &client,
        "rollback",
        json!({"path": "work", "id": "0".repeat(40)}),
    )
    .await;
    assert!(
        is_error(&unknown) && text(&unknown).contains("no checkpoint"),
        "{unknown:?}"
    );
}
