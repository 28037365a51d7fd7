#![doc = include_str!("../PROTOCOL.md")]
//!
//! # This crate
//!
//! The protocol's one definition: the frame [`Kind`]s, the header ([`Header`], [`encode`],
//! [`next_frame`]), the requests' and ends' encodings ([`Run`], [`Job`], [`End`],
//! [`Hello`]), and the two scripts ([`PYTHON`], [`PERL`]) that the executor sends to hosts.
//! The executor (the client) and the helper binary both use it; the scripts implement the
//! same specification, and the conformance suite holds all three to it.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// `runner.py`: the runner in Python 3 (standard library only).
pub const PYTHON: &str = include_str!("../scripts/runner.py");

/// `runner.pl`: the runner in Perl 5 (only modules of Debian's Essential `perl-base`).
pub const PERL: &str = include_str!("../scripts/runner.pl");

/// The header's length: kind, request id, data length.
pub const HEADER_LEN: usize = 9;

/// A frame's data at most; a longer frame ends the runner (see "Faults" above).
pub const MAX_DATA: u32 = 64 * 1024 * 1024;

/// Output a request may have unacknowledged before its pipes wait.
pub const WINDOW: usize = 4 * 1024 * 1024;

/// How long after its start a command's group is announced (`S`) when no output or end
/// came first, in milliseconds.
pub const ANNOUNCE_AFTER_MS: u64 = 2;

/// A frame's kind: its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Client to runner: run a command ([`Run`]).
    Run = b'R',
    /// Client to runner: start a job under a supervisor ([`Job`]; Python only).
    Job = b'J',
    /// Client to runner: kill the request's process group.
    Kill = b'K',
    /// Client to runner: `u32` bytes of the request's output taken ([`encode_ack`]).
    Ack = b'A',
    /// Runner to client, id 0: [`Hello`].
    Hello = b'H',
    /// Runner to client: the command's process group id, in decimal.
    Started = b'S',
    /// Runner to client: standard output bytes.
    Stdout = b'O',
    /// Runner to client: standard error bytes.
    Stderr = b'E',
    /// Runner to client: the command's [`End`], after both pipes closed.
    Ended = b'X',
    /// Runner to client: what was wrong with the request of this id (text).
    Fault = b'F',
}

impl Kind {
    /// Every kind, client's first.
    pub const ALL: [Kind; 10] = [
        Kind::Run,
        Kind::Job,
        Kind::Kill,
        Kind::Ack,
        Kind::Hello,
        Kind::Started,
        Kind::Stdout,
        Kind::Stderr,
        Kind::Ended,
        Kind::Fault,
    ];

    /// The kind whose letter is `byte`.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.byte() == byte)
    }

    /// Its letter.
    pub fn byte(self) -> u8 {
        self as u8
    }
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The kind's letter, as sent (it may be no [`Kind`]: a fault).
    pub kind: u8,
    /// The request id.
    pub id: u32,
    /// The data's length.
    pub len: u32,
}

impl Header {
    /// The header at the start of `bytes`, when they hold one.
    pub fn parse(bytes: &[u8]) -> Option<Header> {
        let header: &[u8; HEADER_LEN] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
        let [kind, i0, i1, i2, i3, l0, l1, l2, l3] = *header;
        Some(Header {
            kind,
            id: u32::from_be_bytes([i0, i1, i2, i3]),
            len: u32::from_be_bytes([l0, l1, l2, l3]),
        })
    }

    /// The whole frame's length, header included.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN.saturating_add(usize::try_from(self.len).unwrap_or(usize::MAX))
    }
}

/// Appends a frame of `kind` for request `id` with `data` to `out`. Data over
/// [`MAX_DATA`] is the caller's error; it is cut there rather than mis-framed.
pub fn encode_into(out: &mut Vec<u8>, kind: Kind, id: u32, data: &[u8]) {
    let data = data
        .get(..usize::try_from(MAX_DATA).unwrap_or(usize::MAX))
        .unwrap_or(data);
    let len = u32::try_from(data.len()).unwrap_or(MAX_DATA);
    out.reserve(HEADER_LEN + data.len());
    out.push(kind.byte());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
}

/// A frame of `kind` for request `id` with `data` (see [`encode_into`]).
pub fn encode(kind: Kind, id: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(&mut out, kind, id, data);
    out
}

