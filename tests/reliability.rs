//! Faults and hostile conditions against real sshd processes: client death, broken
//! connections, host-key files in all their forms, and what ends up in logs.

mod common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::{
    builder, echo_concurrently, executor, remote_processes, testbed, token, wait_until_gone,
};
use swiftide_ssh_executor::{Error, ExitStatus, Runner, SshExecutor};
use swiftide_ssh_testbed::Testbed;

const CHILD_ENV: &str = "SWIFTIDE_SSH_RELIABILITY_CHILD";

/// In child mode (see `client_death_kills_the_remote_group`), connect with the settings in
/// the environment, start the command and wait to be killed.
async fn run_as_child(spec: &str) {
    let fields: Vec<&str> = spec.split('\u{1f}').collect();
    let [host, port, user, key, known_hosts, command, disconnect_kill] = fields[..] else {
        panic!("bad child spec {spec:?}");
    };
    let ex = SshExecutor::builder()
        .host(host)
        .port(port.parse().unwrap())
        .user(user)
        .private_key_file(key)
        .known_hosts_file(known_hosts)
        .kill_on_disconnect(disconnect_kill == "1")
        .build()
        .await
        .unwrap();
    let _ = ex.run(command).await;
    unreachable!("the parent kills this process while the command runs");
}

/// Starts this test binary again as a client that runs `command`, and returns it.
fn spawn_client(
    tb: &Testbed,
    test_name: &str,
    command: &str,
    kill_on_disconnect: bool,
) -> std::process::Child {
    let spec = [
        tb.host(),
        tb.port().to_string(),
        tb.user().to_owned(),
        tb.private_key_path().display().to_string(),
        tb.known_hosts_path().display().to_string(),
        command.to_owned(),
        if kill_on_disconnect { "1" } else { "0" }.to_owned(),
    ]
    .join("\u{1f}");
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_for_processes(pattern: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(pattern).len() < count {
        assert!(
            Instant::now() < deadline,
            "the command never started: {pattern}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn client_death_kills_the_remote_group() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return run_as_child(&spec).await;
    }
    let tb = testbed();
    let t = token();
    let pattern = format!("^sleep 300.{t}");
    let mut client = spawn_client(
        &tb,
        "client_death_kills_the_remote_group",
        &format!("sleep 300.{t} & sleep 300.{t}"),
        true,
    );
    wait_for_processes(&pattern, 2).await;
    client.kill().unwrap(); // SIGKILL: no destructor, no goodbye
    client.wait().unwrap();
    let started = Instant::now();
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "survivors after the client died: {left:?}");
    eprintln!(
        "figure: remote group gone after client SIGKILL = {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn without_kill_on_disconnect_sshd_leaves_the_group_running() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return run_as_child(&spec).await;
    }
    // The control experiment for the test above: it shows that the command's supervisor,
    // not sshd, does the killing.
    let tb = testbed();
    let t = token();
    let pattern = format!("^sleep 300.{t}");
    let mut client = spawn_client(
        &tb,
        "without_kill_on_disconnect_sshd_leaves_the_group_running",
        &format!("sleep 300.{t}"),
        false,
    );
    wait_for_processes(&pattern, 1).await;
    client.kill().unwrap();
    client.wait().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let left = remote_processes(&pattern);
    let _ = std::process::Command::new("pkill")
        .args(["-f", &pattern])
        .status();
    assert_eq!(
        left.len(),
        1,
        "sshd itself should not have killed it: {left:?}"
    );
}

#[tokio::test]
async fn a_killed_server_connection_kills_the_group_and_reports_connection_lost() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let t = token();
    let pattern = format!("^sleep 300.{t}");
    let running = {
        let ex = ex.clone();
        let command = format!("sleep 300.{t} & sleep 300.{t}");
        tokio::spawn(async move { ex.run(&command).await })
    };
    wait_for_processes(&pattern, 2).await;
    let pids: Vec<String> = tb.connection_pids().iter().map(u32::to_string).collect();
    assert!(!pids.is_empty());
    let killed_at = Instant::now();
    std::process::Command::new("kill")
        .arg("-KILL")
        .args(&pids)
        .status()
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("no hang")
        .unwrap()
        .unwrap_err();
    eprintln!(
        "figure: dead connection (sshd killed) reported = {:?}",
        killed_at.elapsed()
    );
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    eprintln!(
        "figure: remote group gone after its connection died = {:?}",
        killed_at.elapsed()
    );
    assert!(left.is_empty(), "survivors: {left:?}");
    // The pool dials a new connection for the next command.
    assert_eq!(ex.run("echo again").await.unwrap().stdout(), b"again\n");
}

