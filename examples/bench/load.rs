//! Scenario 2 (throughput of `true` under concurrency) and 6 (cold start with 64 callers).

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use swiftide_ssh_executor::{Runner, SshExecutor};

use crate::{
    Ctx,
    peers::ControlMaster,
    raw,
    report::Report,
    stats::{Samples, ms, ratio, self_cpu_secs, tree_cpu_secs},
};

/// One measured batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Batch {
    pub elapsed: Duration,
    pub ok: usize,
    pub errors: usize,
    pub retries: u64,
    /// Client CPU seconds (this process, or the peer's process when it reports it).
    pub client_cpu: f64,
    /// Busy CPU seconds of the benchmark's processes (client + sshd + commands; see
    /// `stats::enter_cpu_cgroup`), or of the whole machine without a cgroup.
    pub machine_cpu: f64,
    /// Stopped taking work at the time cap.
    pub capped: bool,
}

impl Batch {
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn text(&self) -> String {
        format!(
            "{:.0}/s ({} err{})",
            self.rate(),
            self.errors,
            if self.capped { ", time-capped" } else { "" }
        )
    }

    /// `client 180 µs, machine 2100 µs CPU per command`
    /// Client CPU µs per command.
    pub fn client_us(&self) -> String {
        let v = self.client_cpu / self.ok.max(1) as f64 * 1e6;
        if v.is_finite() {
            format!("{v:.0} µs")
        } else {
            "n/a".into()
        }
    }

    pub fn cpu_text(&self) -> String {
        let per = |s: f64| s / self.ok.max(1) as f64 * 1e6;
        format!(
            "CPU/cmd: client {:.0} µs, all {:.0} µs, server {:.0} µs",
            per(self.client_cpu),
            per(self.machine_cpu),
            per(self.machine_cpu - self.client_cpu)
        )
    }

    /// Server-side CPU per command (sshd, shells, the command): all CPU of the run's
    /// processes minus the client's.
    pub fn server_us(&self) -> String {
        let v = (self.machine_cpu - self.client_cpu) / self.ok.max(1) as f64 * 1e6;
        if v.is_finite() {
            format!("{v:.0} µs")
        } else {
            "n/a".into()
        }
    }
}

/// Stop taking new work after this long (keeps a pathological variant from eating the
/// time budget; the rate stays valid).
const BATCH_CAP: Duration = Duration::from_secs(30);

struct CpuMeter {
    client: f64,
    machine: f64,
}

impl CpuMeter {
    fn start() -> Self {
        Self {
            client: self_cpu_secs(),
            machine: tree_cpu_secs(),
        }
    }

    fn stop(&self) -> (f64, f64) {
        (
            self_cpu_secs() - self.client,
            tree_cpu_secs() - self.machine,
        )
    }
}