/// A frame's length is over [`MAX_DATA`]: the stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversized(pub Header);

impl std::fmt::Display for Oversized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a frame of {} bytes is over the limit of {MAX_DATA}",
            self.0.len
        )
    }
}

impl std::error::Error for Oversized {}

/// The first whole frame in `buffer`: its header and data (the frame is
/// `buffer[..header.frame_len()]`); `Ok(None)` while it is incomplete.
///
/// # Errors
/// [`Oversized`] when its length is over [`MAX_DATA`].
pub fn next_frame(buffer: &[u8]) -> Result<Option<(Header, &[u8])>, Oversized> {
    let Some(header) = Header::parse(buffer) else {
        return Ok(None);
    };
    if header.len > MAX_DATA {
        return Err(Oversized(header));
    }
    Ok(buffer
        .get(HEADER_LEN..header.frame_len())
        .map(|data| (header, data)))
}

/// The flags of a [`Run`] request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunFlags(pub u8);

impl RunFlags {
    /// Kill the group when the client goes.
    pub const KILL_ON_DISCONNECT: u8 = 1;
    /// The command's stdin is the request's bytes after the text, then EOF.
    pub const STDIN: u8 = 2;
    /// `/bin/sh`, not the `sh` on the `PATH`.
    pub const SYSTEM_SHELL: u8 = 4;
    /// A [`Guard`] precedes the text: limits and confinement applied in the child before
    /// `exec`.
    pub const GUARDED: u8 = 8;

    /// Whether `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }
}

/// A run request's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run<'a> {
    /// See [`RunFlags`].
    pub flags: RunFlags,
    /// Between TERM and KILL, in milliseconds.
    pub grace_ms: u32,
    /// The encoded [`Guard`] (with [`RunFlags::GUARDED`]; else empty).
    pub guard: &'a [u8],
    /// The `sh -c` text.
    pub text: &'a [u8],
    /// The command's stdin (with [`RunFlags::STDIN`]).
    pub stdin: &'a [u8],
}

impl<'a> Run<'a> {
    /// The length of the request's data: flags, grace, maybe the guard, text length, then
    /// text and stdin.
    pub fn data_len(&self) -> usize {
        let guard = if self.flags.has(RunFlags::GUARDED) {
            4usize.saturating_add(self.guard.len())
        } else {
            0
        };
        9usize
            .saturating_add(guard)
            .saturating_add(self.text.len())
            .saturating_add(self.stdin.len())
    }

    /// Whether the request's data fits in one frame ([`MAX_DATA`]).
    pub fn fits(&self) -> bool {
        u32::try_from(self.data_len()).is_ok_and(|len| len <= MAX_DATA)
    }

