//! What the crate logs, captured at every level. A test binary of its own: tracing caches
//! per-callsite interest process-wide, and tests running in parallel with no subscriber can
//! make a thread-local capture miss events.

mod common;

use std::time::Duration;

use swiftide_ssh_executor::SshExecutor;
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
    let ex = common::builder(&slow)
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
    let other = common::builder(&slow).build().await.unwrap();
    other.run("true").await.unwrap();
    assert_eq!(warnings().len(), 2, "{:#?}", warnings());
    drop((ex, other));

    let quiet = Testbed::builder()
        .login_shell(LoginShell::Bash)
        .start()
        .unwrap();
    let ex = common::builder(&quiet).build().await.unwrap();
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
