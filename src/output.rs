//! What a finished command produced.

use std::time::Duration;

use bytes::Bytes;

/// One piece of output, exactly as it arrived in one SSH data packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Bytes from the command's stdout (SSH channel data).
    Stdout(Bytes),
    /// Bytes from the command's stderr (SSH extended data, type 1).
    Stderr(Bytes),
}

impl OutputChunk {
    /// The chunk's bytes, whichever stream they came from.
    pub fn bytes(&self) -> &Bytes {
        match self {
            OutputChunk::Stdout(bytes) | OutputChunk::Stderr(bytes) => bytes,
        }
    }
}

/// A sink that receives output chunks in the order the executor observed them.
///
/// It is called from the executor's read loop and must not block.
pub type OutputSink<'a> = dyn FnMut(&OutputChunk) + Send + 'a;

/// How a remote command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExitStatus {
    /// The command exited with this code.
    Code(u32),
    /// The command was killed by this signal (name without `SIG`, e.g. `KILL`).
    Signal {
        /// Signal name as the server reported it.
        name: String,
        /// Whether the server said a core was dumped.
        core_dumped: bool,
    },
    /// The command ran past its timeout; its process group was killed.
    TimedOut {
        /// The timeout that applied.
        timeout: Duration,
        /// Whether the server confirmed the end of the command (channel closed) within the
        /// drain period after the kill.
        confirmed_dead: bool,
    },
    /// The channel closed without an exit status or signal.
    Unknown,
}

impl ExitStatus {
    /// `true` for exit code 0 only.
    pub fn success(&self) -> bool {
        matches!(self, ExitStatus::Code(0))
    }
}

/// The full result of one remote command, from the inherent API
/// ([`SshExecutor::run`](crate::SshExecutor::run)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Execution {
    /// The host the command ran on (as configured).
    pub host: String,
    /// Every output chunk, in observed order.
    pub chunks: Vec<OutputChunk>,
    /// How it ended.
    pub status: ExitStatus,
    /// Wall time from the call to the result.
    pub duration: Duration,
}

impl Execution {
    /// All stdout bytes, concatenated.
    pub fn stdout(&self) -> Vec<u8> {
        self.collect(|c| matches!(c, OutputChunk::Stdout(_)))
    }

    /// All stderr bytes, concatenated.
    pub fn stderr(&self) -> Vec<u8> {
        self.collect(|c| matches!(c, OutputChunk::Stderr(_)))
    }

    fn collect(&self, keep: impl Fn(&OutputChunk) -> bool) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in self.chunks.iter().filter(|c| keep(c)) {
            out.extend_from_slice(chunk.bytes());
        }
        out
    }
}
