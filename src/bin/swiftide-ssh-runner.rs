//! The resident runner as a native program: the helper that
//! [`SshExecutorBuilder::runner_helper`](swiftide_ssh_executor::SshExecutorBuilder::runner_helper)
//! installs on hosts, where it is tried before Python and Perl. It speaks the protocol of
//! `src/command/resident/runner.py` (see `src/command/resident/mod.rs`): `R` runs a command,
//! `K` kills its group, `A` acknowledges output; it answers `H` (hello), `S` (the group),
//! `O`/`E` (output) and `X` (the end). Jobs (`J`) stay with Python's supervisor or the shell
//! start.
//!
//! Safe Rust only: commands start with `std::process::Command` (`posix_spawn` where it can)
//! in a process group of their own (`process_group(0)`; not a session of their own, which
//! std has no safe way to ask for), with `SIGPIPE` at its default as std leaves it.
//!
//! Run this program only through the executor: it reads frames on stdin. Build it for the
//! hosts' architecture, e.g. `cargo build --release --bin swiftide-ssh-runner --target
//! x86_64-unknown-linux-musl`, for a copy that needs no particular C library on the host.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashMap,
    io::{Read, Write},
    os::unix::process::{CommandExt, ExitStatusExt},
    process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use rustix::{
    event::{PollFd, PollFlags, Timespec, poll},
    process::{Pid, Signal, kill_process_group},
};

/// Output a request may have unacknowledged before its pipes wait (as runner.py).
const WINDOW: usize = 4 * 1024 * 1024;
/// How soon a command's group is announced without output (as runner.py).
const ANNOUNCE_AFTER: Duration = Duration::from_millis(2);
/// How often a leader's end is checked for while nothing else wakes the loop: std keeps no
/// `SIGCHLD` handler, so the loop polls `waitpid` where an end is awaited.
const REAP_EVERY: Duration = Duration::from_millis(1);

struct Request {
    leader: Child,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    /// The request's stdin not yet written, and the pipe.
    stdin: Option<(ChildStdin, Vec<u8>)>,
    unacked: usize,
    kill_on_disconnect: bool,
    grace: Duration,
    status: Option<ExitStatus>,
    term_at: Option<Instant>,
    killed: bool,
    announce_at: Option<Instant>,
}

impl Request {
    fn group(&self) -> Option<Pid> {
        i32::try_from(self.leader.id()).ok().and_then(Pid::from_raw)
    }

    fn signal(&self, signal: Signal) {
        if let Some(group) = self.group() {
            let _ = kill_process_group(group, signal);
        }
    }
}

struct Runner {
    out: Vec<u8>,
    requests: HashMap<u32, Request>,
}

fn frame(out: &mut Vec<u8>, kind: u8, id: u32, data: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
}

/// `c CODE` or `s NAME CORE`, as runner.py says it.
fn end_of(status: ExitStatus) -> Vec<u8> {
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("c {code}").into_bytes(),
        (None, Some(number)) => {
            let name = usize::try_from(number - 1)
                .ok()
                .and_then(|index| NAMES.get(index))
                .map_or_else(|| number.to_string(), |name| (*name).to_owned());
            format!("s {name} {}", u8::from(status.core_dumped())).into_bytes()
        }
        (None, None) => b"c 255".to_vec(),
    }
}

