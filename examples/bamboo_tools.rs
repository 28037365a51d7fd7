//! Drives the bamboo `ToolExecutor` adapter the way bamboo's agent loop does: tool calls with
//! raw JSON arguments in, results out, `Bash` output streamed as `AgentEvent::ToolToken`.
//!
//! Run this example with: cargo run --ignore-rust-version --features bamboo --example bamboo_tools
//!
//! It starts a throwaway local sshd (the native testbed; needs `openssh-server`) and works in
//! a temporary directory on it.

use bamboo_agent_core::{AgentEvent, FunctionCall, ToolCall, ToolExecutionContext, ToolExecutor};
use swiftide_ssh_executor::{SshExecutor, adapters::bamboo::SshToolExecutor};

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: format!("call-{name}"),
        tool_type: "function".to_owned(),
        function: FunctionCall {
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        },
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testbed = swiftide_ssh_testbed::Testbed::start()?;
    let executor = SshExecutor::builder()
        .host(testbed.host())
        .port(testbed.port())
        .user(testbed.user())
        .private_key_file(testbed.private_key_path())
        .known_hosts_file(testbed.known_hosts_path())
        .build()
        .await?;
    let workspace = tempfile::tempdir()?;
    let tools = SshToolExecutor::new(executor, workspace.path());
    for schema in tools.list_tools() {
        println!(
            "tool {}: {}",
            schema.function.name, schema.function.parameters
        );
    }

    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let printer = tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if let AgentEvent::ToolToken { content, .. } = event {
                print!("[live] {content}");
            }
        }
    });
    for (name, args) in [
        (
            "Write",
            r##"{"file_path":"notes.md","content":"# Notes\nTODO: ship\n"}"##,
        ),
        ("Read", r#"{"file_path":"notes.md"}"#),
        (
            "Grep",
            r#"{"pattern":"TODO","output_mode":"content","-n":true}"#,
        ),
        ("Glob", r#"{"pattern":"*.md"}"#),
        ("GetFileInfo", r#"{"path":"notes.md"}"#),
        (
            "Bash",
            r#"{"command":"for i in 1 2 3; do echo step $i; sleep 0.2; done"}"#,
        ),
        ("Read", r#"{"file_path": 42}"#),
    ] {
        let c = call(name, args);
        let mut ctx = ToolExecutionContext::none(&c.id);
        ctx.event_tx = Some(&tx);
        match tools.execute_with_context(&c, ctx).await {
            Ok(result) => println!(
                "== {name} (success: {})\n{}\n",
                result.success, result.result
            ),
            Err(error) => println!("== {name}: error: {error}\n"),
        }
    }
    drop(tx);
    printer.await?;
    Ok(())
}
