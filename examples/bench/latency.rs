//! Scenario 1 (warm latency) and 8 (latency over a 20 ms RTT link).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use swiftide_core::{Command as SwiftideCommand, ToolExecutor};
use swiftide_ssh_executor::{Runner, SshExecutor};

use crate::{
    Ctx,
    child::Conn,
    peers::{ControlMaster, kex_curve25519},
    proxy, raw,
    report::Report,
    stats::{Samples, ms, ratio, self_cpu_secs, tree_cpu_secs},
    time_n,
};

/// In-process variants, measured in interleaved blocks so that background noise (other
/// builds and tests on the machine) hits all of them alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Run,
    RunPerExec,
    RunLean,
    RunNoSpare,
    ExecCmd,
    RawTrue,
    RawShTrue,
    RawWrapper,
    RawNoNodelay,
}

const VARIANTS: &[(Variant, &str)] = &[
    (Variant::Run, "ours SshExecutor::run(\"true\")"),
    (Variant::RunPerExec, "ours run(\"true\"), Runner::PerExec"),
    (
        Variant::RunLean,
        "ours run(\"true\"), kill_on_disconnect(false)",
    ),
    (Variant::RunNoSpare, "ours run(\"true\"), spare_channels(0)"),
    (Variant::ExecCmd, "ours ToolExecutor::exec_cmd(true)"),
    (Variant::RawTrue, "raw russh exec `true`"),
    (Variant::RawShTrue, "raw russh exec `exec /bin/sh -c true`"),
    (
        Variant::RawWrapper,
        "raw russh exec <executor's direct-form request>",
    ),
    (Variant::RawNoNodelay, "raw russh `true`, TCP_NODELAY off"),
];

struct InProcess {
    samples: Vec<(Variant, Samples)>,
    /// Server-side CPU per command (µs): the run's processes minus the client.
    server_us: Vec<(Variant, f64)>,
    retries: u64,
    /// The runner the host got (`PoolStats::runner`).
    runner: Option<String>,
}

impl InProcess {
    fn get(&self, v: Variant) -> Samples {
        self.samples
            .iter()
            .find(|(x, _)| *x == v)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }

    fn server(&self, v: Variant) -> f64 {
        self.server_us
            .iter()
            .find(|(x, _)| *x == v)
            .map_or(f64::NAN, |(_, us)| *us)
    }
}

