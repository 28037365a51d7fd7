//! Terminal recordings as asciicast v3 files (what `asciinema play` replays): a JSON header,
//! then one `[interval, code, data]` line per event: `o` output, `r` resize (`"COLSxROWS"`),
//! `i` typed input (only where asked, and never while the screen asks for a password), `x`
//! the exit status. Written by a task of the recording's own, as events happen.

use std::{path::Path, time::Instant};

use tokio::{io::AsyncWriteExt, sync::mpsc};

use crate::{
    command::ExitStatus,
    error::{Error, Result},
};

/// What happened, and when.
enum Event {
    Output(bytes::Bytes),
    Input(Vec<u8>),
    Resize { cols: u16, rows: u16 },
    Exit(String),
}

/// A recording being written (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Recording {
    events: mpsc::UnboundedSender<(Instant, Event)>,
    input: bool,
}

impl Recording {
    /// Starts a recording into `path` (created or truncated, mode 0600) of a terminal of
    /// `cols` × `rows` running `command`; typed input is recorded when `input`.
    ///
    /// # Errors
    /// [`Error::LocalFile`] when the file cannot be created.
    pub(crate) fn start(
        path: &Path,
        (cols, rows): (u16, u16),
        term: &str,
        command: &str,
        input: bool,
    ) -> Result<Recording> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        // One open(2) of a local file, before the terminal exists (its errors belong to the
        // caller of `open_terminal`); every write after it is the writer task's.
        let file = options.open(path).map_err(|source| Error::LocalFile {
            operation: "create",
            path: path.to_path_buf(),
            source,
        })?;
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let header = serde_json::json!({
            "version": 3,
            "term": {"cols": cols, "rows": rows, "type": term},
            "timestamp": timestamp,
            "command": command,
        });
        let (events, receiver) = mpsc::unbounded_channel();
        tokio::spawn(write_events(
            tokio::fs::File::from_std(file),
            path.display().to_string(),
            header.to_string(),
            Instant::now(),
            receiver,
        ));
        Ok(Recording { events, input })
    }

    pub(crate) fn output(&self, bytes: &bytes::Bytes) {
        self.send(Event::Output(bytes.clone()));
    }

    /// Records typed `bytes`, when input is recorded and the screen (read only then) does
    /// not ask for a password or passphrase on the cursor's row: that answer never reaches a
    /// file.
    pub(crate) fn input(&self, bytes: &[u8], screen: impl FnOnce() -> super::Screen) {
        if self.input && !asks_for_a_secret(&screen()) {
            self.send(Event::Input(bytes.to_vec()));
        }
    }

    pub(crate) fn resize(&self, cols: u16, rows: u16) {
        self.send(Event::Resize { cols, rows });
    }

    pub(crate) fn exit(&self, ended: &std::result::Result<ExitStatus, String>) {
        self.send(Event::Exit(exit_code(ended)));
    }

    fn send(&self, event: Event) {
        // A writer that stopped has logged why; the terminal goes on without it.
        let _ = self.events.send((Instant::now(), event));
    }
}

/// Whether the cursor's row asks for a password, passphrase or PIN (sudo, su, ssh, gpg).
fn asks_for_a_secret(screen: &super::Screen) -> bool {
    let row = screen
        .lines
        .get(usize::from(screen.cursor.0))
        .map(|line| line.to_lowercase())
        .unwrap_or_default();
    ["password", "passphrase", "pin:", "passcode", "secret"]
        .iter()
        .any(|word| row.contains(word))
}

/// asciicast's exit status: the code, or 128 + the signal's number as a shell reports it.
fn exit_code(ended: &std::result::Result<ExitStatus, String>) -> String {
    let signal_number = |name: &str| match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ABRT" => 6,
        "KILL" => 9,
        "SEGV" => 11,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "XCPU" => 24,
        "XFSZ" => 25,
        _ => 0,
    };
    match ended {
        Ok(ExitStatus::Code(code)) => code.to_string(),
        Ok(ExitStatus::Signal { name, .. }) => (128 + signal_number(name)).to_string(),
        _ => "1".to_owned(),
    }
}

/// Writes the header, then each event as it comes, until the terminal is gone.
async fn write_events(
    file: tokio::fs::File,
    path: String,
    header: String,
    started: Instant,
    events: mpsc::UnboundedReceiver<(Instant, Event)>,
) {
    if let Err(error) = write_lines(file, header, started, events).await {
        tracing::warn!(%path, %error, "the terminal recording stopped");
    }
}

async fn write_lines(
    file: tokio::fs::File,
    header: String,
    mut last: Instant,
    mut events: mpsc::UnboundedReceiver<(Instant, Event)>,
) -> std::io::Result<()> {
    let mut file = tokio::io::BufWriter::new(file);
    file.write_all(header.as_bytes()).await?;
    file.write_all(b"\n").await?;
    let mut text = Utf8Carry::default();
    let mut batch = Vec::new();
    loop {
        // On disk whenever nothing more is waiting.
        file.flush().await?;
        if events.recv_many(&mut batch, 64).await == 0 {
            return Ok(());
        }
        for (at, event) in batch.drain(..) {
            let interval = at.saturating_duration_since(last).as_secs_f64();
            last = at;
            let (code, data) = match event {
                Event::Output(bytes) => ("o", text.decode(&bytes)),
                Event::Input(bytes) => ("i", String::from_utf8_lossy(&bytes).into_owned()),
                Event::Resize { cols, rows } => ("r", format!("{cols}x{rows}")),
                Event::Exit(code) => ("x", code),
            };
            let mut line =
                serde_json::json!([(interval * 1e6).round() / 1e6, code, data]).to_string();
            line.push('\n');
            file.write_all(line.as_bytes()).await?;
        }
    }
}

/// Output decoded as UTF-8 across chunk boundaries: a character split between two chunks
/// is kept until its end arrives; bytes that are not UTF-8 become U+FFFD.
#[derive(Default)]
struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    fn decode(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let complete = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete sequence at the end (no error length): keep it for the next chunk.
            Err(error) if error.error_len().is_none() => error.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let rest = self.pending.split_off(complete);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_between_chunks_is_kept_whole() {
        let mut carry = Utf8Carry::default();
        let bytes = "né€".as_bytes();
        assert_eq!(carry.decode(&bytes[..2]), "n");
        assert_eq!(carry.decode(&bytes[2..4]), "é");
        assert_eq!(carry.decode(&bytes[4..]), "€");
        assert_eq!(carry.decode(b"a\xffb"), "a\u{fffd}b");
    }

    #[test]
    fn password_prompts_are_recognised() {
        let screen = |line: &str| super::super::Screen {
            lines: vec!["$ sudo -k true".into(), line.into()],
            cursor: (1, 20),
            rows: 2,
            cols: 80,
            title: String::new(),
            alternate_screen: false,
            cursor_visible: true,
        };
        assert!(asks_for_a_secret(&screen("[sudo] password for ci:")));
        assert!(asks_for_a_secret(&screen("Enter passphrase for key:")));
        assert!(!asks_for_a_secret(&screen("$ ")));
    }
}
