//! Scenario `become`: a warm `true` run as root through sudo, against the usual ways of
//! running a command as root over SSH, all in one run, in interleaved rounds.
//!
//! The login account is the testbed's unprivileged escalation account
//! (`Escalation::SudoNoPassword`: `<account> ALL=(ALL:ALL) NOPASSWD: ALL`). Rows:
//!
//! * ours: `executor.with_become(Become::sudo())` and `run("true")` on a warm pool (pooled
//!   connection; the resident runner started through sudo, or under
//!   `SWIFTIDE_SSH_RUNNER=per-exec` pre-escalated spares); the same pool unescalated (`run("true")`), and running
//!   `sudo -n true` as a plain command (sudo's own cost without `with_become`'s hand-over);
//! * the floor: raw russh on one authenticated connection, exec `sudo -n true` (and `true`);
//! * OpenSSH through a warm ControlMaster: `ssh -S <socket> host 'sudo -n true'`;
//! * Ansible ad-hoc with `--become`, pipelining and a warm ControlPersist master, modules
//!   `command` and `raw` (whole `ansible` processes, Python start-up included);
//! * with a `SudoPassword` testbed (if it starts): ours with `Become::sudo().password(..)`,
//!   warm, and the first escalated command on a fresh connection (sudo's authentication).
//!
//! A round runs every in-process row back to back in blocks (each block starts with one
//! untimed command), then the process-based peers; every other round runs the other way
//! round, so load from other work on the machine reaches every row alike. Server CPU per
//! command is the run's cgroup CPU (see `stats::enter_cpu_cgroup`) minus the client's: this
//! process, its reaped children (`ssh`, `ansible` and everything they waited for) and the
//! background ControlMaster processes, whose CPU is read from `/proc/<pid>/stat`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use swiftide_ssh_executor::{Become, PasswordRequest, Secret, SshExecutor};
use swiftide_ssh_testbed::{BECOME_PASSWORD, Escalation, Testbed};

use crate::{
    Ctx,
    child::Conn,
    peers::{ControlMaster, OpenSsh},
    raw,
    report::Report,
    stats::{Samples, ms, ratio, self_cpu_secs, tree_cpu_secs},
};

/// The rows, in the order they are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    OursBecome,
    OursPassword,
    OursPlain,
    OursSudoCommand,
    RawSudo,
    RawTrue,
    CmSudo,
    CmTrue,
    AnsibleCommand,
    AnsibleRaw,
    AnsibleListHosts,
}

const ROWS: &[(Row, &str)] = &[
    (
        Row::OursBecome,
        "ours `with_become(Become::sudo())`, `run(\"true\")`",
    ),
    (
        Row::OursPassword,
        "ours `Become::sudo().password(..)` (SudoPassword testbed), warm",
    ),
    (Row::OursPlain, "ours unescalated `run(\"true\")`"),
    (
        Row::OursSudoCommand,
        "ours unescalated `run(\"sudo -n true\")`",
    ),
    (Row::RawSudo, "raw russh exec `sudo -n true` (floor)"),
    (Row::RawTrue, "raw russh exec `true`"),
    (Row::CmSudo, "ssh via warm ControlMaster, `sudo -n true`"),
    (Row::CmTrue, "ssh via warm ControlMaster, `true`"),
    (
        Row::AnsibleCommand,
        "Ansible `-m command -a true --become` (process)",
    ),
    (
        Row::AnsibleRaw,
        "Ansible `-m raw -a true --become` (process)",
    ),
    (
        Row::AnsibleListHosts,
        "Ansible `--list-hosts` (start-up only, no ssh)",
    ),
];

const IN_PROCESS: &[Row] = &[
    Row::OursBecome,
    Row::OursPassword,
    Row::OursPlain,
    Row::OursSudoCommand,
    Row::RawSudo,
    Row::RawTrue,
];

fn label(row: Row) -> &'static str {
    ROWS.iter().find(|(r, _)| *r == row).map_or("?", |(_, l)| l)
}

/// What one row measured: wall times of the timed commands and the CPU around them.
#[derive(Debug, Default, Clone)]
struct Measured {
    samples: Vec<Duration>,
    /// Run-wide (cgroup) CPU seconds during the timed commands.
    tree: f64,
    /// The client's part of it.
    client: f64,
}

