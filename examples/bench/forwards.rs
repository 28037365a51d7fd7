//! Scenario `forwards`: a local forward (`ssh -L`) against OpenSSH's own and asyncssh's
//! `forward_local_port` (when its venv is there), on the same sshd, in one run.
//!
//! * **Throughput, both ways:** a service on the host (a thread of this process: the host
//!   is this machine) sends N bytes to each connection and closes it, and the client reads
//!   them all through the forward; and the other way, a sink reads the client's N bytes to
//!   their end and answers with its count. Ours: `forward_local`; the peers: `ssh -N -L` and a Python process
//!   running asyncssh's `forward_local_port` (each a process of its own, started and
//!   connected beforehand). Interleaved rounds, the order rotated every round; ratio = the
//!   peer's time / our time (our speed relative to the peer's), per round.
//! * **Connect to first byte:** a new TCP connection to the forward, one byte written, its
//!   echo read back (an echo service on the host): the time a client waits for a new stream
//!   through the forward to carry its first round trip. Interleaved blocks.
//! * **1,000 concurrent streams:** 1,000 connections held open through each forward at
//!   once, each checked with one echo; the client's RSS growth per stream (ours: this
//!   process, whose forward task and channels hold them; a peer: its forward's process).
//!
//! The clients are blocking `std` sockets on threads of their own, the same for both.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    Ctx,
    peers::AsyncSsh,
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
    // The peers: OpenSSH's `ssh -L` always; asyncssh's forward_local_port when its venv is
    // there. One peer process per service, as ours has one forward per service.
    let mut peers = vec![PeerForwards {
        name: "ssh -L",
        source: PeerForward::ssh(ctx, source.port())?,
        sink: PeerForward::ssh(ctx, sink.port())?,
        echo: PeerForward::ssh(ctx, echo.port())?,
    }];
    match &ctx.asyncssh {
        Ok(asyncssh) => peers.push(PeerForwards {
            name: "asyncssh",
            source: PeerForward::asyncssh(ctx, asyncssh, source.port())?,
            sink: PeerForward::asyncssh(ctx, asyncssh, sink.port())?,
            echo: PeerForward::asyncssh(ctx, asyncssh, echo.port())?,
        }),
        Err(why) => report.note(format!("forwards: asyncssh peer skipped: {why}")),
    }
    println!("  ours: forward_local 127.0.0.1:0 -> 127.0.0.1:<service>");
    for peer in &peers {
        println!("  peer: {}", peer.source.command_line);
    }

    // 1. Throughput, each direction. Every client once per round, the order rotated each
    // round; each peer's ratio is taken per round, against ours in the same round.
    let rounds = ctx.size(5, 3);
    let mib = bytes >> 20;
    for (direction, ours_addr, peer_addr, transfer) in [
        (
            "from the host",
            ours_source.local_addr(),
            (|peer: &PeerForwards| peer.source.addr) as fn(&PeerForwards) -> SocketAddr,
            read_all as fn(SocketAddr, u64) -> anyhow::Result<Duration>,
        ),
        (
            "to the host",
            ours_sink.local_addr(),
            |peer: &PeerForwards| peer.sink.addr,
            write_all,
        ),
    ] {
        let addrs: Vec<SocketAddr> = std::iter::once(ours_addr)
            .chain(peers.iter().map(peer_addr))
            .collect();
        let mut times = vec![Vec::new(); addrs.len()];
        let mut ratios = vec![Vec::new(); addrs.len()];
        for round in 0..rounds {
            let mut took = vec![Duration::ZERO; addrs.len()];
            for step in 0..addrs.len() {
                let which = (round + step) % addrs.len();
                took[which] = transfer(addrs[which], bytes)?;
            }
            for which in 0..addrs.len() {
                times[which].push(took[which]);
                ratios[which].push(took[which].as_secs_f64() / took[0].as_secs_f64());
            }
        }
        let samples: Vec<Samples> = times.into_iter().map(Samples::new).collect();
        let ours_t = &samples[0];
        let speed = |s: &Samples| mib_per_s(bytes, s.median());
        println!(
            "  throughput {direction}, {mib} MiB per stream, {rounds} rounds: ours {} ({:.0} MiB/s){}",
            ours_t.describe(),
            speed(ours_t),
            peers
                .iter()
                .zip(&samples[1..])
                .map(|(peer, s)| format!(
                    ", {} {} ({:.0} MiB/s)",
                    peer.name,
                    s.describe(),
                    speed(s)
                ))
                .collect::<String>()
        );
        for (index, peer) in peers.iter().enumerate() {
            let mut peer_ratios = ratios[index + 1].clone();
            peer_ratios.sort_by(f64::total_cmp);
            let relative = peer_ratios[peer_ratios.len() / 2];
            let is_ssh = index == 0;
            report.row(
                format!(
                    "forwards: stream throughput, {mib} MiB {direction}, {rounds} interleaved rounds{}",
                    if is_ssh { String::new() } else { format!(", vs {}", peer.name) }
                ),
                format!("{:.0} MiB/s, {}", speed(ours_t), ms(ours_t.median())),
                format!(
                    "{} {:.0} MiB/s, {}",
                    peer.name,
                    speed(&samples[index + 1]),
                    ms(samples[index + 1].median())
                ),
                format!("{} of {}'s speed (median of rounds)", ratio(relative), peer.name),
                if is_ssh { "ours ≥ 1.0× ssh -L" } else { "reported" },
                is_ssh.then_some(relative >= 1.0),
            );
        }
    }

    // 2. Connect to first byte: blocks of 20 new streams per client, the order rotated
    // each block.
    let blocks = ctx.size(10, 4);
    let per_block = 20;
    let echo_addrs: Vec<SocketAddr> = std::iter::once(ours_echo.local_addr())
        .chain(peers.iter().map(|peer| peer.echo.addr))
        .collect();
    let mut connects = vec![Vec::new(); echo_addrs.len()];
    for block in 0..blocks {
        for step in 0..echo_addrs.len() {
            let which = (block + step) % echo_addrs.len();
            for _ in 0..per_block {
                let started = Instant::now();
                let mut stream = TcpStream::connect(echo_addrs[which])?;
                stream.set_nodelay(true)?;
                echo_once(&mut stream)?;
                connects[which].push(started.elapsed());
            }
        }
    }
    let connects: Vec<Samples> = connects.into_iter().map(Samples::new).collect();
    println!(
        "  connect → first byte back: ours {}{}",
        connects[0].describe(),
        peers
            .iter()
            .zip(&connects[1..])
            .map(|(peer, s)| format!(", {} {}", peer.name, s.describe()))
            .collect::<String>()
    );
    for (index, peer) in peers.iter().enumerate() {
        let c_ratio =
            connects[0].median().as_secs_f64() / connects[index + 1].median().as_secs_f64();
        let is_ssh = index == 0;
        report.row(
            format!(
                "forwards: connect → first byte back through a forward (a new stream each time){}",
                if is_ssh {
                    String::new()
                } else {
                    format!(", vs {}", peer.name)
                }
            ),
            connects[0].short(),
            format!("{} {}", peer.name, connects[index + 1].short()),
            format!("{} of {}'s time", ratio(c_ratio), peer.name),
            if is_ssh {
                "ours ≤ 1.2× ssh -L"
            } else {
                "reported"
            },
            is_ssh.then_some(c_ratio <= 1.2),
        );
    }

    // 3. 1,000 concurrent streams: the client's RSS growth per stream (ours: this process;
    // a peer: its forward's process).
    let ours_before = self_rss();
    let held = hold_streams(ours_echo.local_addr(), STREAMS)?;
    let ours_after = self_rss();
    let open_now = ours_echo.stats().open_streams;
    drop(held);
    let per_stream = |before: u64, after: u64| after.saturating_sub(before) as f64 / STREAMS as f64;
    let ours_per = per_stream(ours_before, ours_after);
    println!(
        "  {STREAMS} streams held: ours +{:.1} KiB RSS per stream ({open_now} open in the forward's stats)",
        ours_per / 1024.0
    );
    for peer in &peers {
        let before = peer.echo.rss();
        let held = hold_streams(peer.echo.addr, STREAMS)?;
        let after = peer.echo.rss();
        drop(held);
        let peer_per = per_stream(before, after);
        println!(
            "  {STREAMS} streams held: {} +{:.1} KiB",
            peer.name,
            peer_per / 1024.0
        );
        report.row(
            format!(
                "forwards: {STREAMS} concurrent streams held, client RSS growth per stream{}",
                if peer.name == "ssh -L" {
                    String::new()
                } else {
                    format!(", vs {}", peer.name)
                }
            ),
            format!("{:.1} KiB per stream", ours_per / 1024.0),
            format!("{} {:.1} KiB per stream", peer.name, peer_per / 1024.0),
            ratio(ours_per / peer_per.max(1.0)),
            "reported",
            None,
        );
    }
    if open_now as usize != STREAMS {
        bail!("the forward counted {open_now} open streams, not {STREAMS}");
    }
    Ok(())
}

