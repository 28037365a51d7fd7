//! Scenarios 3 (stdout streaming), 4 (files) and 5 (`stream_files`).

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, ensure};
use futures::StreamExt;
use swiftide_core::{Command as SwiftideCommand, ToolExecutor};

use crate::{
    Ctx, child,
    peers::run_measuring_hwm,
    raw,
    report::Report,
    stats::{MIB, Samples, mib, mib_per_s, ms, ratio},
};

fn f(map: &std::collections::HashMap<String, String>, k: &str) -> f64 {
    map.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// Rounds of an interleaved comparison: `BENCH_ROUNDS` when set, else `full` / `quick`.
fn rounds(ctx: &Ctx, full: usize, quick: usize) -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| ctx.size(full, quick))
}

/// Median and minimum of `xs` (NaN when empty).
fn median_min(xs: &[f64]) -> (f64, f64) {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (median, v[0])
}

pub fn streaming(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let bytes: u64 = if ctx.quick { 256 << 20 } else { 1 << 30 };
    let label = if ctx.quick { "256 MiB" } else { "1 GiB" };
    let cap = 1usize << 20;
    // Each variant runs in a fresh child (its peak RSS is its own), and the variants alternate
    // within every round, in reversed order every other round, so that load from the rest of
    // the machine hits all of them alike. Ratios are taken within a round.
    let reps = rounds(ctx, 6, 4);
    let kinds: [(&str, Vec<(&str, String)>); 4] = [
        ("stream-ours", vec![("bytes", bytes.to_string())]),
        ("stream-raw", vec![("bytes", bytes.to_string())]),
        (
            "stream-ours-capped",
            vec![("bytes", bytes.to_string()), ("cap", cap.to_string())],
        ),
        ("stream-raw-keep", vec![("bytes", bytes.to_string())]),
    ];
    let mut runs: Vec<Vec<std::collections::HashMap<String, String>>> = vec![vec![]; kinds.len()];
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..kinds.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (kind, extra) = &kinds[i];
            let got = child::spawn(kind, &ctx.conn, extra)?;
            ensure!(
                f(&got, "bytes") as u64 == bytes,
                "{kind} counted {} bytes",
                f(&got, "bytes")
            );
            runs[i].push(got);
        }
    }
    let rate = |m: &std::collections::HashMap<String, String>| f(m, "bytes") / MIB / f(m, "secs");
    let rates: Vec<Vec<f64>> = runs.iter().map(|r| r.iter().map(rate).collect()).collect();
    let per_rep = |a: usize, b: usize| -> Vec<f64> {
        rates[a].iter().zip(&rates[b]).map(|(x, y)| x / y).collect()
    };
    let fmt_rates = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (ours_rate, _) = median_min(&rates[0]);
    let (raw_rate, _) = median_min(&rates[1]);
    let (capped_rate, _) = median_min(&rates[2]);
    let (keep_rate, _) = median_min(&rates[3]);
    let (vs_raw, vs_raw_min) = median_min(&per_rep(0, 1));
    let (vs_keep, vs_keep_min) = median_min(&per_rep(0, 3));
    let (capped_vs_raw, capped_vs_raw_min) = median_min(&per_rep(2, 1));
    let cpu_per_gib = |i: usize| {
        let (c, _) = median_min(
            &runs[i]
                .iter()
                .map(|m| f(m, "cpu") / (f(m, "bytes") / (1u64 << 30) as f64))
                .collect::<Vec<_>>(),
        );
        c
    };
    let peak = |i: usize| {
        let (p, _) = median_min(&runs[i].iter().map(|m| f(m, "peak_rss")).collect::<Vec<_>>());
        p
    };
    println!(
        "  {reps} rounds, interleaved; MiB/s per round, then median; client CPU s/GiB; peak RSS"
    );
    // One line per variant, in `kinds` order: rounds, median, CPU, peak RSS (and what the
    // executor's `CommandOutput` held).
    let labels = [
        ("ours exec_cmd_streaming, counting sink  ", true),
        ("raw russh channel (same config)         ", false),
        ("ours, max_output_bytes(Some(1 MiB))     ", true),
        ("raw russh keeping every chunk           ", false),
    ];
    for (i, (label, ours)) in labels.into_iter().enumerate() {
        let (median, _) = median_min(&rates[i]);
        let returned = if ours {
            format!(", CommandOutput {} bytes", f(&runs[i][0], "returned"))
        } else {
            String::new()
        };
        println!(
            "  {label} {} -> {median:.0}, CPU {:.2} s/GiB, peak RSS {}{returned}",
            fmt_rates(&rates[i]),
            cpu_per_gib(i),
            mib(peak(i) as u64),
        );
    }
    println!(
        "  ours / raw per round: median {vs_raw:.2}, min {vs_raw_min:.2}; ours / raw keeping: median {vs_keep:.2}, min {vs_keep_min:.2}; capped / raw: median {capped_vs_raw:.2}, min {capped_vs_raw_min:.2}"
    );
    report.row(
        format!("3 stream {label} stdout vs raw russh, {reps} interleaved rounds"),
        format!("{ours_rate:.0} MiB/s"),
        format!("raw russh {raw_rate:.0} MiB/s; raw russh keeping the output {keep_rate:.0}"),
        format!(
            "{} (min {}); vs raw keeping {} (min {})",
            ratio(vs_raw),
            ratio(vs_raw_min),
            ratio(vs_keep),
            ratio(vs_keep_min)
        ),
        "≥ 0.9× (median of rounds)",
        Some(vs_raw >= 0.9),
    );
    report.row(
        format!("3 stream {label}, `max_output_bytes(Some(1 MiB))` vs raw russh"),
        format!("{capped_rate:.0} MiB/s"),
        format!("raw russh {raw_rate:.0} MiB/s"),
        format!(
            "{} (min {})",
            ratio(capped_vs_raw),
            ratio(capped_vs_raw_min)
        ),
        "–",
        None,
    );
    let remote = format!("head -c {bytes} /dev/zero");
    let (status, t, ssh_peak) = run_measuring_hwm(ctx.ssh.ssh(&[], &remote))?;
    ensure!(status.success(), "ssh stream failed");
    let ssh_rate = mib_per_s(bytes, t);
    println!(
        "  OpenSSH `ssh host head … > /dev/null`    {:.0} MiB/s incl. connect ({}), peak RSS {}",
        ssh_rate,
        ms(t),
        mib(ssh_peak)
    );
    let (status, t, _) = run_measuring_hwm(
        ctx.ssh
            .ssh(&["-c".into(), "aes256-gcm@openssh.com".into()], &remote),
    )?;
    ensure!(status.success(), "ssh -c aes256-gcm stream failed");
    let ssh_gcm_rate = mib_per_s(bytes, t);
    println!("  OpenSSH, -c aes256-gcm@openssh.com       {ssh_gcm_rate:.0} MiB/s incl. connect");
    let cm_rate = match &ctx.cm {
        Some(cm) => {
            let t = Instant::now();
            ensure!(cm.run(&remote)?, "ControlMaster stream failed");
            let r = mib_per_s(bytes, t.elapsed());
            println!("  OpenSSH via warm ControlMaster           {r:.0} MiB/s (no connect)");
            r
        }
        None => f64::NAN,
    };
    let best_peer = [ssh_rate, ssh_gcm_rate, cm_rate]
        .into_iter()
        .filter(|r| r.is_finite())
        .fold(0.0, f64::max);
    let r = ours_rate / ssh_rate;
    report.row(
        format!("3 stream {label} stdout (`exec_cmd_streaming`)"),
        format!("{ours_rate:.0} MiB/s"),
        format!(
            "ssh {ssh_rate:.0} MiB/s (aes-gcm {ssh_gcm_rate:.0}, ControlMaster {cm_rate:.0}); raw russh {raw_rate:.0}"
        ),
        format!("{} (vs best peer {})", ratio(r), ratio(ours_rate / best_peer)),
        "≥ 1.5×",
        Some(r >= 1.5),
    );
    report.row(
        format!("3 stream {label}: client peak RSS"),
        mib(peak(0) as u64),
        format!(
            "ssh {}; raw russh {} (keeping the output {}); ours with `max_output_bytes(Some(1 MiB))` {} ({capped_rate:.0} MiB/s)",
            mib(ssh_peak),
            mib(peak(1) as u64),
            mib(peak(3) as u64),
            mib(peak(2) as u64)
        ),
        ratio(peak(0) / ssh_peak as f64),
        "– (bounded?)",
        None,
    );
    Ok(())
}