#[tokio::test]
async fn commands_run_at_most_once_when_the_server_restarts_under_load() {
    let mut tb = testbed();
    let ex = builder(&tb)
        .max_connections(4)
        .connect_timeout(Duration::from_secs(5))
        .pool_wait_timeout(Duration::from_secs(20))
        .build()
        .await
        .unwrap();
    let marks = tb.scratch_dir().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let mut report = run_through_restarts(&ex, &marks, 1000, 64, || {
        tb.restart().unwrap();
    })
    .await;
    report.duplicated = local_duplicates(&marks);
    report.check("sshd restart", 2 * 64);
    // The pool recovered without a new executor.
    assert_eq!(
        ex.run("echo recovered").await.unwrap().stdout(),
        b"recovered\n"
    );
}

/// What happened to the commands of [`run_through_restarts`].
#[derive(Debug, Default)]
struct OutageReport {
    ok: usize,
    /// `Error::ConnectionLost`: the command may have run.
    lost: usize,
    /// Ran, and died with its server (a signal or no status): also "may have run".
    killed: usize,
    /// Any other error: a call that could have waited and succeeded.
    other: Vec<String>,
    /// Calls that did not return within 60 s.
    hung: usize,
    duplicated: usize,
    slowest: Duration,
    pool: String,
}

impl OutageReport {
    fn check(&self, what: &str, in_flight: usize) {
        eprintln!("figure: {what} under load = {self:?}");
        assert_eq!(self.hung, 0, "{what}: calls hung");
        assert!(
            self.other.is_empty(),
            "{what}: {} errors other than ConnectionLost: {:?}",
            self.other.len(),
            &self.other[..self.other.len().min(10)]
        );
        assert_eq!(self.duplicated, 0, "{what}: commands ran twice");
        assert!(
            self.lost + self.killed <= in_flight,
            "{what}: {} may-have-run failures, more than the {in_flight} commands in flight",
            self.lost + self.killed
        );
        assert!(self.ok > 0);
    }
}

/// Runs `total` commands at `concurrency`, each appending a line to its own file under
/// `marks` (running twice would leave two), while `restart` is called twice, 600 ms apart.
async fn run_through_restarts(
    ex: &SshExecutor,
    marks: &std::path::Path,
    total: usize,
    concurrency: usize,
    mut restart: impl FnMut(),
) -> OutageReport {
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
    let tasks: Vec<_> = (0..total)
        .map(|i| {
            let ex = ex.clone();
            let mark = marks.join(i.to_string());
            let limit = limit.clone();
            tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.unwrap();
                let command = format!("echo x >> {}; sleep 0.05; echo {i}", mark.display());
                let started = Instant::now();
                let result = tokio::time::timeout(Duration::from_secs(60), ex.run(&command)).await;
                (i, result, started.elapsed())
            })
        })
        .collect();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        restart();
    }
    let mut report = OutageReport::default();
    for task in tasks {
        let (i, result, took) = task.await.unwrap();
        report.slowest = report.slowest.max(took);
        let Ok(result) = result else {
            report.hung += 1;
            continue;
        };
        match result {
            Ok(out) if out.status == ExitStatus::Code(0) => {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout()),
                    format!("{i}\n"),
                    "command {i}: {out:?}"
                );
                report.ok += 1;
            }
            Ok(out) => {
                assert!(!out.status.success());
                report.killed += 1;
            }
            Err(Error::ConnectionLost { .. }) => report.lost += 1,
            Err(e) => report.other.push(e.to_string()),
        }
    }
    let stats = ex.pool_stats();
    report.pool = format!(
        "dials {} (retried {}), commands started again {}, refused opens {}",
        stats.dials, stats.dial_retries, stats.command_retries, stats.channel_open_refusals
    );
    report
}

/// Mark files under `marks` (on this machine) with more than one line.
fn local_duplicates(marks: &std::path::Path) -> usize {
    std::fs::read_dir(marks)
        .unwrap()
        .filter(|entry| {
            let path = entry.as_ref().unwrap().path();
            std::fs::read_to_string(path).unwrap().lines().count() > 1
        })
        .count()
}

