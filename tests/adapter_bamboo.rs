//! The bamboo `ToolExecutor` adapter against a real sshd, driven the way bamboo drives tools:
//! a `ToolCall` with raw JSON arguments in, a `ToolResult` (or `ToolError`) out.
#![cfg(feature = "bamboo")]

mod common;

use std::time::Duration;

use bamboo_agent_core::{
    AgentEvent, FunctionCall, ToolCall, ToolError, ToolExecutionContext, ToolExecutor,
    ToolMutability,
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
        ["Bash", "Read", "Write", "Glob", "Grep", "GetFileInfo"]
    );
    for schema in &schemas {
        assert_eq!(schema.schema_type, "function");
        assert_eq!(schema.function.parameters["type"], "object");
        assert_eq!(schema.function.parameters["additionalProperties"], false);
    }
    let read = &schemas[1].function.parameters;
    assert_eq!(read["required"], serde_json::json!(["file_path"]));
    assert_eq!(read["properties"]["offset"]["type"], "number");
    for (name, mutability, parallel) in [
        ("Read", ToolMutability::ReadOnly, true),
        ("Glob", ToolMutability::ReadOnly, true),
        ("Grep", ToolMutability::ReadOnly, true),
        ("GetFileInfo", ToolMutability::ReadOnly, true),
        ("Bash", ToolMutability::Mutating, false),
        ("Write", ToolMutability::Mutating, false),
        ("Unknown", ToolMutability::Mutating, false),
    ] {
        let c = call(name, "{}");
        assert_eq!(tools.call_mutability(&c), mutability, "{name}");
        assert_eq!(tools.call_concurrency_safe(&c), parallel, "{name}");
        // bamboo's own name-based classification agrees.
        assert_eq!(bamboo_agent_core::classify_tool(name), mutability, "{name}");
    }
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
        (
            "Bash",
            r#"{"command": "sleep 1", "run_in_background": true}"#,
        ),
        ("Grep", r#"{"pattern": "("}"#),
        ("Grep", r#"{"pattern": "x", "output_mode": "lines"}"#),
        ("Glob", r#"{"pattern": "a**"}"#),
        ("GetFileInfo", r#"{"path": ""}"#),
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
