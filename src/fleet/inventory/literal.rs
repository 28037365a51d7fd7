//! Values as Ansible types them, and the Python text rules its INI plugin and ssh connection
//! plugin apply: `ast.literal_eval` for INI values, `shlex.split` for host lines and ssh
//! arguments, `int()` for ranges and priorities, `repr()` for floats.

/// A variable's value as Ansible types it, before it is kept as text.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Null,
    Bool(bool),
    /// Decimal digits, with a `-` when negative.
    Int(String),
    Float(f64),
    Str(String),
    /// A list or a map, kept as text: YAML for YAML sources, JSON for JSON sources, the
    /// literal as written for INI.
    Composite(String),
}

impl Value {
    /// The text the inventory keeps: strings as they are, integers in decimal, booleans as
    /// `true`/`false`, null as empty, floats as Python prints them.
    pub(super) fn into_text(self) -> String {
        match self {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(s) | Value::Str(s) | Value::Composite(s) => s,
            Value::Float(f) => python_float_repr(f),
        }
    }

    /// `int(value)` as `Group.set_priority` takes `ansible_group_priority`: `Ok(None)` where
    /// Python raises `TypeError` (Ansible ignores those), `Err` where it raises `ValueError`.
    pub(super) fn as_priority(&self) -> Result<Option<i64>, String> {
        let bad = || {
            format!(
                "ansible_group_priority `{}` is not an integer",
                self.clone().into_text()
            )
        };
        match self {
            Value::Null | Value::Composite(_) => Ok(None),
            Value::Bool(b) => Ok(Some(i64::from(*b))),
            Value::Int(digits) => digits.parse().map(Some).map_err(|_| bad()),
            Value::Float(f) if f.is_finite() => Ok(Some(f.trunc() as i64)),
            Value::Float(_) => Err(bad()),
            Value::Str(s) => python_int(s)
                .and_then(|i| i64::try_from(i).ok())
                .map(Some)
                .ok_or_else(bad),
        }
    }
}

/// Integer text in canonical decimal form: no `+`, no leading zeros, no `-0`.
pub(super) fn canonical_int(negative: bool, digits: &str) -> String {
    let digits = digits.trim_start_matches('0');
    match (negative, digits.is_empty()) {
        (_, true) => "0".to_owned(),
        (true, false) => format!("-{digits}"),
        (false, false) => digits.to_owned(),
    }
}

/// Python's `int(text)` in base 10: surrounding whitespace, a sign, digits with single
/// underscores between them.
pub(super) fn python_int(text: &str) -> Option<i128> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let clean = underscored_digits(digits, |c| c.is_ascii_digit())?;
    let value: i128 = clean.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// `digits` without its underscores, when every underscore sits between two digits.
fn underscored_digits(digits: &str, is_digit: impl Fn(char) -> bool) -> Option<String> {
    let mut out = String::with_capacity(digits.len());
    let mut previous_digit = false;
    let mut chars = digits.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '_' {
            if !previous_digit || !chars.peek().is_some_and(|n| is_digit(*n)) {
                return None;
            }
            previous_digit = false;
        } else if is_digit(c) {
            out.push(c);
            previous_digit = true;
        } else {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Python's `repr(float)`: the shortest text that reads back as the same number, in
/// positional notation for exponents from -4 to 15 and scientific notation otherwise.
pub(super) fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // Rust's `{:e}` is the shortest round-trip form too: `1.5e0`, `1e16`, `-2.5e-7`.
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        if point <= 0 {
            let zeros = "0".repeat(point.unsigned_abs() as usize);
            format!("{sign}0.{zeros}{digits}")
        } else {
            let point = point as usize;
            if digits.len() <= point {
                let zeros = "0".repeat(point - digits.len());
                format!("{sign}{digits}{zeros}.0")
            } else {
                let (whole, fraction) = digits.split_at(point);
                format!("{sign}{whole}.{fraction}")
            }
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{first}{fraction}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        )
    }
}

