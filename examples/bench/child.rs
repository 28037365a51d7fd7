//! Scenarios that measure client memory run in a fresh process (this binary re-executed with
//! `--child <kind> k=v …`), so that peak RSS (VmHWM) belongs to that scenario alone.

use std::{
    collections::HashMap,
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use swiftide_core::{Command as SwiftideCommand, CommandOutputChunk, ToolExecutor};
use swiftide_ssh_executor::SshExecutor;

use crate::{
    peers::parse_kv,
    raw,
    stats::{self_cpu_secs, self_hwm, self_rss},
};

/// Connection parameters handed to a child.
#[derive(Debug, Clone)]
pub struct Conn {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub key: PathBuf,
    pub known_hosts: PathBuf,
    pub host_key: String,
}

impl Conn {
    fn args(&self) -> Vec<String> {
        vec![
            format!("host={}", self.host),
            format!("port={}", self.port),
            format!("user={}", self.user),
            format!("key={}", self.key.display()),
            format!("known_hosts={}", self.known_hosts.display()),
            format!("host_key={}", self.host_key),
        ]
    }

    fn from_map(m: &HashMap<String, String>) -> anyhow::Result<Self> {
        let get = |k: &str| m.get(k).cloned().with_context(|| format!("missing {k}="));
        Ok(Self {
            host: get("host")?,
            port: get("port")?.parse()?,
            user: get("user")?,
            key: get("key")?.into(),
            known_hosts: get("known_hosts")?.into(),
            host_key: get("host_key")?,
        })
    }

    pub fn builder(&self) -> swiftide_ssh_executor::SshExecutorBuilder {
        SshExecutor::builder()
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .private_key_file(&self.key)
            .known_hosts_file(&self.known_hosts)
    }

    pub fn raw_target(&self) -> raw::Target {
        raw::Target {
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            key: self.key.clone(),
            host_key: self.host_key.clone(),
        }
    }
}

/// Parent side: runs `kind` in a child process and returns its `RESULT` map.
pub fn spawn(
    kind: &str,
    conn: &Conn,
    extra: &[(&str, String)],
) -> anyhow::Result<HashMap<String, String>> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("--child").arg(kind).args(conn.args());
    for (k, v) in extra {
        cmd.arg(format!("{k}={v}"));
    }
    let out = cmd.stdin(Stdio::null()).stderr(Stdio::inherit()).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(line) = stdout.lines().rev().find(|l| l.starts_with("RESULT ")) else {
        bail!("child {kind} failed ({}): {}", out.status, stdout.trim());
    };
    Ok(parse_kv(line.trim_start_matches("RESULT ")))
}