async fn in_process(conn: &Conn, n: usize) -> anyhow::Result<InProcess> {
    let executor = conn.builder().build().await?;
    // The per-exec path's variants: what every command paid before the resident runner.
    let per_exec = conn.builder().runner(Runner::PerExec).build().await?;
    let lean = conn
        .builder()
        .runner(Runner::PerExec)
        .kill_on_disconnect(false)
        .build()
        .await?;
    let no_spare = conn
        .builder()
        .runner(Runner::PerExec)
        .spare_channels(0)
        .build()
        .await?;
    let target = conn.raw_target();
    let fast = raw::connect(&target, true).await?;
    let nagle = raw::connect(&target, false).await?;
    let wrapper = raw::executor_request("true", true)?;
    let true_cmd = SwiftideCommand::shell("true");
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); VARIANTS.len()];
    let mut server_cpu = vec![0.0f64; VARIANTS.len()];
    let mut done = 0;
    let mut warm = true;
    let block = 25;
    let retries_before = executor.pool_stats().channel_open_retries;
    while done < n {
        let k = if warm { 10 } else { block.min(n - done) };
        for (i, (variant, _)) in VARIANTS.iter().enumerate() {
            let (mut tree0, mut self0) = (0.0, 0.0);
            // One untimed command first: the variant after the Nagle one (44 ms idle waits)
            // otherwise pays the machine's wake-up from idle on its first sample.
            for j in 0..=k {
                if j == 1 {
                    (tree0, self0) = (tree_cpu_secs(), self_cpu_secs());
                }
                let t = Instant::now();
                let ok = match variant {
                    Variant::Run => executor.run("true").await?.status.success(),
                    Variant::RunPerExec => per_exec.run("true").await?.status.success(),
                    Variant::RunLean => lean.run("true").await?.status.success(),
                    Variant::RunNoSpare => no_spare.run("true").await?.status.success(),
                    Variant::ExecCmd => executor.exec_cmd(&true_cmd).await.is_ok(),
                    Variant::RawTrue => raw::exec(&fast, b"true", |_| {}).await?.0 == Some(0),
                    Variant::RawShTrue => {
                        raw::exec(&fast, b"exec /bin/sh -c true", |_| {}).await?.0 == Some(0)
                    }
                    Variant::RawWrapper => {
                        raw::exec_supervised(&fast, &wrapper, |_| {}).await?.0 == Some(0)
                    }
                    Variant::RawNoNodelay => raw::exec(&nagle, b"true", |_| {}).await?.0 == Some(0),
                };
                let elapsed = t.elapsed();
                ensure!(ok, "{variant:?} failed");
                if !warm && j > 0 {
                    samples[i].push(elapsed);
                }
            }
            if !warm {
                server_cpu[i] += (tree_cpu_secs() - tree0) - (self_cpu_secs() - self0);
            }
        }
        if warm {
            warm = false;
        } else {
            done += k;
        }
    }
    let retries = executor.pool_stats().channel_open_retries - retries_before;
    let stats = executor.pool_stats();
    println!(
        "  ours: runner {:?}, {} of {} commands through it",
        stats.runner, stats.runner_commands, stats.commands
    );
    let stats = per_exec.pool_stats();
    println!(
        "  ours per exec: spare channels opened {}, commands on a spare {} of {} ({} pre-started)",
        stats.spare_channels_opened,
        stats.spare_channels_used,
        stats.commands,
        stats.prestarted_spares_used
    );
    let runner = executor.pool_stats().runner;
    executor.close().await;
    per_exec.close().await;
    lean.close().await;
    no_spare.close().await;
    Ok(InProcess {
        server_us: VARIANTS
            .iter()
            .zip(&samples)
            .zip(&server_cpu)
            .map(|(((v, _), s), cpu)| (*v, cpu / s.len().max(1) as f64 * 1e6))
            .collect(),
        samples: VARIANTS
            .iter()
            .zip(samples)
            .map(|((v, _), s)| (*v, Samples::new(s)))
            .collect(),
        retries,
        runner,
    })
}