/// Python's `shlex.split(text, comments=…)` in POSIX mode: `'` and `"` quotes, `\`
/// escapes (inside `"` only before `"` and `\`), and with `comments` a `#` ends the line,
/// even in the middle of a word.
pub(super) fn shlex_split(text: &str, comments: bool) -> Result<Vec<String>, String> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Between,
        Word,
        Quote(char),
        Escape { back_to: Option<char> },
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut state = State::Between;
    let mut chars = text.chars();
    let emit = |word: &mut String, quoted: &mut bool, words: &mut Vec<String>| {
        if !word.is_empty() || *quoted {
            words.push(std::mem::take(word));
        }
        *quoted = false;
    };
    loop {
        let next = chars.next();
        match state {
            State::Between | State::Word => match next {
                None => {
                    emit(&mut word, &mut quoted, &mut words);
                    return Ok(words);
                }
                Some(' ' | '\t' | '\r' | '\n') => {
                    emit(&mut word, &mut quoted, &mut words);
                    state = State::Between;
                }
                Some('#') if comments => {
                    emit(&mut word, &mut quoted, &mut words);
                    // `readline()`: the rest of the line is the comment.
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                    state = State::Between;
                }
                Some('\\') => state = State::Escape { back_to: None },
                Some(q @ ('\'' | '"')) => state = State::Quote(q),
                Some(c) => {
                    word.push(c);
                    state = State::Word;
                }
            },
            State::Quote(q) => {
                quoted = true;
                match next {
                    None => return Err("no closing quotation".to_owned()),
                    Some(c) if c == q => state = State::Word,
                    Some('\\') if q == '"' => state = State::Escape { back_to: Some(q) },
                    Some(c) => word.push(c),
                }
            }
            State::Escape { back_to } => {
                let Some(c) = next else {
                    return Err("no escaped character".to_owned());
                };
                // Inside quotes only the quote itself or the backslash is escaped.
                if let Some(q) = back_to
                    && c != '\\'
                    && c != q
                {
                    word.push('\\');
                }
                word.push(c);
                state = match back_to {
                    Some(q) => State::Quote(q),
                    None => State::Word,
                };
            }
        }
    }
}

/// An INI value as the INI plugin's `_parse_value` types it: `ast.literal_eval`, falling
/// back to the text itself.
pub(super) fn ini_value(text: &str) -> Value {
    let mut parser = Literal {
        chars: text.trim_start_matches([' ', '\t']).chars().collect(),
        at: 0,
    };
    match parser.whole() {
        Some(Parsed::Value(value)) => value,
        Some(Parsed::Container) | None => Value::Str(text.to_owned()),
    }
}

enum Parsed {
    Value(Value),
    /// A list, tuple, dict or set (or something Python would refuse): kept as written.
    Container,
}

/// A recursive-descent reader of the Python literals `ast.literal_eval` accepts, for one
/// scalar: numbers (signed), strings (with prefixes, escapes and implicit concatenation),
/// `True`, `False`, `None`, `...`, in parentheses or not.
struct Literal {
    chars: Vec<char>,
    at: usize,
}

