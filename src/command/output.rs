//! What a finished command produced.

use std::time::Duration;

use bytes::Bytes;

/// One piece of output, exactly as it arrived in one SSH data packet.
///
/// Order is exact within each stream. Across stdout and stderr it is the order the packets
/// arrived in, which matches the order of writes only when they are apart in time: two pipes
/// written within a millisecond can be read in either order (LocalExecutor behaves the same).
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

    /// Adds the chunk to an audit record's digests of its stream.
    pub(crate) fn digest_into(&self, digests: &mut crate::audit::OutputDigests) {
        match self {
            OutputChunk::Stdout(bytes) => digests.stdout(bytes),
            OutputChunk::Stderr(bytes) => digests.stderr(bytes),
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
    /// How an audit record says the command ended.
    pub(crate) fn audit_exit(&self) -> crate::audit::Exit {
        use crate::audit::Exit;
        match self {
            ExitStatus::Code(code) => Exit::Code(*code),
            ExitStatus::Signal { name, .. } => Exit::Signal(name.clone()),
            ExitStatus::TimedOut { timeout, .. } => Exit::TimedOut(timeout.as_secs_f64()),
            ExitStatus::Unknown => Exit::Unknown,
        }
    }

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
    /// Output bytes dropped from the middle because of
    /// [`max_output_bytes`](crate::SshExecutorBuilder::max_output_bytes); 0 when nothing was
    /// dropped. The sink still saw every byte.
    pub omitted_bytes: u64,
    /// Where in `chunks` the omission happened (the index of the first tail chunk).
    pub omitted_at: usize,
}

impl Execution {
    /// `true` when the command exited with code 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// The [limit](crate::Limits) that stopped the command, if one did: it ended by
    /// `SIGXCPU` ([`Limit::CpuTime`](crate::Limit::CpuTime)) or `SIGXFSZ`
    /// ([`Limit::FileSize`](crate::Limit::FileSize)), the kernel's signals for those limits.
    /// Memory, process and descriptor limits make the calls that would pass them fail
    /// (`ENOMEM`, `EAGAIN`, `EMFILE`): the command sees the error and decides how to end.
    pub fn limit_exceeded(&self) -> Option<crate::config::Limit> {
        match &self.status {
            ExitStatus::Signal { name, .. } if name == "XCPU" => {
                Some(crate::config::Limit::CpuTime)
            }
            ExitStatus::Signal { name, .. } if name == "XFSZ" => {
                Some(crate::config::Limit::FileSize)
            }
            _ => None,
        }
    }

    /// Stdout decoded lossily as UTF-8 (invalid bytes become U+FFFD).
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout()).into_owned()
    }

    /// All stdout bytes, concatenated.
    pub fn stdout(&self) -> Vec<u8> {
        self.collect(|c| matches!(c, OutputChunk::Stdout(_)))
    }

    /// All stderr bytes, concatenated.
    pub fn stderr(&self) -> Vec<u8> {
        self.collect(|c| matches!(c, OutputChunk::Stderr(_)))
    }

    /// Stdout bytes kept (without copying them).
    pub fn stdout_len(&self) -> usize {
        self.len_of(|c| matches!(c, OutputChunk::Stdout(_)))
    }

    /// Stderr bytes kept (without copying them).
    pub fn stderr_len(&self) -> usize {
        self.len_of(|c| matches!(c, OutputChunk::Stderr(_)))
    }

    fn len_of(&self, keep: impl Fn(&OutputChunk) -> bool) -> usize {
        self.chunks
            .iter()
            .filter(|c| keep(c))
            .map(|c| c.bytes().len())
            .sum()
    }

    fn collect(&self, keep: impl Fn(&OutputChunk) -> bool) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in self.chunks.iter().filter(|c| keep(c)) {
            out.extend_from_slice(chunk.bytes());
        }
        out
    }
}