impl Measured {
    fn samples(&self) -> Samples {
        Samples::new(self.samples.clone())
    }

    fn per_cmd_us(&self, secs: f64) -> f64 {
        secs / self.samples.len().max(1) as f64 * 1e6
    }

    fn server_us(&self) -> f64 {
        self.per_cmd_us(self.tree - self.client)
    }

    fn client_us(&self) -> f64 {
        self.per_cmd_us(self.client)
    }
}

#[derive(Default)]
struct Results(Vec<(Row, Measured)>);

impl Results {
    fn entry(&mut self, row: Row) -> &mut Measured {
        if let Some(i) = self.0.iter().position(|(r, _)| *r == row) {
            return &mut self.0[i].1;
        }
        self.0.push((row, Measured::default()));
        &mut self.0.last_mut().expect("just pushed").1
    }

    fn get(&self, row: Row) -> Option<&Measured> {
        self.0
            .iter()
            .find(|(r, m)| *r == row && !m.samples.is_empty())
            .map(|(_, m)| m)
    }
}

/// CPU seconds (user + system) of a process's `/proc/<pid>/stat`: its own (`children =
/// false`) or of its reaped children (`cutime + cstime`).
fn stat_cpu_secs(pid: &str, children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (a, b) = if children { (13, 14) } else { (11, 12) };
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(a) + tick(b)) / 100.0
}

/// (run-wide CPU, the client's CPU): this process, its reaped children and the background
/// processes `masters` (ControlMaster and ControlPersist masters) are the client.
fn cpu_now(masters: &[u32]) -> (f64, f64) {
    let masters: f64 = masters
        .iter()
        .map(|pid| stat_cpu_secs(&pid.to_string(), false))
        .sum();
    (
        tree_cpu_secs(),
        self_cpu_secs() + stat_cpu_secs("self", true) + masters,
    )
}

/// A command line as it would be typed (arguments with shell syntax in single quotes).
pub fn shell_line(cmd: &Command) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
        {
            s.to_owned()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Ansible ad-hoc against one host, with a ControlPersist master of its own (stopped on
/// drop).
struct Ansible {
    program: PathBuf,
    version: String,
    inventory: PathBuf,
    env: Vec<(&'static str, String)>,
    scratch: PathBuf,
    socket: PathBuf,
    destination: String,
    /// The ControlPersist master, once the warm-up run started it.
    master: Option<u32>,
}

impl Ansible {
    fn setup(
        program: PathBuf,
        version: String,
        ssh: &OpenSsh,
        scratch: &Path,
        socket: PathBuf,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(scratch)?;
        let inventory = scratch.join("inventory.ini");
        std::fs::write(
            &inventory,
            format!(
                "[become]\nh0 ansible_host={} ansible_port={} ansible_user={} \
                 ansible_ssh_private_key_file={} ansible_python_interpreter=/usr/bin/python3\n",
                ssh.host,
                ssh.port,
                ssh.user,
                ssh.key.display()
            ),
        )?;
        let config = scratch.join("ansible.cfg");
        std::fs::write(&config, "")?;
        let home = scratch.join("ansible-home");
        // Ansible's default ssh_args (`-C -o ControlMaster=auto -o ControlPersist=60s`), a
        // short ControlPath of our own, and the same host key checking and kex as the
        // fleet scenario's OpenSSH-based peers.
        let ssh_args = [
            "-C".to_owned(),
            "-o ControlMaster=auto".into(),
            "-o ControlPersist=60s".into(),
            format!("-o ControlPath={}", socket.display()),
            format!("-o UserKnownHostsFile={}", ssh.known_hosts.display()),
            "-o GlobalKnownHostsFile=/dev/null".into(),
            "-o StrictHostKeyChecking=yes".into(),
            "-o BatchMode=yes".into(),
            "-o IdentitiesOnly=yes".into(),
            "-o KexAlgorithms=curve25519-sha256".into(),
        ]
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
        Ok(Self {
            program,
            version,
            inventory,
            env,
            scratch: scratch.to_owned(),
            socket,
            destination: ssh.destination(),
            master: None,
        })
    }

    /// `ansible all -i INV <args…>`
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("all")
            .arg("-i")
            .arg(&self.inventory)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn module_args<'a>(module: &'a str, arg: &'a str) -> [&'a str; 6] {
        ["-m", module, "-a", arg, "--become", "-o"]
    }

    /// Runs `ansible all -m MODULE -a ARG --become -o`; returns its stdout. Output goes to
    /// files: a ControlPersist master started by this run must not hold our pipes.
    fn run_module(&self, module: &str, arg: &str) -> anyhow::Result<String> {
        self.run(&Self::module_args(module, arg), "rc=0")
    }

    fn run(&self, args: &[&str], expect: &str) -> anyhow::Result<String> {
        let out = self.scratch.join("ansible.out");
        let err = self.scratch.join("ansible.err");
        let status = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .status()
            .context("running ansible")?;
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        if !status.success() || !stdout.contains(expect) {
            bail!(
                "ansible {args:?} exited with {status}: {} / {}",
                stdout.trim(),
                std::fs::read_to_string(&err)
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" / ")
            );
        }
        Ok(stdout)
    }

    /// The ControlPersist master's pid (`ssh -O check`), if one runs.
    fn master_pid(&self) -> Option<u32> {
        master_pid(&self.socket, &self.destination)
    }
}

impl Drop for Ansible {
    fn drop(&mut self) {
        stop_master(&self.socket, &self.destination, self.master);
    }
}

/// `ssh -O check` prints "Master running (pid=N)" on stderr.
fn master_pid(socket: &Path, destination: &str) -> Option<u32> {
    let out = Command::new("ssh")
        .arg("-o")
        .arg(format!("ControlPath={}", socket.display()))
        .args(["-O", "check", destination])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stderr)
        .split("pid=")
        .nth(1)
        .and_then(|s| s.trim_end().trim_end_matches(')').parse().ok())
}

