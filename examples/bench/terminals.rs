//! Scenario `terminals`: a keystroke's round trip through a pseudo-terminal, and a caller's
//! stdin in bulk, against OpenSSH and the raw russh floor, all in one run.
//!
//! **Keystroke → echo.** A `cat` in a pseudo-terminal with the terminal's default modes (echo
//! on, canonical input), so the echo is the terminal's own: one byte written, timed until it
//! comes back on the output. Over loopback and over the +20 ms RTT link of the `slowlink`
//! scenario (`proxy.rs`, 10 ms each way; 1 RTT = the median of 20 russh keepalive pings
//! through it). Rows, each a long-lived session, measured in interleaved groups of
//! [`GROUP`] keystrokes (each group then ends its line with Enter, untimed, and waits for
//! `cat`'s copy of it, so that canonical input never fills):
//!
//! * ours: `spawn("cat", ExecOptions::default().pty(Pty::default()))`, `Process::write` of
//!   one byte, `Process::next` until it is back;
//! * ours: `open_terminal(TerminalOptions::default().command("cat"))`, `send_text` of one
//!   byte, `wait_for(Until::Screen(..))` until the screen shows it (the emulator included);
//! * the floor: raw russh, `pty-req` + exec `cat` on one authenticated connection;
//! * OpenSSH: `ssh -tt -e none … 'stty sane; cat'` through a warm ControlMaster, its stdin
//!   a pipe we write the byte to, its stdout a pipe we read the echo from (`stty sane`: see
//!   [`ssh_tt`]).
//!
//! **Stdin in bulk.** 50 MiB of incompressible bytes through `sha256sum` on the host, every
//! peer's printed digest checked against the data's SHA-256 (a wrong one fails the
//! scenario): ours `execute` with `ExecOptions::stdin`, ours `spawn` + `write` in 1 MiB
//! pieces + `close_stdin` + `wait`, `ssh host sha256sum < file` through a warm ControlMaster
//! (the file on local disk), and raw russh sending the bytes on the channel of an exec
//! `sha256sum` (the floor). Diagnostics: raw russh through the executor's own design (a
//! second channel running the executor's feeder script, `cat` into a FIFO that the command
//! reads: see `src/command/feeder.rs`), raw russh through russh's `AsyncWrite` path (as the
//! executor writes), a local `sha256sum < file` (the hash alone), CPU per 50 MiB (the run's
//! cgroup), and the fixed cost of a small stdin (1 KiB), with two what-ifs for the feeder's
//! wait for the command (see [`FifoFix`]). Interleaved rounds, order reversed every other
//! round; on loopback, and again over the +20 ms link (the 50 MiB rows there are bound by
//! sshd's 2 MiB channel window per round trip, for every client alike).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use russh::ChannelMsg;
use sha2::{Digest, Sha256};
use swiftide_ssh_executor::{
    ExecOptions, OutputChunk, Process, Pty, SshExecutor, Terminal, TerminalOptions, Until,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{
    Ctx,
    r#become::{shell_line, wait_gone},
    bulk::pseudo_random,
    child::Conn,
    latency::proxy_known_hosts,
    peers::ControlMaster,
    proxy, raw,
    report::Report,
    stats::{self, Samples, mib_per_s, ms, ratio},
};

/// Keystrokes per group (one line of `cat`'s input).
const GROUP: usize = 40;

/// How long any one echo, line or exit may take before the scenario fails.
const WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EchoKind {
    OursProcess,
    OursTerminal,
    Raw,
    Ssh,
}

const ECHO_KINDS: &[(EchoKind, &str)] = &[
    (
        EchoKind::OursProcess,
        "ours `spawn(\"cat\", pty)`: `write` 1 byte → `next` has it",
    ),
    (
        EchoKind::OursTerminal,
        "ours `open_terminal(cat)`: `send_text` → `wait_for(Screen)`",
    ),
    (EchoKind::Raw, "raw russh pty-req + exec `cat` (floor)"),
    (
        EchoKind::Ssh,
        "`ssh -tt` via ControlMaster, `stty sane; cat`, stdin/stdout pipes",
    ),
];

fn echo_label(kind: EchoKind) -> &'static str {
    ECHO_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("?", |(_, l)| l)
}

/// One long-lived session with a `cat` in a terminal.
enum Echoer {
    Process(Process),
    Terminal(Terminal),
    Raw(russh::Channel<russh::client::Msg>),
    Ssh {
        child: tokio::process::Child,
        stdin: Option<tokio::process::ChildStdin>,
        stdout: tokio::process::ChildStdout,
    },
}

