//! `swiftide-ssh`: commands, file copies and jobs on many hosts over SSH, the way clush and
//! pdsh run them. This crate is the command line only: it parses the flags (clap), chooses
//! the hosts, and prints what `swiftide_ssh_executor::Fleet` reports (node sets, Ansible
//! inventories, rolling batches with thresholds, retries, folded output, JSON records, the
//! exit-code policy all live in the library's `fleet` module).
//!
//! ```sh
//! cargo install --path cli        # on Rust 1.95/1.96: add --ignore-rust-version
//! swiftide-ssh run -w 'web[01-20]!web07' -b uname -r
//! swiftide-ssh push -i hosts.ini -g 'web:&prod' --batch 1,10%,50% ./app.conf /etc/app/
//! swiftide-ssh run -w 'db[1-3]' --become-user postgres -K -- psql -c 'select 1'
//! swiftide-ssh forward -w 'node[1-3]' -L 9100:localhost:9100   # 9100, 9101, 9102
//! ```
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod args;
mod fold;
mod forward;
mod hosts;
mod printer;

use std::{path::Path, process::ExitCode, time::Duration};

use clap::Parser;
use swiftide_ssh_executor::{FleetEvent, ForwardSpec, JobOptions, PushOptions};

use crate::{
    args::{AuditCommand, Cli, Command, FleetArgs, JobCommand, Usage, owner_and_group, seconds},
    fold::fold,
    forward::forward,
    printer::{Printer, Streamed, finish},
};

/// The exit code of a usage error (bad flags, no hosts): the library's policy reserves 2.
const USAGE: u8 = 2;

async fn rollout(args: &FleetArgs, streamed: Streamed, work: Work<'_>) -> Result<u8, Usage> {
    if args.list_hosts()? {
        return Ok(0);
    }
    let (fleet, trail) = args
        .audited_fleet(|builder| match &work {
            Work::JobStart { retention, .. } => builder.job_retention(*retention),
            _ => builder,
        })
        .await?;
    let mut printer = Printer::new(&args.output, streamed, fleet.members().len());
    let on_event = |event: FleetEvent<'_>| printer.event(event);
    let report = match work {
        Work::Run(command) => fleet.run(command, on_event).await,
        Work::Push(source, dest, options) => {
            fleet.push_with(source, dest, &options, on_event).await?
        }
        Work::Pull(source, dest) => fleet.pull(source, dest, on_event).await,
        Work::JobStart {
            command, options, ..
        } => {
            let started = fleet.start_job(command, options, on_event).await;
            eprintln!("swiftide-ssh: job {}", started.id);
            started.report
        }
        Work::JobStatus(id) => fleet.job_states(id, on_event).await.report,
        Work::JobOutput(id, max) => fleet.job_output(id, max, on_event).await,
        Work::JobKill(id, grace) => fleet.kill_job(id, grace, on_event).await.report,
    };
    if let Some(trail) = trail {
        trail.flush().await?;
    }
    finish(printer, &args.output, &report)
}