/// `ssh -O exit`, then waits up to 2 s for `pid` to go (and kills it by its pid if not).
fn stop_master(socket: &Path, destination: &str, pid: Option<u32>) {
    let _ = Command::new("ssh")
        .arg("-o")
        .arg(format!("ControlPath={}", socket.display()))
        .args(["-O", "exit", destination])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Some(pid) = pid {
        wait_gone(pid);
    }
}

/// Waits up to 2 s for `pid` to exit, then sends it SIGKILL (it is a process this scenario
/// started: a ControlMaster).
pub fn wait_gone(pid: u32) -> bool {
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    for _ in 0..40 {
        if !alive() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-s", "KILL", &pid.to_string()])
        .status();
    false
}

/// The in-process clients, all warm.
struct InProcess {
    base: SshExecutor,
    root: SshExecutor,
    /// The SudoPassword testbed's pool and its escalated handle.
    pw: Option<(SshExecutor, SshExecutor)>,
    raw: raw::RawHandle,
}

impl InProcess {
    async fn start(conn: &Conn, pw_conn: Option<&Conn>) -> anyhow::Result<Self> {
        let base = conn.builder().build().await?;
        let root = base.with_become(Become::sudo())?;
        let pw = match pw_conn {
            Some(c) => {
                let base = c.builder().build().await?;
                let root =
                    base.with_become(Become::sudo().password(Secret::new(BECOME_PASSWORD)))?;
                Some((base, root))
            }
            None => None,
        };
        let raw = raw::connect(&conn.raw_target(), true).await?;
        let me = Self {
            base,
            root,
            pw,
            raw,
        };
        // Correctness: the escalated rows really run as root, the others do not.
        let uid = |e: swiftide_ssh_executor::Execution| e.stdout_lossy().trim().to_owned();
        ensure!(
            uid(me.root.run("id -u").await?) == "0",
            "with_become(Become::sudo()) does not run as root"
        );
        ensure!(
            uid(me.base.run("id -u").await?) != "0",
            "the testbed's login account is root"
        );
        if let Some((_, pw)) = &me.pw {
            ensure!(
                uid(pw.run("id -u").await?) == "0",
                "Become::sudo().password(..) does not run as root"
            );
        }
        let (status, _) = raw::exec(&me.raw, b"sudo -n true", |_| {}).await?;
        ensure!(status == Some(0), "raw `sudo -n true` exited {status:?}");
        Ok(me)
    }

    fn has(&self, row: Row) -> bool {
        row != Row::OursPassword || self.pw.is_some()
    }

    async fn once(&self, row: Row) -> anyhow::Result<()> {
        let ok = match row {
            Row::OursBecome => self.root.run("true").await?.success(),
            Row::OursPlain => self.base.run("true").await?.success(),
            Row::OursSudoCommand => self.base.run("sudo -n true").await?.success(),
            Row::OursPassword => match &self.pw {
                Some((_, pw)) => pw.run("true").await?.success(),
                None => bail!("no SudoPassword testbed"),
            },
            Row::RawSudo => raw::exec(&self.raw, b"sudo -n true", |_| {}).await?.0 == Some(0),
            Row::RawTrue => raw::exec(&self.raw, b"true", |_| {}).await?.0 == Some(0),
            _ => bail!("{row:?} is not in-process"),
        };
        ensure!(ok, "{row:?} failed");
        Ok(())
    }

    /// One block: for each row, one untimed command (the machine's wake-up), then `k`
    /// timed ones with the CPU read around them.
    async fn block(&self, rows: &[Row], k: usize, results: &mut Results) -> anyhow::Result<()> {
        for &row in rows.iter().filter(|r| self.has(**r)) {
            self.once(row).await?;
            let (tree0, client0) = cpu_now(&[]);
            let mut samples = Vec::with_capacity(k);
            for _ in 0..k {
                let t = Instant::now();
                self.once(row).await?;
                samples.push(t.elapsed());
            }
            let (tree1, client1) = cpu_now(&[]);
            let m = results.entry(row);
            m.samples.extend(samples);
            m.tree += tree1 - tree0;
            m.client += client1 - client0;
        }
        Ok(())
    }

    async fn close(self) {
        self.base.close().await;
        if let Some((base, _)) = &self.pw {
            base.close().await;
        }
        let _ = self
            .raw
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

/// The process-based peers.
struct Processes<'a> {
    cm: Option<&'a ControlMaster>,
    ansible: Option<&'a Ansible>,
}

impl Processes<'_> {
    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        if self.cm.is_some() {
            rows.extend([Row::CmSudo, Row::CmTrue]);
        }
        if self.ansible.is_some() {
            rows.extend([Row::AnsibleCommand, Row::AnsibleRaw, Row::AnsibleListHosts]);
        }
        rows
    }

    fn masters(&self) -> Vec<u32> {
        self.cm
            .and_then(|c| c.pid)
            .into_iter()
            .chain(self.ansible.and_then(|a| a.master))
            .collect()
    }

    fn once(&self, row: Row) -> anyhow::Result<()> {
        match (row, self.cm, self.ansible) {
            (Row::CmSudo, Some(cm), _) => {
                ensure!(cm.run("sudo -n true")?, "ssh sudo -n true failed")
            }
            (Row::CmTrue, Some(cm), _) => ensure!(cm.run("true")?, "ssh true failed"),
            (Row::AnsibleCommand, _, Some(a)) => {
                a.run_module("command", "true")?;
            }
            (Row::AnsibleRaw, _, Some(a)) => {
                a.run_module("raw", "true")?;
            }
            (Row::AnsibleListHosts, _, Some(a)) => {
                a.run(&["--list-hosts"], "h0")?;
            }
            _ => bail!("{row:?} is not available"),
        }
        Ok(())
    }

    /// `k` timed runs of `row` (no untimed one: a process start dwarfs the wake-up).
    fn block(&self, row: Row, k: usize, results: &mut Results) -> anyhow::Result<()> {
        let masters = self.masters();
        let (tree0, client0) = cpu_now(&masters);
        let mut samples = Vec::with_capacity(k);
        for _ in 0..k {
            let t = Instant::now();
            self.once(row)?;
            samples.push(t.elapsed());
        }
        let (tree1, client1) = cpu_now(&masters);
        let m = results.entry(row);
        m.samples.extend(samples);
        m.tree += tree1 - tree0;
        m.client += client1 - client0;
        Ok(())
    }
}

