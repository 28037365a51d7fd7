//! The protocol's conformance suite (PROTOCOL.md): every implementation (the helper, Python
//! with `posix_spawn`, Python with `fork`, Perl) is started over pipes, as sshd would start
//! it but without SSH, and driven through every frame kind. Each test runs all of them and
//! names the one that strays.

use std::{
    io::{Read, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use swiftide_ssh_runner::{
    End, Guard, HEADER_LEN, Header, Hello, Job, Kind, MAX_DATA, Run, RunFlags, WINDOW, encode,
    encode_ack, find_hello, next_frame,
};

const NONCE: &str = "swiftide-runner-conformance";
/// Long enough for a loaded CI machine; a hang fails after it rather than forever.
const PATIENCE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Implementation {
    Helper,
    PythonSpawn,
    PythonFork,
    Perl,
}

const ALL: [Implementation; 4] = [
    Implementation::Helper,
    Implementation::PythonSpawn,
    Implementation::PythonFork,
    Implementation::Perl,
];

/// `program` on this machine's `PATH`, absolute: a runner started with another `PATH` for
/// its commands must still be found.
fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is not on the PATH"))
}

/// The interpreter itself, not a wrapper (pyenv's shims are shell scripts that need a
/// `PATH`).
fn python3() -> PathBuf {
    let out = Command::new(which("python3"))
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

impl Implementation {
    fn command(self) -> Command {
        match self {
            Implementation::Helper => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_swiftide-ssh-runner"));
                command.arg(NONCE);
                command
            }
            Implementation::PythonSpawn | Implementation::PythonFork => {
                let mut command = Command::new(python3());
                command.arg(script("runner.py")).arg(NONCE).arg(
                    if self == Implementation::PythonSpawn {
                        "spawn"
                    } else {
                        "fork"
                    },
                );
                command
            }
            Implementation::Perl => {
                let mut command = Command::new(which("perl"));
                command.arg(script("runner.pl")).arg(NONCE);
                command
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Implementation::Helper => "helper",
            Implementation::PythonSpawn | Implementation::PythonFork => "python",
            Implementation::Perl => "perl",
        }
    }

    fn runs_jobs(self) -> bool {
        matches!(
            self,
            Implementation::PythonSpawn | Implementation::PythonFork
        )
    }
}

/// A frame from the runner.
#[derive(Debug, Clone)]
struct Frame {
    kind: u8,
    id: u32,
    data: Vec<u8>,
}

/// One runner over pipes.
struct Runner {
    implementation: Implementation,
    child: Child,
    stdin: Option<ChildStdin>,
    frames: mpsc::Receiver<Frame>,
    hello: Hello,
}

impl Runner {
    fn start(implementation: Implementation) -> Runner {
        Runner::start_with(implementation, |_| {})
    }

    fn start_with(implementation: Implementation, adjust: impl FnOnce(&mut Command)) -> Runner {
        let mut command = implementation.command();
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        adjust(&mut command);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{implementation:?}: {e}"));
        let mut stdout = child.stdout.take().expect("stdout");
        let (hello_tx, hello_rx) = mpsc::channel();
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buffer = Vec::new();
            let mut chunk = vec![0; 65536];
            let mut hello_tx = Some(hello_tx);
            loop {
                if let Some(sender) = &hello_tx
                    && let Some((end, hello)) = find_hello(&buffer, NONCE)
                {
                    buffer.drain(..end);
                    let _ = sender.send(hello);
                    hello_tx = None;
                }
                if hello_tx.is_none() {
                    while let Ok(Some((header, data))) = next_frame(&buffer) {
                        let frame = Frame {
                            kind: header.kind,
                            id: header.id,
                            data: data.to_vec(),
                        };
                        buffer.drain(..header.frame_len());
                        if tx.send(frame).is_err() {
                            return;
                        }
                    }
                }
                match stdout.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
        });
        let hello = hello_rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("{implementation:?}: no hello: {e}"));
        let stdin = child.stdin.take();
        Runner {
            implementation,
            child,
            stdin,
            frames,
            hello,
        }
    }

    fn send(&mut self, kind: u8, id: u32, data: &[u8]) {
        let mut frame = vec![kind];
        frame.extend_from_slice(&id.to_be_bytes());
        frame.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(data);
        self.send_raw(&frame);
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("the runner reads");
        stdin.flush().expect("flushed");
    }

    fn run(&mut self, id: u32, text: &str, flags: u8, grace_ms: u32, stdin: &[u8]) {
        let run = Run {
            flags: RunFlags(flags),
            grace_ms,
            guard: b"",
            text: text.as_bytes(),
            stdin,
        };
        self.send_raw(&encode(Kind::Run, id, &run.encode()));
    }

    fn next(&self, within: Duration) -> Option<Frame> {
        self.frames.recv_timeout(within).ok()
    }

    /// Request `id`'s standard output up to its first newline (its start frame passes;
    /// any other frame of it is a failure).
    fn first_line(&self, id: u32) -> Vec<u8> {
        let mut stdout = Vec::new();
        while !stdout.contains(&b'\n') {
            let frame = self
                .next(PATIENCE)
                .unwrap_or_else(|| panic!("{:?}: no line from {id}", self.implementation));
            assert_eq!(frame.id, id, "{frame:?}");
            match frame.kind {
                b'S' => {}
                b'O' => stdout.extend_from_slice(&frame.data),
                _ => panic!("{:?}: {frame:?} before a line", self.implementation),
            }
        }
        stdout
    }

    /// Frames of request `id` until its end (or fault), acknowledging output as it comes.
    fn finish(&mut self, id: u32) -> Outcome {
        let mut outcome = Outcome::default();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.next(left).unwrap_or_else(|| {
                panic!(
                    "{:?}: request {id} never ended: {outcome:?}",
                    self.implementation
                )
            });
            if frame.id != id {
                outcome.others.push(frame);
                continue;
            }
            match Kind::from_byte(frame.kind) {
                Some(Kind::Started) => {
                    assert!(outcome.end.is_none());
                    outcome.group = Some(String::from_utf8(frame.data).unwrap().parse().unwrap());
                }
                Some(Kind::Stdout) | Some(Kind::Stderr) => {
                    if frame.kind == b'O' {
                        outcome.stdout.extend_from_slice(&frame.data);
                    } else {
                        outcome.stderr.extend_from_slice(&frame.data);
                    }
                    self.send_raw(&encode(Kind::Ack, id, &encode_ack(frame.data.len())));
                }
                Some(Kind::Ended) => {
                    outcome.end = Some(End::decode(&frame.data).unwrap_or_else(|| {
                        panic!("{:?}: bad end {:?}", self.implementation, frame.data)
                    }));
                    return outcome;
                }
                Some(Kind::Fault) => {
                    outcome.fault = Some(String::from_utf8_lossy(&frame.data).into_owned());
                    return outcome;
                }
                other => panic!("{:?}: unexpected {other:?} {frame:?}", self.implementation),
            }
        }
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the runner to exit.
    fn exited_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stdin = None;
        if !self.exited_within(Duration::from_secs(5)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Debug, Default)]