/// `total` × `true` through `concurrency` tasks sharing one executor.
pub async fn ours_batch(executor: &SshExecutor, total: usize, concurrency: usize) -> Batch {
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let retries_before = executor.pool_stats().channel_open_retries;
    let cpu = CpuMeter::start();
    let started = Instant::now();
    let deadline = started + BATCH_CAP;
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (executor, next, ok, errors) =
            (executor.clone(), next.clone(), ok.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline && next.fetch_add(1, Ordering::Relaxed) < total {
                match executor.run("true").await {
                    Ok(e) if e.status.success() => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(e) => {
                        eprintln!("  ours: unexpected status {:?}", e.status);
                        errors.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => {
                        if errors.load(Ordering::Relaxed) < 3 {
                            eprintln!("  ours: error: {e}");
                        }
                        errors.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = started.elapsed();
    let (client_cpu, machine_cpu) = cpu.stop();
    let ok = ok.load(Ordering::Relaxed);
    let errors = errors.load(Ordering::Relaxed);
    Batch {
        elapsed,
        ok,
        errors,
        retries: executor.pool_stats().channel_open_retries - retries_before,
        client_cpu,
        machine_cpu,
        capped: ok + errors < total,
    }
}

/// The floor: raw russh, `conns` connections × `per_conn` channels in flight (the executor's
/// default pool shape), retrying refused channel opens like the executor does. `supervised`:
/// `command` is an [`raw::executor_request`], whose stdin stays open.
async fn raw_batch(
    target: &raw::Target,
    command: &raw::ExecutorRequest,
    supervised: bool,
    total: usize,
    conns: usize,
    per_conn: usize,
) -> anyhow::Result<Batch> {
    let mut handles = Vec::new();
    for _ in 0..conns {
        handles.push(Arc::new(raw::connect(target, true).await?));
    }
    let run = |handles: Vec<Arc<raw::RawHandle>>, total: usize| {
        let command = command.clone();
        async move {
            let next = Arc::new(AtomicUsize::new(0));
            let ok = Arc::new(AtomicUsize::new(0));
            let errors = Arc::new(AtomicUsize::new(0));
            let retries = Arc::new(AtomicUsize::new(0));
            let cpu = CpuMeter::start();
            let started = Instant::now();
            let mut tasks = Vec::new();
            for handle in &handles {
                for _ in 0..per_conn {
                    let (handle, next, ok, errors, retries, command) = (
                        handle.clone(),
                        next.clone(),
                        ok.clone(),
                        errors.clone(),
                        retries.clone(),
                        command.clone(),
                    );
                    tasks.push(tokio::spawn(async move {
                        while next.fetch_add(1, Ordering::Relaxed) < total {
                            let mut delay = Duration::from_millis(1);
                            let mut done = false;
                            for _ in 0..10 {
                                let result = if supervised {
                                    raw::exec_supervised(&handle, &command, |_| {}).await
                                } else {
                                    raw::exec(&handle, &command.0, |_| {}).await
                                };
                                match result {
                                    Ok((Some(0), _)) => {
                                        ok.fetch_add(1, Ordering::Relaxed);
                                        done = true;
                                        break;
                                    }
                                    Err(e)
                                        if matches!(
                                            e.downcast_ref::<russh::Error>(),
                                            Some(russh::Error::ChannelOpenFailure(_))
                                        ) =>
                                    {
                                        retries.fetch_add(1, Ordering::Relaxed);
                                        tokio::time::sleep(delay).await;
                                        delay = (delay * 2).min(Duration::from_millis(50));
                                    }
                                    _ => break,
                                }
                            }
                            if !done {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }));
                }
            }
            for t in tasks {
                let _ = t.await;
            }
            let elapsed = started.elapsed();
            let (client_cpu, machine_cpu) = cpu.stop();
            Batch {
                elapsed,
                ok: ok.load(Ordering::Relaxed),
                errors: errors.load(Ordering::Relaxed),
                retries: retries.load(Ordering::Relaxed) as u64,
                client_cpu,
                machine_cpu,
                capped: false,
            }
        }
    };
    run(handles.clone(), conns * per_conn * 2).await;
    let batch = run(handles.clone(), total).await;
    for h in handles {
        let _ = h
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
    Ok(batch)
}

/// ControlMaster peer: `threads` parallel `ssh` processes over one master.
fn cm_batch(cm: &ControlMaster, total: usize, threads: usize) -> Batch {
    let next = AtomicUsize::new(0);
    let ok = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    let cpu = CpuMeter::start();
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    match cm.run("true") {
                        Ok(true) => ok.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let (_, machine_cpu) = cpu.stop();
    Batch {
        elapsed,
        ok: ok.into_inner(),
        errors: errors.into_inner(),
        retries: 0,
        // The ssh processes are children; their CPU is in the machine figure only.
        client_cpu: f64::NAN,
        machine_cpu,
        capped: false,
    }
}

/// Parallel ssh processes per ControlMaster: MaxSessions is 10 per connection, and the
/// master is one connection; 8 leaves the same headroom the executor keeps.
const CM_CAP: usize = 8;

pub fn throughput(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let total = ctx.size(2000, 400);
    let levels = [1usize, 16, 64, 256];
    let raised_connections = 32u32;
    let default_exec = ctx.rt.block_on(ctx.builder().build())?;
    let per_exec_exec = ctx
        .rt
        .block_on(ctx.builder().runner(Runner::PerExec).build())?;
    let raised_exec = ctx
        .rt
        .block_on(ctx.builder().max_connections(raised_connections).build())?;
    let mut rows = Vec::new();
    let mut diagnostics: Vec<(String, Batch)> = Vec::new();
    for &c in &levels {
        println!("  concurrency {c}, {total} × true");
        let warm = (c * 2).max(16);
        let ours = ctx.rt.block_on(async {
            ours_batch(&default_exec, warm, c).await;
            ours_batch(&default_exec, total, c).await
        });
        let stats = default_exec.pool_stats();
        println!(
            "    ours (default: 4 conns × 8 slots)     {}  {:.2} s, open retries {}, connections {}; {}",
            ours.text(),
            ours.elapsed.as_secs_f64(),
            ours.retries,
            stats.connections,
            ours.cpu_text()
        );
        let per_exec = ctx.rt.block_on(async {
            ours_batch(&per_exec_exec, warm, c).await;
            ours_batch(&per_exec_exec, total, c).await
        });
        println!(
            "    ours, Runner::PerExec (4 conns × 8)    {}  {:.2} s, open retries {}; {}",
            per_exec.text(),
            per_exec.elapsed.as_secs_f64(),
            per_exec.retries,
            per_exec.cpu_text()
        );
        let raised = if c == 1 {
            ours
        } else {
            let raised = ctx.rt.block_on(async {
                ours_batch(&raised_exec, warm, c).await;
                ours_batch(&raised_exec, total, c).await
            });
            let stats = raised_exec.pool_stats();
            println!(
                "    ours (max_connections={raised_connections})            {}  {:.2} s, open retries {}, connections {}; {}",
                raised.text(),
                raised.elapsed.as_secs_f64(),
                raised.retries,
                stats.connections,
                raised.cpu_text()
            );
            raised
        };
        if c == 64 {
            let target = ctx.conn.raw_target();
            for (label, command, supervised) in [
                ("`true`", (b"true".to_vec(), Vec::new()), false),
                (
                    "executor's request",
                    raw::executor_request("true", true)?,
                    true,
                ),
            ] {
                match ctx
                    .rt
                    .block_on(raw_batch(&target, &command, supervised, total, 4, 8))
                {
                    Ok(b) => {
                        println!(
                            "    floor: raw russh 4 conns × 8, {label:<20} {}  {:.2} s, open retries {}; {}",
                            b.text(),
                            b.elapsed.as_secs_f64(),
                            b.retries,
                            b.cpu_text()
                        );
                        diagnostics.push((format!("raw russh 4×8 channels, {label}"), b));
                    }
                    Err(e) => println!("    floor: raw russh failed: {e:#}"),
                }
            }
        }
        let asyncssh = match &ctx.asyncssh {
            Ok(a) => match a.run(
                &ctx.ssh,
                "throughput",
                &[("total", total.to_string()), ("concurrency", c.to_string())],
            ) {
                Ok(r) => {
                    let get = |k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
                    let b = Batch {
                        elapsed: Duration::from_secs_f64(get("elapsed")),
                        ok: get("ok") as usize,
                        errors: get("errors") as usize,
                        retries: get("retries") as u64,
                        client_cpu: get("cpu"),
                        machine_cpu: get("machine_cpu"),
                        capped: false,
                    };
                    println!(
                        "    asyncssh (1 conn, ≤{} channels)       {}  {:.2} s, open retries {}; {}",
                        get("inflight"),
                        b.text(),
                        b.elapsed.as_secs_f64(),
                        b.retries,
                        b.cpu_text()
                    );
                    Some(b)
                }
                Err(e) => {
                    println!("    asyncssh failed: {e:#}");
                    None
                }
            },
            Err(_) => None,
        };
        let cm = ctx.cm.as_ref().map(|cm| {
            let threads = c.min(CM_CAP);
            cm_batch(cm, threads * 2, threads);
            let b = cm_batch(cm, total, threads);
            println!(
                "    ControlMaster ({threads} parallel ssh)       {}  {:.2} s; {}",
                b.text(),
                b.elapsed.as_secs_f64(),
                b.cpu_text()
            );
            b
        });
        rows.push((c, ours, per_exec, raised, asyncssh, cm));
    }
    let runner = default_exec
        .pool_stats()
        .runner
        .unwrap_or_else(|| "none".to_owned());
    ctx.rt.block_on(async {
        per_exec_exec.close().await;
        default_exec.close().await;
        raised_exec.close().await;
    });

    let vs = |ours: &Batch, peer: &Option<Batch>| {
        peer.map(|p| ours.rate() / p.rate()).unwrap_or(f64::NAN)
    };
    for (c, ours, per_exec, raised, asyncssh, cm) in &rows {
        let peer = format!(
            "asyncssh {}; ControlMaster ×{} {}",
            asyncssh
                .map(|b| format!(
                    "{}, CPU/cmd client {}, server {}",
                    b.text(),
                    b.client_us(),
                    b.server_us()
                ))
                .unwrap_or_else(|| "n/a".into()),
            c.min(&CM_CAP),
            cm.map(|b| b.text()).unwrap_or_else(|| "n/a".into())
        );
        let (ra, rc) = (vs(ours, asyncssh), vs(ours, cm));
        let (target, met) = if *c == 64 {
            (
                "≥ 1.2× asyncssh, 0 errors",
                Some(ra >= 1.2 && ours.errors == 0),
            )
        } else {
            ("0 errors", Some(ours.errors == 0))
        };
        report.row(
            format!("2 throughput c={c}, default pool"),
            format!(
                "{}, CPU/cmd client {}, server {}",
                ours.text(),
                ours.client_us(),
                ours.server_us()
            ),
            peer.clone(),
            format!("{} asyncssh / {} CM", ratio(ra), ratio(rc)),
            target,
            met,
        );
        report.row(
            format!("2 throughput c={c}, default pool, runner off (on: {runner})"),
            format!(
                "{}, CPU/cmd client {}, server {}",
                per_exec.text(),
                per_exec.client_us(),
                per_exec.server_us()
            ),
            "",
            format!(
                "{} asyncssh; runner on/off {}",
                ratio(vs(per_exec, asyncssh)),
                ratio(ours.rate() / per_exec.rate())
            ),
            "(runner off, for comparison)",
            None,
        );
        if *c >= 64 {
            let (ra, rc) = (vs(raised, asyncssh), vs(raised, cm));
            report.row(
                format!("2 throughput c={c}, max_connections={raised_connections}"),
                format!(
                    "{}, CPU/cmd client {}, server {}",
                    raised.text(),
                    raised.client_us(),
                    raised.server_us()
                ),
                peer,
                format!("{} asyncssh / {} CM", ratio(ra), ratio(rc)),
                target,
                if *c == 64 {
                    Some(ra >= 1.2 && raised.errors == 0)
                } else {
                    Some(raised.errors == 0)
                },
            );
        }
    }
    for (label, b) in &diagnostics {
        report.row(
            format!("2 throughput c=64 diagnostic: {label}"),
            format!(
                "{}, CPU/cmd client {}, server {}",
                b.text(),
                b.client_us(),
                b.server_us()
            ),
            "",
            "",
            "(diagnostic)",
            None,
        );
    }
    Ok(())
}

/// One cold start: `callers` concurrent `true` on a fresh executor. Also returns a timeline:
/// when each connection became available and when callers finished.
async fn cold_batch(executor: SshExecutor, callers: usize) -> (Duration, usize, u64, String) {
    let started = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = {
        let executor = executor.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen = 0usize;
            let mut opened = Vec::new();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
                let c = executor.pool_stats().connections;
                while seen < c {
                    seen += 1;
                    opened.push(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            opened
        })
    };
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        let executor = executor.clone();
        tasks.push(tokio::spawn(async move {
            let r = executor.run("true").await;
            (r, started.elapsed())
        }));
    }
    let mut errors = 0;
    let mut done = Vec::new();
    for t in tasks {
        match t.await {
            Ok((Ok(e), at)) if e.status.success() => done.push(at),
            Ok((Err(e), _)) => {
                if errors < 3 {
                    eprintln!("  cold start error: {e}");
                }
                errors += 1
            }
            _ => errors += 1,
        }
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let opened = monitor.await.unwrap_or_default();
    let stats = executor.pool_stats();
    let done = Samples::new(done);
    let timeline = format!(
        "connections ready at [{}]; callers done: first {}, median {}, last {}; channel-open retries {}, slot waits {}, dials {}",
        opened.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", "),
        ms(done.pct(0.0)),
        ms(done.median()),
        ms(done.pct(1.0)),
        stats.channel_open_retries,
        stats.waits,
        stats.dials
    );
    executor.close().await;
    (elapsed, errors, stats.dials, timeline)
}

pub fn cold_start(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let callers = 64;
    let reps = ctx.size(5, 2);
    // build_lazy needs a runtime context (bb8 spawns its reaper).
    let _runtime = ctx.rt.enter();
    let measure = |max_connections: u32| -> anyhow::Result<(Samples, usize, u64)> {
        let mut samples = vec![];
        let mut errors = 0;
        let mut dials = 0;
        for rep in 0..reps {
            let executor = ctx
                .builder()
                .max_connections(max_connections)
                .build_lazy()?;
            let (t, e, d, timeline) = ctx.rt.block_on(cold_batch(executor, callers));
            if rep == 0 {
                println!(
                    "    max_connections={max_connections}, first rep: {} total; {timeline}",
                    ms(t)
                );
            }
            samples.push(t);
            errors += e;
            dials = d;
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok((Samples::new(samples), errors, dials))
    };
    // One dial, for reference: ours (build() = connect + kex + auth, then its first command)
    // and raw russh (connect + kex + auth + a keepalive ping, which shows sshd's Nagle stall on
    // the first reply after authentication when ACKs are delayed).
    let dial_reps = ctx.size(10, 5);
    let (ours_dial, raw_dial, raw_dial_nagle, ours_first) = ctx.rt.block_on(async {
        let target = ctx.conn.raw_target();
        let (mut a, mut b, mut c, mut d) = (vec![], vec![], vec![], vec![]);
        for _ in 0..dial_reps {
            let t = Instant::now();
            let executor = ctx.builder().build().await?;
            a.push(t.elapsed());
            let t = Instant::now();
            executor.run("true").await?;
            d.push(t.elapsed());
            executor.close().await;
            let t = Instant::now();
            let h = raw::connect(&target, true).await?;
            b.push(t.elapsed());
            let _ = h
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
            let t = Instant::now();
            let h = raw::connect(&target, false).await?;
            c.push(t.elapsed());
            let _ = h
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
        }
        anyhow::Ok((
            Samples::new(a),
            Samples::new(b),
            Samples::new(c),
            Samples::new(d),
        ))
    })?;
    println!(
        "  one dial: ours build()               {}",
        ours_dial.describe()
    );
    println!(
        "  then its first `true`                {}",
        ours_first.describe()
    );
    println!(
        "  one dial: raw russh connect+auth+ping {}",
        raw_dial.describe()
    );
    println!(
        "  one dial: same, TCP_NODELAY off       {}",
        raw_dial_nagle.describe()
    );
    let (default, default_errors, default_dials) = measure(4)?;
    println!(
        "  ours, default (4 conns):   {}  errors {default_errors}, dials {default_dials}",
        default.describe()
    );
    let (eight, eight_errors, eight_dials) = measure(8)?;
    println!(
        "  ours, max_connections=8:   {}  errors {eight_errors}, dials {eight_dials}",
        eight.describe()
    );
    let (one, one_errors, _) = measure(1)?;
    println!(
        "  ours, max_connections=1:   {}  errors {one_errors} (reference: one connection, as asyncssh)",
        one.describe()
    );
    let asyncssh = match &ctx.asyncssh {
        Ok(a) => {
            let mut samples = vec![];
            for _ in 0..reps {
                let r = a.run(&ctx.ssh, "coldstart", &[("callers", callers.to_string())])?;
                let secs: f64 = r
                    .get("elapsed")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                samples.push(Duration::from_secs_f64(secs));
            }
            let s = Samples::new(samples);
            println!(
                "  asyncssh (connect + 64 × true, ≤8 channels): {}",
                s.describe()
            );
            Some(s)
        }
        Err(_) => None,
    };
    report.row(
        "6 cold start: 64 callers, empty pool, until all `true` done",
        format!(
            "{} ({} dials, {} err); max_connections=8: {}",
            ms(default.median()),
            default_dials,
            default_errors,
            ms(eight.median())
        ),
        asyncssh
            .as_ref()
            .map(|a| format!("asyncssh 1 conn {}", ms(a.median())))
            .unwrap_or_else(|| "n/a".into()),
        asyncssh
            .as_ref()
            .map(|a| ratio(default.median().as_secs_f64() / a.median().as_secs_f64()))
            .unwrap_or_else(|| "n/a".into()),
        "≤ 1.0× asyncssh, 0 errors",
        Some(
            default_errors == 0
                && eight_errors == 0
                && asyncssh
                    .as_ref()
                    .is_some_and(|a| default.median() <= a.median()),
        ),
    );
    Ok(())
}
