//! Keys an agent sends to a terminal: their names, as models and people type them, and the
//! bytes a terminal would send for them.
//!
//! A program in a pseudo-terminal never sees "the Up key", only bytes, and which bytes depends
//! on a mode the program chose: in application cursor mode (DECCKM, set by full-screen
//! programs such as vi and less) the arrows are `ESC O A`.., otherwise `ESC [ A`... The
//! encoder takes that mode from the screen (see `ScreenState::key_modes`) so a key means to
//! the program what it would mean typed into xterm. Everything else is xterm's encoding, which
//! is what `TERM=xterm*` programs expect.
//!
//! Text is not a key: a word to type is sent as its bytes, not as a list of keys.

use std::{fmt, str::FromStr};

/// A key (or key chord) to send to a terminal.
///
/// Parse one from its name (`"Enter"`, `"Ctrl-C"`, `"^C"`, `"M-x"`, `"F5"`, ...; see
/// [`FromStr`](#impl-FromStr-for-Key)); [`Display`](fmt::Display) gives the canonical name,
/// which parses back to the same key.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// Enter (Return): a carriage return, which is what a terminal sends.
    Enter,
    /// Tab.
    Tab,
    /// Shift-Tab (back tab).
    BackTab,
    /// Escape.
    Escape,
    /// Backspace: DEL (0x7f), what xterm and most terminals send.
    Backspace,
    /// Delete (forward delete).
    Delete,
    /// Insert.
    Insert,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Arrow left.
    Left,
    /// Arrow right.
    Right,
    /// Home.
    Home,
    /// End.
    End,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// A function key, F1 to F12; another number sends nothing.
    F(u8),
    /// Control and a key: a letter (either case), one of `@ [ \ ] ^ _ ?`, or space
    /// (Ctrl-Space, the same byte as Ctrl-@). Another character sends nothing.
    Ctrl(char),
    /// Alt (Meta) and a character: ESC followed by the character, as xterm sends it with
    /// `metaSendsEscape` and as every readline and Emacs binding understands it.
    Alt(char),
    /// The space bar.
    Space,
}

/// The terminal modes that change what a key sends, as the program running in the terminal
/// last set them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeyModes {
    /// Application cursor mode (DECCKM): arrows, Home and End are `ESC O x` rather than
    /// `ESC [ x`.
    pub(crate) application_cursor: bool,
}

