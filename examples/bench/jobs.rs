//! Scenario 10: jobs (`SshExecutor::spawn_job`, `Job::status`, `Job::read`).
//!
//! (a) Starting a job and reading its 1 MiB of output by cursor, against running the same
//!     command with `run`, interleaved on one warm executor. Beside them, two floors of any
//!     design that starts a job with an exec and reads its output from a file over SFTP
//!     (no records, no spool cap, no answer): the command in a session of its own
//!     (`setsid sh -c CMD >FILE &`), and bare (`CMD >FILE &`, no session or group), each
//!     followed by SFTP reads of the file until it holds the 1 MiB. A third floor starts no
//!     process when asked: a slot made ahead (untimed) holds a FIFO, a `head -c` copier and
//!     a shell in a session of its own blocked on the FIFO; the start renames the slot,
//!     writes the command and `go` over SFTP, stats the shell's pid record until it is
//!     written, then reads the output as the others. The same start + read
//!     against `run` again through the +20 ms delay proxy (with (b)'s slow executor), where
//!     round trips count more than the host's processes.
//! (b) Polling an idle job (`status` and `read` of stdout since a cursor, issued together)
//!     next to a `true` command: wall time and server CPU per poll on loopback, round trips
//!     through the +20 ms delay proxy (poll time / RTT), and new processes on the host
//!     (`strace -f` on the testbed's sshd listener and connection processes, counting
//!     `clone`/`fork`/`vfork` calls).

