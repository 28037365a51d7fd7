//! Pseudo-terminals: the [`Pty`] a command can ask for, and how its terminal modes are set
//! around the executor's bootstrap.
//!
//! With a terminal, the server makes the login shell the leader of a session whose
//! controlling terminal is the channel's: stdout and stderr arrive merged on one stream
//! (`\n` written as `\r\n`), and stdin is what the terminal reads. The universal exec form
//! sends its payload on stdin, which would be echoed, cut into canonical lines and searched
//! for signal characters; so the request turns those modes off ([`Pty::request_modes`]) and
//! the payload turns them back on before the command runs ([`Pty::restore_prefix`]). The
//! direct form carries the command in the exec request and reads nothing: it gets the
//! caller's modes as they are.

use russh::Pty as Mode;

/// A pseudo-terminal for a command ([`ExecOptions::pty`](crate::ExecOptions::pty),
/// [`SshExecutor::spawn`](crate::SshExecutor::spawn), terminals).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pty {
    /// `TERM` on the host. Defaults to `xterm-256color`.
    pub term: String,
    /// Columns. Defaults to 80.
    pub cols: u32,
    /// Rows. Defaults to 24.
    pub rows: u32,
    /// Terminal modes (RFC 4254 §8 opcodes and values), as `ssh` sends them. Defaults to
    /// none: the server's defaults (echo, canonical input, signals: a usual terminal).
    pub modes: Vec<(Mode, u32)>,
}

impl Default for Pty {
    fn default() -> Self {
        Pty {
            term: "xterm-256color".to_owned(),
            cols: 80,
            rows: 24,
            modes: Vec::new(),
        }
    }
}

/// The modes the universal form's payload must not meet: echo (it would come back as
/// output), canonical input (4 KiB lines, erase and kill characters), signal characters, the
/// literal-next character, flow control, and CR-to-NL translation (a command may hold a CR).
const PAYLOAD_HOSTILE: [(Mode, &str); 6] = [
    (Mode::ECHO, "echo"),
    (Mode::ICANON, "icanon"),
    (Mode::ISIG, "isig"),
    (Mode::IEXTEN, "iexten"),
    (Mode::IXON, "ixon"),
    (Mode::ICRNL, "icrnl"),
];

impl Pty {
    /// A terminal of `cols` × `rows` with the other settings at their defaults.
    pub fn new(cols: u32, rows: u32) -> Self {
        Pty {
            cols,
            rows,
            ..Pty::default()
        }
    }

    /// Sets `TERM`.
    #[must_use]
    pub fn term(mut self, term: impl Into<String>) -> Self {
        self.term = term.into();
        self
    }

    /// Sets one terminal mode (e.g. `(russh::Pty::ECHO, 0)` for no echo).
    #[must_use]
    pub fn mode(mut self, mode: Mode, value: u32) -> Self {
        self.modes.retain(|(existing, _)| *existing != mode);
        self.modes.push((mode, value));
        self
    }

    /// The caller's value of `mode`, if set.
    fn wanted(&self, mode: Mode) -> Option<u32> {
        self.modes
            .iter()
            .find(|(existing, _)| *existing == mode)
            .map(|(_, value)| *value)
    }

    /// The modes of the `pty-req`: the caller's, and for the universal form (whose payload
    /// travels on the terminal's input) the payload-hostile ones off.
    pub(crate) fn request_modes(&self, universal: bool) -> Vec<(Mode, u32)> {
        let mut modes = self.modes.clone();
        if universal {
            for (mode, _) in PAYLOAD_HOSTILE {
                modes.retain(|(existing, _)| *existing != mode);
                modes.push((mode, 0));
            }
        }
        modes
    }

    /// What the universal payload runs first: `stty` turning the payload-hostile modes back
    /// to what the caller asked for (on, unless set to 0). Its errors are dropped (no `stty`
    /// means the modes stay off, which a program that sets its own modes does not notice).
    pub(crate) fn restore_prefix(&self) -> Vec<u8> {
        let mut text = String::from("stty");
        for (mode, name) in PAYLOAD_HOSTILE {
            text.push(' ');
            if self.wanted(mode) == Some(0) {
                text.push('-');
            }
            text.push_str(name);
        }
        text.push_str(" 2>/dev/null; ");
        text.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_universal_form_turns_hostile_modes_off_and_back_to_what_was_asked() {
        let pty = Pty::default().mode(Mode::ECHO, 0).mode(Mode::VINTR, 3);
        let modes = pty.request_modes(true);
        for (mode, _) in PAYLOAD_HOSTILE {
            assert!(modes.contains(&(mode, 0)), "{mode:?}");
        }
        assert!(modes.contains(&(Mode::VINTR, 3)));
        assert_eq!(pty.request_modes(false), pty.modes);
        assert_eq!(
            String::from_utf8(pty.restore_prefix()).unwrap(),
            "stty -echo icanon isig iexten ixon icrnl 2>/dev/null; "
        );
    }
}