pub fn warm(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = ctx.size(300, 100);
    let m = ctx.rt.block_on(in_process(&ctx.conn, n))?;
    for (variant, label) in VARIANTS {
        println!(
            "  {label:<44} {}; server CPU {:.0} µs/cmd",
            m.get(*variant).describe(),
            m.server(*variant)
        );
    }
    println!("  ours: channel-open retries during the run: {}", m.retries);
    let run = m.get(Variant::Run);
    let exec_cmd = m.get(Variant::ExecCmd);
    let raw_true = m.get(Variant::RawTrue);
    let raw_wrapper = m.get(Variant::RawWrapper);

    let cm = match &ctx.cm {
        Some(cm) => {
            let n_cm = ctx.size(200, 50);
            for _ in 0..5 {
                cm.run("true")?;
            }
            let s = Samples::new(time_n(n_cm, || {
                ensure!(cm.run("true")?, "ControlMaster ssh failed");
                Ok(())
            })?);
            println!(
                "  OpenSSH ssh via warm ControlMaster       {}",
                s.describe()
            );
            Some(s)
        }
        None => None,
    };
    let n_cold = ctx.size(20, 5);
    let cold = Samples::new(time_n(n_cold, || {
        ensure!(
            ctx.ssh.ssh(&[], "true").status()?.success(),
            "cold ssh failed"
        );
        Ok(())
    })?);
    println!(
        "  OpenSSH cold `ssh host true` (default kex) {}",
        cold.describe()
    );
    let cold_x = Samples::new(time_n(n_cold, || {
        ensure!(
            ctx.ssh.ssh(&kex_curve25519(), "true").status()?.success(),
            "cold ssh failed"
        );
        Ok(())
    })?);
    println!(
        "  OpenSSH cold ssh, KexAlgorithms=curve25519-sha256 {}",
        cold_x.describe()
    );
    let asyncssh = match &ctx.asyncssh {
        Ok(a) => {
            let r = a.run(&ctx.ssh, "latency", &[("n", ctx.size(200, 50).to_string())])?;
            let samples = r
                .get("samples_us")
                .context("samples_us")?
                .split(',')
                .filter_map(|s| s.parse::<u64>().ok())
                .map(Duration::from_micros)
                .collect();
            let s = Samples::new(samples);
            println!(
                "  asyncssh conn.run('true'), one connection {}",
                s.describe()
            );
            Some(s)
        }
        Err(_) => None,
    };

    let o = run.median().as_secs_f64();
    let pool_ratio = o / raw_true.median().as_secs_f64();
    report.row(
        "1 warm `true`: `run` vs raw russh channel",
        run.short(),
        format!("raw russh {}", raw_true.short()),
        ratio(pool_ratio),
        "≤ 1.2×",
        Some(pool_ratio <= 1.2),
    );
    let exec_ratio = exec_cmd.median().as_secs_f64() / raw_true.median().as_secs_f64();
    report.row(
        "1 warm `true`: swiftide `exec_cmd` vs raw russh",
        exec_cmd.short(),
        format!("raw russh {}", raw_true.short()),
        ratio(exec_ratio),
        "≤ 1.2×",
        Some(exec_ratio <= 1.2),
    );
    let wrapper_ratio = run.median().as_secs_f64() / raw_wrapper.median().as_secs_f64();
    report.row(
        "1 warm: `run` vs raw russh sending the executor's direct-form request",
        run.short(),
        format!("raw russh + same request {}", raw_wrapper.short()),
        ratio(wrapper_ratio),
        // Ours runs on pre-started spares (no channel open, no shell start on the critical
        // path), which a raw client opening a channel per command cannot.
        "(diagnostic: ours also gains the pre-started spare)",
        None,
    );
    // The server's work per command, next to the floors: bash running `true` itself (what
    // raw russh asks for) and bash starting `/bin/sh -c true` (the least any executor with
    // LocalExecutor's `sh -c` semantics needs).
    let raw_sh_true = m.get(Variant::RawShTrue);
    report.row(
        "1 server CPU per warm `true` (sshd + shells)",
        format!("{:.0} µs", m.server(Variant::Run)),
        format!(
            "raw russh `true` {:.0} µs; raw `exec /bin/sh -c true` {:.0} µs ({})",
            m.server(Variant::RawTrue),
            m.server(Variant::RawShTrue),
            raw_sh_true.short()
        ),
        format!(
            "{} / {}",
            ratio(m.server(Variant::Run) / m.server(Variant::RawTrue)),
            ratio(m.server(Variant::Run) / m.server(Variant::RawShTrue))
        ),
        "(diagnostic)",
        None,
    );
    // The physical floor of any runner with LocalExecutor's semantics: a process on the host
    // (Perl, as the runner) that forks `sh -c true` in a session of its own with stdout and
    // stderr on pipes, reads both to EOF and reaps it; no SSH at all. Measured here, in the
    // same cgroup, right after the variants above.
    let floor_n = ctx.size(2000, 500);
    let floor_us = runner_floor_us(floor_n)?;
    println!(
        "  floor: a local Perl loop forking `sh -c true` (no SSH)  server CPU {floor_us:.0} µs/cmd"
    );
    report.row(
        "1 server CPU per warm `true`: the floor of a Perl runner, no SSH (a Perl loop: fork, setsid, pipes, `sh -c true`, reap)",
        format!("{floor_us:.0} µs"),
        format!("raw russh `true` {:.0} µs", m.server(Variant::RawTrue)),
        ratio(floor_us / m.server(Variant::RawTrue)),
        "(diagnostic)",
        None,
    );
    // The Perl runner, on a host whose `PATH` has `perl` and no `python3` (a second sshd:
    // the same machine, `SetEnv PATH`), and the helper, on one with neither.
    let raw_true_us = m.server(Variant::RawTrue);
    for (label, measured, note) in [
        (
            "runner on a host without Python",
            runner_on_perl_host(ctx.size(300, 100)),
            "(diagnostic: the Perl runner; its fork floor is the row above)",
        ),
        (
            "the runner helper on a host without Perl or Python",
            runner_helper_on_host(ctx.size(300, 100)),
            "(diagnostic: `swiftide-ssh-runner`, release build)",
        ),
    ] {
        match measured {
            Ok((runner, server_us, samples)) => {
                println!(
                    "  ours run(\"true\"), {runner} runner  {}; server CPU {server_us:.0} µs/cmd",
                    samples.describe()
                );
                report.row(
                    format!(
                        "1 server CPU per warm `true`, {label} ({runner}) vs raw russh `exec true`"
                    ),
                    format!("{server_us:.0} µs; latency {}", samples.short()),
                    format!("raw russh `true` {raw_true_us:.0} µs"),
                    ratio(server_us / raw_true_us),
                    note,
                    None,
                );
            }
            Err(error) => println!("  {label}: skipped: {error:#}"),
        }
    }
    // The resident runner's targets (issue: past sshd's per-exec floor), runner on and off.
    let runner_name = m.runner.clone().unwrap_or_else(|| "none".to_owned());
    let per_exec = m.get(Variant::RunPerExec);
    for (variant, label) in [
        (Variant::Run, "runner on"),
        (Variant::RunPerExec, "runner off"),
    ] {
        let r = m.server(variant) / m.server(Variant::RawTrue);
        report.row(
            format!("1 server CPU per warm `true`, {label} (host's runner: {runner_name}) vs raw russh `exec true`"),
            format!("{:.0} µs", m.server(variant)),
            format!("raw russh `true` {:.0} µs", m.server(Variant::RawTrue)),
            ratio(r),
            "≤ 0.6× (runner on)",
            (variant == Variant::Run).then_some(r <= 0.6),
        );
    }
    for (samples, label) in [(&run, "runner on"), (&per_exec, "runner off")] {
        let r = samples.median().as_secs_f64() / raw_true.median().as_secs_f64();
        report.row(
            format!("1 warm `true` latency, {label}, vs raw russh channel"),
            samples.short(),
            format!("raw russh {}", raw_true.short()),
            ratio(r),
            "≤ 1.0× (runner on)",
            std::ptr::eq(samples, &run).then_some(r <= 1.0),
        );
    }
    let lean = m.get(Variant::RunLean);
    report.row(
        "1 warm `true`, `kill_on_disconnect(false)` (no supervisor) vs raw russh",
        format!(
            "{}; server CPU {:.0} µs",
            lean.short(),
            m.server(Variant::RunLean)
        ),
        format!("raw russh {}", raw_true.short()),
        ratio(lean.median().as_secs_f64() / raw_true.median().as_secs_f64()),
        "(opt-in)",
        None,
    );
    let speedup = cold.median().as_secs_f64() / o;
    report.row(
        "1 warm `true` vs new `ssh host true` per command",
        run.short(),
        format!(
            "cold ssh {} (curve25519 kex: {})",
            cold.short(),
            cold_x.short()
        ),
        format!("{} faster", ratio(speedup)),
        "≥ 20× faster",
        Some(speedup >= 20.0),
    );
    if let Some(cm) = cm {
        let r = o / cm.median().as_secs_f64();
        report.row(
            "1 warm `true` vs ssh with warm ControlMaster",
            run.short(),
            format!("ControlMaster {}", cm.short()),
            ratio(r),
            "≤ 0.5×",
            Some(r <= 0.5),
        );
    }
    if let Some(a) = asyncssh {
        report.row(
            "1 warm `true` vs asyncssh `conn.run`",
            run.short(),
            format!("asyncssh {}", a.short()),
            ratio(o / a.median().as_secs_f64()),
            "–",
            None,
        );
    }
    Ok(())
}