    /// The request's data.
    pub fn encode(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(self.data_len());
        data.push(self.flags.0);
        data.extend_from_slice(&self.grace_ms.to_be_bytes());
        if self.flags.has(RunFlags::GUARDED) {
            data.extend_from_slice(
                &u32::try_from(self.guard.len())
                    .unwrap_or(u32::MAX)
                    .to_be_bytes(),
            );
            data.extend_from_slice(self.guard);
        }
        data.extend_from_slice(
            &u32::try_from(self.text.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        data.extend_from_slice(self.text);
        data.extend_from_slice(self.stdin);
        data
    }

    /// Parses a request's data.
    ///
    /// # Errors
    /// What is wrong with it, for a [`Kind::Fault`] frame.
    pub fn decode(data: &'a [u8]) -> Result<Run<'a>, String> {
        let (Some(&flags), Some(grace)) =
            (data.first(), data.get(1..5).and_then(|b| b.try_into().ok()))
        else {
            return Err(format!(
                "a run request of {} bytes is too short",
                data.len()
            ));
        };
        let flags = RunFlags(flags);
        let (guard, rest) = if flags.has(RunFlags::GUARDED) {
            split_field(&data[5..]).ok_or_else(|| {
                format!("a run request's guard runs past its {} bytes", data.len())
            })?
        } else {
            (&data[..0], &data[5..])
        };
        let Some((text, stdin)) = split_field(rest) else {
            return Err(format!(
                "a run request's text runs past its {} bytes",
                data.len()
            ));
        };
        Ok(Run {
            flags,
            grace_ms: u32::from_be_bytes(grace),
            guard,
            text,
            stdin,
        })
    }
}

/// A field of `u32` length and bytes at the start of `data`, and what follows it.
fn split_field(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?);
    let end = 4usize.checked_add(usize::try_from(len).ok()?)?;
    Some((data.get(4..end)?, data.get(end..)?))
}

/// What a guarded command may do ([`RunFlags::GUARDED`]): resource limits and kernel
/// confinement, applied by the runner in the command's leader before it runs `sh`, so every
/// descendant inherits them.
///
/// Encoded as entries `NAME=VALUE`, each ended by a NUL byte (values are decimal numbers or
/// paths, which hold no NUL). A runner answers a guard it cannot enforce whole, an entry it
/// does not know among them, with a fault whose text starts with `guard:`; nothing is ever
/// applied weaker than asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guard {
    /// `cpu`: seconds of CPU time (`RLIMIT_CPU`; `SIGXCPU` at the limit, `SIGKILL` a second
    /// later).
    pub cpu_seconds: Option<u64>,
    /// `memory`: bytes of address space per process (`RLIMIT_AS`).
    pub memory_bytes: Option<u64>,
    /// `processes`: processes of the account at once (`RLIMIT_NPROC`; the account's other
    /// processes count too, and root is exempt).
    pub processes: Option<u64>,
    /// `file_size`: bytes of the largest file written (`RLIMIT_FSIZE`; `SIGXFSZ` past it).
    pub file_size_bytes: Option<u64>,
    /// `open_files`: descriptors per process (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// `writes=confined`: Landlock allows writes only beneath [`writable`](Self::writable),
    /// the private temporary directory and `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`.
    pub confine_writes: bool,
    /// `write=PATH`, repeated: where a confined command may write (relative paths from the
    /// runner's directory, the login's home).
    pub writable: Vec<Vec<u8>>,
    /// `tmp=private`: a directory only the runner's account can enter, made once per runner
    /// and removed when it ends, is the command's `TMPDIR` and writable.
    pub private_tmp: bool,
    /// `network=confined`: Landlock refuses every TCP bind and every TCP connect except to
    /// [`ports`](Self::ports) (Landlock ABI 4).
    pub confine_network: bool,
    /// `port=N`, repeated: TCP ports a network-confined command may connect to.
    pub ports: Vec<u16>,
}

impl Guard {
    /// Whether it asks for Landlock.
    pub fn confines(&self) -> bool {
        self.confine_writes || self.confine_network
    }

    /// Its entries.
    pub fn encode(&self) -> Vec<u8> {
        let mut data = Vec::new();
        let mut entry = |name: &str, value: &[u8]| {
            data.extend_from_slice(name.as_bytes());
            data.push(b'=');
            data.extend_from_slice(value);
            data.push(0);
        };
        for (name, value) in [
            ("cpu", self.cpu_seconds),
            ("memory", self.memory_bytes),
            ("processes", self.processes),
            ("file_size", self.file_size_bytes),
            ("open_files", self.open_files),
        ] {
            if let Some(value) = value {
                entry(name, value.to_string().as_bytes());
            }
        }
        if self.confine_writes {
            entry("writes", b"confined");
        }
        for path in &self.writable {
            entry("write", path);
        }
        if self.private_tmp {
            entry("tmp", b"private");
        }
        if self.confine_network {
            entry("network", b"confined");
        }
        for port in &self.ports {
            entry("port", port.to_string().as_bytes());
        }
        data
    }

    /// Parses a guard's entries.
    ///
    /// # Errors
    /// The first entry it does not know or cannot read, for a `guard:` fault.
    pub fn decode(data: &[u8]) -> Result<Guard, String> {
        let mut guard = Guard::default();
        let number = |value: &[u8]| -> Result<u64, String> {
            std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| {
                    format!(
                        "guard: {:?} is not a number",
                        String::from_utf8_lossy(value)
                    )
                })
        };
        for entry in data.split(|&b| b == 0).filter(|entry| !entry.is_empty()) {
            let (name, value) = match entry.iter().position(|&b| b == b'=') {
                Some(at) => (&entry[..at], &entry[at + 1..]),
                None => (entry, &entry[entry.len()..]),
            };
            match (name, value) {
                (b"cpu", v) => guard.cpu_seconds = Some(number(v)?),
                (b"memory", v) => guard.memory_bytes = Some(number(v)?),
                (b"processes", v) => guard.processes = Some(number(v)?),
                (b"file_size", v) => guard.file_size_bytes = Some(number(v)?),
                (b"open_files", v) => guard.open_files = Some(number(v)?),
                (b"writes", b"confined") => guard.confine_writes = true,
                (b"write", v) if !v.is_empty() => guard.writable.push(v.to_vec()),
                (b"tmp", b"private") => guard.private_tmp = true,
                (b"network", b"confined") => guard.confine_network = true,
                (b"port", v) => guard.ports.push(
                    u16::try_from(number(v)?).map_err(|_| "guard: a port over 65535".to_owned())?,
                ),
                _ => {
                    return Err(format!(
                        "guard: unknown entry {:?}",
                        String::from_utf8_lossy(entry)
                    ));
                }
            }
        }
        Ok(guard)
    }
}

