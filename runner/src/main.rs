//! The resident runner as a native program: the helper that swiftide-ssh-executor's
//! `SshExecutorBuilder::runner_helper` installs on hosts, where it is tried before Python and
//! Perl. It speaks the protocol of `PROTOCOL.md` (this crate's library): `R` runs a command,
//! `K` kills its group, `A` acknowledges output; it answers `H` (hello), `S` (the group),
//! `O`/`E` (output), `X` (the end) and `F` (a request it cannot take, jobs among them: they
//! stay with Python's supervisor or the shell start).
//!
//! Safe Rust only: commands start with `std::process::Command` (`posix_spawn` where it can)
//! in a process group of their own (`process_group(0)`; not a session of their own, which
//! std has no safe way to ask for), with `SIGPIPE` at its default as std leaves it.
//!
//! It reads frames on stdin (`swiftide-ssh-runner NONCE`). Build it for the hosts'
//! architecture, e.g. `cargo build --release -p swiftide-ssh-runner --target
//! x86_64-unknown-linux-musl`, for a copy that needs no particular C library on the host;
//! it needs std and rustix only.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod guard;

use std::{
    collections::HashMap,
    io::{Read, Write},
    os::unix::{
        ffi::OsStrExt,
        process::{CommandExt, ExitStatusExt},
    },
    process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use rustix::{
    event::{PollFd, PollFlags, Timespec, poll},
    process::{Pid, Signal, kill_process_group},
};
use swiftide_ssh_runner::{
    ANNOUNCE_AFTER_MS, End, Guard, Hello, Kind, Run, RunFlags, WINDOW, decode_ack, encode_into,
    next_frame, signal_name,
};

/// How soon a command's group is announced without output.
const ANNOUNCE_AFTER: Duration = Duration::from_millis(ANNOUNCE_AFTER_MS);
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
    /// The private temporary directory of guarded commands (`tmp=private`), made at the
    /// first that asks and removed when the runner ends.
    private_tmp: Option<std::path::PathBuf>,
}