/// The same load through two `docker restart`s of the server's container (stop, then start:
/// every connection drops and the port refuses for about a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_at_most_once_through_container_restarts() {
    use swiftide_ssh_testbed::DockerTestbed;
    if let Err(reason) = DockerTestbed::available() {
        swiftide_ssh_testbed::skip_unless_ci(&reason, "bash testbed/docker/prepare.sh");
        return;
    }
    let mut tb = DockerTestbed::start().unwrap();
    let ex = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file(tb.private_key_path())
        .known_hosts_file(tb.known_hosts_path())
        .max_connections(4)
        .connect_timeout(Duration::from_secs(10))
        .pool_wait_timeout(Duration::from_secs(30))
        // Docker's port proxy keeps the client side of a connection open when the container
        // goes away, so a dead connection is silent: keepalives find it.
        .keepalive_interval(Some(Duration::from_secs(1)))
        .keepalive_max(3)
        .build()
        .await
        .unwrap();
    let marks = std::path::Path::new("/tmp/marks");
    ex.run(&format!("mkdir -p {}", marks.display()))
        .await
        .unwrap();
    let mut report = run_through_restarts(&ex, marks, 1000, 64, || {
        tb.restart().unwrap();
    })
    .await;
    // /tmp survives `docker restart` (same container): count lines per mark file there.
    let counted = tb
        .run("for f in /tmp/marks/*; do [ $(wc -l < $f) -gt 1 ] && echo dup; done; true")
        .unwrap();
    report.duplicated = String::from_utf8_lossy(&counted.stdout).lines().count();
    report.check("docker restart", 2 * 64);
    assert_eq!(
        ex.run("echo recovered").await.unwrap().stdout(),
        b"recovered\n"
    );
}

/// A call made while the server is down rides through an outage shorter than its connect
/// budget: the dial is retried with backoff until the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_rides_through_a_short_outage() {
    let mut tb = testbed();
    let ex = builder(&tb)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    tb.stop();
    let started = Instant::now();
    let call = {
        let ex = ex.clone();
        tokio::spawn(async move { ex.run("echo back").await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    tb.restart().unwrap();
    let run = call.await.unwrap().unwrap();
    assert_eq!(run.stdout(), b"back\n");
    let stats = ex.pool_stats();
    eprintln!(
        "figure: call during a 0.8 s outage answered after {:?}; {} dial retries",
        started.elapsed(),
        stats.dial_retries
    );
    assert!(stats.dial_retries > 0, "{stats:?}");

    // Refused credentials are not retried: they fail at once.
    let started = Instant::now();
    let refused = builder(&tb)
        .user("no-such-user-here")
        .connect_timeout(Duration::from_secs(5))
        .build()
        .await;
    assert!(
        matches!(refused, Err(Error::AuthRejected { .. })),
        "{refused:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A server allowing 2 sessions per connection: the pool learns it from the first refusal
/// and queues commands instead of knocking again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_session_server_refuses_few_channel_opens() {
    let tb = Testbed::builder().max_sessions(2).start().unwrap();
    let ex = executor(&tb).await;
    echo_concurrently(&ex, 100, "sleep 0.05; ").await;
    let stats = ex.pool_stats();
    eprintln!(
        "figure: 100 commands on a MaxSessions 2 server: {} refused opens, {} dials",
        stats.channel_open_refusals, stats.dials
    );
    assert!(
        stats.channel_open_refusals <= 10,
        "{} refused opens for 100 commands: {stats:?}",
        stats.channel_open_refusals
    );
}

/// A fresh ed25519 public key ("type base64"), standing for a host's previous key.
fn old_key(tb: &Testbed) -> String {
    let path = tb.scratch_dir().join("old_host_key");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn known_hosts_with(tb: &Testbed, name: &str, content: &str) -> std::path::PathBuf {
    let path = tb.scratch_dir().join(name);
    std::fs::write(&path, content).unwrap();
    path
}

#[tokio::test]
async fn known_hosts_forms_openssh_understands_are_accepted() {
    let tb = testbed();
    let key = tb.host_public_key();
    let port = tb.port();
    // Hashed with OpenSSH's own tool.
    let hashed = known_hosts_with(&tb, "hashed", &format!("[127.0.0.1]:{port} {key}\n"));
    let status = std::process::Command::new("ssh-keygen")
        .arg("-H")
        .arg("-f")
        .arg(&hashed)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(std::fs::read_to_string(&hashed).unwrap().starts_with("|1|"));
    let variants = [
        ("hashed", hashed),
        (
            "wildcard",
            known_hosts_with(&tb, "wild", &format!("[127.0.0.*]:{port} {key}\n")),
        ),
        (
            "list and tab",
            known_hosts_with(&tb, "list", &format!("other,[127.0.0.1]:{port}\t{key}\n")),
        ),
        (
            "rotation: old key first",
            known_hosts_with(
                &tb,
                "rotation",
                &format!(
                    "[127.0.0.1]:{port} {}\n[127.0.0.1]:{port} {key}\n",
                    old_key(&tb)
                ),
            ),
        ),
    ];
    for (name, file) in variants {
        let result = builder(&tb).known_hosts_file(&file).build().await;
        assert!(result.is_ok(), "{name}: {:?}", result.err());
    }
}

#[tokio::test]
async fn revoked_and_unreadable_known_hosts_fail_closed() {
    let tb = testbed();
    let key = tb.host_public_key();
    let port = tb.port();
    let revoked = known_hosts_with(
        &tb,
        "revoked",
        &format!("[127.0.0.1]:{port} {key}\n@revoked * {key}\n"),
    );
    let err = builder(&tb)
        .known_hosts_file(&revoked)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::HostKeyRevoked { line: 2, .. }),
        "{err}"
    );

    let negated = known_hosts_with(
        &tb,
        "negated",
        &format!("[127.0.0.*]:{port},![127.0.0.1]:{port} {key}\n"),
    );
    let err = builder(&tb)
        .known_hosts_file(&negated)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownHostKey { .. }), "{err}");

    // A directory cannot be read as a file: refuse instead of treating it as empty.
    let err = builder(&tb)
        .known_hosts_file(tb.scratch_dir())
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::KnownHosts { .. }), "{err}");
    assert!(!tb.sshd_log().contains("Accepted"), "{}", tb.sshd_log());
}

