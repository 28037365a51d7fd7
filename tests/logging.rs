//! What the crate logs, captured at every level. A test binary of its own: tracing caches
//! per-callsite interest process-wide, and tests running in parallel with no subscriber can
//! make a thread-local capture miss events.

mod common;

use std::time::Duration;

use swiftide_ssh_executor::{Runner, SshExecutor};
use swiftide_ssh_testbed::{LoginShell, Testbed};

/// Collects everything the crate logs, at every level, into a buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Captures what this thread logs at `level` and above until the guard is dropped (the tests
/// run on current-thread runtimes, so the driver tasks log here too).
fn capture(level: tracing::Level) -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

#[tokio::test(flavor = "current_thread")]
async fn logs_at_every_level_hold_no_secrets_or_file_contents() {
    use swiftide_core::{Command, ToolExecutor};
    let (captured, _guard) = capture(tracing::Level::TRACE);

    let tb = Testbed::builder()
        .unprivileged_user()
        .password_auth(true)
        .start()
        .unwrap();
    let ex = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .password(swiftide_ssh_testbed::USER_PASSWORD)
        .envs([("API_TOKEN", "s3cret-env-value")])
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap();
    let path = tb.scratch_dir().join("secret.txt");
    ex.exec_cmd(&Command::write_file(&path, "s3cret-file-content"))
        .await
        .unwrap();
    ex.exec_cmd(&Command::read_file(&path)).await.unwrap();
    ex.exec_cmd(&Command::shell("echo s3cret-command-output; exit 3"))
        .await
        .unwrap_err();
    ex.exec_cmd(&Command::shell("sleep 5").with_timeout(Duration::from_millis(100)))
        .await
        .unwrap_err();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("command finished"),
        "logging was captured: {logs}"
    );
    for secret in [
        swiftide_ssh_testbed::USER_PASSWORD,
        "s3cret-env-value",
        "s3cret-file-content",
        "s3cret-command-output",
    ] {
        assert!(!logs.contains(secret), "{secret} leaked into logs:\n{logs}");
    }
}

/// A `~/.bashrc` that sleeps 100 ms before its interactive guard, as a `pyenv init` or `nvm`
/// above it would (Debian's bash reads it for commands over SSH): the executor says so once
/// per connection, at `warn` level, with the figure, the cause and the remedy, and
/// `PoolStats` shows the figure. A quiet account's login shell is not reported.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_login_shell_is_reported_once_per_connection() {
    let (captured, _guard) = capture(tracing::Level::WARN);
    let warnings = || {
        let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        logs.lines()
            .filter(|line| line.contains("takes") && line.contains("to start"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };

    let slow = Testbed::builder()
        .login_shell(LoginShell::Bash)
        .home_file(".bashrc", "sleep 0.1\n[ -z \"$PS1\" ] && return\n")
        .start()
        .unwrap();
    // Measured on per-exec commands: through the resident runner the login shell starts
    // once per connection, not once per command.
    let ex = common::builder(&slow)
        .runner(Runner::PerExec)
        .max_connections(1)
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(ex.run("echo hi").await.unwrap().stdout(), b"hi\n");
    }
    let stats = ex.pool_stats();
    let figure = stats.login_shell_startup.expect("measured");
    eprintln!("figure: login shell start-up with a sleeping ~/.bashrc: {figure:?}");
    assert!(
        figure >= Duration::from_millis(100) && figure < Duration::from_secs(2),
        "{stats:?}"
    );
    let seen = warnings();
    assert_eq!(seen.len(), 1, "one warning per connection: {seen:#?}");
    let warning = &seen[0];
    eprintln!("warning: {warning}");
    let millis = figure.as_millis().to_string();
    for part in [
        " WARN ",
        &format!("takes {millis} ms"),
        "(bash)",
        &slow.port().to_string(),
        "~/.bashrc",
        "guard",
        "quiet login shell",
    ] {
        assert!(warning.contains(part), "{part:?} missing: {warning}");
    }

    // A second connection: a second warning.
    let other = common::builder(&slow)
        .runner(Runner::PerExec)
        .build()
        .await
        .unwrap();
    other.run("true").await.unwrap();
    assert_eq!(warnings().len(), 2, "{:#?}", warnings());
    drop((ex, other));

    let quiet = Testbed::builder()
        .login_shell(LoginShell::Bash)
        .start()
        .unwrap();
    let ex = common::builder(&quiet)
        .runner(Runner::PerExec)
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        ex.run("true").await.unwrap();
    }
    let figure = ex.pool_stats().login_shell_startup.expect("measured");
    eprintln!("figure: login shell start-up of a quiet bash account: {figure:?}");
    assert!(figure < Duration::from_millis(50), "{figure:?}");
    assert_eq!(
        warnings().len(),
        2,
        "the quiet account warned: {:#?}",
        warnings()
    );
}

