//! Host patterns, evaluated as ansible-core's `InventoryManager` evaluates them
//! (`split_host_pattern`, `order_patterns`, `_evaluate_patterns`, `_match_one_pattern`,
//! `_split_subscript`, `_apply_subscript`, `_enumerate_matches`), with a term that matches
//! nothing made an error (Ansible's `host_pattern_mismatch = error`).

use std::collections::{HashMap, HashSet};

use regex::Regex;

use super::{Inventory, address};
use crate::error::{Error, Result};

/// The names Ansible answers with an implicit `localhost` when nothing else matches.
const LOCALHOST: &[&str] = &["127.0.0.1", "localhost", "::1"];

/// The hosts `pattern` selects, narrowed by each limit in turn, as positions in inventory
/// order of definition.
pub(super) fn select<S: AsRef<str>>(
    inventory: &Inventory,
    pattern: &str,
    limits: &[S],
) -> Result<Vec<usize>> {
    if pattern.trim().is_empty() {
        return Err(invalid(
            "an empty host pattern (Ansible reads it as `all`; write `all` to mean every host)"
                .to_owned(),
        ));
    }
    let mut evaluator = Evaluator {
        inventory,
        group_hosts: HashMap::new(),
        matches: HashMap::new(),
    };
    let terms: Vec<Term> = split_host_pattern(pattern)?
        .into_iter()
        .map(|text| Term {
            text,
            lenient: false,
        })
        .collect();
    let mut hosts = evaluator.evaluate(&terms)?;
    for limit in limits {
        let keep: HashSet<usize> = evaluator
            .evaluate(&limit_terms(limit.as_ref())?)?
            .into_iter()
            .collect();
        hosts.retain(|h| keep.contains(h));
    }
    Ok(hosts)
}

/// One term of a pattern. A lenient term (a line of an `@FILE` limit) that matches nothing
/// selects nothing instead of failing.
struct Term {
    text: String,
    lenient: bool,
}

/// `split_host_pattern`: by commas when there are any; else the whole pattern when it
/// reads as one address (`host:22`, `web[1:3]`, an IPv6 address); else by colons outside
/// brackets (and whitespace).
pub(super) fn split_host_pattern(pattern: &str) -> Result<Vec<String>> {
    let pieces = if pattern.contains(',') {
        pattern.split(',').map(str::to_owned).collect()
    } else if address::parse_address(pattern).map_err(invalid)?.is_some() {
        vec![pattern.to_owned()]
    } else {
        address::split_on_colons(pattern)
    };
    Ok(pieces
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect())
}

/// A limit's terms: its pattern's, with each `@FILE` replaced by the file's lines.
fn limit_terms(limit: &str) -> Result<Vec<Term>> {
    let mut terms = Vec::new();
    for piece in split_host_pattern(limit)? {
        if let Some(file) = piece.strip_prefix('@') {
            let text = std::fs::read_to_string(file)
                .map_err(|e| invalid(format!("cannot read limit file {file}: {e}")))?;
            terms.extend(text.split('\n').map(|line| Term {
                text: line.trim().to_owned(),
                lenient: true,
            }));
        } else {
            terms.push(Term {
                text: piece,
                lenient: false,
            });
        }
    }
    Ok(terms)
}

struct Evaluator<'a> {
    inventory: &'a Inventory,
    /// Each group's hosts, computed once per selection.
    group_hosts: HashMap<usize, Vec<usize>>,
    /// Each term's hosts (`_pattern_cache`).
    matches: HashMap<String, Vec<usize>>,
}