/// The first escalated commands on fresh connections (`m` of them, one executor each): the
/// connection is opened and its spares pre-started by an unescalated `true`, then the
/// escalated handle runs `true` three times. Returns the (first, second, third) samples and
/// how many prompts each of them got (through a counting password provider).
async fn fresh_connections(
    conn: &Conn,
    password: bool,
    m: usize,
) -> anyhow::Result<([Samples; 3], [u64; 3])> {
    let mut samples: [Vec<Duration>; 3] = Default::default();
    let mut prompts = [0u64; 3];
    for _ in 0..m {
        let base = conn.builder().build().await?;
        ensure!(base.run("true").await?.success(), "warm-up failed");
        // Let the pool pre-start its spares, as on a warm pool.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let asked = Arc::new(AtomicU64::new(0));
        let escalation = if password {
            let asked = asked.clone();
            Become::sudo().password_provider(move |_: &PasswordRequest| {
                asked.fetch_add(1, Ordering::Relaxed);
                Some(Secret::new(BECOME_PASSWORD))
            })
        } else {
            Become::sudo()
        };
        let root = base.with_become(escalation)?;
        for (s, p) in samples.iter_mut().zip(prompts.iter_mut()) {
            let before = asked.load(Ordering::Relaxed);
            let t = Instant::now();
            ensure!(root.run("true").await?.success(), "escalated `true` failed");
            s.push(t.elapsed());
            *p += asked.load(Ordering::Relaxed) - before;
        }
        base.close().await;
    }
    Ok((samples.map(Samples::new), prompts))
}