impl Echoer {
    async fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Echoer::Process(p) => p.write(Bytes::copy_from_slice(bytes)).await?,
            Echoer::Terminal(t) => t.send_bytes(bytes.to_vec()).await?,
            Echoer::Raw(channel) => channel.data(bytes).await?,
            Echoer::Ssh { stdin, .. } => {
                let stdin = stdin.as_mut().context("ssh's stdin is closed")?;
                stdin.write_all(bytes).await?;
                stdin.flush().await?;
            }
        }
        Ok(())
    }

    /// The next output, or `None` when nothing came `within`. Not for a `Terminal`.
    async fn read(&mut self, within: Duration) -> anyhow::Result<Option<Vec<u8>>> {
        let next = async {
            match self {
                Echoer::Process(p) => match p.next().await {
                    Some(OutputChunk::Stdout(b) | OutputChunk::Stderr(b)) => Ok(b.to_vec()),
                    None => bail!("the process ended"),
                },
                Echoer::Raw(channel) => loop {
                    match channel.wait().await {
                        Some(ChannelMsg::Data { data } | ChannelMsg::ExtendedData { data, .. }) => {
                            return Ok(data.to_vec());
                        }
                        Some(ChannelMsg::Eof | ChannelMsg::Close) | None => {
                            bail!("the raw channel ended")
                        }
                        Some(_) => {}
                    }
                },
                Echoer::Ssh { stdout, .. } => {
                    let mut buf = [0u8; 4096];
                    let n = stdout.read(&mut buf).await?;
                    ensure!(n > 0, "ssh closed its stdout");
                    Ok(buf[..n].to_vec())
                }
                Echoer::Terminal(_) => bail!("a terminal is read through its screen"),
            }
        };
        match tokio::time::timeout(within, next).await {
            Ok(got) => got.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Reads until `done` says so: `Ok(bytes)`, or `Err(bytes)` when `within` passed first.
    async fn read_until(
        &mut self,
        within: Duration,
        done: impl Fn(&[u8]) -> bool,
    ) -> anyhow::Result<Result<Vec<u8>, Vec<u8>>> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while !done(&got) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read(left).await? {
                Some(more) => got.extend_from_slice(&more),
                None => return Ok(Err(got)),
            }
        }
        Ok(Ok(got))
    }

    /// Waits until the program runs with its terminal echoing (a program in the executor's
    /// universal form starts with echo off until its payload turned it back on), then ends
    /// the line and drains everything.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        let mut echoing = false;
        let zero = Until::Screen(regex::Regex::new("0")?);
        for _ in 0..50 {
            self.write(b"0").await?;
            echoing = match self {
                Echoer::Terminal(t) => t.wait_for(&zero, Duration::from_millis(300)).await.reached,
                _ => self
                    .read_until(Duration::from_millis(300), |got| got.contains(&b'0'))
                    .await?
                    .is_ok(),
            };
            if echoing {
                break;
            }
        }
        ensure!(echoing, "no echo after 50 keystrokes");
        self.write(b"\n").await?;
        let quiet = Duration::from_millis(300);
        match self {
            Echoer::Terminal(t) => {
                t.wait_for(&Until::Quiet(quiet), WITHIN).await;
            }
            _ => while self.read(quiet).await?.is_some() {},
        }
        Ok(())
    }

    /// `GROUP` timed keystrokes of `letter`, then (untimed) Enter and `cat`'s copy of the
    /// line. Returns how many echoes came with other bytes than the keystroke.
    async fn group(&mut self, letter: u8, samples: &mut Vec<Duration>) -> anyhow::Result<u64> {
        let c = letter as char;
        // The screen's row holding exactly k letters, and then the line twice (echo, copy).
        let rows: Vec<Until> = if matches!(self, Echoer::Terminal(_)) {
            (1..=GROUP)
                .map(|k| regex::Regex::new(&format!("(?m)^{c}{{{k}}}$")).map(Until::Screen))
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        let mut odd = 0;
        for k in 0..GROUP {
            let t = Instant::now();
            self.write(&[letter]).await?;
            match self {
                Echoer::Terminal(term) => {
                    let row = rows.get(k).context("no pattern")?;
                    let waited = term.wait_for(row, WITHIN).await;
                    ensure!(
                        waited.reached,
                        "the screen did not show keystroke {k} of {c:?}"
                    );
                }
                _ => {
                    let got = self
                        .read_until(WITHIN, |got| got.ends_with(&[letter]))
                        .await?
                        .map_err(|got| {
                            anyhow::anyhow!(
                                "no echo of keystroke {k} of {c:?} (got {:?})",
                                String::from_utf8_lossy(&got)
                            )
                        })?;
                    if got.len() != 1 {
                        odd += 1;
                    }
                }
            }
            samples.push(t.elapsed());
        }
        self.write(b"\n").await?;
        match self {
            Echoer::Terminal(term) => {
                let line = Until::Screen(regex::Regex::new(&format!(
                    "(?m)^{c}{{{GROUP}}}\n{c}{{{GROUP}}}$"
                ))?);
                ensure!(
                    term.wait_for(&line, WITHIN).await.reached,
                    "cat's copy of the line did not show"
                );
            }
            _ => {
                // The echo of Enter (`\r\n`), then cat's copy of the line (`…\r\n`).
                self.read_until(WITHIN, |got| {
                    got.len() >= GROUP + 4 && got.ends_with(b"\r\n")
                })
                .await?
                .map_err(|got| {
                    anyhow::anyhow!(
                        "cat's copy of the line did not come (got {:?})",
                        String::from_utf8_lossy(&got)
                    )
                })?;
            }
        }
        Ok(odd)
    }

    /// Ends `cat` with Ctrl-D on its empty line; `true` when it ended so (otherwise it is
    /// killed).
    async fn close(self) -> bool {
        match self {
            Echoer::Process(p) => {
                let _ = p.write(&b"\x04"[..]).await;
                match tokio::time::timeout(WITHIN, p.wait()).await {
                    Ok(Ok(run)) => run.success(),
                    // Dropped: its whole session is killed in the background.
                    _ => false,
                }
            }
            Echoer::Terminal(t) => {
                let _ = t.send_bytes(&b"\x04"[..]).await;
                let ended = t.wait_for(&Until::Exit, WITHIN).await.exited.is_some();
                let _ = t.close().await;
                ended
            }
            Echoer::Raw(mut channel) => {
                let _ = channel.data(&b"\x04"[..]).await;
                let _ = channel.eof().await;
                let drained = tokio::time::timeout(WITHIN, async {
                    let mut status = None;
                    while let Some(msg) = channel.wait().await {
                        match msg {
                            ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                            ChannelMsg::Close => break,
                            _ => {}
                        }
                    }
                    status
                })
                .await;
                matches!(drained, Ok(Some(0)))
            }
            Echoer::Ssh {
                mut child,
                mut stdin,
                mut stdout,
            } => {
                if let Some(stdin) = stdin.as_mut() {
                    let _ = stdin.write_all(b"\x04").await;
                    let _ = stdin.flush().await;
                }
                drop(stdin);
                let mut rest = Vec::new();
                let _ = tokio::time::timeout(WITHIN, stdout.read_to_end(&mut rest)).await;
                match tokio::time::timeout(WITHIN, child.wait()).await {
                    Ok(Ok(status)) => status.success(),
                    _ => {
                        let _ = child.kill().await;
                        false
                    }
                }
            }
        }
    }
}

/// `ssh -tt -e none … -- user@host 'stty sane; cat'` through `cm`.
///
/// `stty sane` first: a multiplexed session's terminal modes are what the master's
/// `tcgetattr` of the client's stdin gave, and on a pipe that fails and leaves them all zero
/// (no echo, no canonical input, no output processing: `mux.c` sends the zeroed `termios`).
/// `stty sane` gives the terminal its defaults again (echo on), as ours and raw russh have.
fn ssh_tt(cm: &ControlMaster) -> std::process::Command {
    let mut extra = cm.opts();
    extra.extend(["-tt".into(), "-e".into(), "none".into()]);
    cm.ssh.ssh(&extra, "stty sane; cat")
}

/// The sessions of one link, all warm.
struct EchoSet {
    executor: SshExecutor,
    raw: raw::RawHandle,
    echoers: Vec<(EchoKind, Echoer)>,
}