struct Outcome {
    group: Option<u32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    end: Option<End>,
    fault: Option<String>,
    /// Frames of other requests seen meanwhile.
    others: Vec<Frame>,
}

impl Outcome {
    fn code(&self, code: i32) -> bool {
        self.end == Some(End::Code(code))
    }

    fn signal(&self) -> Option<&str> {
        match &self.end {
            Some(End::Signal { name, .. }) => Some(name),
            _ => None,
        }
    }
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn gone_within(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    gone(pid)
}

fn pids(text: &[u8]) -> Vec<u32> {
    String::from_utf8_lossy(text)
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect()
}

fn kill_group(group: u32) {
    if let Some(pid) = i32::try_from(group)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

const KOD: u8 = RunFlags::KILL_ON_DISCONNECT;

#[test]
fn every_runner_says_hello_with_its_name_and_pid() {
    for implementation in ALL {
        let runner = Runner::start(implementation);
        assert_eq!(runner.hello.implementation, implementation.name());
        assert_eq!(runner.hello.pid, runner.child.id(), "{implementation:?}");
        assert!(!runner.hello.version.is_empty());
    }
}

#[test]
fn output_of_both_streams_arrives_byte_exact() {
    // NUL, bytes that are no UTF-8, a long run, and the two streams interleaved.
    let text = "printf 'a\\000b\\377\\n'; printf 'to err\\n' >&2; head -c 300000 /dev/zero | tr '\\000' x; printf 'end\\377' >&2";
    let mut expected = b"a\0b\xff\n".to_vec();
    expected.extend(std::iter::repeat_n(b'x', 300_000));
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        runner.run(1, text, KOD, 1000, b"");
        let outcome = runner.finish(1);
        assert!(outcome.code(0), "{implementation:?}: {outcome:?}");
        assert!(
            outcome.stdout == expected,
            "{implementation:?}: stdout differs"
        );
        assert_eq!(outcome.stderr, b"to err\nend\xff", "{implementation:?}");
    }
}

#[test]
fn exit_codes_and_signal_names_are_reported() {
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        let mut ends = std::collections::HashMap::new();
        for (id, text) in [
            (1, "exit 3"),
            (2, "kill -USR1 $$"),
            (3, "kill -TERM $$"),
            (4, "exit 255"),
        ] {
            runner.run(id, text, KOD, 1000, b"");
            ends.insert(id, runner.finish(id).end);
        }
        assert_eq!(ends[&1], Some(End::Code(3)), "{implementation:?}");
        assert_eq!(ends[&4], Some(End::Code(255)), "{implementation:?}");
        for (id, name) in [(2, "USR1"), (3, "TERM")] {
            assert_eq!(
                ends[&id],
                Some(End::Signal {
                    name: name.into(),
                    core_dumped: false
                }),
                "{implementation:?}"
            );
        }
    }
}