/// One peer's forwards, one per service.
struct PeerForwards {
    name: &'static str,
    source: PeerForward,
    sink: PeerForward,
    echo: PeerForward,
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

/// A peer's local forward to one service: a process of its own (`ssh -N -L`, or asyncssh's
/// `forward_local_port` in Python), its port accepting before it is used.
struct PeerForward {
    child: Child,
    addr: SocketAddr,
    command_line: String,
}

impl PeerForward {
    /// `ssh -N -o ExitOnForwardFailure=yes -L port:127.0.0.1:<service>`.
    fn ssh(ctx: &Ctx, service_port: u16) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let forward = format!("127.0.0.1:{port}:127.0.0.1:{service_port}");
        let extra = vec![
            "-N".to_owned(),
            "-o".to_owned(),
            "ExitOnForwardFailure=yes".to_owned(),
            "-L".to_owned(),
            forward.clone(),
        ];
        let command = ctx.ssh.ssh(&extra, "");
        let command_line = format!(
            "ssh -N -o ExitOnForwardFailure=yes -L {forward} (the testbed's key and known_hosts)"
        );
        Self::start(command, port, command_line)
    }

    /// asyncssh: `conn.forward_local_port("127.0.0.1", port, "127.0.0.1", <service>)` on
    /// one connection, served until killed.
    fn asyncssh(ctx: &Ctx, asyncssh: &AsyncSsh, service_port: u16) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let command = asyncssh.command(
            &ctx.ssh,
            "forward",
            &[
                ("listen_port", port.to_string()),
                ("dest_port", service_port.to_string()),
            ],
        );
        let command_line = format!(
            "asyncssh {}: conn.forward_local_port(\"127.0.0.1\", {port}, \"127.0.0.1\", {service_port})",
            asyncssh.version
        );
        Self::start(command, port, command_line)
    }

    fn start(mut command: Command, port: u16, command_line: String) -> anyhow::Result<Self> {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| command_line.clone())?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let mut forward = PeerForward {
            child,
            addr,
            command_line,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // The peer listens once it has authenticated.
            if TcpStream::connect(addr).is_ok() {
                break;
            }
            if let Some(status) = forward.child.try_wait()? {
                bail!("{} exited: {status}", forward.command_line);
            }
            if Instant::now() > deadline {
                bail!("{} did not listen within 20 s", forward.command_line);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(forward)
    }

    fn rss(&self) -> u64 {
        proc_status_bytes(&self.child.id().to_string(), "VmRSS").unwrap_or(0)
    }
}

impl Drop for PeerForward {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}
