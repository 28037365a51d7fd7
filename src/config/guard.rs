//! Guards: resource limits and kernel confinement for commands on real hosts (the guide,
//! [Guarded commands](crate::guide::guards)). The runner applies them in the command's leader
//! before `sh` runs (the `swiftide-ssh-runner` crate's protocol, "Guards"); a command that
//! cannot get them whole is refused with
//! [`Error::GuardUnavailable`](crate::Error::GuardUnavailable), never run weaker than asked.

use std::{path::PathBuf, time::Duration};

/// Resource limits for each command: set soft and hard in its leader, so the command and
/// everything it starts are under them and cannot raise them. Every limit defaults to none.
///
/// ```
/// use std::time::Duration;
/// use swiftide_ssh_executor::Limits;
///
/// let limits = Limits::new()
///     .memory(2 << 30)
///     .cpu_time(Duration::from_secs(600))
///     .processes(512);
/// assert_eq!(limits.memory_bytes(), Some(2 << 30));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    memory: Option<u64>,
    cpu_time: Option<Duration>,
    processes: Option<u64>,
    file_size: Option<u64>,
    open_files: Option<u64>,
}

impl Limits {
    /// No limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of address space per process (`RLIMIT_AS`): allocations past it fail.
    #[must_use]
    pub fn memory(mut self, bytes: u64) -> Self {
        self.memory = Some(bytes);
        self
    }

    /// CPU time per process (`RLIMIT_CPU`, whole seconds, rounded up): the command gets
    /// `SIGXCPU` at the limit ([`Execution::limit_exceeded`](crate::Execution::limit_exceeded)
    /// says [`Limit::CpuTime`]) and `SIGKILL` a second later.
    #[must_use]
    pub fn cpu_time(mut self, time: Duration) -> Self {
        self.cpu_time = Some(time);
        self
    }

    /// Processes of the login's account at once (`RLIMIT_NPROC`): a fork bomb stops there.
    /// The account's other processes count too, and root is exempt (the kernel's rule).
    #[must_use]
    pub fn processes(mut self, count: u64) -> Self {
        self.processes = Some(count);
        self
    }

    /// Bytes of the largest file a process writes (`RLIMIT_FSIZE`): `SIGXFSZ` past it
    /// ([`Limit::FileSize`]).
    #[must_use]
    pub fn file_size(mut self, bytes: u64) -> Self {
        self.file_size = Some(bytes);
        self
    }

    /// Descriptors per process (`RLIMIT_NOFILE`).
    #[must_use]
    pub fn open_files(mut self, count: u64) -> Self {
        self.open_files = Some(count);
        self
    }

    /// The memory limit.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.memory
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Which limit stopped a command ([`Execution::limit_exceeded`](crate::Execution::limit_exceeded)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// [`Limits::cpu_time`]: the command got `SIGXCPU`.
    CpuTime,
    /// [`Limits::file_size`]: the command got `SIGXFSZ`.
    FileSize,
}

/// Where a confined command may open network connections.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Network {
    /// No TCP connect and no TCP bind.
    None,
    /// TCP connects to these ports only; no bind.
    Ports(Vec<u16>),
    /// Not confined.
    Unconfined,
}

/// Kernel confinement (Landlock) for each command: the command and every descendant may
/// write only beneath the paths given and open only the network connections allowed.
/// Enforced by the host's kernel, so scripts, interpreters, `base64 -d | sh`, symlinks and
/// background children are all inside it; a confined command also cannot gain privileges
/// (`sudo`, set-user-ID programs). Reads, UDP, Unix sockets and signals are not confined.
///
/// ```
/// use swiftide_ssh_executor::{Confinement, Network};
///
/// // The working directory, a private TMPDIR and the cargo cache; crates.io over HTTPS.
/// let confinement = Confinement::new()
///     .writable("/home/ci/.cargo")
///     .network(Network::Ports(vec![443]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    writes: bool,
    writable: Vec<PathBuf>,
    workdir_writable: bool,
    private_tmp: bool,
    network: Network,
}

impl Default for Confinement {
    fn default() -> Self {
        Self::new()
    }
}

impl Confinement {
    /// Writes only to the command's working directory and a private temporary directory
    /// (its `TMPDIR`), and no network.
    pub fn new() -> Self {
        Confinement {
            writes: true,
            writable: Vec::new(),
            workdir_writable: true,
            private_tmp: true,
            network: Network::None,
        }
    }

    /// Whether writes are confined (to the paths below). Defaults to true; false confines
    /// only the network.
    #[must_use]
    pub fn writes(mut self, confined: bool) -> Self {
        self.writes = confined;
        self
    }

    /// Adds a path the command may write beneath (absolute, or relative to the login's home).
    #[must_use]
    pub fn writable(mut self, path: impl Into<PathBuf>) -> Self {
        self.writable.push(path.into());
        self
    }

    /// Whether the command's working directory (the login's home when it has none) is
    /// writable. Defaults to true.
    #[must_use]
    pub fn workdir_writable(mut self, writable: bool) -> Self {
        self.workdir_writable = writable;
        self
    }

    /// Whether the command gets a private temporary directory as its `TMPDIR` (mode 0700,
    /// one per runner, removed when it ends), writable. Defaults to true.
    #[must_use]
    pub fn private_tmp(mut self, private: bool) -> Self {
        self.private_tmp = private;
        self
    }

    /// Where the command may connect. Defaults to [`Network::None`].
    #[must_use]
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }
}

/// What a command runs under: its limits and confinement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Guard {
    pub(crate) limits: Limits,
    pub(crate) confinement: Option<Confinement>,
}

impl Guard {
    /// Whether it asks for anything.
    pub(crate) fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.confinement.is_none()
    }

    /// The protocol's guard for a command run in `dir` (`None`: the login's home).
    pub(crate) fn to_protocol(&self, dir: Option<&std::path::Path>) -> swiftide_ssh_runner::Guard {
        let limits = &self.limits;
        let mut guard = swiftide_ssh_runner::Guard {
            cpu_seconds: limits
                .cpu_time
                .map(|time| time.as_secs() + u64::from(time.subsec_nanos() > 0)),
            memory_bytes: limits.memory,
            processes: limits.processes,
            file_size_bytes: limits.file_size,
            open_files: limits.open_files,
            ..Default::default()
        };
        if let Some(confinement) = self.confinement.as_ref().filter(|c| c.writes) {
            guard.confine_writes = true;
            let bytes = |path: &std::path::Path| path.as_os_str().as_encoded_bytes().to_vec();
            if confinement.workdir_writable {
                guard
                    .writable
                    .push(dir.map_or_else(|| b".".to_vec(), bytes));
            }
            guard
                .writable
                .extend(confinement.writable.iter().map(|path| bytes(path)));
            guard.private_tmp = confinement.private_tmp;
        }
        if let Some(confinement) = &self.confinement {
            match &confinement.network {
                Network::None => guard.confine_network = true,
                Network::Ports(ports) => {
                    guard.confine_network = true;
                    guard.ports.clone_from(ports);
                }
                Network::Unconfined => {}
            }
        }
        guard
    }
}
