//! Shared helpers: start a real sshd testbed and point an executor at it.
#![allow(dead_code)]

pub mod differential;
mod processes;

// Not every test binary uses all three.
#[allow(unused_imports)]
pub use processes::{remote_processes, token, wait_until_gone};

use swiftide_ssh_executor::{Execution, SshExecutor, SshExecutorBuilder};
use swiftide_ssh_testbed::{DockerTestbed, Testbed};

pub fn testbed() -> Testbed {
    Testbed::start().unwrap_or_else(|e| panic!("cannot start the sshd testbed: {e}"))
}

pub fn unprivileged_testbed() -> Testbed {
    Testbed::builder()
        .unprivileged_user()
        .start()
        .unwrap_or_else(|e| panic!("cannot start the unprivileged sshd testbed: {e}"))
}

/// A builder for `testbed` with key auth and strict host-key checking.
pub fn builder(testbed: &Testbed) -> SshExecutorBuilder {
    key_auth_builder(
        &testbed.host(),
        testbed.port(),
        testbed.user(),
        testbed.private_key_path(),
        testbed.known_hosts_path(),
    )
}

/// An executor builder for a Docker testbed: its key, strict host-key checking against its
/// known_hosts.
pub fn docker_builder(testbed: &DockerTestbed) -> SshExecutorBuilder {
    key_auth_builder(
        &testbed.host(),
        testbed.port(),
        testbed.user(),
        testbed.private_key_path(),
        testbed.known_hosts_path(),
    )
}

/// What both testbeds' builders share (the two testbed types have no common trait).
fn key_auth_builder(
    host: &str,
    port: u16,
    user: &str,
    key: &std::path::Path,
    known_hosts: &std::path::Path,
) -> SshExecutorBuilder {
    SshExecutor::builder()
        .host(host)
        .port(port)
        .user(user)
        .private_key_file(key)
        .known_hosts_file(known_hosts)
}

pub async fn executor(testbed: &Testbed) -> SshExecutor {
    builder(testbed)
        .build()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the testbed: {e}\n{}", testbed.sshd_log()))
}

/// Runs `<before>echo <i>` for `i` in `0..n`, all at once, and checks that each one printed
/// its own number; returns the executions in order.
pub async fn echo_concurrently(ex: &SshExecutor, n: usize, before: &str) -> Vec<Execution> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let ex = ex.clone();
            let command = format!("{before}echo {i}");
            tokio::spawn(async move { ex.run(&command).await })
        })
        .collect();
    let mut runs = Vec::with_capacity(n);
    for (i, task) in tasks.into_iter().enumerate() {
        let run = task.await.unwrap().unwrap();
        assert_eq!(run.stdout(), format!("{i}\n").as_bytes());
        runs.push(run);
    }
    runs
}

