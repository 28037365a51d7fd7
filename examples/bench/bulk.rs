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

pub fn streaming(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let bytes: u64 = if ctx.quick { 256 << 20 } else { 1 << 30 };
    let label = if ctx.quick { "256 MiB" } else { "1 GiB" };
    let extra = [("bytes", bytes.to_string())];

    let ours = child::spawn("stream-ours", &ctx.conn, &extra)?;
    let ours_rate = f(&ours, "bytes") / MIB / f(&ours, "secs");
    ensure!(
        f(&ours, "bytes") as u64 == bytes,
        "ours counted {} bytes",
        f(&ours, "bytes")
    );
    println!(
        "  ours exec_cmd_streaming, counting sink   {:.0} MiB/s, peak RSS {} (after connect {}), CommandOutput returned {} bytes",
        ours_rate,
        mib(f(&ours, "peak_rss") as u64),
        mib(f(&ours, "base_rss") as u64),
        f(&ours, "returned")
    );
    let cap = 1usize << 20;
    let capped = child::spawn(
        "stream-ours-capped",
        &ctx.conn,
        &[("bytes", bytes.to_string()), ("cap", cap.to_string())],
    )?;
    let capped_rate = f(&capped, "bytes") / MIB / f(&capped, "secs");
    println!(
        "  ours, max_output_bytes(Some(1 MiB))      {:.0} MiB/s, peak RSS {}, CommandOutput {} bytes",
        capped_rate,
        mib(f(&capped, "peak_rss") as u64),
        f(&capped, "returned")
    );
    let rawr = child::spawn("stream-raw", &ctx.conn, &extra)?;
    let raw_rate = f(&rawr, "bytes") / MIB / f(&rawr, "secs");
    println!(
        "  raw russh channel (same config)          {:.0} MiB/s, peak RSS {}",
        raw_rate,
        mib(f(&rawr, "peak_rss") as u64)
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
        mib(f(&ours, "peak_rss") as u64),
        format!(
            "ssh {}; raw russh {}; ours with `max_output_bytes(Some(1 MiB))` {} ({capped_rate:.0} MiB/s)",
            mib(ssh_peak),
            mib(f(&rawr, "peak_rss") as u64),
            mib(f(&capped, "peak_rss") as u64)
        ),
        ratio(f(&ours, "peak_rss") / ssh_peak as f64),
        "– (bounded?)",
        None,
    );
    Ok(())
}

/// Deterministic pseudo-random bytes (xorshift64*), fast and incompressible.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
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

fn median_of(reps: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Samples> {
    Ok(Samples::new(crate::time_n(reps, &mut f)?))
}

pub fn files(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let size = 100usize << 20;
    let reps = ctx.size(3, 1);
    let remote_dir = ctx.tb.scratch_dir().join("files");
    std::fs::create_dir_all(&remote_dir)?;
    let remote_src = remote_dir.join("big.bin");
    let data = pseudo_random(size, 42);
    std::fs::write(&remote_src, &data)?;
    let local_src = ctx.local.path().join("big.bin");
    std::fs::write(&local_src, &data)?;
    let local_dst = ctx.local.path().join("download.bin");
    let executor = ctx.rt.block_on(ctx.builder().build())?;

    // Download.
    let ours_read = median_of(reps, || {
        let got = ctx.rt.block_on(executor.read_file_bytes(&remote_src))?;
        ensure!(got.len() == size, "read {} bytes", got.len());
        Ok(())
    })?;
    let scp_down = median_of(reps, || {
        let out = ctx
            .ssh
            .scp(
                &ctx.ssh.remote_path(&remote_src),
                &local_dst.display().to_string(),
            )
            .output()?;
        ensure!(
            out.status.success(),
            "scp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })?;
    let batch = ctx.local.path().join("get.batch");
    std::fs::write(
        &batch,
        format!("get {} {}\n", remote_src.display(), local_dst.display()),
    )?;
    let sftp_down = median_of(reps, || {
        let out = ctx.ssh.sftp_batch(&batch).output()?;
        ensure!(
            out.status.success(),
            "sftp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })?;

    // Upload.
    let remote_up = remote_dir.join("up_ours.bin");
    let ours_write = median_of(reps, || {
        ctx.rt
            .block_on(executor.write_file_bytes(&remote_up, &data))?;
        Ok(())
    })?;
    ensure!(
        std::fs::metadata(&remote_up)?.len() == size as u64,
        "upload size"
    );
    let remote_scp = remote_dir.join("up_scp.bin");
    let scp_up = median_of(reps, || {
        let out = ctx
            .ssh
            .scp(
                &local_src.display().to_string(),
                &ctx.ssh.remote_path(&remote_scp),
            )
            .output()?;
        ensure!(
            out.status.success(),
            "scp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })?;
    let batch_up = ctx.local.path().join("put.batch");
    std::fs::write(
        &batch_up,
        format!(
            "put {} {}\n",
            local_src.display(),
            remote_dir.join("up_sftp.bin").display()
        ),
    )?;
    let sftp_up = median_of(reps, || {
        let out = ctx.ssh.sftp_batch(&batch_up).output()?;
        ensure!(
            out.status.success(),
            "sftp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })?;
    let rate = |s: &Samples| mib_per_s(size as u64, s.median());
    println!(
        "  ReadFile 100 MiB:  ours {:.0} MiB/s, scp {:.0}, sftp -b {:.0}",
        rate(&ours_read),
        rate(&scp_down),
        rate(&sftp_down)
    );
    println!(
        "  WriteFile 100 MiB: ours {:.0} MiB/s, scp {:.0}, sftp -b {:.0}",
        rate(&ours_write),
        rate(&scp_up),
        rate(&sftp_up)
    );
    let r = rate(&ours_read) / rate(&scp_down);
    report.row(
        "4 ReadFile 100 MiB (`read_file_bytes`)",
        format!("{:.0} MiB/s", rate(&ours_read)),
        format!(
            "scp {:.0} MiB/s; sftp -b {:.0}",
            rate(&scp_down),
            rate(&sftp_down)
        ),
        ratio(r),
        "≥ 1.5×",
        Some(r >= 1.5),
    );
    let r = rate(&ours_write) / rate(&scp_up);
    report.row(
        "4 WriteFile 100 MiB (`write_file_bytes`)",
        format!("{:.0} MiB/s", rate(&ours_write)),
        format!(
            "scp {:.0} MiB/s; sftp -b {:.0}",
            rate(&scp_up),
            rate(&sftp_up)
        ),
        ratio(r),
        "≥ 1.5×",
        Some(r >= 1.5),
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
