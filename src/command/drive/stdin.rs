//! A command's stdin on its own channel: the payload, then the caller's input once the
//! command runs (see [`Process`](crate::Process)), and the caller's control requests.

use std::sync::Arc;

use tokio::{
    io::AsyncWriteExt,
    sync::{mpsc, oneshot},
};

/// What the caller sends a running command (see [`Process`](crate::Process)): bytes for its
/// stdin, in order, then maybe the end of it.
#[derive(Debug)]
pub(crate) enum StdinItem {
    Data(bytes::Bytes),
    Eof,
}

/// Requests about a running command's channel that are not stdin.
#[derive(Debug)]
pub(crate) enum Control {
    /// The terminal's new size (`window-change`).
    Resize { cols: u32, rows: u32 },
}

/// The caller's side of a command's input: stdin bytes (forwarded in order once the command
/// runs, after its payload) and control requests.
#[derive(Debug)]
pub(crate) struct Input {
    pub(crate) stdin: Arc<tokio::sync::Mutex<mpsc::Receiver<StdinItem>>>,
    pub(crate) control: mpsc::UnboundedReceiver<Control>,
}

/// The caller's next control request; never, when there is no caller input.
pub(super) async fn next_control(input: &mut Option<Input>) -> Option<Control> {
    match input {
        Some(input) => input.control.recv().await,
        None => std::future::pending().await,
    }
}

/// The caller's stdin, forwarded after the payload once `go` says the command runs.
pub(super) struct Forward {
    pub(super) stdin: Arc<tokio::sync::Mutex<mpsc::Receiver<StdinItem>>>,
    pub(super) go: oneshot::Receiver<()>,
}

/// Starts what goes on the command's stdin: with `keep_open` (a controlled request, whose
/// stdin then is the supervisor's control line, or a terminal) its payload line, by a
/// [`PayloadWriter`] that keeps stdin open and forwards the caller's input after it;
/// otherwise all of it, then EOF.
pub(super) async fn start_stdin(
    channel: &russh::Channel<russh::client::Msg>,
    stdin: &bytes::Bytes,
    keep_open: bool,
    forward: Option<Forward>,
) -> Option<PayloadWriter> {
    if keep_open {
        return Some(PayloadWriter::start(channel, stdin, forward));
    }
    if stdin.is_empty() {
        let _ = channel.eof().await;
    } else {
        // Written concurrently with the read loop: an interpreter that exits without reading
        // its whole body must not stall us (nor fail the command, as LocalExecutor does).
        let mut writer = channel.make_writer();
        let body = stdin.clone();
        tokio::spawn(async move {
            let _ = writer.write_all(&body).await;
            let _ = writer.shutdown().await;
        });
    }
    None
}

/// Writes a command's payload line on its channel in the background.
pub(super) struct PayloadWriter {
    task: tokio::task::JoinHandle<()>,
    written: Arc<std::sync::atomic::AtomicBool>,
}

impl PayloadWriter {
    fn start(
        channel: &russh::Channel<russh::client::Msg>,
        payload: &bytes::Bytes,
        forward: Option<Forward>,
    ) -> Self {
        let mut writer = channel.make_writer();
        let payload = payload.clone();
        let written = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = written.clone();
        let task = tokio::spawn(async move {
            if writer.write_all(&payload).await.is_ok() && writer.flush().await.is_ok() {
                done.store(true, std::sync::atomic::Ordering::Release);
                tracing::trace!("payload sent");
            } else {
                return;
            }
            // The caller's input, in order, once the command runs (its receiver is shared
            // with later attempts, which only happen before that).
            let Some(forward) = forward else { return };
            if forward.go.await.is_err() {
                return;
            }
            let mut stdin = forward.stdin.lock().await;
            while let Some(item) = stdin.recv().await {
                match item {
                    StdinItem::Data(bytes) => {
                        if writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err()
                        {
                            return;
                        }
                    }
                    StdinItem::Eof => break,
                }
            }
            // Closed by the caller, or its handle is gone: EOF.
            let _ = writer.shutdown().await;
        });
        PayloadWriter { task, written }
    }

    /// The whole line has been handed to the connection.
    pub(super) fn is_written(&self) -> bool {
        self.written.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn abort(&self) {
        self.task.abort();
    }
}