#[tokio::test]
async fn secrets_never_show_in_debug_output() {
    let tb = testbed();
    let builder = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file_with_passphrase(tb.encrypted_private_key_path(), "s3cret-passphrase")
        .password("s3cret-password")
        .envs([("API_TOKEN", "s3cret-token")])
        .known_hosts_file(tb.known_hosts_path());
    let text = format!("{builder:?}");
    let ex = builder.build_lazy().unwrap();
    let text = format!("{text}\n{ex:?}");
    for secret in ["s3cret-passphrase", "s3cret-password", "s3cret-token"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert!(text.contains("API_TOKEN"), "names stay visible: {text}");
}

#[tokio::test]
async fn huge_binary_output_is_byte_exact() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let path = tb.scratch_dir().join("random.bin");
    let data: Vec<u8> = (0..8_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &data).unwrap();
    let out = ex.run(&format!("cat {}", path.display())).await.unwrap();
    assert!(out.stdout() == data, "8 MB of binary stdout differ");
    assert_eq!(out.status, ExitStatus::Code(0));
    assert!(out.chunks.len() > 1);
}

#[tokio::test]
async fn an_output_cap_keeps_head_and_tail_while_the_sink_sees_everything() {
    let tb = testbed();
    let ex = builder(&tb)
        .max_output_bytes(Some(1 << 20))
        .build()
        .await
        .unwrap();
    let mut streamed = 0u64;
    let total: u64 = 1 << 30;
    let rss_before = rss_kib();
    let out = ex
        .execute(
            &format!("printf HEAD; head -c {} /dev/zero; printf TAIL", total - 8),
            swiftide_ssh_executor::ExecOptions::default(),
            &mut |c| streamed += c.bytes().len() as u64,
        )
        .await
        .unwrap();
    assert_eq!(streamed, total);
    let grown = rss_kib().saturating_sub(rss_before);
    eprintln!("figure: 1 GiB streamed with a 1 MiB cap, client RSS grew by {grown} KiB");
    assert!(
        grown < 64 * 1024,
        "client memory grew by {grown} KiB for 1 GiB of output"
    );
    let kept = out.stdout();
    assert_eq!(kept.len(), 1 << 20);
    assert!(kept.starts_with(b"HEAD") && kept.ends_with(b"TAIL"));
    assert_eq!(out.omitted_bytes, total - (1 << 20));

    use swiftide_core::ToolExecutor;
    let text = ex
        .exec_cmd(&swiftide_core::Command::shell("seq 1 200000"))
        .await
        .unwrap()
        .to_string();
    assert!(text.starts_with("1\n2\n"), "{}", &text[..20]);
    assert!(text.ends_with("199999\n200000\n"));
    assert!(text.contains("bytes of output omitted ...]"));
}