async fn open_echoers(conn: &Conn, cm: Option<&ControlMaster>) -> anyhow::Result<EchoSet> {
    let executor = conn.builder().build().await?;
    // Connected, and the connection has learned its login shell's form.
    ensure!(executor.run("true").await?.success());
    let mut echoers = Vec::new();
    let process = executor
        .spawn("cat", ExecOptions::default().pty(Pty::default()))
        .await?;
    echoers.push((EchoKind::OursProcess, Echoer::Process(process)));
    let terminal = executor.open_terminal(TerminalOptions::default().command("cat"))?;
    echoers.push((EchoKind::OursTerminal, Echoer::Terminal(terminal)));
    let raw = raw::connect(&conn.raw_target(), true).await?;
    let channel = raw.channel_open_session().await?;
    channel
        .request_pty(true, "xterm-256color", 80, 24, 0, 0, &[])
        .await?;
    channel.exec(true, "cat").await?;
    echoers.push((EchoKind::Raw, Echoer::Raw(channel)));
    if let Some(cm) = cm {
        let mut cmd = tokio::process::Command::from(ssh_tt(cm));
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("starting ssh -tt")?;
        let stdin = child.stdin.take().context("ssh stdin")?;
        let stdout = child.stdout.take().context("ssh stdout")?;
        echoers.push((
            EchoKind::Ssh,
            Echoer::Ssh {
                child,
                stdin: Some(stdin),
                stdout,
            },
        ));
    }
    for (kind, echoer) in &mut echoers {
        echoer
            .warm_up()
            .await
            .with_context(|| format!("warming up {}", echo_label(*kind)))?;
    }
    Ok(EchoSet {
        executor,
        raw,
        echoers,
    })
}

struct EchoResult {
    rtt: Duration,
    samples: Vec<(EchoKind, Samples)>,
    odd: Vec<(EchoKind, u64)>,
    cleanly_ended: Vec<(EchoKind, bool)>,
}

impl EchoResult {
    fn get(&self, kind: EchoKind) -> Option<&Samples> {
        self.samples
            .iter()
            .find(|(k, s)| *k == kind && s.n() > 0)
            .map(|(_, s)| s)
    }

    fn in_rtt(&self, kind: EchoKind) -> f64 {
        self.get(kind).map_or(f64::NAN, |s| {
            s.median().as_secs_f64() / self.rtt.as_secs_f64()
        })
    }
}

fn echo_link(
    ctx: &Ctx,
    name: &str,
    conn: &Conn,
    cm: Option<&ControlMaster>,
    rounds: usize,
) -> anyhow::Result<EchoResult> {
    let rtt = ctx.rt.block_on(raw::median_ping_rtt(&conn.raw_target()))?;
    let mut set = ctx.rt.block_on(open_echoers(conn, cm))?;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); set.echoers.len()];
    let mut odd = vec![0u64; set.echoers.len()];
    let t = Instant::now();
    let measured = (|| -> anyhow::Result<()> {
        for round in 0..rounds {
            // Lines of different letters, so that the screen's rows differ from the last ones.
            let letter = b'a' + (round % 26) as u8;
            let mut order: Vec<usize> = (0..set.echoers.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let (kind, echoer) = &mut set.echoers[i];
                odd[i] += ctx
                    .rt
                    .block_on(echoer.group(letter, &mut samples[i]))
                    .with_context(|| format!("{name}: {}", echo_label(*kind)))?;
            }
        }
        Ok(())
    })();
    println!(
        "  {name}: {rounds} interleaved rounds of {GROUP} keystrokes per row in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let kinds: Vec<EchoKind> = set.echoers.iter().map(|(k, _)| *k).collect();
    let mut cleanly_ended = Vec::new();
    ctx.rt.block_on(async {
        for (kind, echoer) in set.echoers.drain(..) {
            cleanly_ended.push((kind, echoer.close().await));
        }
        set.executor.close().await;
        let _ = set
            .raw
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    });
    measured?;
    Ok(EchoResult {
        rtt,
        samples: kinds
            .iter()
            .zip(samples)
            .map(|(k, s)| (*k, Samples::new(s)))
            .collect(),
        odd: kinds.iter().copied().zip(odd).collect(),
        cleanly_ended,
    })
}

/// `in_rtt`: the medians in round trips too (over the slow link; on loopback the ping is
/// far below a process's wake-ups, and the multiple says nothing).
fn print_echo(name: &str, r: &EchoResult, in_rtt: bool) {
    println!(
        "  {name}: 1 RTT = {} (median russh keepalive ping)",
        ms(r.rtt)
    );
    for (kind, label) in ECHO_KINDS {
        let Some(s) = r.get(*kind) else { continue };
        let odd = r.odd.iter().find(|(k, _)| k == kind).map_or(0, |(_, n)| *n);
        println!(
            "    {label:<66} {}{}{}",
            s.describe(),
            if in_rtt {
                format!(" = {:.2} RTT", r.in_rtt(*kind))
            } else {
                String::new()
            },
            if odd > 0 {
                format!("; {odd} echoes came with other bytes")
            } else {
                String::new()
            }
        );
    }
    let ended: Vec<String> = r
        .cleanly_ended
        .iter()
        .map(|(k, ok)| format!("{k:?} {}", if *ok { "ok" } else { "KILLED" }))
        .collect();
    println!("    cat ended by Ctrl-D: {}", ended.join(", "));
}

/// The ways 50 MiB reach `sha256sum`'s stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    OursExecute,
    OursSpawn,
    Cm,
    RawBytes,
    RawWriter,
    RawFifo,
    Local,
}

const FEEDS: &[(Feed, &str)] = &[
    (
        Feed::OursExecute,
        "ours `execute(\"sha256sum\", ExecOptions::default().stdin(data))`",
    ),
    (
        Feed::OursSpawn,
        "ours `spawn` + `write` 1 MiB pieces + `close_stdin` + `wait`",
    ),
    (
        Feed::Cm,
        "`ssh host sha256sum < file` via warm ControlMaster",
    ),
    (
        Feed::RawBytes,
        "raw russh exec `sha256sum`, `data_bytes` + EOF (floor)",
    ),
    (
        Feed::RawWriter,
        "raw russh, `make_writer().write_all` 1 MiB pieces (the executor's write path)",
    ),
    (
        Feed::RawFifo,
        "raw russh, 2nd channel `cat` into a FIFO the command reads (the executor's design)",
    ),
    (
        Feed::Local,
        "local `sha256sum < file`, no SSH (the hash's own time: the ceiling)",
    ),
];

fn feed_label(feed: Feed) -> &'static str {
    FEEDS
        .iter()
        .find(|(f, _)| *f == feed)
        .map_or("?", |(_, l)| l)
}

/// Small stdin: the fixed cost of each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Small {
    OursExecute,
    OursRunNoStdin,
    Raw,
    RawFifo,
    RawFifoPoll5ms,
    RawFifoEofAfterOpen,
}

