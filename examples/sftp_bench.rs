//! Measures file transfer and `stream_files` speed against a local sshd testbed, next to
//! OpenSSH's `scp` on the same files in the same run.
//!
//! Run this example with (release: debug builds of the SSH stack are several times slower):
//!
//! ```sh
//! cargo run --release --ignore-rust-version --example sftp_bench
//! ```
//!
//! `BENCH_MIB` sets the file size (default 100), `BENCH_FILES` the tree size (default 10000).

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use futures::StreamExt;
use rand::RngCore;
use swiftide_core::ToolExecutor;
use swiftide_ssh_executor::SshExecutor;
use swiftide_ssh_testbed::Testbed;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mib_per_s(bytes: usize, took: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / took.as_secs_f64()
}

/// `scp` from `from` to `to` (one side prefixed with `host:`), returning the time taken.
fn scp(testbed: &Testbed, from: &str, to: &str) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let status = Command::new("scp")
        .arg("-q")
        .args(["-F", "/dev/null", "-P", &testbed.port().to_string(), "-i"])
        .arg(testbed.private_key_path())
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args(["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"])
        .args([from, to])
        .status()?;
    if !status.success() {
        return Err(format!("scp failed: {status}").into());
    }
    Ok(started.elapsed())
}

async fn transfer(
    executor: &SshExecutor,
    testbed: &Testbed,
    dir: &Path,
    size: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut content = vec![0u8; size];
    rand::rng().fill_bytes(&mut content);
    let remote = dir.join("big.bin");

    let started = Instant::now();
    executor.write_file_bytes(&remote, &content).await?;
    let write = started.elapsed();
    let started = Instant::now();
    let back = executor.read_file_bytes(&remote).await?;
    let read = started.elapsed();
    assert!(back == content, "round trip changed the bytes");

    let local = dir.join("local.bin");
    std::fs::write(&local, &content)?;
    let target = format!(
        "{}@{}:{}",
        testbed.user(),
        testbed.host(),
        dir.join("scp.bin").display()
    );
    let scp_up = scp(testbed, &local.display().to_string(), &target)?;
    let scp_down = scp(
        testbed,
        &target,
        &dir.join("scp-back.bin").display().to_string(),
    )?;

    let mib = size / (1024 * 1024);
    println!(
        "{mib} MiB write (upload):  executor {:7.1} MiB/s   scp {:7.1} MiB/s",
        mib_per_s(size, write),
        mib_per_s(size, scp_up)
    );
    println!(
        "{mib} MiB read (download): executor {:7.1} MiB/s   scp {:7.1} MiB/s",
        mib_per_s(size, read),
        mib_per_s(size, scp_down)
    );
    Ok(())
}

async fn tree(
    executor: &SshExecutor,
    dir: &Path,
    files: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = dir.join("tree");
    for i in 0..files {
        let sub = root.join(format!("d{:03}", i % 100));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\n"))?;
    }
    let started = Instant::now();
    let mut stream = executor.stream_files(&root, None).await?;
    let mut count = 0;
    while let Some(item) = stream.next().await {
        item?;
        count += 1;
    }
    let took = started.elapsed();
    println!(
        "stream_files: {count} files in {took:.2?} ({:.0} files/s)",
        count as f64 / took.as_secs_f64()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testbed = Testbed::start()?;
    let executor = SshExecutor::builder()
        .host(testbed.host())
        .port(testbed.port())
        .user(testbed.user())
        .private_key_file(testbed.private_key_path())
        .known_hosts_file(testbed.known_hosts_path())
        .build()
        .await?;
    let dir = testbed.scratch_dir().to_path_buf();
    transfer(
        &executor,
        &testbed,
        &dir,
        env_number("BENCH_MIB", 100) * 1024 * 1024,
    )
    .await?;
    tree(&executor, &dir, env_number("BENCH_FILES", 10_000)).await?;
    Ok(())
}
