//! What the crate logs, captured at every level. A test binary of its own: tracing caches
//! per-callsite interest process-wide, and tests running in parallel with no subscriber can
//! make a thread-local capture miss events.

use std::time::Duration;

use swiftide_ssh_executor::SshExecutor;
use swiftide_ssh_testbed::Testbed;

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

#[tokio::test(flavor = "current_thread")]
async fn logs_at_every_level_hold_no_secrets_or_file_contents() {
    use swiftide_core::{Command, ToolExecutor};
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

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