/// What a rollout does on each host.
enum Work<'a> {
    Run(&'a str),
    Push(&'a Path, &'a Path, PushOptions),
    Pull(&'a Path, &'a Path),
    JobStart {
        command: &'a str,
        options: JobOptions,
        /// `None`: keep the jobs that ended.
        retention: Option<Duration>,
    },
    JobStatus(&'a str),
    JobOutput(&'a str, u64),
    JobKill(&'a str, Duration),
}

async fn dispatch(command: &Command) -> Result<u8, Usage> {
    match command {
        Command::Run { fleet, command } => {
            rollout(fleet, Streamed::Output, Work::Run(&command.join(" "))).await
        }
        Command::Push {
            fleet,
            preserve,
            mode,
            owner,
            source,
            dest,
        } => {
            let mut options = PushOptions::default().local_modes(*preserve);
            if let Some(mode) = mode {
                options = options.mode(*mode);
            }
            if let Some(text) = owner {
                let (user, group) = owner_and_group(text)?;
                if let Some(user) = user {
                    options = options.owner(user);
                }
                if let Some(group) = group {
                    options = options.group(group);
                }
            }
            rollout(fleet, Streamed::AtTheEnd, Work::Push(source, dest, options)).await
        }
        Command::Pull {
            fleet,
            source,
            dest,
        } => rollout(fleet, Streamed::AtTheEnd, Work::Pull(source, dest)).await,
        Command::Job(job) => match job {
            JobCommand::Start {
                fleet,
                id,
                deadline,
                chdir,
                job_retention_days,
                command,
            } => {
                let mut options = JobOptions::new();
                if let Some(id) = id {
                    options = options.id(id.clone());
                }
                if let Some(secs) = deadline {
                    options = options.deadline(Duration::from_secs(*secs));
                }
                if let Some(dir) = chdir {
                    options = options.current_dir(dir.clone());
                }
                let command = command.join(" ");
                let retention = (*job_retention_days > 0)
                    .then(|| Duration::from_secs(job_retention_days.saturating_mul(24 * 3600)));
                let work = Work::JobStart {
                    command: &command,
                    options,
                    retention,
                };
                rollout(fleet, Streamed::AtTheEnd, work).await
            }
            JobCommand::Status { fleet, id } => {
                rollout(fleet, Streamed::AtTheEnd, Work::JobStatus(id)).await
            }
            JobCommand::Output {
                fleet,
                id,
                max_bytes,
            } => rollout(fleet, Streamed::AtTheEnd, Work::JobOutput(id, *max_bytes)).await,
            JobCommand::Kill { fleet, id, grace } => {
                let grace = Duration::from_secs(*grace);
                rollout(fleet, Streamed::AtTheEnd, Work::JobKill(id, grace)).await
            }
        },
        Command::Forward {
            fleet,
            local,
            remote,
            dynamic,
            duration,
        } => {
            let specs = local
                .iter()
                .map(|spec| ForwardSpec::parse_local(spec))
                .chain(remote.iter().map(|spec| ForwardSpec::parse_remote(spec)))
                .chain(dynamic.iter().map(|spec| ForwardSpec::parse_dynamic(spec)))
                .collect::<Result<Vec<_>, _>>()?;
            let duration = duration.map(|secs| seconds("--for", secs)).transpose()?;
            forward(fleet, &specs, duration).await
        }
        Command::Fold {
            files,
            failed_hosts,
            max_exit_code,
        } => fold(files, failed_hosts.as_deref(), *max_exit_code),
        Command::Audit(AuditCommand::Verify { file, head }) => verify_audit(file, head.as_deref()),
    }
}

/// `audit verify FILE`: 0 and the trail's size and head when its chain is whole (and holds
/// `head`, when given), 1 naming where it breaks.
fn verify_audit(file: &Path, head: Option<&str>) -> Result<u8, Usage> {
    let reader = std::fs::File::open(file)
        .map(std::io::BufReader::new)
        .map_err(|error| Usage(format!("cannot read {}: {error}", file.display())))?;
    let verified = match swiftide_ssh_executor::audit::verify_holding(reader, head) {
        Ok(verified) => verified,
        Err(broken) => {
            println!("{}: {broken}", file.display());
            return Ok(1);
        }
    };
    println!(
        "{}: {} records, chain intact, head {}",
        file.display(),
        verified.records,
        verified.hash
    );
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("swiftide-ssh: cannot start the runtime: {error}");
            return ExitCode::from(USAGE);
        }
    };
    let result = runtime.block_on(dispatch(&cli.command));
    // Blocking work in flight (a known_hosts append) gets up to 2 s. Async tasks still in
    // flight are dropped at their next await, which is why the fleet waits for a job start's
    // pruning itself; a command still running when the process exits (a background kill of
    // one cut short included) is killed by its supervisor when the connection closes.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Usage(message)) => {
            eprintln!("swiftide-ssh: {message}");
            ExitCode::from(USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{args::Shard, hosts::split_destination};

    #[test]
    fn shards_and_destinations_parse() {
        let shard: Shard = "1/4".parse().unwrap_or(Shard { index: 9, count: 9 });
        assert_eq!((shard.index, shard.count), (1, 4));
        assert!("4/4".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
        assert_eq!(split_destination("web1"), (None, "web1", None));
        assert_eq!(
            split_destination("ci@web-2:2222"),
            (Some("ci"), "web-2", Some(2222))
        );
        assert_eq!(split_destination("[::1]:2200"), (None, "::1", Some(2200)));
        assert_eq!(split_destination("fe80::1"), (None, "fe80::1", None));
    }

    #[test]
    fn push_owners_parse_as_chown_writes_them() {
        let parse = |text| owner_and_group(text).ok();
        assert_eq!(parse("app"), Some((Some("app"), None)));
        assert_eq!(parse("app:adm"), Some((Some("app"), Some("adm"))));
        assert_eq!(parse(":adm"), Some((None, Some("adm"))));
        assert_eq!(parse("app:"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse(":"), None);
        let cli = Cli::try_parse_from([
            "swiftide-ssh",
            "push",
            "-w",
            "web1",
            "--mode",
            "0640",
            "--owner",
            "app:adm",
            "a",
            "/b",
        ]);
        let Ok(Cli {
            command: Command::Push { mode, owner, .. },
        }) = cli
        else {
            unreachable!("{cli:?}");
        };
        assert_eq!((mode, owner.as_deref()), (Some(0o640), Some("app:adm")));
        for bad in ["0999", "17777", "rw-r-----", ""] {
            let parsed =
                Cli::try_parse_from(["swiftide-ssh", "push", "-w", "w", "--mode", bad, "a", "b"]);
            assert!(parsed.is_err(), "{bad}");
        }
        let both = Cli::try_parse_from([
            "swiftide-ssh",
            "push",
            "-w",
            "w",
            "--mode",
            "600",
            "--preserve",
            "a",
            "b",
        ]);
        assert!(both.is_err());
    }

    #[test]
    fn flags_parse_like_clush_and_pdsh() {
        let cli = Cli::try_parse_from([
            "swiftide-ssh",
            "run",
            "-w",
            "web[1-3]",
            "-x",
            "web2",
            "-f",
            "8",
            "-l",
            "ops",
            "-p",
            "2222",
            "-t",
            "3",
            "-u",
            "30",
            "--batch",
            "1,50%",
            "--max-fail-percentage",
            "10",
            "-b",
            "ls",
            "-la",
        ]);
        let Ok(Cli {
            command: Command::Run { fleet, command },
        }) = cli
        else {
            unreachable!("{cli:?}");
        };
        assert_eq!(command, ["ls", "-la"]);
        assert_eq!(fleet.hosts.nodes, ["web[1-3]"]);
        assert_eq!(fleet.rollout.fanout, 8);
        assert!(fleet.output.fold);
        assert_eq!(
            fleet.names(None).map_err(|u| u.0).ok(),
            Some(vec!["web1".to_owned(), "web3".to_owned()])
        );
    }
}