/// How `status` ended, as the protocol says it.
fn end_of(status: ExitStatus) -> End {
    match (status.code(), status.signal()) {
        (Some(code), _) => End::Code(code),
        (None, Some(number)) => End::Signal {
            name: signal_name(number).map_or_else(|| number.to_string(), str::to_owned),
            core_dumped: status.core_dumped(),
        },
        (None, None) => End::Code(255),
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
        if let Some(dir) = &self.private_tmp {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::process::exit(0)
    }

    /// The guard of a guarded request, checked, with its private temporary directory made
    /// (and named among its writable paths); the `guard:` fault's text otherwise.
    fn guard(&mut self, run: &Run<'_>) -> Result<Option<Guard>, String> {
        if !run.flags.has(RunFlags::GUARDED) {
            return Ok(None);
        }
        let mut guard = Guard::decode(run.guard)?;
        guard::check(&guard)?;
        if guard.private_tmp {
            let dir = self.private_tmp()?;
            guard.writable.push(dir.as_os_str().as_bytes().to_vec());
        }
        Ok(Some(guard))
    }

    fn private_tmp(&mut self) -> Result<std::path::PathBuf, String> {
        if let Some(dir) = &self.private_tmp {
            return Ok(dir.clone());
        }
        use std::os::unix::fs::DirBuilderExt;
        let nonce: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| u64::from(t.subsec_nanos()));
        let dir =
            std::env::temp_dir().join(format!("swiftide-ssh-{}-{nonce:x}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|error| {
                format!("guard: cannot make the private temporary directory: {error}")
            })?;
        self.private_tmp = Some(dir.clone());
        Ok(dir)
    }

    /// Answers request `id` with a fault: it did nothing.
    fn fault(&mut self, id: u32, why: &str) {
        encode_into(&mut self.out, Kind::Fault, id, why.as_bytes());
    }

    fn start(&mut self, id: u32, data: &[u8]) {
        let run = match Run::decode(data) {
            Ok(run) => run,
            Err(why) => return self.fault(id, &why),
        };
        if self.requests.contains_key(&id) {
            return self.fault(id, &format!("request {id} is running already"));
        }
        let guard = match self.guard(&run) {
            Ok(guard) => guard,
            Err(why) => return self.fault(id, &why),
        };
        let (flags, text, stdin) = (run.flags, run.text, run.stdin);
        let shell = if flags.has(RunFlags::SYSTEM_SHELL) {
            "/bin/sh"
        } else {
            "sh"
        };
        let mut command = match &guard {
            None => {
                let mut command = Command::new(shell);
                command
                    .arg0("sh")
                    .arg("-c")
                    .arg(std::ffi::OsStr::from_bytes(text));
                command
            }
            // The leader is this program again, which applies the guard and becomes the
            // shell (see `guard`); `/proc/self/exe` is this image even once its file is
            // replaced.
            Some(guard) => {
                let mut command = Command::new("/proc/self/exe");
                command.args(guard::leader_args(guard, shell, text));
                if guard.private_tmp
                    && let Some(dir) = &self.private_tmp
                {
                    command.env("TMPDIR", dir);
                }
                command
            }
        };
        command
            .process_group(0)
            .stdin(if flags.has(RunFlags::STDIN) {
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
                encode_into(&mut self.out, Kind::Stderr, id, message.as_bytes());
                encode_into(&mut self.out, Kind::Ended, id, &End::Code(127).encode());
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
            kill_on_disconnect: flags.has(RunFlags::KILL_ON_DISCONNECT),
            grace: Duration::from_millis(u64::from(run.grace_ms)),
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
            encode_into(&mut self.out, Kind::Started, id, group.as_bytes());
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
                encode_into(&mut self.out, Kind::Ended, id, &end_of(status).encode());
            }
        }
    }

    fn request(&mut self, kind: u8, id: u32, data: &[u8]) {
        match Kind::from_byte(kind) {
            Some(Kind::Run) => self.start(id, data),
            Some(Kind::Kill) => self.stop(id),
            Some(Kind::Ack) => match decode_ack(data) {
                Ok(bytes) => {
                    if let Some(request) = self.requests.get_mut(&id) {
                        request.unacked = request.unacked.saturating_sub(bytes);
                    }
                }
                Err(why) => self.fault(id, &why),
            },
            Some(Kind::Job) => self.fault(id, "the helper starts no jobs"),
            _ => self.fault(id, &format!("unknown request kind 0x{kind:02x}")),
        }
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
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == guard::GUARDED_ARG) {
        let why = guard::run_guarded(args.get(2..).unwrap_or_default());
        eprintln!("swiftide-ssh runner: {why}");
        std::process::exit(126);
    }
    let nonce = std::env::args().nth(1).unwrap_or_default();
    let mut runner = Runner {
        out: Vec::new(),
        requests: HashMap::new(),
        private_tmp: None,
    };
    let hello = Hello {
        implementation: "helper".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
    };
    encode_into(&mut runner.out, Kind::Hello, 0, &hello.encode(&nonce));
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
                        let mut taken = 0;
                        loop {
                            match next_frame(inbuf.get(taken..).unwrap_or_default()) {
                                Ok(Some((header, data))) => {
                                    let data = data.to_vec();
                                    taken += header.frame_len();
                                    runner.request(header.kind, header.id, &data);
                                }
                                Ok(None) => break,
                                Err(oversized) => {
                                    // Nothing after it can be framed: end as on a disconnect.
                                    runner.fault(0, &oversized.to_string());
                                    runner.flush();
                                    runner.disconnected();
                                }
                            }
                        }
                        inbuf.drain(..taken);
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
                            let kind = if is_stdout {
                                Kind::Stdout
                            } else {
                                Kind::Stderr
                            };
                            encode_into(&mut runner.out, kind, id, &data);
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
