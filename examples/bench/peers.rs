//! The peers: the OpenSSH client (cold, ControlMaster, scp, sftp, tar pipe) and Python asyncssh.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::stats::proc_status_bytes;

/// Runs the OpenSSH client against one server.
#[derive(Debug, Clone)]
pub struct OpenSsh {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub key: PathBuf,
    pub known_hosts: PathBuf,
}

impl OpenSsh {
    /// Options shared by ssh, scp and sftp (no port: scp/sftp spell it `-P`).
    fn common(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            self.key.display().to_string(),
        ];
        for opt in [
            format!("UserKnownHostsFile={}", self.known_hosts.display()),
            "GlobalKnownHostsFile=/dev/null".into(),
            "StrictHostKeyChecking=yes".into(),
            "UpdateHostKeys=no".into(),
            "BatchMode=yes".into(),
            "IdentitiesOnly=yes".into(),
            "ConnectTimeout=10".into(),
        ] {
            args.push("-o".into());
            args.push(opt);
        }
        args
    }

    pub fn destination(&self) -> String {
        format!("{}@{}", self.user, self.host)
    }

    /// `ssh <opts> <extra> -- user@host <remote>` with all stdio at /dev/null.
    pub fn ssh(&self, extra: &[String], remote: &str) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(self.common())
            .arg("-p")
            .arg(self.port.to_string())
            .args(extra)
            .arg("--")
            .arg(self.destination())
            .arg(remote)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    pub fn scp(&self, from: &str, to: &str) -> Command {
        let mut cmd = Command::new("scp");
        cmd.args(self.common())
            .arg("-q")
            .arg("-P")
            .arg(self.port.to_string())
            .arg(from)
            .arg(to)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    pub fn sftp_batch(&self, batch: &Path) -> Command {
        let mut cmd = Command::new("sftp");
        cmd.args(self.common())
            .arg("-q")
            .arg("-P")
            .arg(self.port.to_string())
            .arg("-b")
            .arg(batch)
            .arg(self.destination())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    pub fn remote_path(&self, path: &Path) -> String {
        format!("{}:{}", self.destination(), path.display())
    }
}

pub fn kex_curve25519() -> Vec<String> {
    vec!["-o".into(), "KexAlgorithms=curve25519-sha256".into()]
}

/// A persistent ControlMaster connection (`ControlMaster=auto`, `ControlPersist=60`).
#[derive(Debug)]
pub struct ControlMaster {
    pub ssh: OpenSsh,
    pub socket: PathBuf,
    pub pid: Option<u32>,
}

impl ControlMaster {
    pub fn opts(&self) -> Vec<String> {
        vec![
            "-o".into(),
            "ControlMaster=auto".into(),
            "-o".into(),
            format!("ControlPath={}", self.socket.display()),
            "-o".into(),
            "ControlPersist=60".into(),
        ]
    }

    /// Starts the master in the background (`-M -N -f`, stdio at /dev/null so nothing waits
    /// on the persisted master's pipes).
    pub fn start(ssh: &OpenSsh, socket: PathBuf) -> anyhow::Result<Self> {
        let mut cm = ControlMaster {
            ssh: ssh.clone(),
            socket,
            pid: None,
        };
        let mut extra = cm.opts();
        extra.extend(["-M".into(), "-N".into(), "-f".into()]);
        let mut cmd = Command::new("ssh");
        cmd.args(ssh.common())
            .arg("-p")
            .arg(ssh.port.to_string())
            .args(&extra)
            .arg("--")
            .arg(ssh.destination())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let status = cmd.status().context("starting the ControlMaster")?;
        if !status.success() {
            bail!("ssh -M -N -f exited with {status}");
        }
        // `ssh -O check` prints "Master running (pid=N)" on stderr.
        let out = Command::new("ssh")
            .args([
                "-o",
                &format!("ControlPath={}", cm.socket.display()),
                "-O",
                "check",
            ])
            .arg(ssh.destination())
            .stdin(Stdio::null())
            .output()?;
        let text = String::from_utf8_lossy(&out.stderr);
        cm.pid = text
            .split("pid=")
            .nth(1)
            .and_then(|s| s.trim_end().trim_end_matches(')').parse().ok());
        Ok(cm)
    }

    pub fn run(&self, remote: &str) -> anyhow::Result<bool> {
        Ok(self.ssh.ssh(&self.opts(), remote).status()?.success())
    }

    pub fn master_rss(&self) -> Option<u64> {
        proc_status_bytes(&self.pid?.to_string(), "VmRSS")
    }
}

impl Drop for ControlMaster {
    fn drop(&mut self) {
        let _ = Command::new("ssh")
            .args([
                "-o",
                &format!("ControlPath={}", self.socket.display()),
                "-O",
                "exit",
            ])
            .arg(self.ssh.destination())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `cmd` to completion while sampling the child's VmHWM (peak RSS) from /proc.
pub fn run_measuring_hwm(
    mut cmd: Command,
) -> anyhow::Result<(std::process::ExitStatus, Duration, u64)> {
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child.id().to_string();
    let mut peak = 0u64;
    loop {
        if let Some(hwm) = proc_status_bytes(&pid, "VmHWM") {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            return Ok((status, started.elapsed(), peak));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Python asyncssh in a venv under `target/`.
#[derive(Debug)]
pub struct AsyncSsh {
    python: PathBuf,
    script: PathBuf,
    pub version: String,
}

const SCRIPT: &str = include_str!("asyncssh_peer.py");

impl AsyncSsh {
    /// Creates the venv and installs asyncssh when missing. `Err` is a note for the report.
    pub fn setup(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let venv = dir.join("venv");
        let python = ensure_venv(&venv)?;
        let probe = |python: &Path| {
            Command::new(python)
                .args(["-c", "import asyncssh; print(asyncssh.__version__)"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        let version = match probe(&python) {
            Some(v) => v,
            None => {
                println!("  pip install asyncssh (into {})", venv.display());
                pip_install(&python, "asyncssh")?;
                probe(&python).ok_or("asyncssh installed but not importable")?
            }
        };
        let script = dir.join("asyncssh_peer.py");
        std::fs::write(&script, SCRIPT).map_err(|e| format!("cannot write the script: {e}"))?;
        Ok(Self {
            python,
            script,
            version,
        })
    }

    /// Runs one mode of the script; returns its `RESULT k=v …` line as a map.
    pub fn run(
        &self,
        ssh: &OpenSsh,
        mode: &str,
        args: &[(&str, String)],
    ) -> anyhow::Result<HashMap<String, String>> {
        let out = self
            .command(ssh, mode, args)
            .stdin(Stdio::null())
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(line) = stdout.lines().rev().find(|l| l.starts_with("RESULT ")) else {
            bail!(
                "asyncssh {mode} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
        };
        Ok(parse_kv(line.trim_start_matches("RESULT ")))
    }

    /// The script in `mode` against the testbed, with `args`, not started.
    pub fn command(&self, ssh: &OpenSsh, mode: &str, args: &[(&str, String)]) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script)
            .arg(format!("mode={mode}"))
            .arg(format!("host={}", ssh.host))
            .arg(format!("port={}", ssh.port))
            .arg(format!("user={}", ssh.user))
            .arg(format!("key={}", ssh.key.display()))
            .arg(format!("known_hosts={}", ssh.known_hosts.display()));
        for (k, v) in args {
            cmd.arg(format!("{k}={v}"));
        }
        if let Some((usage, v2)) = crate::stats::tree_cpu_file() {
            cmd.env("SWB_CPU_USAGE", usage)
                .env("SWB_CPU_V2", if v2 { "1" } else { "0" });
        }
        cmd
    }
}

pub fn parse_kv(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Creates a Python venv at `venv` unless it exists; returns its interpreter. `Err` is a note
/// for the report.
pub fn ensure_venv(venv: &Path) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    if !python.exists() {
        println!("  creating a Python venv in {}", venv.display());
        let out = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .output()
            .map_err(|e| format!("python3 not runnable: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "python3 -m venv failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(python)
}

/// `python -m pip install <package>` (quiet, bounded retries); `Err` is a note for the report.
pub fn pip_install(python: &std::path::Path, package: &str) -> Result<(), String> {
    let out = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--timeout",
            "30",
            "--retries",
            "2",
            package,
        ])
        .output()
        .map_err(|e| format!("pip not runnable: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "pip install {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    ))
}