/// Writes a known_hosts file that vouches for the testbed's key at the proxy's port.
pub fn proxy_known_hosts(ctx: &Ctx, proxy: SocketAddr) -> anyhow::Result<std::path::PathBuf> {
    let path = ctx
        .local
        .path()
        .join(format!("known_hosts_{}", proxy.port()));
    std::fs::write(
        &path,
        format!("[{}]:{} {}\n", proxy.ip(), proxy.port(), ctx.conn.host_key),
    )?;
    Ok(path)
}

#[allow(clippy::type_complexity)]
async fn slow_in_process(
    conn: &Conn,
    n: usize,
    dir: &std::path::Path,
) -> anyhow::Result<(Samples, Samples, Samples, Samples, u64, SlowFiles)> {
    let executor: SshExecutor = conn.builder().build().await?;
    let no_spare: SshExecutor = conn.builder().spare_channels(0).build().await?;
    let target = conn.raw_target();
    let fast = raw::connect(&target, true).await?;
    let nagle = raw::connect(&target, false).await?;
    for _ in 0..3 {
        executor.run("true").await?;
        no_spare.run("true").await?;
        raw::exec(&fast, b"true", |_| {}).await?;
        raw::exec(&nagle, b"true", |_| {}).await?;
    }
    let mut rtt = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        fast.send_ping().await?;
        rtt.push(t.elapsed());
    }
    let retries_before = executor.pool_stats().channel_open_retries;
    let (mut ours, mut r1, mut r2, mut r3) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let t = Instant::now();
        ensure!(executor.run("true").await?.status.success());
        ours.push(t.elapsed());
        let t = Instant::now();
        ensure!(no_spare.run("true").await?.status.success());
        r3.push(t.elapsed());
        let t = Instant::now();
        raw::exec(&fast, b"true", |_| {}).await?;
        r1.push(t.elapsed());
        let t = Instant::now();
        raw::exec(&nagle, b"true", |_| {}).await?;
        r2.push(t.elapsed());
    }
    let retries = executor.pool_stats().channel_open_retries - retries_before;
    let stats = executor.pool_stats();
    println!(
        "  ours run(\"true\"), spare_channels(0)     {} = {:.2} RTT; commands on a spare {} of {}",
        Samples::new(r3.clone()).describe(),
        Samples::new(r3).median().as_secs_f64() / Samples::new(rtt.clone()).median().as_secs_f64(),
        stats.spare_channels_used,
        stats.commands
    );
    no_spare.close().await;
    let files = slow_files(&executor, &fast, dir, n.min(20)).await?;
    executor.close().await;
    Ok((
        Samples::new(rtt),
        Samples::new(ours),
        Samples::new(r1),
        Samples::new(r2),
        retries,
        files,
    ))
}