impl Evaluator<'_> {
    /// `_evaluate_patterns`: unions in the order given, then intersections, then
    /// exclusions; only `&`/`!` terms start from `all`.
    fn evaluate(&mut self, terms: &[Term]) -> Result<Vec<usize>> {
        let (mut regular, mut intersections, mut exclusions) = (Vec::new(), Vec::new(), Vec::new());
        for term in terms.iter().filter(|t| !t.text.is_empty()) {
            match term.text.chars().next() {
                Some('!') => exclusions.push(term),
                Some('&') => intersections.push(term),
                _ => regular.push(term),
            }
        }
        let all = Term {
            text: "all".to_owned(),
            lenient: false,
        };
        if regular.is_empty() {
            regular.push(&all);
        }
        let mut hosts: Vec<usize> = Vec::new();
        let mut present: HashSet<usize> = HashSet::new();
        for term in regular.into_iter().chain(intersections).chain(exclusions) {
            // A term that is exactly a host's name is that host, whatever the groups.
            if let Some(&host) = self.inventory.host_index.get(&term.text) {
                if present.insert(host) {
                    hosts.push(host);
                }
                continue;
            }
            let matched = self.match_one(term)?;
            match term.text.chars().next() {
                Some('!') => {
                    let that: HashSet<usize> = matched.into_iter().collect();
                    hosts.retain(|h| !that.contains(h));
                    present = hosts.iter().copied().collect();
                }
                Some('&') => {
                    let that: HashSet<usize> = matched.into_iter().collect();
                    hosts.retain(|h| that.contains(h));
                    present = hosts.iter().copied().collect();
                }
                _ => {
                    for host in matched {
                        if present.insert(host) {
                            hosts.push(host);
                        }
                    }
                }
            }
        }
        Ok(hosts)
    }

    /// `_match_one_pattern`: one term without its `&`/`!`, subscript applied.
    fn match_one(&mut self, term: &Term) -> Result<Vec<usize>> {
        let pattern = term.text.strip_prefix(['&', '!']).unwrap_or(&term.text);
        if pattern.is_empty() {
            return Err(invalid(format!(
                "host pattern term `{}` is empty",
                term.text
            )));
        }
        if let Some(hosts) = self.matches.get(pattern) {
            return Ok(hosts.clone());
        }
        let (expression, subscript) = split_subscript(pattern);
        let hosts = self.enumerate(expression, term.lenient)?;
        let hosts = apply_subscript(hosts, subscript).map_err(|count| {
            invalid(format!(
                "host pattern term `{pattern}`: the index is past the {count} hosts of `{expression}`"
            ))
        })?;
        self.matches.insert(pattern.to_owned(), hosts.clone());
        Ok(hosts)
    }

    /// `_enumerate_matches`: the hosts of every group whose name matches, then, when no
    /// group matched or the term is a wildcard or regular expression, every host whose name
    /// matches. Duplicates are kept: subscripts count them, as Ansible's do.
    fn enumerate(&mut self, expression: &str, lenient: bool) -> Result<Vec<usize>> {
        let matcher = Matcher::new(expression)?;
        let inventory = self.inventory;
        let groups: Vec<usize> = match &matcher {
            Matcher::Literal(name) => inventory
                .group_index
                .get(name)
                .copied()
                .into_iter()
                .collect(),
            _ => (0..inventory.groups.len())
                .filter(|g| matcher.matches(&inventory.groups[*g].name))
                .collect(),
        };
        let mut results = Vec::new();
        for &group in &groups {
            let hosts = self
                .group_hosts
                .entry(group)
                .or_insert_with(|| inventory.group_hosts(group));
            results.extend_from_slice(hosts);
        }
        if groups.is_empty()
            || expression.starts_with('~')
            || expression.contains(['.', '?', '*', '['])
        {
            match &matcher {
                Matcher::Literal(name) => results.extend(inventory.host_index.get(name).copied()),
                _ => results.extend(
                    (0..inventory.host_names.len())
                        .filter(|h| matcher.matches(&inventory.host_names[*h])),
                ),
            }
        }
        if results.is_empty() && groups.is_empty() && expression != "all" && !lenient {
            let hint = if LOCALHOST.contains(&expression) {
                " (Ansible's implicit localhost is not provided: add it to the inventory)"
            } else {
                ""
            };
            return Err(invalid(format!(
                "host pattern term `{expression}` matches no host or group{hint}"
            )));
        }
        Ok(results)
    }
}

