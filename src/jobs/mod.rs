//! Jobs: commands that outlive a call, a connection and the client itself.
//!
//! [`SshExecutor::spawn_job`] starts a command detached on the host, in a session (and process
//! group) of its own, with its output spooled to files in a private job directory
//! ([`script`] lists them). Any client, on any connection, later finds it by id
//! ([`SshExecutor::job`]), reads its output by a cursor it owns ([`Job::read`],
//! [`Job::follow`]), asks its state ([`Job::status`]), waits for it, kills its whole group and
//! removes it. Nothing is installed on the host: a POSIX `sh`, `setsid`, `head`,
//! `wc` and `/proc`.
//!
//! Starting is one exec of the crate's own start script. Status and output are read over the
//! connection's SFTP channel (reads at an offset; no exec, no process on the host), or with
//! small scripts on servers without SFTP. Killing and removing are one exec each.

mod poll;
mod script;
mod spec;
mod state;
pub(crate) mod tools;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use futures::{
    StreamExt,
    stream::{self, BoxStream},
};

use script::StartForm;
use spec::{DEFAULT_KILL_GRACE, Spec, random_id, validate_id};
pub use spec::{DEFAULT_SPOOL_CAP, JobOptions};
use state::{DropRecord, ExitRecord, HostTime, PidRecord, boot_time, proc_start_time, trimmed};

use crate::{
    audit,
    command::{
        ExitStatus, OutputChunk,
        resident::{JobMirror, RunnerJob, RunnerJobStart, start_job},
    },
    config::EnvPlan,
    error::{Error, Result, SftpStatus},
    executor::SshExecutor,
    files::{Collected, run_collect, sftp_path},
};

/// How many times a start whose connection broke is asked again (the id makes it safe).
const START_ATTEMPTS: u32 = 3;

/// How often, at most, an executor prunes the jobs past their retention (an exec that reads
/// every job's `exit` record).
const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// The largest record file read (`pid`, `exit`, `.drop`, `/proc/PID/stat`).
const RECORD_MAX: u64 = 4096;

/// The host's boot id, which the runner records next to the pid.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Where the host keeps its boot time (`btime`), which turns the records' times since boot
/// into times; its `intr` line grows with the interrupts, hence the large limit.
const PROC_STAT: &str = "/proc/stat";
const PROC_STAT_MAX: u64 = 1 << 20;

/// One of a job's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStream {
    /// The command's stdout.
    Stdout,
    /// The command's stderr.
    Stderr,
}

impl JobStream {
    /// `stdout` or `stderr`, the spool file's name.
    pub fn name(self) -> &'static str {
        match self {
            JobStream::Stdout => "stdout",
            JobStream::Stderr => "stderr",
        }
    }
}

/// A job's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobStatus {
    /// The job directory exists but its runner has not recorded the start yet (another
    /// client is starting it right now).
    Starting,
    /// The job's process runs (or its output streams are still open).
    Running {
        /// The job's process id, which is also its process group and session id.
        pid: u32,
        /// When it started, by the host's clock.
        started_at: SystemTime,
    },
    /// The job ended, with this status (code or signal, as for a command).
    Exited(ExitStatus),
    /// The job's processes are gone without a recorded status: the host rebooted (its boot
    /// id changed), or the runner was killed (by the OOM killer, say).
    Lost,
}

impl JobStatus {
    /// Whether the job has ended ([`Exited`](Self::Exited) or [`Lost`](Self::Lost)).
    pub fn is_finished(&self) -> bool {
        matches!(self, JobStatus::Exited(_) | JobStatus::Lost)
    }
}

/// Why output of a stream was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobDropReason {
    /// The stream reached its spool cap ([`JobOptions::spool_cap`]).
    SpoolCap {
        /// The cap in bytes.
        cap: u64,
    },
    /// Writing the spool file failed; `message` is the host's (`No space left on device`).
    WriteFailed {
        /// The error as the host reported it.
        message: String,
    },
}

impl std::fmt::Display for JobDropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobDropReason::SpoolCap { cap } => write!(f, "spool cap of {cap} bytes reached"),
            JobDropReason::WriteFailed { message } => write!(f, "spool write failed: {message}"),
        }
    }
}

/// Output a stream dropped on the host, known once the stream has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobDrop {
    /// Bytes the job wrote beyond the spooled ones. After a write failure this is a lower
    /// bound: what the spooler had read but could not write is not counted.
    pub bytes: u64,
    /// Why.
    pub reason: JobDropReason,
}

/// One read of a stream ([`Job::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobOutput {
    /// The bytes from the offset, exactly as spooled (a UTF-8 sequence may be cut at either
    /// end; the next read at `next_offset` continues it).
    pub bytes: Bytes,
    /// The offset after `bytes`: where the next read continues.
    pub next_offset: u64,
    /// The stream has ended and nothing follows `next_offset`.
    pub eof: bool,
    /// At the end of a stream: what it dropped beyond the spool (see [`JobDrop`]).
    pub dropped: Option<JobDrop>,
}

/// What [`Job::follow`] starts from: an offset per stream. Its text form (`Display`,
/// `FromStr`) is `stdout=N,stderr=M`, the cursor the agent tools hand out and take back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCursor {
    /// Offset into stdout.
    pub stdout: u64,
    /// Offset into stderr.
    pub stderr: u64,
}

/// What ended a job besides the command itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEndCause {
    /// [`Job::kill`].
    Killed,
    /// The job's own deadline ([`JobOptions::deadline`]).
    Deadline,
}

