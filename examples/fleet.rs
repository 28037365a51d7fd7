//! Runs one command on every host of a fleet, with a live progress bar and a summary table.
//!
//! Run this example with:
//!
//! ```sh
//! cargo run --ignore-rust-version --example fleet
//! ```
//!
//! With no arguments it starts four local sshd testbed hosts (one of which is made slow) and
//! adds a dead host, so every outcome shows. With an inventory file (`[user@]host[:port]` per
//! line) it runs on those hosts instead, using `~/.ssh/known_hosts` and the ssh-agent:
//!
//! ```sh
//! cargo run --ignore-rust-version --example fleet -- hosts.txt 'uptime'
//! ```

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use swiftide_ssh_executor::{Fleet, FleetEvent, SshExecutor};
use swiftide_ssh_testbed::Testbed;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut testbeds = Vec::new();
    let (fleet, command) = match args.as_slice() {
        [inventory, command, ..] => {
            let template = SshExecutor::builder().agent();
            (
                Fleet::from_inventory(inventory.as_ref(), &template)?,
                command.clone(),
            )
        }
        _ => {
            let mut members = Vec::new();
            for _ in 0..4 {
                let testbed = Testbed::start()?;
                members.push(
                    SshExecutor::builder()
                        .host(testbed.host())
                        .port(testbed.port())
                        .user(testbed.user())
                        .private_key_file(testbed.private_key_path())
                        .known_hosts_file(testbed.known_hosts_path())
                        .build_lazy()?,
                );
                testbeds.push(testbed);
            }
            // A host nobody listens on.
            let dead_port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            members.push(
                SshExecutor::builder()
                    .host("127.0.0.1")
                    .port(dead_port)
                    .user("nobody")
                    .password("unused")
                    .build_lazy()?,
            );
            let slow = testbeds[3].id().to_owned();
            (
                Fleet::new(members),
                format!(
                    "echo \"$(uname -n) load: $(cut -d' ' -f1 /proc/loadavg)\"; \
                     sleep 0.$((RANDOM % 9)) 2>/dev/null || sleep 0.3; \
                     [ \"$SWIFTIDE_SSH_TESTBED_ID\" = {slow} ] && sleep 30; true"
                ),
            )
        }
    };
    let fleet = fleet
        .concurrency(8)
        .per_host_timeout(Duration::from_secs(3));

    let bar = ProgressBar::new(fleet.members().len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} hosts {msg}",
    )?);
    bar.enable_steady_tick(Duration::from_millis(100));
    let report = fleet
        .run(&command, |event| match event {
            FleetEvent::Output { host, chunk, .. } => bar.println(format!(
                "{host}: {}",
                String::from_utf8_lossy(chunk.bytes()).trim_end()
            )),
            FleetEvent::Finished { result, .. } => {
                bar.inc(1);
                bar.set_message(format!("last: {} {}", result.host, result.status_text()));
            }
            _ => {}
        })
        .await;
    bar.finish_and_clear();

    println!("{:<24} {:<8} {:>10}  detail", "host", "status", "duration");
    for (result, member) in report.results.iter().zip(fleet.members()) {
        let detail = match &result.outcome {
            Ok(execution) => String::from_utf8_lossy(&execution.stdout())
                .trim()
                .to_owned(),
            Err(error) => error.to_string(),
        };
        let host = format!("{}:{}", result.host, member.port());
        println!(
            "{host:<24} {:<8} {:>10.2?}  {detail}",
            result.status_text(),
            result.duration
        );
    }
    let summary = report.summary();
    println!(
        "\n{} ok, {} failed, {} timed out, {} may have run (connection lost), {} unreachable in {:.2?}",
        summary.succeeded,
        summary.failed,
        summary.timed_out,
        summary.may_have_run,
        summary.unreachable,
        report.duration
    );
    Ok(())
}