use std::{
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use swiftide_ssh_executor::{Job, JobOptions, JobStatus, JobStream, SshExecutor};

use crate::{
    Ctx, proxy, raw,
    report::Report,
    stats::{Samples, ms, ratio, self_cpu_secs, tree_cpu_secs},
};

const MIB_OUTPUT: u64 = 1 << 20;
/// 1 MiB on stdout; the same bytes for both sides.
const COMMAND_1MIB: &str = "head -c 1048576 /dev/zero";

/// Starts the job and reads stdout by cursor until its end: what an agent does after
/// `spawn_job` when it wants the whole output.
async fn job_and_read(executor: &SshExecutor) -> anyhow::Result<Job> {
    let job = executor.spawn_job(COMMAND_1MIB, JobOptions::new()).await?;
    let mut cursor = 0;
    loop {
        let out = job.read(JobStream::Stdout, cursor, 4 * MIB_OUTPUT).await?;
        cursor = out.next_offset;
        if out.eof {
            break;
        }
        if out.bytes.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    ensure!(cursor == MIB_OUTPUT, "job output {cursor} bytes, not 1 MiB");
    Ok(job)
}

/// The same, waiting with `Job::wait` first (its polls start at 2 ms over SFTP).
async fn job_wait_read(executor: &SshExecutor) -> anyhow::Result<Job> {
    let job = executor.spawn_job(COMMAND_1MIB, JobOptions::new()).await?;
    let status = job.wait(Duration::from_secs(30)).await?;
    ensure!(
        matches!(status, JobStatus::Exited(ref s) if s.success()),
        "job ended {status:?}"
    );
    let out = job.read(JobStream::Stdout, 0, 4 * MIB_OUTPUT).await?;
    ensure!(
        out.eof && out.next_offset == MIB_OUTPUT,
        "job output {} bytes (eof {})",
        out.next_offset,
        out.eof
    );
    Ok(job)
}

/// A design floor (see the module docs): `start`, the command started in the background
/// with its stdout in `file`, then its output read back over SFTP.
async fn floor(executor: &SshExecutor, start: &str, file: &str) -> anyhow::Result<()> {
    ensure!(
        executor.run(start).await?.status.success(),
        "{start} failed"
    );
    read_until_full(executor, file).await
}

/// Whole-file SFTP reads of `file` until it holds the 1 MiB (2 ms apart when short, as
/// `job_and_read` polls).
async fn read_until_full(executor: &SshExecutor, file: &str) -> anyhow::Result<()> {
    let (path, started) = (Path::new(file), Instant::now());
    loop {
        // Missing until the background shell made it.
        let len = executor
            .read_file_bytes(path)
            .await
            .map_or(0, |b| b.len() as u64);
        if len == MIB_OUTPUT {
            return Ok(());
        }
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "{file}: {len} bytes after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The floor of a design that starts no process when asked (see the module docs): slots
/// made ahead, untimed, each a directory holding a FIFO, its stdout copier (`head -c`, as a
/// job's spool cap) already running, and a shell in a session of its own blocked on the
/// FIFO. A start takes the slot with SFTP alone: renames it to the job's name (the claim),
/// writes the shell's `launch` and `go` into the FIFO, then stats the shell's `pid` record
/// until it is written (the job known to run), and reads the output as the other floors.
struct Slots {
    sftp: russh_sftp::client::SftpSession,
    dir: String,
    made: u32,
    ready: Option<String>,
}

impl Slots {
    /// Makes the next slot and lets its processes settle (untimed).
    async fn prepare(&mut self, executor: &SshExecutor) -> anyhow::Result<()> {
        self.made += 1;
        let slot = format!("{}/slot-{}", self.dir, self.made);
        let setup = format!(
            "cd {slot} && mkfifo go && : >pid && (exec </dev/null >/dev/null 2>&1; \
             {{ setsid sh -c 'read -r g <go; exec </dev/null; . ./launch' | head -c 100000000 >stdout; }} &)"
        );
        let made = executor.run(&format!("mkdir {slot} && {setup}")).await?;
        ensure!(
            made.status.success(),
            "slot: {}",
            String::from_utf8_lossy(&made.stderr())
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.ready = Some(slot);
        Ok(())
    }

    /// Writes the slot shell's `launch` and says `go` on its FIFO.
    async fn launch(&self, slot: &str, launch: &str) -> anyhow::Result<()> {
        use russh_sftp::protocol::OpenFlags;
        use tokio::io::AsyncWriteExt;
        raw::sftp_write(&self.sftp, &format!("{slot}/launch"), launch.as_bytes()).await?;
        // Read and write: opening a FIFO so never waits for its reader; append: the server
        // writes without seeking (a FIFO cannot).
        let mut go = self
            .sftp
            .open_with_flags(
                format!("{slot}/go"),
                OpenFlags::READ | OpenFlags::WRITE | OpenFlags::APPEND,
            )
            .await?;
        go.write_all(b"go\n").await?;
        go.shutdown().await?;
        Ok(())
    }

    /// Ends the slot left prepared: its shell exits, its copier with it.
    async fn finish(&mut self) -> anyhow::Result<()> {
        match self.ready.take() {
            Some(slot) => self.launch(&slot, "exit 0\n").await,
            None => Ok(()),
        }
    }

    /// Takes the prepared slot (timed: the returned duration) and prepares the next one.
    async fn start_and_read(&mut self, executor: &SshExecutor) -> anyhow::Result<Duration> {
        if self.ready.is_none() {
            self.prepare(executor).await?;
        }
        let slot = self.ready.take().context("no slot")?;
        let job = format!("{slot}-job");
        let launch = format!("printf '%s\\n' \"$$\" 1<>pid; exec sh -c '{COMMAND_1MIB}'\n");
        let started = Instant::now();
        // One SFTP channel: the server takes the requests in this order, so `launch` and
        // `go` are written after the rename (into the renamed directory).
        let (renamed, launched) =
            tokio::join!(self.sftp.rename(&slot, &job), self.launch(&job, &launch));
        renamed?;
        launched?;
        loop {
            let pid = self.sftp.metadata(format!("{job}/pid")).await?;
            if pid.size.unwrap_or(0) > 0 {
                break;
            }
            ensure!(
                started.elapsed() < Duration::from_secs(10),
                "{job}: no pid after 10 s"
            );
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        read_until_full(executor, &format!("{job}/stdout")).await?;
        let took = started.elapsed();
        self.prepare(executor).await?;
        Ok(took)
    }
}

async fn exec_1mib(executor: &SshExecutor) -> anyhow::Result<()> {
    let e = executor.run(COMMAND_1MIB).await?;
    ensure!(
        e.status.success() && e.stdout().len() as u64 == MIB_OUTPUT,
        "exec output {} bytes, {:?}",
        e.stdout().len(),
        e.status
    );
    Ok(())
}

/// One poll of an idle job: its status and its stdout since `cursor`, issued together.
async fn poll(job: &Job, cursor: u64) -> anyhow::Result<()> {
    let (status, out) = tokio::join!(job.status(), job.read(JobStream::Stdout, cursor, 64 * 1024));
    ensure!(
        matches!(status?, JobStatus::Running { .. }),
        "the idle job is not running"
    );
    ensure!(out?.bytes.is_empty(), "the idle job wrote output");
    Ok(())
}

async fn run_true(executor: &SshExecutor) -> anyhow::Result<()> {
    ensure!(executor.run("true").await?.status.success(), "true failed");
    Ok(())
}

/// Per operation: wall times, and the server's CPU (the run's cgroup minus this process).
struct Measured {
    times: Samples,
    server_cpu_us: f64,
}

/// `blocks` interleaved blocks of `per_block` of each operation (one untimed first).
fn interleaved(
    blocks: usize,
    per_block: usize,
    ops: usize,
    mut op: impl FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Measured>> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); ops];
    let mut server = vec![0.0f64; ops];
    for _ in 0..blocks {
        for i in 0..ops {
            op(i)?;
            let (tree0, self0) = (tree_cpu_secs(), self_cpu_secs());
            for _ in 0..per_block {
                let t = Instant::now();
                op(i)?;
                times[i].push(t.elapsed());
            }
            server[i] += (tree_cpu_secs() - tree0) - (self_cpu_secs() - self0);
        }
    }
    let n = (blocks * per_block) as f64;
    Ok(times
        .into_iter()
        .zip(server)
        .map(|(t, s)| Measured {
            times: Samples::new(t),
            server_cpu_us: s * 1e6 / n,
        })
        .collect())
}

/// Processes started on the host (forks of the listener and of the connections' sshd
/// processes) while `f` runs, counted with `strace -f`.
fn forks_during(
    pids: &[u32],
    scratch: &Path,
    f: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    let out = scratch.join("strace.out");
    let _ = std::fs::remove_file(&out);
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-e", "trace=fork,vfork,clone,clone3", "-o"])
        .arg(&out);
    for pid in pids {
        cmd.arg("-p").arg(pid.to_string());
    }
    let mut strace = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("strace")?;
    // strace attaches to each pid in turn; give it time.
    std::thread::sleep(Duration::from_millis(500));
    let result = f();
    std::thread::sleep(Duration::from_millis(200));
    // SIGINT: strace detaches and exits.
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let _ = strace.wait();
    result?;
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    Ok(text
        .lines()
        .filter(|l| {
            !l.contains("resumed>")
                && ["clone(", "clone3(", "fork(", "vfork("]
                    .iter()
                    .any(|c| l.contains(c))
        })
        .count())
}

/// Median RTT of 20 keepalive pings over a raw russh connection to `port`.
fn rtt(ctx: &Ctx, port: u16) -> anyhow::Result<Duration> {
    let mut target = ctx.conn.raw_target();
    target.port = port;
    ctx.rt.block_on(raw::median_ping_rtt(&target))
}

pub fn jobs(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let executor = ctx.rt.block_on(ctx.builder().build())?;
    // (a) 1 MiB: start + read by cursor vs run.
    let blocks = ctx.size(6, 3);
    let per_block = ctx.size(8, 5);
    let mut made = Vec::<Job>::new();
    let rt = &ctx.rt;
    // The floors' files, one per run, on the host (removed at the end).
    let floor_dir = format!("/tmp/swiftide-ssh-bench-floor-{}", std::process::id());
    rt.block_on(executor.run(&format!("mkdir -p {floor_dir}")))?;
    let mut floor_runs = 0u32;
    let mut slots = rt.block_on(async {
        let handle = raw::connect(&ctx.conn.raw_target(), true).await?;
        anyhow::Ok(Slots {
            sftp: raw::sftp(&handle).await?,
            dir: floor_dir.clone(),
            made: 0,
            ready: None,
        })
    })?;
    // The slot floor times itself: its op also makes the next slot, untimed, so
    // `interleaved`'s time and server CPU for it (m[6]) are not the floor's.
    let mut slot_times = Vec::new();
    let m = interleaved(blocks, per_block, 8, |i| {
        rt.block_on(async {
            floor_runs += 1;
            let file = format!("{floor_dir}/{floor_runs}");
            match i {
                0 => exec_1mib(&executor).await,
                1 => {
                    made.push(job_and_read(&executor).await?);
                    Ok(())
                }
                2 => {
                    made.push(job_wait_read(&executor).await?);
                    Ok(())
                }
                4 => {
                    let start = format!(
                        "setsid sh -c '{COMMAND_1MIB}' >{file} 2>/dev/null </dev/null & echo $!"
                    );
                    floor(&executor, &start, &file).await
                }
                5 => {
                    let start = format!("{COMMAND_1MIB} >{file} 2>/dev/null </dev/null & echo $!");
                    floor(&executor, &start, &file).await
                }
                6 => {
                    slot_times.push(slots.start_and_read(&executor).await?);
                    Ok(())
                }
                7 => {
                    // Spooled and streamed back in one request: the output in a file and on
                    // the channel at once, the command in a group of its own (the runner's),
                    // with no detachment, records or answer.
                    let out = executor
                        .run(&format!("{COMMAND_1MIB} | tee {file}"))
                        .await?;
                    ensure!(
                        out.stdout().len() as u64 == MIB_OUTPUT,
                        "tee floor: {} bytes",
                        out.stdout().len()
                    );
                    Ok(())
                }
                _ => {
                    // The start alone (the job's output is left unread).
                    made.push(executor.spawn_job(COMMAND_1MIB, JobOptions::new()).await?);
                    Ok(())
                }
            }
        })
    })?;
    let (exec, cursor, wait, start) = (&m[0], &m[1], &m[2], &m[3]);
    let (floor_session, floor_bare, floor_tee) = (&m[4], &m[5], &m[7]);
    // Without each block's untimed first op.
    let floor_slot = Samples::new(
        slot_times
            .chunks(per_block + 1)
            .flat_map(|block| block.iter().skip(1).copied())
            .collect(),
    );
    for (label, s) in [
        ("run (exec), 1 MiB", exec),
        ("spawn_job + read by cursor", cursor),
        ("spawn_job + wait + read", wait),
        ("spawn_job alone", start),
        ("floor: setsid sh -c >file &, SFTP", floor_session),
        ("floor: bare >file &, SFTP", floor_bare),
        ("floor: run(CMD | tee file)", floor_tee),
    ] {
        println!(
            "  {label:<32} {}; server CPU {:.0} µs",
            s.times.describe(),
            s.server_cpu_us
        );
    }
    println!(
        "  {:<32} {}; server CPU not counted (the op also makes the next slot)",
        "floor: slot made ahead, SFTP",
        floor_slot.describe()
    );
    // Remove the jobs and the floors' files (untimed).
    ctx.rt.block_on(async {
        for job in made {
            let _ = job.remove().await;
        }
        let _ = slots.finish().await;
        let _ = executor.run(&format!("rm -rf {floor_dir}")).await;
    });
    let of_run = |s: &Samples| s.median().as_secs_f64() / exec.times.median().as_secs_f64();
    let x = of_run(&cursor.times);
    report.row(
        "10 job: start + read 1 MiB of output by cursor vs `run` of the same command",
        format!(
            "{}; with `Job::wait` first: {}; `spawn_job` alone {} (server CPU {:.1} ms per \
             start); floors of an exec-per-start design read over SFTP: in a session {} ({}), \
             bare {} ({}); of a start that takes a slot made ahead: {} ({}); spooled and \
             streamed back in one request, `run(CMD | tee FILE)`: {} ({})",
            cursor.times.short(),
            wait.times.short(),
            start.times.short(),
            start.server_cpu_us / 1e3,
            floor_session.times.short(),
            ratio(of_run(&floor_session.times)),
            floor_bare.times.short(),
            ratio(of_run(&floor_bare.times)),
            floor_slot.short(),
            ratio(of_run(&floor_slot)),
            floor_tee.times.short(),
            ratio(of_run(&floor_tee.times)),
        ),
        format!("`run` {}", exec.times.short()),
        format!("{} (with wait: {})", ratio(x), ratio(of_run(&wait.times))),
        "≤ 1.2× (issue 38; 1.5× before it)",
        Some(x <= 1.2),
    );

    // (b) An idle job, polled.
    idle_poll(ctx, report, &executor)?;
    Ok(())
}

fn idle_poll(ctx: &mut Ctx, report: &mut Report, executor: &SshExecutor) -> anyhow::Result<()> {
    let job = ctx.rt.block_on(async {
        let job = executor
            .spawn_job(
                "sleep 600",
                JobOptions::new().deadline(Duration::from_secs(900)),
            )
            .await?;
        ensure!(
            matches!(job.status().await?, JobStatus::Running { .. }),
            "idle job not running"
        );
        anyhow::Ok(job)
    })?;
    let result = (|| -> anyhow::Result<()> {
        let (blocks, per_block) = (ctx.size(6, 4), ctx.size(25, 15));
        let rt = &ctx.rt;
        let m = interleaved(blocks, per_block, 2, |i| {
            rt.block_on(async {
                match i {
                    0 => poll(&job, 0).await,
                    _ => run_true(executor).await,
                }
            })
        })?;
        let (polls, trues) = (&m[0], &m[1]);
        println!(
            "  idle poll (status + read)        {}; server CPU {:.0} µs",
            polls.times.describe(),
            polls.server_cpu_us
        );
        println!(
            "  `true`                           {}; server CPU {:.0} µs",
            trues.times.describe(),
            trues.server_cpu_us
        );

        // New processes on the host.
        let mut pids = vec![ctx.tb.sshd_pid()];
        pids.extend(ctx.tb.connection_pids());
        let n = 20;
        let scratch = ctx.local.path().to_owned();
        let poll_forks = forks_during(&pids, &scratch, || {
            ctx.rt.block_on(async {
                for _ in 0..n {
                    poll(&job, 0).await?;
                }
                anyhow::Ok(())
            })
        });
        let true_forks = forks_during(&pids, &scratch, || {
            ctx.rt.block_on(async {
                for _ in 0..n {
                    run_true(executor).await?;
                }
                anyhow::Ok(())
            })
        });
        let forks_text = match (&poll_forks, &true_forks) {
            (Ok(p), Ok(t)) => {
                println!("  forks on the host over {n}: polls {p}, `true` {t}");
                Some((*p as f64 / n as f64, *t as f64 / n as f64))
            }
            (p, t) => {
                println!("  fork count failed: {p:?} / {t:?}");
                None
            }
        };

        // Round trips: the same through the +20 ms proxy.
        let target: SocketAddr = format!("{}:{}", ctx.conn.host, ctx.conn.port).parse()?;
        let proxied = proxy::start(target, Duration::from_millis(10))?;
        let known = ctx
            .local
            .path()
            .join(format!("known_hosts_jobs_{}", proxied.port()));
        std::fs::write(
            &known,
            format!(
                "[{}]:{} {}\n",
                proxied.ip(),
                proxied.port(),
                ctx.conn.host_key
            ),
        )?;
        let link_rtt = rtt(ctx, proxied.port())?;
        let slow = ctx.rt.block_on(
            ctx.builder()
                .port(proxied.port())
                .known_hosts_file(&known)
                .build(),
        )?;
        let slow_job = ctx.rt.block_on(slow.job(job.id()))?;
        let slow_n = ctx.size(15, 8);
        let mut slow_made = Vec::<Job>::new();
        let (slow_polls, slow_status, slow_read, slow_true, slow_run, slow_start_read) =
            ctx.rt.block_on(async {
                let mut out = [(); 6].map(|()| Vec::new());
                // Untimed first: opens the SFTP channel and fills any caches.
                poll(&slow_job, 0).await?;
                run_true(&slow).await?;
                exec_1mib(&slow).await?;
                slow_made.push(job_and_read(&slow).await?);
                for _ in 0..slow_n {
                    // (a) over the link: the start + read of the 1 MiB job against its `run`.
                    let t = Instant::now();
                    exec_1mib(&slow).await?;
                    out[4].push(t.elapsed());
                    let t = Instant::now();
                    slow_made.push(job_and_read(&slow).await?);
                    out[5].push(t.elapsed());
                    let t = Instant::now();
                    poll(&slow_job, 0).await?;
                    out[0].push(t.elapsed());
                    let t = Instant::now();
                    slow_job.status().await?;
                    out[1].push(t.elapsed());
                    let t = Instant::now();
                    slow_job.read(JobStream::Stdout, 0, 64 * 1024).await?;
                    out[2].push(t.elapsed());
                    let t = Instant::now();
                    run_true(&slow).await?;
                    out[3].push(t.elapsed());
                }
                let [a, b, c, d, e, f] = out;
                anyhow::Ok((
                    Samples::new(a),
                    Samples::new(b),
                    Samples::new(c),
                    Samples::new(d),
                    Samples::new(e),
                    Samples::new(f),
                ))
            })?;
        ctx.rt.block_on(async {
            for job in slow_made {
                let _ = job.remove().await;
            }
        });
        let in_rtt = |s: &Samples| s.median().as_secs_f64() / link_rtt.as_secs_f64();
        println!(
            "  +20 ms link (RTT {}): poll {} = {:.2} RTT; status alone {:.2} RTT; read alone {:.2} RTT; `true` {:.2} RTT",
            ms(link_rtt),
            slow_polls.describe(),
            in_rtt(&slow_polls),
            in_rtt(&slow_status),
            in_rtt(&slow_read),
            in_rtt(&slow_true)
        );
        println!(
            "  +20 ms link: start + read 1 MiB {} = {:.2} RTT; `run` {} = {:.2} RTT",
            slow_start_read.describe(),
            in_rtt(&slow_start_read),
            slow_run.describe(),
            in_rtt(&slow_run)
        );
        let slow_x = slow_start_read.median().as_secs_f64() / slow_run.median().as_secs_f64();
        report.row(
            format!(
                "10 job: start + read 1 MiB of output by cursor vs `run`; +20 ms link (ping {})",
                ms(link_rtt)
            ),
            format!(
                "{} = {:.2} RTT",
                slow_start_read.short(),
                in_rtt(&slow_start_read)
            ),
            format!("`run` {} = {:.2} RTT", slow_run.short(), in_rtt(&slow_run)),
            ratio(slow_x),
            "≤ 1.5×",
            Some(slow_x <= 1.5),
        );
        let rtts = in_rtt(&slow_polls);
        let forks_per_poll = forks_text.map(|f| f.0);
        report.row(
            format!(
                "10 job: poll an idle job (`status` + `read` since a cursor, issued together); +20 ms link (ping {})",
                ms(link_rtt)
            ),
            format!(
                "{:.2} RTT (status alone {:.2}, read alone {:.2}); loopback {}, server CPU {:.0} µs/poll; {} new processes/poll",
                rtts,
                in_rtt(&slow_status),
                in_rtt(&slow_read),
                polls.times.short(),
                polls.server_cpu_us,
                forks_text.map_or("?".to_owned(), |f| format!("{:.2}", f.0)),
            ),
            format!(
                "`true` {:.2} RTT; loopback {}, server CPU {:.0} µs; {} new processes/command",
                in_rtt(&slow_true),
                trues.times.short(),
                trues.server_cpu_us,
                forks_text.map_or("?".to_owned(), |f| format!("{:.2}", f.1)),
            ),
            format!(
                "server CPU {}",
                ratio(polls.server_cpu_us / trues.server_cpu_us)
            ),
            "1 round trip, no new process (SFTP)",
            Some(rtts < 1.5 && forks_per_poll == Some(0.0)),
        );
        Ok(())
    })();
    let _ = ctx.rt.block_on(async {
        let _ = job.kill(Duration::from_millis(100)).await;
        job.remove().await
    });
    result
}