impl Runner {
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let mut stdout = std::io::stdout().lock();
        if stdout
            .write_all(&self.out)
            .and_then(|()| stdout.flush())
            .is_err()
        {
            self.disconnected();
        }
        self.out.clear();
    }

    /// The client is gone: SIGKILL the group of every command whose leader still runs, when
    /// the executor asked for that; then exit.
    fn disconnected(&mut self) -> ! {
        for request in self.requests.values() {
            if request.kill_on_disconnect && request.status.is_none() {
                request.signal(Signal::KILL);
            }
        }
        std::process::exit(0)
    }

    fn start(&mut self, id: u32, data: &[u8]) {
        let (Some(&flags), Some(grace), Some(length)) = (
            data.first(),
            data.get(1..5)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes),
            data.get(5..9)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes),
        ) else {
            return;
        };
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        let (Some(text), Some(stdin)) = (
            data.get(9..9usize.saturating_add(length)),
            data.get(9usize.saturating_add(length)..),
        ) else {
            return;
        };
        let shell = if flags & 4 != 0 { "/bin/sh" } else { "sh" };
        let mut command = Command::new(shell);
        command
            .arg0("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes_compat(text))
            .process_group(0)
            .stdin(if flags & 2 != 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut leader = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                let message = format!("swiftide-ssh runner: cannot start the command: {error}\n");
                frame(&mut self.out, b'E', id, message.as_bytes());
                frame(&mut self.out, b'X', id, b"c 127");
                return;
            }
        };
        let stdin = match leader.stdin.take() {
            Some(pipe) if !stdin.is_empty() && rustix::io::ioctl_fionbio(&pipe, true).is_ok() => {
                Some((pipe, stdin.to_vec()))
            }
            // Nothing to write: the command reads EOF.
            _ => None,
        };
        let request = Request {
            stdout: leader.stdout.take(),
            stderr: leader.stderr.take(),
            leader,
            stdin,
            unacked: 0,
            kill_on_disconnect: flags & 1 != 0,
            grace: Duration::from_millis(u64::from(grace)),
            status: None,
            term_at: None,
            killed: false,
            announce_at: Some(Instant::now() + ANNOUNCE_AFTER),
        };
        self.requests.insert(id, request);
    }

    fn announce(&mut self, id: u32) {
        if let Some(request) = self.requests.get_mut(&id)
            && request.announce_at.take().is_some()
        {
            let group = request.leader.id().to_string();
            frame(&mut self.out, b'S', id, group.as_bytes());
        }
    }

    fn stop(&mut self, id: u32) {
        let Some(request) = self.requests.get_mut(&id) else {
            return;
        };
        if request.term_at.is_some() {
            return;
        }
        if request.grace.is_zero() || request.status.is_some() {
            if !request.grace.is_zero() {
                request.signal(Signal::TERM);
            }
            request.signal(Signal::KILL);
            request.killed = true;
            request.term_at = Some(Instant::now());
        } else {
            request.signal(Signal::TERM);
            request.term_at = Some(Instant::now());
        }
    }

    fn reap(&mut self) {
        for request in self.requests.values_mut() {
            if request.status.is_some() {
                continue;
            }
            if let Ok(Some(status)) = request.leader.try_wait() {
                request.status = Some(status);
                // Killed: the rest of the group goes at once, as runner.py does.
                if request.term_at.is_some() && !request.killed {
                    request.signal(Signal::KILL);
                    request.killed = true;
                }
            }
        }
    }

    fn finish(&mut self) {
        let ended: Vec<u32> = self
            .requests
            .iter()
            .filter(|(_, r)| r.stdout.is_none() && r.stderr.is_none() && r.status.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in ended {
            self.announce(id);
            if let Some(request) = self.requests.remove(&id)
                && let Some(status) = request.status
            {
                frame(&mut self.out, b'X', id, &end_of(status));
            }
        }
    }

    fn request(&mut self, kind: u8, id: u32, data: &[u8]) {
        match kind {
            b'R' => self.start(id, data),
            b'K' => self.stop(id),
            b'A' => {
                if let (Some(request), Some(bytes)) = (
                    self.requests.get_mut(&id),
                    data.get(..4).and_then(|b| b.try_into().ok()),
                ) {
                    let bytes = usize::try_from(u32::from_be_bytes(bytes)).unwrap_or(0);
                    request.unacked = request.unacked.saturating_sub(bytes);
                }
            }
            _ => {}
        }
    }
}

/// `OsStr` from bytes, as Unix paths and arguments are.
trait FromBytesCompat {
    fn from_bytes_compat(bytes: &[u8]) -> &Self;
}

impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(bytes: &[u8]) -> &Self {
        std::os::unix::ffi::OsStrExt::from_bytes(bytes)
    }
}

/// Which pipe a poll entry stands for.
#[derive(Clone, Copy)]
enum Slot {
    Input,
    Stdout(u32),
    Stderr(u32),
    Stdin(u32),
}

