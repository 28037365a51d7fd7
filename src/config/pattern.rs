//! OpenSSH's host patterns (`match.c`), as the client configuration's `Host` lines and the
//! host fields of known_hosts files use them: `*` matches any run of bytes, `?` exactly one
//! byte, anything else itself; a leading `!` negates a pattern; and in a list, a negated
//! pattern that matches wins over everything else: the answer is "no", whatever other
//! patterns match, before or after it.
//!
//! One matcher for both, so that a host name is matched the same way whether the question
//! is which settings apply to it (`ssh_config`) or which keys it may present
//! (`ssh::known_hosts`).
//!
//! Matching ignores ASCII case, as both users need: `ssh` lowercases the host name before
//! any lookup and OpenSSH's `match_pattern_list` lowercases the patterns; the client
//! configuration's `Host` patterns are case-insensitive here too (see `ssh_config`). Bytes
//! outside ASCII are compared as they are.

/// The longest pattern a comma-separated list ([`match_pattern_list`]) may hold, in bytes
/// (after its `!`): OpenSSH copies each pattern into a 1024-byte buffer and declares the
/// whole list a non-match when one does not fit.
pub(crate) const LONGEST_LISTED_PATTERN: usize = 1022;

/// OpenSSH's `match_pattern`, ignoring ASCII case: `*` matches any run of bytes (also
/// none), `?` exactly one byte, every other byte itself.
///
/// Iterative (backtracking only to the last `*`), so that hostile patterns such as
/// `*a*a*a…b` cost time proportional to pattern × text rather than exponential.
pub(crate) fn wildcard_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Position after the last `*` seen, and the text position that `*` currently extends to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        match pattern.get(p) {
            Some(b'*') => {
                p += 1;
                star = Some((p, t));
                continue;
            }
            Some(&c)
                if text
                    .get(t)
                    .is_some_and(|x| c == b'?' || c.eq_ignore_ascii_case(x)) =>
            {
                t += 1;
                p += 1;
                continue;
            }
            None if t == text.len() => return true,
            _ => {}
        }
        // Mismatch: let the last `*` swallow one more byte, if any remain.
        match star {
            Some((after_star, swallowed)) if swallowed < text.len() => {
                star = Some((after_star, swallowed + 1));
                p = after_star;
                t = swallowed + 1;
            }
            _ => return false,
        }
    }
}

/// A pattern as written, split into whether it is negated (one leading `!`) and the glob
/// that follows.
pub(crate) fn split_negation(pattern: &str) -> (bool, &str) {
    match pattern.strip_prefix('!') {
        Some(glob) => (true, glob),
        None => (false, pattern),
    }
}

/// Whether `glob` has no wildcard, so that it matches exactly the names equal to it (ASCII
/// case ignored). Both users index such patterns by name instead of matching each one.
pub(crate) fn is_literal(glob: &str) -> bool {
    !glob.contains(['*', '?'])
}

/// Matches `name` against a list of patterns, each given as whether it is negated and its
/// glob (see [`split_negation`]), with OpenSSH's list semantics:
///
/// * `Some(false)`: a negated pattern matches. This wins, whatever else matches.
/// * `Some(true)`: a pattern that is not negated matches, and no negated one does.
/// * `None`: no pattern matches (a list of only negated patterns never says yes).
///
/// So a host is "in" the list exactly when the answer is `Some(true)`.
pub(crate) fn match_list<'p>(
    name: &str,
    patterns: impl IntoIterator<Item = (bool, &'p str)>,
) -> Option<bool> {
    let mut matched = None;
    for (negated, glob) in patterns {
        if wildcard_match(glob.as_bytes(), name.as_bytes()) {
            if negated {
                return Some(false);
            }
            matched = Some(true);
        }
    }
    matched
}

