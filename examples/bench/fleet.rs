//! Scenario 9: one command (`uname -a`) on a fleet of hosts, cold, against the usual fleet
//! tools: asyncssh with `asyncio.gather`, parallel-ssh (`pssh`) and Ansible ad-hoc.
//!
//! A "host" is a distinct `(127.0.0.1, port)` endpoint. OpenSSH's sshd listens on at most 16
//! sockets, so the hosts are served by several sshd testbeds with 16 `Port`s each (one
//! host key per sshd; `known_hosts` has a line per `[127.0.0.1]:port`).
//!
//! Every client runs in a process of its own, so that its CPU time and peak RSS are the
//! run's alone: ours is this binary re-executed (`--child fleet-ours`), the peers run under
//! `fleet_peers.py rusage`, which reports `RUSAGE_CHILDREN` of their whole process tree.
//! A run counts only if every host returned the right output; otherwise it is marked
//! failed and no figure is reported for it.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use swiftide_ssh_executor::{Fleet, FleetEvent, SshExecutor};
use swiftide_ssh_testbed::Testbed;

use crate::{
    Ctx,
    peers::parse_kv,
    proxy, raw,
    report::Report,
    stats::{MIB, Samples, machine_busy_secs, self_cpu_secs, self_hwm},
};

/// sshd's limit on listening sockets per process (`MAX_LISTEN_SOCKS`).
const PORTS_PER_SSHD: usize = 16;
/// The command every host runs, and what its output must start with.
const COMMAND: &str = "uname -a";
const EXPECT: &str = "Linux ";
/// Hosts in flight at once, for every client (`-p 100`, `-f 100`, `concurrency(100)`).
const CONCURRENCY: usize = 100;
/// Per-host deadline: far above any healthy run, so a stuck host fails the run instead of
/// hanging it.
const PER_HOST: Duration = Duration::from_secs(120);
const HELPER: &str = include_str!("fleet_peers.py");

/// Ports with their host keys, written out as the files every client reads: a hosts file
/// (`127.0.0.1:PORT` per line) and a known_hosts file (`[127.0.0.1]:PORT key` per line).
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub ports: Vec<u16>,
    pub keys: Vec<String>,
    pub hosts_file: PathBuf,
    pub known_hosts: PathBuf,
}

impl Endpoints {
    fn write(dir: &Path, name: &str, ports: Vec<u16>, keys: Vec<String>) -> anyhow::Result<Self> {
        let hosts_file = dir.join(format!("{name}.hosts"));
        let known_hosts = dir.join(format!("{name}.known_hosts"));
        let mut hosts = String::new();
        let mut known = String::new();
        for (port, key) in ports.iter().zip(&keys) {
            hosts.push_str(&format!("127.0.0.1:{port}\n"));
            known.push_str(&format!("[127.0.0.1]:{port} {key}\n"));
        }
        std::fs::write(&hosts_file, hosts)?;
        std::fs::write(&known_hosts, known)?;
        Ok(Self {
            ports,
            keys,
            hosts_file,
            known_hosts,
        })
    }

    /// The first `n` endpoints, written under `name`.
    fn first(&self, dir: &Path, name: &str, n: usize) -> anyhow::Result<Self> {
        let n = n.min(self.ports.len());
        Self::write(dir, name, self.ports[..n].to_vec(), self.keys[..n].to_vec())
    }

    fn len(&self) -> usize {
        self.ports.len()
    }
}

/// `n` hosts served by `ceil(n / 16)` sshd testbeds; dropping it stops them all (each
/// testbed kills its sshd and everything below it).
pub struct Hosts {
    testbeds: Vec<Testbed>,
    pub endpoints: Endpoints,
    pub user: String,
    pub key: PathBuf,
}

impl Hosts {
    fn start(n: usize, dir: &Path, name: &str) -> anyhow::Result<Self> {
        let mut testbeds = Vec::new();
        let (mut ports, mut keys) = (Vec::new(), Vec::new());
        while ports.len() < n {
            let (testbed, its_ports) = start_sshd((n - ports.len()).min(PORTS_PER_SSHD))?;
            keys.extend(
                its_ports
                    .iter()
                    .map(|_| testbed.host_public_key().to_owned()),
            );
            ports.extend(its_ports);
            testbeds.push(testbed);
        }
        let first = testbeds.first().context("no testbed started")?;
        let (user, key) = (first.user().to_owned(), first.private_key_path().to_owned());
        Ok(Self {
            endpoints: Endpoints::write(dir, name, ports, keys)?,
            testbeds,
            user,
            key,
        })
    }

    fn sshd_count(&self) -> usize {
        self.testbeds.len()
    }
}

/// Ports that are free right now (all bound at once, so they are distinct, then released).
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// One sshd listening on `n` ports (its own ephemeral port plus `n - 1` `Port` lines),
/// with `MaxStartups` allowing 100 concurrent handshakes. sshd only logs, and goes on,
/// when one of several ports cannot be bound, so every port is checked in its log.
fn start_sshd(n: usize) -> anyhow::Result<(Testbed, Vec<u16>)> {
    let mut last_error = None;
    for _ in 0..3 {
        let extra = free_ports(n.saturating_sub(1))?;
        let mut builder = Testbed::builder().max_startups("100:30:200");
        for port in &extra {
            builder = builder.sshd_config_line(format!("Port {port}"));
        }
        let testbed = match builder.start() {
            Ok(testbed) => testbed,
            Err(e) => {
                last_error = Some(anyhow::Error::from(e));
                continue;
            }
        };
        let mut ports = vec![testbed.port()];
        ports.extend(extra);
        let deadline = Instant::now() + Duration::from_secs(3);
        let missing = loop {
            let log = testbed.sshd_log();
            let missing: Vec<u16> = ports
                .iter()
                .copied()
                .filter(|p| !log.contains(&format!("Server listening on 127.0.0.1 port {p}.")))
                .collect();
            if missing.is_empty() || Instant::now() > deadline {
                break missing;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if missing.is_empty() {
            return Ok((testbed, ports));
        }
        last_error = Some(anyhow::anyhow!("sshd did not bind ports {missing:?}"));
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("sshd did not start")))
}

/// What one client run did. `None` figures were not measurable for that client.
#[derive(Debug, Clone, Default)]
struct Run {
    client: String,
    hosts: usize,
    /// Hosts that returned exit 0 and `Linux …`.
    ok: usize,
    /// Spawn to exit of the client process.
    process_wall: Duration,
    /// The run itself, measured inside the client (no interpreter start-up or imports).
    run_wall: Option<Duration>,
    /// user + system of the client's whole process tree.
    process_cpu: f64,
    /// CPU spent inside the run, measured inside the client.
    run_cpu: Option<f64>,
    /// Peak RSS of the largest single process (VmHWM for ours, `ru_maxrss` for peers).
    max_rss: u64,
    /// Peak of the summed RSS over the client's process tree, sampled every 50 ms (shared
    /// pages count once per process).
    tree_rss: u64,
    /// Peak open file descriptors (ours only).
    fds: Option<usize>,
    /// Busy CPU seconds of the whole machine during the run, minus the client's: sshd, the
    /// remote shells, and whatever else runs on the machine meanwhile (when measured).
    server_cpu: Option<f64>,
    /// Per host that printed: time from the host's start to its first output byte (for
    /// parallel-ssh not attributed to hosts; see `run_pssh`).
    first_byte: Vec<Duration>,
    failure: Option<String>,
}

impl Run {
    /// The figures of a peer's whole process tree, from its run under the rusage wrapper.
    fn record_process(&mut self, w: &Wrapped) {
        self.process_wall = w.wall;
        self.process_cpu = w.cpu();
        self.max_rss = w.max_rss();
        self.tree_rss = w.tree_rss;
    }

    fn passed(&self) -> bool {
        self.failure.is_none() && self.ok == self.hosts && self.hosts > 0
    }

    /// The wall time compared across clients: the in-run figure where the client has one.
    fn wall(&self) -> Duration {
        self.run_wall.unwrap_or(self.process_wall)
    }

    fn cpu(&self) -> f64 {
        self.run_cpu.unwrap_or(self.process_cpu)
    }

    fn cpu_ms_per_host(&self) -> f64 {
        self.cpu() * 1e3 / self.hosts.max(1) as f64
    }

    fn describe(&self) -> String {
        if let Some(f) = &self.failure {
            return format!("{}: FAILED ({f})", self.client);
        }
        if !self.passed() {
            return format!(
                "{}: FAILED ({} of {} hosts correct)",
                self.client, self.ok, self.hosts
            );
        }
        let mut s = format!(
            "{}: {:.2} s (process {:.2} s), client CPU {:.2} s = {:.2} ms/host (process tree {:.2} s), peak RSS {:.1} MiB (tree sum {:.1} MiB)",
            self.client,
            self.wall().as_secs_f64(),
            self.process_wall.as_secs_f64(),
            self.cpu(),
            self.cpu_ms_per_host(),
            self.process_cpu,
            self.max_rss as f64 / MIB,
            self.tree_rss as f64 / MIB,
        );
        if let Some(fds) = self.fds {
            s.push_str(&format!(", peak fds {fds}"));
        }
        if let Some(cpu) = self.server_cpu {
            s.push_str(&format!(
                "; rest of the machine (sshd, shells, other jobs) {:.2} ms/host",
                cpu * 1e3 / self.hosts.max(1) as f64
            ));
        }
        s
    }

    fn short(&self) -> String {
        if !self.passed() {
            return format!("{} failed", self.client);
        }
        format!(
            "{} {:.2} s, CPU {:.2} ms/host, RSS {:.1} MiB",
            self.client,
            self.wall().as_secs_f64(),
            self.cpu_ms_per_host(),
            self.max_rss.max(self.tree_rss) as f64 / MIB
        )
    }

    /// The hosts' times to their first output byte; `None` without any.
    fn first_bytes(&self) -> Option<Samples> {
        (!self.first_byte.is_empty()).then(|| Samples::new(self.first_byte.clone()))
    }
}

/// The RSS (bytes) summed over `root`'s descendants (not `root` itself), walking
/// `/proc/<pid>/task/<tid>/children`.
fn tree_rss(root: u32) -> u64 {
    let mut total = 0;
    let mut stack = children(root);
    while let Some(pid) = stack.pop() {
        total += crate::stats::proc_status_bytes(&pid.to_string(), "VmRSS").unwrap_or(0);
        stack.extend(children(pid));
    }
    total
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Runs `cmd` under the rusage wrapper, sampling its tree's RSS and timestamping each
/// stdout line (relative to the spawn).
struct Wrapped {
    status_ok: bool,
    wall: Duration,
    lines: Vec<(Duration, String)>,
    stderr: String,
    usage: HashMap<String, String>,
    tree_rss: u64,
}

fn run_wrapped(
    helper: &Path,
    program: &str,
    args: &[String],
    env: &[(&str, String)],
    scratch: &Path,
) -> anyhow::Result<Wrapped> {
    let usage_file = scratch.join("rusage.out");
    let stderr_file = scratch.join("peer.stderr");
    let _ = std::fs::remove_file(&usage_file);
    let mut cmd = Command::new("python3");
    cmd.arg(helper)
        .arg("rusage")
        .arg(&usage_file)
        .arg(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_file)?);
    let started = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
    let stdout = child.stdout.take().context("stdout")?;
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            lines.push((started.elapsed(), line));
        }
        lines
    });
    let pid = child.id();
    let mut peak = 0;
    let status = loop {
        peak = peak.max(tree_rss(pid));
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = started.elapsed();
    let lines = reader.join().unwrap_or_default();
    let usage = std::fs::read_to_string(&usage_file)
        .map(|s| parse_kv(s.trim()))
        .unwrap_or_default();
    Ok(Wrapped {
        status_ok: status.success(),
        wall,
        lines,
        stderr: std::fs::read_to_string(&stderr_file).unwrap_or_default(),
        usage,
        tree_rss: peak,
    })
}