/// Runs `ssh-keygen` with `args`, failing the test with its output if it fails.
pub fn ssh_keygen(args: &[&std::ffi::OsStr]) {
    let out = std::process::Command::new("ssh-keygen")
        .args(args)
        .output()
        .expect("ssh-keygen");
    assert!(
        out.status.success(),
        "ssh-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Signs `key`'s public half with `ca` for `principal`; returns the certificate's path.
pub fn certify(
    ca: &std::path::Path,
    key: &std::path::Path,
    principal: &str,
    name: &str,
) -> std::path::PathBuf {
    let dir = ca.parent().unwrap();
    let public = dir.join(format!("{name}.pub"));
    let derived = std::process::Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(key)
        .output()
        .unwrap();
    assert!(derived.status.success());
    std::fs::write(&public, derived.stdout).unwrap();
    ssh_keygen(&[
        "-q".as_ref(),
        "-s".as_ref(),
        ca.as_os_str(),
        "-I".as_ref(),
        "swiftide-ssh-test".as_ref(),
        "-n".as_ref(),
        principal.as_ref(),
        "-V".as_ref(),
        "-5m:+1h".as_ref(),
        public.as_os_str(),
    ]);
    dir.join(format!("{name}-cert.pub"))
}

/// A new ed25519 user CA in `dir` (private key `dir/user-ca`, public `dir/user-ca.pub`).
pub fn user_ca(dir: &std::path::Path) -> std::path::PathBuf {
    let ca = dir.join("user-ca");
    ssh_keygen(&[
        "-q".as_ref(),
        "-t".as_ref(),
        "ed25519".as_ref(),
        "-N".as_ref(),
        "".as_ref(),
        "-f".as_ref(),
        ca.as_os_str(),
    ]);
    ca
}

/// The `cursor: ...` value of a job tool's text (every door renders it the same way).
pub fn job_cursor(text: &str) -> String {
    text.lines()
        .find_map(|line| line.strip_prefix("cursor: "))
        .unwrap_or_else(|| panic!("no cursor in {text:?}"))
        .to_owned()
}

/// The lines of one stream (`stdout`, `stderr`) in a job tool's output text, each with its
/// newline; empty when the text has no such section.
pub fn job_section(text: &str, stream: &str) -> String {
    let header = format!("--- {stream} ---");
    let mut lines = text.lines().skip_while(|line| *line != header);
    if lines.next().is_none() {
        return String::new();
    }
    lines
        .take_while(|line| {
            !(line.starts_with("--- ")
                || line.starts_with('[')
                || line.starts_with("cursor: ")
                || *line == "(no new output)")
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// `python3 -m http.server` as a job on the testbed's host (this machine), serving `dir`,
/// on a free port; returns the job and the port once it answers.
pub async fn http_server_job(
    executor: &SshExecutor,
    dir: &std::path::Path,
) -> (swiftide_ssh_executor::Job, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let job = executor
        .spawn_job(
            &format!("exec python3 -m http.server {port} --bind 127.0.0.1"),
            swiftide_ssh_executor::JobOptions::new().current_dir(dir),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the HTTP server job never listened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (job, port)
}

/// `GET path` from `addr` (HTTP/1.0: the server closes when done), the whole response,
/// within 30 s.
pub async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        String::from_utf8_lossy(&response).into_owned()
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), fetch)
        .await
        .expect("no HTTP response within 30 s")
}

/// The `swiftide-ssh-runner` helper (crate `runner/`), built for this machine in the
/// profile of these tests. Another package's binary has no `CARGO_BIN_EXE_` here, so cargo
/// is asked for it once per test process: a no-op after `cargo test --workspace`, which
/// builds it already, and a build of the helper alone (std and rustix) otherwise.
pub fn runner_helper_path() -> std::path::PathBuf {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        // This test binary is `<target>/<profile>/deps/<name>`.
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(std::path::Path::parent)
            .expect("<target>/<profile>");
        let target_dir = profile_dir.parent().expect("<target>");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet", "-p", "swiftide-ssh-runner", "--bin"])
            .arg("swiftide-ssh-runner")
            .arg("--target-dir")
            .arg(target_dir);
        if profile_dir.file_name() == Some(std::ffi::OsStr::new("release")) {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "cargo could not build the runner helper");
        profile_dir.join("swiftide-ssh-runner")
    })
    .clone()
}

/// The helper's bytes (see [`runner_helper_path`]).
pub fn runner_helper() -> Vec<u8> {
    std::fs::read(runner_helper_path()).expect("the runner helper")
}

/// Waits up to 10 s for the executor's statistics to satisfy `ready` (a runner started in
/// the background, a fallback recorded) and returns the last snapshot.
pub async fn stats_when(
    executor: &SshExecutor,
    ready: impl Fn(&swiftide_ssh_executor::PoolStats) -> bool,
) -> swiftide_ssh_executor::PoolStats {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let stats = executor.pool_stats();
        if ready(&stats) || std::time::Instant::now() >= deadline {
            return stats;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