/// A job request's data (see `supervise` in `runner.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job<'a> {
    /// Bytes of each stream spooled at most.
    pub spool_cap: u64,
    /// Milliseconds until the job is killed; 0: never.
    pub deadline_ms: u64,
    /// Between TERM and KILL, in milliseconds.
    pub grace_ms: u32,
    /// The job's id (its directory's name).
    pub id: &'a [u8],
    /// The `spec` file's text.
    pub spec: &'a [u8],
    /// The `params` file's text.
    pub params: &'a [u8],
    /// The `sh -c` text.
    pub text: &'a [u8],
}

impl Job<'_> {
    /// The request's data.
    pub fn encode(&self) -> Vec<u8> {
        let mut data = Vec::new();
        data.extend_from_slice(&self.spool_cap.to_be_bytes());
        data.extend_from_slice(&self.deadline_ms.to_be_bytes());
        data.extend_from_slice(&self.grace_ms.to_be_bytes());
        for field in [self.id, self.spec, self.params, self.text] {
            data.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
            data.extend_from_slice(field);
        }
        data
    }
}

/// An ack request's data.
pub fn encode_ack(bytes: usize) -> [u8; 4] {
    u32::try_from(bytes).unwrap_or(u32::MAX).to_be_bytes()
}

/// An ack request's byte count.
///
/// # Errors
/// What is wrong with it, for a [`Kind::Fault`] frame.
pub fn decode_ack(data: &[u8]) -> Result<usize, String> {
    let bytes: [u8; 4] = data
        .try_into()
        .map_err(|_| format!("an ack of {} bytes, not 4", data.len()))?;
    Ok(usize::try_from(u32::from_be_bytes(bytes)).unwrap_or(usize::MAX))
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It exited with this code.
    Code(i32),
    /// A signal killed its leader.
    Signal {
        /// The signal's name without `SIG` (`TERM`), or its number where it has none.
        name: String,
        /// It dumped core.
        core_dumped: bool,
    },
}

impl End {
    /// An [`Kind::Ended`] frame's data.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            End::Code(code) => format!("c {code}").into_bytes(),
            End::Signal { name, core_dumped } => {
                format!("s {name} {}", u8::from(*core_dumped)).into_bytes()
            }
        }
    }

    /// Parses an [`Kind::Ended`] frame's data.
    pub fn decode(data: &[u8]) -> Option<End> {
        let text = std::str::from_utf8(data).ok()?;
        let mut words = text.split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("c"), Some(code), None, None) => code.parse().ok().map(End::Code),
            (Some("s"), Some(name), Some(core @ ("0" | "1")), None) if !name.is_empty() => {
                Some(End::Signal {
                    name: name.to_owned(),
                    core_dumped: core == "1",
                })
            }
            _ => None,
        }
    }
}

/// Linux's name for signal `number` without `SIG`, as the scripts name it.
pub fn signal_name(number: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    usize::try_from(number.checked_sub(1)?)
        .ok()
        .and_then(|index| NAMES.get(index))
        .copied()
}

/// The hello frame's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// `helper`, `python`, `perl`.
    pub implementation: String,
    /// Its version (`3.11.2`, `5.036000`, the helper's crate version).
    pub version: String,
    /// The runner's pid.
    pub pid: u32,
}

impl Hello {
    /// The data: `NONCE IMPLEMENTATION VERSION PID`.
    pub fn encode(&self, nonce: &str) -> Vec<u8> {
        format!(
            "{nonce} {} {} {}",
            self.implementation, self.version, self.pid
        )
        .into_bytes()
    }