#[test]
fn the_group_is_the_leader_and_the_end_waits_for_lingering_children() {
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        runner.run(
            1,
            "echo $$; (sleep 0.3; echo late; echo late-err >&2) & echo early",
            KOD,
            1000,
            b"",
        );
        let outcome = runner.finish(1);
        assert!(outcome.code(0), "{implementation:?}: {outcome:?}");
        let stdout = String::from_utf8(outcome.stdout.clone()).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{implementation:?}: {stdout:?}");
        assert_eq!(
            Some(lines[0].parse::<u32>().unwrap()),
            outcome.group,
            "{implementation:?}: the group is the leader's pid"
        );
        assert_eq!(&lines[1..], ["early", "late"], "{implementation:?}");
        assert_eq!(outcome.stderr, b"late-err\n", "{implementation:?}");
    }
}

#[test]
fn a_kill_takes_the_whole_group_with_term_then_kill_after_the_grace() {
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        // A group that dies of TERM: the leader and a background child.
        runner.run(1, "sleep 30 & echo $!; sleep 30", KOD, 5000, b"");
        let child = pids(&runner.first_line(1))[0];
        let killed_at = Instant::now();
        runner.send(b'K', 1, b"");
        let outcome = runner.finish(1);
        assert_eq!(
            outcome.signal(),
            Some("TERM"),
            "{implementation:?}: {outcome:?}"
        );
        assert!(
            killed_at.elapsed() < Duration::from_secs(4),
            "{implementation:?}"
        );
        assert!(
            gone_within(child, Duration::from_secs(3)),
            "{implementation:?}: the background child outlived the kill"
        );

        // A group that ignores TERM: KILL once the grace has passed.
        runner.run(
            2,
            "trap '' TERM; echo $$; while :; do sleep 0.05; done",
            KOD,
            400,
            b"",
        );
        // Killed once the trap is set (its output says so), not merely started.
        runner.first_line(2);
        let killed_at = Instant::now();
        runner.send(b'K', 2, b"");
        let outcome = runner.finish(2);
        let took = killed_at.elapsed();
        assert_eq!(
            outcome.signal(),
            Some("KILL"),
            "{implementation:?}: {outcome:?}"
        );
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_secs(5),
            "{implementation:?}: {took:?}"
        );

        // No grace: KILL at once.
        runner.run(3, "trap '' TERM; sleep 30", KOD, 0, b"");
        std::thread::sleep(Duration::from_millis(100));
        runner.send(b'K', 3, b"");
        let outcome = runner.finish(3);
        assert_eq!(
            outcome.signal(),
            Some("KILL"),
            "{implementation:?}: {outcome:?}"
        );

        // A kill after the end crosses it on the wire: ignored, nothing answered.
        runner.send(b'K', 3, b"");
        runner.run(4, "echo still", KOD, 0, b"");
        let outcome = runner.finish(4);
        assert_eq!(outcome.stdout, b"still\n", "{implementation:?}");
        assert!(
            outcome.others.is_empty(),
            "{implementation:?}: {:?}",
            outcome.others
        );
    }
}