/// The bytes a terminal sends for `key` in the given modes (empty for a key that has no
/// encoding: a function key outside F1..F12, Ctrl with a character that has no control code).
pub(crate) fn encode(key: Key, modes: KeyModes) -> Vec<u8> {
    // The cursor keys' final byte; their introducer depends on DECCKM.
    let cursor = |final_byte: u8| {
        if modes.application_cursor {
            vec![0x1b, b'O', final_byte]
        } else {
            vec![0x1b, b'[', final_byte]
        }
    };
    // `ESC [ n ~`, xterm's form for the editing keys and F5 up.
    let tilde = |number: &str| {
        let mut bytes = b"\x1b[".to_vec();
        bytes.extend_from_slice(number.as_bytes());
        bytes.push(b'~');
        bytes
    };
    match key {
        Key::Enter => b"\r".to_vec(),
        Key::Tab => b"\t".to_vec(),
        Key::BackTab => b"\x1b[Z".to_vec(),
        Key::Escape => b"\x1b".to_vec(),
        Key::Backspace => vec![0x7f],
        Key::Delete => tilde("3"),
        Key::Insert => tilde("2"),
        Key::Up => cursor(b'A'),
        Key::Down => cursor(b'B'),
        Key::Right => cursor(b'C'),
        Key::Left => cursor(b'D'),
        Key::Home => cursor(b'H'),
        Key::End => cursor(b'F'),
        Key::PageUp => tilde("5"),
        Key::PageDown => tilde("6"),
        // F1..F4 are SS3 sequences (the VT100's PF1..PF4) in every mode.
        Key::F(1) => b"\x1bOP".to_vec(),
        Key::F(2) => b"\x1bOQ".to_vec(),
        Key::F(3) => b"\x1bOR".to_vec(),
        Key::F(4) => b"\x1bOS".to_vec(),
        // The gaps (16, 22) are the VT220's, kept by xterm.
        Key::F(5) => tilde("15"),
        Key::F(6) => tilde("17"),
        Key::F(7) => tilde("18"),
        Key::F(8) => tilde("19"),
        Key::F(9) => tilde("20"),
        Key::F(10) => tilde("21"),
        Key::F(11) => tilde("23"),
        Key::F(12) => tilde("24"),
        Key::F(_) => Vec::new(),
        Key::Ctrl(c) => control_code(c).map(|b| vec![b]).unwrap_or_default(),
        Key::Alt(c) => {
            let mut bytes = vec![0x1b];
            let mut utf8 = [0; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            bytes
        }
        Key::Space => b" ".to_vec(),
    }
}

/// The control code Ctrl-`c` produces, if it has one.
fn control_code(c: char) -> Option<u8> {
    match c {
        // Ctrl-Space is NUL in xterm, the same as Ctrl-@ (Emacs' set-mark).
        ' ' => Some(0),
        // DEL: Ctrl-? is how stty and terminals name it.
        '?' => Some(0x7f),
        // A letter clears its case and high bits: Ctrl-A is 0x01; '@' [ \ ] ^ _ are the
        // codes either side of the letters (0x00 and 0x1b..0x1f).
        'a'..='z' | 'A'..='Z' | '@' | '[' | '\\' | ']' | '^' | '_' => {
            u8::try_from(c).ok().map(|b| b.to_ascii_uppercase() & 0x1f)
        }
        _ => None,
    }
}

/// The forms the parser accepts, for error messages: a model that got a name wrong reads this
/// and retries with one that works.
const ACCEPTED_FORMS: &str = "Enter (Return, CR), Tab, Shift-Tab (BackTab), Escape (Esc), \
     Backspace (BS), Delete (Del), Insert (Ins), Up, Down, Left, Right (ArrowUp, ...), Home, \
     End, PageUp (PgUp), PageDown (PgDn), F1..F12, Space, Ctrl-<letter> (Ctrl+C, C-c, ^C; also \
     Ctrl-@ [ \\ ] ^ _ ? and Ctrl-Space), Alt-<char> (Alt+x, M-x, Meta-x)";

/// Characters of a rejected name echoed in the error (the rest is elided): the name may be
/// anything a model produced.
const ECHOED_NAME_CHARS: usize = 40;

/// Why a key name did not parse; its message names the forms that do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyParseError {
    /// The whole message: the rejected name, what is wrong with it and the accepted forms.
    message: String,
}

impl KeyParseError {
    fn new(name: &str, problem: &str) -> Self {
        let mut echoed: String = name.chars().take(ECHOED_NAME_CHARS).collect();
        if name.chars().nth(ECHOED_NAME_CHARS).is_some() {
            echoed.push_str("...");
        }
        Self {
            message: format!("key {echoed:?} {problem}; keys are {ACCEPTED_FORMS}"),
        }
    }
}

impl fmt::Display for KeyParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KeyParseError {}

/// Modifier prefixes, lowercase, longest first where one is a prefix of another.
const CTRL_PREFIXES: &[&str] = &["control-", "control+", "ctrl-", "ctrl+", "ctl-", "c-", "^"];
const ALT_PREFIXES: &[&str] = &["meta-", "meta+", "alt-", "alt+", "m-"];

