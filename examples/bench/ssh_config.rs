//! Scenario 12: a fleet from a large `~/.ssh/config`.
//!
//! Generated files of 2,000 and 10,000 `Host` blocks (one per host, with `HostName`, `Port`
//! and `User`, plus a `Host *` block at the end, as generated configs look). Measures
//! parsing the file once (`SshConfig::load`), then `Fleet::from_ssh_config` over every
//! alias (resolving each against the parsed file, building a lazy executor): the time per
//! alias must not grow with the number of blocks. For contrast, `from_ssh_config_file` per
//! alias (which reads and parses the whole file again for every alias) on a sample.

use std::time::{Duration, Instant};

use swiftide_ssh_executor::{Fleet, SshConfig, SshExecutor};

use crate::{Ctx, report::Report};

fn write_config(dir: &std::path::Path, blocks: usize) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join(format!("config-{blocks}"));
    let mut text = String::with_capacity(blocks * 80);
    for i in 0..blocks {
        text.push_str(&format!(
            "Host node{i:05}\n  HostName 10.{}.{}.{}\n  Port {}\n  User ops\n\n",
            i / 65536,
            (i / 256) % 256,
            i % 256,
            2200 + i % 100
        ));
    }
    text.push_str("Host *\n  ServerAliveInterval 30\n  StrictHostKeyChecking yes\n");
    std::fs::write(&path, text)?;
    Ok(path)
}

struct Measured {
    parse: Duration,
    per_alias: Duration,
    reread_per_alias: Duration,
}

fn measure(dir: &std::path::Path, blocks: usize) -> anyhow::Result<Measured> {
    let path = write_config(dir, blocks)?;
    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let aliases: Vec<String> = (0..blocks).map(|i| format!("node{i:05}")).collect();
    let t = Instant::now();
    let config = SshConfig::load_with_home(&path, &home)?;
    let parse = t.elapsed();
    let t = Instant::now();
    let fleet = Fleet::from_ssh_config(&config, aliases.iter().cloned())?;
    let all = t.elapsed();
    anyhow::ensure!(fleet.members().len() == blocks, "not every alias resolved");
    let last = fleet
        .members()
        .last()
        .map(|m| (m.host().to_owned(), m.port()));
    anyhow::ensure!(
        last == Some((
            format!(
                "10.{}.{}.{}",
                (blocks - 1) / 65536,
                ((blocks - 1) / 256) % 256,
                (blocks - 1) % 256
            ),
            2200 + ((blocks - 1) % 100) as u16
        )),
        "the last alias resolved to {last:?}"
    );
    // The old way, on 20 aliases spread over the file.
    let sample: Vec<&String> = aliases.iter().step_by((blocks / 20).max(1)).collect();
    let t = Instant::now();
    for alias in &sample {
        SshExecutor::from_ssh_config_file(&path, alias)?.build_lazy()?;
    }
    let reread = t.elapsed();
    Ok(Measured {
        parse,
        per_alias: all / blocks as u32,
        reread_per_alias: reread / sample.len() as u32,
    })
}

pub fn ssh_config(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("swb-sshcfg").tempdir()?;
    // The runtime is needed by nothing here; lazy executors only.
    let _guard = ctx.rt.enter();
    let small = measure(dir.path(), 2_000)?;
    let large = measure(dir.path(), 10_000)?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (n, m) in [(2_000, &small), (10_000, &large)] {
        println!(
            "  {n} blocks: parse once {:.1} ms; from_ssh_config {:.1} µs/alias; from_ssh_config_file (re-reads) {:.2} ms/alias",
            m.parse.as_secs_f64() * 1e3,
            us(m.per_alias),
            m.reread_per_alias.as_secs_f64() * 1e3
        );
    }
    let growth = us(large.per_alias) / us(small.per_alias);
    report.row(
        "12 `Fleet::from_ssh_config`: hosts from a generated ~/.ssh/config, 10,000 vs 2,000 `Host` blocks (one per host)",
        format!(
            "10,000 blocks: parsed once in {:.0} ms, {:.1} µs per alias ({:.2} s for all 10,000)",
            large.parse.as_secs_f64() * 1e3,
            us(large.per_alias),
            large.per_alias.as_secs_f64() * 10_000.0
        ),
        format!(
            "2,000 blocks: parsed once in {:.0} ms, {:.1} µs per alias; `from_ssh_config_file` per alias (re-reads the file): {:.1} ms at 2,000, {:.1} ms at 10,000",
            small.parse.as_secs_f64() * 1e3,
            us(small.per_alias),
            small.reread_per_alias.as_secs_f64() * 1e3,
            large.reread_per_alias.as_secs_f64() * 1e3
        ),
        format!("per alias {growth:.2}× at 5× the blocks"),
        "parsed once per run; per alias not growing with the blocks (≤ 1.5×)",
        Some(growth <= 1.5),
    );
    Ok(())
}