const SMALLS: &[(Small, &str)] = &[
    (
        Small::OursExecute,
        "ours `execute(\"sha256sum\", stdin 1 KiB)`",
    ),
    (
        Small::OursRunNoStdin,
        "ours `run(\"sha256sum </dev/null\")` (no stdin)",
    ),
    (Small::Raw, "raw russh exec `sha256sum`, 1 KiB + EOF"),
    (
        Small::RawFifo,
        "raw russh, 1 KiB through the FIFO design (2 channels)",
    ),
    (
        Small::RawFifoPoll5ms,
        "what-if: the FIFO design, the feeder polling every 5 ms (not 100)",
    ),
    (
        Small::RawFifoEofAfterOpen,
        "what-if: the FIFO design, the feeder's EOF sent once the command has opened the FIFO",
    ),
];

/// The raw replica of the executor's FIFO design, as it is or with a fix for the feeder's
/// wait (after its copy ended, until the command has opened the FIFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FifoFix {
    /// The executor's feeder script as it is: polled every 100 ms.
    AsIs,
    /// `sleep 0.005` instead of `sleep 0.1` (the same 30 s bound).
    Poll5ms,
    /// The command says on stderr that it has opened the FIFO (and removed the directory);
    /// the client holds the feeder's EOF until then, so the feeder's loop never sleeps.
    EofAfterOpen,
}

/// What the raw replica of the executor's feeder runs: the executor's own feeder script
/// (`src/command/feeder.rs`): a private FIFO held open read-write, its directory printed,
/// the channel's stdin copied into it, then held until the command has opened it (the
/// command removes the directory; polled every 100 ms), so that no byte is lost.
const RAW_FEEDER: &str = r#"d=$(mktemp -d 2>/dev/null) || d=$(mktemp -d -t swiftide-stdin.XXXXXX) || exit 1
mkfifo -m 600 "$d/in" || { rmdir -- "$d"; exit 1; }
exec 3<>"$d/in"
printf '%s\n' "$d"
cat >&3
n=0; while [ -e "$d" ] && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n+1)); done
exec 3>&-
rm -rf -- "$d"
"#;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn first_word(out: &[u8]) -> String {
    String::from_utf8_lossy(out)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Reads a channel to its close: stdout and the exit status; `on_stderr` is told of the
