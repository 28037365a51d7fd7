//! Scenario `guard` (issue 45): what limits and Landlock confinement cost. Warm `true`s and
//! 64 callers at once, each with no guard, limits (all five), confinement (writes and
//! network) and both, through the Python runner and through the helper, in interleaved
//! blocks on one pool each; server CPU per command is the run's cgroup CPU minus the client's.

use std::time::{Duration, Instant};

use anyhow::ensure;
use swiftide_ssh_executor::{Confinement, ExecOptions, Limits, Runner, SshExecutor};

use crate::{
    Ctx,
    load::{Batch, ours_batch},
    report::Report,
    stats::{Samples, ms, ratio, self_cpu_secs, tree_cpu_secs},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guarded {
    None,
    Limits,
    Confined,
    Both,
}

const GUARDS: [(Guarded, &str); 4] = [
    (Guarded::None, "no guard"),
    (Guarded::Limits, "limits"),
    (Guarded::Confined, "confinement"),
    (Guarded::Both, "limits + confinement"),
];

fn limits() -> Limits {
    Limits::new()
        .memory(8 << 30)
        .cpu_time(Duration::from_secs(3600))
        .processes(100_000)
        .file_size(64 << 30)
        .open_files(4096)
}

async fn executor(ctx: &Ctx, guard: Guarded, helper: Option<&[u8]>) -> anyhow::Result<SshExecutor> {
    let mut builder = ctx.conn.builder().runner(Runner::Resident);
    if let Some(helper) = helper {
        builder = builder.runner_helper(helper.to_vec());
    }
    if matches!(guard, Guarded::Limits | Guarded::Both) {
        builder = builder.limits(limits());
    }
    if matches!(guard, Guarded::Confined | Guarded::Both) {
        builder = builder.confinement(Confinement::new());
    }
    let executor = builder.build().await?;
    // Warm: the runner started, the private TMPDIR made.
    for _ in 0..20 {
        ensure!(
            executor.run("true").await?.success(),
            "{guard:?}: true failed"
        );
    }
    Ok(executor)
}

/// The helper binary beside this one (`cargo build --release -p swiftide-ssh-runner`).
fn helper_binary() -> Option<Vec<u8>> {
    let exe = std::env::current_exe().ok()?;
    std::fs::read(exe.parent()?.parent()?.join("swiftide-ssh-runner")).ok()
}

pub fn guard(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = ctx.size(400, 150);
    let helper = helper_binary();
    if helper.is_none() {
        report.note("guard: no helper beside the bench binary (cargo build --release -p swiftide-ssh-runner): Python rows only");
    }
    let runners: Vec<(&str, Option<&[u8]>)> = std::iter::once(("python", None))
        .chain(helper.as_deref().map(|h| ("helper", Some(h))))
        .collect();
    for (runner, helper) in runners {
        let executors = ctx.rt.block_on(async {
            let mut all = Vec::new();
            for (guard, _) in GUARDS {
                all.push(executor(ctx, guard, helper).await?);
            }
            anyhow::Ok(all)
        })?;
        // Warm latency and server CPU, interleaved in blocks of 25.
        let mut samples = vec![Vec::new(); GUARDS.len()];
        let mut server = vec![0.0f64; GUARDS.len()];
        let mut done = 0;
        while done < n {
            let k = 25.min(n - done);
            for (i, executor) in executors.iter().enumerate() {
                let (tree0, self0) = (tree_cpu_secs(), self_cpu_secs());
                for _ in 0..k {
                    let t = Instant::now();
                    let run = ctx.rt.block_on(executor.execute(
                        "true",
                        ExecOptions::default(),
                        &mut |_| {},
                    ))?;
                    ensure!(run.success(), "{:?}: {run:?}", GUARDS[i].0);
                    samples[i].push(t.elapsed());
                }
                server[i] += (tree_cpu_secs() - tree0) - (self_cpu_secs() - self0);
            }
            done += k;
        }
        let server_us: Vec<f64> = server.iter().map(|s| s / n as f64 * 1e6).collect();
        // 64 callers at once.
        let total = ctx.size(2000, 600);
        let mut batches: Vec<Batch> = Vec::new();
        for executor in &executors {
            batches.push(ctx.rt.block_on(async {
                ours_batch(executor, 128, 64).await;
                ours_batch(executor, total, 64).await
            }));
        }
        for (i, (guard, label)) in GUARDS.iter().enumerate() {
            let latency = Samples::new(samples[i].clone());
            println!(
                "  {runner} {label:<22} warm true {}; server CPU {:.0} µs/cmd; c=64 {} {}",
                latency.describe(),
                server_us[i],
                batches[i].text(),
                batches[i].cpu_text()
            );
            if *guard == Guarded::None {
                continue;
            }
            report.row(
                format!("guard: warm `true` through the {runner} runner, {label}"),
                format!(
                    "{} (server CPU {:.0} µs, +{:.0} µs)",
                    ms(latency.median()),
                    server_us[i],
                    server_us[i] - server_us[0]
                ),
                format!(
                    "no guard {} (server CPU {:.0} µs)",
                    ms(Samples::new(samples[0].clone()).median()),
                    server_us[0]
                ),
                ratio(server_us[i] / server_us[0]),
                if *guard == Guarded::Both {
                    "≤ +300 µs server CPU"
                } else {
                    ""
                },
                (*guard == Guarded::Both).then(|| server_us[i] - server_us[0] <= 300.0),
            );
            report.row(
                format!("guard: c=64 through the {runner} runner, {label}"),
                batches[i].text(),
                format!("no guard {}", batches[0].text()),
                ratio(batches[i].rate() / batches[0].rate()),
                if *guard == Guarded::Both {
                    "≥ 0.9×"
                } else {
                    ""
                },
                (*guard == Guarded::Both).then(|| batches[i].rate() >= 0.9 * batches[0].rate()),
            );
        }
        ctx.rt.block_on(async {
            for executor in executors {
                executor.close().await;
            }
        });
    }
    Ok(())
}