impl Wrapped {
    fn cpu(&self) -> f64 {
        let get = |k: &str| {
            self.usage
                .get(k)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        get("utime") + get("stime")
    }

    fn max_rss(&self) -> u64 {
        self.usage
            .get("maxrss_kb")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    }

    fn stderr_tail(&self) -> String {
        self.stderr
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .join(" / ")
    }

    /// Prints what `client` printed when fewer than all of `run`'s hosts came back: its first
    /// `sample` stdout lines and the tail of its stderr.
    fn report_shortfall(&self, client: &str, run: &Run, sample: usize) {
        if run.ok == run.hosts {
            return;
        }
        let lines: Vec<&str> = self
            .lines
            .iter()
            .map(|(_, l)| l.as_str())
            .take(sample)
            .collect();
        println!(
            "    {client}: {} of {} correct; stdout {lines:?}; stderr: {}",
            run.ok,
            run.hosts,
            self.stderr_tail()
        );
    }
}

/// The installed peers.
struct Peers {
    helper: PathBuf,
    asyncssh_python: Option<PathBuf>,
    pssh: Option<String>,
    ansible: Option<PathBuf>,
    /// ClusterShell's `clush` (PyPI, in the Ansible venv).
    clush: Option<PathBuf>,
    /// bssh (crates.io, `cargo install` into `target/bench/bssh`).
    bssh: Option<PathBuf>,
    /// `asyncssh 2.24.1, parallel-ssh 2.3.4, …`
    versions: String,
    notes: Vec<String>,
}

impl Peers {
    fn setup(ctx: &Ctx, bench_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(bench_dir)?;
        let helper = bench_dir.join("fleet_peers.py");
        std::fs::write(&helper, HELPER)?;
        let mut notes = Vec::new();
        let mut versions = Vec::new();
        let asyncssh_python = match &ctx.asyncssh {
            Ok(a) => {
                versions.push(format!("asyncssh {}", a.version));
                Some(bench_dir.join("venv/bin/python"))
            }
            Err(e) => {
                notes.push(format!("asyncssh peer skipped: {e}"));
                None
            }
        };
        // Debian's pssh installs the program as `parallel-ssh`.
        let pssh = ["parallel-ssh", "pssh"].into_iter().find_map(|name| {
            let out = Command::new(name).arg("--version").output().ok()?;
            out.status.success().then(|| {
                let v = String::from_utf8_lossy(&out.stdout).trim().to_owned()
                    + String::from_utf8_lossy(&out.stderr).trim();
                versions.push(format!("parallel-ssh {v}"));
                name.to_owned()
            })
        });
        if pssh.is_none() {
            notes.push(
                "parallel-ssh peer skipped: not installed (Debian: apt-get install -y pssh)".into(),
            );
        }
        let ansible = installed_peer(
            setup_ansible(&bench_dir.join("ansible-venv")),
            "Ansible",
            &mut versions,
            &mut notes,
        );
        let clush = installed_peer(
            setup_clush(&bench_dir.join("ansible-venv")),
            "clush",
            &mut versions,
            &mut notes,
        );
        let bssh = installed_peer(
            setup_bssh(&bench_dir.join("bssh")),
            "bssh",
            &mut versions,
            &mut notes,
        );
        let versions = versions.join(", ");
        println!("  peers: {versions}");
        for n in &notes {
            println!("  {n}");
        }
        Ok(Self {
            helper,
            asyncssh_python,
            pssh,
            ansible,
            clush,
            bssh,
            versions,
            notes,
        })
    }
}

/// `ansible-core` in its own venv under `target/bench/` (installed on first use).
pub(crate) fn setup_ansible(venv: &Path) -> Result<(PathBuf, String), String> {
    let python = crate::peers::ensure_venv(venv)?;
    let ansible = venv.join("bin/ansible");
    if !ansible.exists() {
        println!("  pip install ansible-core (into {})", venv.display());
        crate::peers::pip_install(&python, "ansible-core")?;
    }
    let out = Command::new(&ansible)
        .arg("--version")
        .output()
        .map_err(|e| format!("ansible not runnable: {e}"))?;
    if !out.status.success() {
        return Err("ansible --version failed".into());
    }
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("ansible")
        .replace("ansible [core ", "ansible-core ")
        .trim_end_matches(']')
        .to_owned();
    Ok((ansible, version))
}

/// ClusterShell (`clush`) from PyPI, in the Ansible venv (installed on first use).
fn setup_clush(venv: &Path) -> Result<(PathBuf, String), String> {
    let python = crate::peers::ensure_venv(venv)?;
    let clush = venv.join("bin/clush");
    if !clush.exists() {
        println!("  pip install ClusterShell (into {})", venv.display());
        crate::peers::pip_install(&python, "ClusterShell")?;
    }
    let out = Command::new(&clush)
        .arg("--version")
        .output()
        .map_err(|e| format!("clush not runnable: {e}"))?;
    if !out.status.success() {
        return Err("clush --version failed".into());
    }
    // `clush 1.9.3`
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok((
        clush,
        format!("ClusterShell {}", version.trim_start_matches("clush ")),
    ))
}

/// bssh, installed beforehand with `cargo install --ignore-rust-version --locked bssh@2.2.3 --root
/// target/bench/bssh` (it compiles for minutes, so the harness does not start it).
fn setup_bssh(root: &Path) -> Result<(PathBuf, String), String> {
    let bssh = root.join("bin/bssh");
    if !bssh.exists() {
        return Err(format!(
            "not installed (cargo install --ignore-rust-version --locked bssh@2.2.3 --root {})",
            root.display()
        ));
    }
    let out = Command::new(&bssh)
        .arg("--version")
        .output()
        .map_err(|e| format!("bssh not runnable: {e}"))?;
    if !out.status.success() {
        return Err("bssh --version failed".into());
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok((bssh, version))
}

/// An OpenSSH client configuration naming each endpoint `h<i>` (`HostName 127.0.0.1`,
/// its `Port`), for peers that take host names only (clush, bssh).
fn write_alias_config(t: &Target<'_>, scratch: &Path) -> anyhow::Result<PathBuf> {
    let path = scratch.join("aliases.ssh_config");
    let mut text = String::new();
    for (i, port) in t.endpoints.ports.iter().enumerate() {
        text.push_str(&format!("Host h{i}\n  HostName 127.0.0.1\n  Port {port}\n"));
    }
    std::fs::write(&path, text)?;
    Ok(path)
}

/// The hosts `h<i>` whose output line (`h<i>: Linux …`, as clush and bssh print them)
/// arrived, counted once each.
fn hosts_with_output(lines: &[(Duration, String)], prefix_sep: &str) -> usize {
    let mut seen = std::collections::HashSet::new();
    for (_, line) in lines {
        let line = line.trim_start_matches(['[', ' ']);
        if let Some((host, text)) = line.split_once(prefix_sep)
            && host.starts_with('h')
            && host[1..].chars().all(|c| c.is_ascii_digit())
            && text.trim_start().starts_with(EXPECT)
        {
            seen.insert(host.to_owned());
        }
    }
    seen.len()
}

/// clush: `clush -w h[0-99] -f 100 -l USER -o '<ssh options>' 'uname -a'`, each host an
/// alias of the generated ssh config; output lines `h7: Linux …`.
fn run_clush(clush: &Path, helper: &Path, t: &Target<'_>, scratch: &Path) -> Run {
    let mut run = Run {
        client: "clush".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let result = (|| -> anyhow::Result<()> {
        let config = write_alias_config(t, scratch)?;
        let ssh_options = openssh_options(t.key, &t.endpoints.known_hosts)
            .into_iter()
            .map(|o| {
                if o.starts_with("-F ") {
                    format!("-F {}", config.display())
                } else {
                    o
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        let args: Vec<String> = vec![
            "-w".into(),
            format!("h[0-{}]", t.endpoints.len() - 1),
            "-f".into(),
            t.concurrency.to_string(),
            "-l".into(),
            t.user.to_owned(),
            "-t".into(),
            "60".into(),
            "-u".into(),
            PER_HOST.as_secs().to_string(),
            "-o".into(),
            ssh_options,
            COMMAND.into(),
        ];
        let w = run_wrapped(helper, &clush.display().to_string(), &args, &[], scratch)?;
        run.record_process(&w);
        run.ok = hosts_with_output(&w.lines, ": ");
        w.report_shortfall("clush", &run, 3);
        Ok(())
    })();
    if let Err(e) = result {
        run.failure = Some(format!("{e:#}"));
    }
    run
}

/// bssh: `bssh -H root@127.0.0.1:P1,… -i KEY --parallel 100 --strict-host-key-checking yes
/// 'uname -a'` (its own SSH stack, russh), with `HOME` a scratch directory whose
/// `.ssh/known_hosts` is the fleet's: bssh 2.2.3 checks strictly only against
/// `~/.ssh/known_hosts` (with `-F`'s `UserKnownHostsFile` it warned about the "unusual
/// location" and then accepted a wrong key, tried by hand). Its per-host block is a
/// `✓ user@127.0.0.1:PORT` line, then the output indented; `--stream` prefixes lines with the
/// address alone, which does not tell ports apart.
fn run_bssh(bssh: &Path, helper: &Path, t: &Target<'_>, scratch: &Path) -> Run {
    let mut run = Run {
        client: "bssh".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let result = (|| -> anyhow::Result<()> {
        let home = scratch.join("bssh-home");
        std::fs::create_dir_all(home.join(".ssh"))?;
        std::fs::copy(&t.endpoints.known_hosts, home.join(".ssh/known_hosts"))?;
        let hosts = t
            .endpoints
            .ports
            .iter()
            .map(|p| format!("{}@127.0.0.1:{p}", t.user))
            .collect::<Vec<_>>()
            .join(",");
        let args: Vec<String> = vec![
            "-H".into(),
            hosts,
            "-i".into(),
            t.key.display().to_string(),
            "--parallel".into(),
            t.concurrency.to_string(),
            "--strict-host-key-checking".into(),
            "yes".into(),
            "-F".into(),
            "/dev/null".into(),
            COMMAND.into(),
        ];
        let env = [
            ("HOME", home.display().to_string()),
            ("NO_COLOR", "1".to_owned()),
        ];
        let w = run_wrapped(helper, &bssh.display().to_string(), &args, &env, scratch)?;
        run.record_process(&w);
        let ports: std::collections::HashSet<u16> = t.endpoints.ports.iter().copied().collect();
        let mut seen = std::collections::HashSet::new();
        let mut current: Option<u16> = None;
        for (_, line) in &w.lines {
            let line = strip_ansi(line);
            if let Some((_, address)) = line.split_once("@127.0.0.1:") {
                let port = address
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|p| p.parse::<u16>().ok());
                current = port.filter(|p| line.contains('✓') && ports.contains(p));
            } else if line.trim_start().starts_with(EXPECT)
                && let Some(port) = current
            {
                seen.insert(port);
            }
        }
        run.ok = seen.len();
        w.report_shortfall("bssh", &run, 6);
        Ok(())
    })();
    if let Err(e) = result {
        run.failure = Some(format!("{e:#}"));
    }
    run
}

/// `text` without ANSI escape sequences (`ESC [ … letter`), which bssh prints even with
/// `NO_COLOR` around its markers.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The OpenSSH client options every OpenSSH-based peer gets: the testbed key, strict host key
/// checking against the fleet's known_hosts, and curve25519 key exchange: what russh and
/// asyncssh negotiate with OpenSSH 9.2, and cheaper for sshd than OpenSSH's default
/// sntrup761x25519 (so the comparison does not charge the peers a costlier handshake).
fn openssh_options(key: &Path, known_hosts: &Path) -> Vec<String> {
    [
        "-F /dev/null".to_owned(),
        format!("-i {}", key.display()),
        format!("-o UserKnownHostsFile={}", known_hosts.display()),
        "-o GlobalKnownHostsFile=/dev/null".into(),
        "-o StrictHostKeyChecking=yes".into(),
        "-o BatchMode=yes".into(),
        "-o IdentitiesOnly=yes".into(),
        "-o KexAlgorithms=curve25519-sha256".into(),
    ]
    .into_iter()
    .collect()
}

/// Everything one client run needs to know about the fleet.
struct Target<'a> {
    endpoints: &'a Endpoints,
    user: &'a str,
    key: &'a Path,
    /// Hosts in flight at once.
    concurrency: usize,
}

/// Runs `f` and fills in `server_cpu` from the machine's busy time around it.
fn with_machine_cpu(f: impl FnOnce() -> Run) -> Run {
    let busy = machine_busy_secs();
    let mut run = f();
    run.server_cpu = Some((machine_busy_secs() - busy - run.process_cpu).max(0.0));
    run
}

fn run_ours(t: &Target<'_>, scratch: &Path) -> Run {
    run_ours_with(t, scratch, &[])
}

/// Ours with extra `k=v` options for the child (`batches=`, `max_fail=`, `release=1`,
/// `accept_new=1`), from a prefix command such as `ip netns exec NS` when `wrap` is given.
fn run_ours_with(t: &Target<'_>, scratch: &Path, extra: &[String]) -> Run {
    let mut run = Run {
        client: "ours".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let result = (|| -> anyhow::Result<()> {
        let exe = std::env::current_exe()?;
        let stderr_file = scratch.join("ours.stderr");
        let started = Instant::now();
        let wrap: Vec<&str> = extra
            .iter()
            .find_map(|e| e.strip_prefix("wrap="))
            .map(|w| w.split(' ').collect())
            .unwrap_or_default();
        let mut command = match wrap.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = command
            .arg("--child")
            .arg("fleet-ours")
            .arg(format!("hosts={}", t.endpoints.hosts_file.display()))
            .arg(format!("known_hosts={}", t.endpoints.known_hosts.display()))
            .arg(format!("user={}", t.user))
            .arg(format!("key={}", t.key.display()))
            .arg(format!("concurrency={}", t.concurrency))
            .args(extra.iter().filter(|e| !e.starts_with("wrap=")))
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&stderr_file)?)
            .output()?;
        run.process_wall = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(line) = stdout.lines().rev().find(|l| l.starts_with("RESULT ")) else {
            let stderr = std::fs::read_to_string(&stderr_file).unwrap_or_default();
            bail!("child failed ({}): {}", out.status, stderr.trim());
        };
        let r = parse_kv(line.trim_start_matches("RESULT "));
        let num = |k: &str| -> anyhow::Result<f64> {
            r.get(k)
                .with_context(|| format!("missing {k}"))?
                .parse::<f64>()
                .with_context(|| format!("bad {k}"))
        };
        run.ok = num("ok")? as usize;
        run.run_wall = Some(Duration::from_secs_f64(num("elapsed")?));
        run.run_cpu = Some(num("cpu_in_run")?);
        run.process_cpu = num("cpu_process")?;
        run.max_rss = num("hwm")? as u64;
        run.tree_rss = run.max_rss;
        run.fds = Some(num("fds_peak")? as usize);
        run.first_byte = since_start(&r);
        if let Some(e) = r.get("first_error").filter(|e| !e.is_empty()) {
            println!("    ours: first error: {}", e.replace('_', " "));
        }
        if let Some(rss) = r.get("rss_kib") {
            println!("    ours: RSS KiB at start, executors built, end: {rss}");
        }
        if let Some(retries) = r.get("retries").filter(|n| *n != "0") {
            println!("    ours: {retries} connection attempts retried");
        }
        Ok(())
    })();
    if let Err(e) = result {
        run.failure = Some(format!("{e:#}"));
    }
    run
}

/// Per host, `first_ms - start_ms` of a `RESULT` line (hosts without output left out).
fn since_start(r: &HashMap<String, String>) -> Vec<Duration> {
    let list = |k: &str| -> Vec<Option<f64>> {
        r.get(k)
            .map(|s| s.split(',').map(|v| v.parse::<f64>().ok()).collect())
            .unwrap_or_default()
    };
    list("first_ms")
        .into_iter()
        .zip(list("start_ms"))
        .filter_map(|(first, start)| Some((first? - start?).max(0.0)))
        .map(|ms| Duration::from_secs_f64(ms / 1e3))
        .collect()
}

fn run_asyncssh(python: &Path, helper: &Path, t: &Target<'_>, scratch: &Path) -> Run {
    let mut run = Run {
        client: "asyncssh".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let args = vec![
        helper.display().to_string(),
        "asyncssh".into(),
        format!("hosts={}", t.endpoints.hosts_file.display()),
        format!("user={}", t.user),
        format!("key={}", t.key.display()),
        format!("known_hosts={}", t.endpoints.known_hosts.display()),
        format!("cmd={COMMAND}"),
        format!("expect={EXPECT}"),
        format!("concurrency={}", t.concurrency),
    ];
    match run_wrapped(helper, &python.display().to_string(), &args, &[], scratch) {
        Ok(w) => {
            run.record_process(&w);
            match w.lines.iter().rev().find(|(_, l)| l.starts_with("RESULT ")) {
                Some((_, line)) => {
                    let r = parse_kv(line.trim_start_matches("RESULT "));
                    let get = |k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok());
                    run.ok = get("ok").unwrap_or(0.0) as usize;
                    run.run_wall = get("elapsed").map(Duration::from_secs_f64);
                    run.run_cpu = get("cpu_in_run");
                    run.first_byte = since_start(&r);
                    if !w.status_ok || run.ok != run.hosts {
                        println!("    asyncssh stderr: {}", w.stderr_tail());
                    }
                }
                None => run.failure = Some(format!("no RESULT line: {}", w.stderr_tail())),
            }
        }
        Err(e) => run.failure = Some(format!("{e:#}")),
    }
    run
}

/// parallel-ssh with `-P`: each output line is printed as `127.0.0.1: line` as it arrives
/// (the host without its port, so lines cannot be told apart by host), and
/// `[n] time [SUCCESS] 127.0.0.1:PORT` when a host is done. First-byte times: with
/// `-p 1`, from the previous host's `[SUCCESS]` line (the first host is left out); with
/// more in flight, from the spawn (interpreter start included).
fn run_pssh(pssh: &str, helper: &Path, t: &Target<'_>, scratch: &Path) -> Run {
    let mut run = Run {
        client: "parallel-ssh".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let args = vec![
        "-h".into(),
        t.endpoints.hosts_file.display().to_string(),
        "-l".into(),
        t.user.to_owned(),
        "-p".into(),
        t.concurrency.to_string(),
        "-t".into(),
        PER_HOST.as_secs().to_string(),
        "-P".into(),
        "-x".into(),
        openssh_options(t.key, &t.endpoints.known_hosts).join(" "),
        COMMAND.into(),
    ];
    // Unbuffered, so that `-P` lines reach the pipe as pssh prints them.
    let env = [("PYTHONUNBUFFERED", "1".to_owned())];
    match run_wrapped(helper, pssh, &args, &env, scratch) {
        Ok(w) => {
            run.record_process(&w);
            let mut outputs = Vec::new();
            let mut succeeded = std::collections::HashSet::new();
            let mut previous_done = None;
            for (at, line) in &w.lines {
                if let Some(text) = line.strip_prefix("127.0.0.1: ") {
                    if text.starts_with(EXPECT) {
                        outputs.push(*at);
                        match (t.concurrency, previous_done) {
                            (1, Some(done)) => run.first_byte.push(at.saturating_sub(done)),
                            (1, None) => {}
                            _ => run.first_byte.push(*at),
                        }
                    }
                } else if line.contains("[SUCCESS] 127.0.0.1:")
                    && let Some(port) = line.rsplit(':').next()
                    && let Ok(port) = port.trim().parse::<u16>()
                    && t.endpoints.ports.contains(&port)
                {
                    succeeded.insert(port);
                    previous_done = Some(*at);
                }
            }
            run.ok = outputs.len().min(succeeded.len());
            if run.ok != run.hosts {
                let sample: Vec<&str> = w.lines.iter().map(|(_, l)| l.as_str()).take(3).collect();
                println!(
                    "    parallel-ssh: {} outputs, {} successes; stdout {sample:?}; stderr: {}",
                    outputs.len(),
                    succeeded.len(),
                    w.stderr_tail()
                );
            }
        }
        Err(e) => run.failure = Some(format!("{e:#}")),
    }
    run
}

/// The rolling plan of the rolling run: Ansible's `serial: [1, "10%", "50%"]`.
const ROLLING: &str = "1,10%,50%";
/// Its threshold: stop when more than this share of a batch failed (`max_fail_percentage`).
const ROLLING_MAX_FAIL: u8 = 10;

/// Ansible's rolling run: `ansible-playbook -f 100` of a play with `serial: [1, "10%",
/// "50%"]` and `max_fail_percentage: 10` running `command: uname -a`; a host counts when
/// its PLAY RECAP line says `ok=1 changed=1 unreachable=0 failed=0`.
fn run_ansible_rolling(ansible: &Path, helper: &Path, t: &Target<'_>, scratch: &Path) -> Run {
    let mut run = Run {
        client: "Ansible serial".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let result = (|| -> anyhow::Result<()> {
        let (inventory, env) = ansible_setup(t, scratch)?;
        let play = scratch.join("rolling.yml");
        std::fs::write(
            &play,
            format!(
                "- hosts: fleet\n  gather_facts: false\n  serial: [1, \"10%\", \"50%\"]\n  max_fail_percentage: {ROLLING_MAX_FAIL}\n  tasks:\n    - command: {COMMAND}\n"
            ),
        )?;
        let playbook = ansible.with_file_name("ansible-playbook");
        let args: Vec<String> = vec![
            "-i".into(),
            inventory.display().to_string(),
            "-f".into(),
            CONCURRENCY.to_string(),
            play.display().to_string(),
        ];
        let w = run_wrapped(
            helper,
            &playbook.display().to_string(),
            &args,
            &env,
            scratch,
        )?;
        run.record_process(&w);
        run.ok = w
            .lines
            .iter()
            .filter(|(_, l)| {
                let l: String = l.split_whitespace().collect::<Vec<_>>().join(" ");
                l.contains(" : ok=1 changed=1 unreachable=0 failed=0")
            })
            .count();
        if run.ok != run.hosts {
            println!(
                "    Ansible serial: {} of {} correct; last lines {:?}; stderr: {}",
                run.ok,
                run.hosts,
                w.lines
                    .iter()
                    .rev()
                    .take(3)
                    .map(|(_, l)| l.as_str())
                    .collect::<Vec<_>>(),
                w.stderr_tail()
            );
        }
        Ok(())
    })();
    if let Err(e) = result {
        run.failure = Some(format!("{e:#}"));
    }
    run
}

/// A peer's program once its setup succeeded (its version noted), or `None` with a note on
/// why it is skipped.
fn installed_peer(
    setup: Result<(PathBuf, String), String>,
    label: &str,
    versions: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    match setup {
        Ok((path, version)) => {
            versions.push(version);
            Some(path)
        }
        Err(e) => {
            notes.push(format!("{label} peer skipped: {e}"));
            None
        }
    }
}

/// The inventory and environment every Ansible run uses (see [`run_ansible`]).
fn ansible_setup(
    t: &Target<'_>,
    scratch: &Path,
) -> anyhow::Result<(PathBuf, Vec<(&'static str, String)>)> {
    let inventory = scratch.join("inventory.ini");
    let mut text = String::from("[fleet]\n");
    for (i, port) in t.endpoints.ports.iter().enumerate() {
        text.push_str(&format!(
            "h{i} ansible_host=127.0.0.1 ansible_port={port}\n"
        ));
    }
    text.push_str(&format!(
        "[fleet:vars]\nansible_user={}\nansible_ssh_private_key_file={}\nansible_python_interpreter=/usr/bin/python3\n",
        t.user,
        t.key.display()
    ));
    std::fs::write(&inventory, text)?;
    let config = scratch.join("ansible.cfg");
    std::fs::write(&config, "")?;
    let home = scratch.join("ansible-home");
    let ssh_args = openssh_options(t.key, &t.endpoints.known_hosts)
        .into_iter()
        .filter(|o| !o.starts_with("-F") && !o.starts_with("-i "))
        .chain(["-o ControlMaster=no".to_owned()])
        .collect::<Vec<_>>()
        .join(" ");
    let env = vec![
        ("ANSIBLE_CONFIG", config.display().to_string()),
        ("ANSIBLE_HOME", home.display().to_string()),
        ("ANSIBLE_LOCAL_TEMP", home.join("tmp").display().to_string()),
        ("ANSIBLE_HOST_KEY_CHECKING", "True".into()),
        ("ANSIBLE_PIPELINING", "True".into()),
        ("ANSIBLE_SSH_ARGS", ssh_args),
        ("ANSIBLE_TIMEOUT", "60".into()),
        ("ANSIBLE_NOCOLOR", "1".into()),
        ("ANSIBLE_FORCE_COLOR", "0".into()),
        ("ANSIBLE_DEPRECATION_WARNINGS", "False".into()),
    ];
    Ok((inventory, env))
}

/// Ansible ad-hoc: `ansible all -i INVENTORY -m command -a 'uname -a' -f 100 -o`, with
/// pipelining on (one ssh per host instead of several) and no ControlPersist master (it
/// would outlive the run); host key checking on through the fleet's known_hosts.
fn run_ansible(ansible: &Path, helper: &Path, t: &Target<'_>, scratch: &Path) -> Run {
    let mut run = Run {
        client: "Ansible".into(),
        hosts: t.endpoints.len(),
        ..Run::default()
    };
    let result = (|| -> anyhow::Result<()> {
        let (inventory, env) = ansible_setup(t, scratch)?;
        let args: Vec<String> = [
            "all",
            "-i",
            &inventory.display().to_string(),
            "-m",
            "command",
            "-a",
            COMMAND,
            "-f",
            &CONCURRENCY.to_string(),
            "-o",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        let w = run_wrapped(helper, &ansible.display().to_string(), &args, &env, scratch)?;
        run.record_process(&w);
        // `h7 | CHANGED | rc=0 | (stdout) Linux …`
        let mut seen = std::collections::HashSet::new();
        for (_, line) in &w.lines {
            if line.contains("| CHANGED | rc=0 | (stdout) Linux ")
                && let Some(host) = line.split(" | ").next()
            {
                seen.insert(host.trim().to_owned());
            }
        }
        run.ok = seen.len();
        if run.ok != run.hosts {
            let sample: Vec<&str> = w
                .lines
                .iter()
                .map(|(_, l)| l.as_str())
                .filter(|l| !l.contains("| CHANGED | rc=0"))
                .take(2)
                .collect();
            println!(
                "    Ansible: {} of {} correct; e.g. {sample:?}; stderr: {}",
                run.ok,
                run.hosts,
                w.stderr_tail()
            );
        }
        Ok(())
    })();
    if let Err(e) = result {
        run.failure = Some(format!("{e:#}"));
    }
    run
}

/// One host's start and first output byte, from the start of the run.
type HostTimes = (Option<Duration>, Option<Duration>);

/// The child side of `--child fleet-ours`: builds one executor per host, runs the fleet,
/// and prints one `RESULT` line.
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    let map: HashMap<String, String> = args
        .iter()
        .filter_map(|a| a.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let get = |k: &str| map.get(k).with_context(|| format!("missing {k}="));
    let ports: Vec<u16> = std::fs::read_to_string(get("hosts")?)?
        .lines()
        .filter_map(|l| l.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
        .collect();
    let concurrency: usize = get("concurrency")?.parse()?;
    let template = SshExecutor::builder()
        .user(get("user")?)
        .private_key_file(get("key")?)
        .host("127.0.0.1");
    // accept-new=1: the known_hosts file starts empty and every host is recorded.
    let template = if map.get("accept_new").is_some_and(|v| v == "1") {
        template.accept_new_host_keys(get("known_hosts")?)
    } else {
        template.known_hosts_file(get("known_hosts")?)
    };
    // Hosts as `ADDRESS:PORT` lines (a distinct address each in the 10,000-host run).
    let addresses: Vec<String> = std::fs::read_to_string(get("hosts")?)?
        .lines()
        .filter_map(|l| l.rsplit_once(':').map(|(a, _)| a.to_owned()))
        .collect();

    // Open descriptors, sampled every 20 ms while the fleet runs.
    let fds_peak = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (fds_peak, stop) = (fds_peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
                fds_peak.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let runtime = tokio::runtime::Runtime::new()?;
    let rss = || crate::stats::proc_status_bytes("self", "VmRSS").unwrap_or(0) / 1024;
    let rss_start = rss();
    let rss_built = AtomicUsize::new(0);
    // Per host: when it started, when its first output byte arrived.
    let times: Arc<Mutex<Vec<HostTimes>>> = Arc::new(Mutex::new(vec![(None, None); ports.len()]));
    let cpu0 = self_cpu_secs();
    let started = Instant::now();
    let (report, elapsed) = runtime.block_on(async {
        // Cold: new executors, so every host is a new connection.
        let members = ports
            .iter()
            .zip(&addresses)
            .map(|(&port, address)| template.clone().host(address).port(port).build_lazy())
            .collect::<Result<Vec<_>, _>>()?;
        rss_built.store(rss() as usize, Ordering::Relaxed);
        let mut fleet = Fleet::new(members)
            .concurrency(concurrency)
            .per_host_timeout(PER_HOST)
            .release_connections(map.get("release").is_some_and(|v| v == "1"));
        if let Some(batches) = map.get("batches") {
            fleet = fleet.batches(batches.parse::<swiftide_ssh_executor::fleet::Batches>()?);
        }
        if let Some(percent) = map.get("max_fail") {
            fleet = fleet.max_fail_percentage(percent.parse()?);
        }
        let report = fleet
            .run(COMMAND, |event| {
                let Ok(mut times) = times.lock() else { return };
                match event {
                    FleetEvent::Started { member, .. } => {
                        if let Some(slot) = times.get_mut(member) {
                            slot.0 = Some(started.elapsed());
                        }
                    }
                    FleetEvent::Output { member, .. } => {
                        if let Some(slot) = times.get_mut(member) {
                            slot.1.get_or_insert_with(|| started.elapsed());
                        }
                    }
                    _ => {}
                }
            })
            .await;
        let elapsed = started.elapsed();
        anyhow::Ok((report, elapsed))
    })?;
    let cpu_in_run = self_cpu_secs() - cpu0;
    // Still open here: every host's connection stays pooled until the fleet is dropped.
    let fds_end = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    fds_peak.fetch_max(fds_end, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();

    let mut ok = 0;
    let mut first_error = String::new();
    for result in &report.results {
        match &result.outcome {
            Ok(e) if e.status.success() && e.stdout().starts_with(EXPECT.as_bytes()) => ok += 1,
            other => {
                if first_error.is_empty() {
                    first_error = format!("{other:?}")
                        .chars()
                        .take(200)
                        .map(|c| if c.is_whitespace() { '_' } else { c })
                        .collect();
                }
            }
        }
    }
    let list = |pick: fn(&HostTimes) -> Option<Duration>| {
        times
            .lock()
            .map(|t| {
                t.iter()
                    .map(|x| {
                        pick(x).map_or(String::new(), |d| format!("{:.2}", d.as_secs_f64() * 1e3))
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let (start_ms, first_ms) = (list(|t| t.0), list(|t| t.1));
    // Connection attempts beyond the first: hosts the server turned away (MaxStartups) and
    // the fleet retried, each costing the client another handshake.
    let retries: u32 = report
        .results
        .iter()
        .map(|r| r.attempts.saturating_sub(1))
        .sum();
    println!(
        "RESULT rss_kib={rss_start},{},{} elapsed={} ok={ok} hosts={} retries={retries} cpu_in_run={cpu_in_run} cpu_process={} hwm={} fds_peak={} start_ms={start_ms} first_ms={first_ms} first_error={first_error}",
        rss_built.load(Ordering::Relaxed),
        rss(),
        elapsed.as_secs_f64(),
        ports.len(),
        self_cpu_secs(),
        self_hwm(),
        fds_peak.load(Ordering::Relaxed),
    );
    drop(runtime);
    Ok(())
}

/// Median RTT of 20 keepalive pings over a raw russh connection through the proxy.
fn measure_rtt(
    ctx: &Ctx,
    port: u16,
    key: &Path,
    user: &str,
    host_key: &str,
) -> anyhow::Result<Duration> {
    ctx.rt.block_on(async {
        let target = raw::Target {
            host: "127.0.0.1".into(),
            port,
            user: user.to_owned(),
            key: key.to_owned(),
            host_key: host_key.to_owned(),
        };
        raw::median_ping_rtt(&target).await
    })
}

fn median_of(runs: &[Run]) -> Option<Run> {
    let mut passed: Vec<&Run> = runs.iter().filter(|r| r.passed()).collect();
    if passed.len() < runs.len() || passed.is_empty() {
        return runs.iter().find(|r| !r.passed()).cloned();
    }
    passed.sort_by_key(|r| r.wall());
    passed.get(passed.len() / 2).map(|r| (*r).clone())
}

pub fn fleet(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = 100;
    let bench_dir = crate::bench_dir();
    let peers = Peers::setup(ctx, &bench_dir)?;
    report.note(format!(
        "9 fleet peers: {}; OpenSSH-based peers with KexAlgorithms=curve25519-sha256 (what russh and asyncssh negotiate)",
        peers.versions
    ));
    for note in &peers.notes {
        report.note(format!("9 fleet: {note}"));
    }
    let scratch = tempfile::Builder::new().prefix("swb-fleet").tempdir()?;
    let t = Instant::now();
    let hosts = Hosts::start(n, scratch.path(), "fleet100")?;
    println!(
        "  {n} hosts on {} sshd processes ({} ports each at most), started in {:.1} s",
        hosts.sshd_count(),
        PORTS_PER_SSHD,
        t.elapsed().as_secs_f64()
    );
    let target = Target {
        endpoints: &hosts.endpoints,
        user: &hosts.user,
        key: &hosts.key,
        concurrency: CONCURRENCY,
    };

    // 1. 100 hosts, cold, every client; ours and asyncssh interleaved.
    let reps = ctx.size(3, 2);
    let (mut ours, mut asyncssh, mut pssh, mut ansible) = (vec![], vec![], vec![], vec![]);
    let (mut clush, mut bssh) = (vec![], vec![]);
    for rep in 0..reps {
        let r = with_machine_cpu(|| run_ours(&target, scratch.path()));
        println!("    {}", r.describe());
        ours.push(r);
        if let Some(python) = &peers.asyncssh_python {
            let r =
                with_machine_cpu(|| run_asyncssh(python, &peers.helper, &target, scratch.path()));
            println!("    {}", r.describe());
            asyncssh.push(r);
        }
        if let Some(p) = &peers.pssh
            && (rep == 0 || !ctx.quick)
        {
            let r = with_machine_cpu(|| run_pssh(p, &peers.helper, &target, scratch.path()));
            println!("    {}", r.describe());
            pssh.push(r);
        }
        if let Some(c) = &peers.clush
            && (rep == 0 || !ctx.quick)
        {
            let r = with_machine_cpu(|| run_clush(c, &peers.helper, &target, scratch.path()));
            println!("    {}", r.describe());
            clush.push(r);
        }
        if let Some(b) = &peers.bssh
            && (rep == 0 || !ctx.quick)
        {
            let r = with_machine_cpu(|| run_bssh(b, &peers.helper, &target, scratch.path()));
            println!("    {}", r.describe());
            bssh.push(r);
        }
        if let Some(a) = &peers.ansible
            && rep == 0
        {
            let r = with_machine_cpu(|| run_ansible(a, &peers.helper, &target, scratch.path()));
            println!("    {}", r.describe());
            ansible.push(r);
        }
    }
    let ours = median_of(&ours).context("no run of ours")?;
    let peer_runs: Vec<Run> = [&asyncssh, &pssh, &clush, &bssh, &ansible]
        .into_iter()
        .filter_map(|runs| median_of(runs))
        .collect();
    let best = peer_runs
        .iter()
        .filter(|r| r.passed())
        .min_by_key(|r| r.wall());
    let peer_text = if peer_runs.is_empty() {
        "no peer installed".to_owned()
    } else {
        peer_runs
            .iter()
            .map(Run::short)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let (ratio_text, met) = match (ours.passed(), best) {
        (true, Some(best)) => {
            // In-run figures where the peer has them (asyncssh: after its imports).
            let speed = best.wall().as_secs_f64() / ours.wall().as_secs_f64();
            let cpu = best.cpu_ms_per_host() / ours.cpu_ms_per_host();
            let process = best.process_wall.as_secs_f64() / ours.process_wall.as_secs_f64();
            let faster = |x: f64| {
                if x >= 1.0 {
                    format!("{x:.2}× faster")
                } else {
                    format!("{:.2}× slower", 1.0 / x)
                }
            };
            (
                format!(
                    "{} than {} (whole processes: {}); client CPU 1/{cpu:.1} of its",
                    faster(speed),
                    best.client,
                    faster(process)
                ),
                Some(speed >= 1.3 && cpu >= 5.0),
            )
        }
        (false, _) => ("ours failed".to_owned(), Some(false)),
        (true, None) => ("no peer passed".to_owned(), None),
    };
    report.row(
        format!("9 fleet: {n} hosts × `{COMMAND}`, cold, concurrency {CONCURRENCY}"),
        ours.short().trim_start_matches("ours ").to_owned()
            + &ours.fds.map(|f| format!(", {f} fds")).unwrap_or_default(),
        peer_text,
        ratio_text,
        "≥ 1.3× the best peer's wall time, ≤ 1/5 of its client CPU per host",
        met,
    );

    // Each of the new peers on its own (issue 21's goal: ahead of each).
    for runs in [&clush, &bssh] {
        let Some(peer) = median_of(runs) else {
            continue;
        };
        let (text, met) = match (ours.passed(), peer.passed()) {
            (true, true) => {
                let speed = peer.wall().as_secs_f64() / ours.wall().as_secs_f64();
                let cpu = peer.cpu_ms_per_host() / ours.cpu_ms_per_host();
                (
                    format!("wall time {speed:.2}× faster; client CPU 1/{cpu:.1} of its"),
                    Some(speed > 1.0 && cpu > 1.0),
                )
            }
            (_, false) => (format!("{} failed", peer.client), None),
            (false, _) => ("ours failed".into(), Some(false)),
        };
        report.row(
            format!("9 fleet: {n} hosts × `{COMMAND}`, ours vs {}", peer.client),
            ours.short().trim_start_matches("ours ").to_owned(),
            peer.short(),
            text,
            "ahead on wall time and client CPU",
            met,
        );
    }

    // Rolling: batches 1, 10%, 50% with a 10% threshold, against Ansible's `serial`.
    rolling(ctx, report, &peers, &target, scratch.path())?;

    // 2. The same fleet through the +20 ms delay proxies.
    slow_fleet(ctx, report, &peers, &hosts, scratch.path())?;

    // 3. Ours alone at scale.
    drop(hosts);
    scale(ctx, report, scratch.path())?;
    Ok(())
}

fn rolling(
    ctx: &Ctx,
    report: &mut Report,
    peers: &Peers,
    target: &Target<'_>,
    scratch: &Path,
) -> anyhow::Result<()> {
    let extra = [
        format!("batches={ROLLING}"),
        format!("max_fail={ROLLING_MAX_FAIL}"),
    ];
    let reps = ctx.size(3, 2);
    let ours: Vec<Run> = (0..reps)
        .map(|_| {
            let r = with_machine_cpu(|| run_ours_with(target, scratch, &extra));
            println!("    rolling {}", r.describe());
            r
        })
        .collect();
    let ours = median_of(&ours).context("no rolling run of ours")?;
    let ansible = peers.ansible.as_ref().map(|a| {
        let r = with_machine_cpu(|| run_ansible_rolling(a, &peers.helper, target, scratch));
        println!("    rolling {}", r.describe());
        r
    });
    let (peer, ratio_text, met) = match &ansible {
        None => ("Ansible not installed".to_owned(), "–".to_owned(), None),
        Some(a) if !a.passed() => (a.describe(), "Ansible failed".to_owned(), None),
        Some(a) if !ours.passed() => (a.short(), "ours failed".to_owned(), Some(false)),
        Some(a) => {
            let speed = a.wall().as_secs_f64() / ours.wall().as_secs_f64();
            let cpu = a.cpu_ms_per_host() / ours.cpu_ms_per_host();
            (
                a.short(),
                format!("{speed:.1}× faster; client CPU 1/{cpu:.0} of its"),
                Some(speed > 1.0 && cpu > 1.0),
            )
        }
    };
    report.row(
        format!(
            "9 fleet rolling: {} hosts in batches `{ROLLING}` (then 50% until done), max {ROLLING_MAX_FAIL}% failed per batch",
            target.endpoints.len()
        ),
        ours.short().trim_start_matches("ours ").to_owned(),
        peer,
        ratio_text,
        "ahead of Ansible `serial` on wall time and client CPU",
        met,
    );
    Ok(())
}

fn slow_fleet(
    ctx: &Ctx,
    report: &mut Report,
    peers: &Peers,
    hosts: &Hosts,
    scratch: &Path,
) -> anyhow::Result<()> {
    let one_way = Duration::from_millis(10);
    let targets: Vec<SocketAddr> = hosts
        .endpoints
        .ports
        .iter()
        .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
        .collect();
    let proxied = proxy::start_many(&targets, one_way)?;
    let endpoints = Endpoints::write(
        scratch,
        "slow",
        proxied.iter().map(SocketAddr::port).collect(),
        hosts.endpoints.keys.clone(),
    )?;
    let first_key = endpoints.keys.first().context("no hosts")?;
    let first_port = *endpoints.ports.first().context("no hosts")?;
    let rtt = measure_rtt(ctx, first_port, &hosts.key, &hosts.user, first_key)?;
    println!(
        "  +20 ms link: {} hosts behind delay proxies, RTT {:.1} ms",
        endpoints.len(),
        rtt.as_secs_f64() * 1e3
    );
    let in_rtt = |d: Duration| d.as_secs_f64() / rtt.as_secs_f64();
    // (a) All hosts at once, as above: on this 2-core machine the 100 handshakes queue
    // for the server's CPU, so this is mostly CPU, not round trips.
    // (b) A few hosts one at a time (concurrency 1): each host's time from its own start
    // to its first output byte is then its protocol round trips (plus a little CPU).
    let sequential = ctx.size(20, 10);
    let few = endpoints.first(scratch, "slow-few", sequential)?;
    let mut rows: Vec<(String, Option<Samples>, Option<Samples>)> = Vec::new();
    let clients: Vec<&str> = ["ours", "asyncssh", "parallel-ssh"]
        .into_iter()
        .filter(|c| match *c {
            "asyncssh" => peers.asyncssh_python.is_some(),
            "parallel-ssh" => peers.pssh.is_some(),
            _ => true,
        })
        .collect();
    for client in clients {
        let mut measured = Vec::new();
        for (eps, concurrency) in [(&endpoints, CONCURRENCY), (&few, 1)] {
            let target = Target {
                endpoints: eps,
                user: &hosts.user,
                key: &hosts.key,
                concurrency,
            };
            let r = match client {
                "ours" => run_ours(&target, scratch),
                "asyncssh" => match &peers.asyncssh_python {
                    Some(python) => run_asyncssh(python, &peers.helper, &target, scratch),
                    None => continue,
                },
                _ => match &peers.pssh {
                    Some(p) => run_pssh(p, &peers.helper, &target, scratch),
                    None => continue,
                },
            };
            println!(
                "    {} hosts, concurrency {concurrency}: {}",
                eps.len(),
                r.describe()
            );
            let s = if r.passed() { r.first_bytes() } else { None };
            if let Some(s) = &s {
                println!(
                    "      first output byte per host: median {:.1} RTT, p90 {:.1}, fastest {:.1} ({} hosts)",
                    in_rtt(s.median()),
                    in_rtt(s.p90()),
                    in_rtt(s.pct(0.0)),
                    s.n()
                );
            }
            measured.push(s);
        }
        let mut it = measured.into_iter();
        rows.push((client.to_owned(), it.next().flatten(), it.next().flatten()));
    }
    let text = |(client, all, one): &(String, Option<Samples>, Option<Samples>)| {
        let one = one.as_ref().map_or("failed".to_owned(), |s| {
            format!("{:.1} RTT (p90 {:.1})", in_rtt(s.median()), in_rtt(s.p90()))
        });
        let all = all.as_ref().map_or("failed".to_owned(), |s| {
            format!("{:.1} RTT (p90 {:.1})", in_rtt(s.median()), in_rtt(s.p90()))
        });
        format!("{client} {one}; all at once {all}")
    };
    let ours = rows.first().and_then(|r| r.2.clone());
    let best = rows
        .iter()
        .skip(1)
        .filter_map(|(name, _, one)| one.as_ref().map(|s| (name, s.median())))
        .min_by_key(|(_, m)| *m);
    let (ratio_text, met) = match (&ours, best) {
        (Some(o), Some((name, b))) => (
            format!(
                "{:.2}× of {name}'s",
                o.median().as_secs_f64() / b.as_secs_f64()
            ),
            Some(o.median() <= b),
        ),
        (None, _) => ("ours failed".into(), Some(false)),
        (Some(_), None) => ("no peer passed".into(), None),
    };
    report.row(
        format!(
            "9 fleet, +20 ms RTT link (ping {:.1} ms): RTTs from a host's start to its first output byte, median over {} hosts one at a time",
            rtt.as_secs_f64() * 1e3,
            few.len()
        ),
        rows.first().map(|r| text(r).trim_start_matches("ours ").to_owned()).unwrap_or_default(),
        rows.iter().skip(1).map(text).collect::<Vec<_>>().join("; ")
            + "; Ansible not run (over a minute per run; prints a host only when it is done)",
        ratio_text,
        "ours ≤ the best peer's",
        met,
    );
    Ok(())
}

fn scale(ctx: &Ctx, report: &mut Report, scratch: &Path) -> anyhow::Result<()> {
    let big = 1000;
    let t = Instant::now();
    let hosts = Hosts::start(big, scratch, "fleet1000")?;
    println!(
        "  scale: {big} hosts on {} sshd processes, started in {:.1} s",
        hosts.sshd_count(),
        t.elapsed().as_secs_f64()
    );
    let sizes: &[usize] = if ctx.quick {
        &[100, 1000]
    } else {
        &[100, 250, 500, 1000]
    };
    let mut runs = Vec::new();
    for &n in sizes {
        let endpoints = hosts.endpoints.first(scratch, &format!("scale{n}"), n)?;
        let target = Target {
            endpoints: &endpoints,
            user: &hosts.user,
            key: &hosts.key,
            concurrency: CONCURRENCY,
        };
        let r = run_ours(&target, scratch);
        println!(
            "    {n} hosts: {}{}",
            r.describe(),
            if r.passed() {
                format!(
                    "; {:.2} ms wall/host",
                    r.wall().as_secs_f64() * 1e3 / n as f64
                )
            } else {
                String::new()
            }
        );
        runs.push((n, r));
        // Let the previous run's sshd sessions go away before the next one.
        std::thread::sleep(Duration::from_millis(500));
    }
    // Diagnostic: each dial reads and parses the whole known_hosts file, so a fleet whose
    // file lists every host pays O(hosts) per host. 100 hosts with the 1,000-line file:
    let mut diag = hosts.endpoints.first(scratch, "scale100-kh", 100)?;
    diag.known_hosts = hosts.endpoints.known_hosts.clone();
    let r = run_ours(
        &Target {
            endpoints: &diag,
            user: &hosts.user,
            key: &hosts.key,
            concurrency: CONCURRENCY,
        },
        scratch,
    );
    println!(
        "    diagnostic, 100 hosts with the {}-line known_hosts: {}",
        hosts.endpoints.len(),
        r.describe()
    );
    let (Some((small_n, small)), Some((big_n, large))) = (runs.first(), runs.last()) else {
        bail!("no scale runs");
    };
    ensure!(
        small.passed(),
        "the {small_n}-host run failed: {}",
        small.describe()
    );
    let per_host = |r: &Run, n: usize| r.wall().as_secs_f64() * 1e3 / n as f64;
    let curve = runs
        .iter()
        .map(|(n, r)| {
            if r.passed() {
                format!("{n}: {:.2} ms/host", per_host(r, *n))
            } else {
                format!("{n}: failed")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (ratio_text, met) = if large.passed() {
        let time = per_host(large, *big_n) / per_host(small, *small_n);
        let mem = (large.max_rss as f64 / *big_n as f64) / (small.max_rss as f64 / *small_n as f64);
        (
            format!("per host: time {time:.2}×, RSS {mem:.2}× of {small_n} hosts'"),
            Some(time <= 1.5 && mem <= 1.5),
        )
    } else {
        ("failed".into(), Some(false))
    };
    report.row(
        format!("9 fleet: {big_n} hosts × `{COMMAND}`, ours alone, concurrency {CONCURRENCY}"),
        if large.passed() {
            format!(
                "{:.2} s = {:.2} ms/host, CPU {:.2} ms/host, peak RSS {:.1} MiB, {} fds",
                large.wall().as_secs_f64(),
                per_host(large, *big_n),
                large.cpu_ms_per_host(),
                large.max_rss as f64 / MIB,
                large.fds.unwrap_or(0)
            )
        } else {
            large.describe()
        },
        format!(
            "{small_n} hosts: {:.2} s, CPU {:.2} ms/host, {:.1} MiB, {} fds ({curve})",
            small.wall().as_secs_f64(),
            small.cpu_ms_per_host(),
            small.max_rss as f64 / MIB,
            small.fds.unwrap_or(0)
        ),
        ratio_text,
        "no cliff: per-host time and RSS ≤ 1.5× of 100 hosts'",
        met,
    );
    Ok(())
}

/// The addresses of the simulated hosts: `127.1.x.y`, all on `lo` (the whole of 127/8 is
/// local on Linux), so one sshd listening on the wildcard address of a private network
/// namespace answers as `n` distinct hosts.
fn loopback_addresses(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("127.1.{}.{}", i / 250, 1 + i % 250))
        .collect()
}

/// Port the wildcard listener of the 10,000-host sshd uses inside its namespace.
const WILDCARD_PORT: u16 = 2200;

/// What the accept-new known_hosts file of a run holds: every host exactly once with the
/// server's key, in a file `ssh-keygen` reads.
fn check_recorded(path: &Path, addresses: &[String], key: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let key_part: String = key.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut wrong_key = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (host, rest) = line.split_once(' ').context("a line without a key")?;
        *seen.entry(host).or_default() += 1;
        if rest
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
            != key_part
        {
            wrong_key += 1;
        }
    }
    let wanted: Vec<String> = addresses
        .iter()
        .map(|a| format!("[{a}]:{WILDCARD_PORT}"))
        .collect();
    let missing = wanted
        .iter()
        .filter(|w| !seen.contains_key(w.as_str()))
        .count();
    let twice = seen.values().filter(|&&c| c > 1).count();
    let extra = seen.len().saturating_sub(wanted.len() - missing);
    // ssh-keygen reads the whole file (`-l` prints one line per valid key) and finds hosts.
    let listed = Command::new("ssh-keygen")
        .arg("-l")
        .arg("-f")
        .arg(path)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    let sample: Vec<&String> = wanted.iter().step_by((wanted.len() / 20).max(1)).collect();
    let found = sample
        .iter()
        .filter(|h| {
            Command::new("ssh-keygen")
                .arg("-F")
                .arg(h.as_str())
                .arg("-f")
                .arg(path)
                .output()
                .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
        })
        .count();
    ensure!(
        missing == 0 && twice == 0 && extra == 0 && wrong_key == 0,
        "known_hosts: {missing} hosts missing, {twice} recorded twice, {extra} unexpected, {wrong_key} with another key"
    );
    ensure!(
        listed == wanted.len(),
        "ssh-keygen -l lists {listed} keys, not {}",
        wanted.len()
    );
    ensure!(
        found == sample.len(),
        "ssh-keygen -F found {found} of {} sampled hosts",
        sample.len()
    );
    Ok(format!(
        "{} hosts recorded once each (ssh-keygen -l: {listed} keys; -F finds {found} of {} sampled)",
        wanted.len(),
        sample.len()
    ))
}

/// 10,000 hosts simulated on this machine: one sshd in a private network namespace
/// (the testbed's, with `ListenAddress 0.0.0.0:2200`: only `lo` and the testbed's veth
/// exist in there), 10,000 distinct loopback addresses, ours run inside the namespace
/// (`ip netns exec`) with accept-new host keys into an empty known_hosts and
/// `release_connections(true)`; the same with 100 hosts for the per-host comparison, and
/// 1,000 hosts with pooled connections under a soft open-file limit of 1,024
/// (`prlimit`), which the fleet raises.
pub fn fleet10k(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let big = ctx.size(10_000, 10_000);
    let scratch = tempfile::Builder::new().prefix("swb-10k").tempdir()?;
    let testbed = Testbed::builder()
        .network_namespace(true)
        .max_startups("100:30:200")
        .sshd_config_line(format!("ListenAddress 0.0.0.0:{WILDCARD_PORT}"))
        .start()?;
    let ns = testbed
        .network_namespace()
        .context("no network namespace")?
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !testbed
        .sshd_log()
        .contains(&format!("Server listening on 0.0.0.0 port {WILDCARD_PORT}"))
    {
        ensure!(
            Instant::now() < deadline,
            "sshd did not listen on 0.0.0.0:{WILDCARD_PORT}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "  one sshd in namespace {ns}, listening on 0.0.0.0:{WILDCARD_PORT} (lo and the testbed veth only)"
    );
    let key = testbed.host_public_key().to_owned();
    let (user, private_key) = (
        testbed.user().to_owned(),
        testbed.private_key_path().to_owned(),
    );
    let wrap = format!("wrap=ip netns exec {ns}");
    let run_n =
        |n: usize, name: &str, extra: &[String]| -> anyhow::Result<(Run, Vec<String>, PathBuf)> {
            let addresses = loopback_addresses(n);
            let hosts_file = scratch.path().join(format!("{name}.hosts"));
            let known_hosts = scratch.path().join(format!("{name}.known_hosts"));
            std::fs::write(
                &hosts_file,
                addresses
                    .iter()
                    .map(|a| format!("{a}:{WILDCARD_PORT}\n"))
                    .collect::<String>(),
            )?;
            std::fs::write(&known_hosts, "")?;
            let endpoints = Endpoints {
                ports: vec![WILDCARD_PORT; n],
                keys: vec![key.clone(); n],
                hosts_file,
                known_hosts: known_hosts.clone(),
            };
            let target = Target {
                endpoints: &endpoints,
                user: &user,
                key: &private_key,
                concurrency: CONCURRENCY,
            };
            let r = run_ours_with(&target, scratch.path(), extra);
            println!(
                "    {n} hosts ({name}): {}{}",
                r.describe(),
                if r.passed() {
                    format!(
                        "; {:.2} ms wall/host",
                        r.wall().as_secs_f64() * 1e3 / n as f64
                    )
                } else {
                    String::new()
                }
            );
            // Let the sessions go away before the next run.
            std::thread::sleep(Duration::from_millis(500));
            Ok((r, addresses, known_hosts))
        };
    let released = [
        wrap.clone(),
        "release=1".to_owned(),
        "accept_new=1".to_owned(),
    ];
    let (small, small_addrs, small_kh) = run_n(100, "ns100", &released)?;
    let small_check = check_recorded(&small_kh, &small_addrs, &key);
    let (large, large_addrs, large_kh) = run_n(big, "ns10k", &released)?;
    let large_check = check_recorded(&large_kh, &large_addrs, &key);
    println!("    known_hosts at 100: {small_check:?}; at {big}: {large_check:?}");
    // Pooled (no release), 1,000 hosts, started under a soft limit of 1,024.
    let pooled_n = 1000;
    let pooled = [
        format!(
            "wrap=prlimit --nofile=1024:{} ip netns exec {ns}",
            hard_nofile()
        ),
        "accept_new=1".to_owned(),
    ];
    let (pooled_run, _, _) = run_n(pooled_n, "ns1000-pooled", &pooled)?;
    drop(testbed);

    let per_host = |r: &Run, n: usize| r.wall().as_secs_f64() * 1e3 / n as f64;
    let rss_per_host = |r: &Run, n: usize| r.max_rss as f64 / n as f64;
    let (ratio_text, met) = if small.passed() && large.passed() {
        let cpu = large.cpu_ms_per_host() / small.cpu_ms_per_host();
        let rss = rss_per_host(&large, big) / rss_per_host(&small, 100);
        let time = per_host(&large, big) / per_host(&small, 100);
        (
            format!("per host: CPU {cpu:.2}×, RSS {rss:.3}×, time {time:.2}× of 100 hosts'"),
            Some(cpu <= 1.5 && rss <= 1.5 && large_check.is_ok()),
        )
    } else {
        ("failed".to_owned(), Some(false))
    };
    let describe = |r: &Run, n: usize| {
        if r.passed() {
            format!(
                "{:.1} s = {:.2} ms/host, CPU {:.2} ms/host, peak RSS {:.1} MiB, {} fds",
                r.wall().as_secs_f64(),
                per_host(r, n),
                r.cpu_ms_per_host(),
                r.max_rss as f64 / MIB,
                r.fds.unwrap_or(0)
            )
        } else {
            r.describe()
        }
    };
    report.row(
        format!(
            "9 fleet: {big} hosts (10,000 loopback addresses, one sshd in a network namespace) × `{COMMAND}`, concurrency {CONCURRENCY}, accept-new, `release_connections(true)`"
        ),
        format!(
            "{}; known_hosts: {}",
            describe(&large, big),
            match &large_check {
                Ok(t) => t.clone(),
                Err(e) => format!("WRONG: {e:#}"),
            }
        ),
        format!("100 hosts, same setup: {}", describe(&small, 100)),
        ratio_text,
        "client CPU and RSS per host ≤ 1.5× of 100 hosts'; every host recorded once",
        met,
    );
    report.row(
        format!(
            "9 fleet: {pooled_n} hosts, connections pooled until the end, started with a soft open-file limit of 1,024"
        ),
        describe(&pooled_run, pooled_n),
        "parallel-ssh stopped at ~1,010 hosts on 1,024 (its issue #311)".to_owned(),
        if pooled_run.passed() {
            "no \"Too many open files\": the fleet raised its soft limit".to_owned()
        } else {
            "failed".to_owned()
        },
        "every host answers",
        Some(pooled_run.passed()),
    );
    Ok(())
}

/// The hard open-file limit of this process (`/proc/self/limits`).
fn hard_nofile() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(4).map(str::to_owned))
        })
        .unwrap_or_else(|| "20000".to_owned())
}

/// Scenario `deadhosts` (issue 37): 100 hosts with 10 of them refusing connections (ports
/// nothing listens on), against the same 100 all up, for ours and for clush, interleaved.
/// A dead host should cost what it costs `ssh` (a refused connect: at once), so the run with
/// 10 down should take no longer than the run with all up (goal ≤ 1.1×). Wall times are
/// the client processes' (spawn to exit), the same measure for both clients.
pub fn dead_hosts(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = 100;
    let down = 10;
    let bench_dir = crate::bench_dir();
    std::fs::create_dir_all(&bench_dir)?;
    let helper = bench_dir.join("fleet_peers.py");
    std::fs::write(&helper, HELPER)?;
    let clush = match setup_clush(&bench_dir.join("ansible-venv")) {
        Ok((clush, version)) => {
            println!("  peer: {version}");
            Some(clush)
        }
        Err(why) => {
            report.note(format!("deadhosts: clush peer skipped: {why}"));
            None
        }
    };
    let scratch = tempfile::Builder::new().prefix("swb-dead").tempdir()?;
    let hosts = Hosts::start(n, scratch.path(), "dead-all-up")?;
    // Every tenth host's port swapped for one nothing listens on (bound, then let go).
    let refusing = free_ports(down)?;
    let mut ports = hosts.endpoints.ports.clone();
    for (slot, port) in refusing.iter().enumerate() {
        ports[slot * (n / down)] = *port;
    }
    let with_dead = Endpoints::write(
        scratch.path(),
        "dead-ten-down",
        ports,
        hosts.endpoints.keys.clone(),
    )?;
    let target = |endpoints| Target {
        endpoints,
        user: &hosts.user,
        key: &hosts.key,
        concurrency: CONCURRENCY,
    };
    let (all_up, ten_down) = (target(&hosts.endpoints), target(&with_dead));
    println!("  {n} hosts; then the same with {down} of them refusing connections");

    let rounds = ctx.size(5, 3);
    // (client, with dead hosts) -> process wall times of the valid runs.
    let mut times: HashMap<(&str, bool), Vec<Duration>> = HashMap::new();
    let mut clients: Vec<&str> = vec!["ours"];
    if clush.is_some() {
        clients.push("clush");
    }
    for round in 0..rounds {
        let mut order: Vec<(&str, bool)> = clients
            .iter()
            .flat_map(|client| [(*client, false), (*client, true)])
            .collect();
        let turn = round % order.len();
        order.rotate_left(turn);
        for (client, dead) in order {
            let t = if dead { &ten_down } else { &all_up };
            let run = match (client, &clush) {
                ("clush", Some(clush)) => run_clush(clush, &helper, t, scratch.path()),
                _ => run_ours(t, scratch.path()),
            };
            let expected = if dead { n - down } else { n };
            if let Some(failure) = &run.failure
                && !(client == "clush" && dead)
            {
                bail!("{client} (dead hosts: {dead}) failed: {failure}");
            }
            ensure!(
                run.ok == expected,
                "{client} (dead hosts: {dead}): {} hosts answered, expected {expected}",
                run.ok
            );
            println!(
                "    round {round}: {client:5} {} {:.2} s",
                if dead { "10 down" } else { "all up " },
                run.process_wall.as_secs_f64()
            );
            times
                .entry((client, dead))
                .or_default()
                .push(run.process_wall);
        }
    }
    let median = |client: &str, dead: bool| -> anyhow::Result<Samples> {
        let runs = times
            .get(&(client, dead))
            .with_context(|| format!("no runs of {client}"))?;
        Ok(Samples::new(runs.clone()))
    };
    let (ours_up, ours_dead) = (median("ours", false)?, median("ours", true)?);
    let cost = ours_dead.median().as_secs_f64() / ours_up.median().as_secs_f64();
    report.row(
        format!("deadhosts: {n} hosts with {down} refusing vs all up, {rounds} interleaved rounds"),
        format!(
            "{:.2} s with {down} down, {:.2} s all up",
            ours_dead.median().as_secs_f64(),
            ours_up.median().as_secs_f64()
        ),
        "ours, all up",
        format!("{} of the all-up time", crate::stats::ratio(cost)),
        "≤ 1.1× all up",
        Some(cost <= 1.1),
    );
    if clush.is_some() {
        let (clush_up, clush_dead) = (median("clush", false)?, median("clush", true)?);
        let vs = ours_dead.median().as_secs_f64() / clush_dead.median().as_secs_f64();
        report.row(
            format!("deadhosts: {n} hosts with {down} refusing, vs clush"),
            format!("{:.2} s", ours_dead.median().as_secs_f64()),
            format!(
                "clush {:.2} s ({:.2} s all up: {} of it)",
                clush_dead.median().as_secs_f64(),
                clush_up.median().as_secs_f64(),
                crate::stats::ratio(
                    clush_dead.median().as_secs_f64() / clush_up.median().as_secs_f64()
                )
            ),
            format!("{} of clush's time", crate::stats::ratio(vs)),
            "reported",
            None,
        );
    }
    Ok(())
}
