//! Scenario `forwards`: a local forward (`ssh -L`) against OpenSSH's own, on the same sshd,
//! in one run.
//!
//! * **Throughput, both ways:** a service on the host (a thread of this process: the host
//!   is this machine) sends N bytes to each connection and closes it, and the client reads
//!   them all through the forward; and the other way, a sink reads the client's N bytes to
//!   their end and answers with its count. Ours: `forward_local`; the peer: `ssh -N -L` (a process of its own,
//!   started and connected beforehand). Interleaved rounds, order reversed every other
//!   round; ratio = ssh's time / our time (our speed relative to ssh's), per round.
//! * **Connect to first byte:** a new TCP connection to the forward, one byte written, its
//!   echo read back (an echo service on the host): the time a client waits for a new stream
//!   through the forward to carry its first round trip. Interleaved blocks.
//! * **1,000 concurrent streams:** 1,000 connections held open through each forward at
//!   once, each checked with one echo; the client's RSS growth per stream (ours: this
//!   process, whose forward task and channels hold them; ssh: the `ssh -L` process).
//!
//! The clients are blocking `std` sockets on threads of their own, the same for both.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    Ctx,
    report::Report,
    stats::{Samples, mib_per_s, ms, proc_status_bytes, ratio, self_rss},
};

/// Streams held at once in the concurrency row.
const STREAMS: usize = 1000;

pub fn forwards(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let bytes: u64 = if ctx.quick { 256 << 20 } else { 1 << 30 };
    let source = source_service(bytes)?;
    let sink = sink_service()?;
    let echo = echo_service()?;

    let executor = ctx.rt.block_on(ctx.builder().build())?;
    let loopback: SocketAddr = "127.0.0.1:0".parse()?;
    let ours_source =
        ctx.rt
            .block_on(executor.forward_local(loopback, "127.0.0.1", source.port()))?;
    let ours_echo = ctx
        .rt
        .block_on(executor.forward_local(loopback, "127.0.0.1", echo.port()))?;
    let ours_sink = ctx
        .rt
        .block_on(executor.forward_local(loopback, "127.0.0.1", sink.port()))?;
    let ssh_source = SshForward::start(ctx, source.port())?;
    let ssh_sink = SshForward::start(ctx, sink.port())?;
    let ssh_echo = SshForward::start(ctx, echo.port())?;
    println!(
        "  ours: forward_local 127.0.0.1:0 -> 127.0.0.1:<service>; peer: {}",
        ssh_source.command_line
    );

    // 1. Throughput, each direction.
    let rounds = ctx.size(5, 3);
    let mib = bytes >> 20;
    for (direction, ours_addr, ssh_addr, transfer) in [
        (
            "from the host",
            ours_source.local_addr(),
            ssh_source.addr,
            read_all as fn(SocketAddr, u64) -> anyhow::Result<Duration>,
        ),
        (
            "to the host",
            ours_sink.local_addr(),
            ssh_sink.addr,
            write_all,
        ),
    ] {
        let mut ours_times = Vec::new();
        let mut ssh_times = Vec::new();
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let mut pair = [Duration::ZERO; 2];
            let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let addr = if which == 0 { ours_addr } else { ssh_addr };
                pair[which] = transfer(addr, bytes)?;
            }
            ours_times.push(pair[0]);
            ssh_times.push(pair[1]);
            ratios.push(pair[1].as_secs_f64() / pair[0].as_secs_f64());
        }
        let ours_t = Samples::new(ours_times);
        let ssh_t = Samples::new(ssh_times);
        ratios.sort_by(f64::total_cmp);
        let speed = ratios[ratios.len() / 2];
        println!(
            "  throughput {direction}, {mib} MiB per stream, {rounds} rounds: ours {} ({:.0} MiB/s), ssh -L {} ({:.0} MiB/s)",
            ours_t.describe(),
            mib_per_s(bytes, ours_t.median()),
            ssh_t.describe(),
            mib_per_s(bytes, ssh_t.median())
        );
        report.row(
            format!(
                "forwards: stream throughput, {mib} MiB {direction}, {rounds} interleaved rounds"
            ),
            format!(
                "{:.0} MiB/s, {}",
                mib_per_s(bytes, ours_t.median()),
                ms(ours_t.median())
            ),
            format!(
                "ssh -L {:.0} MiB/s, {}",
                mib_per_s(bytes, ssh_t.median()),
                ms(ssh_t.median())
            ),
            format!("{} of ssh -L's speed (median of rounds)", ratio(speed)),
            "ours ≥ 1.0× ssh -L",
            Some(speed >= 1.0),
        );
    }

    // 2. Connect to first byte.
    let blocks = ctx.size(10, 4);
    let per_block = 20;
    let mut ours_c = Vec::new();
    let mut ssh_c = Vec::new();
    for block in 0..blocks {
        let order: [usize; 2] = if block % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let addr = if which == 0 {
                ours_echo.local_addr()
            } else {
                ssh_echo.addr
            };
            for _ in 0..per_block {
                let started = Instant::now();
                let mut stream = TcpStream::connect(addr)?;
                stream.set_nodelay(true)?;
                echo_once(&mut stream)?;
                let took = started.elapsed();
                if which == 0 {
                    ours_c.push(took);
                } else {
                    ssh_c.push(took);
                }
            }
        }
    }
    let ours_c = Samples::new(ours_c);
    let ssh_c = Samples::new(ssh_c);
    let c_ratio = ours_c.median().as_secs_f64() / ssh_c.median().as_secs_f64();
    println!(
        "  connect → first byte back: ours {}, ssh -L {}",
        ours_c.describe(),
        ssh_c.describe()
    );
    report.row(
        "forwards: connect → first byte back through a forward (a new stream each time)",
        ours_c.short(),
        format!("ssh -L {}", ssh_c.short()),
        format!("{} of ssh -L's time", ratio(c_ratio)),
        "ours ≤ 1.2× ssh -L",
        Some(c_ratio <= 1.2),
    );

    // 3. 1,000 concurrent streams.
    let ours_before = self_rss();
    let held = hold_streams(ours_echo.local_addr(), STREAMS)?;
    let ours_after = self_rss();
    let open_now = ours_echo.stats().open_streams;
    drop(held);
    let ssh_before = ssh_echo.rss();
    let held = hold_streams(ssh_echo.addr, STREAMS)?;
    let ssh_after = ssh_echo.rss();
    drop(held);
    let per_stream = |before: u64, after: u64| after.saturating_sub(before) as f64 / STREAMS as f64;
    let ours_per = per_stream(ours_before, ours_after);
    let ssh_per = per_stream(ssh_before, ssh_after);
    println!(
        "  {STREAMS} streams held: ours +{:.1} KiB RSS per stream ({open_now} open in the forward's stats), ssh -L +{:.1} KiB",
        ours_per / 1024.0,
        ssh_per / 1024.0
    );
    report.row(
        format!("forwards: {STREAMS} concurrent streams held, client RSS growth per stream"),
        format!("{:.1} KiB per stream", ours_per / 1024.0),
        format!("ssh -L {:.1} KiB per stream", ssh_per / 1024.0),
        ratio(ours_per / ssh_per.max(1.0)),
        "reported",
        None,
    );
    if open_now as usize != STREAMS {
        bail!("the forward counted {open_now} open streams, not {STREAMS}");
    }
    report.note(
        "forwards: asyncssh's forward_local_port, the issue's second peer, is not measured yet",
    );
    Ok(())
}