/// Keeps a command's output, or with a cap only its head and tail.
///
/// With a cap of `n` bytes the first `n / 2` bytes and the last `n - n / 2` bytes are kept,
/// chunk boundaries and streams preserved (a chunk crossing a limit is split).
#[derive(Debug)]
pub(crate) struct Retained {
    cap: Option<usize>,
    head: Vec<OutputChunk>,
    head_bytes: usize,
    tail: std::collections::VecDeque<OutputChunk>,
    tail_bytes: usize,
    omitted: u64,
}

fn split(chunk: &OutputChunk, at: usize) -> (OutputChunk, OutputChunk) {
    let make = |bytes: Bytes| match chunk {
        OutputChunk::Stdout(_) => OutputChunk::Stdout(bytes),
        OutputChunk::Stderr(_) => OutputChunk::Stderr(bytes),
    };
    let bytes = chunk.bytes();
    let at = at.min(bytes.len());
    (make(bytes.slice(..at)), make(bytes.slice(at..)))
}

impl Retained {
    pub(crate) fn new(cap: Option<usize>) -> Self {
        Self {
            cap,
            head: Vec::new(),
            head_bytes: 0,
            tail: std::collections::VecDeque::new(),
            tail_bytes: 0,
            omitted: 0,
        }
    }

    pub(crate) fn push(&mut self, chunk: OutputChunk) {
        let Some(cap) = self.cap else {
            self.head.push(chunk);
            return;
        };
        let head_cap = cap / 2;
        let mut chunk = chunk;
        if self.head_bytes < head_cap {
            let room = head_cap - self.head_bytes;
            if chunk.bytes().len() <= room {
                self.head_bytes += chunk.bytes().len();
                self.head.push(chunk);
                return;
            }
            let (first, rest) = split(&chunk, room);
            self.head_bytes += room;
            self.head.push(first);
            chunk = rest;
        }
        self.tail_bytes += chunk.bytes().len();
        self.tail.push_back(chunk);
        let tail_cap = cap - head_cap;
        while self.tail_bytes > tail_cap {
            let excess = self.tail_bytes - tail_cap;
            let Some(front) = self.tail.pop_front() else {
                break;
            };
            let len = front.bytes().len();
            if len <= excess {
                self.tail_bytes -= len;
                self.omitted += len as u64;
            } else {
                let (_, kept) = split(&front, excess);
                self.tail_bytes -= excess;
                self.omitted += excess as u64;
                self.tail.push_front(kept);
            }
        }
    }

    /// The kept chunks, the omitted byte count and the index where bytes were omitted.
    pub(crate) fn finish(self) -> (Vec<OutputChunk>, u64, usize) {
        let at = self.head.len();
        let mut chunks = self.head;
        chunks.extend(self.tail.into_iter().filter(|c| !c.bytes().is_empty()));
        (chunks, self.omitted, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdout(text: &'static str) -> OutputChunk {
        OutputChunk::Stdout(Bytes::from_static(text.as_bytes()))
    }

    #[test]
    fn without_a_cap_everything_is_kept() {
        let mut kept = Retained::new(None);
        kept.push(stdout("abc"));
        kept.push(OutputChunk::Stderr(Bytes::from_static(b"def")));
        let (chunks, omitted, _) = kept.finish();
        assert_eq!(chunks.len(), 2);
        assert_eq!(omitted, 0);
    }

    #[test]
    fn a_cap_keeps_head_and_tail_and_counts_the_rest() {
        let mut kept = Retained::new(Some(6));
        for piece in ["abcd", "efgh", "ijkl", "mn"] {
            kept.push(stdout(piece));
        }
        let (chunks, omitted, at) = kept.finish();
        let text: Vec<u8> = chunks.iter().flat_map(|c| c.bytes().to_vec()).collect();
        assert_eq!(text, b"abclmn");
        assert_eq!(omitted, 8);
        assert_eq!(at, 1);
        assert_eq!(omitted + text.len() as u64, 14);
    }
}