/// first stderr.
async fn drain_channel(
    read: &mut russh::ChannelReadHalf,
    mut on_stderr: Option<tokio::sync::oneshot::Sender<()>>,
) -> (Vec<u8>, Option<u32>) {
    let mut out = Vec::new();
    let mut status = None;
    while let Some(msg) = read.wait().await {
        match msg {
            ChannelMsg::Data { data } => out.extend_from_slice(&data),
            ChannelMsg::ExtendedData { .. } => {
                if let Some(tell) = on_stderr.take() {
                    let _ = tell.send(());
                }
            }
            ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    (out, status)
}

/// Raw russh: `command`'s channel gets `data` then EOF, by `data_bytes` or through the
/// `AsyncWrite` path in 1 MiB writes. Returns the command's first word of output.
async fn raw_feed(
    handle: &raw::RawHandle,
    command: &str,
    data: Bytes,
    writer: bool,
) -> anyhow::Result<String> {
    let channel = handle.channel_open_session().await?;
    channel.exec(true, command).await?;
    let (mut read, write) = channel.split();
    let sending = tokio::spawn(async move {
        if writer {
            let mut w = write.make_writer();
            for piece in data.chunks(1 << 20) {
                w.write_all(piece).await?;
            }
            w.shutdown().await?;
        } else {
            write.data_bytes(data).await?;
            write.eof().await?;
        }
        anyhow::Ok(write)
    });
    let (out, status) = drain_channel(&mut read, None).await;
    let _write = sending.await??;
    ensure!(status == Some(0), "raw {command}: exit status {status:?}");
    Ok(first_word(&out))
}

/// Raw russh through the executor's design: a feeder channel copies its stdin into a FIFO
/// that the command's channel reads (with `fix` for the feeder's wait).
async fn raw_fifo_feed(
    handle: &raw::RawHandle,
    data: Bytes,
    fix: FifoFix,
) -> anyhow::Result<String> {
    let script = match fix {
        FifoFix::Poll5ms => RAW_FEEDER
            .replace("sleep 0.1", "sleep 0.005")
            .replace("-lt 300", "-lt 6000"),
        FifoFix::AsIs | FifoFix::EofAfterOpen => RAW_FEEDER.to_owned(),
    };
    let mut feeder = handle.channel_open_session().await?;
    feeder.exec(true, script).await?;
    let mut line = Vec::new();
    while !line.contains(&b'\n') {
        match feeder.wait().await {
            Some(ChannelMsg::Data { data }) => line.extend_from_slice(&data),
            Some(ChannelMsg::Close) | None => bail!("the raw feeder ended before its FIFO"),
            Some(_) => {}
        }
    }
    let dir = String::from_utf8(line)?.trim().to_owned();
    ensure!(
        dir.starts_with('/') && !dir.contains('\''),
        "raw feeder printed {dir:?}"
    );
    let says_opened = if fix == FifoFix::EofAfterOpen {
        " printf o >&2;"
    } else {
        ""
    };
    let command = handle.channel_open_session().await?;
    command
        .exec(
            true,
            format!("exec 0<'{dir}/in' || exit 1; rm -rf -- '{dir}';{says_opened} exec sha256sum"),
        )
        .await?;
    command.eof().await?;
    let (opened, is_opened) = tokio::sync::oneshot::channel::<()>();
    let (mut feeder_read, feeder_write) = feeder.split();
    let sending = tokio::spawn(async move {
        feeder_write.data_bytes(data).await?;
        if fix == FifoFix::EofAfterOpen {
            let _ = is_opened.await;
        }
        feeder_write.eof().await?;
        anyhow::Ok(feeder_write)
    });
    // Both channels read all along: russh hands every channel's messages (window adjusts
    // too) through one loop, and one left unread stalls the whole connection.
    let feeder_drained = tokio::spawn(async move { drain_channel(&mut feeder_read, None).await });
    let (mut command_read, _command_write) = command.split();
    let (out, status) = drain_channel(&mut command_read, Some(opened)).await;
    let _write = sending.await??;
    let (_, feeder_status) = feeder_drained.await?;
    ensure!(
        status == Some(0) && feeder_status == Some(0),
        "raw FIFO: command exit {status:?}, feeder exit {feeder_status:?}"
    );
    Ok(first_word(&out))
}

async fn ours_execute(executor: &SshExecutor, data: Bytes) -> anyhow::Result<String> {
    let run = executor
        .execute("sha256sum", ExecOptions::default().stdin(data), &mut |_| {})
        .await?;
    ensure!(run.success(), "ours execute: {:?}", run.status);
    Ok(first_word(&run.stdout()))
}

async fn ours_spawn(executor: &SshExecutor, data: &Bytes) -> anyhow::Result<String> {
    let mut process = executor.spawn("sha256sum", ExecOptions::default()).await?;
    let mut at = 0;
    while at < data.len() {
        let end = (at + (1 << 20)).min(data.len());
        process.write(data.slice(at..end)).await?;
        at = end;
    }
    process.close_stdin().await;
    let run = process.wait().await?;
    ensure!(run.success(), "ours spawn: {:?}", run.status);
    Ok(first_word(&run.stdout()))
}

/// The clients of one link for the stdin rows.
struct FeedEnv<'a> {
    executor: SshExecutor,
    raw: raw::RawHandle,
    cm: Option<&'a ControlMaster>,
    /// The data on local disk, for `ssh … < file`.
    file: &'a Path,
}

/// One timed run: (wall time, the printed digest, the run's CPU seconds).
fn feed_once(
    ctx: &Ctx,
    env: &FeedEnv,
    feed: Feed,
    data: &Bytes,
) -> anyhow::Result<(Duration, String, f64)> {
    let cpu0 = stats::tree_cpu_secs();
    let t = Instant::now();
    let digest = match feed {
        Feed::OursExecute => ctx.rt.block_on(ours_execute(&env.executor, data.clone()))?,
        Feed::OursSpawn => ctx.rt.block_on(ours_spawn(&env.executor, data))?,
        Feed::Cm => {
            let cm = env.cm.context("no ControlMaster")?;
            let out = cm
                .ssh
                .ssh(&cm.opts(), "sha256sum")
                .stdin(std::fs::File::open(env.file)?)
                .stdout(Stdio::piped())
                .output()?;
            ensure!(out.status.success(), "ssh sha256sum < file: {}", out.status);
            first_word(&out.stdout)
        }
        Feed::RawBytes => ctx
            .rt
            .block_on(raw_feed(&env.raw, "sha256sum", data.clone(), false))?,
        Feed::RawWriter => ctx
            .rt
            .block_on(raw_feed(&env.raw, "sha256sum", data.clone(), true))?,
        Feed::RawFifo => ctx
            .rt
            .block_on(raw_fifo_feed(&env.raw, data.clone(), FifoFix::AsIs))?,
        Feed::Local => {
            let out = std::process::Command::new("sha256sum")
                .stdin(std::fs::File::open(env.file)?)
                .stdout(Stdio::piped())
                .output()?;
            ensure!(out.status.success(), "local sha256sum: {}", out.status);
            first_word(&out.stdout)
        }
    };
    let elapsed = t.elapsed();
    Ok((elapsed, digest, stats::tree_cpu_secs() - cpu0))
}

fn small_once(ctx: &Ctx, env: &FeedEnv, small: Small, data: &Bytes) -> anyhow::Result<String> {
    ctx.rt.block_on(async {
        match small {
            Small::OursExecute => ours_execute(&env.executor, data.clone()).await,
            Small::OursRunNoStdin => {
                let run = env.executor.run("sha256sum </dev/null").await?;
                ensure!(run.success(), "ours run: {:?}", run.status);
                Ok(first_word(&run.stdout()))
            }
            Small::Raw => raw_feed(&env.raw, "sha256sum", data.clone(), false).await,
            Small::RawFifo => raw_fifo_feed(&env.raw, data.clone(), FifoFix::AsIs).await,
            Small::RawFifoPoll5ms => raw_fifo_feed(&env.raw, data.clone(), FifoFix::Poll5ms).await,
            Small::RawFifoEofAfterOpen => {
                raw_fifo_feed(&env.raw, data.clone(), FifoFix::EofAfterOpen).await
            }
        }
    })
}

#[derive(Default)]
struct FeedResult {
    times: Vec<(Feed, Vec<Duration>)>,
    cpu: Vec<(Feed, f64)>,
    small: Vec<(Small, Vec<Duration>)>,
}

impl FeedResult {
    fn times(&self, feed: Feed) -> Option<Samples> {
        self.times
            .iter()
            .find(|(f, t)| *f == feed && !t.is_empty())
            .map(|(_, t)| Samples::new(t.clone()))
    }

    /// Per-round ratios of `a`'s time to `b`'s, sorted: (median, max).
    fn round_ratio(&self, a: Feed, b: Feed) -> Option<(f64, f64)> {
        let ta = &self.times.iter().find(|(f, _)| *f == a)?.1;
        let tb = &self.times.iter().find(|(f, _)| *f == b)?.1;
        let mut r: Vec<f64> = ta
            .iter()
            .zip(tb)
            .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64())
            .collect();
        if r.is_empty() {
            return None;
        }
        r.sort_by(f64::total_cmp);
        let mid = r.len() / 2;
        let median = if r.len() % 2 == 1 {
            r[mid]
        } else {
            (r[mid - 1] + r[mid]) / 2.0
        };
        Some((median, r[r.len() - 1]))
    }

    fn cpu_per_run(&self, feed: Feed) -> f64 {
        let n = self.times(feed).map_or(0, |s| s.n());
        self.cpu
            .iter()
            .find(|(f, _)| *f == feed)
            .map_or(f64::NAN, |(_, c)| c / n.max(1) as f64)
    }

    fn small(&self, small: Small) -> Option<Samples> {
        self.small
            .iter()
            .find(|(s, t)| *s == small && !t.is_empty())
            .map(|(_, t)| Samples::new(t.clone()))
    }
}

