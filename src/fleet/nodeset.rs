//! Node sets as clush and pdsh write them: `web[01-20]`, `db[1-3,7]`, `r[1-2]n[1-4]`, with
//! unions (`,`), exclusions (`!`), intersections (`&`) and symmetric differences (`^`),
//! evaluated left to right (`web[1-20]!web7`); and folding a list of names back into one.
//!
//! Written here rather than taken from the `nodeset` crate: that crate (0.6) is a library
//! and a CLI in one package, so it makes `clap`, `env_logger`, `eyre`, `shellexpand`,
//! `rust-ini` and the archived `serde_yaml` dependencies of every user; the subset a fleet
//! needs (one-dimension folding, padded ranges, four set operators) is the code below.

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};

/// The most names one expression may expand to: `n[1-999999999]` must fail, not eat memory.
const MAX_NAMES: usize = 1_000_000;

/// Expands a node set to its names, in order of first appearance, without duplicates.
///
/// ```
/// # fn demo() -> swiftide_ssh_executor::Result<()> {
/// use swiftide_ssh_executor::fleet::expand_nodeset;
///
/// assert_eq!(expand_nodeset("web[01-03]!web02")?, ["web01", "web03"]);
/// assert_eq!(expand_nodeset("db[1-2,7],db2")?, ["db1", "db2", "db7"]);
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::InvalidInput`] for an unbalanced bracket, an empty or reversed range, a range
/// that is not a number, or more than a million names.
pub fn expand_nodeset(expression: &str) -> Result<Vec<String>> {
    let mut result = OrderedSet::default();
    let mut operator = '+';
    let mut depth = 0usize;
    let mut term_start = 0;
    for (at, c) in expression.char_indices().chain([(expression.len(), ',')]) {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| invalid(expression, "an unmatched `]`"))?
            }
            ',' | '!' | '&' | '^' if depth == 0 => {
                let term = expression.get(term_start..at).unwrap_or_default().trim();
                if term.is_empty() {
                    // `a,,b` and a trailing comma are harmless; an operator without a term is not.
                    if operator != '+' && operator != ',' {
                        return Err(invalid(
                            expression,
                            "an operator without a node set after it",
                        ));
                    }
                } else {
                    let names = expand_term(expression, term)?;
                    result.apply(operator, names);
                    if result.names.len() > MAX_NAMES {
                        return Err(invalid(expression, "more than a million names"));
                    }
                }
                operator = c;
                term_start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(invalid(expression, "an unmatched `[`"));
    }
    Ok(result.names)
}

/// Folds names into the shortest node set clush would write: `web01`..`web18` become
/// `web[01-18]`, `db1 db2 db3 db7` become `db[1-3,7]`. Names fold on their last number;
/// zero-padded and unpadded numbers stay apart (`n01` and `n1` are different hosts).
/// Names without a number are listed as they are. The result is sorted, so it does not
/// depend on the order of `names`.
pub fn fold_nodeset<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    // (prefix, suffix) -> padding width (0: unpadded) -> numbers.
    let mut numbered: BTreeMap<(String, String), BTreeMap<usize, Vec<u64>>> = BTreeMap::new();
    let mut plain: Vec<String> = Vec::new();
    for name in names {
        let name = name.as_ref();
        match split_last_number(name) {
            Some((prefix, digits, suffix)) => {
                let Ok(value) = digits.parse::<u64>() else {
                    plain.push(name.to_owned());
                    continue;
                };
                let width = if digits.len() > 1 && digits.starts_with('0') {
                    digits.len()
                } else {
                    0
                };
                numbered
                    .entry((prefix.to_owned(), suffix.to_owned()))
                    .or_default()
                    .entry(width)
                    .or_default()
                    .push(value);
            }
            None => plain.push(name.to_owned()),
        }
    }
    plain.sort();
    plain.dedup();
    let mut parts: Vec<String> = Vec::new();
    for ((prefix, suffix), mut by_width) in numbered {
        // An unpadded number as long as a padded width belongs to it (`web10` in `web[01-18]`).
        let padded: Vec<usize> = by_width.keys().copied().filter(|w| *w > 0).collect();
        if let Some(unpadded) = by_width.remove(&0) {
            let mut rest = Vec::new();
            for value in unpadded {
                let len = value.to_string().len();
                match by_width.get_mut(&len) {
                    Some(values) if padded.contains(&len) => values.push(value),
                    _ => rest.push(value),
                }
            }
            if !rest.is_empty() {
                by_width.insert(0, rest);
            }
        }
        for (width, mut values) in by_width {
            values.sort_unstable();
            values.dedup();
            parts.push(match values.as_slice() {
                [one] => format!("{prefix}{one:0width$}{suffix}"),
                _ => format!("{prefix}[{}]{suffix}", ranges(&values, width)),
            });
        }
    }
    parts.extend(plain);
    parts.join(",")
}

/// `1,2,3,5` → `1-3,5`, each number padded to `width`.
fn ranges(values: &[u64], width: usize) -> String {
    let mut out = Vec::new();
    let mut iter = values.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            format!("{start:0width$}")
        } else {
            format!("{start:0width$}-{end:0width$}")
        });
    }
    out.join(",")
}

/// Splits `web-01.eu` into (`web-`, `01`, `.eu`) at its last run of digits.
fn split_last_number(name: &str) -> Option<(&str, &str, &str)> {
    let end = name.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = name
        .get(..end)?
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    Some((name.get(..start)?, name.get(start..end)?, name.get(end..)?))
}

/// Names in order of first appearance, without duplicates. `seen` mirrors `names`, so a
/// union of many one-name terms (`a1,a2,...,a10000`) stays linear.
#[derive(Default)]
struct OrderedSet {
    names: Vec<String>,
    seen: HashSet<String>,
}

impl OrderedSet {
    fn apply(&mut self, operator: char, names: Vec<String>) {
        match operator {
            '!' | '&' | '^' => {
                let theirs: HashSet<&str> = names.iter().map(String::as_str).collect();
                let keep_common = operator == '&';
                self.names
                    .retain(|n| theirs.contains(n.as_str()) == keep_common);
                let ours = std::mem::take(&mut self.seen);
                self.seen = self.names.iter().cloned().collect();
                if operator == '^' {
                    for name in names {
                        if !ours.contains(&name) && self.seen.insert(name.clone()) {
                            self.names.push(name);
                        }
                    }
                }
            }
            _ => {
                for name in names {
                    if !self.seen.contains(&name) {
                        self.seen.insert(name.clone());
                        self.names.push(name);
                    }
                }
            }
        }
    }
}

/// One term: literal text and bracket groups, expanded as a cartesian product.
fn expand_term(expression: &str, term: &str) -> Result<Vec<String>> {
    let mut names = vec![String::new()];
    let mut rest = term;
    while !rest.is_empty() {
        let (literal, after) = match rest.find('[') {
            Some(open) => (
                rest.get(..open).unwrap_or_default(),
                rest.get(open..).unwrap_or_default(),
            ),
            None => (rest, ""),
        };
        if literal.contains(']') {
            return Err(invalid(expression, "an unmatched `]`"));
        }
        for name in &mut names {
            name.push_str(literal);
        }
        if after.is_empty() {
            break;
        }
        let close = after
            .find(']')
            .ok_or_else(|| invalid(expression, "an unmatched `[`"))?;
        let inside = after.get(1..close).unwrap_or_default();
        if inside.contains('[') {
            return Err(invalid(expression, "nested brackets"));
        }
        let values = expand_ranges(expression, inside)?;
        if names.len().saturating_mul(values.len()) > MAX_NAMES {
            return Err(invalid(expression, "more than a million names"));
        }
        names = names
            .iter()
            .flat_map(|name| values.iter().map(move |value| format!("{name}{value}")))
            .collect();
        rest = after.get(close + 1..).unwrap_or_default();
    }
    Ok(names)
}

/// `01-03,7,10-20/5` → `01 02 03 7 10 15 20`. A range keeps the padding of its first bound.
fn expand_ranges(expression: &str, inside: &str) -> Result<Vec<String>> {
    let mut values = Vec::new();
    for part in inside.split(',') {
        let part = part.trim();
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, parse_number(expression, step)?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(invalid(expression, "a range step of 0"));
        }
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (start, end) = (
            parse_number(expression, first)?,
            parse_number(expression, last)?,
        );
        if start > end {
            return Err(invalid(expression, &format!("a reversed range `{part}`")));
        }
        if (end - start) / step >= MAX_NAMES as u64 {
            return Err(invalid(expression, "more than a million names"));
        }
        let width = if first.len() > 1 && first.starts_with('0') {
            first.len()
        } else {
            0
        };
        let mut value = start;
        while value <= end {
            values.push(format!("{value:0width$}"));
            value = match value.checked_add(step) {
                Some(next) => next,
                None => break,
            };
        }
    }
    Ok(values)
}

fn parse_number(expression: &str, text: &str) -> Result<u64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(expression, &format!("`{text}` is not a number")));
    }
    text.parse()
        .map_err(|_| invalid(expression, &format!("`{text}` is too large")))
}

fn invalid(expression: &str, what: &str) -> Error {
    Error::InvalidInput {
        reason: format!("node set `{expression}`: {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{expand_nodeset, fold_nodeset};

    fn expand(expression: &str) -> Vec<String> {
        expand_nodeset(expression).unwrap()
    }

    #[test]
    fn ranges_padding_and_products() {
        assert_eq!(expand("web[01-03]"), ["web01", "web02", "web03"]);
        assert_eq!(expand("db[1-3,7]"), ["db1", "db2", "db3", "db7"]);
        assert_eq!(expand("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(expand("n[098-100]"), ["n098", "n099", "n100"]);
        assert_eq!(expand("n[1-9/4]"), ["n1", "n5", "n9"]);
        assert_eq!(
            expand("r[1-2]n[1-2].eu"),
            ["r1n1.eu", "r1n2.eu", "r2n1.eu", "r2n2.eu"]
        );
        assert_eq!(expand("plain-host"), ["plain-host"]);
        assert_eq!(expand("a, b,,a"), ["a", "b"]);
    }

    #[test]
    fn set_operators_apply_left_to_right() {
        assert_eq!(expand("web[1-5]!web[2-3]"), ["web1", "web4", "web5"]);
        assert_eq!(expand("web[1-5]&web[4-9]"), ["web4", "web5"]);
        assert_eq!(expand("web[1-3]^web[3-4]"), ["web1", "web2", "web4"]);
        assert_eq!(expand("a[1-2]^a[2,3,3]"), ["a1", "a3"]);
        // (a ∪ b) ! a, not a ∪ (b ! a).
        assert_eq!(expand("a,b!a"), ["b"]);
        assert_eq!(expand("web[1-3]!web2,web2"), ["web1", "web3", "web2"]);
    }

    #[test]
    fn bad_node_sets_are_typed_errors() {
        for bad in [
            "web[1-3",
            "web1-3]",
            "web[3-1]",
            "web[a-c]",
            "web[]",
            "web[1-2]!",
            "n[[1]]",
            "n[1-10/0]",
            "n[1-99999999999]",
            "a[1-1000]b[1-1000]c[1-10]",
        ] {
            let error = expand_nodeset(bad).unwrap_err();
            assert!(
                matches!(error, crate::Error::InvalidInput { ref reason } if reason.contains(bad)),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn a_long_list_of_single_names() {
        let list: Vec<String> = (0..20_000).map(|i| format!("h{i}")).collect();
        let names = expand(&list.join(","));
        assert_eq!(names, list);
        assert_eq!(fold_nodeset(&names), "h[0-19999]");
        assert_eq!(expand(&format!("{}!h[1-19999]", list.join(","))), ["h0"]);
    }

    #[test]
    fn folding() {
        let web: Vec<String> = (1..=18).map(|i| format!("web{i:02}")).collect();
        assert_eq!(fold_nodeset(&web), "web[01-18]");
        assert_eq!(fold_nodeset(["db7", "db2", "db1", "db3"]), "db[1-3,7]");
        assert_eq!(fold_nodeset(["n9", "n10", "n11"]), "n[9-11]");
        assert_eq!(fold_nodeset(["n01", "n1", "n10"]), "n1,n[01,10]");
        assert_eq!(
            fold_nodeset(["web-1.eu", "web-2.eu", "gw"]),
            "web-[1-2].eu,gw"
        );
        assert_eq!(fold_nodeset(["n1"]), "n1");
        assert_eq!(fold_nodeset(["n001"]), "n001");
        assert_eq!(fold_nodeset(Vec::<String>::new()), "");
        assert_eq!(fold_nodeset(["a", "a"]), "a");
    }

    #[test]
    fn fold_and_expand_round_trip() {
        for expression in [
            "web[01-18]",
            "db[1-3,7]",
            "n[9-11],m[001-003,010]",
            "r1n[1-4],r2n[1-4]",
            "gw",
            "x[0-2]y",
        ] {
            let names = expand(expression);
            let folded = fold_nodeset(&names);
            let mut again = expand(&folded);
            let mut names = names.clone();
            names.sort();
            again.sort();
            assert_eq!(again, names, "{expression} folded to {folded}");
        }
    }
}