/// Small-file operations over the slow link: where round trips, not bytes, decide.
pub struct SlowFiles {
    pub write_new: Samples,
    pub write_existing: Samples,
    pub read: Samples,
    pub raw_write: Samples,
    pub raw_read: Samples,
}

async fn slow_files(
    executor: &SshExecutor,
    handle: &raw::RawHandle,
    dir: &std::path::Path,
    n: usize,
) -> anyhow::Result<SlowFiles> {
    let content = b"hello from the benchmark\n".repeat(8);
    let sftp = raw::sftp(handle).await?;
    // Warm both SFTP channels.
    executor
        .write_file_bytes(&dir.join("warm"), &content)
        .await?;
    raw::sftp_write(&sftp, &dir.join("warm_raw").display().to_string(), &content).await?;
    let (mut new, mut existing, mut read, mut raw_write, mut raw_read) =
        (vec![], vec![], vec![], vec![], vec![]);
    for i in 0..n {
        let path = dir.join(format!("new{i}.txt"));
        let t = Instant::now();
        executor.write_file_bytes(&path, &content).await?;
        new.push(t.elapsed());
        let t = Instant::now();
        executor.write_file_bytes(&path, &content).await?;
        existing.push(t.elapsed());
        let t = Instant::now();
        ensure!(executor.read_file_bytes(&path).await?.len() == content.len());
        read.push(t.elapsed());
        let raw_path = dir.join(format!("raw{i}.txt")).display().to_string();
        let t = Instant::now();
        raw::sftp_write(&sftp, &raw_path, &content).await?;
        raw_write.push(t.elapsed());
        let t = Instant::now();
        ensure!(sftp.read(raw_path.as_str()).await?.len() == content.len());
        raw_read.push(t.elapsed());
    }
    Ok(SlowFiles {
        write_new: Samples::new(new),
        write_existing: Samples::new(existing),
        read: Samples::new(read),
        raw_write: Samples::new(raw_write),
        raw_read: Samples::new(raw_read),
    })
}