/// `_split_subscript`: `web[0]`, `web[-1]`, `web[1:3]`, `web[2:]` (and the old `web[1-3]`)
/// give the expression and `(start, end)`; a regular expression has none.
fn split_subscript(pattern: &str) -> (&str, Option<(i64, Option<i64>)>) {
    let none = (pattern, None);
    if pattern.starts_with('~') {
        return none;
    }
    let Some(body) = pattern.strip_suffix(']') else {
        return none;
    };
    let Some(open) = body.rfind('[') else {
        return none;
    };
    let (expression, inside) = (&body[..open], &body[open + 1..]);
    if expression.is_empty() || expression.contains('\n') {
        return none;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let number = |s: &str| -> i64 {
        let (negative, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s),
        };
        let value = digits.parse::<i64>().unwrap_or(i64::MAX);
        if negative { -value } else { value }
    };
    if digits(inside.strip_prefix('-').unwrap_or(inside)) {
        return (expression, Some((number(inside), None)));
    }
    if let Some(separator) = inside.find([':', '-']) {
        let (start, end) = (&inside[..separator], &inside[separator + 1..]);
        if digits(start) && (end.is_empty() || digits(end)) {
            let end = if end.is_empty() { -1 } else { number(end) };
            return (expression, Some((number(start), Some(end))));
        }
    }
    none
}

/// `_apply_subscript`: `[i]` (negative from the end) is one host and fails past the end;
/// `[i:j]` is hosts `i` to `j` inclusive (an end of 0 reads as `[i]`, as in Ansible); an
/// empty list stays empty. `Err` carries the number of hosts.
fn apply_subscript(
    hosts: Vec<usize>,
    subscript: Option<(i64, Option<i64>)>,
) -> std::result::Result<Vec<usize>, usize> {
    let Some((start, end)) = subscript else {
        return Ok(hosts);
    };
    if hosts.is_empty() {
        return Ok(hosts);
    }
    let len = hosts.len() as i64;
    match end {
        Some(end) if end != 0 => {
            let end = if end == -1 { len - 1 } else { end };
            let from = start.clamp(0, len) as usize;
            let to = end.saturating_add(1).clamp(0, len) as usize;
            Ok(hosts.get(from..to.max(from)).unwrap_or_default().to_vec())
        }
        _ => {
            let index = if start < 0 { start + len } else { start };
            usize::try_from(index)
                .ok()
                .and_then(|i| hosts.get(i).copied())
                .map(|h| vec![h])
                .ok_or(hosts.len())
        }
    }
}

/// How one term matches a name: `fnmatch` (a whole-name shell wildcard), `re.match` after a
/// `~`, or plain equality.
enum Matcher {
    Literal(String),
    Glob(Vec<GlobToken>),
    Regex(Regex),
}

impl Matcher {
    fn new(expression: &str) -> Result<Self> {
        if let Some(source) = expression.strip_prefix('~') {
            let regex = Regex::new(&format!("^(?:{})", python_regex(source))).map_err(|e| {
                invalid(format!(
                    "host pattern `{expression}` is not a regular expression this crate reads: {e}"
                ))
            })?;
            Ok(Matcher::Regex(regex))
        } else if expression.contains(['*', '?', '[']) {
            Ok(Matcher::Glob(translate_glob(expression)))
        } else {
            Ok(Matcher::Literal(expression.to_owned()))
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Matcher::Literal(literal) => literal == name,
            Matcher::Regex(regex) => regex.is_match(name),
            Matcher::Glob(tokens) => glob_matches(tokens, name),
        }
    }
}