/// A service on the host: each connection gets `bytes` bytes, then its end.
fn source_service(bytes: u64) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        let block = std::sync::Arc::new(vec![0x5au8; 1 << 20]);
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let block = block.clone();
            std::thread::spawn(move || {
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(block.len() as u64) as usize;
                    if stream.write_all(&block[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    Ok(addr)
}

/// A service on the host that reads each connection to its end, then answers with the
/// number of bytes it read (8 bytes, big-endian).
fn sink_service() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let mut total = 0u64;
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(_) => return,
                    }
                }
                stream.write_all(&total.to_be_bytes()).ok();
            });
        }
    });
    Ok(addr)
}

/// Connects to `addr`, writes `bytes` bytes, shuts its side and reads the sink's count.
fn write_all(addr: SocketAddr, bytes: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    let block = vec![0xa5u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        stream.write_all(&block[..n])?;
        left -= n as u64;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut count = [0u8; 8];
    stream.read_exact(&mut count)?;
    let count = u64::from_be_bytes(count);
    if count != bytes {
        bail!("the sink behind {addr} read {count} bytes, expected {bytes}");
    }
    Ok(started.elapsed())
}

/// A service on the host that echoes each connection's bytes.
fn echo_service() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                stream.set_nodelay(true).ok();
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// Connects to `addr` and reads until the end, which must come after `bytes` bytes.
fn read_all(addr: SocketAddr, bytes: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    if total != bytes {
        bail!("read {total} bytes through {addr}, expected {bytes}");
    }
    Ok(started.elapsed())
}

fn echo_once(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream.write_all(b"x")?;
    let mut back = [0u8; 1];
    stream.read_exact(&mut back)?;
    if back != *b"x" {
        bail!("the echo came back as {back:?}");
    }
    Ok(())
}

/// `n` connections to `addr`, each checked with one echo, held until dropped.
fn hold_streams(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<TcpStream>> {
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        echo_once(&mut stream).context("a held stream's echo")?;
        streams.push(stream);
    }
    Ok(streams)
}

/// `ssh -N -L port:127.0.0.1:<service>`, its port accepting before it is used.
struct SshForward {
    child: Child,
    addr: SocketAddr,
    command_line: String,
}

impl SshForward {
    fn start(ctx: &Ctx, service_port: u16) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let forward = format!("127.0.0.1:{port}:127.0.0.1:{service_port}");
        let extra = vec![
            "-N".to_owned(),
            "-o".to_owned(),
            "ExitOnForwardFailure=yes".to_owned(),
            "-L".to_owned(),
            forward.clone(),
        ];
        let mut command = ctx.ssh.ssh(&extra, "");
        let command_line = format!(
            "ssh -N -o ExitOnForwardFailure=yes -L {forward} (the testbed's key and known_hosts)"
        );
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("ssh")?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let mut forward = SshForward {
            child,
            addr,
            command_line,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // ssh listens once it has authenticated.
            if TcpStream::connect(addr).is_ok() {
                break;
            }
            if let Some(status) = forward.child.try_wait()? {
                bail!("ssh -L exited: {status}");
            }
            if Instant::now() > deadline {
                bail!("ssh -L did not listen within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(forward)
    }

    fn rss(&self) -> u64 {
        proc_status_bytes(&self.child.id().to_string(), "VmRSS").unwrap_or(0)
    }
}

impl Drop for SshForward {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}