/// The stdin rows of one link, in interleaved rounds; every digest checked.
#[allow(clippy::too_many_arguments)]
fn feed_link(
    ctx: &Ctx,
    name: &str,
    conn: &Conn,
    cm: Option<&ControlMaster>,
    feeds: &[Feed],
    rounds: usize,
    small_rounds: (usize, usize),
    (data, file, expected): (&Bytes, &Path, &str),
) -> anyhow::Result<FeedResult> {
    let (executor, raw) = ctx.rt.block_on(async {
        let executor = conn.builder().build().await?;
        ensure!(executor.run("true").await?.success());
        let raw = raw::connect(&conn.raw_target(), true).await?;
        anyhow::Ok((executor, raw))
    })?;
    let env = FeedEnv {
        executor,
        raw,
        cm,
        file,
    };
    let feeds: Vec<Feed> = feeds
        .iter()
        .copied()
        .filter(|f| *f != Feed::Cm || cm.is_some())
        .collect();
    let small_data = Bytes::from(pseudo_random(1024, 7));
    let small_expected = hex(&Sha256::digest(&small_data));
    let empty_expected = hex(&Sha256::digest(b""));
    let mut result = FeedResult {
        times: feeds.iter().map(|f| (*f, Vec::new())).collect(),
        cpu: feeds.iter().map(|f| (*f, 0.0)).collect(),
        small: SMALLS.iter().map(|(s, _)| (*s, Vec::new())).collect(),
    };
    let t = Instant::now();
    let measured = (|| -> anyhow::Result<()> {
        // Untimed: each way once (the feeder's first FIFO, the master's first session).
        for &feed in &feeds {
            let (_, digest, _) = feed_once(ctx, &env, feed, data)?;
            ensure!(
                digest == expected,
                "{name}: {} printed {digest:?}, the data's SHA-256 is {expected}",
                feed_label(feed)
            );
        }
        for round in 0..rounds {
            let mut order = feeds.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for feed in order {
                let (elapsed, digest, cpu) = feed_once(ctx, &env, feed, data)?;
                ensure!(
                    digest == expected,
                    "{name}: {} printed {digest:?}, the data's SHA-256 is {expected}",
                    feed_label(feed)
                );
                if let Some((_, t)) = result.times.iter_mut().find(|(f, _)| *f == feed) {
                    t.push(elapsed);
                }
                if let Some((_, c)) = result.cpu.iter_mut().find(|(f, _)| *f == feed) {
                    *c += cpu;
                }
            }
        }
        let (small_rounds, k) = small_rounds;
        for round in 0..small_rounds {
            let mut order: Vec<Small> = SMALLS.iter().map(|(s, _)| *s).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for small in order {
                let want = if small == Small::OursRunNoStdin {
                    &empty_expected
                } else {
                    &small_expected
                };
                // One untimed first in every block.
                for j in 0..=k {
                    let t = Instant::now();
                    let digest = small_once(ctx, &env, small, &small_data)?;
                    let elapsed = t.elapsed();
                    ensure!(
                        &digest == want,
                        "{name}: {small:?} printed {digest:?}, expected {want}"
                    );
                    if j > 0
                        && let Some((_, t)) = result.small.iter_mut().find(|(s, _)| *s == small)
                    {
                        t.push(elapsed);
                    }
                }
            }
        }
        Ok(())
    })();
    println!(
        "  {name}: {rounds} interleaved rounds of 50 MiB, {} rounds of small stdin, in {:.1} s",
        small_rounds.0,
        t.elapsed().as_secs_f64()
    );
    let stats = env.executor.pool_stats();
    println!(
        "  {name}: ours: {} dial(s), {} commands, {} on a spare, {} direct requests",
        stats.dials, stats.commands, stats.spare_channels_used, stats.direct_requests
    );
    ctx.rt.block_on(async {
        env.executor.close().await;
        let _ = env
            .raw
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    });
    measured?;
    Ok(result)
}

fn print_feed(name: &str, r: &FeedResult, bytes: u64) {
    println!(
        "  {name}: 50 MiB → sha256sum (digests all checked): median, p90; MiB/s at the median; CPU of the whole run per 50 MiB"
    );
    for (feed, label) in FEEDS {
        let Some(s) = r.times(*feed) else { continue };
        println!(
            "    {label:<84} {} → {:.0} MiB/s; CPU {:.2} s",
            s.describe(),
            mib_per_s(bytes, s.median()),
            r.cpu_per_run(*feed)
        );
    }
    for (small, label) in SMALLS {
        let Some(s) = r.small(*small) else { continue };
        println!("    {label:<84} {}", s.describe());
    }
}

/// Directories like the feeders' (`mktemp -d` in /tmp holding an `in` FIFO).
fn fifo_dirs() -> BTreeSet<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| std::fs::symlink_metadata(p.join("in")).is_ok_and(|m| m.file_type().is_fifo()))
        .collect()
}

