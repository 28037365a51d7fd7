//! Scenario `audit` (issue 46): what the audit trail costs. 64 callers at once running
//! `true`, on two pools of the same host, one recording every command to a trail file and
//! one not, in alternating rounds (off, on, off, on, ...) so that drift hits both alike.

use anyhow::ensure;
use swiftide_ssh_executor::{SshExecutor, audit::AuditTrail};

use crate::{
    Ctx,
    load::{Batch, ours_batch},
    report::Report,
    stats::ratio,
};

const ROUNDS: usize = 4;

pub fn audit(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let trail_path = std::env::temp_dir().join(format!("bench-audit-{}.jsonl", std::process::id()));
    let total = ctx.size(2000, 600);
    let (off, on, trail) = ctx.rt.block_on(async {
        let trail = AuditTrail::to_file(&trail_path).await?;
        let off: SshExecutor = ctx.conn.builder().build().await?;
        let on: SshExecutor = ctx.conn.builder().audit(trail.clone()).build().await?;
        for executor in [&off, &on] {
            ours_batch(executor, 128, 64).await;
        }
        anyhow::Ok((off, on, trail))
    })?;
    let mut batches = [Batch::default(), Batch::default()];
    for _ in 0..ROUNDS {
        for (i, executor) in [&off, &on].into_iter().enumerate() {
            let batch = ctx.rt.block_on(ours_batch(executor, total / ROUNDS, 64));
            ensure!(batch.errors == 0, "audit bench: {} errors", batch.errors);
            batches[i].elapsed += batch.elapsed;
            batches[i].ok += batch.ok;
            batches[i].client_cpu += batch.client_cpu;
            batches[i].machine_cpu += batch.machine_cpu;
        }
    }
    let head = ctx.rt.block_on(async {
        off.close().await;
        on.close().await;
        trail.flush().await
    })?;
    let bytes = std::fs::metadata(&trail_path).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&trail_path);
    println!(
        "  audit off c=64 {} {}\n  audit on  c=64 {} {} ({} records, {} bytes of trail)",
        batches[0].text(),
        batches[0].cpu_text(),
        batches[1].text(),
        batches[1].cpu_text(),
        head.records,
        bytes
    );
    let rate = batches[1].rate() / batches[0].rate();
    report.row(
        "audit: c=64 `true`, every command recorded to a trail file",
        batches[1].text(),
        format!("audit off {}", batches[0].text()),
        ratio(rate),
        "≥ 0.97×",
        Some(rate >= 0.97),
    );
    Ok(())
}