    /// Parses a hello frame's data, which must start with `nonce`.
    pub fn decode(data: &[u8], nonce: &str) -> Option<Hello> {
        let text = std::str::from_utf8(data).ok()?;
        let rest = text.strip_prefix(nonce)?.strip_prefix(' ')?;
        let mut words = rest.split(' ');
        let (Some(implementation), Some(version), Some(pid), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return None;
        };
        Some(Hello {
            implementation: implementation.to_owned(),
            version: version.to_owned(),
            pid: pid.parse().ok()?,
        })
    }

    /// `IMPLEMENTATION VERSION`, as the executor names a runner (`python 3.11.2`).
    pub fn name(&self) -> String {
        format!("{} {}", self.implementation, self.version)
    }
}

/// Finds the hello frame of `nonce` in what a runner's channel printed so far (a login
/// shell may have printed anything before it): the offset just past it, and the hello.
pub fn find_hello(stdout: &[u8], nonce: &str) -> Option<(usize, Hello)> {
    let needle = nonce.as_bytes();
    let mut from = 0;
    while let Some(found) = stdout
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
    {
        let at = from + found;
        from = at + 1;
        let Some(start) = at.checked_sub(HEADER_LEN) else {
            continue;
        };
        let Ok(Some((header, data))) = next_frame(&stdout[start..]) else {
            continue;
        };
        if header.kind != Kind::Hello.byte() || header.id != 0 {
            continue;
        }
        if let Some(hello) = Hello::decode(data, nonce) {
            return Some((start + header.frame_len(), hello));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_letters() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_byte(kind.byte()), Some(kind));
        }
        assert_eq!(Kind::from_byte(b'Z'), None);
    }

    #[test]
    fn frames_are_split_at_their_lengths() {
        let mut buffer = encode(Kind::Stdout, 7, b"abc");
        buffer.extend_from_slice(&encode(Kind::Ended, 7, b"c 0")[..5]);
        let (header, data) = next_frame(&buffer).unwrap().unwrap();
        assert_eq!((header.kind, header.id, data), (b'O', 7, &b"abc"[..]));
        let rest = &buffer[header.frame_len()..];
        assert_eq!(next_frame(rest), Ok(None));
        let mut huge = vec![b'R', 0, 0, 0, 1];
        huge.extend_from_slice(&(MAX_DATA + 1).to_be_bytes());
        assert!(next_frame(&huge).is_err());
    }

    #[test]
    fn run_requests_round_trip_and_bad_ones_say_why() {
        let run = Run {
            flags: RunFlags(RunFlags::STDIN | RunFlags::KILL_ON_DISCONNECT),
            grace_ms: 250,
            guard: b"",
            text: b"echo hi",
            stdin: b"input",
        };
        assert_eq!(Run::decode(&run.encode()), Ok(run));
        assert!(Run::decode(b"\x01\x00").is_err());
        let mut cut = run.encode();
        cut.truncate(12);
        assert!(Run::decode(&cut).unwrap_err().contains("past"));
    }

    #[test]
    fn ends_round_trip() {
        for end in [
            End::Code(0),
            End::Code(255),
            End::Signal {
                name: "TERM".into(),
                core_dumped: false,
            },
            End::Signal {
                name: "SEGV".into(),
                core_dumped: true,
            },
        ] {
            assert_eq!(End::decode(&end.encode()), Some(end));
        }
        assert_eq!(End::decode(b"?"), None);
        assert_eq!(End::decode(b"s TERM"), None);
        assert_eq!(signal_name(15), Some("TERM"));
        assert_eq!(signal_name(0), None);
        assert_eq!(signal_name(64), None);
    }

    #[test]
    fn the_hello_is_found_after_login_chatter() {
        let nonce = "swiftide-runner-00000000000000aa";
        let mut buffer = b"welcome, swiftide-runner-00000000000000aa is not a frame\n".to_vec();
        let hello = Hello {
            implementation: "perl".into(),
            version: "5.036000".into(),
            pid: 4242,
        };
        buffer.extend_from_slice(&encode(Kind::Hello, 0, &hello.encode(nonce)));
        let end = buffer.len();
        buffer.extend_from_slice(b"S");
        assert_eq!(find_hello(&buffer, nonce), Some((end, hello.clone())));
        assert_eq!(hello.name(), "perl 5.036000");
        assert_eq!(find_hello(&buffer[..end - 1], nonce), None);
    }
}
