//! The MCP server (`--features mcp`) against a real sshd: rmcp's own client in-process (every
//! tool, progress, cancellation, errors, the root), the built `swiftide-ssh-mcp` binary over
//! stdio with rmcp's child-process transport, and the Python `mcp` SDK as an independent
//! client.

mod common;

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientRequest,
        ProgressNotificationParam, Request, ServerResult,
    },
    service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError},
    transport::TokioChildProcess,
};
use serde_json::{Value, json};
use swiftide_ssh_executor::{
    SshExecutor,
    adapters::mcp::{ServerOptions, SshMcpServer},
};
use swiftide_ssh_testbed::Testbed;

use common::{builder, remote_processes, testbed, token, wait_until_gone};

/// Records progress notifications.
#[derive(Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

type Client = RunningService<RoleClient, Recorder>;

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

fn args(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object: {other}"),
    }
}

async fn call(client: &Client, tool: &'static str, arguments: Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args(arguments)))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
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
            "file_info",
            "glob",
            "grep",
            "list_directory",
            "read_file",
            "run_command",
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
    ] {
        let result = call(&client, tool, arguments).await;
        assert!(is_error(&result), "{tool}: {result:?}");
        let message = text(&result);
        assert!(message.contains(&expected), "{tool}: {message}");
        assert!(message.contains("refused"), "{tool}: {message}");
    }
    assert_eq!(client.list_all_tools().await.unwrap().len(), 7);
    client.cancel().await.unwrap();
}

/// The flags that point `swiftide-ssh-mcp` at `tb`.
fn binary_args(tb: &Testbed, root: &Path) -> Vec<String> {
    vec![
        "--host".into(),
        tb.host(),
        "--port".into(),
        tb.port().to_string(),
        "--user".into(),
        tb.user().to_owned(),
        "--identity".into(),
        tb.private_key_path().display().to_string(),
        "--known-hosts".into(),
        tb.known_hosts_path().display().to_string(),
        "--root".into(),
        root.display().to_string(),
    ]
}

#[tokio::test]
async fn the_binary_serves_rmcp_over_stdio() {
    let tb = testbed();
    let dir = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_swiftide-ssh-mcp"));
    command
        .args(binary_args(&tb, &root))
        .stderr(Stdio::inherit());
    let started = Instant::now();
    let client = Recorder::default()
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .expect("handshake with the binary");
    assert_eq!(
        client
            .peer_info()
            .unwrap()
            .server_info
            .as_ref()
            .unwrap()
            .name,
        "swiftide-ssh-mcp"
    );
    assert_eq!(client.list_all_tools().await.unwrap().len(), 7);
    let wrote = call(
        &client,
        "write_file",
        json!({"path": "f.txt", "content": "abc"}),
    )
    .await;
    assert!(!is_error(&wrote), "{wrote:?}");
    let ran = call(&client, "run_command", json!({"command": "cat f.txt"})).await;
    assert_eq!(text(&ran), "abc\n[exit code 0]");
    let outside = call(&client, "read_file", json!({"path": "/etc/passwd"})).await;
    assert!(is_error(&outside) && text(&outside).contains("outside the root"));
    eprintln!("binary over stdio: {:.2?}", started.elapsed());

    // Dropping the call future sends notifications/cancelled; the group dies.
    let t = token();
    let pattern = format!("sleep 300.{t}");
    let call_future = client.call_tool(
        CallToolRequestParams::new("run_command")
            .with_arguments(args(json!({"command": format!("{pattern}; true")}))),
    );
    let outcome = tokio::time::timeout(Duration::from_millis(1500), call_future).await;
    assert!(outcome.is_err(), "the command should still be running");
    assert_eq!(remote_processes(&format!("^{pattern}")).len(), 1);
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "survivors after cancellation: {left:?}");

    // Closing the client ends the server process, and a command still running with it.
    let pattern = format!("sleep 301.{t}");
    let call_future = client.call_tool(
        CallToolRequestParams::new("run_command")
            .with_arguments(args(json!({"command": format!("{pattern}; true")}))),
    );
    let _ = tokio::time::timeout(Duration::from_millis(1500), call_future).await;
    client.cancel().await.unwrap();
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "survivors after the client left: {left:?}");
}

