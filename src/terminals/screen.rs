//! The screen of a terminal, rebuilt on our side from the bytes its program wrote, so an agent
//! can read what a person would see instead of a stream of escape codes.
//!
//! A command in a pseudo-terminal draws: it moves the cursor, clears lines, repaints a menu,
//! switches to the alternate screen (less, vi, top) and back. Its output bytes only make sense
//! fed through a terminal emulator; [`ScreenState`] is that emulator, and [`Screen`] is one
//! snapshot of it in plain text: the rows, the cursor, the title, and whether a full-screen
//! program is drawing. The rows that scroll off the top are kept as scrollback, up to a bound.
//!
//! The emulator is the `vt100` crate: a small parser with exactly what is needed here (the
//! grid of cells with wide characters, scrollback, cursor position and visibility, the
//! alternate screen, DECCKM for the keys), and widely used for just this: reading the screen
//! of a program in a pty (`tui-term` renders ptys with it).
//! `alacritty_terminal` is a whole terminal's core, built around its own event loop and pty
//! handling, far more than a screen to read; `termwiz` (wezterm's) is a toolkit for drawing
//! terminal programs, whose emulator half is wezterm's and heavier still.
//!
//! The bytes come from a program on a remote host, so they are hostile input. None of them may
//! panic or grow memory without bound:
//! - sizes are clamped to [`MAX_ROWS`] x [`MAX_COLS`] and the scrollback to
//!   [`MAX_SCROLLBACK_LINES`] rows (a scrolled-off row keeps only its cells up to its last
//!   non-blank one; 32 bytes a cell, so at most about 64 MiB even at the widest);
//! - `vt100` is built without its `std` feature, which would make its parser (`vte`) buffer an
//!   unterminated OSC sequence without limit; without it the buffer stops at 1 KiB, and the
//!   title we keep is cut to [`MAX_TITLE_CHARS`] characters;
//! - the parser saturates numeric parameters at 65535 and clamps every cursor movement to the
//!   screen; invalid UTF-8 is dropped (`vte` decodes it to U+FFFD, which `vt100` does not
//!   draw), and a UTF-8 character cut between two chunks is put back together;
//! - a program's request to resize the window (`CSI 8 ; rows ; cols t`) is ignored: the size
//!   is the client's choice, made with [`ScreenState::resize`].
//!
//! Queries are not answered: `vt100` has no way to reply and neither do we, so device
//! attributes (`CSI c`), a cursor position report (`CSI 6n`) and the like get no reply. Most
//! programs time out and carry on; one that waits for the reply forever must be told to stop
//! asking (`TERM=dumb`, or its own option).

use std::{fmt, num::NonZeroU16};

use super::keys::KeyModes;

/// The most rows a screen has; a larger request is cut to this.
pub(crate) const MAX_ROWS: u16 = 200;
/// The most columns a screen has; a larger request is cut to this.
pub(crate) const MAX_COLS: u16 = 400;
/// The most scrolled-off rows kept; a larger request is cut to this.
pub(crate) const MAX_SCROLLBACK_LINES: usize = 5_000;
/// The most characters of a window title kept: a title is a label, not a channel.
pub(crate) const MAX_TITLE_CHARS: usize = 256;

/// What a terminal shows at one moment, in plain text.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screen {
    /// The rows, top to bottom, one string each (so `lines.len()` is `rows`), without colors
    /// or other attributes and without trailing spaces. A wide character (CJK, most emoji)
    /// takes two columns on screen but is one `char` here.
    pub lines: Vec<String>,
    /// The cursor as (row, column), both from 0; the column counts screen cells, so it is
    /// past a wide character's two cells. Always on the screen: right after a character lands
    /// in the last column it stays there (the wrap waits for the next character), as xterm
    /// draws it.
    pub cursor: (u16, u16),
    /// Rows of the screen.
    pub rows: u16,
    /// Columns of the screen.
    pub cols: u16,
    /// The window title the program set (OSC 0 or 2), empty if none: control characters
    /// removed, at most 256 characters.
    pub title: String,
    /// A full-screen program (less, vi, top, ...) is drawing on the alternate screen; what
    /// was on the normal screen comes back when it exits.
    pub alternate_screen: bool,
    /// The program has not hidden the cursor. Full-screen programs often hide it while
    /// drawing, and some keep it hidden.
    pub cursor_visible: bool,
}

