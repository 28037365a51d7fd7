//! The hash chain: each line carries the SHA-256 of the line before it, so that a removed,
//! reordered or edited line breaks the chain where it was, and [`verify`] names that place.

use std::io::BufRead;

use sha2::{Digest, Sha256};

/// What the first line's `prev` holds: no line came before it.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The SHA-256 of one line's bytes (without its newline), in lowercase hex: what the next
/// line's `prev` must hold.
pub(crate) fn line_hash(line: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(&Sha256::digest(line))
}

/// The end of a verified trail: how many records it holds and the hash of its last line.
///
/// A chain cannot tell that its last lines were cut off, or that its last line was edited
/// (nothing follows them). Keep the head somewhere the agent cannot write (the callback sink,
/// a log shipper, a ticket) and compare: [`verify`]'s head must match it or have it earlier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditHead {
    /// Records in the trail.
    pub records: u64,
    /// The hash of the last line ([`GENESIS`]'s zeros for an empty trail), lowercase hex.
    pub hash: String,
}

/// Where an audit trail's chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the audit trail breaks at line {line}: {reason}")]
pub struct AuditBroken {
    /// The first line (1-based) that does not follow from the lines before it: the line
    /// itself is damaged, or the line before it was edited, or lines between them were
    /// removed or moved.
    pub line: u64,
    /// What does not match.
    pub reason: String,
}

/// Checks an audit trail read from `reader`: every line is one JSON record whose `seq` is
/// one more than the line before it's (1 for the first) and whose `prev` is the SHA-256 of
/// the line before it (zeros for the first), and the last line ends with a newline.
///
/// # Errors
/// [`AuditBroken`] naming the first line that breaks the chain; an unreadable input is
/// reported as broken at the line where reading failed.
pub fn verify(reader: impl BufRead) -> Result<AuditHead, AuditBroken> {
    read(reader, |_| {}).map(|chain| chain.head())
}

/// [`verify`], and when `head` is given, the trail must hold the line it is the hash of (a
/// head taken earlier and kept elsewhere): that catches lines cut off the trail's end,
/// which the chain alone cannot.
///
/// # Errors
/// As [`verify`]; a `head` no line hashes to is reported at the line after the last.
pub fn verify_holding(reader: impl BufRead, head: Option<&str>) -> Result<AuditHead, AuditBroken> {
    let Some(head) = head else {
        return verify(reader);
    };
    let head = head.trim().to_ascii_lowercase();
    let mut held = head == GENESIS;
    let chain = read(reader, |hash| held |= hash == head)?;
    if !held {
        return Err(chain.broken_next(format!(
            "no line has the head {head}: lines were cut off the trail's end, or it is another trail"
        )));
    }
    Ok(chain.head())
}

/// Reads a trail as [`verify`] does, into the chain that its next record continues, handing
/// each line's hash to `each`.
pub(crate) fn read(
    mut reader: impl BufRead,
    mut each: impl FnMut(&str),
) -> Result<Chain, AuditBroken> {
    let mut chain = Chain::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|error| chain.broken_next(format!("unreadable: {error}")))?;
        if read == 0 {
            return Ok(chain);
        }
        let Some(body) = line.strip_suffix(b"\n") else {
            return Err(chain.broken_next(
                "the last line has no newline: a write was cut off, or the file was cut".into(),
            ));
        };
        chain.follow(body)?;
        if let Some((_, hash)) = &chain.last {
            each(hash);
        }
    }
}

/// The chain so far, while reading a trail.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    /// Lines read.
    lines: u64,
    /// The last line's `seq`, and its hash.
    last: Option<(u64, String)>,
}

impl Chain {
    /// Takes `body` (one line without its newline) as the next line.
    pub(crate) fn follow(&mut self, body: &[u8]) -> Result<(), AuditBroken> {
        let link = Link::parse(body).map_err(|reason| self.broken_next(reason))?;
        match &self.last {
            None if link.seq != 1 || link.prev != GENESIS => {
                return Err(self.broken_next(format!(
                    "the first record is seq {} and not the chain's start (seq 1, prev zeros): records before it were removed",
                    link.seq
                )));
            }
            None => {}
            Some((seq, hash)) => {
                if link.seq != seq + 1 {
                    return Err(self.broken_next(format!(
                        "seq {} follows seq {seq}: a record is missing or out of order",
                        link.seq
                    )));
                }
                if link.prev != *hash {
                    return Err(self.broken_next(
                        "prev does not match the line before: that line was changed, or lines were removed or moved".into(),
                    ));
                }
            }
        }
        self.lines += 1;
        self.last = Some((link.seq, line_hash(body)));
        Ok(())
    }

