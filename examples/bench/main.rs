//! Benchmarks swiftide-ssh-executor against its peers on real OpenSSH servers (the native
//! testbed), all in one run, and prints a markdown table for BENCHMARKS.md.
//!
//! Run with:
//!
//! ```sh
//! cargo run --ignore-rust-version --release --example bench              # ~6-10 min
//! cargo run --ignore-rust-version --release --example bench -- --quick   # ~2 min
//! cargo run --ignore-rust-version --release --example bench -- --only latency,slowlink
//! ```
//!
//! Scenarios: latency, throughput, streaming, files, stream_files, coldstart, memory, slowlink,
//! fleet, jobs, fleet10k, ssh_config, become, terminals, forwards, deadhosts, inventory.
//! Peers: raw russh (the floor), the OpenSSH client (cold, ControlMaster, scp, sftp, tar pipe)
//! and Python asyncssh (installed into a venv under `target/bench/` on first use); for the fleet
//! scenario also parallel-ssh (Debian `pssh`) and Ansible (`ansible-core`, venv under `target/bench/`).
//! Needs root or a user sshd can run as, `openssh-server`, `openssh-client`, `python3`.
//! Not part of the test suite.

mod audit;
mod r#become;
mod bulk;
mod burst;
mod checkpoints;
mod child;
mod fleet;
mod forwards;
mod guard;
mod inventory;
mod jobs;
mod latency;
mod load;
mod memory;
mod peers;
mod proxy;
mod raw;
mod report;
mod ssh_config;
mod stats;
mod terminals;

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use swiftide_ssh_executor::SshExecutorBuilder;
use swiftide_ssh_testbed::Testbed;

use crate::{
    child::Conn,
    peers::{AsyncSsh, ControlMaster, OpenSsh},
    report::Report,
};

pub const SCENARIOS: &[&str] = &[
    "latency",
    "burst",
    "throughput",
    "streaming",
    "files",
    "stream_files",
    "coldstart",
    "memory",
    "slowlink",
    "fleet",
    "jobs",
    "fleet10k",
    "ssh_config",
    "become",
    "guard",
    "audit",
    "checkpoints",
    "terminals",
    "forwards",
    "deadhosts",
    "inventory",
];

/// Where the bench keeps its peers' installs (venvs, bssh): `target/bench` (or
/// `$CARGO_TARGET_DIR/bench`).
pub fn bench_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("bench")
}

/// Everything a scenario needs.
pub struct Ctx {
    pub quick: bool,
    pub rt: tokio::runtime::Runtime,
    pub tb: Testbed,
    pub conn: Conn,
    pub ssh: OpenSsh,
    pub cm: Option<ControlMaster>,
    pub asyncssh: Result<AsyncSsh, String>,
    /// The local side of file transfers.
    pub local: tempfile::TempDir,
    /// Short paths for ControlMaster sockets (sun_path is 108 bytes).
    pub sockets: tempfile::TempDir,
}

impl Ctx {
    pub fn size(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }

    pub fn builder(&self) -> SshExecutorBuilder {
        self.conn.builder()
    }

    pub fn conn_for(tb: &Testbed) -> Conn {
        Conn {
            host: tb.host(),
            port: tb.port(),
            user: tb.user().to_owned(),
            key: tb.private_key_path().to_path_buf(),
            known_hosts: tb.known_hosts_path().to_path_buf(),
            host_key: tb.host_public_key().to_owned(),
        }
    }

