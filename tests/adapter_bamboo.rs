//! The bamboo `ToolExecutor` adapter against a real sshd, driven the way bamboo drives tools:
//! a `ToolCall` with raw JSON arguments in, a `ToolResult` (or `ToolError`) out.
#![cfg(feature = "bamboo")]

mod common;

use std::time::Duration;

use std::sync::Arc;

use bamboo_agent_core::{
    AgentEvent, AsyncWaitKind, BashCompletionInfo, BashCompletionSink, FunctionCall,
    RunningCompletion, ToolCall, ToolError, ToolExecutionContext, ToolExecutor, ToolMutability,
    ToolOutcome,
};
use serde_json::Value;
use swiftide_ssh_executor::adapters::bamboo::SshToolExecutor;

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "call-1".to_owned(),
        tool_type: "function".to_owned(),
        function: FunctionCall {
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        },
    }
}

async fn setup() -> (
    swiftide_ssh_testbed::Testbed,
    tempfile::TempDir,
    SshToolExecutor,
) {
    let testbed = common::testbed();
    let executor = common::executor(&testbed).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/nested")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "fn a() {}\n// TODO one\n").unwrap();
    std::fs::write(dir.path().join("src/nested/m.rs"), "x\nTODO two\ny\n").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "l1\nl2\nl3\nl4\n").unwrap();
    std::fs::write(dir.path().join("bin.dat"), b"TODO\0").unwrap();
    let tools = SshToolExecutor::new(executor, dir.path());
    (testbed, dir, tools)
}

#[tokio::test]
async fn schemas_and_classification_follow_bamboo() {
    let (_testbed, _dir, tools) = setup().await;
    let schemas = tools.list_tools();
    let names: Vec<_> = schemas.iter().map(|s| s.function.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Bash",
            "BashOutput",
            "KillShell",
            "Read",
            "Write",
            "Glob",
            "Grep",
            "GetFileInfo",
            "open_terminal",
            "terminal_send",
            "terminal_screen",
            "close_terminal",
            "list_terminals",
            "expose_port",
            "list_ports"
        ]
    );
    for schema in &schemas {
        assert_eq!(schema.schema_type, "function");
        assert_eq!(schema.function.parameters["type"], "object");
        assert_eq!(schema.function.parameters["additionalProperties"], false);
    }
    let read = &schemas[3].function.parameters;
    let output = &schemas[1].function.parameters;
    assert_eq!(output["required"], serde_json::json!(["bash_id"]));
    assert_eq!(output["properties"]["filter"]["type"], "string");
    let kill = &schemas[2].function.parameters;
    assert_eq!(kill["required"], serde_json::json!(["shell_id"]));
    assert_eq!(read["required"], serde_json::json!(["file_path"]));
    assert_eq!(read["properties"]["offset"]["type"], "number");
    for (name, mutability, parallel) in [
        ("Read", ToolMutability::ReadOnly, true),
        ("Glob", ToolMutability::ReadOnly, true),
        ("Grep", ToolMutability::ReadOnly, true),
        ("GetFileInfo", ToolMutability::ReadOnly, true),
        ("BashOutput", ToolMutability::ReadOnly, true),
        ("Bash", ToolMutability::Mutating, false),
        ("KillShell", ToolMutability::Mutating, false),
        ("Write", ToolMutability::Mutating, false),
        ("Unknown", ToolMutability::Mutating, false),
    ] {
        let c = call(name, "{}");
        assert_eq!(tools.call_mutability(&c), mutability, "{name}");
        assert_eq!(tools.call_concurrency_safe(&c), parallel, "{name}");
        // bamboo's own name-based classification agrees.
        assert_eq!(bamboo_agent_core::classify_tool(name), mutability, "{name}");
    }
    // The terminal tools, which bamboo does not know: reading a screen changes nothing.
    for (name, mutability, parallel) in [
        ("terminal_screen", ToolMutability::ReadOnly, true),
        ("list_terminals", ToolMutability::ReadOnly, true),
        ("open_terminal", ToolMutability::Mutating, false),
        ("terminal_send", ToolMutability::Mutating, false),
        ("close_terminal", ToolMutability::Mutating, false),
        ("list_ports", ToolMutability::ReadOnly, true),
        ("expose_port", ToolMutability::Mutating, false),
    ] {
        let c = call(name, "{}");
        assert_eq!(tools.call_mutability(&c), mutability, "{name}");
        assert_eq!(tools.call_concurrency_safe(&c), parallel, "{name}");
    }
    let send = &schemas[9].function.parameters;
    assert_eq!(send["required"], serde_json::json!(["id"]), "{send}");
    assert!(send["properties"]["keys"].is_object(), "{send}");
    assert!(send.get("$schema").is_none(), "{send}");
}

