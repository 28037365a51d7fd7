//! Scenario 7: client memory per idle pooled connection.

use swiftide_ssh_testbed::Testbed;

use crate::{
    Ctx, child,
    peers::ControlMaster,
    report::Report,
    stats::{kib, mib},
};

pub fn idle_connections(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = ctx.size(200, 50);
    // A dedicated server: n root connections mean n sshd processes.
    let tb = Testbed::builder().max_startups("300:30:600").start()?;
    let conn = Ctx::conn_for(&tb);
    let lock = tb.scratch_dir().join("hold.lock");
    let ours = child::spawn(
        "mem-ours",
        &conn,
        &[("n", n.to_string()), ("lock", lock.display().to_string())],
    )?;
    let g = |m: &std::collections::HashMap<String, String>, k: &str| -> f64 {
        m.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    };
    let conns = g(&ours, "conns");
    let extra_conns = conns - g(&ours, "base_conns");
    let per_ours = (g(&ours, "idle_rss") - g(&ours, "base_rss")) / extra_conns;
    let per_busy = (g(&ours, "busy_rss") - g(&ours, "base_rss")) / extra_conns;
    println!(
        "  ours: {conns} connections (opened in {:.1} s, {} errors); RSS {} → busy {} → idle {}; per idle connection {}, per busy {}",
        g(&ours, "open_secs"),
        g(&ours, "errors"),
        mib(g(&ours, "base_rss") as u64),
        mib(g(&ours, "busy_rss") as u64),
        mib(g(&ours, "idle_rss") as u64),
        kib(per_ours as u64),
        kib(per_busy as u64)
    );
    let rawm = child::spawn("mem-raw", &conn, &[("n", n.to_string())])?;
    let per_raw = (g(&rawm, "idle_rss") - g(&rawm, "base_rss")) / (g(&rawm, "conns") - 1.0);
    println!(
        "  raw russh: {} connections; RSS {} → {}; per connection {}",
        g(&rawm, "conns"),
        mib(g(&rawm, "base_rss") as u64),
        mib(g(&rawm, "idle_rss") as u64),
        kib(per_raw as u64)
    );
    let ssh = Ctx::ssh_for(&conn);
    let cm_rss = ControlMaster::start(&ssh, ctx.sockets.path().join("cm-mem"))
        .ok()
        .and_then(|cm| {
            cm.run("true").ok()?;
            cm.master_rss()
        });
    if let Some(rss) = cm_rss {
        println!(
            "  OpenSSH ControlMaster process RSS (one connection): {}",
            kib(rss)
        );
    }
    let complete = conns as usize == n && g(&ours, "errors") == 0.0;
    report.row(
        format!("7 client RSS per idle pooled connection ({n} connections)"),
        format!(
            "{}{}",
            kib(per_ours as u64),
            if complete {
                String::new()
            } else {
                format!(" (only {conns} opened)")
            }
        ),
        format!(
            "raw russh {}; ControlMaster process {}",
            kib(per_raw as u64),
            cm_rss.map(kib).unwrap_or_else(|| "n/a".into())
        ),
        crate::stats::ratio(per_ours / per_raw),
        "≤ 256 KiB",
        Some(complete && per_ours <= 256.0 * 1024.0),
    );
    drop(tb);
    Ok(())
}