/// Deterministic pseudo-random bytes (xorshift64*), fast and incompressible.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn files(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let size = 100usize << 20;
    let reps = rounds(ctx, 6, 4);
    let remote_dir = ctx.tb.scratch_dir().join("files");
    std::fs::create_dir_all(&remote_dir)?;
    let remote_src = remote_dir.join("big.bin");
    let data = pseudo_random(size, 42);
    std::fs::write(&remote_src, &data)?;
    let local_src = ctx.local.path().join("big.bin");
    std::fs::write(&local_src, &data)?;
    let local_dst = ctx.local.path().join("download.bin");
    let executor = ctx.rt.block_on(ctx.builder().build())?;

    // Download and upload, ours and the OpenSSH tools alternating within every round (in
    // reversed order every other round), so that load from the rest of the machine hits all
    // of them alike; ratios are taken within a round.
    let batch = ctx.local.path().join("get.batch");
    std::fs::write(
        &batch,
        format!("get {} {}\n", remote_src.display(), local_dst.display()),
    )?;
    let remote_up = remote_dir.join("up_ours.bin");
    let remote_scp = remote_dir.join("up_scp.bin");
    let batch_up = ctx.local.path().join("put.batch");
    std::fs::write(
        &batch_up,
        format!(
            "put {} {}\n",
            local_src.display(),
            remote_dir.join("up_sftp.bin").display()
        ),
    )?;
    let tool = |mut command: std::process::Command, what: &str| -> anyhow::Result<Duration> {
        let t = Instant::now();
        let out = command.output()?;
        let elapsed = t.elapsed();
        ensure!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(elapsed)
    };
    // [ours read, scp down, sftp down, ours write, scp up, sftp up]
    let mut times: [Vec<Duration>; 6] = Default::default();
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..6).collect();
        if rep % 2 == 1 {
            order[..3].reverse();
            order[3..].reverse();
        }
        for i in order {
            let t = match i {
                0 => {
                    let t = Instant::now();
                    let got = ctx.rt.block_on(executor.read_file_bytes(&remote_src))?;
                    let elapsed = t.elapsed();
                    ensure!(got.len() == size, "read {} bytes", got.len());
                    elapsed
                }
                1 => tool(
                    ctx.ssh.scp(
                        &ctx.ssh.remote_path(&remote_src),
                        &local_dst.display().to_string(),
                    ),
                    "scp",
                )?,
                2 => tool(ctx.ssh.sftp_batch(&batch), "sftp")?,
                3 => {
                    let t = Instant::now();
                    ctx.rt
                        .block_on(executor.write_file_bytes(&remote_up, &data))?;
                    t.elapsed()
                }
                4 => tool(
                    ctx.ssh.scp(
                        &local_src.display().to_string(),
                        &ctx.ssh.remote_path(&remote_scp),
                    ),
                    "scp",
                )?,
                _ => tool(ctx.ssh.sftp_batch(&batch_up), "sftp")?,
            };
            times[i].push(t);
        }
    }
    ensure!(
        std::fs::metadata(&remote_up)?.len() == size as u64,
        "upload size"
    );
    let rates: Vec<Vec<f64>> = times
        .iter()
        .map(|v| v.iter().map(|d| mib_per_s(size as u64, *d)).collect())
        .collect();
    let per_rep = |a: usize, b: usize| -> Vec<f64> {
        rates[a].iter().zip(&rates[b]).map(|(x, y)| x / y).collect()
    };
    let med = |i: usize| median_min(&rates[i]).0;
    let fmt_rates = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (read_ratio, read_min) = median_min(&per_rep(0, 1));
    let (write_ratio, write_min) = median_min(&per_rep(3, 4));
    println!("  {reps} rounds, interleaved; MiB/s per round -> median");
    println!(
        "  ReadFile 100 MiB:  ours {} -> {:.0}, scp {} -> {:.0}, sftp -b {} -> {:.0}; ours / scp per round: median {read_ratio:.2}, min {read_min:.2}",
        fmt_rates(&rates[0]),
        med(0),
        fmt_rates(&rates[1]),
        med(1),
        fmt_rates(&rates[2]),
        med(2)
    );
    println!(
        "  WriteFile 100 MiB: ours {} -> {:.0}, scp {} -> {:.0}, sftp -b {} -> {:.0}; ours / scp per round: median {write_ratio:.2}, min {write_min:.2}",
        fmt_rates(&rates[3]),
        med(3),
        fmt_rates(&rates[4]),
        med(4),
        fmt_rates(&rates[5]),
        med(5)
    );
    report.row(
        format!("4 ReadFile 100 MiB (`read_file_bytes`), {reps} interleaved rounds"),
        format!("{:.0} MiB/s", med(0)),
        format!("scp {:.0} MiB/s; sftp -b {:.0}", med(1), med(2)),
        format!("{} (min {})", ratio(read_ratio), ratio(read_min)),
        "≥ 1.5× (median of rounds)",
        Some(read_ratio >= 1.5),
    );
    report.row(
        format!("4 WriteFile 100 MiB (`write_file_bytes`), {reps} interleaved rounds"),
        format!("{:.0} MiB/s", med(3)),
        format!("scp {:.0} MiB/s; sftp -b {:.0}", med(4), med(5)),
        format!("{} (min {})", ratio(write_ratio), ratio(write_min)),
        "≥ 1.5× (median of rounds)",
        Some(write_ratio >= 1.5),
    );
    let _ = std::fs::remove_file(&remote_up);
    let _ = std::fs::remove_file(&remote_scp);

    // Many small writes.
    let n = ctx.size(1000, 200);
    let content: String = "x".repeat(199) + "\n";
    let small_ours = remote_dir.join("small_ours");
    let t = Instant::now();
    ctx.rt.block_on(async {
        for i in 0..n {
            executor
                .exec_cmd(&SwiftideCommand::write_file(
                    small_ours.join(format!("f{i}.txt")),
                    content.clone(),
                ))
                .await
                .map_err(|e| anyhow!("WriteFile: {e}"))?;
        }
        anyhow::Ok(())
    })?;
    let ours_small = t.elapsed();
    ensure!(
        std::fs::read_dir(&small_ours)?.count() == n,
        "small files missing"
    );

    // Floor: the same writes on one raw russh-sftp session (open + write + close only).
    let small_raw = remote_dir.join("small_raw");
    std::fs::create_dir_all(&small_raw)?;
    let raw_small = ctx.rt.block_on(raw_sftp_small_writes(
        ctx,
        &small_raw,
        n,
        content.as_bytes(),
    ))?;

    let small_local = ctx.local.path().join("small.txt");
    std::fs::write(&small_local, &content)?;
    let small_sftp = remote_dir.join("small_sftp");
    std::fs::create_dir_all(&small_sftp)?;
    let batch_small = ctx.local.path().join("small.batch");
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "put {} {}\n",
            small_local.display(),
            small_sftp.join(format!("f{i}.txt")).display()
        ));
    }
    std::fs::write(&batch_small, text)?;
    let t = Instant::now();
    let out = ctx.ssh.sftp_batch(&batch_small).output()?;
    ensure!(
        out.status.success(),
        "sftp small: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sftp_small = t.elapsed();
    let per = |d: Duration| ms(d / n as u32);
    println!(
        "  {n} small WriteFiles: ours {} ({} each), raw russh-sftp open+write+close {} ({} each), sftp -b {} ({} each, incl. connect)",
        ms(ours_small),
        per(ours_small),
        ms(raw_small),
        per(raw_small),
        ms(sftp_small),
        per(sftp_small)
    );
    report.row(
        format!("4 {n} small WriteFiles (200 B, sequential, swiftide `WriteFile`)"),
        format!("{} ({}/file)", ms(ours_small), per(ours_small)),
        format!(
            "sftp -b {} ({}/file); raw russh-sftp {} ({}/file)",
            ms(sftp_small),
            per(sftp_small),
            ms(raw_small),
            per(raw_small)
        ),
        ratio(ours_small.as_secs_f64() / sftp_small.as_secs_f64()),
        "–",
        None,
    );
    ctx.rt.block_on(executor.close());
    let _ = std::fs::remove_dir_all(&remote_dir);
    Ok(())
}