#[test]
fn output_waits_at_the_window_until_acknowledged_without_stalling_others() {
    let total = 3 * WINDOW;
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        runner.run(1, &format!("head -c {total} /dev/zero"), KOD, 1000, b"");
        // Unacknowledged: it reaches the window, then stops near it.
        let mut got = 0usize;
        let deadline = Instant::now() + PATIENCE;
        while got < WINDOW && Instant::now() < deadline {
            if let Some(frame) = runner.next(Duration::from_millis(100)) {
                assert_ne!(
                    frame.kind, b'X',
                    "{implementation:?}: ended past the window"
                );
                if frame.kind == b'O' {
                    got += frame.data.len();
                }
            }
        }
        while let Some(frame) = runner.next(Duration::from_millis(700)) {
            assert_ne!(
                frame.kind, b'X',
                "{implementation:?}: ended past the window"
            );
            if frame.kind == b'O' {
                got += frame.data.len();
            }
        }
        assert!(
            (WINDOW..=WINDOW + 2 * 65536).contains(&got),
            "{implementation:?}: {got} bytes unacknowledged"
        );
        // Another request is not held up meanwhile.
        runner.run(2, "echo other", KOD, 1000, b"");
        let other = runner.finish(2);
        assert_eq!(other.stdout, b"other\n", "{implementation:?}");
        // Acknowledged, the rest comes.
        runner.send_raw(&encode(Kind::Ack, 1, &encode_ack(got)));
        let rest = runner.finish(1);
        assert!(rest.code(0), "{implementation:?}: {:?}", rest.end);
        assert_eq!(got + rest.stdout.len(), total, "{implementation:?}");
    }
}

#[test]
fn stdin_is_given_once_then_eof_and_dropped_when_unread() {
    let data: Vec<u8> = (0..1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        runner.run(1, "cksum", KOD | RunFlags::STDIN, 1000, &data);
        let outcome = runner.finish(1);
        let expected = Command::new("cksum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(&data)?;
                child.wait_with_output()
            })
            .unwrap()
            .stdout;
        assert_eq!(outcome.stdout, expected, "{implementation:?}");
        // Not read at all: the command ends, the rest is dropped.
        runner.run(2, "exit 0", KOD | RunFlags::STDIN, 1000, &data);
        assert!(runner.finish(2).code(0), "{implementation:?}");
        // Empty stdin: EOF at once.
        runner.run(3, "cat; echo done", KOD | RunFlags::STDIN, 1000, b"");
        assert_eq!(runner.finish(3).stdout, b"done\n", "{implementation:?}");
        // No stdin flag: /dev/null.
        runner.run(4, "cat; echo null", KOD, 1000, b"");
        assert_eq!(runner.finish(4).stdout, b"null\n", "{implementation:?}");
    }
}

#[test]
fn the_system_shell_flag_runs_bin_sh_whatever_the_path() {
    for implementation in ALL {
        let mut runner = Runner::start_with(implementation, |command| {
            command.env("PATH", "/nonexistent");
        });
        runner.run(1, "echo plain", KOD, 1000, b"");
        let plain = runner.finish(1);
        assert!(plain.code(127), "{implementation:?}: {plain:?}");
        runner.run(2, "echo system", KOD | RunFlags::SYSTEM_SHELL, 1000, b"");
        let system = runner.finish(2);
        assert_eq!(system.stdout, b"system\n", "{implementation:?}: {system:?}");
    }
}