/// A job as listed by [`SshExecutor::jobs`] and [`Job::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's id.
    pub id: String,
    /// Its state.
    pub status: JobStatus,
    /// The command, exactly as given.
    pub command: String,
    /// Its directory, as resolved at the start (`None`: the login directory).
    pub current_dir: Option<PathBuf>,
    /// The labels it was started with.
    pub labels: BTreeMap<String, String>,
    /// The deadline it was started with.
    pub deadline: Option<Duration>,
    /// Its spool cap per stream.
    pub spool_cap: u64,
    /// When it started, by the host's clock (`None` until the runner recorded it).
    pub started_at: Option<SystemTime>,
    /// When it ended, by the host's clock.
    pub ended_at: Option<SystemTime>,
    /// A kill or the deadline, when one ended it.
    pub ended_by: Option<JobEndCause>,
    /// What stdout dropped, once it ended.
    pub stdout_dropped: Option<JobDrop>,
    /// What stderr dropped, once it ended.
    pub stderr_dropped: Option<JobDrop>,
}

/// A handle to a job on the host. Cheap to clone; holds no connection of its own (each call
/// uses the executor's pool), so dropping it leaves the job running.
///
/// Polls keep a few read handles open on the connection's SFTP channel (the spool file and
/// `.drop` record of each stream read, the runner's `/proc/PID/stat`), so that an idle poll
/// is one round trip. They belong to the channel, not to this handle: dropping the `Job`
/// closes nothing; at most 32 stay open per channel (least recently used go first), and
/// they close with the channel. [`remove`](Self::remove) closes the job's own.
#[derive(Debug, Clone)]
pub struct Job {
    executor: SshExecutor,
    id: String,
    dir: PathBuf,
    /// The `pid` record once read, shared by clones: its runner's `/proc` entry is what a
    /// quick status polls.
    known: Arc<Mutex<Option<PidRecord>>>,
    /// The output as the runner's supervisor spooled it, for a job this handle started
    /// through a resident runner (see `command::resident::job`); shared by clones.
    mirror: Option<Arc<JobMirror>>,
}

impl SshExecutor {
    /// Which account's jobs this handle sees: `None` for the login's, else the escalation's
    /// identity (the target's state directory).
    fn jobs_account(&self) -> Option<String> {
        self.escalation().map(crate::config::Become::identity)
    }

    /// The host's directory of jobs for this handle's account, if already learned.
    fn known_jobs_dir(&self) -> Option<PathBuf> {
        let dirs = self.inner.jobs_dirs.lock().ok()?;
        dirs.get(&self.jobs_account()).cloned()
    }

    /// Remembers the directory of jobs a start or a lookup reported.
    fn remember_jobs_dir(&self, dir: &Path) {
        if let Ok(mut dirs) = self.inner.jobs_dirs.lock() {
            dirs.entry(self.jobs_account())
                .or_insert_with(|| dir.to_path_buf());
        }
    }

    /// The host's directory of jobs (asked once per executor and account).
    async fn jobs_dir(&self) -> Result<PathBuf> {
        if let Some(dir) = self.known_jobs_dir() {
            return Ok(dir);
        }
        let (status, out) = run_collect(self, &script::base(), Vec::new()).await?;
        let text = trimmed(&out.stdout);
        if !status.success() || !text.starts_with('/') {
            return Err(Error::JobFailed {
                host: self.inner.config.host.clone(),
                operation: "find",
                id: String::new(),
                reason: last_line(&out.stderr),
            });
        }
        let dir = PathBuf::from(text);
        self.remember_jobs_dir(&dir);
        Ok(dir)
    }

    /// Makes the job directory over SFTP, beside its start script, when the base directory
    /// is known (after this executor's first start) and a connection has an SFTP channel open
    /// (none is opened for this): an SFTP `mkdir` costs sshd no process, where the script's
    /// `mkdir` is an exec. Behind it, the spool files' read handles are opened (see the
    /// comment below). Best effort: the script makes the directory and its files itself if
    /// they are not there yet, and the script's claim (see `script::start`), not this
    /// `mkdir`, decides whether the job is new.
    async fn premake_job_dir(&self, id: &str) {
        let (Some(base), Some(channel)) = (self.known_jobs_dir(), self.open_sftp_channel()) else {
            return;
        };
        let dir = base.join(id);
        let Ok(path) = sftp_path(&dir) else {
            return;
        };
        // Counts as running, so that retiring the connection does not close it meanwhile.
        let _running = channel.running();
        let host = &self.inner.config.host;
        // The read handles of the spool files and their `.drop` records, opened (the files
        // created, empty) right behind the `mkdir` on the same channel, so the server takes
        // them after it: the start's redirections truncate these same files (`>`, the same
        // inode), so the handles read what the job writes, and the job's first read needs no
        // open of its own (a round trip saved on a slow link). In an existing job's directory
        // (a retry, an id taken) they only open its files.
        let keep = |name: &str| {
            let channel = &channel;
            let path = sftp_path(&dir.join(name)).map(str::to_owned);
            async move {
                let Ok(path) = path else { return };
                if let Err(error) = channel.kept_handle_creating(&path).await {
                    tracing::trace!(%host, %id, %error, "no spool handle kept ahead of the start");
                }
            }
        };
        let (made, ..) = tokio::join!(
            channel.mkdir(path, Some(0o700)),
            keep("stdout"),
            keep("stdout.drop"),
            keep("stderr"),
            keep("stderr.drop"),
        );
        if let Err(error) = made {
            tracing::trace!(%host, %id, %error, "no job directory made over SFTP; the start makes it");
        }
    }

