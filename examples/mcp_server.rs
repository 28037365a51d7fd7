//! Serves the MCP server's tools for a remote host and calls them with rmcp's own client, over
//! an in-process pipe (the `swiftide-ssh-mcp` binary does the same over stdio).
//!
//! Run this example with: cargo run --ignore-rust-version --features mcp --example mcp_server
//!
//! It starts a throwaway local sshd (the native testbed; needs `openssh-server`). To serve a
//! real host to an MCP client instead, run the binary:
//! `cargo run --ignore-rust-version -p swiftide-ssh-mcp -- --help` (crate `mcp/`).

use rmcp::{ServiceExt, model::CallToolRequestParams};
use serde_json::json;
use swiftide_ssh_executor::{
    SshExecutor,
    adapters::mcp::{ServerOptions, SshMcpServer},
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testbed = swiftide_ssh_testbed::Testbed::start()?;
    let root = testbed.scratch_dir().canonicalize()?;
    let executor = SshExecutor::builder()
        .host(testbed.host())
        .port(testbed.port())
        .user(testbed.user())
        .private_key_file(testbed.private_key_path())
        .known_hosts_file(testbed.known_hosts_path())
        .workdir(&root)
        .build()
        .await?;

    // The server side: file tools confined to `root` (symlink-proof), commands in it.
    let server = SshMcpServer::new(executor, ServerOptions::default().root(&root));
    let (server_side, client_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_side).await {
            let _ = running.waiting().await;
        }
    });

    // The client side: what any MCP client (an agent, an IDE) does.
    let client = ().serve(client_side).await?;
    let tools = client.list_all_tools().await?;
    println!(
        "tools: {}",
        tools
            .iter()
            .map(|t| t.name.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (tool, arguments) in [
        (
            "write_file",
            json!({"path": "hello.txt", "content": "hello over MCP\n"}),
        ),
        ("read_file", json!({"path": "hello.txt"})),
        (
            "run_command",
            json!({"command": "uname -s; wc -c hello.txt", "timeout_secs": 10}),
        ),
        ("read_file", json!({"path": "/etc/passwd"})),
    ] {
        let serde_json::Value::Object(arguments) = arguments else {
            unreachable!("the arguments above are objects")
        };
        let result = client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await?;
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        let error = if result.is_error == Some(true) {
            " (tool error)"
        } else {
            ""
        };
        println!("{tool}{error}: {}", text.trim_end());
    }
    client.cancel().await?;
    Ok(())
}
