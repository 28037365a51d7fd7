//! Runs agent-sdk's own primitive tools (Read, Grep, Glob, Bash) on a remote host through the
//! SSH `Environment` adapter.
//!
//! Run this example with: cargo run --ignore-rust-version --features agent-sdk --example agent_sdk_environment
//!
//! It starts a throwaway local sshd (the native testbed; needs `openssh-server`) and works in
//! a temporary directory on it.

use std::sync::Arc;

use agent_sdk::{
    AgentCapabilities, Environment, Tool, ToolContext,
    primitive_tools::{BashTool, GlobTool, GrepTool, ReadTool},
};
use serde_json::json;
use swiftide_ssh_executor::{SshExecutor, adapters::agent_sdk::SshEnvironment};

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
    let root = workspace.path().to_str().ok_or("non-UTF-8 temp dir")?;
    let env = Arc::new(SshEnvironment::new(executor, root)?.symlink_proof(true));

    env.write_file("src/main.rs", "fn main() {\n    // TODO: greet\n}\n")
        .await?;
    let ctx = ToolContext::new(());
    let caps = AgentCapabilities::full_access;
    let calls: Vec<(&str, serde_json::Value)> = vec![
        ("Read", json!({"path": "src/main.rs"})),
        ("Grep", json!({"pattern": "TODO"})),
        ("Glob", json!({"pattern": "**/*.rs"})),
        ("Bash", json!({"command": "uname -s; ls -R"})),
    ];
    for (name, input) in calls {
        let result = match name {
            "Read" => {
                ReadTool::new(env.clone(), caps())
                    .execute(&ctx, input)
                    .await?
            }
            "Grep" => {
                GrepTool::new(env.clone(), caps())
                    .execute(&ctx, input)
                    .await?
            }
            "Glob" => {
                GlobTool::new(env.clone(), caps())
                    .execute(&ctx, input)
                    .await?
            }
            _ => {
                BashTool::new(env.clone(), caps())
                    .execute(&ctx, input)
                    .await?
            }
        };
        println!(
            "== {name} (success: {})\n{}\n",
            result.success, result.output
        );
    }
    // Escapes are clamped into the root, or refused after resolving symlinks.
    println!(
        "../../etc/passwd resolves to {}",
        env.resolve_path("../../etc/passwd")
    );
    Ok(())
}