/// Prompts answered for `n` commands on the warm SudoPassword pool (a counting provider on
/// the same pool as the measured `.password(..)` handle).
async fn warm_prompts(base: &SshExecutor, n: usize) -> anyhow::Result<u64> {
    let asked = Arc::new(AtomicU64::new(0));
    let counter = asked.clone();
    let root = base.with_become(
        Become::sudo().password_provider(move |_: &PasswordRequest| {
            counter.fetch_add(1, Ordering::Relaxed);
            Some(Secret::new(BECOME_PASSWORD))
        }),
    )?;
    for _ in 0..n {
        ensure!(root.run("true").await?.success(), "escalated `true` failed");
    }
    Ok(asked.load(Ordering::Relaxed))
}

fn start_testbed(escalation: Escalation) -> anyhow::Result<Testbed> {
    Testbed::builder()
        .escalation(escalation)
        .start()
        .with_context(|| format!("starting a testbed with Escalation::{escalation:?}"))
}

pub fn become_root(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let tb = start_testbed(Escalation::SudoNoPassword)?;
    let conn = Ctx::conn_for(&tb);
    let ssh = Ctx::ssh_for(&conn);
    println!(
        "  testbed: sshd on {}:{} as {} (sudo NOPASSWD)",
        conn.host, conn.port, conn.user
    );
    let tb_pw = match start_testbed(Escalation::SudoPassword) {
        Ok(tb) => Some(tb),
        Err(e) => {
            report.note(format!("become: password rows skipped: {e:#}"));
            None
        }
    };
    let conn_pw = tb_pw.as_ref().map(Ctx::conn_for);
    if let Some(c) = &conn_pw {
        println!(
            "  testbed: sshd on {}:{} as {} (sudo with password)",
            c.host, c.port, c.user
        );
    }

    // Peers: ControlMaster, Ansible (venv under target/bench/, as for the fleet scenario).
    let cm = match ControlMaster::start(&ssh, ctx.sockets.path().join("cm-become")) {
        Ok(cm) => Some(cm),
        Err(e) => {
            report.note(format!("become: ControlMaster peer skipped: {e:#}"));
            None
        }
    };
    if let Some(cm) = &cm {
        let out = cm
            .ssh
            .ssh(&cm.opts(), "sudo -n id -u")
            .stdout(Stdio::piped())
            .output()?;
        ensure!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0",
            "ssh sudo -n id -u via the ControlMaster did not print 0"
        );
    }
    let scratch = tempfile::Builder::new().prefix("swb-become").tempdir()?;
    let ansible = match crate::fleet::setup_ansible(&crate::bench_dir().join("ansible-venv")) {
        Ok((program, version)) => {
            let a = Ansible::setup(
                program,
                version,
                &ssh,
                &scratch.path().join("ansible"),
                ctx.sockets.path().join("ans-become"),
            )
            .and_then(|mut a| {
                // Untimed: starts the ControlPersist master; checks that become gives root.
                let out = a.run_module("command", "id -u")?;
                ensure!(
                    out.contains("(stdout) 0"),
                    "ansible --become id -u did not print 0: {}",
                    out.trim()
                );
                a.run_module("raw", "true")?;
                a.master = a.master_pid();
                ensure!(
                    a.master.is_some(),
                    "no ControlPersist master after the warm-up"
                );
                Ok(a)
            });
            match a {
                Ok(a) => {
                    println!(
                        "  peer: {} (ControlPersist master pid {:?})",
                        a.version, a.master
                    );
                    Some(a)
                }
                Err(e) => {
                    report.note(format!("become: Ansible peer skipped: {e:#}"));
                    None
                }
            }
        }
        Err(e) => {
            report.note(format!("become: Ansible peer skipped: {e}"));
            None
        }
    };

    print_command_lines(&conn, cm.as_ref(), ansible.as_ref());

    let inproc = ctx.rt.block_on(InProcess::start(&conn, conn_pw.as_ref()))?;
    let procs = Processes {
        cm: cm.as_ref(),
        ansible: ansible.as_ref(),
    };
    let rounds = ctx.size(12, 4);
    let k_in = 25;
    let k_cm = ctx.size(15, 10);
    let k_ansible = ctx.size(2, 1);
    let mut results = Results::default();
    let measured = (|| -> anyhow::Result<()> {
        // Warm: every row once (pool connections, pre-started spares, sudo's first run).
        ctx.rt
            .block_on(inproc.block(IN_PROCESS, 5, &mut Results::default()))?;
        for row in procs.rows() {
            procs.once(row)?;
        }
        let t = Instant::now();
        for round in 0..rounds {
            let mut in_rows = IN_PROCESS.to_vec();
            let mut proc_rows = procs.rows();
            if round % 2 == 1 {
                in_rows.reverse();
                proc_rows.reverse();
            }
            let in_block =
                |results: &mut Results| ctx.rt.block_on(inproc.block(&in_rows, k_in, results));
            if round % 2 == 0 {
                in_block(&mut results)?;
            }
            for &row in &proc_rows {
                let k = match row {
                    Row::CmSudo | Row::CmTrue => k_cm,
                    Row::AnsibleListHosts => 1,
                    _ => k_ansible,
                };
                procs.block(row, k, &mut results)?;
            }
            if round % 2 == 1 {
                in_block(&mut results)?;
            }
        }
        println!(
            "  {rounds} interleaved rounds in {:.0} s",
            t.elapsed().as_secs_f64()
        );
        Ok(())
    })();
    // Diagnostics on the warm pools, after the timed rounds.
    let stats = inproc.base.pool_stats();
    println!(
        "  ours (NOPASSWD pool): {} dial(s), commands {}, on a spare {} ({} pre-started), direct requests {}",
        stats.dials,
        stats.commands,
        stats.spare_channels_used,
        stats.prestarted_spares_used,
        stats.direct_requests
    );
    let warm_pw_prompts = match &inproc.pw {
        Some((base, _)) if measured.is_ok() => {
            let n = 10;
            let asked = ctx.rt.block_on(warm_prompts(base, n))?;
            println!(
                "  ours (password pool): {asked} prompts answered for {n} warm escalated commands"
            );
            Some((asked, n))
        }
        _ => None,
    };
    let ansible_master_kept = ansible
        .as_ref()
        .map(|a| a.master.is_some() && a.master_pid() == a.master);
    ctx.rt.block_on(inproc.close());
    measured?;

    // Fresh connections: the first escalated commands.
    let m = ctx.size(10, 4);
    let fresh_nopw = ctx.rt.block_on(fresh_connections(&conn, false, m))?;
    let fresh_pw = match &conn_pw {
        Some(c) => Some(ctx.rt.block_on(fresh_connections(c, true, m))?),
        None => None,
    };

    // Clean up: masters stopped (and checked gone), testbeds dropped.
    let cm_pid = cm.as_ref().and_then(|c| c.pid);
    drop(cm);
    let cm_gone = cm_pid.is_none_or(wait_gone);
    drop(ansible);
    drop(tb_pw);
    drop(tb);

    print_results(
        &results,
        &fresh_nopw,
        fresh_pw.as_ref(),
        warm_pw_prompts,
        report,
    );
    if let Some(kept) = ansible_master_kept {
        println!("  Ansible's ControlPersist master lasted the whole run: {kept}");
    }
    println!("  cleanup: ControlMaster gone: {cm_gone}; Ansible master stopped; testbeds dropped");
    Ok(())
}