impl Screen {
    /// The rows joined by newlines, without the empty rows at the bottom.
    pub fn text(&self) -> String {
        let used = self
            .lines
            .iter()
            .rposition(|line| !line.is_empty())
            .map_or(0, |last| last + 1);
        self.lines.get(..used).unwrap_or_default().join("\n")
    }

    /// The text a model reads: a header line, then the rows.
    ///
    /// The header is always exactly the first line and the only one we write; every line after
    /// it is a row of the screen, verbatim, from row 0 down. It reads
    /// `[screen 24 rows x 80 cols, cursor at row 3 col 10]`, followed inside the brackets by
    /// `, cursor hidden`, `, alternate screen` and `, title "..."` (quoted and escaped) when
    /// they apply. Rows are listed down to the last one with text or the cursor, whichever is
    /// lower, so the cursor's row is always there.
    ///
    /// The cursor is reported only in the header, by number, and not marked in the rows: any
    /// marker would be a character that the program could print too, and a model could not
    /// tell the two apart.
    pub fn render(&self) -> String {
        let (cursor_row, cursor_col) = self.cursor;
        let mut text = format!(
            "[screen {} rows x {} cols, cursor at row {cursor_row} col {cursor_col}",
            self.rows, self.cols
        );
        if !self.cursor_visible {
            text.push_str(", cursor hidden");
        }
        if self.alternate_screen {
            text.push_str(", alternate screen");
        }
        if !self.title.is_empty() {
            // Debug quoting: a title cannot close the bracket or start a new line.
            text.push_str(&format!(", title {:?}", self.title));
        }
        text.push(']');
        let last_with_text = self.lines.iter().rposition(|line| !line.is_empty());
        let shown = last_with_text
            .unwrap_or(0)
            .max(usize::from(cursor_row))
            .saturating_add(1);
        for line in self.lines.iter().take(shown) {
            text.push('\n');
            text.push_str(line);
        }
        text
    }
}

/// The emulator behind one terminal: feed it the program's output with [`process`], read it
/// with [`snapshot`] and [`scrollback`].
///
/// [`process`]: Self::process
/// [`snapshot`]: Self::snapshot
/// [`scrollback`]: Self::scrollback
pub(crate) struct ScreenState {
    parser: vt100::Parser<Recorder>,
    /// Bytes fed to [`process`](Self::process), all of them.
    bytes_processed: u64,
    /// Bumped each time what the screen shows changes.
    version: u64,
    /// What the screen showed at the current version.
    drawn: Drawing,
}

/// Everything a change of which bumps the version: what [`Screen`] shows, and the attributes
/// (colors, reverse video) it leaves out, since a menu often moves its highlight and nothing
/// else, and a waiter must see that something was drawn.
#[derive(Debug, PartialEq, Eq)]
struct Drawing {
    /// `vt100`'s escape-code rendition of the screen: cells, attributes, cursor position and
    /// visibility.
    contents: String,
    size: (u16, u16),
    alternate_screen: bool,
    title: String,
}

/// What `vt100` reports through callbacks rather than in its screen: the title.
#[derive(Debug, Default)]
struct Recorder {
    title: String,
}

impl vt100::Callbacks for Recorder {
    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        self.title = bounded_title(title);
    }

    fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
        // `vt100` takes a title only as exactly `OSC 0|2 ; title`: a title with a `;` in it
        // (`vim: a; b`) comes here split at the semicolons.
        if let [b"0" | b"2", title @ ..] = params
            && !title.is_empty()
        {
            self.title = bounded_title(&title.join(&b';'));
        }
    }
}

/// A title as we keep it: valid UTF-8, no control characters (it ends up in text a model
/// reads), at most [`MAX_TITLE_CHARS`] characters.
fn bounded_title(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_TITLE_CHARS)
        .collect()
}

/// `value` clamped to `1..=max` as a `vt100` dimension.
fn dimension(value: u16, max: u16) -> NonZeroU16 {
    NonZeroU16::new(value.min(max)).unwrap_or(NonZeroU16::MIN)
}