    /// Starts a job through the connection's resident runner (see
    /// `command::resident::job`; escalated, the runner started through the escalation) for
    /// a job without stdin whose command takes the direct form (the caller checks), on a
    /// host whose runner is Python.
    /// `None`: nothing was started there, and the shell start decides (also where the id
    /// exists already).
    async fn start_on_runner(&self, spec: &Spec, launch: &script::Launch) -> Option<Job> {
        let text = launch.direct()?;
        let encoded = spec.encode();
        let params = script::params(spec, launch);
        let request = RunnerJob {
            id: &spec.id,
            spec: encoded.as_bytes(),
            params: &params,
            text,
            spool_cap: spec.spool_cap,
            deadline: spec.deadline,
            kill_grace: spec.kill_grace,
        };
        let host = &self.inner.config.host;
        match start_job(&self.inner, &request, self.exchange().as_ref()).await {
            RunnerJobStart::Started { base, mirror } if base.starts_with(b"/") => {
                let base = PathBuf::from(
                    <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(base),
                );
                self.remember_jobs_dir(&base);
                self.prune_in_background();
                let mut job = Job::new(self, base.join(&spec.id), spec.id.clone());
                job.mirror = Some(mirror);
                Some(job)
            }
            RunnerJobStart::Started { .. } => None,
            RunnerJobStart::Fallback(why) => {
                tracing::trace!(%host, id = %spec.id, %why, "job not started by a runner");
                None
            }
        }
    }

    /// Runs a start script in a task of its own, so that a dropped
    /// [`spawn_job`](Self::spawn_job) neither kills the start's process group (where the
    /// runner, a fork of the start script, lives) nor leaves the start half done.
    async fn run_start(&self, id: &str, script: Vec<u8>) -> Result<(ExitStatus, Collected)> {
        let executor = self.clone();
        tokio::spawn(async move { run_collect(&executor, &script, Vec::new()).await })
            .await
            .map_err(|error| Error::JobStart {
                host: self.inner.config.host.clone(),
                id: id.to_owned(),
                reason: format!("the start's task ended: {error}"),
            })?
    }

    /// Starts `command` as a job: detached from the call, the channel and the connection, in
    /// a session and process group of its own, run as a command is (`sh -c`, or a `#!`
    /// script; the executor's environment settings, then the job's), with stdin at EOF and
    /// its output spooled on the host. Returns once the job is known to run.
    ///
    /// The id ([`JobOptions::id`]) is the idempotency key: if the id exists with the same
    /// command and options, that job's handle is returned and nothing starts twice. So when
    /// the connection breaks around the start, the start is asked again (up to 3 times)
    /// and the answer is definite.
    ///
    /// # Errors
    /// [`Error::InvalidJobId`]; [`Error::InvalidInput`] for a NUL byte or a bad environment
    /// name; [`Error::JobExists`] when the id exists with another command or options;
    /// [`Error::JobStart`] when the host cannot start it (no `setsid`, a full disk, ...);
    /// connection errors as for commands.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop a start that was sent: its script runs to its end on
    /// the host (in a task of its own, whose group is not killed), as does the Python
    /// runner's supervisor (detached from the start), so the job is then either started or
    /// not, never half started. Ask again with the same id (`spawn_job` returns
    /// the existing job) or look it up with [`job`](Self::job).
    pub async fn spawn_job(&self, command: &str, options: JobOptions) -> Result<Job> {
        let mut audit = self.audit("job_start")?;
        audit.note(|record| {
            record.command = Some(command.to_owned());
            record.dir = self
                .resolve_dir(options.current_dir.as_deref())
                .map(|dir| audit::path_text(&dir));
            record.job.clone_from(&options.id);
        });
        let result = self.spawn_job_unaudited(command, options).await;
        if let Ok(job) = &result {
            audit.note(|record| record.job = Some(job.id.clone()));
        }
        audit.end_with(&result);
        result
    }