/// The exact command lines of the peers (and what ours and the floor send).
fn print_command_lines(conn: &Conn, cm: Option<&ControlMaster>, ansible: Option<&Ansible>) {
    println!("  command lines:");
    println!(
        "    ours: SshExecutor::builder() … .build(), .with_become(Become::sudo()), run(\"true\") \
         (exec request: `exec 'sudo' -n -u 'root' -- /bin/sh -c '<bootstrap>' …`, on a pre-started spare)"
    );
    println!(
        "    raw russh: exec `sudo -n true` on one authenticated connection as {}",
        conn.user
    );
    if let Some(cm) = cm {
        println!(
            "    ControlMaster: {}",
            shell_line(&cm.ssh.ssh(&cm.opts(), "sudo -n true"))
        );
    }
    if let Some(a) = ansible {
        let env: Vec<String> = a.env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
        println!("    Ansible env: {}", env.join(" "));
        for module in ["command", "raw"] {
            println!(
                "    Ansible: {}",
                shell_line(&a.command(&Ansible::module_args(module, "true")))
            );
        }
        println!(
            "    Ansible start-up only: {}",
            shell_line(&a.command(&["--list-hosts"]))
        );
        if let Ok(inv) = std::fs::read_to_string(&a.inventory) {
            println!("    Ansible inventory: {}", inv.trim().replace('\n', " / "));
        }
    }
}