pub fn slow_link(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let one_way = Duration::from_millis(10);
    let target: SocketAddr = format!("{}:{}", ctx.conn.host, ctx.conn.port).parse()?;
    let proxy = proxy::start(target, one_way)?;
    let known_hosts = proxy_known_hosts(ctx, proxy)?;
    let mut conn = ctx.conn.clone();
    conn.port = proxy.port();
    conn.known_hosts = known_hosts;
    let n = ctx.size(50, 15);
    let dir = ctx.tb.scratch_dir().join("slow");
    std::fs::create_dir_all(&dir)?;
    let (rtt, ours, raw_fast, raw_nagle, retries, files) =
        ctx.rt.block_on(slow_in_process(&conn, n, &dir))?;
    let _ = std::fs::remove_dir_all(&dir);
    let rtt_s = rtt.median().as_secs_f64();
    println!(
        "  measured RTT (russh keepalive ping)      {}",
        rtt.describe()
    );
    println!(
        "  ours run(\"true\")                         {}",
        ours.describe()
    );
    println!(
        "  raw russh \"true\"                         {}",
        raw_fast.describe()
    );
    println!(
        "  raw russh \"true\", TCP_NODELAY off        {}",
        raw_nagle.describe()
    );
    println!("  ours: channel-open retries: {retries}");
    let ssh = Ctx::ssh_for(&conn);
    let cm = match ControlMaster::start(&ssh, ctx.sockets.path().join("cm-slow")) {
        Ok(cm) => {
            cm.run("true")?;
            let s = Samples::new(time_n(ctx.size(30, 10), || {
                ensure!(cm.run("true")?, "ControlMaster ssh failed");
                Ok(())
            })?);
            println!(
                "  OpenSSH ControlMaster                    {}",
                s.describe()
            );
            Some(s)
        }
        Err(e) => {
            println!("  ControlMaster over the proxy failed: {e:#}");
            None
        }
    };
    let in_rtt = |s: &Samples| s.median().as_secs_f64() / rtt_s;
    for (label, s) in [
        ("ours write_file_bytes, new file", &files.write_new),
        ("ours write_file_bytes, overwrite", &files.write_existing),
        ("ours read_file_bytes (200 B)", &files.read),
        ("raw russh-sftp open+write+close", &files.raw_write),
        ("raw russh-sftp read (200 B)", &files.raw_read),
    ] {
        println!("  {label:<40} {} = {:.1} RTT", s.describe(), in_rtt(s));
    }
    report.row(
        "8 small WriteFile, +20 ms RTT link (new / overwrite)",
        format!(
            "{:.1} / {:.1} RTT",
            in_rtt(&files.write_new),
            in_rtt(&files.write_existing)
        ),
        format!(
            "raw russh-sftp open+write+close {:.1} RTT",
            in_rtt(&files.raw_write)
        ),
        ratio(files.write_new.median().as_secs_f64() / files.raw_write.median().as_secs_f64()),
        "– (round trips matter for agents)",
        None,
    );
    report.row(
        "8 small ReadFile, +20 ms RTT link",
        format!("{:.1} RTT", in_rtt(&files.read)),
        format!("raw russh-sftp read {:.1} RTT", in_rtt(&files.raw_read)),
        ratio(files.read.median().as_secs_f64() / files.raw_read.median().as_secs_f64()),
        "–",
        None,
    );
    report.row(
        format!("8 warm `true`, +20 ms RTT link (ping {})", ms(rtt.median())),
        format!("{} = {:.2} RTT", ms(ours.median()), in_rtt(&ours)),
        format!(
            "raw russh {} = {:.2} RTT",
            ms(raw_fast.median()),
            in_rtt(&raw_fast)
        ),
        ratio(ours.median().as_secs_f64() / raw_fast.median().as_secs_f64()),
        "ours ≤ 1.3 RTT",
        Some(in_rtt(&ours) <= 1.3),
    );
    if let Some(cm) = cm {
        report.row(
            "8 warm `true`, +20 ms RTT link, vs ControlMaster",
            format!("{} = {:.2} RTT", ms(ours.median()), in_rtt(&ours)),
            format!("ControlMaster {} = {:.2} RTT", ms(cm.median()), in_rtt(&cm)),
            ratio(ours.median().as_secs_f64() / cm.median().as_secs_f64()),
            "–",
            None,
        );
    }
    Ok(())
}

