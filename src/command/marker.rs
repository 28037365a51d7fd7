//! The marker line: how the remote side reports the command's process group on stderr.

/// Prefix of the line the wrapper prints on stderr to report its process-group id.
pub(crate) fn marker_prefix(nonce: u64) -> String {
    format!("@@swiftide-ssh:{nonce:016x}:")
}

/// Splits the wrapper's marker line out of the stderr stream.
///
/// Bytes before the marker (a login rc file's noise) and after it pass through unchanged. If
/// no marker shows up within 64 KiB, parsing gives up and everything passes through: the
/// command then cannot be killed by group, which is logged.
#[derive(Debug)]
pub(crate) struct MarkerParser {
    prefix: Vec<u8>,
    pending: Vec<u8>,
    done: bool,
    traits: Option<String>,
    /// Stderr bytes came before the marker line.
    noise_before: bool,
    /// Drop the bytes before the marker instead of passing them on: an escalation tool's
    /// (see `command::escalation`, which keeps them), not the command's.
    drop_noise: bool,
}

const MARKER_SEARCH_LIMIT: usize = 64 * 1024;

impl MarkerParser {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.as_bytes().to_vec(),
            pending: Vec::new(),
            done: false,
            traits: None,
            noise_before: false,
            drop_noise: false,
        }
    }

    /// A parser for an escalated request: the bytes before the marker are the escalation
    /// tool's, never passed on as the command's stderr.
    pub(crate) fn escalated(prefix: &str) -> Self {
        Self {
            drop_noise: true,
            ..Self::new(prefix)
        }
    }

    /// What the marker line said after the pgid (`L bash`: see
    /// [`direct_capable`](crate::command::direct_capable)), once the marker has been found.
    pub(crate) fn traits(&self) -> Option<&str> {
        self.traits.as_deref()
    }

    /// Whether stderr bytes came before the marker line (once it has been found): the login
    /// shell printed something before the request ran (rc files, warnings).
    pub(crate) fn noise_before(&self) -> bool {
        self.noise_before
    }

    /// Feeds stderr bytes; returns the pgid once the marker line is complete, and the bytes
    /// that belong to the user's stderr.
    pub(crate) fn feed(&mut self, data: bytes::Bytes) -> (Option<u32>, Vec<bytes::Bytes>) {
        if self.done {
            return (None, vec![data]);
        }
        self.pending.extend_from_slice(&data);
        let Some(start) = find(&self.pending, &self.prefix) else {
            if self.pending.len() > MARKER_SEARCH_LIMIT {
                return (None, self.give_up());
            }
            return (None, Vec::new());
        };
        let digits_start = start + self.prefix.len();
        let Some(newline) = self
            .pending
            .get(digits_start..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
            .map(|offset| digits_start + offset)
        else {
            return (None, Vec::new());
        };
        // `<pgid>` or `<pgid> <traits>`.
        let line = self
            .pending
            .get(digits_start..newline)
            .and_then(|line| std::str::from_utf8(line).ok())
            .unwrap_or_default();
        let (digits, traits) = line.split_once(' ').unwrap_or((line, ""));
        let pgid = digits.parse::<u32>().ok();
        self.traits = Some(traits.trim().to_owned());
        let pending = std::mem::take(&mut self.pending);
        self.done = true;
        self.noise_before = start > 0;
        let mut out = Vec::new();
        if let Some(before) = pending.get(..start).filter(|b| !b.is_empty())
            && !self.drop_noise
        {
            out.push(bytes::Bytes::copy_from_slice(before));
        }
        if let Some(after) = pending.get(newline + 1..).filter(|b| !b.is_empty()) {
            out.push(bytes::Bytes::copy_from_slice(after));
        }
        (pgid, out)
    }

    /// Returns whatever is still buffered (the stream ended without a marker); an escalated
    /// parser returns nothing.
    pub(crate) fn give_up(&mut self) -> Vec<bytes::Bytes> {
        if self.done {
            return Vec::new();
        }
        self.done = true;
        let pending = std::mem::take(&mut self.pending);
        if self.drop_noise {
            return Vec::new();
        }
        if pending.is_empty() {
            Vec::new()
        } else {
            vec![bytes::Bytes::from(pending)]
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn marker_is_split_out_across_packets() {
        let mut parser = MarkerParser::new("@@m:");
        let (pgid, out) = parser.feed(Bytes::from_static(b"rc noise\n@@m:12"));
        assert_eq!((pgid, out.len()), (None, 0));
        let (pgid, out) = parser.feed(Bytes::from_static(b"34\nuser err"));
        assert_eq!(pgid, Some(1234));
        assert_eq!(
            out,
            vec![
                Bytes::from_static(b"rc noise\n"),
                Bytes::from_static(b"user err")
            ]
        );
        let (pgid, out) = parser.feed(Bytes::from_static(b"more"));
        assert_eq!((pgid, out), (None, vec![Bytes::from_static(b"more")]));
        assert_eq!(parser.traits(), Some(""));
        assert!(parser.noise_before());
    }

    #[test]
    fn marker_traits_follow_the_pgid() {
        let mut parser = MarkerParser::new("@@m:");
        assert_eq!(parser.traits(), None);
        let (pgid, out) = parser.feed(Bytes::from_static(
            b"@@m:77 L bash
err",
        ));
        assert_eq!(pgid, Some(77));
        assert_eq!(parser.traits(), Some("L bash"));
        assert_eq!(out, vec![Bytes::from_static(b"err")]);
        // What follows the marker is the command's, not noise.
        assert!(!parser.noise_before());
    }

    #[test]
    fn an_escalated_parser_passes_on_only_what_follows_the_marker() {
        let mut parser = MarkerParser::escalated("@@m:");
        let (pgid, out) = parser.feed(Bytes::from_static(b"[sudo] prompt"));
        assert_eq!((pgid, out.len()), (None, 0));
        let (pgid, out) = parser.feed(Bytes::from_static(b"@@m:5 S sh\nerr"));
        assert_eq!(pgid, Some(5));
        assert_eq!(out, vec![Bytes::from_static(b"err")]);
        let mut failed = MarkerParser::escalated("@@m:");
        let _ = failed.feed(Bytes::from_static(b"sudo: a password is required\n"));
        assert!(failed.give_up().is_empty());
    }

    #[test]
    fn marker_parser_gives_up_after_limit() {
        let mut parser = MarkerParser::new("@@m:");
        let big = Bytes::from(vec![b'x'; MARKER_SEARCH_LIMIT + 1]);
        let (pgid, out) = parser.feed(big.clone());
        assert_eq!(pgid, None);
        assert_eq!(out.concat(), big.to_vec());
    }
}