/// `850 µs`, `15.3 ms`
fn cpu(us: f64) -> String {
    if !us.is_finite() {
        "n/a".to_owned()
    } else if us >= 1000.0 {
        ms(Duration::from_secs_f64(us.max(0.0) / 1e6))
    } else {
        format!("{us:.0} µs")
    }
}

fn cpu_signed(us: f64) -> String {
    if us < 0.0 {
        format!("-{}", cpu(-us))
    } else {
        format!("+{}", cpu(us))
    }
}

fn print_results(
    results: &Results,
    fresh_nopw: &([Samples; 3], [u64; 3]),
    fresh_pw: Option<&([Samples; 3], [u64; 3])>,
    warm_pw_prompts: Option<(u64, usize)>,
    report: &mut Report,
) {
    let Some(ours) = results.get(Row::OursBecome) else {
        return;
    };
    let ours_s = ours.samples();
    let ours_med = ours_s.median().as_secs_f64();
    println!();
    println!(
        "  Warm `true` as root (sudo), interleaved rounds; Ansible rows are whole `ansible` processes (Python start-up included)."
    );
    println!();
    println!(
        "  vs ours = the row's median / ours' median. Client CPU: this process, or the peer's processes \
         (reaped children and the background ControlMaster); server CPU: the run's cgroup CPU minus the client's."
    );
    println!();
    println!("  | row | median | p90 | n | vs ours | client CPU/cmd | server CPU/cmd |");
    println!("  |---|---|---|---|---|---|---|");
    for (row, label) in ROWS {
        let Some(m) = results.get(*row) else {
            continue;
        };
        let s = m.samples();
        println!(
            "  | {label} | {} | {} | {} | {} | {} | {} |",
            ms(s.median()),
            ms(s.p90()),
            s.n(),
            if *row == Row::OursBecome {
                "1 (ours)".to_owned()
            } else {
                format!("{} ours", ratio(s.median().as_secs_f64() / ours_med))
            },
            cpu(m.client_us()),
            cpu(m.server_us()),
        );
    }
    println!();
    // Where the time goes: differences of medians (wall) and of server CPU per command.
    let diff = |a: Row, b: Row| -> Option<String> {
        let (a, b) = (results.get(a)?, results.get(b)?);
        let wall = a.samples().median().as_secs_f64() - b.samples().median().as_secs_f64();
        Some(format!(
            "{:+.2} ms wall, {} server CPU",
            wall * 1e3,
            cpu_signed(a.server_us() - b.server_us())
        ))
    };
    for (what, a, b) in [
        (
            "sudo itself (raw `sudo -n true` - raw `true`)",
            Row::RawSudo,
            Row::RawTrue,
        ),
        (
            "ours unescalated over the floor (ours `true` - raw `true`)",
            Row::OursPlain,
            Row::RawTrue,
        ),
        (
            "ours running sudo as a command over the floor (ours `sudo -n true` - raw `sudo -n true`)",
            Row::OursSudoCommand,
            Row::RawSudo,
        ),
        (
            "with_become's hand-over (ours become - ours `run(\"sudo -n true\")`)",
            Row::OursBecome,
            Row::OursSudoCommand,
        ),
        (
            "escalating, all told (ours become - ours `true`)",
            Row::OursBecome,
            Row::OursPlain,
        ),
        (
            "sudo's password check (ours password - ours sudo -n)",
            Row::OursPassword,
            Row::OursBecome,
        ),
    ] {
        if let Some(d) = diff(a, b) {
            println!("  {what}: {d}");
        }
    }
    let fresh_line = |name: &str, (s, p): &([Samples; 3], [u64; 3])| {
        println!(
            "  {name}: 1st escalated command on a fresh connection {}; 2nd {}; 3rd {}; prompts answered {} / {} / {} (of {} each)",
            s[0].describe(),
            ms(s[1].median()),
            ms(s[2].median()),
            p[0],
            p[1],
            p[2],
            s[0].n()
        );
    };
    fresh_line("ours sudo -n (NOPASSWD)", fresh_nopw);
    if let Some(f) = fresh_pw {
        fresh_line("ours sudo with password", f);
    }

    let cell = |m: &Measured| format!("{}; server CPU {}", m.samples().short(), cpu(m.server_us()));
    let ours_cell = cell(ours);
    let vs = |row: Row| -> Option<(String, String)> {
        let m = results.get(row)?;
        Some((
            format!("{} {}", label(row), cell(m)),
            format!(
                "{} ours",
                ratio(m.samples().median().as_secs_f64() / ours_med)
            ),
        ))
    };
    // Issue 44's targets: a warm escalated `true` at most 1.3x an unescalated one (the
    // runner started through sudo), and ahead of sudo over a warm ControlMaster.
    let peer_over_ours = |row: Row| {
        results
            .get(row)
            .map(|m| m.samples().median().as_secs_f64() / ours_med)
    };
    for (row, what, target, met) in [
        (
            Row::OursPlain,
            "cost of escalating: ours unescalated",
            "ours ≤ 1.3× unescalated",
            peer_over_ours(Row::OursPlain).map(|r| r >= 1.0 / 1.3),
        ),
        (Row::RawSudo, "vs the floor, raw russh", "–", None),
        (
            Row::CmSudo,
            "vs ssh via warm ControlMaster",
            "> 1× (ahead)",
            peer_over_ours(Row::CmSudo).map(|r| r > 1.0),
        ),
        (
            Row::AnsibleRaw,
            "vs Ansible `raw` (whole process)",
            "–",
            None,
        ),
        (
            Row::AnsibleCommand,
            "vs Ansible `command` (whole process)",
            "–",
            None,
        ),
    ] {
        if let Some((peer, r)) = vs(row) {
            report.row(
                format!("become: warm `true` as root (sudo -n), {what}"),
                ours_cell.clone(),
                peer,
                r,
                target,
                met,
            );
        }
    }
    if let Some(pw) = results.get(Row::OursPassword) {
        let prompts = warm_pw_prompts
            .map(|(a, n)| format!("; {a} prompts in {n} warm commands"))
            .unwrap_or_default();
        report.row(
            "become: warm `true` as root, sudo with password vs sudo -n (ours)",
            format!("{}{prompts}", cell(pw)),
            format!("sudo -n {}", ours_s.short()),
            format!(
                "{} (password / -n)",
                ratio(pw.samples().median().as_secs_f64() / ours_med)
            ),
            "–",
            None,
        );
    }
    if let Some((s, p)) = fresh_pw {
        report.row(
            "become: sudo with password, 1st command on a fresh connection vs 2nd",
            format!("1st {} ({} prompts in {})", s[0].short(), p[0], s[0].n()),
            format!("2nd {} ({} prompts)", s[1].short(), p[1]),
            ratio(s[0].median().as_secs_f64() / s[1].median().as_secs_f64()),
            "(diagnostic)",
            None,
        );
    }
}