    /// [`spawn_job`](Self::spawn_job) without its audit record.
    async fn spawn_job_unaudited(&self, command: &str, options: JobOptions) -> Result<Job> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let config = &self.inner.config;
        // Jobs start through a supervisor that applies no guard yet: refused rather than
        // run weaker than the builder asked (guide, "Guarded commands").
        if !config.guard.is_empty() {
            if !config.unguarded_where_unenforceable {
                return Err(Error::GuardUnavailable {
                    host: config.host.clone(),
                    port: config.port,
                    reason: "jobs do not take limits or confinement yet".to_owned(),
                });
            }
            tracing::warn!(host = %config.host,
                "starting a job WITHOUT the executor's limits and confinement, as the builder allows");
        }
        let id = options.id.clone().unwrap_or_else(random_id);
        validate_id(&id)?;
        let dir = self.resolve_dir(options.current_dir.as_deref());
        let spec = Spec {
            id: id.clone(),
            command: command.to_owned(),
            current_dir: dir.clone(),
            env: options.env,
            env_remove: options.env_remove,
            deadline: options.deadline,
            kill_grace: options.kill_grace.unwrap_or(DEFAULT_KILL_GRACE),
            spool_cap: options.spool_cap.unwrap_or(DEFAULT_SPOOL_CAP),
            labels: options.labels,
            stdin: options.stdin,
        };
        let env = job_env(&config.env, &spec);
        let launch = script::launch(&spec, dir.as_deref(), &env, config)?;
        // Through the connection's runner where it can: no shell start at all.
        let on_runner = launch.direct().is_some() && !spec.stdin;
        if on_runner {
            let (_, started) = tokio::join!(
                Box::pin(self.premake_job_dir(&id)),
                Box::pin(self.start_on_runner(&spec, &launch))
            );
            if let Some(job) = started {
                return Ok(job);
            }
        }
        // The short form first; the full one when the host has no copy of the library.
        let mut form = StartForm::Short;
        let mut attempt = 1;
        // The directory was made beside the runner's start, if it could be.
        let premade = on_runner;
        let (status, out) = loop {
            let start = script::start(&spec, &launch, form);
            let started = if attempt == 1 && form == StartForm::Short && !premade {
                // Boxed: its five SFTP requests make a large future, too large for the
                // stack of a caller that awaits `spawn_job` in place (debug builds).
                tokio::join!(
                    Box::pin(self.premake_job_dir(&id)),
                    self.run_start(&id, start)
                )
                .1
            } else {
                self.run_start(&id, start).await
            };
            match started {
                Err(
                    error @ (Error::ConnectionLost { .. }
                    | Error::RunnerLost { .. }
                    | Error::Ssh { .. }),
                ) if attempt < START_ATTEMPTS => {
                    tracing::debug!(host = %config.host, %id, %error, "job start broke; asking again");
                    attempt += 1;
                }
                Ok((status, out))
                    if form == StartForm::Short
                        && status.success()
                        && out.stdout.ends_with(b"\nnolib\n") =>
                {
                    tracing::debug!(host = %config.host, %id, "the host has no copy of the job library; sending it");
                    form = StartForm::Full;
                }
                other => break other?,
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let base = lines.next().unwrap_or("");
        let outcome = lines.next().unwrap_or("");
        if !status.success() || !base.starts_with('/') {
            return Err(Error::JobStart {
                host: config.host.clone(),
                id,
                reason: last_line(&out.stderr),
            });
        }
        let base = PathBuf::from(base);
        self.remember_jobs_dir(&base);
        match outcome {
            "ok" => {
                self.prune_in_background();
                Ok(Job::new(self, base.join(&id), id))
            }
            "differs" => Err(Error::JobExists {
                host: config.host.clone(),
                id,
            }),
            other => Err(Error::JobStart {
                host: config.host.clone(),
                id,
                reason: format!("unexpected answer {other:?}"),
            }),
        }
    }

    /// The job with this id, from any client and connection (after a restart of the client,
    /// of sshd or of the network).
    ///
    /// # Errors
    /// [`Error::InvalidJobId`], [`Error::JobNotFound`], connection errors.
    ///
    /// # Cancel safety
    /// Only reads; dropping the future leaves nothing behind.
    pub async fn job(&self, id: &str) -> Result<Job> {
        validate_id(id)?;
        let job = Job::new(self, self.jobs_dir().await?.join(id), id.to_owned());
        job.spec().await?;
        Ok(job)
    }

    /// Every job on the host (for this account), with its state, ordered by id.
    ///
    /// # Errors
    /// Connection errors.
    ///
    /// # Cancel safety
    /// Only reads; dropping the future leaves nothing behind.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>> {
        let base = self.jobs_dir().await?;
        let mut names = self.dir_names(&base).await?.unwrap_or_default();
        names.retain(|name| validate_id(name).is_ok());
        names.sort();
        // Each info is several reads in flight at once, and on a server without SFTP every
        // read is an exec channel and a process of its own: there one job at a time (a
        // Dropbear listing a hundred jobs four at a time lost its connection), elsewhere 4
        // jobs at a time keep a long listing from crowding the pool and a small server.
        let at_once = if self.job_reads_are_execs().await {
            1
        } else {
            4
        };
        let infos = stream::iter(names)
            .map(|id| {
                let job = Job::new(self, base.join(&id), id);
                async move { job.info().await }
            })
            .buffered(at_once)
            .collect::<Vec<_>>()
            .await;
        let mut out = Vec::with_capacity(infos.len());
        for info in infos {
            match info {
                Ok(info) => out.push(info),
                // Removed (or half-created, or pruned) while listing: its files went away
                // between two reads.
                Err(
                    Error::JobNotFound { .. }
                    | Error::Sftp {
                        status: Some(SftpStatus::NoSuchFile),
                        ..
                    },
                ) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(out)
    }

    /// The housekeeping of [`job_retention`](crate::SshExecutorBuilder::job_retention): prunes
    /// the jobs past it in a task of its own, at most once per [`PRUNE_INTERVAL`] (or per
    /// retention, if shorter) per executor. Best effort: a failure is only logged, and the
    /// next interval tries again. [`close`](Self::close) waits for it (a few seconds at most).
    fn prune_in_background(&self) {
        let Some(retention) = self.inner.config.job_retention else {
            return;
        };
        {
            let Ok(mut pruned) = self.inner.jobs_pruned_at.lock() else {
                return;
            };
            let last = pruned.entry(self.jobs_account());
            if let std::collections::hash_map::Entry::Occupied(at) = &last
                && at.get().elapsed() < retention.min(PRUNE_INTERVAL)
            {
                return;
            }
            last.insert_entry(std::time::Instant::now());
        }
        let executor = self.clone();
        let task = tokio::spawn(async move {
            let host = &executor.inner.config.host;
            match executor.prune_jobs(retention).await {
                Ok(removed) if !removed.is_empty() => {
                    tracing::debug!(%host, removed = removed.len(), "pruned jobs past their retention");
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%host, %error, "pruning jobs past their retention failed")
                }
            }
        });
        self.inner.hold_housekeeping(task);
    }

    /// Whether every read of a job's files is an exec here (the server has no SFTP), which
    /// sets how fast and how many at once the reads that poll jobs go.
    async fn job_reads_are_execs(&self) -> bool {
        matches!(self.sftp().await, Err(Error::SftpUnavailable { .. }))
    }

    /// Waits (a few seconds at most) for the pruning that the last
    /// [`spawn_job`](Self::spawn_job) started in the background, if it is still in flight:
    /// a fleet's short-lived program would exit, and drop it, before it ran.
    pub(crate) async fn finish_housekeeping(&self) {
        self.inner.finish_housekeeping().await;
    }

    /// Removes the jobs that ended at least `older_than` ago (by the host's clock, so the
    /// client's clock does not matter) and returns their ids. Running and lost jobs stay.
    ///
    /// # Errors
    /// Connection errors.
    ///
    /// # Cancel safety
    /// Dropping the future may leave some of those jobs removed and others not.
    pub async fn prune_jobs(&self, older_than: Duration) -> Result<Vec<String>> {
        let base = self.jobs_dir().await?;
        let (status, out) =
            run_collect(self, &script::prune(&base, older_than), Vec::new()).await?;
        if !status.success() {
            return Err(Error::JobFailed {
                host: self.inner.config.host.clone(),
                operation: "prune",
                id: String::new(),
                reason: last_line(&out.stderr),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect())
    }
}

/// The job's environment plan: the executor's, then the job's removals (which also undo the
/// executor's settings of those names) and settings.
fn job_env(base: &EnvPlan, spec: &Spec) -> EnvPlan {
    let mut plan = base.clone();
    plan.set.retain(|(name, _)| !spec.env_remove.contains(name));
    plan.remove.extend(spec.env_remove.iter().cloned());
    plan.set.extend(spec.env.iter().cloned());
    plan
}

/// The last non-blank line of a script's stderr.
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_owned()
}

impl Job {
    fn new(executor: &SshExecutor, dir: PathBuf, id: String) -> Self {
        Job {
            executor: executor.clone(),
            id,
            dir,
            known: Arc::new(Mutex::new(None)),
            mirror: None,
        }
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The job's directory on the host.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn not_found(&self) -> Error {
        Error::JobNotFound {
            host: self.executor.inner.config.host.clone(),
            id: self.id.clone(),
        }
    }

    fn failed(&self, operation: &'static str, stderr: &[u8]) -> Error {
        Error::JobFailed {
            host: self.executor.inner.config.host.clone(),
            operation,
            id: self.id.clone(),
            reason: last_line(stderr),
        }
    }

    /// A small file of the job directory, `None` when missing.
    async fn record(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.executor
            .read_range(&self.dir.join(name), 0, RECORD_MAX)
            .await
    }

    async fn spec(&self) -> Result<Spec> {
        let bytes = self
            .executor
            .read_range(&self.dir.join("spec"), 0, 1 << 24)
            .await?
            .ok_or_else(|| self.not_found())?;
        Spec::decode(&bytes).ok_or_else(|| self.not_found())
    }

    async fn exit_record(&self) -> Result<Option<ExitRecord>> {
        Ok(self
            .record("exit")
            .await?
            .as_deref()
            .and_then(ExitRecord::parse))
    }

    /// `time` of a record of the boot `boot_id`, as a time: times since boot need the boot
    /// time, read from `/proc/stat` once per boot and executor. `None` when the record is
    /// of another boot than the host's now, or the host keeps no boot time.
    async fn host_time(&self, time: HostTime, boot_id: &str) -> Result<Option<SystemTime>> {
        if !matches!(time, HostTime::SinceBoot(_)) {
            return Ok(time.at(None));
        }
        let cached = |boot: &Option<(String, SystemTime)>| {
            boot.as_ref()
                .filter(|(id, _)| id == boot_id)
                .map(|(_, at)| *at)
        };
        let boot = &self.executor.inner.host_boot;
        if let Some(at) = cached(&boot.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(time.at(Some(at)));
        }
        let (id, stat) = tokio::join!(
            self.read_kept_record(BOOT_ID),
            self.executor
                .read_range(Path::new(PROC_STAT), 0, PROC_STAT_MAX)
        );
        let (Some(id), Some(at)) = (id?, stat?.as_deref().and_then(boot_time)) else {
            return Ok(None);
        };
        let id = trimmed(&id);
        let matches = id == boot_id;
        *boot.lock().unwrap_or_else(|p| p.into_inner()) = Some((id, at));
        Ok(time.at(matches.then_some(at)))
    }

    /// When the job of `pid` started, by the host's clock; the epoch when the host keeps no
    /// clock the runner could read (no `/proc/uptime` or `/proc/stat`).
    pub(super) async fn started_at(&self, pid: &PidRecord) -> Result<SystemTime> {
        Ok(self
            .host_time(pid.started_at, &pid.boot_id)
            .await?
            .unwrap_or(SystemTime::UNIX_EPOCH))
    }

    /// Whether process `pid` runs with start time `start_time`. A process that ends while
    /// its `stat` is read (the read fails) is gone.
    async fn alive(&self, pid: u32, start_time: &str) -> Result<bool> {
        let stat = self.read_kept_record(&format!("/proc/{pid}/stat")).await?;
        Ok(stat.as_deref().and_then(proc_start_time).as_deref() == Some(start_time))
    }

    /// The job's state: read from its records and `/proc` over SFTP, never assumed. A job
    /// whose processes are gone without an `exit` record, or whose boot id differs from the
    /// host's, is [`Lost`](JobStatus::Lost), never a stale "running".
    ///
    /// # Errors
    /// [`Error::JobNotFound`] once it was removed; connection errors.
    ///
    /// # Cancel safety
    /// Only reads; dropping the future leaves nothing behind.
    pub async fn status(&self) -> Result<JobStatus> {
        Ok(self.status_with_pid().await?.0)
    }

    async fn status_with_pid(&self) -> Result<(JobStatus, Option<PidRecord>)> {
        // A job whose start this handle has seen: one round trip on kept handles.
        if let Some(known) = self.known_start()
            && let Some(status) = self.quick_status(&known).await?
        {
            return Ok((status, Some(known)));
        }
        // The full check, by path. The three reads are in flight at once. A job that ends
        // between them is caught below: `exit` is read again before anything is called lost.
        let (exit, pid, boot) = tokio::join!(
            self.exit_record(),
            self.record("pid"),
            self.read_kept_record(BOOT_ID)
        );
        let pid = pid?.as_deref().and_then(PidRecord::parse);
        if let Some(pid) = &pid {
            self.remember_start(pid).await;
        }
        if let Some(exit) = exit? {
            return Ok((JobStatus::Exited(exit.status()), pid));
        }
        let Some(pid) = pid else {
            // No start recorded: starting now, or removed.
            return match self.record("spec").await? {
                Some(_) => Ok((JobStatus::Starting, None)),
                None => Err(self.not_found()),
            };
        };
        let boot = boot?.map(|bytes| trimmed(&bytes));
        let same_boot = match boot.as_deref() {
            Some(boot) => pid.boot_id == "-" || pid.boot_id == boot,
            None => true,
        };
        if same_boot
            && (self.alive(pid.runner_pid, &pid.runner_start_time).await?
                || self.alive(pid.pid, &pid.start_time).await?)
        {
            let status = JobStatus::Running {
                pid: pid.pid,
                started_at: self.started_at(&pid).await?,
            };
            return Ok((status, Some(pid)));
        }
        // The runner may have written `exit` just now.
        let status = match self.exit_record().await? {
            Some(exit) => JobStatus::Exited(exit.status()),
            None => JobStatus::Lost,
        };
        Ok((status, Some(pid)))
    }

    /// Everything about the job: its spec, state, times, end cause and drops.
    ///
    /// # Errors
    /// As [`status`](Self::status).
    ///
    /// # Cancel safety
    /// Only reads; dropping the future leaves nothing behind.
    pub async fn info(&self) -> Result<JobInfo> {
        let spec = self.spec().await?;
        let (status, pid) = self.status_with_pid().await?;
        // An exit record belongs to the boot of its start.
        let boot_id = pid.as_ref().map_or("-", |pid| pid.boot_id.as_str());
        let exit = match status {
            JobStatus::Exited(_) => self.exit_record().await?,
            _ => None,
        };
        let ended_at = match exit {
            Some(exit) => self.host_time(exit.ended_at, boot_id).await?,
            None => None,
        };
        let started_at = match &pid {
            Some(pid) => self.host_time(pid.started_at, &pid.boot_id).await?,
            None => None,
        };
        let ended_by = match self
            .record("reason")
            .await?
            .as_deref()
            .map(trimmed)
            .as_deref()
        {
            Some("killed") => Some(JobEndCause::Killed),
            Some("deadline") => Some(JobEndCause::Deadline),
            _ => None,
        };
        Ok(JobInfo {
            id: self.id.clone(),
            status,
            command: spec.command,
            current_dir: spec.current_dir,
            labels: spec.labels,
            deadline: spec.deadline,
            spool_cap: spec.spool_cap,
            started_at,
            ended_at,
            ended_by,
            stdout_dropped: self.dropped(JobStream::Stdout).await?.flatten(),
            stderr_dropped: self.dropped(JobStream::Stderr).await?.flatten(),
        })
    }

    /// `None` while the stream's spooler runs; then what it dropped, if anything.
    async fn dropped(&self, stream: JobStream) -> Result<Option<Option<JobDrop>>> {
        let record = self
            .record(&format!("{}.drop", stream.name()))
            .await?
            .as_deref()
            .and_then(DropRecord::parse);
        match record {
            Some(record) => Ok(Some(self.drop_of(stream, record).await?)),
            None => Ok(None),
        }
    }

    /// What a stream whose spooler wrote `record` dropped, if anything.
    async fn drop_of(&self, stream: JobStream, record: DropRecord) -> Result<Option<JobDrop>> {
        if record.head_status != 0 {
            let message = self
                .record(&format!("{}.err", stream.name()))
                .await?
                .map(|bytes| trimmed(&bytes))
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| format!("exit status {}", record.head_status));
            return Ok(Some(JobDrop {
                bytes: record.dropped,
                reason: JobDropReason::WriteFailed { message },
            }));
        }
        Ok((record.dropped > 0).then_some(JobDrop {
            bytes: record.dropped,
            reason: JobDropReason::SpoolCap { cap: record.cap },
        }))
    }

    /// Reads up to `max` bytes of `stream` from `offset`. Consumes nothing: the same read
    /// returns the same bytes, from any client. `eof` is set once the stream has ended and
    /// `next_offset` is its end.
    ///
    /// # Errors
    /// [`Error::JobNotFound`] once it was removed; connection errors.
    ///
    /// # Cancel safety
    /// Only reads; dropping the future leaves nothing behind.
    pub async fn read(&self, stream: JobStream, offset: u64, max: u64) -> Result<JobOutput> {
        // Output this handle's start mirrored: one `stat`, no transfer.
        if let Some(output) = self.mirror_read(stream, offset, max).await? {
            return Ok(output);
        }
        // Over SFTP: one round trip on kept handles.
        if let Some(output) = self.quick_read(stream, offset, max).await? {
            return Ok(output);
        }
        // By path (without SFTP, every read an exec). The end is known before the bytes are
        // read: once the spooler wrote `.drop`, the file no longer changes, so a short read
        // after it is the true end.
        let ended = self.dropped(stream).await?;
        let bytes = self
            .executor
            .read_range(&self.dir.join(stream.name()), offset, max)
            .await?
            .ok_or_else(|| self.not_found())?;
        Ok(Self::output(offset, max, bytes, ended))
    }

    /// Live output from `cursor` until both streams have ended, as [`OutputChunk`]s (stdout
    /// and stderr interleaved by poll, each in exact order). Polls the spool files, both
    /// streams at once (one round trip over SFTP), from every 50 ms while output flows to
    /// every second when idle. If a stream dropped output (spool cap, full disk), the last
    /// item is [`Error::JobOutputDropped`].
    ///
    /// # Cancel safety
    /// Dropping the stream stops following; the job and its output stay. The caller tracks
    /// the offsets (the chunks' lengths) to continue later.
    pub fn follow(&self, cursor: JobCursor) -> BoxStream<'static, Result<OutputChunk>> {
        struct Follow {
            job: Job,
            cursor: JobCursor,
            idle: Duration,
            pending: std::collections::VecDeque<Result<OutputChunk>>,
            drops: Vec<Result<OutputChunk>>,
            done: [bool; 2],
            finished: bool,
        }
        let state = Follow {
            job: self.clone(),
            cursor,
            idle: Duration::ZERO,
            pending: std::collections::VecDeque::new(),
            drops: Vec::new(),
            done: [false; 2],
            finished: false,
        };
        stream::unfold(state, |mut state| async move {
            loop {
                if let Some(item) = state.pending.pop_front() {
                    return Some((item, state));
                }
                if state.finished {
                    return None;
                }
                if !state.idle.is_zero() {
                    tokio::time::sleep(state.idle).await;
                }
                let mut got = false;
                // Both streams at once: one round trip a poll, not two.
                let read = |index: usize, stream: JobStream, offset: u64| {
                    let (job, done) = (&state.job, state.done[index]);
                    async move {
                        if done {
                            None
                        } else {
                            Some(job.read(stream, offset, 1 << 20).await)
                        }
                    }
                };
                let (stdout, stderr) = tokio::join!(
                    read(0, JobStream::Stdout, state.cursor.stdout),
                    read(1, JobStream::Stderr, state.cursor.stderr)
                );
                for (index, stream, read) in [
                    (0, JobStream::Stdout, stdout),
                    (1, JobStream::Stderr, stderr),
                ] {
                    let Some(read) = read else {
                        continue;
                    };
                    let offset = match stream {
                        JobStream::Stdout => &mut state.cursor.stdout,
                        JobStream::Stderr => &mut state.cursor.stderr,
                    };
                    let output = match read {
                        Ok(output) => output,
                        Err(error) => {
                            state.finished = true;
                            state.pending.push_back(Err(error));
                            break;
                        }
                    };
                    *offset = output.next_offset;
                    if !output.bytes.is_empty() {
                        got = true;
                        state.pending.push_back(Ok(match stream {
                            JobStream::Stdout => OutputChunk::Stdout(output.bytes),
                            JobStream::Stderr => OutputChunk::Stderr(output.bytes),
                        }));
                    }
                    if output.eof {
                        state.done[index] = true;
                        if let Some(dropped) = output.dropped {
                            state.drops.push(Err(Error::JobOutputDropped {
                                host: state.job.executor.inner.config.host.clone(),
                                id: state.job.id.clone(),
                                stream: stream.name(),
                                bytes: dropped.bytes,
                                reason: dropped.reason.to_string(),
                            }));
                        }
                    }
                }
                if state.done == [true, true] {
                    // The drop errors come last, after every spooled byte of both streams.
                    state.finished = true;
                    state.pending.extend(state.drops.drain(..));
                }
                state.idle = if got {
                    Duration::ZERO
                } else {
                    (state.idle * 2).clamp(Duration::from_millis(50), Duration::from_secs(1))
                };
            }
        })
        .boxed()
    }