impl Literal {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.at + offset).copied()
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\x0c')) {
            self.at += 1;
        }
    }

    fn whole(&mut self) -> Option<Parsed> {
        if matches!(self.peek(), Some('[' | '{')) {
            return Some(Parsed::Container);
        }
        let value = self.expression()?;
        self.skip_blanks();
        if self.peek() == Some('#') {
            self.at = self.chars.len();
        }
        (self.at == self.chars.len()).then_some(Parsed::Value(value))
    }

    fn expression(&mut self) -> Option<Value> {
        self.skip_blanks();
        match self.peek()? {
            '(' => {
                self.at += 1;
                let inner = self.expression()?;
                self.skip_blanks();
                (self.peek() == Some(')')).then(|| self.at += 1)?;
                Some(inner)
            }
            sign @ ('-' | '+') => {
                self.at += 1;
                self.skip_blanks();
                let negative = sign == '-';
                match self.atom()? {
                    Value::Int(digits) => {
                        let (was_negative, digits) = match digits.strip_prefix('-') {
                            Some(d) => (true, d.to_owned()),
                            None => (false, digits),
                        };
                        Some(Value::Int(canonical_int(negative != was_negative, &digits)))
                    }
                    Value::Float(f) => Some(Value::Float(if negative { -f } else { f })),
                    // `-True` is malformed: only numbers take a sign.
                    _ => None,
                }
            }
            _ => self.atom(),
        }
    }

    fn atom(&mut self) -> Option<Value> {
        let c = self.peek()?;
        if c.is_ascii_digit() || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit())) {
            return self.number();
        }
        if c == '.' {
            let ellipsis = self.peek_at(1) == Some('.') && self.peek_at(2) == Some('.');
            self.at += 3;
            return ellipsis.then(|| Value::Str("...".to_owned()));
        }
        if c == '\'' || c == '"' || c.is_alphabetic() || c == '_' {
            return self.name_or_string();
        }
        None
    }

    fn name_or_string(&mut self) -> Option<Value> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            self.at += 1;
        }
        let name: String = self.chars.get(start..self.at)?.iter().collect();
        if matches!(self.peek(), Some('\'' | '"')) {
            self.at = start;
            return self.strings();
        }
        match name.as_str() {
            "True" => Some(Value::Bool(true)),
            "False" => Some(Value::Bool(false)),
            "None" => Some(Value::Null),
            _ => None,
        }
    }

    /// One or more adjacent string literals, concatenated; all bytes or all text.
    fn strings(&mut self) -> Option<Value> {
        let mut text = String::new();
        let mut bytes_kind = None;
        loop {
            self.skip_blanks();
            let start = self.at;
            while self.peek().is_some_and(char::is_alphabetic) {
                self.at += 1;
            }
            let prefix: String = self
                .chars
                .get(start..self.at)?
                .iter()
                .collect::<String>()
                .to_ascii_lowercase();
            let (raw, bytes) = match prefix.as_str() {
                "" | "u" => (false, false),
                "r" => (true, false),
                "b" => (false, true),
                "br" | "rb" => (true, true),
                _ => return None,
            };
            if *bytes_kind.get_or_insert(bytes) != bytes {
                return None;
            }
            text.push_str(&self.string_body(raw, bytes)?);
            let save = self.at;
            self.skip_blanks();
            let more = match self.peek() {
                Some('\'' | '"') => true,
                Some(c) if c.is_alphabetic() => {
                    let mut look = self.at;
                    while self.chars.get(look).is_some_and(|c| c.is_alphabetic()) {
                        look += 1;
                    }
                    matches!(self.chars.get(look), Some('\'' | '"'))
                }
                _ => false,
            };
            if !more {
                self.at = save;
                return Some(Value::Str(text));
            }
        }
    }

    fn string_body(&mut self, raw: bool, bytes: bool) -> Option<String> {
        let quote = self.peek()?;
        let triple = self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote);
        self.at += if triple { 3 } else { 1 };
        let mut out = String::new();
        loop {
            let c = self.peek()?;
            if c == quote {
                if !triple {
                    self.at += 1;
                    return Some(out);
                }
                if self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote) {
                    self.at += 3;
                    return Some(out);
                }
            }
            if c == '\n' && !triple {
                return None;
            }
            if bytes && !c.is_ascii() {
                return None;
            }
            self.at += 1;
            if c != '\\' {
                out.push(c);
                continue;
            }
            let escaped = self.peek()?;
            self.at += 1;
            if raw {
                out.push('\\');
                out.push(escaped);
                continue;
            }
            match escaped {
                '\n' => {}
                '\\' | '\'' | '"' => out.push(escaped),
                'a' => out.push('\x07'),
                'b' => out.push('\x08'),
                'f' => out.push('\x0c'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'v' => out.push('\x0b'),
                '0'..='7' => {
                    let mut value = escaped.to_digit(8)?;
                    for _ in 0..2 {
                        match self.peek().and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                value = value * 8 + d;
                                self.at += 1;
                            }
                            None => break,
                        }
                    }
                    out.push(char::from_u32(value)?);
                }
                'x' => out.push(self.hex_escape(2)?),
                'u' if !bytes => out.push(self.hex_escape(4)?),
                'U' if !bytes => out.push(self.hex_escape(8)?),
                // `\N{name}` needs the Unicode name table: refused, so the text is kept.
                'N' if !bytes => return None,
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        }
    }

    fn hex_escape(&mut self, width: usize) -> Option<char> {
        let digits: String = self.chars.get(self.at..self.at + width)?.iter().collect();
        let value = u32::from_str_radix(&digits, 16).ok()?;
        if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        self.at += width;
        char::from_u32(value)
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            || (matches!(self.peek(), Some('+' | '-'))
                && matches!(self.chars.get(self.at.wrapping_sub(1)), Some('e' | 'E'))
                && !self
                    .chars
                    .get(start..self.at)
                    .is_some_and(|s| s.iter().any(|c| matches!(c, 'x' | 'X'))))
        {
            self.at += 1;
        }
        let token: String = self.chars.get(start..self.at)?.iter().collect();
        python_number(&token)
    }
}