#[tokio::test]
async fn accept_new_refuses_a_changed_key() {
    let tb = testbed();
    let file = known_hosts_with(
        &tb,
        "accept_new",
        &format!("[127.0.0.1]:{} {}\n", tb.port(), old_key(&tb)),
    );
    let err = builder(&tb)
        .accept_new_host_keys(&file)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::HostKeyMismatch { line: 1, .. }),
        "{err}"
    );
    // Nothing was appended.
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 1);
}

#[tokio::test]
async fn a_user_the_server_rejects_is_refused_by_name() {
    let tb = testbed();
    let err = builder(&tb).user("nobody-here").build().await.unwrap_err();
    match &err {
        Error::AuthRejected { user, tried, .. } => {
            assert_eq!(user, "nobody-here");
            assert!(
                tried.contains(&tb.private_key_path().display().to_string()),
                "{err}"
            );
        }
        other => panic!("expected AuthRejected, got {other}"),
    }
}

#[tokio::test]
async fn a_connection_storm_on_a_cold_pool_meets_server_limits_without_failures() {
    let tb = Testbed::builder()
        .max_sessions(10)
        .max_startups("10:30:100")
        .start()
        .unwrap();
    let ex = builder(&tb).max_connections(8).build_lazy().unwrap();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let ex = ex.clone();
            tokio::spawn(async move { ex.run(&format!("echo {i}")).await })
        })
        .collect();
    let mut failures = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(out) if out.stdout() == format!("{i}\n").as_bytes() => {}
            other => failures.push(format!("{i}: {other:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let stats = ex.pool_stats();
    assert!(stats.dials <= 8, "{stats:?}");
    eprintln!(
        "figure: storm (200 callers, cold pool) = 0 failures, {} dials; {stats:?}",
        stats.dials
    );
}

/// Opens refused by the server (it frees a session slot a little after the client sees the
/// channel close) make russh keep memory per refusal, so the pool replaces a connection after
/// a hundred-odd refusals. With one session per connection (`MaxSessions 1`) every open that
/// follows a close closely is refused, so refusals are frequent even though the pool knows
/// the limit; commands keep succeeding across the replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_recycled_after_many_refused_channel_opens() {
    let tb = Testbed::builder().max_sessions(1).start().unwrap();
    // Channel refusals are the per-exec path's: a command per channel (through the
    // resident runner, 4,000 commands on one runner channel were refused none).
    let ex = builder(&tb)
        .runner(Runner::PerExec)
        .max_connections(1)
        .channels_per_connection(1)
        .build()
        .await
        .unwrap();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(10));
    let mut rounds = 0;
    while ex.pool_stats().connections_recycled == 0 {
        rounds += 1;
        assert!(
            rounds <= 100,
            "no connection was recycled after {} refusals: {:?}",
            ex.pool_stats().channel_open_retries,
            ex.pool_stats()
        );
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let ex = ex.clone();
                let limit = limit.clone();
                tokio::spawn(async move {
                    let _permit = limit.acquire_owned().await.unwrap();
                    ex.run("echo x").await
                })
            })
            .collect();
        for task in tasks {
            let out = task.await.unwrap().unwrap();
            assert_eq!(out.stdout(), b"x\n");
        }
    }
    let stats = ex.pool_stats();
    eprintln!("figure: recycled after {rounds} rounds of 200 commands: {stats:?}");
    assert!(stats.channel_open_retries >= 128, "{stats:?}");
    // The next commands go to a new connection (dialed when the first of them needs it); the
    // recycled one closes once its commands are done and its idle slots are checked out
    // again; only one connection ever takes new work.
    for _ in 0..40 {
        ex.run("true").await.unwrap();
    }
    let stats = ex.pool_stats();
    assert!(
        stats.dials >= 2,
        "a new connection replaced the recycled one: {stats:?}"
    );
    assert!(
        stats.connections - stats.retiring_connections <= 1,
        "{stats:?}"
    );
    assert!(stats.connections_closed >= 1, "{stats:?}");
}