fn main() {
    let nonce = std::env::args().nth(1).unwrap_or_default();
    let mut runner = Runner {
        out: Vec::new(),
        requests: HashMap::new(),
    };
    let hello = format!(
        "{nonce} helper {} {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    frame(&mut runner.out, b'H', 0, hello.as_bytes());
    runner.flush();
    let mut input = std::io::stdin().lock();
    let mut inbuf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 65536];
    loop {
        runner.reap();
        runner.finish();
        let now = Instant::now();
        let mut timeout: Option<Duration> = None;
        let mut at_most = |left: Duration| {
            timeout = Some(timeout.map_or(left, |t: Duration| t.min(left)));
        };
        let mut slots = vec![Slot::Input];
        for (&id, request) in &runner.requests {
            if request.unacked < WINDOW {
                if request.stdout.is_some() {
                    slots.push(Slot::Stdout(id));
                }
                if request.stderr.is_some() {
                    slots.push(Slot::Stderr(id));
                }
            }
            if request.stdin.is_some() {
                slots.push(Slot::Stdin(id));
            }
            if let Some(at) = request.announce_at {
                at_most(at.saturating_duration_since(now));
            }
            if request.status.is_none() {
                if let Some(term_at) = request.term_at.filter(|_| !request.killed) {
                    at_most((term_at + request.grace).saturating_duration_since(now));
                    at_most(REAP_EVERY * 5);
                }
                if request.stdout.is_none() && request.stderr.is_none() {
                    at_most(REAP_EVERY);
                }
            }
        }
        runner.flush();
        let stdin_fd = std::io::stdin();
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(slots.len());
        for slot in &slots {
            let fd = match *slot {
                Slot::Input => PollFd::new(&stdin_fd, PollFlags::IN),
                Slot::Stdout(id) => {
                    match runner.requests.get(&id).and_then(|r| r.stdout.as_ref()) {
                        Some(pipe) => PollFd::new(pipe, PollFlags::IN),
                        None => continue,
                    }
                }
                Slot::Stderr(id) => {
                    match runner.requests.get(&id).and_then(|r| r.stderr.as_ref()) {
                        Some(pipe) => PollFd::new(pipe, PollFlags::IN),
                        None => continue,
                    }
                }
                Slot::Stdin(id) => match runner.requests.get(&id).and_then(|r| r.stdin.as_ref()) {
                    Some((pipe, _)) => PollFd::new(pipe, PollFlags::OUT),
                    None => continue,
                },
            };
            fds.push(fd);
        }
        let timespec = timeout.and_then(|t| Timespec::try_from(t).ok());
        if poll(&mut fds, timespec.as_ref()).is_err() {
            drop(fds);
            continue;
        }
        let ready: Vec<(Slot, PollFlags)> = slots
            .iter()
            .copied()
            .zip(fds.iter().map(PollFd::revents))
            .filter(|(_, revents)| !revents.is_empty())
            .collect();
        drop(fds);
        let now = Instant::now();
        let due: Vec<u32> = runner
            .requests
            .iter()
            .filter(|(_, r)| r.announce_at.is_some_and(|at| now >= at))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            runner.announce(id);
        }
        for request in runner.requests.values_mut() {
            if let Some(term_at) = request.term_at
                && !request.killed
                && now >= term_at + request.grace
            {
                request.signal(Signal::KILL);
                request.killed = true;
            }
        }
        for (slot, _) in ready {
            match slot {
                Slot::Input => match input.read(&mut chunk) {
                    Ok(0) | Err(_) => {
                        runner.flush();
                        runner.disconnected();
                    }
                    Ok(n) => {
                        inbuf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                        while let Some(header) = inbuf.get(..9) {
                            let kind = header[0];
                            let id =
                                u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
                            let len =
                                u32::from_be_bytes([header[5], header[6], header[7], header[8]]);
                            let end =
                                9usize.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
                            let Some(data) = inbuf.get(9..end) else {
                                break;
                            };
                            let data = data.to_vec();
                            inbuf.drain(..end);
                            runner.request(kind, id, &data);
                        }
                    }
                },
                Slot::Stdin(id) => {
                    let Some(request) = runner.requests.get_mut(&id) else {
                        continue;
                    };
                    let done = match request.stdin.as_mut() {
                        Some((pipe, pending)) => match pipe.write(pending) {
                            Ok(n) => {
                                pending.drain(..n);
                                pending.is_empty()
                            }
                            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => false,
                            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => false,
                            // The command closed its stdin without reading it all.
                            Err(_) => true,
                        },
                        None => false,
                    };
                    if done {
                        request.stdin = None;
                    }
                }
                Slot::Stdout(id) | Slot::Stderr(id) => {
                    let is_stdout = matches!(slot, Slot::Stdout(_));
                    let Some(request) = runner.requests.get_mut(&id) else {
                        continue;
                    };
                    let read = if is_stdout {
                        request.stdout.as_mut().map(|pipe| pipe.read(&mut chunk))
                    } else {
                        request.stderr.as_mut().map(|pipe| pipe.read(&mut chunk))
                    };
                    match read {
                        Some(Err(error))
                            if matches!(
                                error.kind(),
                                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                            ) => {}
                        Some(Ok(0)) | Some(Err(_)) => {
                            if is_stdout {
                                request.stdout = None;
                            } else {
                                request.stderr = None;
                            }
                        }
                        Some(Ok(n)) => {
                            request.unacked += n;
                            let data = chunk.get(..n).unwrap_or_default().to_vec();
                            runner.announce(id);
                            frame(
                                &mut runner.out,
                                if is_stdout { b'O' } else { b'E' },
                                id,
                                &data,
                            );
                            if runner.out.len() >= 65536 {
                                runner.flush();
                            }
                        }
                        None => {}
                    }
                }
            }
        }
    }
}