/// The processes of this run's CPU cgroup (see `stats::enter_cpu_cgroup`), if it has one.
fn cgroup_pids() -> Option<BTreeSet<u32>> {
    let (usage, _) = stats::tree_cpu_file()?;
    let text = std::fs::read_to_string(usage.parent()?.join("cgroup.procs")).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

/// Processes started during the scenario that are still there after up to 5 s.
fn leftover_processes(before: &Option<BTreeSet<u32>>) -> Option<Vec<String>> {
    let before = before.as_ref()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = cgroup_pids()?;
        let new: Vec<u32> = now.difference(before).copied().collect();
        if new.is_empty() || Instant::now() >= deadline {
            return Some(
                new.iter()
                    .map(|pid| format!("{pid} {}", cmdline(*pid)))
                    .collect(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn terminals(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let procs_before = cgroup_pids();
    let fifos_before = fifo_dirs();

    // The +20 ms RTT link of `slowlink`, and a ControlMaster over it.
    let target = format!("{}:{}", ctx.conn.host, ctx.conn.port).parse()?;
    let proxy = proxy::start(target, Duration::from_millis(10))?;
    let mut slow = ctx.conn.clone();
    slow.port = proxy.port();
    slow.known_hosts = proxy_known_hosts(ctx, proxy)?;
    let slow_ssh = Ctx::ssh_for(&slow);
    let slow_cm = match ControlMaster::start(&slow_ssh, ctx.sockets.path().join("cm-term")) {
        Ok(cm) => Some(cm),
        Err(e) => {
            report.note(format!(
                "terminals: ControlMaster over the +20 ms link skipped: {e:#}"
            ));
            None
        }
    };
    // A master of our own on loopback too: the run's master (`ctx.cm`) ends 60 s after its
    // last session (ControlPersist=60), and after earlier scenarios it may be gone; an
    // `ssh -o ControlMaster=auto` finding no master would become one itself.
    let lo_cm = match ControlMaster::start(&ctx.ssh, ctx.sockets.path().join("cm-term-lo")) {
        Ok(cm) => Some(cm),
        Err(e) => {
            report.note(format!("terminals: loopback ControlMaster skipped: {e:#}"));
            None
        }
    };

    // The data, its digest, and the file `ssh … < file` reads.
    let bytes = 50usize << 20;
    let data = Bytes::from(pseudo_random(bytes, 0x5eed));
    let expected = hex(&Sha256::digest(&data));
    let file = ctx.local.path().join("stdin-50MiB.bin");
    std::fs::write(&file, &data)?;
    println!(
        "  data: {} MiB pseudo-random, SHA-256 {expected}, at {}",
        bytes >> 20,
        file.display()
    );

    println!("  command lines:");
    if let Some(cm) = &lo_cm {
        println!("    ssh -tt (loopback): {}", shell_line(&ssh_tt(cm)));
        println!(
            "    ssh stdin (loopback): {} < {}",
            shell_line(&cm.ssh.ssh(&cm.opts(), "sha256sum")),
            file.display()
        );
    }
    if let Some(cm) = &slow_cm {
        println!("    ssh -tt (+20 ms): {}", shell_line(&ssh_tt(cm)));
        println!(
            "    ssh stdin (+20 ms): {} < {}",
            shell_line(&cm.ssh.ssh(&cm.opts(), "sha256sum")),
            file.display()
        );
    }
    println!(
        "    (each master: the same options with -M -N -f and no command, started beforehand; \
         stdin/stdout of ssh -tt are pipes, stderr /dev/null)"
    );
    println!(
        "    raw russh pty: pty-req xterm-256color 80x24 (server's default modes), exec `cat`; \
         raw stdin: exec `sha256sum`, data, EOF; raw FIFO feeder: exec the executor's feeder script \
         (src/command/feeder.rs), then exec `exec 0<'$d/in' || exit 1; rm -rf -- '$d'; exec sha256sum`"
    );

    let result = (|| -> anyhow::Result<()> {
        // 1. Keystroke → echo.
        let echo_loop = echo_link(ctx, "loopback", &ctx.conn, lo_cm.as_ref(), ctx.size(8, 3))?;
        print_echo("loopback", &echo_loop, false);
        let echo_slow = echo_link(ctx, "+20 ms link", &slow, slow_cm.as_ref(), ctx.size(6, 2))?;
        print_echo("+20 ms link", &echo_slow, true);

        // 2. Stdin in bulk.
        let all = [
            Feed::OursExecute,
            Feed::OursSpawn,
            Feed::Cm,
            Feed::RawBytes,
            Feed::RawWriter,
            Feed::RawFifo,
            Feed::Local,
        ];
        let feed_loop = feed_link(
            ctx,
            "loopback",
            &ctx.conn,
            lo_cm.as_ref(),
            &all,
            ctx.size(7, 3),
            (ctx.size(6, 3), 10),
            (&data, &file, &expected),
        )?;
        print_feed("loopback", &feed_loop, bytes as u64);
        let feed_slow = feed_link(
            ctx,
            "+20 ms link",
            &slow,
            slow_cm.as_ref(),
            &[Feed::OursExecute, Feed::OursSpawn, Feed::Cm, Feed::RawBytes],
            ctx.size(3, 2),
            (ctx.size(3, 2), ctx.size(5, 3)),
            (&data, &file, &expected),
        )?;
        print_feed("+20 ms link", &feed_slow, bytes as u64);
        let slow_rtt = echo_slow.rtt;

        report_echo(report, &echo_loop, &echo_slow);
        report_feed(report, &feed_loop, &feed_slow, slow_rtt, bytes as u64);
        Ok(())
    })();

    // Clean up: the file, the master over the proxy (checked gone), then nothing of ours
    // may be left.
    let _ = std::fs::remove_file(&file);
    let pids: Vec<u32> = [&lo_cm, &slow_cm]
        .iter()
        .filter_map(|c| c.as_ref().and_then(|c| c.pid))
        .collect();
    drop(lo_cm);
    drop(slow_cm);
    let masters_gone = pids.into_iter().all(wait_gone);
    let leftovers = leftover_processes(&procs_before);
    let fifos_left: Vec<PathBuf> = fifo_dirs().difference(&fifos_before).cloned().collect();
    println!(
        "  cleanup: the scenario's ControlMasters gone: {masters_gone}; processes left: {}; FIFO directories left in /tmp: {}; data file removed: {}",
        match &leftovers {
            Some(l) if l.is_empty() => "none".to_owned(),
            Some(l) => l.join("; "),
            None => "not checked (no cgroup)".to_owned(),
        },
        if fifos_left.is_empty() {
            "none".to_owned()
        } else {
            format!("{fifos_left:?}")
        },
        !file.exists()
    );
    result?;
    let clean = masters_gone
        && leftovers.as_ref().is_none_or(Vec::is_empty)
        && fifos_left.is_empty()
        && !file.exists();
    report.row(
        "terminals: clean-up (processes, FIFOs, temp files)",
        if clean { "nothing left" } else { "LEFT BEHIND" },
        "–",
        "–",
        "nothing left",
        Some(clean),
    );
    Ok(())
}

fn report_echo(report: &mut Report, lo: &EchoResult, slow: &EchoResult) {
    let cell = |r: &EchoResult, kind: EchoKind| -> String {
        r.get(kind).map_or("n/a".to_owned(), |s| {
            format!("{} = {:.2} RTT", s.short(), r.in_rtt(kind))
        })
    };
    let med =
        |r: &EchoResult, kind: EchoKind| r.get(kind).map_or(f64::NAN, |s| s.median().as_secs_f64());
    let ours_rtt = slow.in_rtt(EchoKind::OursProcess);
    report.row(
        format!(
            "terminals: keystroke → echo (`cat` in a pty), +20 ms RTT link (1 RTT {})",
            ms(slow.rtt)
        ),
        cell(slow, EchoKind::OursProcess),
        format!(
            "ssh -tt via ControlMaster {}; raw russh pty {}",
            cell(slow, EchoKind::Ssh),
            cell(slow, EchoKind::Raw)
        ),
        format!(
            "{} ssh; {} raw",
            ratio(med(slow, EchoKind::OursProcess) / med(slow, EchoKind::Ssh)),
            ratio(med(slow, EchoKind::OursProcess) / med(slow, EchoKind::Raw))
        ),
        "ours ≤ 1.1 RTT",
        Some(ours_rtt <= 1.1),
    );
    report.row(
        "terminals: keystroke → echo (`cat` in a pty), loopback",
        lo.get(EchoKind::OursProcess)
            .map_or("n/a".into(), Samples::short),
        format!(
            "ssh -tt via ControlMaster {}; raw russh pty {}",
            lo.get(EchoKind::Ssh).map_or("n/a".into(), Samples::short),
            lo.get(EchoKind::Raw).map_or("n/a".into(), Samples::short)
        ),
        format!(
            "{} ssh; {} raw",
            ratio(med(lo, EchoKind::OursProcess) / med(lo, EchoKind::Ssh)),
            ratio(med(lo, EchoKind::OursProcess) / med(lo, EchoKind::Raw))
        ),
        "–",
        None,
    );
    report.row(
        "terminals: keystroke → screen (`Terminal::send_text` → `wait_for(Screen)`), loopback / +20 ms",
        format!(
            "{} / {}",
            lo.get(EchoKind::OursTerminal).map_or("n/a".into(), Samples::short),
            cell(slow, EchoKind::OursTerminal)
        ),
        format!(
            "ours `Process` echo {} / {}",
            lo.get(EchoKind::OursProcess).map_or("n/a".into(), Samples::short),
            cell(slow, EchoKind::OursProcess)
        ),
        format!(
            "{} / {}",
            ratio(med(lo, EchoKind::OursTerminal) / med(lo, EchoKind::OursProcess)),
            ratio(med(slow, EchoKind::OursTerminal) / med(slow, EchoKind::OursProcess))
        ),
        "(diagnostic)",
        None,
    );
}

fn report_feed(report: &mut Report, lo: &FeedResult, slow: &FeedResult, rtt: Duration, bytes: u64) {
    let cell = |r: &FeedResult, feed: Feed| -> String {
        r.times(feed).map_or("n/a".to_owned(), |s| {
            format!(
                "{:.0} MiB/s, {} (p90 {})",
                mib_per_s(bytes, s.median()),
                ms(s.median()),
                stats::ms_bare(s.p90())
            )
        })
    };
    let n = lo.times(Feed::OursExecute).map_or(0, |s| s.n());
    for (feed, what) in [
        (Feed::OursExecute, "`execute(.., stdin(data))`"),
        (
            Feed::OursSpawn,
            "`spawn` + 1 MiB `write`s + `close_stdin` + `wait`",
        ),
    ] {
        let Some((r, worst)) = lo.round_ratio(feed, Feed::Cm) else {
            continue;
        };
        report.row(
            format!(
                "terminals: 50 MiB stdin → sha256sum, loopback, ours {what}, {n} interleaved rounds"
            ),
            cell(lo, feed),
            format!(
                "ssh < file via ControlMaster {}; raw russh {}",
                cell(lo, Feed::Cm),
                cell(lo, Feed::RawBytes)
            ),
            format!("{} CM's time (worst round {})", ratio(r), ratio(worst)),
            "ours ≤ 1.2× ControlMaster's time (median of rounds)",
            Some(r <= 1.2),
        );
    }
    if let (Some((design, _)), Some((path, _)), Some((ours, _)), Some((spawn, _))) = (
        lo.round_ratio(Feed::RawFifo, Feed::RawBytes),
        lo.round_ratio(Feed::RawWriter, Feed::RawBytes),
        lo.round_ratio(Feed::OursExecute, Feed::RawBytes),
        lo.round_ratio(Feed::OursSpawn, Feed::RawBytes),
    ) {
        report.row(
            "terminals: 50 MiB stdin, loopback: where the time goes (time / raw russh floor, median of rounds)",
            format!("`execute` {}; `spawn` {}", ratio(ours), ratio(spawn)),
            format!(
                "raw through the FIFO design {} ({}); raw via `AsyncWrite` {} ({}); local sha256sum, no SSH, {}",
                ratio(design),
                cell(lo, Feed::RawFifo),
                ratio(path),
                cell(lo, Feed::RawWriter),
                cell(lo, Feed::Local)
            ),
            format!(
                "CPU/50 MiB: ours {:.2} s, FIFO design {:.2}, floor {:.2}, CM {:.2}, local {:.2}",
                lo.cpu_per_run(Feed::OursExecute),
                lo.cpu_per_run(Feed::RawFifo),
                lo.cpu_per_run(Feed::RawBytes),
                lo.cpu_per_run(Feed::Cm),
                lo.cpu_per_run(Feed::Local)
            ),
            "(diagnostic)",
            None,
        );
    }
    let small = |r: &FeedResult, s: Small| r.small(s).map_or("n/a".into(), |x| x.short());
    report.row(
        "terminals: 1 KiB stdin → sha256sum, loopback (the stdin path's fixed cost)",
        small(lo, Small::OursExecute),
        format!(
            "ours without stdin {}; raw russh {}; raw through the FIFO design {} \
             (what-if: feeder polling every 5 ms {}; feeder's EOF after the command's open {})",
            small(lo, Small::OursRunNoStdin),
            small(lo, Small::Raw),
            small(lo, Small::RawFifo),
            small(lo, Small::RawFifoPoll5ms),
            small(lo, Small::RawFifoEofAfterOpen)
        ),
        match (
            lo.small(Small::OursExecute),
            lo.small(Small::OursRunNoStdin),
        ) {
            (Some(a), Some(b)) => format!(
                "+{} over no stdin",
                ms(a.median().saturating_sub(b.median()))
            ),
            _ => "n/a".into(),
        },
        "(diagnostic)",
        None,
    );
    let in_rtt = |r: &FeedResult, s: Small| {
        r.small(s).map_or("n/a".to_owned(), |x| {
            format!(
                "{} = {:.1} RTT",
                ms(x.median()),
                x.median().as_secs_f64() / rtt.as_secs_f64()
            )
        })
    };
    report.row(
        format!(
            "terminals: 1 KiB stdin → sha256sum, +20 ms link (1 RTT {})",
            ms(rtt)
        ),
        in_rtt(slow, Small::OursExecute),
        format!(
            "ours without stdin {}; raw russh {}; raw through the FIFO design {} \
             (what-if: 5 ms poll {}; EOF after the open {})",
            in_rtt(slow, Small::OursRunNoStdin),
            in_rtt(slow, Small::Raw),
            in_rtt(slow, Small::RawFifo),
            in_rtt(slow, Small::RawFifoPoll5ms),
            in_rtt(slow, Small::RawFifoEofAfterOpen)
        ),
        "–",
        "(diagnostic)",
        None,
    );
    if let Some((r, worst)) = slow.round_ratio(Feed::OursExecute, Feed::Cm) {
        let spawn = slow
            .round_ratio(Feed::OursSpawn, Feed::Cm)
            .map_or("n/a".into(), |(x, _)| ratio(x));
        report.row(
            format!(
                "terminals: 50 MiB stdin → sha256sum, +20 ms link, {} rounds",
                slow.times(Feed::Cm).map_or(0, |s| s.n())
            ),
            format!(
                "`execute` {}; `spawn` {}",
                cell(slow, Feed::OursExecute),
                cell(slow, Feed::OursSpawn)
            ),
            format!(
                "ssh < file via ControlMaster {}; raw russh {}",
                cell(slow, Feed::Cm),
                cell(slow, Feed::RawBytes)
            ),
            format!(
                "`execute` {} CM's time (worst {}); `spawn` {spawn}",
                ratio(r),
                ratio(worst)
            ),
            "–",
            None,
        );
    }
}
