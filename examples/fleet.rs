//! Runs one command on every host of a fleet: live lines prefixed with their host (as clush
//! and pdsh print them) under a progress bar, then the output folded by node set (as
//! `clush -b`), the counts, and the exit code of the documented policy.
//!
//! Run this example with:
//!
//! ```sh
//! cargo run --ignore-rust-version --example fleet
//! ```
//!
//! With no arguments it starts four local sshd testbed hosts (`node[1-4]`, one of which is
//! made slow) and adds a dead host (`node5`), so every outcome shows. With an inventory file
//! it runs on those hosts instead, using `~/.ssh/known_hosts` and the ssh-agent: an Ansible
//! inventory (`.ini`, or `.yml` with the `yaml` feature) with a host pattern, or a plain
//! list (`[user@]host[:port]` per line):
//!
//! ```sh
//! cargo run --ignore-rust-version --example fleet -- hosts.txt 'uptime'
//! cargo run --ignore-rust-version --example fleet -- inventory.ini 'web:!canary' 'uptime'
//! ```

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use swiftide_ssh_executor::{Fleet, FleetEvent, Inventory, SshExecutor, fleet::LiveLines};
use swiftide_ssh_testbed::Testbed;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut testbeds = Vec::new();
    let (fleet, command) = match args.as_slice() {
        [inventory, pattern, command, ..] => {
            let template = SshExecutor::builder().agent();
            let inventory = Inventory::from_path(inventory.as_ref())?;
            (
                Fleet::from_ansible(&inventory, pattern, &template)?,
                command.clone(),
            )
        }
        [inventory, command] => {
            let template = SshExecutor::builder().agent();
            (
                Fleet::from_inventory(inventory.as_ref(), &template)?,
                command.clone(),
            )
        }
        _ => {
            let mut members = Vec::new();
            for n in 1..=4 {
                let testbed = Testbed::start()?;
                members.push((
                    format!("node{n}"),
                    SshExecutor::builder()
                        .host(testbed.host())
                        .port(testbed.port())
                        .user(testbed.user())
                        .private_key_file(testbed.private_key_path())
                        .known_hosts_file(testbed.known_hosts_path())
                        .build_lazy()?,
                ));
                testbeds.push(testbed);
            }
            // A host nobody listens on.
            let dead_port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            members.push((
                "node5".to_owned(),
                SshExecutor::builder()
                    .host("127.0.0.1")
                    .port(dead_port)
                    .user("nobody")
                    .password("unused")
                    .connect_timeout(Duration::from_millis(500))
                    .build_lazy()?,
            ));
            let slow = testbeds[3].id().to_owned();
            (
                Fleet::named(members),
                format!(
                    "uname -s; sleep 0.$((RANDOM % 9)) 2>/dev/null || sleep 0.3; \
                     [ \"$SWIFTIDE_SSH_TESTBED_ID\" = {slow} ] && sleep 30; true"
                ),
            )
        }
    };
    let fleet = fleet
        .concurrency(8)
        .per_host_timeout(Duration::from_secs(3))
        .retry_unreachable(1, Duration::from_millis(200));

    let bar = ProgressBar::new(fleet.members().len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} hosts {msg}",
    )?);
    bar.enable_steady_tick(Duration::from_millis(100));
    // Without a terminal the bar is hidden, and so would its lines be.
    let say = |line: String| {
        if bar.is_hidden() {
            println!("{line}");
        } else {
            bar.println(line);
        }
    };
    // Chunks split lines anywhere: LiveLines hands out whole lines per host and stream.
    let mut live = LiveLines::new();
    let report = fleet
        .run(&command, |event| match event {
            FleetEvent::Output {
                host,
                member,
                chunk,
                ..
            } => {
                for line in live.push(member, chunk) {
                    say(format!("{host}: {}", line.text));
                }
            }
            FleetEvent::Retrying {
                host, error, delay, ..
            } => say(format!(
                "{host}: unreachable ({error}), retrying in {delay:?}"
            )),
            FleetEvent::Finished { result, member, .. } => {
                for line in live.finish(member) {
                    say(format!("{}: {}", result.name, line.text));
                }
                bar.inc(1);
                bar.set_message(format!("last: {} {}", result.name, result.status()));
            }
            _ => {}
        })
        .await;
    bar.finish_and_clear();

    println!();
    for group in report.fold() {
        print!("{group}");
    }
    let summary = report.summary();
    println!(
        "\n{} ok, {} failed, {} timed out, {} may have run (connection lost), {} unreachable, \
         {} host key refused, {} skipped in {:.2?}; exit code {}",
        summary.succeeded,
        summary.failed,
        summary.timed_out,
        summary.may_have_run,
        summary.unreachable,
        summary.host_key_refused,
        summary.skipped,
        report.duration,
        report.exit_code()
    );
    Ok(())
}