#[test]
fn the_end_of_the_channel_kills_the_groups_that_asked_for_it() {
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        runner.run(1, "echo $$; sleep 30", KOD, 1000, b"");
        runner.run(2, "echo $$; sleep 30", 0, 1000, b"");
        let mut leaders = std::collections::HashMap::new();
        while leaders.len() < 2 {
            let frame = runner.next(PATIENCE).expect("both leaders");
            if frame.kind == b'O' {
                leaders.insert(frame.id, pids(&frame.data)[0]);
            }
        }
        runner.close_stdin();
        assert!(
            runner.exited_within(Duration::from_secs(5)),
            "{implementation:?}: the runner outlived its channel"
        );
        assert!(
            gone_within(leaders[&1], Duration::from_secs(3)),
            "{implementation:?}: kill on disconnect"
        );
        assert!(
            !gone(leaders[&2]),
            "{implementation:?}: a command without kill on disconnect was killed"
        );
        kill_group(leaders[&2]);
    }
}

#[test]
fn malformed_requests_are_answered_with_a_fault_and_the_runner_goes_on() {
    for implementation in ALL {
        let mut runner = Runner::start(implementation);
        let expect_fault = |runner: &mut Runner, id: u32, what: &str| {
            let outcome = runner.finish(id);
            assert!(
                outcome.fault.is_some(),
                "{implementation:?}: {what} answered {outcome:?}"
            );
        };
        runner.send(b'Z', 11, b"whatever");
        expect_fault(&mut runner, 11, "an unknown kind");
        runner.send(b'R', 12, b"\x01\x00");
        expect_fault(&mut runner, 12, "a short run request");
        let mut past = Run {
            flags: RunFlags(KOD),
            grace_ms: 0,
            guard: b"",
            text: b"echo never",
            stdin: b"",
        }
        .encode();
        past.truncate(past.len() - 3);
        runner.send(b'R', 13, &past);
        expect_fault(&mut runner, 13, "a text past the end");
        runner.send(b'A', 14, b"\x00\x01");
        expect_fault(&mut runner, 14, "a short ack");
        if !implementation.runs_jobs() {
            let job = Job {
                spool_cap: 1,
                deadline_ms: 0,
                grace_ms: 0,
                id: b"j",
                spec: b"",
                params: b"",
                text: b"true",
            };
            runner.send_raw(&encode(Kind::Job, 15, &job.encode()));
            expect_fault(&mut runner, 15, "a job to a runner without jobs");
        } else {
            runner.send(b'J', 15, b"\x00\x00");
            expect_fault(&mut runner, 15, "a short job request");
        }
        // A request id that is running already.
        runner.run(16, "sleep 30", KOD, 0, b"");
        runner.run(16, "echo twice", KOD, 0, b"");
        let twice = runner.finish(16);
        assert!(twice.fault.is_some(), "{implementation:?}: {twice:?}");
        runner.send(b'K', 16, b"");
        assert_eq!(
            runner.finish(16).signal(),
            Some("KILL"),
            "{implementation:?}"
        );
        // And it goes on.
        runner.run(17, "echo fine", KOD, 0, b"");
        assert_eq!(runner.finish(17).stdout, b"fine\n", "{implementation:?}");

        // An oversized frame cannot be skipped: a fault for id 0, then the runner ends.
        runner.run(18, "echo $$; sleep 30", KOD, 0, b"");
        let leader = pids(&runner.first_line(18))[0];
        let mut header = vec![b'R'];
        header.extend_from_slice(&19u32.to_be_bytes());
        header.extend_from_slice(&(MAX_DATA + 1).to_be_bytes());
        assert_eq!(header.len(), HEADER_LEN);
        assert_eq!(Header::parse(&header).map(|h| h.len), Some(MAX_DATA + 1));
        runner.send_raw(&header);
        let fault = runner.finish(0);
        assert!(fault.fault.is_some(), "{implementation:?}: {fault:?}");
        assert!(
            runner.exited_within(Duration::from_secs(5)),
            "{implementation:?}: went on after an oversized frame"
        );
        assert!(
            gone_within(leader, Duration::from_secs(3)),
            "{implementation:?}: its commands were not killed as on a disconnect"
        );
    }
}

