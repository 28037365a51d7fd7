//! Runs a few commands on a remote host through the pooled SSH executor, streaming output.
//!
//! Run this example with:
//!
//! ```sh
//! cargo run --ignore-rust-version --example quickstart
//! ```
//!
//! With no arguments it starts a throwaway local sshd (the native testbed; needs
//! `openssh-server`). To use a real host instead:
//!
//! ```sh
//! SSH_HOST=build-1 SSH_USER=ci SSH_KEY=~/.ssh/id_ed25519 \
//!   cargo run --ignore-rust-version --example quickstart
//! ```
//! (`SSH_PORT` defaults to 22; host keys are checked against `~/.ssh/known_hosts`.)

use std::{io::Write, time::Duration};

use swiftide_core::{Command, CommandError, ToolExecutor};
use swiftide_ssh_executor::SshExecutor;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the testbed alive for the whole run: dropping it stops sshd.
    let (builder, _testbed) = match std::env::var("SSH_HOST") {
        Ok(host) => {
            let mut builder = SshExecutor::builder()
                .host(host)
                .port(std::env::var("SSH_PORT").map_or(Ok(22), |p| p.parse())?);
            if let Ok(user) = std::env::var("SSH_USER") {
                builder = builder.user(user);
            }
            if let Ok(key) = std::env::var("SSH_KEY") {
                builder = builder.private_key_file(key);
            }
            (builder, None)
        }
        Err(_) => {
            let testbed = swiftide_ssh_testbed::Testbed::start()?;
            println!(
                "started a local sshd testbed on {}:{}",
                testbed.host(),
                testbed.port()
            );
            let builder = SshExecutor::builder()
                .host(testbed.host())
                .port(testbed.port())
                .user(testbed.user())
                .private_key_file(testbed.private_key_path())
                .known_hosts_file(testbed.known_hosts_path());
            (builder, Some(testbed))
        }
    };
    let executor = builder
        .default_timeout(Some(Duration::from_secs(30)))
        .build()
        .await?;

    // 1. Stream output as it arrives.
    println!("$ for i in 1 2 3; do echo step $i; sleep 0.3; done");
    let mut print = |chunk: &swiftide_core::CommandOutputChunk| {
        let mut stdout = std::io::stdout();
        let _ = stdout.write_all(chunk.as_bytes());
        let _ = stdout.flush();
    };
    executor
        .exec_cmd_streaming(
            &Command::shell("for i in 1 2 3; do echo step $i; sleep 0.3; done"),
            &mut print,
        )
        .await?;

    // 2. A failing command keeps its output.
    match executor
        .exec_cmd(&Command::shell("echo oops >&2; exit 3"))
        .await
    {
        Err(CommandError::NonZeroExit(output)) => println!("nonzero exit, output: {output}"),
        other => println!("unexpected: {other:?}"),
    }

    // 3. A timeout kills the whole remote process group.
    let slow = Command::shell("echo started; sleep 300 & sleep 300")
        .with_timeout(Duration::from_millis(500));
    if let Err(CommandError::TimedOut { timeout, output }) = executor.exec_cmd(&slow).await {
        println!("timed out after {timeout:?} with output {output:?}; remote group killed");
    }

    // 4. Exit details through the inherent API.
    let run = executor.run("uname -sr").await?;
    println!(
        "{} -> {:?} in {:?}: {}",
        run.host,
        run.status,
        run.duration,
        String::from_utf8_lossy(&run.stdout()).trim()
    );
    println!("pool: {:?}", executor.pool_stats());
    Ok(())
}
