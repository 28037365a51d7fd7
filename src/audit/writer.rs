//! The task that owns a trail's sink: it numbers and chains the records in the order they
//! arrive, and writes them in batches (one write and one sync per batch, not per record).

use std::{
    path::{Path, PathBuf},
    sync::Mutex,
};

use tokio::{io::AsyncWriteExt, sync::mpsc};

use super::{
    AuditHead, AuditRecord,
    chain::{Chain, GENESIS, line_hash},
};
use crate::error::{Error, Result};

/// Most records written in one batch.
const BATCH: usize = 256;

pub(super) enum Message {
    Record(Box<AuditRecord>),
    Flush(tokio::sync::oneshot::Sender<Result<AuditHead>>),
}

/// Where lines go.
pub(super) enum Sink {
    File {
        path: PathBuf,
        file: tokio::fs::File,
    },
    Callback(Box<dyn Fn(&str) + Send + Sync>),
}

impl Sink {
    pub(super) fn describe(&self) -> String {
        match self {
            Sink::File { path, .. } => format!("file {}", path.display()),
            Sink::Callback(_) => "callback".to_owned(),
        }
    }
}

/// What the writer and the handles share: the sink's name, and why writing failed.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) sink: String,
    failure: Mutex<Option<String>>,
}

impl Shared {
    pub(super) fn new(sink: String) -> Shared {
        Shared {
            sink,
            failure: Mutex::new(None),
        }
    }

    pub(super) fn failure(&self) -> Option<String> {
        self.failure.lock().map_or_else(
            |poisoned| poisoned.into_inner().clone(),
            |guard| guard.clone(),
        )
    }

    fn fail(&self, reason: String) {
        let mut failure = self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        failure.get_or_insert(reason);
    }
}

/// Opens (or creates, mode 0600) the trail file at `path` for appending, after verifying
/// what it holds: the chain to continue.
pub(super) async fn open_file(path: &Path) -> Result<(tokio::fs::File, Chain)> {
    let unusable = |what: &str, error: std::io::Error| Error::Audit {
        reason: format!("cannot {what} {}: {error}", path.display()),
    };
    // A device or a FIFO would never end a read (or take the trail somewhere unchainable).
    match tokio::fs::metadata(path).await {
        Ok(metadata) if !metadata.is_file() => {
            return Err(Error::Audit {
                reason: format!("{} is not a regular file", path.display()),
            });
        }
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(unusable("read", error)),
    }
    let existing = match tokio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(unusable("read", error)),
    };
    // Hashing a large trail is CPU work: off the runtime's threads.
    let chain =
        tokio::task::spawn_blocking(move || super::chain::read(existing.as_slice(), |_| {}))
            .await
            .map_err(|error| Error::Audit {
                reason: format!("verifying {} stopped: {error}", path.display()),
            })?
            .map_err(|broken| Error::Audit {
                reason: format!("{} cannot be continued: {broken}", path.display()),
            })?;
    let mut options = tokio::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    options.mode(0o600);
    let file = options
        .open(path)
        .await
        .map_err(|error| unusable("open", error))?;
    Ok((file, chain))
}

/// Writes records as they come until every handle is gone.
pub(super) async fn write_records(
    mut receiver: mpsc::UnboundedReceiver<Message>,
    mut sink: Sink,
    chain: Chain,
    shared: std::sync::Arc<Shared>,
) {
    let mut seq = chain.last_seq();
    let mut prev = chain.head().hash;
    let mut batch = Vec::with_capacity(BATCH);
    while receiver.recv_many(&mut batch, BATCH).await > 0 {
        let mut lines = Vec::new();
        let mut flushes = Vec::new();
        for message in batch.drain(..) {
            match message {
                Message::Record(mut record) => {
                    if shared.failure().is_some() {
                        continue;
                    }
                    record.seq = seq + 1;
                    record.prev = std::mem::take(&mut prev);
                    match serde_json::to_vec(&record) {
                        Ok(line) => {
                            seq += 1;
                            prev = line_hash(&line);
                            lines.push(line);
                        }
                        Err(error) => {
                            prev = record.prev;
                            shared.fail(format!("a record could not be encoded: {error}"));
                        }
                    }
                }
                Message::Flush(answer) => flushes.push(answer),
            }
        }
        if let Err(reason) = write_lines(&mut sink, &lines, !flushes.is_empty()).await {
            shared.fail(reason);
        }
        for answer in flushes {
            let head = match shared.failure() {
                Some(reason) => Err(Error::Audit { reason }),
                None => Ok(AuditHead {
                    records: seq,
                    hash: if seq == 0 {
                        GENESIS.to_owned()
                    } else {
                        prev.clone()
                    },
                }),
            };
            let _ = answer.send(head);
        }
    }
}

/// Hands `lines` to the sink: one append for a file, synced when `sync`.
async fn write_lines(
    sink: &mut Sink,
    lines: &[Vec<u8>],
    sync: bool,
) -> std::result::Result<(), String> {
    match sink {
        Sink::Callback(callback) => {
            for line in lines {
                // serde_json writes UTF-8.
                callback(&String::from_utf8_lossy(line));
            }
            Ok(())
        }
        Sink::File { path, file } => {
            if !lines.is_empty() {
                let mut bytes = Vec::with_capacity(lines.iter().map(|line| line.len() + 1).sum());
                for line in lines {
                    bytes.extend_from_slice(line);
                    bytes.push(b'\n');
                }
                file.write_all(&bytes)
                    .await
                    .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
                file.flush()
                    .await
                    .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
            }
            if sync {
                file.sync_data()
                    .await
                    .map_err(|error| format!("cannot sync {}: {error}", path.display()))?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditTrail, template};

    /// A trail whose file cannot take writes (opened read-only) refuses every operation
    /// after the first record it could not write.
    #[tokio::test]
    async fn a_trail_that_cannot_be_written_refuses_what_comes_next() {
        let path = std::env::temp_dir().join(format!("audit-readonly-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let file = tokio::fs::File::open(&path).await.unwrap();
        let trail = AuditTrail::start(
            Sink::File {
                path: path.clone(),
                file,
            },
            Chain::default(),
        )
        .unwrap();
        let entry = trail.begin(template("h", 22, "u", "command")).unwrap();
        entry.end(crate::audit::Exit::Code(0));
        let flushed = trail.flush().await;
        assert!(matches!(flushed, Err(Error::Audit { .. })), "{flushed:?}");
        let refused = trail.begin(template("h", 22, "u", "command"));
        assert!(
            matches!(refused, Err(Error::Audit { ref reason }) if reason.contains("cannot write")),
            "{refused:?}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    /// Records are numbered and chained in the order they end, and a callback sees the
    /// same lines a file would hold.
    #[tokio::test]
    async fn a_callback_trail_chains_its_lines() {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = lines.clone();
        let trail = AuditTrail::to_callback(move |line| seen.lock().unwrap().push(line.to_owned()))
            .unwrap();
        for op in ["command", "read_file", "write_file"] {
            trail
                .begin(template("h", 22, "u", op))
                .unwrap()
                .end(crate::audit::Exit::Ok);
        }
        // Dropped without an end: recorded as cancelled.
        drop(trail.begin(template("h", 22, "u", "command")).unwrap());
        let head = trail.flush().await.unwrap();
        let lines = lines.lock().unwrap().clone();
        assert_eq!(head.records, 4);
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        assert_eq!(crate::audit::verify(text.as_bytes()).unwrap(), head);
        assert!(lines[3].contains(r#""exit":"cancelled""#), "{}", lines[3]);
    }
}