/// One Python number token: `0x1F`, `0o17`, `0b1`, `1_000`, `00`, `1.5`, `.5`, `1e-3`.
/// Imaginary numbers and leading-zero integers (`017`, a syntax error) give `None`.
fn python_number(token: &str) -> Option<Value> {
    let lower = token.to_ascii_lowercase();
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = lower.strip_prefix(prefix) {
            let rest = rest.strip_prefix('_').unwrap_or(rest);
            let clean = underscored_digits(rest, |c| c.is_digit(radix))?;
            let value = u128::from_str_radix(&clean, radix).ok()?;
            return Some(Value::Int(value.to_string()));
        }
    }
    if lower.ends_with('j') {
        return None;
    }
    if lower.contains(['.', 'e']) {
        let (mantissa, exponent) = match lower.split_once('e') {
            Some((m, e)) => (m, Some(e)),
            None => (lower.as_str(), None),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let part =
            |p: &str| p.is_empty() || underscored_digits(p, |c| c.is_ascii_digit()).is_some();
        if !part(whole) || !part(fraction) || (whole.is_empty() && fraction.is_empty()) {
            return None;
        }
        if let Some(exponent) = exponent {
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            underscored_digits(digits, |c| c.is_ascii_digit())?;
        }
        return lower.replace('_', "").parse().ok().map(Value::Float);
    }
    let clean = underscored_digits(&lower, |c| c.is_ascii_digit())?;
    // `017` is a syntax error in Python 3; `000` is zero.
    if clean.len() > 1 && clean.starts_with('0') && clean.bytes().any(|b| b != b'0') {
        return None;
    }
    Some(Value::Int(canonical_int(false, &clean)))
}

#[cfg(test)]
mod tests {
    use super::{Value, ini_value, python_float_repr, python_int, shlex_split};

    #[test]
    fn ini_values_follow_literal_eval() {
        let text = |v: &str| ini_value(v).into_text();
        for (input, expected) in [
            ("5", "5"),
            ("-5", "-5"),
            ("+ 5", "5"),
            ("--5", "--5"),
            ("0x1F", "31"),
            ("0o17", "15"),
            ("0b101", "5"),
            ("1_000", "1000"),
            ("017", "017"),
            ("000", "0"),
            ("1.5", "1.5"),
            ("1.", "1.0"),
            (".5", "0.5"),
            ("1e3", "1000.0"),
            ("1e16", "1e+16"),
            ("True", "true"),
            ("False", "false"),
            ("-True", "-True"),
            ("None", ""),
            ("true", "true"),
            ("yes", "yes"),
            ("'quoted'", "quoted"),
            ("\"a\\tb\"", "a\tb"),
            ("r'a\\tb'", "a\\tb"),
            ("b'bytes'", "bytes"),
            ("'a' 'b'", "ab"),
            ("'a' b'b'", "'a' b'b'"),
            ("\"x\" # comment", "x"),
            ("foo # comment", "foo # comment"),
            ("(5)", "5"),
            ("[1, 2]", "[1, 2]"),
            ("{'a': 1}", "{'a': 1}"),
            ("/path/to/key", "/path/to/key"),
            ("5abc", "5abc"),
            ("...", "..."),
            ("1j", "1j"),
            ("f'x'", "f'x'"),
            ("'\\x41\\u00e9\\101'", "A\u{e9}A"),
            ("'unclosed", "'unclosed"),
            ("a=b", "a=b"),
            ("10.0.0.1", "10.0.0.1"),
        ] {
            assert_eq!(text(input), expected, "{input}");
        }
        assert_eq!(ini_value("42"), Value::Int("42".into()));
        assert_eq!(ini_value("'42'"), Value::Str("42".into()));
    }

    #[test]
    fn float_repr_like_python() {
        for (f, expected) in [
            (1.0, "1.0"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (123.456, "123.456"),
            (0.0, "0.0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(python_float_repr(f), expected);
        }
    }

    #[test]
    fn python_ints() {
        assert_eq!(python_int(" 42 "), Some(42));
        assert_eq!(python_int("-0_7"), Some(-7));
        assert_eq!(python_int("+3"), Some(3));
        for bad in ["", "1_", "_1", "1__0", "0x10", "1.0", "a"] {
            assert_eq!(python_int(bad), None, "{bad}");
        }
    }

    #[test]
    fn shlex_like_python() {
        let split = |s: &str| shlex_split(s, true).unwrap();
        assert_eq!(split("a b  c"), ["a", "b", "c"]);
        assert_eq!(split("h x='a b' y=\"c d\""), ["h", "x=a b", "y=c d"]);
        assert_eq!(split("h x=a#b c"), ["h", "x=a"]);
        assert_eq!(split("h # c"), ["h"]);
        assert_eq!(split(r#"a\ b "q\"x\y" ''"#), ["a b", "q\"x\\y", ""]);
        assert_eq!(split("'it''s'"), ["its"]);
        assert_eq!(shlex_split("a#b", false).unwrap(), ["a#b"]);
        assert!(shlex_split("'open", true).is_err());
        assert!(shlex_split("trailing\\", true).is_err());
    }
}