/// Parses a key name, ignoring case (except the character after Alt, since Alt-x and Alt-X
/// are different keys) and ignoring `-`, `_` and spaces inside named keys (`Page Up`,
/// `page_up`, `PageUp` and `Page-Up` are one key).
impl FromStr for Key {
    type Err = KeyParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let name = text.trim();
        if name.is_empty() {
            return Err(KeyParseError::new(text, "is empty"));
        }
        if let Some(rest) = strip_prefix_ignoring_case(name, CTRL_PREFIXES) {
            let c = modified_char(rest)
                .ok_or_else(|| KeyParseError::new(name, "has no single character after Ctrl"))?;
            if control_code(c).is_none() {
                return Err(KeyParseError::new(
                    name,
                    "is not a control key (Ctrl goes with a letter, @ [ \\ ] ^ _ ? or Space)",
                ));
            }
            // One spelling per chord, so Ctrl-c and Ctrl-C are the same `Key`.
            return Ok(Key::Ctrl(c.to_ascii_uppercase()));
        }
        if let Some(rest) = strip_prefix_ignoring_case(name, ALT_PREFIXES) {
            let c = modified_char(rest)
                .ok_or_else(|| KeyParseError::new(name, "has no single character after Alt"))?;
            if c.is_control() {
                return Err(KeyParseError::new(
                    name,
                    "has a control character after Alt",
                ));
            }
            return Ok(Key::Alt(c));
        }
        let normalized: String = name
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .flat_map(char::to_lowercase)
            .collect();
        let key = match normalized.as_str() {
            "enter" | "return" | "ret" | "cr" => Key::Enter,
            "tab" => Key::Tab,
            "shifttab" | "shift+tab" | "stab" | "backtab" | "btab" => Key::BackTab,
            "esc" | "escape" => Key::Escape,
            "backspace" | "bs" | "bksp" => Key::Backspace,
            "delete" | "del" => Key::Delete,
            "insert" | "ins" => Key::Insert,
            "up" | "arrowup" | "uparrow" => Key::Up,
            "down" | "arrowdown" | "downarrow" => Key::Down,
            "left" | "arrowleft" | "leftarrow" => Key::Left,
            "right" | "arrowright" | "rightarrow" => Key::Right,
            "home" => Key::Home,
            "end" => Key::End,
            "pageup" | "pgup" | "prior" => Key::PageUp,
            "pagedown" | "pgdn" | "pgdown" | "next" => Key::PageDown,
            "space" | "spacebar" => Key::Space,
            other => match other.strip_prefix('f').and_then(|n| n.parse::<u8>().ok()) {
                // `parse` also takes "+5" and "05"; only the plain number is a key name.
                Some(n @ 1..=12) if other.len() == 1 + n.to_string().len() => Key::F(n),
                Some(_) => {
                    return Err(KeyParseError::new(
                        name,
                        "is not a function key this terminal has (F1..F12)",
                    ));
                }
                None if name.chars().count() == 1 => {
                    return Err(KeyParseError::new(
                        name,
                        "is a character, not a key name (send text as text)",
                    ));
                }
                None => return Err(KeyParseError::new(name, "is not a key name")),
            },
        };
        Ok(key)
    }
}

/// `name` without the first of `prefixes` it starts with, ignoring ASCII case.
fn strip_prefix_ignoring_case<'a>(name: &'a str, prefixes: &[&str]) -> Option<&'a str> {
    prefixes.iter().find_map(|prefix| {
        let head = name.get(..prefix.len())?;
        head.eq_ignore_ascii_case(prefix)
            .then(|| name.get(prefix.len()..))
            .flatten()
    })
}

/// The character a modifier applies to: one character, or the word `Space`.
fn modified_char(rest: &str) -> Option<char> {
    if rest.eq_ignore_ascii_case("space") {
        return Some(' ');
    }
    let mut chars = rest.chars();
    let c = chars.next()?;
    chars.next().is_none().then_some(c)
}

