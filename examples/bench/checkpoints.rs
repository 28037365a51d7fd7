//! Scenario `checkpoints` (issue 46): a tree of 10,000 files of 100 KiB (1 GiB; `--quick`:
//! 2,000 files, 200 MiB) on the host. The first checkpoint against `git add -A && git
//! commit` of the same tree into a fresh store and a `cp -a` copy; the next checkpoint
//! after a one-file change against the next snapshot with `rsync -a --link-dest` (when
//! installed: unchanged files hard-linked to the copy); the rollback of a one-file change.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};

use crate::{Ctx, report::Report, stats::ms};

/// Times a local command (the host is this machine).
fn timed(program: &str, args: &[&str], env: &[(&str, &Path)]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .status()
        .with_context(|| format!("{program} {args:?}"))?;
    ensure!(status.success(), "{program} {args:?}: {status}");
    Ok(started.elapsed())
}

pub fn checkpoints(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let files = ctx.size(10_000, 2_000);
    let base = tempfile::tempdir()?;
    let tree = base.path().join("tree");
    for i in 0..files {
        let dir = tree.join(format!("d{:03}", i / 100));
        std::fs::create_dir_all(&dir)?;
        let seed = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let content: Vec<u8> = (0..100 * 1024u64)
            .map(|j| (seed.wrapping_add(j.wrapping_mul(0x2545_f491)) >> 24) as u8)
            .collect();
        std::fs::write(dir.join(format!("f{i:05}.bin")), content)?;
    }
    let size = format!("{files} files, {} MiB", files * 100 / 1024);
    let tree_str = tree.to_str().context("tree path")?;

    // Peers, on the same warm page cache.
    let store = base.path().join("peer.git");
    let git_env = [
        ("GIT_DIR", store.as_path()),
        ("GIT_WORK_TREE", tree.as_path()),
    ];
    timed(
        "git",
        &["init", "-q", "--bare", store.to_str().unwrap_or_default()],
        &[],
    )?;
    let git = timed("git", &["add", "-A", "-f", "--", tree_str], &git_env)?
        + timed(
            "git",
            &[
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@b",
                "commit",
                "-qm",
                "x",
            ],
            &git_env,
        )?;
    let copy = timed(
        "cp",
        &[
            "-a",
            tree_str,
            base.path().join("copy").to_str().unwrap_or_default(),
        ],
        &[],
    )?;
    let rsync = if Command::new("rsync").arg("--version").output().is_ok() {
        let previous = base.path().join("copy");
        Some(timed(
            "rsync",
            &[
                "-a",
                &format!("--link-dest={}", previous.display()),
                &format!("{tree_str}/"),
                base.path().join("linked").to_str().unwrap_or_default(),
            ],
            &[],
        )?)
    } else {
        None
    };

    let (first, next, rollback) = ctx.rt.block_on(async {
        let executor = ctx.conn.builder().build().await?;
        let started = Instant::now();
        executor.checkpoint(&tree).await?;
        let first = started.elapsed();
        std::fs::write(tree.join("d000/f00000.bin"), b"one change")?;
        let started = Instant::now();
        let checkpoint = executor.checkpoint(&tree).await?;
        let next = started.elapsed();
        std::fs::write(tree.join("d000/f00001.bin"), b"another change")?;
        let started = Instant::now();
        let undone = executor.rollback(&checkpoint).await?;
        let rollback = started.elapsed();
        ensure!(undone.len() == 1, "rollback undid {undone:?}");
        executor.close().await;
        anyhow::Ok((first, next, rollback))
    })?;
    let peers = format!(
        "`git add -A && git commit` {}; `cp -a` {}; the next snapshot with `rsync -a --link-dest` (against the copy) {}",
        ms(git),
        ms(copy),
        rsync.map_or("not installed".to_owned(), ms)
    );
    println!(
        "  checkpoints, {size}: first {}, next {}, rollback {}; {peers}",
        ms(first),
        ms(next),
        ms(rollback)
    );
    let ratio = first.as_secs_f64() / git.as_secs_f64();
    report.row(
        format!("checkpoint: first, {size}"),
        ms(first),
        peers.clone(),
        format!("{ratio:.2}× git"),
        "≤ 1.5× git",
        Some(ratio <= 1.5),
    );
    report.row(
        format!("checkpoint: the next after a one-file change, {size}"),
        ms(next),
        String::new(),
        String::new(),
        "≤ 1 s",
        Some(next <= Duration::from_secs(1)),
    );
    report.row(
        format!("checkpoint: rollback of a one-file change, {size}"),
        ms(rollback),
        String::new(),
        String::new(),
        "≤ 2 s",
        Some(rollback <= Duration::from_secs(2)),
    );
    Ok(())
}