#[tokio::test]
async fn file_tools_work_over_ssh() {
    let (_testbed, dir, tools) = setup().await;
    let out = tools
        .execute(&call(
            "Read",
            r#"{"file_path":"notes.txt","offset":1,"limit":2}"#,
        ))
        .await
        .unwrap();
    assert!(out.success);
    assert_eq!(
        out.result,
        "     2\tl2\n     3\tl3\n[TRUNCATED] Showing lines 2-3 of 4. Continue with offset=3"
    );
    let out = tools
        .execute(&call(
            "Write",
            r#"{"file_path":"new/w.txt","content":"hi\n"}"#,
        ))
        .await
        .unwrap();
    assert!(out.success, "{}", out.result);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new/w.txt")).unwrap(),
        "hi\n"
    );

    let out = tools
        .execute(&call(
            "Grep",
            r#"{"pattern":"TODO","output_mode":"content","-n":true}"#,
        ))
        .await
        .unwrap();
    let mut lines: Vec<_> = out.result.lines().collect();
    lines.sort();
    let root = dir.path().display();
    assert_eq!(
        lines,
        [
            format!("{root}/src/lib.rs:2:// TODO one"),
            format!("{root}/src/nested/m.rs:2:TODO two")
        ]
    );
    let out = tools
        .execute(&call(
            "Grep",
            r#"{"pattern":"todo","-i":true,"output_mode":"count","glob":"**/m.rs"}"#,
        ))
        .await
        .unwrap();
    assert_eq!(out.result, format!("{root}/src/nested/m.rs:1"));

    let out = tools
        .execute(&call("Glob", r#"{"pattern":"**/*.rs"}"#))
        .await
        .unwrap();
    let mut found: Vec<_> = out.result.lines().collect();
    found.sort();
    assert_eq!(
        found,
        [
            format!("{root}/src/lib.rs"),
            format!("{root}/src/nested/m.rs")
        ]
    );

    let out = tools
        .execute(&call("GetFileInfo", r#"{"path":"notes.txt"}"#))
        .await
        .unwrap();
    let info: Value = serde_json::from_str(&out.result).unwrap();
    assert_eq!(info["exists"], true);
    assert_eq!(info["is_file"], true);
    assert_eq!(info["size_bytes"], 12);
    let out = tools
        .execute(&call("GetFileInfo", r#"{"path":"nope"}"#))
        .await
        .unwrap();
    assert_eq!(out.result, r#"{"exists":false,"path":"nope"}"#);
    // A missing file is a failed result, not an executor error.
    let out = tools
        .execute(&call("Read", r#"{"file_path":"nope.txt"}"#))
        .await
        .unwrap();
    assert!(!out.success);
}

#[tokio::test]
async fn bad_arguments_are_invalid_arguments() {
    let (_testbed, _dir, tools) = setup().await;
    for (name, args) in [
        ("Read", "{}"),
        ("Read", r#"{"file_path": 7}"#),
        ("Read", r#"{"file_path": "a", "bogus": 1}"#),
        ("Read", "not json"),
        ("Read", "[1]"),
        ("Write", r#"{"file_path": "a"}"#),
        ("Bash", r#"{"command": "  "}"#),
        ("Bash", r#"{"command": "sleep 1", "interactive": true}"#),
        ("BashOutput", r#"{"bash_id": "x", "filter": "("}"#),
        ("BashOutput", r#"{"bash_id": "x", "cursor": "7"}"#),
        ("BashOutput", r#"{"bash_id": ""}"#),
        ("KillShell", r#"{"bash_id": "x"}"#),
        ("Grep", r#"{"pattern": "("}"#),
        ("Grep", r#"{"pattern": "x", "output_mode": "lines"}"#),
        ("Glob", r#"{"pattern": "a**"}"#),
        ("GetFileInfo", r#"{"path": ""}"#),
        ("open_terminal", r#"{"shell": "sh"}"#),
        ("terminal_send", r#"{"text": "ls"}"#),
        ("terminal_screen", r#"{"id": 1}"#),
        ("close_terminal", "{}"),
    ] {
        match tools.execute(&call(name, args)).await {
            Err(ToolError::InvalidArguments(message)) => assert!(!message.is_empty()),
            other => panic!("{name} {args}: {other:?}"),
        }
    }
    assert!(matches!(
        tools.execute(&call("Edit", "{}")).await,
        Err(ToolError::NotFound(_))
    ));
}

#[tokio::test]
async fn bash_streams_tokens_and_reports_status() {
    let (_testbed, _dir, tools) = setup().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let c = call(
        "Bash",
        r#"{"command":"echo one; sleep 0.2; echo two >&2; exit 3"}"#,
    );
    let mut ctx = ToolExecutionContext::none(&c.id);
    ctx.event_tx = Some(&tx);
    let out = tools.execute_with_context(&c, ctx).await.unwrap();
    assert!(!out.success);
    assert_eq!(out.result, "one\ntwo\n[exit code 3]");
    drop(tx);
    let mut streamed = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            AgentEvent::ToolToken {
                tool_call_id,
                content,
            } => {
                assert_eq!(tool_call_id, "call-1");
                streamed.push_str(&content);
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(streamed, "one\ntwo\n");

    let out = tools
        .execute(&call("Bash", r#"{"command":"pwd; ls", "workdir": "src"}"#))
        .await
        .unwrap();
    assert!(out.success);
    assert!(
        out.result.contains("/src\nlib.rs\nnested\n"),
        "{}",
        out.result
    );
    let out = tools
        .execute(&call("Bash", r#"{"command":"sleep 5", "timeout": 300}"#))
        .await
        .unwrap();
    assert!(!out.success);
    assert!(
        out.result.contains("timed out after 300ms"),
        "{}",
        out.result
    );

    // Dropping the future kills the remote process group.
    let token = common::token();
    let c = call(
        "Bash",
        &format!(r#"{{"command":"sleep 60 & sleep 6{token}"}}"#),
    );
    let _ = tokio::time::timeout(Duration::from_millis(500), tools.execute(&c)).await;
    let left = common::wait_until_gone(&token, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "left running: {left:?}");
}

/// Collects what bamboo's loop would be told when a background shell ends.
struct Completions(tokio::sync::mpsc::UnboundedSender<BashCompletionInfo>);

impl BashCompletionSink for Completions {
    fn on_bash_completed(&self, info: BashCompletionInfo) {
        let _ = self.0.send(info);
    }
}

async fn next_completion(
    completions: &mut tokio::sync::mpsc::UnboundedReceiver<BashCompletionInfo>,
) -> BashCompletionInfo {
    tokio::time::timeout(Duration::from_secs(10), completions.recv())
        .await
        .expect("a completion within 10 s")
        .expect("the sink is alive")
}

/// Starts `command` as a background `Bash` the way bamboo's loop does (outcome-aware, with
/// a session and a completion sink); returns the `bash_id` and the handle's kill.
async fn start_background(
    tools: &SshToolExecutor,
    command: &str,
    sink: &Arc<dyn BashCompletionSink>,
) -> (String, Box<dyn FnOnce() + Send>) {
    let args = serde_json::json!({"command": command, "run_in_background": true}).to_string();
    let c = call("Bash", &args);
    let mut ctx = ToolExecutionContext::none(&c.id);
    ctx.session_id = Some("session-1");
    ctx.bash_completion_sink = Some(sink);
    let outcome = tools.execute_with_context_outcome(&c, ctx).await.unwrap();
    let ToolOutcome::Running(handle) = outcome else {
        panic!("a background Bash is Running: {outcome:?}");
    };
    assert_eq!(handle.tool_call_id, "call-1");
    assert!(matches!(handle.completion, RunningCompletion::Detached));
    assert_eq!(handle.wait_kind, AsyncWaitKind::AsyncTools);
    assert!(handle.ack.success);
    let ack: Value = serde_json::from_str(&handle.ack.result).unwrap();
    assert_eq!(ack["status"], "running", "{ack}");
    assert_eq!(ack["command"], command, "{ack}");
    let id = ack["bash_id"].as_str().unwrap().to_owned();
    let message = ack["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("BashOutput {{\"bash_id\": \"{id}\"}}")),
        "{message}"
    );
    (id, handle.kill)
}

async fn bash_output(tools: &SshToolExecutor, args: Value) -> String {
    let out = tools
        .execute(&call("BashOutput", &args.to_string()))
        .await
        .unwrap();
    assert!(out.success, "{}", out.result);
    out.result
}

#[tokio::test]
async fn background_bash_runs_as_a_job_with_bashoutput_and_killshell() {
    let (_testbed, dir, tools) = setup().await;
    let (sender, mut completions) = tokio::sync::mpsc::unbounded_channel();
    let sink: Arc<dyn BashCompletionSink> = Arc::new(Completions(sender));

    let (id, _kill) = start_background(
        &tools,
        "pwd; echo warn >&2; sleep 0.5; echo err-line; echo done; exit 4",
        &sink,
    )
    .await;
    // BashOutput: only what is new since the last call; then the end.
    let first = bash_output(&tools, serde_json::json!({"bash_id": id})).await;
    assert!(
        first.starts_with(&format!("job {id}: running (pid ")),
        "{first}"
    );
    let mut stdout = common::job_section(&first, "stdout");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let last = loop {
        let polled = bash_output(&tools, serde_json::json!({"bash_id": id})).await;
        stdout.push_str(&common::job_section(&polled, "stdout"));
        if polled.contains("[end of output]") {
            break polled;
        }
        assert!(std::time::Instant::now() < deadline, "{polled}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let workspace = dir.path().display();
    assert_eq!(stdout, format!("{workspace}\nerr-line\ndone\n"));
    assert!(
        last.starts_with(&format!("job {id}: exited with code 4")),
        "{last}"
    );
    let idle = bash_output(&tools, serde_json::json!({"bash_id": id})).await;
    assert!(idle.contains("(no new output)"), "{idle}");
    // Nothing is consumed on the host: a cursor reads it again; a filter keeps some lines.
    let again = bash_output(
        &tools,
        serde_json::json!({"bash_id": id, "cursor": "stdout=0,stderr=0", "filter": "^(warn|done)$"}),
    )
    .await;
    assert_eq!(common::job_section(&again, "stdout"), "done\n");
    assert_eq!(common::job_section(&again, "stderr"), "warn\n");
    // A new executor (a restarted agent) reads it all too.
    let fresh = SshToolExecutor::new(tools.executor().clone(), dir.path());
    let replay = bash_output(&fresh, serde_json::json!({"bash_id": id})).await;
    assert_eq!(common::job_section(&replay, "stdout"), stdout);

    // bamboo's loop learns of the end through its sink, with the exit code and the tail.
    let done = next_completion(&mut completions).await;
    assert_eq!(done.session_id, "session-1");
    assert_eq!(done.bash_id, id);
    assert_eq!(done.exit_code, Some(4));
    assert_eq!(done.status, "completed");
    assert_eq!(
        done.output_tail,
        format!("{workspace}\nerr-line\ndone\n--- stderr ---\nwarn\n")
    );

    // KillShell kills the whole group (grandchildren too).
    let token = common::token();
    let (server, _kill) = start_background(
        &tools,
        &format!("sleep 7{token} & sleep 8{token}; echo never"),
        &sink,
    )
    .await;
    let killed = tools
        .execute(&call(
            "KillShell",
            &format!(r#"{{"shell_id": "{server}"}}"#),
        ))
        .await
        .unwrap();
    assert!(killed.success, "{}", killed.result);
    assert_eq!(
        killed.result,
        format!("job {server}: killed by signal TERM")
    );
    let left = common::wait_until_gone(&token, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "left running: {left:?}");
    let done = next_completion(&mut completions).await;
    assert_eq!(
        (done.bash_id.as_str(), done.exit_code),
        (server.as_str(), None)
    );
    assert_eq!(done.status, "killed");

    // The Running handle's kill kills the job too (bamboo calls it to reap the shell).
    let token = common::token();
    let (reaped, kill) = start_background(&tools, &format!("sleep 9{token}"), &sink).await;
    kill();
    let job = tools.executor().job(&reaped).await.unwrap();
    let status = job.wait(Duration::from_secs(10)).await.unwrap();
    assert!(status.is_finished(), "{status:?}");
    assert!(
        common::wait_until_gone(&token, Duration::from_secs(5))
            .await
            .is_empty()
    );

    // Outside the outcome-aware path, a background Bash answers with its ack.
    let out = tools
        .execute(&call(
            "Bash",
            r#"{"command": "echo hi", "run_in_background": true}"#,
        ))
        .await
        .unwrap();
    assert!(out.success);
    let ack: Value = serde_json::from_str(&out.result).unwrap();
    let quick = ack["bash_id"].as_str().unwrap().to_owned();
    tools
        .executor()
        .job(&quick)
        .await
        .unwrap()
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    let read = bash_output(&tools, serde_json::json!({"bash_id": quick})).await;
    assert_eq!(common::job_section(&read, "stdout"), "hi\n");

    // An unknown shell is a failed result the model reads.
    let missing = tools
        .execute(&call("BashOutput", r#"{"bash_id": "no-such-shell"}"#))
        .await
        .unwrap();
    assert!(!missing.success);
    assert!(
        missing.result.contains("no-such-shell"),
        "{}",
        missing.result
    );

    for id in [id, server, reaped, quick] {
        tools
            .executor()
            .job(&id)
            .await
            .unwrap()
            .remove()
            .await
            .unwrap();
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

/// Waits until a process matching `pattern` runs on the host.
async fn running(pattern: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while common::remote_processes(pattern).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{pattern} never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn terminals_start_in_the_workspace_and_are_driven_with_text_and_keys() {
    let (_testbed, dir, tools) = setup().await;
    let workspace = std::fs::canonicalize(dir.path()).unwrap();
    let run = |name: &'static str, args: Value| {
        let tools = tools.clone();
        async move {
            tools
                .execute(&call(name, &args.to_string()))
                .await
                .unwrap_or_else(|e| panic!("{name} {args}: {e:?}"))
        }
    };
    let opened = run(
        "open_terminal",
        serde_json::json!({"command": "PS1='$ ' exec /bin/sh -i", "cols": 120}),
    )
    .await;
    assert!(opened.success, "{}", opened.result);
    assert!(
        opened
            .result
            .starts_with("terminal term-1 opened (120x24): "),
        "{}",
        opened.result
    );
    assert_eq!(screen_rows(&opened.result), ["$"], "{}", opened.result);
    let sent = run(
        "terminal_send",
        serde_json::json!({"id": "term-1", "text": "cd src && pwd", "keys": ["Enter"],
                           "wait_for": "^\\$$"}),
    )
    .await;
    assert!(sent.success, "{}", sent.result);
    assert_eq!(
        screen_rows(&sent.result),
        [
            "$ cd src && pwd",
            workspace.join("src").display().to_string().as_str(),
            "$"
        ],
        "{}",
        sent.result
    );
    let screen = run(
        "terminal_screen",
        serde_json::json!({"id": "term-1", "quiet_ms": 50}),
    )
    .await;
    assert!(
        screen
            .result
            .starts_with("terminal term-1: the screen is quiet (no change for 50 ms)"),
        "{}",
        screen.result
    );
    // A relative working_directory is the workspace's.
    let nested = run(
        "open_terminal",
        serde_json::json!({"command": "pwd; exec cat", "working_directory": "src/nested"}),
    )
    .await;
    assert_eq!(
        screen_rows(&nested.result)[0],
        workspace.join("src/nested").display().to_string(),
        "{}",
        nested.result
    );
    let listed = run("list_terminals", serde_json::json!({})).await;
    assert_eq!(
        listed.result,
        "2 of at most 8 terminals open:\nterm-1: running, 120x24, command \"PS1='$ ' exec \
         /bin/sh -i\"\nterm-2: running, 80x24, command \"pwd; exec cat\""
    );

    // The model's mistakes are failed results it reads.
    let bad_key = run(
        "terminal_send",
        serde_json::json!({"id": "term-1", "keys": ["Ctrl-%"]}),
    )
    .await;
    assert!(!bad_key.success);
    assert!(
        bad_key.result.contains("Nothing was sent"),
        "{}",
        bad_key.result
    );
    let unknown = run("close_terminal", serde_json::json!({"id": "term-5"})).await;
    assert!(!unknown.success);
    assert!(
        unknown.result.starts_with("no terminal \"term-5\""),
        "{}",
        unknown.result
    );

    // Closing kills what runs in the terminal; the other terminals die with the executor.
    let t = common::token();
    let pattern = format!("sleep 307{t}");
    run(
        "terminal_send",
        serde_json::json!({"id": "term-1", "text": pattern, "keys": ["Enter"]}),
    )
    .await;
    running(&pattern).await;
    let closed = run("close_terminal", serde_json::json!({"id": "term-1"})).await;
    assert!(closed.success, "{}", closed.result);
    assert!(
        closed
            .result
            .starts_with("terminal term-1 closed: its session was killed; "),
        "{}",
        closed.result
    );
    assert!(
        common::wait_until_gone(&pattern, Duration::from_secs(10))
            .await
            .is_empty()
    );
    let last = format!("sleep 308{t}");
    run(
        "terminal_send",
        serde_json::json!({"id": "term-2", "keys": ["Ctrl-D"]}),
    )
    .await;
    run(
        "open_terminal",
        serde_json::json!({"command": format!("echo up; {last}")}),
    )
    .await;
    running(&last).await;
    drop(tools);
    assert!(
        common::wait_until_gone(&last, Duration::from_secs(10))
            .await
            .is_empty(),
        "a terminal survived the executor"
    );
}

#[tokio::test]
async fn expose_port_reaches_a_server_started_with_bash_in_the_background() {
    let (testbed, dir, tools) = setup().await;
    std::fs::write(dir.path().join("health"), "up\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = |name: &'static str, args: Value| {
        let tools = tools.clone();
        async move {
            tools
                .execute(&call(name, &args.to_string()))
                .await
                .unwrap_or_else(|e| panic!("{name} {args}: {e:?}"))
        }
    };
    let started = run(
        "Bash",
        serde_json::json!({
            "command": format!("exec python3 -m http.server {port} --bind 127.0.0.1"),
            "run_in_background": true
        }),
    )
    .await;
    assert!(started.success, "{}", started.result);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exposed = run("expose_port", serde_json::json!({ "port": port })).await;
    assert!(exposed.success, "{}", exposed.result);
    let address = exposed.result.split_whitespace().nth(6).unwrap().to_owned();
    let page = common::http_get(&address, "/health").await;
    assert!(
        page.starts_with("HTTP/1.0 200") && page.ends_with("\nup\n"),
        "{page}"
    );
    let listed = run("list_ports", serde_json::json!({})).await;
    assert!(listed.result.contains(&address), "{}", listed.result);
    let refused = run("expose_port", serde_json::json!({ "port": 0 })).await;
    assert!(!refused.success, "{}", refused.result);
    // The background shell: stopped as the model would.
    let ack: Value = serde_json::from_str(&started.result).unwrap();
    let id = ack["bash_id"].as_str().unwrap();
    let killed = run("KillShell", serde_json::json!({ "shell_id": id })).await;
    assert!(killed.success, "{}", killed.result);
    drop(testbed);
}
