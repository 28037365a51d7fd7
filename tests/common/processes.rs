//! Remote processes of the testbed (which runs on this machine), found by command line.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// A token unique to this process and call, used to find remote processes by command line.
pub fn token() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "{}{:04}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Processes on the server (this machine) whose command line contains `pattern`.
pub fn remote_processes(pattern: &str) -> Vec<String> {
    let out = std::process::Command::new("pgrep")
        .args(["-a", "-f", pattern])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.contains("pgrep"))
        .map(str::to_owned)
        .collect()
}

/// Waits up to `limit` for no process matching `pattern` to remain.
pub async fn wait_until_gone(pattern: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = remote_processes(pattern);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
