//! Scenario `burst`: when do the commands of a burst start? `n` commands issued at once (8
//! and 30), each printing the host's clock as its first act (`date +%s%N`; the testbed's
//! sshd runs on this machine, so both clocks are one), on a fresh executor (its first
//! commands: the dial, and the runner's start under `Runner::Auto`) and on a warm one (one
//! command run before, and the runner it set off up). Rows: the last start of the burst, ours with the
//! runner against ours with one session per command (`Runner::PerExec`), in interleaved
//! rounds. Issue 44's targets: under the runner, 8 commands all started within 150 ms and
//! 30 within 400 ms, fresh and warm.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use swiftide_ssh_executor::{Runner, SshExecutor};

use crate::{
    Ctx,
    report::Report,
    stats::{Samples, ratio},
};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The start offsets of `n` commands issued at once, sorted.
async fn burst(executor: &SshExecutor, n: usize) -> anyhow::Result<Vec<Duration>> {
    let issued = now_ns();
    let runs = futures::future::join_all((0..n).map(|_| executor.run("date +%s%N"))).await;
    let mut starts = Vec::with_capacity(n);
    for run in runs {
        let out = run?.stdout();
        let at: u128 = String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .context("a command printed no clock")?;
        let nanos = u64::try_from(at.saturating_sub(issued)).unwrap_or(u64::MAX);
        starts.push(Duration::from_nanos(nanos));
    }
    starts.sort();
    Ok(starts)
}

/// One executor's burst: fresh (built, then the burst) or warm (one command first).
async fn one(ctx: &Ctx, runner: Runner, n: usize, warm: bool) -> anyhow::Result<Vec<Duration>> {
    let executor = ctx.builder().runner(runner).build().await?;
    if warm {
        // Warm: a command ran, and the runner it set off (if any) is up.
        executor.run("true").await?;
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while runner != Runner::PerExec
            && executor.pool_stats().runners_started == 0
            && std::time::Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let starts = burst(&executor, n).await?;
    executor.close().await;
    Ok(starts)
}

pub fn burst_starts(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let rounds = if ctx.quick { 5 } else { 15 };
    for (n, target_ms) in [(8usize, 150u64), (30, 400)] {
        for warm in [false, true] {
            // The last start and the median start of each burst, per runner setting.
            let mut last: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
            let mut median: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
            for round in 0..rounds {
                let order = if round % 2 == 0 {
                    [Runner::Auto, Runner::PerExec]
                } else {
                    [Runner::PerExec, Runner::Auto]
                };
                for runner in order {
                    let starts = ctx.rt.block_on(one(ctx, runner, n, warm))?;
                    let i = usize::from(runner == Runner::PerExec);
                    last[i].push(starts.last().copied().unwrap_or_default());
                    median[i].push(starts.get(n / 2).copied().unwrap_or_default());
                }
            }
            let [last_runner, last_per_exec] = last.map(Samples::new);
            let [median_runner, median_per_exec] = median.map(Samples::new);
            let state = if warm { "warm" } else { "fresh" };
            println!(
                "  {n} at once, {state}: runner last {} (median start {}); per exec last {} (median start {})",
                last_runner.describe(),
                median_runner.short(),
                last_per_exec.describe(),
                median_per_exec.short(),
            );
            let target = Duration::from_millis(target_ms);
            report.row(
                format!("burst: {n} commands at once, {state} executor, last start"),
                format!(
                    "runner {} (median start {})",
                    last_runner.short(),
                    median_runner.short()
                ),
                format!(
                    "per exec {} (median start {})",
                    last_per_exec.short(),
                    median_per_exec.short()
                ),
                format!(
                    "{} per exec",
                    ratio(
                        last_per_exec.median().as_secs_f64()
                            / last_runner.median().as_secs_f64().max(1e-9)
                    )
                ),
                format!("runner last ≤ {target_ms} ms"),
                Some(last_runner.p90() <= target),
            );
        }
    }
    Ok(())
}