// Guards (PROTOCOL.md, "Guards"): limits and Landlock, applied in the leader before `sh`.

const GUARDED: u8 = KOD | RunFlags::GUARDED;

/// The implementations that apply guards; Perl refuses them.
const GUARDING: [Implementation; 3] = [
    Implementation::Helper,
    Implementation::PythonSpawn,
    Implementation::PythonFork,
];

impl Runner {
    fn run_guarded(&mut self, id: u32, text: &str, guard: &Guard) {
        let guard = guard.encode();
        let run = Run {
            flags: RunFlags(GUARDED),
            grace_ms: 200,
            guard: &guard,
            text: text.as_bytes(),
            stdin: b"",
        };
        self.send_raw(&encode(Kind::Run, id, &run.encode()));
    }
}

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "swiftide-guard-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn confined_writes(allowed: &Path) -> Guard {
    Guard {
        confine_writes: true,
        writable: vec![allowed.as_os_str().as_encoded_bytes().to_vec()],
        private_tmp: true,
        ..Guard::default()
    }
}

#[test]
fn a_confined_command_and_its_descendants_write_only_beneath_its_paths() {
    for implementation in GUARDING {
        let root = scratch(implementation.name());
        let (inside, outside) = (root.join("inside"), root.join("outside"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // Every way out tried: a plain redirection, cp, a Python script, a symlink planted
        // in the allowed tree, a background child that outlives the command, `base64 -d |
        // sh`, a rename out of the tree, truncation of a file outside.
        std::fs::write(outside.join("keep"), b"precious").unwrap();
        let script = format!(
            r#"in={inside}; out={outside}
echo in > "$in/plain" && echo plain-ok
echo out > "$out/plain" 2>/dev/null || echo plain-refused
cp "$in/plain" "$out/cp" 2>/dev/null || echo cp-refused
python3 -c 'open("'"$out"'/py", "w")' 2>/dev/null || echo python-refused
ln -s "$out" "$in/link" && {{ echo via > "$in/link/via" 2>/dev/null || echo symlink-refused; }}
( sleep 0.2; echo late > "$out/late" 2>/dev/null || echo late-refused > "$in/late" ) &
printf 'echo b64 > %s/b64\n' "$out" | base64 | base64 -d | sh 2>/dev/null || echo base64-refused
mv "$in/plain" "$out/moved" 2>/dev/null || echo rename-refused
truncate -s 0 "$out/keep" 2>/dev/null || echo truncate-refused
echo tmp > "$TMPDIR/t" && echo tmp-ok
echo null > /dev/null && echo devnull-ok
wait"#,
            inside = inside.display(),
            outside = outside.display()
        );
        let mut runner = Runner::start(implementation);
        runner.run_guarded(1, &script, &confined_writes(&inside));
        let outcome = runner.finish(1);
        let stdout = String::from_utf8_lossy(&outcome.stdout);
        for word in [
            "plain-ok",
            "plain-refused",
            "cp-refused",
            "python-refused",
            "symlink-refused",
            "base64-refused",
            "rename-refused",
            "truncate-refused",
            "tmp-ok",
            "devnull-ok",
        ] {
            assert!(
                stdout.lines().any(|line| line == word),
                "{implementation:?}: no {word} in {stdout:?} ({outcome:?})"
            );
        }
        assert!(outcome.code(0), "{implementation:?}: {outcome:?}");
        let written: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(written, ["keep"], "{implementation:?}: written outside");
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"precious");
        assert_eq!(
            std::fs::read_to_string(inside.join("late")).unwrap(),
            "late-refused\n",
            "{implementation:?}: the background child"
        );
        // The runner itself is not confined: an unguarded command writes anywhere.
        runner.run(
            2,
            &format!("echo free > {}/free", outside.display()),
            KOD,
            0,
            b"",
        );
        assert!(runner.finish(2).code(0), "{implementation:?}");
        assert!(outside.join("free").exists(), "{implementation:?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn a_network_confined_command_connects_only_to_its_ports() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let connect = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)' \
         2>/dev/null && echo connected || echo refused"
    );
    for implementation in GUARDING {
        let mut runner = Runner::start(implementation);
        let closed = Guard {
            confine_network: true,
            ..Guard::default()
        };
        runner.run_guarded(1, &connect, &closed);
        assert_eq!(
            runner.finish(1).stdout,
            b"refused\n",
            "{implementation:?}: a connect under network=confined"
        );
        let open = Guard {
            ports: vec![port],
            ..closed
        };
        runner.run_guarded(2, &connect, &open);
        assert_eq!(
            runner.finish(2).stdout,
            b"connected\n",
            "{implementation:?}: a connect to an allowed port"
        );
    }
}

#[test]
fn limits_are_set_soft_and_hard_and_cpu_time_ends_in_sigxcpu() {
    for implementation in GUARDING {
        let mut runner = Runner::start(implementation);
        let guard = Guard {
            cpu_seconds: Some(1),
            memory_bytes: Some(1 << 30),
            processes: Some(500),
            file_size_bytes: Some(1 << 20),
            open_files: Some(64),
            ..Guard::default()
        };
        runner.run_guarded(1, "cat /proc/self/limits", &guard);
        let limits = String::from_utf8(runner.finish(1).stdout).unwrap();
        for (name, soft, hard) in [
            ("Max cpu time", "1", "2"),
            ("Max address space", "1073741824", "1073741824"),
            ("Max processes", "500", "500"),
            ("Max file size", "1048576", "1048576"),
            ("Max open files", "64", "64"),
        ] {
            let line = limits
                .lines()
                .find(|line| line.starts_with(name))
                .unwrap_or_else(|| panic!("{implementation:?}: no {name} in {limits}"));
            let fields: Vec<&str> = line[name.len()..].split_whitespace().collect();
            assert_eq!(
                (fields[0], fields[1]),
                (soft, hard),
                "{implementation:?}: {line}"
            );
        }
        // A file written past its limit: SIGXFSZ; CPU time past it: SIGXCPU.
        let big = scratch("fsize").join("big");
        let text = format!("exec head -c 2000000 /dev/zero > {}", big.display());
        let small_files = Guard {
            file_size_bytes: Some(1 << 20),
            ..Guard::default()
        };
        runner.run_guarded(2, &text, &small_files);
        assert_eq!(
            runner.finish(2).signal(),
            Some("XFSZ"),
            "{implementation:?}"
        );
        runner.run_guarded(3, "while :; do :; done", &guard);
        assert_eq!(
            runner.finish(3).signal(),
            Some("XCPU"),
            "{implementation:?}"
        );
    }
}

#[test]
fn a_guard_that_cannot_be_enforced_is_refused_and_nothing_runs() {
    for implementation in ALL {
        let marker = scratch("refused").join("ran");
        let text = format!("touch {}", marker.display());
        // A runner told that the kernel has no Landlock.
        let mut runner = Runner::start_with(implementation, |command| {
            command.env("SWIFTIDE_SSH_RUNNER_NO_LANDLOCK", "1");
        });
        runner.run_guarded(1, &text, &confined_writes(Path::new("/tmp")));
        let outcome = runner.finish(1);
        let fault = outcome.fault.unwrap_or_default();
        assert!(fault.starts_with("guard:"), "{implementation:?}: {fault:?}");
        // An entry no runner knows.
        let mut unknown = Guard::default().encode();
        unknown.extend_from_slice(b"seccomp=strict\0");
        let run = Run {
            flags: RunFlags(GUARDED),
            grace_ms: 0,
            guard: &unknown,
            text: text.as_bytes(),
            stdin: b"",
        };
        runner.send_raw(&encode(Kind::Run, 2, &run.encode()));
        let fault = runner.finish(2).fault.unwrap_or_default();
        assert!(fault.starts_with("guard:"), "{implementation:?}: {fault:?}");
        assert!(
            !marker.exists(),
            "{implementation:?}: a refused command ran"
        );
        // And it goes on.
        runner.run(3, "echo fine", KOD, 0, b"");
        assert_eq!(runner.finish(3).stdout, b"fine\n", "{implementation:?}");
    }
}
