//! Live output as clush and pdsh print it: each complete line prefixed with its host
//! (`web01: text`). Chunks split lines anywhere, so each host's and stream's partial line
//! waits for its end.

use std::collections::HashMap;

use crate::command::OutputChunk;

/// Turns a fleet's output chunks into whole lines per host and stream.
#[derive(Debug, Default)]
pub struct LiveLines {
    /// (member, is stderr) → the bytes after the last newline.
    partial: HashMap<(usize, bool), Vec<u8>>,
}

/// One whole line of one host's output.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LiveLine {
    /// The member's position in the fleet.
    pub member: usize,
    /// `true` for standard error.
    pub stderr: bool,
    /// The line without its newline (lossily decoded: a multi-byte character split across
    /// chunks is joined before decoding).
    pub text: String,
}

impl LiveLines {
    /// A new, empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lines that `chunk` of `member` completes.
    pub fn push(&mut self, member: usize, chunk: &OutputChunk) -> Vec<LiveLine> {
        let stderr = matches!(chunk, OutputChunk::Stderr(_));
        let buffer = self.partial.entry((member, stderr)).or_default();
        buffer.extend_from_slice(chunk.bytes());
        let mut lines = Vec::new();
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let text = String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(&line));
            lines.push(LiveLine {
                member,
                stderr,
                text: text.trim_end_matches('\r').to_owned(),
            });
        }
        lines
    }

    /// What `member` left without a final newline (call when it finishes), stdout first.
    pub fn finish(&mut self, member: usize) -> Vec<LiveLine> {
        [false, true]
            .into_iter()
            .filter_map(|stderr| {
                let rest = self.partial.remove(&(member, stderr))?;
                (!rest.is_empty()).then(|| LiveLine {
                    member,
                    stderr,
                    text: String::from_utf8_lossy(&rest).into_owned(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::LiveLines;
    use crate::command::OutputChunk;

    fn texts(lines: Vec<super::LiveLine>) -> Vec<(usize, bool, String)> {
        lines
            .into_iter()
            .map(|l| (l.member, l.stderr, l.text))
            .collect()
    }

    #[test]
    fn lines_are_whole_per_host_and_stream() {
        let mut live = LiveLines::new();
        let out = |s: &'static [u8]| OutputChunk::Stdout(Bytes::from_static(s));
        let err = |s: &'static [u8]| OutputChunk::Stderr(Bytes::from_static(s));
        assert!(live.push(0, &out(b"hel")).is_empty());
        assert!(live.push(1, &out(b"other ")).is_empty());
        assert!(live.push(0, &err(b"warn")).is_empty());
        assert_eq!(
            texts(live.push(0, &out(b"lo\r\nwor"))),
            [(0, false, "hello".to_owned())]
        );
        // "é" split across two chunks is decoded whole.
        assert!(live.push(1, &out(b"caf\xc3")).is_empty());
        assert_eq!(
            texts(live.push(1, &out(b"\xa9\n"))),
            [(1, false, "other café".to_owned())]
        );
        assert_eq!(
            texts(live.finish(0)),
            [(0, false, "wor".to_owned()), (0, true, "warn".to_owned())]
        );
        assert!(live.finish(0).is_empty());
        assert!(live.finish(1).is_empty());
    }
}