impl ScreenState {
    /// A blank screen of `rows` x `cols` (each clamped to 1..[`MAX_ROWS`] or
    /// 1..[`MAX_COLS`]) keeping up to `scrollback` scrolled-off rows (at most
    /// [`MAX_SCROLLBACK_LINES`]).
    pub(crate) fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        let parser = vt100::Parser::new_with_callbacks(
            dimension(rows, MAX_ROWS),
            dimension(cols, MAX_COLS),
            scrollback.min(MAX_SCROLLBACK_LINES),
            Recorder::default(),
        );
        let mut state = Self {
            parser,
            bytes_processed: 0,
            version: 0,
            drawn: Drawing {
                contents: String::new(),
                size: (0, 0),
                alternate_screen: false,
                title: String::new(),
            },
        };
        state.drawn = state.drawing();
        state
    }

    /// Feeds the program's output, as it arrives: a chunk may end inside an escape sequence or
    /// a UTF-8 character, and the next one carries on.
    ///
    /// Costs a pass over the screen's cells besides the bytes themselves (to tell whether
    /// anything changed), so feed chunks as they come rather than byte by byte.
    pub(crate) fn process(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.parser.process(bytes);
        let fed = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        self.bytes_processed = self.bytes_processed.saturating_add(fed);
        self.note_drawing();
    }

    /// Resizes the screen (clamped as in [`new`](Self::new)), as a terminal window does:
    /// shrinking pushes rows above the cursor into scrollback, growing pulls them back. The
    /// program learns of it only by the pty's window change, which is the caller's to send.
    pub(crate) fn resize(&mut self, rows: u16, cols: u16) {
        self.parser
            .set_size(dimension(rows, MAX_ROWS), dimension(cols, MAX_COLS));
        self.note_drawing();
    }

    /// What the screen shows now.
    pub(crate) fn snapshot(&self) -> Screen {
        let screen = self.parser.screen();
        let (rows, cols) = screen.size();
        // Just after a character lands in the last column, `vt100` puts the cursor one past
        // it (the wrap is pending until the next character); it is drawn on that last cell,
        // as in xterm, and that is where we say it is.
        let (cursor_row, cursor_col) = screen.cursor_position();
        Screen {
            lines: screen
                .rows(0, cols.get())
                .map(|row| row.trim_end_matches(' ').to_owned())
                .collect(),
            cursor: (cursor_row, cursor_col.min(cols.get() - 1)),
            rows: rows.get(),
            cols: cols.get(),
            title: self.parser.callbacks().title.clone(),
            alternate_screen: screen.alternate_screen(),
            cursor_visible: !screen.hide_cursor(),
        }
    }

    /// The last `lines` rows that scrolled off the top of the screen (fewer if fewer did),
    /// oldest first, in the form of [`Screen::lines`].
    ///
    /// While a full-screen program is on the alternate screen this is empty: the alternate
    /// screen has no scrollback, and the normal screen's is out of view, as in xterm.
    ///
    /// Takes `&mut self` because `vt100` shows its scrollback only by scrolling the view back;
    /// the view is put back where it was before this returns, so the screen is undisturbed.
    pub(crate) fn scrollback(&mut self, lines: usize) -> Vec<String> {
        let screen = self.parser.screen_mut();
        let total = screen.scrollback_len();
        let wanted = lines.min(total);
        let (rows, cols) = screen.size();
        let view_before = screen.scrollback();
        let mut collected = Vec::with_capacity(wanted);
        // Index into the scrollback (0 is the oldest row) of the next row to read.
        let mut next = total - wanted;
        while next < total {
            // Scrolled back by `total - next` rows, the view's top row is scrollback row
            // `next`; the view holds at most a screenful of scrollback rows.
            let offset = total - next;
            screen.set_scrollback(offset);
            let in_view = offset.min(usize::from(rows.get()));
            collected.extend(
                screen
                    .rows(0, cols.get())
                    .take(in_view)
                    .map(|row| row.trim_end_matches(' ').to_owned()),
            );
            next += in_view;
        }
        screen.set_scrollback(view_before);
        collected
    }

    /// Rows that scrolled off the top and are kept, for [`scrollback`](Self::scrollback).
    pub(crate) fn scrollback_len(&self) -> usize {
        self.parser.screen().scrollback_len()
    }

    /// The modes the program set that change what keys send.
    pub(crate) fn key_modes(&self) -> KeyModes {
        KeyModes {
            application_cursor: self.parser.screen().application_cursor(),
        }
    }

    /// Bytes fed to [`process`](Self::process) so far, whatever they drew.
    pub(crate) fn bytes_processed(&self) -> u64 {
        self.bytes_processed
    }

    /// A counter bumped each time a [`process`](Self::process) or [`resize`](Self::resize)
    /// changed what the screen shows: its text, cursor, title or modes, and also its colors
    /// and other attributes, which a [`Screen`] leaves out. A waiter that saw version `n` knows
    /// something new was drawn once this passes `n`; bytes that only moved nothing (a bell, a
    /// query, a redraw of the same frame) leave it alone.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// What the screen shows now, in the detail the version tracks.
    fn drawing(&self) -> Drawing {
        let screen = self.parser.screen();
        let (rows, cols) = screen.size();
        Drawing {
            contents: screen.contents_formatted(),
            size: (rows.get(), cols.get()),
            alternate_screen: screen.alternate_screen(),
            title: self.parser.callbacks().title.clone(),
        }
    }

    /// Bumps the version if the screen changed since the last one.
    fn note_drawing(&mut self) {
        let drawing = self.drawing();
        if drawing != self.drawn {
            self.drawn = drawing;
            self.version = self.version.wrapping_add(1);
        }
    }
}

