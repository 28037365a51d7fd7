//! The caller's stdin for a command without a terminal.
//!
//! A command's channel keeps its stdin for the supervisor's control line (the kill, and EOF
//! meaning "the client is gone"), so the caller's bytes travel on a second channel: the
//! **feeder**, one of the executor's own scripts, makes a private directory (`mktemp -d`,
//! mode 700) holding a FIFO (mode 600), prints the directory's path, and copies the rest of
//! its stdin into the FIFO with `cat`. The command's payload then opens the FIFO as its
//! stdin and removes the directory. So the bytes are exact and unbounded (SSH's flow control
//! all the way), EOF is the feeder's EOF, and the kill and disconnect guarantees of the
//! command's own channel stay as they are.
//!
//! The feeder holds the FIFO open for reading and writing (`3<>`), so neither side's open
//! waits for the other. Once its copy ends (the caller closed stdin) it keeps its end open
//! until the command has opened the FIFO, so that input which came and went before the
//! command started is still read, then closes it: the command reads EOF. The command removes
//! the directory once it opened the FIFO; the feeder polls for that every 5 ms for the first
//! 200 ms, then every 100 ms (a small stdin usually ends before the command opens it, and a
//! first nap of 100 ms measured +108 ms on every such command). A command that never opens
//! its stdin (it failed before) leaves the directory to the feeder, which removes it after
//! 30 s. Needs `mktemp`, `mkfifo`, `cat` and `sleep` on the host (coreutils or BusyBox).

use std::sync::Arc;

use crate::{
    command::{
        drive::{ExecRequest, Heard, Input, Launched, launch},
        escalation::Exchange,
        output::OutputChunk,
    },
    config::limit,
    error::{Error, Result},
    pool::Pool,
};

/// The feeder's script (see the module docs).
const FEEDER_SCRIPT: &str = r#"d=$(mktemp -d 2>/dev/null) || d=$(mktemp -d -t swiftide-stdin.XXXXXX) || exit 1
mkfifo -m 600 "$d/in" || { rmdir -- "$d"; exit 1; }
exec 3<>"$d/in"
printf '%s\n' "$d"
cat >&3
n=0; while [ -e "$d" ] && [ "$n" -lt 330 ]; do if [ "$n" -lt 40 ]; then sleep 0.005; else sleep 0.1; fi; n=$((n+1)); done
exec 3>&-
rm -rf -- "$d"
"#;

/// Where a feeder's FIFO is on the host.
#[derive(Debug, Clone)]
pub(crate) struct FeederFifo {
    dir: Vec<u8>,
}

impl FeederFifo {
    /// A FIFO not made yet, for checking a command's request before the feeder starts.
    pub(crate) fn unmade() -> Self {
        FeederFifo {
            dir: b"/nonexistent".to_vec(),
        }
    }

    /// What the command's payload runs first: its stdin from the FIFO, the directory
    /// removed once open (the open FIFO stays usable).
    pub(crate) fn open_prefix(&self) -> Vec<u8> {
        let mut fifo = self.dir.clone();
        fifo.extend_from_slice(b"/in");
        let mut text = b"exec 0<".to_vec();
        text.extend_from_slice(&crate::command::quote_line(&fifo));
        text.extend_from_slice(b" || exit 1; rm -rf -- ");
        text.extend_from_slice(&crate::command::quote_line(&self.dir));
        text.extend_from_slice(b" 2>/dev/null; ");
        text
    }
}

/// A running feeder: its FIFO, and the channel that carries the caller's bytes to it.
pub(crate) struct Feeder {
    launched: Launched,
    fifo: FeederFifo,
    inner: Arc<Pool>,
}

impl std::fmt::Debug for Feeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeder")
            .field("fifo", &String::from_utf8_lossy(&self.fifo.dir))
            .finish_non_exhaustive()
    }
}

impl Feeder {
    /// Starts a feeder (escalated as `exchange` says: the FIFO must be the command's
    /// account's) fed from `input`, and waits for its FIFO.
    ///
    /// # Errors
    /// Connection failures, [`Error::BecomeFailed`], and [`Error::InvalidInput`] when the
    /// host cannot make a FIFO.
    pub(crate) async fn start(
        inner: &Arc<Pool>,
        exchange: Option<Exchange>,
        input: Input,
    ) -> Result<Self> {
        let config = &inner.config;
        let escalating = exchange
            .as_ref()
            .map_or(std::time::Duration::ZERO, |exchange| {
                exchange.settings.timeout
            });
        let request = ExecRequest::script(FEEDER_SCRIPT.as_bytes(), b"", exchange)?;
        let mut launched = launch(inner, request, Some(input));
        let mut out = Vec::new();
        let mut err = Vec::new();
        // Bounded: the feeder answers within a dial, a channel open and an escalation.
        let deadline = limit::deadline(
            tokio::time::Instant::now(),
            limit::sum(&[config.connect_timeout, config.connect_timeout, escalating]),
        );
        loop {
            match launched.next(config, deadline).await {
                Some(Heard::Output(OutputChunk::Stdout(bytes))) => {
                    out.extend_from_slice(&bytes);
                    if let Some(end) = out.iter().position(|&b| b == b'\n') {
                        let dir = out.get(..end).unwrap_or_default().to_vec();
                        if !dir.starts_with(b"/") {
                            break;
                        }
                        return Ok(Feeder {
                            launched,
                            fifo: FeederFifo { dir },
                            inner: inner.clone(),
                        });
                    }
                }
                Some(Heard::Output(OutputChunk::Stderr(bytes))) => err.extend_from_slice(&bytes),
                Some(Heard::Finished(result)) => {
                    result?;
                    break;
                }
                None => {
                    return Err(Error::Timeout {
                        host: config.host.clone(),
                        port: config.port,
                        phase: crate::error::Phase::Exec,
                        after: config.connect_timeout,
                    });
                }
            }
        }
        let said = String::from_utf8_lossy(&err);
        Err(Error::InvalidInput {
            reason: format!(
                "the host cannot make a FIFO for the command's stdin (mktemp, mkfifo): {}",
                said.trim()
            ),
        })
    }

    /// The FIFO the command reads.
    pub(crate) fn fifo(&self) -> &FeederFifo {
        &self.fifo
    }

    /// Once the command ended and the feeder's stdin was closed: waits (bounded) for the
    /// feeder to finish its copy and remove its directory, so that nothing is left behind.
    pub(crate) async fn finish(mut self) {
        let config = self.inner.config.clone();
        let deadline = limit::deadline(tokio::time::Instant::now(), config.drain_timeout);
        while let Some(Heard::Output(_)) = self.launched.next(&config, deadline).await {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_opens_the_fifo_and_removes_its_directory() {
        let fifo = FeederFifo {
            dir: b"/tmp/tmp.it's".to_vec(),
        };
        let prefix = String::from_utf8(fifo.open_prefix()).unwrap();
        assert_eq!(
            prefix,
            format!(
                "exec 0<{} || exit 1; rm -rf -- {} 2>/dev/null; ",
                String::from_utf8(crate::command::quote(b"/tmp/tmp.it's/in")).unwrap(),
                String::from_utf8(crate::command::quote(b"/tmp/tmp.it's")).unwrap()
            )
        );
    }
}
