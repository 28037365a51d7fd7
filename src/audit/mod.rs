//! A tamper-evident audit trail: every operation an executor does on a host, written as one
//! hash-chained JSON line ([`AuditRecord`]) to a file or a callback ([`AuditTrail`]), and
//! [`verify`] to check a trail and name the first line that breaks its chain.
//!
//! ```no_run
//! # async fn demo() -> swiftide_ssh_executor::Result<()> {
//! use swiftide_ssh_executor::{audit::AuditTrail, SshExecutor};
//!
//! let trail = AuditTrail::to_file("/var/log/agent-audit.jsonl").await?;
//! let executor = SshExecutor::builder()
//!     .host("build-1.internal")
//!     .audit(trail.clone())
//!     .build()
//!     .await?;
//! executor.run("make test").await?;
//! let head = trail.flush().await?; // every record so far is written
//! println!("{} records, head {}", head.records, head.hash);
//! # Ok(()) }
//! ```
//!
//! Records are written when an operation ends, by one task per trail, in the order
//! operations end; a record's `time` is when its operation started. Writing never waits
//! on the operation's path: an operation queues its record and goes on. When the trail
//! cannot be written (a full disk, a closed file), every later operation of every executor
//! on that trail is refused with [`Error::Audit`](crate::Error::Audit): nothing runs
//! unrecorded.

mod chain;
mod record;
mod writer;

use std::{
    path::Path,
    sync::Arc,
    time::{Instant, SystemTime},
};

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
pub use chain::{AuditBroken, AuditHead, verify, verify_holding};
pub(crate) use record::OutputDigests;
pub use record::{AuditRecord, Digested, Exit};
use writer::{Message, Shared, Sink};

/// Where audit records go: a file or a callback, one hash chain (see the [module](self)).
///
/// Cloning is cheap; clones write to the same chain, so one trail can serve many executors
/// (a fleet's hosts). Give it to [`SshExecutorBuilder::audit`](crate::SshExecutorBuilder::audit).
#[derive(Clone)]
pub struct AuditTrail {
    sender: mpsc::UnboundedSender<Message>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AuditTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditTrail")
            .field("sink", &self.shared.sink)
            .field("failure", &self.shared.failure())
            .finish()
    }
}

impl AuditTrail {
    /// A trail appended to the JSON-lines file at `path`, created (mode 0600) when missing.
    /// An existing file is verified first and its chain continued.
    ///
    /// # Errors
    /// [`Error::Audit`] when the file cannot be read, opened or created, or its chain is
    /// broken ([`verify`]'s reason): a trail is never continued past a break. Must be called
    /// inside a tokio runtime.
    pub async fn to_file(path: impl AsRef<Path>) -> Result<AuditTrail> {
        let path = path.as_ref().to_path_buf();
        let (file, chain) = writer::open_file(&path).await?;
        AuditTrail::start(Sink::File { path, file }, chain)
    }

    /// A trail handed line by line to `callback` (each line a JSON [`AuditRecord`] without
    /// its newline, chained as in a file), from the trail's writer task: the callback must
    /// not block.
    ///
    /// # Errors
    /// [`Error::Audit`] outside a tokio runtime.
    pub fn to_callback(callback: impl Fn(&str) + Send + Sync + 'static) -> Result<AuditTrail> {
        AuditTrail::start(Sink::Callback(Box::new(callback)), chain::Chain::default())
    }

    fn start(sink: Sink, chain: chain::Chain) -> Result<AuditTrail> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::Audit {
            reason: "an audit trail must be made inside a tokio runtime".to_owned(),
        })?;
        let shared = Arc::new(Shared::new(sink.describe()));
        let (sender, receiver) = mpsc::unbounded_channel();
        runtime.spawn(writer::write_records(receiver, sink, chain, shared.clone()));
        Ok(AuditTrail { sender, shared })
    }

    /// Waits until every record queued before this call is written (and a file's data
    /// synced to disk), and returns the trail's head.
    ///
    /// # Errors
    /// [`Error::Audit`] when the trail could not be written.
    pub async fn flush(&self) -> Result<AuditHead> {
        let (answer, head) = oneshot::channel();
        self.sender
            .send(Message::Flush(answer))
            .map_err(|_| self.failed())?;
        head.await.map_err(|_| self.failed())?
    }

    /// The error that refuses operations once the trail failed.
    fn failed(&self) -> Error {
        Error::Audit {
            reason: self
                .shared
                .failure()
                .unwrap_or_else(|| "the trail's writer stopped".to_owned()),
        }
    }

    /// Starts the record of an operation: `template` holds what is known before it runs.
    ///
    /// # Errors
    /// [`Error::Audit`] when the trail has failed: the operation must not run.
    pub(crate) fn begin(&self, template: AuditRecord) -> Result<Entry> {
        if self.shared.failure().is_some() || self.sender.is_closed() {
            return Err(self.failed());
        }
        Ok(Entry {
            pending: Some(Box::new(Pending {
                trail: self.clone(),
                record: template,
                started: Instant::now(),
            })),
        })
    }
}

/// A template for [`AuditTrail::begin`]: `op` by `login` as `user` on `host:port`, now.
pub(crate) fn template(host: &str, port: u16, login: &str, op: &str) -> AuditRecord {
    let time = chrono::DateTime::<chrono::Utc>::from(SystemTime::now())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    AuditRecord {
        seq: 0,
        time,
        host: host.to_owned(),
        port,
        login: login.to_owned(),
        user: login.to_owned(),
        r#become: None,
        op: op.to_owned(),
        dir: None,
        command: None,
        path: None,
        to: None,
        job: None,
        checkpoint: None,
        guard: None,
        exit: Exit::Cancelled,
        duration_ms: 0,
        stdout: None,
        stderr: None,
        content: None,
        prev: String::new(),
    }
}

/// A path as a record holds it.
pub(crate) fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// An operation being recorded: ended with [`end`](Self::end); dropped before that, it is
/// recorded as [`Exit::Cancelled`]. Records nothing where the executor has no trail.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    /// Boxed: an entry rides in every command's future and `Process`, mostly off.
    pending: Option<Box<Pending>>,
}

#[derive(Debug)]
struct Pending {
    trail: AuditTrail,
    record: AuditRecord,
    started: Instant,
}

impl Entry {
    /// An entry that records nothing (no trail).
    pub(crate) fn off() -> Entry {
        Entry::default()
    }

    /// Whether a record will be written (so that digests are computed only then).
    pub(crate) fn is_on(&self) -> bool {
        self.pending.is_some()
    }

    /// Fills in what became known along the way.
    pub(crate) fn note(&mut self, fill: impl FnOnce(&mut AuditRecord)) {
        if let Some(pending) = &mut self.pending {
            fill(&mut pending.record);
        }
    }

    /// Ends the operation with `exit` and queues its record.
    pub(crate) fn end(mut self, exit: Exit) {
        self.queue(exit);
    }

    /// Ends the operation with `result`'s outcome: [`Exit::Ok`] or its error.
    pub(crate) fn end_with<T>(self, result: &Result<T>) {
        self.end(match result {
            Ok(_) => Exit::Ok,
            Err(error) => Exit::Error(error.with_causes()),
        });
    }

    fn queue(&mut self, exit: Exit) {
        if let Some(mut pending) = self.pending.take() {
            pending.record.exit = exit;
            pending.record.duration_ms =
                u64::try_from(pending.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            // A closed writer has recorded its failure; the next operation is refused.
            let _ = pending
                .trail
                .sender
                .send(Message::Record(Box::new(pending.record)));
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.queue(Exit::Cancelled);
    }
}