/// Every process's argv and environment on the host (this machine), read from `/proc`.
fn proc_texts() -> Vec<(String, Vec<u8>)> {
    let mut texts = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return texts;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for file in ["cmdline", "environ"] {
            if let Ok(bytes) = std::fs::read(entry.path().join(file)) {
                texts.push((format!("/proc/{name}/{file}"), bytes));
            }
        }
    }
    texts
}

/// The become password travels only on the channel, to the tool's prompt: it is in no
/// process's argv or environment on the host while escalations run (sampled every
/// millisecond), not in sshd's log at `LogLevel DEBUG3`, not in the crate's logs at any
/// level, and not in errors, `Debug` output or fleet records.
#[tokio::test(flavor = "current_thread")]
async fn the_become_password_is_in_no_argv_environment_log_or_error() {
    use swiftide_ssh_executor::{Become, Fleet, JobOptions, Secret};
    use swiftide_ssh_testbed::{BECOME_PASSWORD, Escalation};
    let (captured, _guard) = capture(tracing::Level::TRACE);
    let tb = Testbed::builder()
        .escalation(Escalation::SudoPassword)
        .sshd_config_line("LogLevel DEBUG3")
        .start()
        .unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut hits, mut samples) = (Vec::new(), 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (path, bytes) in proc_texts() {
                    if bytes
                        .windows(BECOME_PASSWORD.len())
                        .any(|w| w == BECOME_PASSWORD.as_bytes())
                    {
                        hits.push(path);
                    }
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            (hits, samples)
        })
    };

    let become_root = || Become::sudo().password(Secret::new(BECOME_PASSWORD));
    // Fresh connections, so that sudo asks every time (it keeps an authentication for a
    // connection): commands, a file, a job.
    for _ in 0..5 {
        let ex = common::executor(&tb)
            .await
            .with_become(become_root())
            .unwrap();
        assert_eq!(ex.run("id -u; sleep 0.05").await.unwrap().stdout(), b"0\n");
    }
    let ex = common::executor(&tb)
        .await
        .with_become(become_root())
        .unwrap();
    assert!(ex.read_file_bytes("/etc/shadow".as_ref()).await.is_ok());
    let job = ex.spawn_job("echo job", JobOptions::new()).await.unwrap();
    job.wait(Duration::from_secs(20)).await.unwrap();
    job.remove().await.unwrap();
    // A wrong one, through an error and a fleet record.
    let wrong_password = format!("{BECOME_PASSWORD}-wrong");
    let wrong = common::executor(&tb)
        .await
        .with_become(Become::sudo().password(Secret::new(wrong_password.clone())))
        .unwrap();
    let error = wrong.run("true").await.unwrap_err();
    let fleet = Fleet::new([common::builder(&tb).build_lazy().unwrap()])
        .with_become(Become::sudo().password(Secret::new(wrong_password.clone())))
        .unwrap();
    let report = fleet.run("true", |_| {}).await;
    let records = serde_json::to_string(&report.records(false)).unwrap();

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (hits, samples) = watcher.join().unwrap();
    assert!(samples > 20, "{samples} samples of /proc");
    assert!(hits.is_empty(), "the password is visible in {hits:?}");
    let sshd_log = tb.sshd_log();
    assert!(sshd_log.contains("debug3"), "sshd logged at DEBUG3");
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("answering the escalation's prompt"),
        "logging was captured"
    );
    for (what, text) in [
        ("sshd's log", sshd_log),
        ("the crate's logs", logs),
        ("the error", format!("{error} {error:?}")),
        ("the executor", format!("{wrong:?}")),
        ("the fleet's records", records),
    ] {
        assert!(
            !text.contains(BECOME_PASSWORD),
            "the password is in {what}:\n{text}"
        );
    }
    eprintln!("figure: {samples} samples of every process's argv and environment, no password");
}