/// CPU per command (µs) of [the floor](warm) of a resident runner: `n` × `sh -c true` forked
/// by a local Perl loop, measured as this benchmark's CPU (its cgroup) minus its own.
fn runner_floor_us(n: usize) -> anyhow::Result<f64> {
    const LOOP: &str = "use POSIX (); open(my $null, '<', '/dev/null') or die; \
        for (1..$ARGV[0]) { pipe(my $or, my $ow) or die; pipe(my $er, my $ew) or die; \
        my $pid = fork(); if (!$pid) { POSIX::setsid(); POSIX::dup2(fileno($null), 0); \
        POSIX::dup2(fileno($ow), 1); POSIX::dup2(fileno($ew), 2); \
        exec { 'sh' } 'sh', '-c', 'true'; POSIX::_exit(127) } \
        close($ow); close($ew); my $b; while (sysread($or, $b, 65536)) {} \
        while (sysread($er, $b, 65536)) {} waitpid($pid, 0) }";
    let (tree0, self0) = (tree_cpu_secs(), self_cpu_secs());
    let status = std::process::Command::new("perl")
        .args(["-e", LOOP, &n.to_string()])
        .status()?;
    ensure!(status.success(), "the floor's Perl loop failed: {status}");
    let cpu = (tree_cpu_secs() - tree0) - (self_cpu_secs() - self0);
    Ok(cpu / n as f64 * 1e6)
}

/// The Perl runner: `n` warm `true`s on a testbed whose `PATH` has `sh` and `perl` and no
/// `python3`. Returns the runner's name, server CPU per command (µs) and the latencies.
fn runner_on_perl_host(n: usize) -> anyhow::Result<(String, f64, Samples)> {
    runner_on_host(n, &[("perl", "/usr/bin/perl")], None)
}

/// The helper (`swiftide-ssh-runner`, release build beside this binary: `cargo build
/// --release -p swiftide-ssh-runner`), as [`runner_on_perl_host`], on a host whose `PATH`
/// has no Perl or Python (only what its install needs).
fn runner_helper_on_host(n: usize) -> anyhow::Result<(String, f64, Samples)> {
    let helper = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("swiftide-ssh-runner"))
        .context("no target directory")?;
    let binary = std::fs::read(&helper).with_context(|| {
        format!(
            "{} (build it: cargo build --release -p swiftide-ssh-runner)",
            helper.display()
        )
    })?;
    let tools: Vec<(&str, &str)> = ["sha256sum", "mkdir", "chmod", "mv", "rm", "head"]
        .into_iter()
        .map(|tool| (tool, tool))
        .collect();
    runner_on_host(n, &tools, Some(binary))
}

/// `n` warm `true`s through the runner on a testbed whose `PATH` has `sh`, `true` and
/// `tools` (name, target: a path, or a name found in `/usr/bin` or `/bin`).
fn runner_on_host(
    n: usize,
    tools: &[(&str, &str)],
    helper: Option<Vec<u8>>,
) -> anyhow::Result<(String, f64, Samples)> {
    let bin = tempfile::Builder::new().prefix("swb-runner").tempdir()?;
    for &(tool, target) in [("sh", "/bin/sh"), ("true", "/bin/true")]
        .iter()
        .chain(tools)
    {
        let target = if target.starts_with('/') {
            std::path::PathBuf::from(target)
        } else {
            ["/usr/bin", "/bin"]
                .iter()
                .map(|dir| std::path::Path::new(dir).join(target))
                .find(|path| path.exists())
                .with_context(|| format!("no {target} on this machine"))?
        };
        std::os::unix::fs::symlink(target, bin.path().join(tool))?;
    }
    let tb = swiftide_ssh_testbed::Testbed::builder()
        .sshd_config_line(format!("SetEnv PATH={}", bin.path().display()))
        .start()?;
    let conn = Ctx::conn_for(&tb);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut builder = conn.builder().runner(Runner::Resident);
        if let Some(helper) = helper {
            builder = builder.runner_helper(helper);
        }
        let executor = builder.build().await?;
        for _ in 0..20 {
            executor.run("true").await?;
        }
        let (tree0, self0) = (tree_cpu_secs(), self_cpu_secs());
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            ensure!(
                executor.run("true").await?.status.success(),
                "runner: true failed"
            );
            times.push(t.elapsed());
        }
        let cpu = (tree_cpu_secs() - tree0) - (self_cpu_secs() - self0);
        let runner = executor
            .pool_stats()
            .runner
            .unwrap_or_else(|| "none".to_owned());
        executor.close().await;
        Ok((runner, cpu / n as f64 * 1e6, Samples::new(times)))
    })
}