/// A server that allows fewer sessions than `channels_per_connection`: once its channels
/// have been refused, the pool places at most that many commands per connection (the rest
/// wait for a slot instead of being refused), and a replacement connection starts with the
/// learned limit instead of learning it again through failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_server_session_limit_is_learned_and_kept_across_connections() {
    let mut tb = Testbed::builder().max_sessions(2).start().unwrap();
    // Channel refusals are the per-exec path's: a command per channel (through the
    // resident runner, 4,000 commands on one runner channel were refused none).
    let ex = builder(&tb)
        .runner(Runner::PerExec)
        .max_connections(1)
        .channels_per_connection(4)
        .build()
        .await
        .unwrap();
    let run_concurrently = |count: usize, command: &'static str| {
        let tasks: Vec<_> = (0..count)
            .map(|_| {
                let ex = ex.clone();
                tokio::spawn(async move { ex.run(command).await })
            })
            .collect();
        async move {
            let mut results = Vec::new();
            for task in tasks {
                results.push(task.await.unwrap());
            }
            results
        }
    };

    // Two long commands hold both server sessions; a third one is refused once, which
    // teaches the pool the limit, and then waits for a free slot instead of failing.
    let holders = run_concurrently(2, "sleep 1.5");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let waited = ex.run("true").await.unwrap();
    assert!(waited.status.success());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "ran beside the two holders: {:?}",
        started.elapsed()
    );
    let refusals = ex.pool_stats().channel_open_refusals;
    assert!(refusals <= 2, "refused {refusals} times");
    for result in holders.await {
        assert!(result.unwrap().status.success());
    }

    // The limit is learned: four commands on the same connection now queue, two at a time.
    let started = Instant::now();
    for result in run_concurrently(4, "sleep 0.5").await {
        assert!(result.unwrap().status.success());
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "ran more than 2 at once"
    );

    // A new connection (the old one dies with the server) starts with the learned limit.
    // Without it, the two commands beyond the limit would each go through a full round of
    // refused opens (9 retries) before waiting.
    tb.restart().unwrap();
    let retries_before = ex.pool_stats().channel_open_retries;
    for result in run_concurrently(4, "sleep 1").await {
        assert!(result.unwrap().status.success());
    }
    let stats = ex.pool_stats();
    eprintln!("figure: learned session limit: {stats:?}");
    assert!(stats.dials >= 2, "{stats:?}");
    assert!(
        stats.channel_open_retries - retries_before < 9,
        "the new connection learned the limit again through refusals: {stats:?}"
    );
}

/// A caller that reads output more slowly than the server sends it does not make client
/// memory grow with the output: at most 16 MiB wait in the command's queue, then the
/// connection pauses until the caller catches up. Everything still arrives, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_caller_bounds_the_queued_output() {
    let tb = testbed();
    let ex = builder(&tb)
        .max_output_bytes(Some(1 << 20))
        .build()
        .await
        .unwrap();
    let total: u64 = 128 << 20;
    let rss_before = rss_kib();
    let mut streamed = 0u64;
    let mut peak = 0u64;
    let out = ex
        .execute(
            &format!("head -c {total} /dev/zero"),
            swiftide_ssh_executor::ExecOptions::default(),
            &mut |c| {
                streamed += c.bytes().len() as u64;
                // A slow sink: 1 ms per packet (~32 MiB/s), a tenth of the server's pace.
                std::thread::sleep(Duration::from_millis(1));
                if streamed % (4 << 20) < c.bytes().len() as u64 {
                    peak = peak.max(rss_kib().saturating_sub(rss_before));
                }
            },
        )
        .await
        .unwrap();
    assert_eq!(streamed, total);
    assert_eq!(out.status, ExitStatus::Code(0));
    eprintln!("figure: 128 MiB read by a slow caller, peak client RSS growth {peak} KiB");
    assert!(
        peak < 48 * 1024,
        "client memory grew by {peak} KiB while the caller lagged"
    );
}