async fn raw_sftp_small_writes(
    ctx: &Ctx,
    dir: &Path,
    n: usize,
    content: &[u8],
) -> anyhow::Result<Duration> {
    let handle = raw::connect(&ctx.conn.raw_target(), true).await?;
    let sftp = raw::sftp(&handle).await?;
    let t = Instant::now();
    for i in 0..n {
        raw::sftp_write(
            &sftp,
            &dir.join(format!("f{i}.txt")).display().to_string(),
            content,
        )
        .await?;
    }
    Ok(t.elapsed())
}

/// Creates `n` small text files in 100 directories.
fn make_tree(root: &Path, n: usize) -> anyhow::Result<u64> {
    let mut total = 0u64;
    for i in 0..n {
        let dir = root.join(format!("d{:02}", i % 100));
        if i < 100 {
            std::fs::create_dir_all(&dir)?;
        }
        let body = format!("// file {i}\n{}\n", "let x = 42; ".repeat(20 + i % 20));
        total += body.len() as u64;
        std::fs::write(dir.join(format!("f{i:05}.rs")), body)?;
    }
    Ok(total)
}

pub fn stream_files(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = ctx.size(10_000, 2_000);
    let root = ctx.tb.scratch_dir().join("tree");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    let bytes = make_tree(&root, n)?;
    println!("  {n} files, {} in {}", mib(bytes), root.display());

    // Peer: ssh host tar c dir | tar x.
    let dest = ctx.local.path().join("tree-copy");
    let mut tar_times = vec![];
    for _ in 0..ctx.size(3, 1) {
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::create_dir_all(&dest)?;
        let t = Instant::now();
        let mut ssh = ctx
            .ssh
            .ssh(&[], &format!("tar c -C {} .", root.display()))
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = ssh.stdout.take().context("ssh stdout")?;
        let tar = std::process::Command::new("tar")
            .arg("x")
            .arg("-C")
            .arg(&dest)
            .stdin(stdout)
            .status()?;
        let ssh_status = ssh.wait()?;
        ensure!(tar.success() && ssh_status.success(), "tar pipe failed");
        tar_times.push(t.elapsed());
    }
    let tar = Samples::new(tar_times);
    println!(
        "  ssh host tar c | tar x                   {}",
        tar.describe()
    );

    let executor = ctx.rt.block_on(ctx.builder().build())?;
    let ours = ctx.rt.block_on(async {
        let mut times = vec![];
        for _ in 0..if ctx.quick { 1 } else { 3 } {
            let t = Instant::now();
            let mut stream = executor
                .stream_files(&root, None)
                .await
                .map_err(|e| anyhow!("stream_files: {e:#}"))?;
            let (mut files, mut got) = (0usize, 0u64);
            while let Some(item) = stream.next().await {
                let node = item.map_err(|e| anyhow!("stream_files item: {e:#}"))?;
                files += 1;
                got += node.chunk.len() as u64;
            }
            ensure!(
                files == n,
                "stream_files yielded {files} of {n} files ({got} bytes)"
            );
            times.push(t.elapsed());
        }
        anyhow::Ok(Samples::new(times))
    });
    ctx.rt.block_on(executor.close());
    match ours {
        Ok(ours) => {
            println!(
                "  ours stream_files                        {}",
                ours.describe()
            );
            let r = tar.median().as_secs_f64() / ours.median().as_secs_f64();
            report.row(
                format!("5 `stream_files` over {n} small files"),
                ms(ours.median()),
                format!("ssh tar c | tar x {}", ms(tar.median())),
                format!("{} of tar speed", ratio(r)),
                "≥ 0.8×",
                Some(r >= 0.8),
            );
        }
        Err(e) => {
            println!("  ours stream_files: n/a ({e:#})");
            report.row(
                format!("5 `stream_files` over {n} small files"),
                "n/a (not implemented yet)",
                format!("ssh tar c | tar x {}", ms(tar.median())),
                "n/a",
                "≥ 0.8×",
                None,
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