    /// Waits up to `timeout` for the job to end and returns its status (still
    /// [`Running`](JobStatus::Running) when the time ran out). Polls from every 2 ms (20 ms on
    /// a server without SFTP) to every 500 ms, each pause twice the last.
    ///
    /// # Errors
    /// As [`status`](Self::status).
    ///
    /// # Cancel safety
    /// Only reads; dropping the future leaves nothing behind.
    pub async fn wait(&self, timeout: Duration) -> Result<JobStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Over SFTP a poll is one round trip and no process on the host, so the first ones
        // come soon and a short job is seen ending within milliseconds (a job's first second
        // is 10 polls, not 6). Without SFTP every poll is a few execs.
        let mut pause = if self.executor.job_reads_are_execs().await {
            Duration::from_millis(20)
        } else {
            Duration::from_millis(2)
        };
        loop {
            let status = self.status().await?;
            let now = tokio::time::Instant::now();
            if status.is_finished() || now >= deadline {
                return Ok(status);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Kills the job's whole process group: `SIGTERM`, up to `grace` for the group to go,
    /// then `SIGKILL`. Before signalling, the host checks that the recorded pid is still the
    /// job's (same boot id, same process start time): a reused pid is never signalled.
    /// Returns the status after the kill (waiting up to 5 s for the runner to record it).
    /// A job that already ended is left alone.
    ///
    /// A process that called `setsid` itself has left the job's group and is not killed.
    ///
    /// # Errors
    /// [`Error::JobPidReused`] (nothing was signalled), [`Error::JobNotFound`], connection
    /// errors.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the group signalled with `SIGTERM` only; kill again.
    pub async fn kill(&self, grace: Duration) -> Result<JobStatus> {
        let mut audit = self.executor.audit("job_kill")?;
        audit.note(|record| record.job = Some(self.id.clone()));
        let result = self.kill_unaudited(grace).await;
        audit.end_with(&result);
        result
    }

    /// [`kill`](Self::kill) without its audit record.
    async fn kill_unaudited(&self, grace: Duration) -> Result<JobStatus> {
        let (status, out) =
            run_collect(&self.executor, &script::kill(&self.dir, grace), Vec::new()).await?;
        let answer = trimmed(&out.stdout);
        if !status.success() {
            return Err(self.failed("kill", &out.stderr));
        }
        match answer.as_str() {
            "reused" => {
                let pid = self
                    .record("pid")
                    .await?
                    .as_deref()
                    .and_then(PidRecord::parse)
                    .map_or(0, |pid| pid.pid);
                Err(Error::JobPidReused {
                    host: self.executor.inner.config.host.clone(),
                    id: self.id.clone(),
                    pid,
                })
            }
            _ => self.wait(Duration::from_secs(5)).await,
        }
    }

    /// Writes `bytes` to the job's stdin (a job started with
    /// [`JobOptions::stdin`](crate::JobOptions::stdin)), from this or any other client
    /// process, and returns the write's number (0, 1, 2, ...: the order the job reads them
    /// in). One exec on the host; the job reads the bytes within about a second (its stdin
    /// is fed from records on the host, polled faster while writes keep coming).
    ///
    /// **Exactly once.** Each write is one record, stored whole or not at all (a write that
    /// the host got only part of is dropped), and has a random id of its own: when the
    /// connection breaks, the write is sent again (within the executor's `connect_timeout`)
    /// and a record that already landed is found by its id, so nothing is lost or
    /// duplicated. Only an error after that (the host stays away) leaves it unknown whether
    /// the write landed, as [`Error::ConnectionLost`] says for commands. Writes from several
    /// clients at once are each whole, in the order they were stored.
    ///
    /// # Errors
    /// [`Error::JobFailed`] when the job has no stdin or it was closed, connection errors.
    pub async fn write_stdin(&self, bytes: impl Into<bytes::Bytes>) -> Result<u64> {
        let bytes: bytes::Bytes = bytes.into();
        let id = rand::random::<u64>();
        let script = script::write_stdin(&self.dir, id, bytes.len());
        let give_up = tokio::time::Instant::now() + self.executor.inner.config.connect_timeout;
        loop {
            match run_collect(&self.executor, &script, bytes.to_vec()).await {
                Ok((status, out)) if status.success() => {
                    return trimmed(&out.stdout)
                        .parse()
                        .map_err(|_| self.failed("write stdin", &out.stderr));
                }
                Ok((_, out)) => return Err(self.failed("write stdin", &out.stderr)),
                // The same write again: a record that landed is found by its id.
                Err(Error::ConnectionLost { .. }) if tokio::time::Instant::now() < give_up => {
                    tracing::debug!(id = %self.id, "writing the job's stdin again after a lost connection");
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Closes the job's stdin: it reads EOF after every write stored so far. Writes after
    /// it fail; one racing it from another client may be stored and never read. Closing
    /// twice is fine.
    ///
    /// # Errors
    /// [`Error::JobFailed`] when the job has no stdin, connection errors.
    pub async fn close_stdin(&self) -> Result<()> {
        let (status, out) =
            run_collect(&self.executor, &script::close_stdin(&self.dir), Vec::new()).await?;
        if status.success() {
            Ok(())
        } else {
            Err(self.failed("close stdin", &out.stderr))
        }
    }

    /// Deletes the job's directory on the host (its spec, records and output).
    ///
    /// # Errors
    /// [`Error::JobRunning`] while it runs or starts (kill it first), [`Error::JobNotFound`],
    /// connection errors.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the directory removed or not.
    pub async fn remove(&self) -> Result<()> {
        if !self.status().await?.is_finished() {
            return Err(Error::JobRunning {
                host: self.executor.inner.config.host.clone(),
                id: self.id.clone(),
            });
        }
        let (status, out) =
            run_collect(&self.executor, &script::remove(&self.dir), Vec::new()).await?;
        if !status.success() {
            return Err(self.failed("remove", &out.stderr));
        }
        self.forget_handles().await;
        Ok(())
    }
}