/// The canonical name, which [`FromStr`] parses back to the same key: `Enter`, `Shift-Tab`,
/// `Escape`, `PageUp`, `F5`, `Ctrl-C`, `Ctrl-Space`, `Alt-x`, ...
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Key::Enter => "Enter",
            Key::Tab => "Tab",
            Key::BackTab => "Shift-Tab",
            Key::Escape => "Escape",
            Key::Backspace => "Backspace",
            Key::Delete => "Delete",
            Key::Insert => "Insert",
            Key::Up => "Up",
            Key::Down => "Down",
            Key::Left => "Left",
            Key::Right => "Right",
            Key::Home => "Home",
            Key::End => "End",
            Key::PageUp => "PageUp",
            Key::PageDown => "PageDown",
            Key::Space => "Space",
            Key::F(n) => return write!(f, "F{n}"),
            Key::Ctrl(' ') => "Ctrl-Space",
            Key::Ctrl(c) => return write!(f, "Ctrl-{}", c.to_ascii_uppercase()),
            Key::Alt(' ') => "Alt-Space",
            Key::Alt(c) => return write!(f, "Alt-{c}"),
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str) -> Key {
        name.parse()
            .unwrap_or_else(|e| panic!("{name:?} did not parse: {e}"))
    }

    const NORMAL: KeyModes = KeyModes {
        application_cursor: false,
    };
    const APPLICATION: KeyModes = KeyModes {
        application_cursor: true,
    };

    #[test]
    fn named_keys_parse_in_every_spelling() {
        let cases: &[(&[&str], Key)] = &[
            (
                &["Enter", "enter", "RETURN", "Return", "CR", "ret"],
                Key::Enter,
            ),
            (&["Tab", "TAB", "tab"], Key::Tab),
            (
                &[
                    "Shift-Tab",
                    "shift+tab",
                    "SHIFT_TAB",
                    "BackTab",
                    "btab",
                    "S-Tab",
                ],
                Key::BackTab,
            ),
            (&["Esc", "ESC", "Escape", "escape"], Key::Escape),
            (
                &["Backspace", "BS", "bs", "BkSp", "Back Space"],
                Key::Backspace,
            ),
            (&["Delete", "Del", "DEL"], Key::Delete),
            (&["Insert", "Ins"], Key::Insert),
            (
                &["Up", "ArrowUp", "arrow-up", "Arrow_Up", "UpArrow"],
                Key::Up,
            ),
            (&["Down", "ArrowDown", "arrow down"], Key::Down),
            (&["Left", "ArrowLeft", "LEFT"], Key::Left),
            (&["Right", "ArrowRight", "right"], Key::Right),
            (&["Home", "HOME"], Key::Home),
            (&["End", "end"], Key::End),
            (
                &["PageUp", "Page Up", "page_up", "PgUp", "Prior"],
                Key::PageUp,
            ),
            (
                &["PageDown", "Page-Down", "PgDn", "pgdown", "Next"],
                Key::PageDown,
            ),
            (&["Space", "space", "SpaceBar"], Key::Space),
        ];
        for (names, key) in cases {
            for name in *names {
                assert_eq!(parse(name), *key, "{name:?}");
            }
        }
        // Whitespace around a name is not part of it.
        assert_eq!(parse("  Enter  "), Key::Enter);
        assert_eq!(parse("\tTab\n"), Key::Tab);
    }

    #[test]
    fn function_keys_parse_from_f1_to_f12() {
        for n in 1..=12_u8 {
            assert_eq!(parse(&format!("F{n}")), Key::F(n));
            assert_eq!(parse(&format!("f{n}")), Key::F(n));
        }
        for bad in ["F0", "F13", "F99", "F+5", "F05", "F", "F256"] {
            assert!(bad.parse::<Key>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn control_chords_parse_in_every_spelling() {
        for name in [
            "Ctrl-C", "ctrl-c", "Ctrl+C", "CTRL+c", "C-c", "c-C", "^C", "^c",
        ] {
            assert_eq!(parse(name), Key::Ctrl('C'), "{name:?}");
        }
        assert_eq!(parse("Control-x"), Key::Ctrl('X'));
        assert_eq!(parse("Ctl-d"), Key::Ctrl('D'));
        for (name, c) in [
            ("Ctrl-[", '['),
            ("^[", '['),
            ("Ctrl-\\", '\\'),
            ("^]", ']'),
            ("Ctrl-^", '^'),
            ("^^", '^'),
            ("C-_", '_'),
            ("Ctrl-@", '@'),
            ("^?", '?'),
            ("Ctrl-Space", ' '),
            ("C-space", ' '),
        ] {
            assert_eq!(parse(name), Key::Ctrl(c), "{name:?}");
        }
        for bad in ["Ctrl-", "^", "Ctrl-1", "Ctrl-é", "Ctrl-Left", "C-xy", "^ab"] {
            assert!(bad.parse::<Key>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn alt_chords_keep_the_case_of_their_character() {
        assert_eq!(parse("Alt-x"), Key::Alt('x'));
        assert_eq!(parse("ALT-X"), Key::Alt('X'));
        assert_eq!(parse("alt+f"), Key::Alt('f'));
        assert_eq!(parse("M-x"), Key::Alt('x'));
        assert_eq!(parse("m-<"), Key::Alt('<'));
        assert_eq!(parse("Meta-b"), Key::Alt('b'));
        assert_eq!(parse("Alt--"), Key::Alt('-'));
        assert_eq!(parse("Alt-Space"), Key::Alt(' '));
        assert_eq!(parse("Alt-é"), Key::Alt('é'));
        for bad in ["Alt-", "M-", "Alt-xy", "Alt-\u{7}"] {
            assert!(bad.parse::<Key>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn errors_name_the_key_and_the_accepted_forms() {
        let error = "Bogus".parse::<Key>().unwrap_err().to_string();
        assert!(error.contains("\"Bogus\" is not a key name"), "{error}");
        assert!(error.contains("Ctrl-<letter>"), "{error}");
        assert!(error.contains("F1..F12"), "{error}");
        let error = "q".parse::<Key>().unwrap_err().to_string();
        assert!(error.contains("send text as text"), "{error}");
        let error = "".parse::<Key>().unwrap_err().to_string();
        assert!(error.contains("is empty"), "{error}");
        // A huge name is echoed only in part.
        let error = "x".repeat(100_000).parse::<Key>().unwrap_err().to_string();
        assert!(error.len() < 1_000, "{} bytes", error.len());
        assert!(error.contains("xxx..."), "{error}");
    }

    #[test]
    fn display_is_canonical_and_parses_back() {
        let mut keys = vec![
            Key::Enter,
            Key::Tab,
            Key::BackTab,
            Key::Escape,
            Key::Backspace,
            Key::Delete,
            Key::Insert,
            Key::Up,
            Key::Down,
            Key::Left,
            Key::Right,
            Key::Home,
            Key::End,
            Key::PageUp,
            Key::PageDown,
            Key::Space,
            Key::Alt('x'),
            Key::Alt('X'),
            Key::Alt(' '),
            Key::Alt('-'),
            Key::Ctrl(' '),
        ];
        keys.extend((1..=12).map(Key::F));
        keys.extend(('A'..='Z').map(Key::Ctrl));
        keys.extend(['@', '[', '\\', ']', '^', '_', '?'].map(Key::Ctrl));
        for key in keys {
            assert_eq!(parse(&key.to_string()), key, "{key}");
        }
        assert_eq!(Key::BackTab.to_string(), "Shift-Tab");
        assert_eq!(Key::Ctrl('c').to_string(), "Ctrl-C");
        assert_eq!(Key::Ctrl(' ').to_string(), "Ctrl-Space");
        assert_eq!(Key::F(10).to_string(), "F10");
        assert_eq!(Key::Alt('x').to_string(), "Alt-x");
    }

    #[test]
    fn cursor_keys_follow_application_cursor_mode() {
        for (key, final_byte) in [
            (Key::Up, b'A'),
            (Key::Down, b'B'),
            (Key::Right, b'C'),
            (Key::Left, b'D'),
            (Key::Home, b'H'),
            (Key::End, b'F'),
        ] {
            assert_eq!(encode(key, NORMAL), vec![0x1b, b'[', final_byte], "{key}");
            assert_eq!(
                encode(key, APPLICATION),
                vec![0x1b, b'O', final_byte],
                "{key}"
            );
        }
    }

    #[test]
    fn other_keys_are_xterm_encoded_in_either_mode() {
        let cases: &[(Key, &[u8])] = &[
            (Key::Enter, b"\r"),
            (Key::Tab, b"\t"),
            (Key::BackTab, b"\x1b[Z"),
            (Key::Escape, b"\x1b"),
            (Key::Backspace, b"\x7f"),
            (Key::Delete, b"\x1b[3~"),
            (Key::Insert, b"\x1b[2~"),
            (Key::PageUp, b"\x1b[5~"),
            (Key::PageDown, b"\x1b[6~"),
            (Key::Space, b" "),
            (Key::F(1), b"\x1bOP"),
            (Key::F(2), b"\x1bOQ"),
            (Key::F(3), b"\x1bOR"),
            (Key::F(4), b"\x1bOS"),
            (Key::F(5), b"\x1b[15~"),
            (Key::F(6), b"\x1b[17~"),
            (Key::F(7), b"\x1b[18~"),
            (Key::F(8), b"\x1b[19~"),
            (Key::F(9), b"\x1b[20~"),
            (Key::F(10), b"\x1b[21~"),
            (Key::F(11), b"\x1b[23~"),
            (Key::F(12), b"\x1b[24~"),
            (Key::Alt('x'), b"\x1bx"),
            (Key::Alt('X'), b"\x1bX"),
            (Key::Alt('é'), "\x1bé".as_bytes()),
        ];
        for (key, bytes) in cases {
            for modes in [NORMAL, APPLICATION] {
                assert_eq!(encode(*key, modes), bytes.to_vec(), "{key} in {modes:?}");
            }
        }
    }

    #[test]
    fn control_chords_are_their_control_codes() {
        assert_eq!(encode(parse("Ctrl-C"), NORMAL), vec![0x03]);
        assert_eq!(encode(parse("^D"), NORMAL), vec![0x04]);
        assert_eq!(encode(Key::Ctrl('a'), NORMAL), vec![0x01]);
        assert_eq!(encode(Key::Ctrl('Z'), NORMAL), vec![0x1a]);
        for (c, code) in ('A'..='Z').zip(1_u8..) {
            assert_eq!(encode(Key::Ctrl(c), NORMAL), vec![code], "Ctrl-{c}");
        }
        for (name, code) in [
            ("Ctrl-@", 0x00),
            ("Ctrl-Space", 0x00),
            ("Ctrl-[", 0x1b),
            ("Ctrl-\\", 0x1c),
            ("Ctrl-]", 0x1d),
            ("Ctrl-^", 0x1e),
            ("Ctrl-_", 0x1f),
            ("Ctrl-?", 0x7f),
        ] {
            assert_eq!(encode(parse(name), NORMAL), vec![code], "{name}");
        }
    }

    #[test]
    fn keys_without_an_encoding_send_nothing() {
        assert_eq!(encode(Key::F(0), NORMAL), Vec::<u8>::new());
        assert_eq!(encode(Key::F(13), APPLICATION), Vec::<u8>::new());
        assert_eq!(encode(Key::Ctrl('1'), NORMAL), Vec::<u8>::new());
        assert_eq!(encode(Key::Ctrl('é'), NORMAL), Vec::<u8>::new());
    }
}