impl fmt::Debug for ScreenState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `vt100::Parser` has no `Debug`; its size and mode say what the screen is.
        let screen = self.parser.screen();
        f.debug_struct("ScreenState")
            .field("size", &screen.size())
            .field("alternate_screen", &screen.alternate_screen())
            .field("scrollback_len", &screen.scrollback_len())
            .field("bytes_processed", &self.bytes_processed)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(rows: u16, cols: u16, bytes: &[u8]) -> ScreenState {
        let mut state = ScreenState::new(rows, cols, 100);
        state.process(bytes);
        state
    }

    #[test]
    fn text_has_no_colors_and_no_trailing_blanks() {
        let state = fed(
            5,
            40,
            b"plain \x1b[31mred\x1b[0m \x1b[1;4;38;5;200mfancy\x1b[m   \r\n\x1b[7mreverse\x1b[27m",
        );
        let screen = state.snapshot();
        assert_eq!(screen.lines[0], "plain red fancy");
        assert_eq!(screen.lines[1], "reverse");
        assert_eq!(screen.lines.len(), 5);
        assert_eq!(screen.text(), "plain red fancy\nreverse");
        assert_eq!((screen.rows, screen.cols), (5, 40));
    }

    #[test]
    fn the_cursor_follows_carriage_return_and_line_feed() {
        let state = fed(5, 20, b"abc");
        assert_eq!(state.snapshot().cursor, (0, 3));
        let state = fed(5, 20, b"abc\r\n");
        assert_eq!(state.snapshot().cursor, (1, 0));
        // A bare line feed keeps the column, as on a real terminal (the pty's onlcr is what
        // usually adds the carriage return).
        let state = fed(5, 20, b"abc\n");
        assert_eq!(state.snapshot().cursor, (1, 3));
    }

    #[test]
    fn clear_and_home_empties_the_screen() {
        let mut state = fed(4, 20, b"one\r\ntwo\r\nthree");
        state.process(b"\x1b[2J\x1b[H");
        let screen = state.snapshot();
        assert_eq!(screen.text(), "");
        assert_eq!(screen.lines, vec![""; 4]);
        assert_eq!(screen.cursor, (0, 0));
        state.process(b"fresh");
        assert_eq!(state.snapshot().text(), "fresh");
    }

    #[test]
    fn a_full_screen_program_draws_on_the_alternate_screen_and_leaves_it() {
        let mut state = fed(4, 20, b"$ less file\r\n");
        state.process(b"\x1b[?1049h\x1b[?1h\x1b[?25l\x1b[H\x1b[2J");
        state.process(b"\x1b[1;1Hpage one\x1b[2;1Hline two\x1b[4;1H\x1b[7m:\x1b[m");
        let screen = state.snapshot();
        assert!(screen.alternate_screen);
        assert!(!screen.cursor_visible);
        assert_eq!(screen.lines, vec!["page one", "line two", "", ":"]);
        assert!(state.key_modes().application_cursor);
        // A full redraw of another page replaces everything.
        state.process(b"\x1b[H\x1b[2Jpage two\x1b[4;1H(END)");
        assert_eq!(state.snapshot().lines, vec!["page two", "", "", "(END)"]);
        // Quitting puts the shell's screen back, cursor and all.
        state.process(b"\x1b[?1049l\x1b[?1l\x1b[?25h");
        let screen = state.snapshot();
        assert!(!screen.alternate_screen);
        assert!(screen.cursor_visible);
        assert_eq!(screen.text(), "$ less file");
        assert_eq!(screen.cursor, (1, 0));
        assert!(!state.key_modes().application_cursor);
    }

    #[test]
    fn rows_scrolled_off_the_top_become_scrollback() {
        let mut state = ScreenState::new(3, 20, 10);
        for n in 0..8 {
            state.process(format!("line {n}\r\n").as_bytes());
        }
        // Eight lines and the cursor's empty one on three rows: six scrolled off.
        let before = state.snapshot();
        assert_eq!(before.lines, vec!["line 6", "line 7", ""]);
        assert_eq!(state.scrollback_len(), 6);
        let all: Vec<String> = (0..6).map(|n| format!("line {n}")).collect();
        assert_eq!(state.scrollback(100), all);
        assert_eq!(state.scrollback(6), all);
        assert_eq!(state.scrollback(4), all[2..].to_vec());
        assert_eq!(state.scrollback(1), vec!["line 5".to_owned()]);
        assert_eq!(state.scrollback(0), Vec::<String>::new());
        // Reading the scrollback leaves the screen as it was.
        assert_eq!(state.snapshot(), before);
        state.process(b"next");
        assert_eq!(state.snapshot().lines, vec!["line 6", "line 7", "next"]);
        // Only the newest ten rows are kept.
        for n in 8..30 {
            state.process(format!("line {n}\r\n").as_bytes());
        }
        assert_eq!(state.scrollback_len(), 10);
        let kept = state.scrollback(100);
        assert_eq!(kept.len(), 10);
        assert_eq!(kept.last().map(String::as_str), Some("line 27"));
    }

    #[test]
    fn the_alternate_screen_has_no_scrollback() {
        let mut state = ScreenState::new(2, 20, 10);
        state.process(b"a\r\nb\r\nc\r\n");
        assert_eq!(state.scrollback(10), vec!["a", "b"]);
        state.process(b"\x1b[?1049h1\r\n2\r\n3\r\n");
        assert_eq!(state.scrollback(10), Vec::<String>::new());
        state.process(b"\x1b[?1049l");
        assert_eq!(state.scrollback(10), vec!["a", "b"]);
    }

    #[test]
    fn resize_keeps_the_text_and_clamps_the_size() {
        let mut state = fed(5, 20, b"hello world\r\nsecond");
        state.resize(10, 8);
        let screen = state.snapshot();
        assert_eq!((screen.rows, screen.cols), (10, 8));
        assert_eq!(screen.lines.len(), 10);
        assert_eq!(screen.lines[0], "hello wo");
        assert_eq!(screen.lines[1], "second");
        assert!(screen.cursor.1 < 8);
        state.resize(0, 0);
        let screen = state.snapshot();
        assert_eq!((screen.rows, screen.cols), (1, 1));
        state.resize(u16::MAX, u16::MAX);
        let screen = state.snapshot();
        assert_eq!((screen.rows, screen.cols), (MAX_ROWS, MAX_COLS));
        let state = ScreenState::new(0, u16::MAX, usize::MAX);
        let screen = state.snapshot();
        assert_eq!((screen.rows, screen.cols), (1, MAX_COLS));
    }

    #[test]
    fn shrinking_pushes_rows_into_scrollback_and_growing_pulls_them_back() {
        let mut state = fed(4, 20, b"1\r\n2\r\n3\r\n4");
        state.resize(2, 20);
        assert_eq!(state.snapshot().lines, vec!["3", "4"]);
        assert_eq!(state.scrollback(10), vec!["1", "2"]);
        state.resize(4, 20);
        assert_eq!(state.snapshot().lines, vec!["1", "2", "3", "4"]);
        assert_eq!(state.scrollback_len(), 0);
    }

    #[test]
    fn wide_characters_are_one_char_and_two_cells() {
        let state = fed(2, 20, "日本語 ok".as_bytes());
        let screen = state.snapshot();
        assert_eq!(screen.lines[0], "日本語 ok");
        assert_eq!(screen.cursor, (0, 9));
    }

    #[test]
    fn the_title_is_kept_bounded_and_clean() {
        let mut state = fed(2, 20, b"\x1b]0;first\x07");
        assert_eq!(state.snapshot().title, "first");
        state.process(b"\x1b]2;vim: a; b\x1b\\");
        assert_eq!(state.snapshot().title, "vim: a; b");
        state.process(b"\x1b]2;bad\x08\x7f\xff title\x07");
        // The backspace ends the OSC early in vte (a C0 control); what remains is cleaned.
        let title = state.snapshot().title;
        assert!(title.chars().all(|c| !c.is_control()), "{title:?}");
        let mut huge = b"\x1b]2;".to_vec();
        huge.extend(std::iter::repeat_n(b'T', 100 * 1024));
        huge.push(0x07);
        state.process(&huge);
        let title = state.snapshot().title;
        assert!(title.chars().count() <= MAX_TITLE_CHARS, "{}", title.len());
        assert!(title.starts_with("TTT"));
        // The text around it still draws.
        state.process(b"after");
        assert_eq!(state.snapshot().lines[0], "after");
    }

    #[test]
    fn an_unterminated_osc_swallows_only_until_it_ends() {
        let mut state = ScreenState::new(2, 20, 10);
        state.process(b"\x1b]2;");
        // Megabytes of title that never end (the parser's buffer stops at 1 KiB).
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..64 {
            state.process(&chunk);
        }
        state.process(b"\x07shown");
        let screen = state.snapshot();
        assert_eq!(screen.lines[0], "shown");
        assert!(screen.title.chars().count() <= MAX_TITLE_CHARS);
        assert_eq!(state.bytes_processed(), 4 + 64 * 64 * 1024 + 6);
    }

    #[test]
    fn the_parser_keeps_at_most_a_kibibyte_of_an_osc() {
        // Guards the build without `vt100`'s `std` feature (Cargo.toml): with it, the parser
        // would keep the whole sequence, and the title would end in "END". The C1 characters
        // fill its buffer and are then dropped from the title (but for one cut in half).
        let mut osc = b"\x1b]2;".to_vec();
        for _ in 0..600 {
            osc.extend_from_slice("\u{80}".as_bytes());
        }
        osc.extend_from_slice(b"END\x07");
        let state = fed(2, 20, &osc);
        let title = state.snapshot().title;
        assert!(!title.contains("END"), "{title:?}");
        assert!(title.chars().count() <= 1, "{title:?}");
    }

    #[test]
    fn invalid_utf8_is_dropped_and_a_cut_character_joined() {
        let mut state = fed(2, 20, b"a\xff\xfeb\xed\xa0\x80c\xc3");
        // The character cut at the end of a chunk is completed by the next one...
        state.process(b"\xa9!");
        assert_eq!(state.snapshot().lines[0], "abcé!");
        // ...or never is.
        state.process(b"\xe2\x82z");
        assert_eq!(state.snapshot().lines[0], "abcé!z");
        // A raw C1 byte is dropped too: 0x9b is not taken as an 8-bit CSI.
        state.process(b"\x9b1;1H.");
        assert_eq!(state.snapshot().lines[0], "abcé!z1;1H.");
    }

    #[test]
    fn a_megabyte_in_one_call_is_fine() {
        let mut state = ScreenState::new(24, 80, MAX_SCROLLBACK_LINES);
        let mut bytes = Vec::with_capacity(1 << 20);
        let mut n = 0;
        while bytes.len() < 1 << 20 {
            bytes.extend_from_slice(format!("\x1b[3{}mline {n}\x1b[m\r\n", n % 8).as_bytes());
            n += 1;
        }
        state.process(&bytes);
        assert_eq!(state.bytes_processed(), u64::try_from(bytes.len()).unwrap());
        assert_eq!(state.scrollback_len(), MAX_SCROLLBACK_LINES);
        let screen = state.snapshot();
        assert_eq!(screen.lines[22], format!("line {}", n - 1));
        assert_eq!(state.scrollback(1), vec![format!("line {}", n - 24)]);
        // One unbroken megabyte of text wraps (and scrolls) the same way.
        state.process(&vec![b'y'; 1 << 20]);
        let screen = state.snapshot();
        assert_eq!(screen.lines[22], "y".repeat(80));
        assert_eq!(screen.lines[23], "y".repeat((1 << 20) % 80));
    }

    #[test]
    fn a_program_cannot_resize_the_terminal() {
        let mut state = fed(24, 80, b"\x1b[8;5;10t\x1b[8;9999;9999t\x1b[8;0;0t");
        state.process(b"\x1b[?3h"); // DECCOLM, 132 columns on a VT100
        let screen = state.snapshot();
        assert_eq!((screen.rows, screen.cols), (24, 80));
    }

    #[test]
    fn queries_get_no_reply_and_change_nothing() {
        let mut state = fed(3, 20, b"prompt$ ");
        let version = state.version();
        let before = state.snapshot();
        // DA1, DA2, DSR status, DSR cursor position, DECRQM, XTVERSION, a bell.
        state.process(b"\x1b[c\x1b[>c\x1b[5n\x1b[6n\x1b[?25$p\x1b[>0q\x07");
        assert_eq!(state.snapshot(), before);
        assert_eq!(state.version(), version);
    }

    #[test]
    fn huge_parameters_are_clamped_to_the_screen() {
        let mut state = fed(5, 10, b"\x1b[99999999C");
        assert_eq!(state.snapshot().cursor, (0, 9));
        state.process(b"\x1b[99999999;99999999H");
        assert_eq!(state.snapshot().cursor, (4, 9));
        state.process(b"\x1b[99999999A\x1b[99999999D");
        assert_eq!(state.snapshot().cursor, (0, 0));
        state.process(b"x\x1b[99999999b"); // REP: repeat the last character
        assert!(state.snapshot().lines[0].len() <= 10);
        // Insert and delete lines and characters, scroll, erase, a scroll region, tabs.
        state.process(
            b"\x1b[99999999L\x1b[99999999M\x1b[99999999@\x1b[99999999P\x1b[99999999S\
              \x1b[99999999T\x1b[99999999X\x1b[99999999;99999999r\x1b[99999999I\x1b[99999999Z\
              \x1b[99999999d\x1b[99999999G\x1b[99999999E\x1b[99999999F",
        );
        // Thousands of parameters, and colon sub-parameters.
        let mut many = b"\x1b[".to_vec();
        for _ in 0..5_000 {
            many.extend_from_slice(b"1;");
        }
        many.extend_from_slice(b"38:2:255:0:0m\x1b[");
        many.extend(std::iter::repeat_n(b'9', 10_000));
        many.extend_from_slice(b"mok");
        state.process(&many);
        let screen = state.snapshot();
        assert_eq!((screen.rows, screen.cols), (5, 10));
        assert!(screen.cursor.0 < 5 && screen.cursor.1 < 10);
    }

    #[test]
    fn random_bytes_never_panic() {
        // A fixed xorshift stream, weighted towards ESC and the bytes that make sequences.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"\x1b\x1b\x1b[[[]]];;;?0123456789:$>!\"'#%()*+-.PX^_\\\x07\x08\x09\x0a\x0d\x0e\x0fABCDEFGHJKLMPSTXZ@`abcdfghlmnqrstu~\xc3\xa9\xe2\x82\xff\x9b\x9d\x90";
        let mut state = ScreenState::new(7, 13, 50);
        for round in 0..400 {
            let chunk: Vec<u8> = (0..2_000)
                .map(|_| {
                    let r = next();
                    let index = usize::try_from(r % 64).unwrap();
                    if index < alphabet.len() {
                        alphabet[index]
                    } else {
                        u8::try_from(r >> 56).unwrap()
                    }
                })
                .collect();
            state.process(&chunk);
            if round % 50 == 0 {
                let r = next();
                state.resize(
                    u16::try_from(r % 30).unwrap(),
                    u16::try_from((r >> 8) % 50).unwrap(),
                );
                let _ = state.scrollback(usize::try_from((r >> 16) % 100).unwrap());
            }
            let screen = state.snapshot();
            assert_eq!(screen.lines.len(), usize::from(screen.rows));
            assert!(screen.cursor.0 < screen.rows && screen.cursor.1 < screen.cols);
            assert!(screen.title.chars().count() <= MAX_TITLE_CHARS);
            let _ = screen.render();
        }
        assert!(state.scrollback_len() <= 50);
    }

    #[test]
    fn the_version_counts_changes_and_only_changes() {
        let mut state = ScreenState::new(3, 20, 10);
        assert_eq!(state.version(), 0);
        state.process(b"");
        assert_eq!(state.version(), 0);
        state.process(b"hello");
        assert_eq!(state.version(), 1);
        // A cursor move is a change; the same text written over itself is not.
        state.process(b"\x1b[1;1H");
        assert_eq!(state.version(), 2);
        state.process(b"hello\x1b[1;1H");
        assert_eq!(state.version(), 2);
        // A highlight that moves changes only attributes, but that was drawn too.
        state.process(b"\x1b[7mhello\x1b[m\x1b[1;1H");
        assert_eq!(state.version(), 3);
        assert_eq!(state.snapshot().text(), "hello");
        state.process(b"\x1b]2;title\x07");
        assert_eq!(state.version(), 4);
        state.process(b"\x1b[?1049h");
        assert_eq!(state.version(), 5);
        // A resize is a change; resizing to the same size is not.
        state.resize(4, 20);
        assert_eq!(state.version(), 6);
        state.resize(4, 20);
        assert_eq!(state.version(), 6);
        // A sequence split across chunks counts when it completes.
        state.process(b"\x1b[");
        assert_eq!(state.version(), 6);
        state.process(b"2;2H");
        assert_eq!(state.version(), 7);
        assert_eq!(state.bytes_processed(), 5 + 6 + 11 + 18 + 10 + 8 + 2 + 4);
    }

    #[test]
    fn render_puts_the_state_in_a_header_and_the_rows_after_it() {
        let state = fed(24, 80, b"$ ls\r\nfile\r\n$ ");
        assert_eq!(
            state.snapshot().render(),
            "[screen 24 rows x 80 cols, cursor at row 2 col 2]\n$ ls\nfile\n$"
        );
        // The cursor's row is listed even when it is empty and below the text.
        let state = fed(5, 10, b"top\x1b[4;3H");
        assert_eq!(
            state.snapshot().render(),
            "[screen 5 rows x 10 cols, cursor at row 3 col 2]\ntop\n\n\n"
        );
        let state = fed(
            3,
            10,
            b"\x1b]2;evil\"] title\x07\x1b[?1049h\x1b[?25l\x1b[2;1Hmenu",
        );
        assert_eq!(
            state.snapshot().render(),
            "[screen 3 rows x 10 cols, cursor at row 1 col 4, cursor hidden, alternate screen, \
             title \"evil\\\"] title\"]\n\nmenu"
        );
        let state = ScreenState::new(2, 10, 0);
        assert_eq!(
            state.snapshot().render(),
            "[screen 2 rows x 10 cols, cursor at row 0 col 0]\n"
        );
    }

    #[test]
    fn text_drops_only_the_empty_rows_at_the_bottom() {
        let state = fed(6, 10, b"\r\n\r\nmiddle\r\n\r\n");
        assert_eq!(state.snapshot().text(), "\n\nmiddle");
        assert_eq!(ScreenState::new(3, 3, 0).snapshot().text(), "");
    }
}