/// Python's `\Z` (end of text) is the `regex` crate's `\z`.
fn python_regex(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Z') => out.push_str("\\z"),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum GlobToken {
    Star,
    AnyChar,
    Char(char),
    /// A `[...]` set: inclusive ranges (a single character is a range of one).
    Set {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// An empty set: matches nothing.
    Never,
}

/// Python's `fnmatch.translate`, token for token: `*`, `?`, `[seq]`, `[!seq]` with its
/// rules for `]` first in a set, `-` ranges (a leading or trailing `-` is literal, reversed
/// ranges are dropped), and a `[` without a closing `]` as a literal.
fn translate_glob(pattern: &str) -> Vec<GlobToken> {
    let pat: Vec<char> = pattern.chars().collect();
    let n = pat.len();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < n {
        let c = pat[i];
        i += 1;
        match c {
            '*' => {
                if tokens.last() != Some(&GlobToken::Star) {
                    tokens.push(GlobToken::Star);
                }
            }
            '?' => tokens.push(GlobToken::AnyChar),
            '[' => {
                let mut j = i;
                if j < n && pat[j] == '!' {
                    j += 1;
                }
                if j < n && pat[j] == ']' {
                    j += 1;
                }
                while j < n && pat[j] != ']' {
                    j += 1;
                }
                if j >= n {
                    tokens.push(GlobToken::Char('['));
                    continue;
                }
                tokens.push(glob_set(&pat, i, j));
                i = j + 1;
            }
            other => tokens.push(GlobToken::Char(other)),
        }
    }
    tokens
}

/// The set `pat[start..end]` (between `[` and `]`), as `fnmatch.translate` builds it.
fn glob_set(pat: &[char], start: usize, end: usize) -> GlobToken {
    let stuff = &pat[start..end];
    let mut chunks: Vec<Vec<char>> = if !stuff.contains(&'-') {
        vec![stuff.to_vec()]
    } else {
        let mut chunks = Vec::new();
        let mut from = start;
        let mut k = if pat[start] == '!' {
            start + 2
        } else {
            start + 1
        };
        while let Some(hyphen) = (k..end).find(|x| pat[*x] == '-') {
            chunks.push(pat[from..hyphen].to_vec());
            from = hyphen + 1;
            k = hyphen + 3;
        }
        let chunk = pat[from..end].to_vec();
        if !chunk.is_empty() {
            chunks.push(chunk);
        } else if let Some(last) = chunks.last_mut() {
            last.push('-');
        }
        // Remove empty ranges: `z-a` drops both ends and what is between.
        for k in (1..chunks.len()).rev() {
            if let (Some(&a), Some(&b)) = (chunks[k - 1].last(), chunks[k].first())
                && a > b
            {
                let tail = chunks.remove(k);
                chunks[k - 1].pop();
                chunks[k - 1].extend(tail.into_iter().skip(1));
            }
        }
        chunks
    };
    let length: usize = chunks.iter().map(Vec::len).sum::<usize>() + chunks.len().saturating_sub(1);
    if length == 0 {
        return GlobToken::Never;
    }
    if length == 1 && chunks.first().and_then(|c| c.first()) == Some(&'!') {
        return GlobToken::AnyChar;
    }
    let negated = chunks.first().and_then(|c| c.first()) == Some(&'!');
    if negated && let Some(first) = chunks.first_mut() {
        first.remove(0);
    }
    let mut ranges: Vec<(char, char)> = chunks.iter().flatten().map(|c| (*c, *c)).collect();
    for pair in chunks.windows(2) {
        if let (Some(&a), Some(&b)) = (pair[0].last(), pair[1].first()) {
            ranges.push((a, b));
        }
    }
    GlobToken::Set { negated, ranges }
}

/// Whether `tokens` match the whole of `name` (star: any run of characters).
fn glob_matches(tokens: &[GlobToken], name: &str) -> bool {
    let text: Vec<char> = name.chars().collect();
    let one = |token: &GlobToken, c: char| match token {
        GlobToken::AnyChar => true,
        GlobToken::Char(x) => *x == c,
        GlobToken::Set { negated, ranges } => {
            ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
        }
        GlobToken::Never | GlobToken::Star => false,
    };
    let (mut t, mut s) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while s < text.len() {
        match tokens.get(t) {
            Some(GlobToken::Star) => {
                backtrack = Some((t, s));
                t += 1;
            }
            Some(token) if one(token, text[s]) => {
                t += 1;
                s += 1;
            }
            _ => match backtrack {
                Some((star, from)) => {
                    t = star + 1;
                    s = from + 1;
                    backtrack = Some((star, from + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|token| *token == GlobToken::Star)
}

fn invalid(reason: String) -> Error {
    Error::InvalidInput { reason }
}

#[cfg(test)]
mod tests {
    use super::{
        apply_subscript, glob_matches, split_host_pattern, split_subscript, translate_glob,
    };

    #[test]
    fn splitting_like_ansible() {
        let split = |p: &str| split_host_pattern(p).unwrap();
        assert_eq!(split("a,b[1], c[2:3] , d"), ["a", "b[1]", "c[2:3]", "d"]);
        assert_eq!(split("web:&prod:!canary"), ["web", "&prod", "!canary"]);
        assert_eq!(split("web[0:2]"), ["web[0:2]"]);
        assert_eq!(split("host:22"), ["host:22"]);
        assert_eq!(split("fe80::1"), ["fe80::1"]);
        assert_eq!(split("web*:db"), ["web*", "db"]);
        assert_eq!(split("~(web|db)[0-9]:x"), ["~(web|db)[0-9]", "x"]);
        assert_eq!(split("a b"), ["a", "b"]);
        assert_eq!(split("a b,c"), ["a b", "c"]);
        assert!(split(" , ").is_empty());
    }

    #[test]
    fn subscripts_like_ansible() {
        assert_eq!(split_subscript("web[0]"), ("web", Some((0, None))));
        assert_eq!(split_subscript("web[-1]"), ("web", Some((-1, None))));
        assert_eq!(split_subscript("web[1:3]"), ("web", Some((1, Some(3)))));
        assert_eq!(split_subscript("web[1:]"), ("web", Some((1, Some(-1)))));
        assert_eq!(split_subscript("web[1-2]"), ("web", Some((1, Some(2)))));
        assert_eq!(split_subscript("web[:3]"), ("web[:3]", None));
        assert_eq!(split_subscript("~web[0]"), ("~web[0]", None));
        assert_eq!(split_subscript("[0]"), ("[0]", None));
        assert_eq!(split_subscript("w[a][1]"), ("w[a]", Some((1, None))));
        let hosts = vec![10, 11, 12, 13];
        let apply = |s| apply_subscript(hosts.clone(), s);
        assert_eq!(apply(Some((0, None))), Ok(vec![10]));
        assert_eq!(apply(Some((-1, None))), Ok(vec![13]));
        assert_eq!(apply(Some((4, None))), Err(4));
        assert_eq!(apply(Some((-5, None))), Err(4));
        assert_eq!(apply(Some((1, Some(2)))), Ok(vec![11, 12]));
        assert_eq!(apply(Some((2, Some(-1)))), Ok(vec![12, 13]));
        assert_eq!(apply(Some((2, Some(0)))), Ok(vec![12]));
        assert_eq!(apply(Some((3, Some(1)))), Ok(vec![]));
        assert_eq!(apply(Some((9, Some(12)))), Ok(vec![]));
        assert_eq!(apply_subscript(vec![], Some((3, None))), Ok(vec![]));
    }

    #[test]
    fn globs_like_fnmatch() {
        let m = |p: &str, n: &str| glob_matches(&translate_glob(p), n);
        assert!(m("web*", "web01"));
        assert!(m("*", ""));
        assert!(!m("web?", "web"));
        assert!(m("w*b*1", "web-b-1"));
        assert!(m("[abc]x", "bx"));
        assert!(!m("[!abc]x", "bx"));
        assert!(m("[!abc]x", "dx"));
        assert!(m("[a-c]", "b"));
        assert!(m("[-a]", "-"));
        assert!(m("[a-]", "-"));
        assert!(m("[]]", "]"));
        assert!(m("[!]]", "x"));
        assert!(m("[x", "[x"));
        assert!(!m("[z-a]", "m"));
        assert!(m("[!z-a]", "m"));
        assert!(m("[a-cx-z]", "y"));
        assert!(m("web[:3]", "web3"));
        assert!(!m("web[:3]", "web[:3]"));
    }
}