const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

def flag(result, snake, camel):
    return getattr(result, snake, None) if hasattr(result, snake) else getattr(result, camel, None)

def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out = {"server": init.server_info.name if hasattr(init, "server_info") else init.serverInfo.name}
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            progress = []
            async def on_progress(value, total, message):
                progress.append(message)
            r = await session.call_tool("run_command", {"command": "echo one; sleep 0.3; echo two"},
                                        progress_callback=on_progress)
            out["run"] = [text(r), flag(r, "is_error", "isError")]
            out["progress"] = progress
            r = await session.call_tool("write_file", {"path": "py.txt", "content": "from python\n"})
            out["write"] = [text(r), flag(r, "is_error", "isError")]
            r = await session.call_tool("read_file", {"path": "py.txt"})
            out["read"] = [text(r), flag(r, "is_error", "isError")]
            r = await session.call_tool("run_command", {"command": "exit 7"})
            out["fail"] = [text(r), flag(r, "is_error", "isError")]
            print(json.dumps(out))

asyncio.run(main())
"#;

/// A venv with the Python `mcp` SDK under `target/`, created once; `Err` says why not.
fn python_mcp_venv() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-python-venv");
    let python = venv.join("bin/python");
    let has_mcp = |python: &Path| {
        std::process::Command::new(python)
            .args(["-c", "import mcp"])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if has_mcp(&python) {
        return Ok(python);
    }
    let run = |program: &Path, arguments: &[&str]| -> Result<(), String> {
        let out = std::process::Command::new(program)
            .args(arguments)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {arguments:?} failed: {}",
                program.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    let _ = std::fs::remove_dir_all(&venv);
    let venv_text = venv.to_string_lossy().into_owned();
    run(Path::new("python3"), &["-m", "venv", &venv_text])?;
    run(
        &venv.join("bin/pip"),
        &["install", "--quiet", "--disable-pip-version-check", "mcp"],
    )?;
    if has_mcp(&python) {
        Ok(python)
    } else {
        Err("`import mcp` fails after pip install".to_owned())
    }
}

#[tokio::test]
async fn the_python_mcp_sdk_drives_the_binary() {
    let setup = Instant::now();
    let python = match python_mcp_venv() {
        Ok(python) => python,
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("cannot set up the Python mcp SDK (CI is set, so this fails): {reason}")
        }
        Err(reason) => {
            eprintln!("SKIPPED the Python MCP client test: {reason}");
            return;
        }
    };
    let version = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output()
        .unwrap();
    eprintln!(
        "python mcp {} ready in {:.2?}",
        String::from_utf8_lossy(&version.stdout).trim(),
        setup.elapsed()
    );
    let tb = testbed();
    let dir = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let script = dir.path().join("client.py");
    std::fs::write(&script, PYTHON_CLIENT).unwrap();
    let started = Instant::now();
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_swiftide-ssh-mcp"))
        .args(binary_args(&tb, &root))
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the Python client hung")
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(result["server"], "swiftide-ssh-mcp");
    assert_eq!(result["tools"].as_array().unwrap().len(), 7, "{result}");
    assert_eq!(result["run"], json!(["one\ntwo\n[exit code 0]", false]));
    assert_eq!(result["progress"], json!(["one\n", "two\n"]));
    assert_eq!(result["write"][1], false);
    assert_eq!(result["read"], json!(["from python\n", false]));
    assert_eq!(result["fail"], json!(["[exit code 7]", true]));
    assert_eq!(
        std::fs::read_to_string(root.join("py.txt")).unwrap(),
        "from python\n"
    );
    eprintln!("python client session: {:.2?}", started.elapsed());
}