    /// The chain's end.
    pub(crate) fn head(&self) -> AuditHead {
        AuditHead {
            records: self.lines,
            hash: self
                .last
                .as_ref()
                .map_or_else(|| GENESIS.to_owned(), |(_, hash)| hash.clone()),
        }
    }

    /// The last `seq` (0 for none), which the next record follows.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last.as_ref().map_or(0, |(seq, _)| *seq)
    }

    fn broken_next(&self, reason: String) -> AuditBroken {
        AuditBroken {
            line: self.lines + 1,
            reason,
        }
    }
}

/// The two fields of a record the chain is made of.
#[derive(serde::Deserialize)]
struct Link {
    seq: u64,
    prev: String,
}

impl Link {
    fn parse(body: &[u8]) -> Result<Link, String> {
        serde_json::from_slice(body).map_err(|error| format!("not an audit record: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trail(records: usize) -> Vec<String> {
        let mut prev = GENESIS.to_owned();
        (1..=records)
            .map(|seq| {
                let line = format!(
                    r#"{{"seq":{seq},"op":"command","command":"echo {seq}","prev":"{prev}"}}"#
                );
                prev = line_hash(line.as_bytes());
                line
            })
            .collect()
    }

    fn check(lines: &[String]) -> Result<AuditHead, AuditBroken> {
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        verify(text.as_bytes())
    }

    #[test]
    fn an_intact_trail_verifies_to_its_head() {
        let lines = trail(5);
        let head = check(&lines).unwrap();
        assert_eq!(head.records, 5);
        assert_eq!(head.hash, line_hash(lines[4].as_bytes()));
        assert_eq!(check(&[]).unwrap().hash, GENESIS);
    }

    #[test]
    fn a_removed_line_is_found() {
        let mut lines = trail(5);
        lines.remove(2);
        assert_eq!(check(&lines).unwrap_err().line, 3);
    }

    #[test]
    fn reordered_lines_are_found() {
        let mut lines = trail(5);
        lines.swap(1, 2);
        assert_eq!(check(&lines).unwrap_err().line, 2);
    }

    #[test]
    fn an_edited_line_breaks_the_chain_at_the_next_line() {
        let mut lines = trail(5);
        lines[1] = lines[1].replace("echo 2", "echo 3");
        let broken = check(&lines).unwrap_err();
        assert_eq!(broken.line, 3, "{broken}");
    }

    #[test]
    fn an_edited_line_with_its_seq_kept_in_order_is_still_found() {
        // Rewriting prev too (the attacker recomputes the edited line's own link) moves the
        // break to the line after it, which the attacker cannot fix without rewriting the
        // rest of the trail.
        let mut lines = trail(4);
        lines[1] = lines[1].replace("echo 2", "rm -rf /");
        assert!(check(&lines).is_err());
    }

    #[test]
    fn a_kept_head_catches_a_cut_end() {
        let lines = trail(4);
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        let head = line_hash(lines[3].as_bytes());
        assert!(verify_holding(text.as_bytes(), Some(&head)).is_ok());
        let earlier = line_hash(lines[1].as_bytes());
        assert!(verify_holding(text.as_bytes(), Some(&earlier)).is_ok());
        let cut: String = lines[..3].iter().map(|line| format!("{line}\n")).collect();
        assert_eq!(
            verify_holding(cut.as_bytes(), Some(&head))
                .unwrap_err()
                .line,
            4
        );
    }

    #[test]
    fn a_removed_first_line_is_found() {
        let mut lines = trail(3);
        lines.remove(0);
        assert_eq!(check(&lines).unwrap_err().line, 1);
    }

    #[test]
    fn a_torn_last_line_and_garbage_are_found() {
        let lines = trail(2);
        let text = format!("{}\n{}", lines[0], lines[1]);
        assert_eq!(verify(text.as_bytes()).unwrap_err().line, 2);
        let text = format!("{}\nnot json\n", lines[0]);
        assert_eq!(verify(text.as_bytes()).unwrap_err().line, 2);
    }
}