    pub fn ssh_for(conn: &Conn) -> OpenSsh {
        OpenSsh {
            host: conn.host.clone(),
            port: conn.port,
            user: conn.user.clone(),
            key: conn.key.clone(),
            known_hosts: conn.known_hosts.clone(),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let kind = args.get(1).cloned().unwrap_or_default();
        let rest = &args[2.min(args.len())..];
        let result = if kind == "fleet-ours" {
            fleet::child_main(rest)
        } else {
            child::main(&kind, rest)
        };
        if let Err(e) = result {
            eprintln!("child {kind}: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = run(&args) {
        eprintln!("bench failed: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let only: Vec<String> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|| SCENARIOS.iter().map(|s| s.to_string()).collect());
    for name in &only {
        anyhow::ensure!(
            SCENARIOS.contains(&name.as_str()),
            "unknown scenario {name}; known: {SCENARIOS:?}"
        );
    }
    let started = Instant::now();
    let machine = machine_info();
    println!(
        "# swiftide-ssh-executor benchmark{}\n",
        if quick { " (--quick)" } else { "" }
    );
    println!("{machine}");
    if cfg!(debug_assertions) {
        println!("WARNING: debug build; run with --release for meaningful numbers\n");
    }

    // Before the testbed starts, so that its sshd is accounted too.
    let cpu_scope = stats::enter_cpu_cgroup();
    println!("{cpu_scope}");
    let tb = Testbed::builder().max_startups("64:30:256").start()?;
    let conn = Ctx::conn_for(&tb);
    let ssh = Ctx::ssh_for(&conn);
    println!(
        "testbed: sshd on {}:{} as {}",
        conn.host, conn.port, conn.user
    );

    let asyncssh = if only
        .iter()
        .any(|s| ["latency", "throughput", "coldstart", "fleet", "forwards"].contains(&s.as_str()))
    {
        println!("peer: Python asyncssh");
        AsyncSsh::setup(&bench_dir())
    } else {
        Err("not needed for the selected scenarios".to_owned())
    };
    match &asyncssh {
        Ok(a) => println!("  asyncssh {} ready", a.version),
        Err(e) => println!("  asyncssh peer SKIPPED: {e}"),
    }
    let sockets = tempfile::Builder::new().prefix("swb").tempdir_in("/tmp")?;
    let cm = match ControlMaster::start(&ssh, sockets.path().join("cm")) {
        Ok(cm) => Some(cm),
        Err(e) => {
            println!("  ControlMaster peer SKIPPED: {e:#}");
            None
        }
    };
    let mut ctx = Ctx {
        quick,
        rt: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        tb,
        conn,
        ssh,
        cm,
        asyncssh,
        local: tempfile::Builder::new().prefix("swb-local").tempdir()?,
        sockets,
    };
    let mut report = Report::default();
    report.note(cpu_scope);
    if let Err(e) = &ctx.asyncssh {
        report.note(format!("asyncssh peer skipped: {e}"));
    }

    for name in &only {
        let t = Instant::now();
        println!("\n## {name}");
        let result = match name.as_str() {
            "latency" => latency::warm(&mut ctx, &mut report),
            "throughput" => load::throughput(&mut ctx, &mut report),
            "streaming" => bulk::streaming(&mut ctx, &mut report),
            "files" => bulk::files(&mut ctx, &mut report),
            "stream_files" => bulk::stream_files(&mut ctx, &mut report),
            "coldstart" => load::cold_start(&mut ctx, &mut report),
            "memory" => memory::idle_connections(&mut ctx, &mut report),
            "slowlink" => latency::slow_link(&mut ctx, &mut report),
            "fleet" => fleet::fleet(&mut ctx, &mut report),
            "jobs" => jobs::jobs(&mut ctx, &mut report),
            "fleet10k" => fleet::fleet10k(&mut ctx, &mut report),
            "ssh_config" => ssh_config::ssh_config(&mut ctx, &mut report),
            "become" => r#become::become_root(&mut ctx, &mut report),
            "guard" => guard::guard(&mut ctx, &mut report),
            "audit" => audit::audit(&mut ctx, &mut report),
            "checkpoints" => checkpoints::checkpoints(&mut ctx, &mut report),
            "terminals" => terminals::terminals(&mut ctx, &mut report),
            "forwards" => forwards::forwards(&mut ctx, &mut report),
            "deadhosts" => fleet::dead_hosts(&mut ctx, &mut report),
            "inventory" => inventory::inventory(&mut ctx, &mut report),
            "burst" => burst::burst_starts(&mut ctx, &mut report),
            _ => unreachable!(),
        };
        if let Err(e) = result {
            println!("  scenario {name} FAILED: {e:#}");
            report.row(name.clone(), "n/a", "n/a", "n/a", "", None);
            report.note(format!("{name}: failed: {e:#}"));
        }
        println!("  ({name} took {:.0} s)", t.elapsed().as_secs_f64());
    }

    report.note(format!(
        "load average before / after the run: {} / {}",
        machine_load_at_start(&machine),
        loadavg()
    ));
    println!(
        "\n# Summary (total {:.0} s)\n",
        started.elapsed().as_secs_f64()
    );
    println!("{machine}");
    println!("{}", report.markdown());
    drop(ctx);
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine_load_at_start(machine: &str) -> String {
    machine
        .lines()
        .find_map(|l| l.strip_prefix("- load average at start: "))
        .unwrap_or("?")
        .to_owned()
}

fn machine_info() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let aes = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("flags") && l.contains(" aes "))
        })
        .unwrap_or(false);
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    let ssh = Command::new("ssh")
        .arg("-V")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    format!(
        "- machine: {nproc} CPUs ({cpu}{}), {mem} RAM, Linux {kernel}\n- OpenSSH: {ssh} (client and sshd)\n- load average at start: {}\n",
        if aes { ", AES-NI" } else { "" },
        loadavg()
    )
}

/// Runs `f` `n` times and returns the wall-clock durations.
pub fn time_n(
    n: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        out.push(t.elapsed());
    }
    Ok(out)
}