/// Child side: `args` are the `k=v` arguments after `--child <kind>`.
pub fn main(kind: &str, args: &[String]) -> anyhow::Result<()> {
    let map: HashMap<String, String> = args
        .iter()
        .filter_map(|a| a.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let conn = Conn::from_map(&map)?;
    let num = |k: &str| -> anyhow::Result<u64> {
        Ok(map
            .get(k)
            .with_context(|| format!("missing {k}="))?
            .parse()?)
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let result = match kind {
        "stream-ours" => runtime.block_on(stream_ours(&conn, num("bytes")?, None))?,
        "stream-ours-capped" => runtime.block_on(stream_ours(
            &conn,
            num("bytes")?,
            Some(num("cap")? as usize),
        ))?,
        "stream-raw" => runtime.block_on(stream_raw(&conn, num("bytes")?, false))?,
        "stream-raw-keep" => runtime.block_on(stream_raw(&conn, num("bytes")?, true))?,
        "mem-ours" => runtime.block_on(mem_ours(
            &conn,
            num("n")? as usize,
            map.get("lock").context("lock=")?,
        ))?,
        "mem-raw" => runtime.block_on(mem_raw(&conn, num("n")? as usize))?,
        other => bail!("unknown child kind {other}"),
    };
    println!("RESULT {result}");
    Ok(())
}

async fn stream_ours(conn: &Conn, bytes: u64, cap: Option<usize>) -> anyhow::Result<String> {
    let executor = conn.builder().max_output_bytes(cap).build().await?;
    executor.run("true").await?;
    let base = self_rss();
    let counted = Arc::new(AtomicU64::new(0));
    let sink_count = counted.clone();
    let mut sink = move |chunk: &CommandOutputChunk| {
        sink_count.fetch_add(chunk.as_bytes().len() as u64, Ordering::Relaxed);
    };
    let cpu = self_cpu_secs();
    let started = Instant::now();
    let output = executor
        .exec_cmd_streaming(
            &SwiftideCommand::shell(format!("head -c {bytes} /dev/zero")),
            &mut sink,
        )
        .await?;
    let elapsed = started.elapsed();
    let cpu = self_cpu_secs() - cpu;
    let returned = output.len();
    drop(output);
    Ok(format!(
        "secs={} cpu={cpu} bytes={} returned={} base_rss={} peak_rss={}",
        elapsed.as_secs_f64(),
        counted.load(Ordering::Relaxed),
        returned,
        base,
        self_hwm()
    ))
}

/// The floor: one raw russh channel. With `keep` it also keeps every chunk it received (as
/// any client that returns the whole output must), which costs fresh memory for every byte.
async fn stream_raw(conn: &Conn, bytes: u64, keep: bool) -> anyhow::Result<String> {
    let handle = raw::connect(&conn.raw_target(), true).await?;
    raw::exec(&handle, b"true", |_| {}).await?;
    let base = self_rss();
    let cpu = self_cpu_secs();
    let started = Instant::now();
    let mut channel = handle.channel_open_session().await?;
    channel
        .exec(true, format!("head -c {bytes} /dev/zero").as_bytes())
        .await?;
    channel.eof().await?;
    let mut counted = 0u64;
    let mut kept = Vec::new();
    while let Some(message) = channel.wait().await {
        match message {
            russh::ChannelMsg::Data { data } => {
                counted += data.len() as u64;
                if keep {
                    kept.push(data);
                }
            }
            russh::ChannelMsg::Close => break,
            _ => {}
        }
    }
    let elapsed = started.elapsed();
    let cpu = self_cpu_secs() - cpu;
    let returned: usize = kept.iter().map(|b| b.len()).sum();
    drop(kept);
    Ok(format!(
        "secs={} cpu={cpu} bytes={counted} returned={returned} base_rss={base} peak_rss={}",
        elapsed.as_secs_f64(),
        self_hwm()
    ))
}

/// Opens `n` pooled connections (one slot each) by running `n` commands that block on a
/// shared lock the parent holds, then lets them finish and measures the idle pool.
async fn mem_ours(conn: &Conn, n: usize, lock: &str) -> anyhow::Result<String> {
    let executor = conn
        .builder()
        .max_connections(n as u32)
        .channels_per_connection(1)
        .pool_wait_timeout(Duration::from_secs(120))
        .build()
        .await?;
    executor.run("true").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = self_rss();
    let base_conns = executor.pool_stats().connections;

    // The server runs on this machine: hold an exclusive flock on `lock` so that every
    // remote `flock -s` blocks (without burning CPU) until all connections are open.
    let file = std::fs::File::create(lock)?;
    file.lock()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let executor = executor.clone();
        let command = format!("flock -s {lock} true");
        tasks.push(tokio::spawn(async move { executor.run(&command).await }));
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while executor.pool_stats().connections < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let open_time = started.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let busy_rss = self_rss();
    file.unlock()?;
    let mut errors = 0;
    for task in tasks {
        match task.await? {
            Ok(execution) if execution.status.success() => {}
            _ => errors += 1,
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = self_rss();
    let stats = executor.pool_stats();
    Ok(format!(
        "base_rss={base} base_conns={base_conns} busy_rss={busy_rss} idle_rss={idle_rss} conns={} errors={errors} open_secs={}",
        stats.connections,
        open_time.as_secs_f64()
    ))
}

async fn mem_raw(conn: &Conn, n: usize) -> anyhow::Result<String> {
    let target = conn.raw_target();
    let first = raw::connect(&target, true).await?;
    raw::exec(&first, b"true", |_| {}).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = self_rss();
    let mut handles = vec![first];
    let mut errors = 0;
    for _ in 1..n {
        match raw::connect(&target, true).await {
            Ok(h) => {
                if raw::exec(&h, b"true", |_| {}).await.is_err() {
                    errors += 1;
                }
                handles.push(h);
            }
            Err(_) => errors += 1,
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = self_rss();
    let conns = handles.iter().filter(|h| !h.is_closed()).count();
    drop(handles);
    Ok(format!(
        "base_rss={base} idle_rss={idle_rss} conns={conns} errors={errors}"
    ))
}