/// OpenSSH's `match_pattern_list` (with lowercasing): [`match_list`] over the
/// comma-separated patterns of `list`, with that function's two quirks:
///
/// * An empty list, and an empty piece after a final comma, are no patterns; an empty piece
///   elsewhere (`a,,b`) is a pattern that matches the empty name.
/// * A pattern longer than [`LONGEST_LISTED_PATTERN`] ends the list with `None` (OpenSSH
///   stops there with "no match"), unless a negated pattern before it already matched.
pub(crate) fn match_pattern_list(name: &str, list: &str) -> Option<bool> {
    if list.is_empty() {
        return None;
    }
    let list = list.strip_suffix(',').unwrap_or(list);
    let mut overlong = false;
    let fitting = list.split(',').map(split_negation).take_while(|(_, glob)| {
        overlong = glob.len() > LONGEST_LISTED_PATTERN;
        !overlong
    });
    // `match_list` stops at a matching negated pattern; only when it read on to the overlong
    // one does that pattern decide.
    let answer = match_list(name, fitting);
    if overlong { None } else { answer }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `match_pattern_list` as the known_hosts lookup asks it: is the name in the list?
    fn listed(name: &str, list: &str) -> bool {
        match_pattern_list(name, list) == Some(true)
    }

    #[test]
    fn wildcards_match_like_openssh() {
        let m = |p: &str, t: &str| wildcard_match(p.as_bytes(), t.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("build-?", "build-1"));
        assert!(!m("build-?", "build-10"));
        assert!(m("*.example.com", "a.b.example.com"));
        assert!(!m("*.example.com", "example.com"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("10.0.*.1", "10.0.255.1"));
        assert!(m("**x", "abx"));
    }

    #[test]
    fn glob_edge_cases() {
        let cases: &[(&str, &str, bool)] = &[
            ("", "", true),
            ("a", "", false),
            ("", "*", true),
            ("abc", "a*c", true),
            ("ac", "a*c", true),
            ("abcbc", "a*bc", true),
            ("abcbd", "a*bc", false),
            ("abc", "a**?", true),
            ("ab", "a?*b", false),
            ("aXbYc", "a*b*c", true),
            ("aXbY", "a*b*c", false),
            ("abc", "?*?*?", true),
            ("ab", "?*?*?", false),
        ];
        for &(text, pattern, want) in cases {
            assert_eq!(
                wildcard_match(pattern.as_bytes(), text.as_bytes()),
                want,
                "{text:?} vs {pattern:?}"
            );
        }
        // Pathological pattern finishes quickly.
        let text = "a".repeat(200);
        let pattern = format!("{}b", "*a".repeat(50));
        assert!(!wildcard_match(pattern.as_bytes(), text.as_bytes()));
    }

    /// Against the definition, written recursively (exponential, fine at these sizes): every
    /// pattern over `a b * ?` up to 6 bytes against every text over `a b ? *` up to 5.
    #[test]
    fn wildcards_agree_with_the_definition() {
        fn by_definition(p: &[u8], t: &[u8]) -> bool {
            match p.split_first() {
                None => t.is_empty(),
                Some((b'*', rest)) => (0..=t.len()).any(|i| by_definition(rest, &t[i..])),
                Some((&c, rest)) => t
                    .split_first()
                    .is_some_and(|(&x, tail)| (c == b'?' || c == x) && by_definition(rest, tail)),
            }
        }
        fn all(alphabet: &[u8], longest: usize) -> Vec<Vec<u8>> {
            let mut out = vec![Vec::new()];
            let mut layer = vec![Vec::new()];
            for _ in 0..longest {
                layer = layer
                    .iter()
                    .flat_map(|s| {
                        alphabet.iter().map(move |&c| {
                            let mut next = s.clone();
                            next.push(c);
                            next
                        })
                    })
                    .collect();
                out.extend(layer.iter().cloned());
            }
            out
        }
        let texts = all(b"ab?*", 5);
        for pattern in all(b"ab*?", 6) {
            for text in &texts {
                assert_eq!(
                    wildcard_match(&pattern, text),
                    by_definition(&pattern, text),
                    "{:?} vs {:?}",
                    String::from_utf8_lossy(&pattern),
                    String::from_utf8_lossy(text)
                );
            }
        }
    }

    #[test]
    fn ascii_case_is_ignored_other_bytes_are_not() {
        let m = |p: &str, t: &str| wildcard_match(p.as_bytes(), t.as_bytes());
        assert!(m("Example.COM", "example.com"));
        assert!(m("*.EXAMPLE.com", "www.example.COM"));
        assert!(m("h?st", "HOST"));
        assert!(!m("é", "É"));
        assert!(m("é", "é"));
    }

    #[test]
    fn negation_wins_wherever_it_stands() {
        let list = |name: &str, patterns: &[&str]| {
            match_list(name, patterns.iter().map(|p| split_negation(p)))
        };
        assert_eq!(
            list("good.example.com", &["*.example.com", "!bad.*"]),
            Some(true)
        );
        assert_eq!(
            list("bad.example.com", &["*.example.com", "!bad.*"]),
            Some(false)
        );
        assert_eq!(
            list("bad.example.com", &["!bad.*", "*.example.com"]),
            Some(false)
        );
        assert_eq!(list("other.org", &["*.example.com", "!bad.*"]), None);
        // Only negated patterns never say yes.
        assert_eq!(list("good", &["!bad"]), None);
        assert_eq!(list("bad", &["!bad"]), Some(false));
        assert_eq!(list("anything", &[]), None);
        // One `!` negates; a second is part of the glob.
        assert_eq!(list("!x", &["!!x"]), Some(false));
        assert_eq!(list("x", &["!!x"]), None);
        assert_eq!(split_negation("!a"), (true, "a"));
        assert_eq!(split_negation("a!"), (false, "a!"));
    }

    #[test]
    fn comma_lists() {
        // A trailing comma adds no empty pattern (OpenSSH), an inner empty one matches "".
        assert!(!listed("", "a,"));
        assert!(listed("", "a,,b"));
        assert!(!listed("", ""));
        assert!(listed("beta", "alpha,beta"));
        assert!(!listed("bad", "*,!bad"));
    }

    #[test]
    fn overlong_pattern_never_matches() {
        let long = "a".repeat(1100);
        assert!(!listed("host", &format!("host,{long}")));
        assert!(listed("host", &format!("host,{}", "a".repeat(1022))));
        // The limit is on the glob, after its `!`.
        assert_eq!(
            match_pattern_list("x", &format!("x,!{}", "a".repeat(1022))),
            Some(true)
        );
        assert_eq!(
            match_pattern_list("x", &format!("x,!{}", "a".repeat(1023))),
            None
        );
        // A negated match before the overlong pattern has already answered, as in OpenSSH.
        assert_eq!(match_pattern_list("x", &format!("!x,{long}")), Some(false));
    }

    #[test]
    fn literal_globs() {
        assert!(is_literal("host.example.com"));
        assert!(is_literal("[h]:2222"));
        assert!(!is_literal("*.example.com"));
        assert!(!is_literal("host?"));
    }
}
