//! Host addresses and host ranges as ansible-core reads them: `parse_address`
//! (`ansible.parsing.utils.addresses`) and `expand_hostname_range`
//! (`ansible.plugins.inventory`).

use std::sync::LazyLock;

use regex::Regex;

use super::literal::python_int;

/// The expressions of `ansible.parsing.utils.addresses`, translated for the `regex` crate
/// (which has no look-behind: a label's "does not end in `_` or `-`" is spelt out).
struct AddressPatterns {
    bracketed_hostport: Regex,
    hostport: Regex,
    ipv4: Regex,
    ipv6: Regex,
    hostname: Regex,
}

static PATTERNS: LazyLock<Result<AddressPatterns, String>> = LazyLock::new(|| {
    let numeric_range = r"\[(?:[0-9]+:[0-9]+)(?::[0-9]+)?\]";
    let hexadecimal_range = r"\[(?:[0-9a-f]+:[0-9a-f]+)(?::[0-9]+)?\]";
    let alphanumeric_range = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]";
    let v6 = format!("(?:[0-9a-f]{{1,4}}|{hexadecimal_range})");
    let v4 = format!("(?:[01]?[0-9]{{1,2}}|2[0-4][0-9]|25[0-5]|{numeric_range})");
    let r = alphanumeric_range;
    let label = format!(r"(?:(?:\w|{r})(?:[\w-]|{r})*(?:[\w&&[^_]]|{r})|(?:[\w&&[^_]]|{r}))");
    let ipv6 = [
        format!("(?:{v6}:){{7}}{v6}"),
        format!("(?:{v6}:){{1,6}}:"),
        format!("(?:{v6}:)(?::{v6}){{1,6}}"),
        format!("(?:{v6}:){{2}}(?::{v6}){{1,5}}"),
        format!("(?:{v6}:){{3}}(?::{v6}){{1,4}}"),
        format!("(?:{v6}:){{4}}(?::{v6}){{1,3}}"),
        format!("(?:{v6}:){{5}}(?::{v6}){{1,2}}"),
        format!("(?:{v6}:){{6}}(?::{v6})"),
        format!(":(?::{v6}){{1,6}}"),
        format!("{v6}?::"),
        format!(r"(?:0:){{6}}(?:{v6}\.){{3}}{v6}"),
        format!(r"::(?:ffff:)?(?:{v6}\.){{3}}{v6}"),
        format!(r"(?:0:){{5}}ffff:(?:{v6}\.){{3}}{v6}"),
    ]
    .join("|");
    let compile =
        |pattern: &str| Regex::new(pattern).map_err(|e| format!("internal address pattern: {e}"));
    Ok(AddressPatterns {
        bracketed_hostport: compile(r"^\[(.+)\]:([0-9]+)$")?,
        hostport: compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")?,
        ipv4: compile(&format!(r"(?i)^(?:{v4}\.){{3}}{v4}$"))?,
        ipv6: compile(&format!("(?i)^(?:{ipv6})$"))?,
        hostname: compile(&format!(r"(?i)^{label}(?:\.{label})*$"))?,
    })
});

/// `parse_address(address, allow_ranges=True)`: the host (ranges allowed) and the port of
/// `host:port`, `[host]:port` or a bare host; `Ok(None)` when it is none of an IPv4
/// address, an IPv6 address or a host name.
pub(super) fn parse_address(address: &str) -> Result<Option<(String, Option<String>)>, String> {
    let patterns = PATTERNS.as_ref().map_err(Clone::clone)?;
    let mut address = address.to_owned();
    let mut port = None;
    // Both are tried in turn, the second on what the first left (as Ansible does).
    for pattern in [&patterns.bracketed_hostport, &patterns.hostport] {
        if let Some(captures) = pattern.captures(&address) {
            let host = captures.get(1).map_or("", |m| m.as_str()).to_owned();
            port = captures.get(2).map(|m| m.as_str().to_owned());
            address = host;
        }
    }
    let valid = [&patterns.ipv4, &patterns.ipv6, &patterns.hostname]
        .iter()
        .any(|p| p.is_match(&address));
    Ok(valid.then_some((address, port)))
}

/// The hosts of an inventory host pattern and the port given with it, as the INI and YAML
/// plugins' `_expand_hostpattern` reads them: `web[01:03].example.com:2222`, `[::1]:22`.
pub(super) fn expand_host_pattern(pattern: &str) -> Result<(Vec<String>, Option<String>), String> {
    let (host, port) = parse_address(pattern)?.unwrap_or_else(|| (pattern.to_owned(), None));
    let hosts = if host.contains('[') {
        expand_hostname_range(&host)?
    } else {
        vec![host]
    };
    Ok((hosts, port))
}

/// Ranges expand to more hosts than this only by mistake (`n[1:99999999]`).
const MAX_RANGE_HOSTS: usize = 1_000_000;

const ASCII_LETTERS: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// `expand_hostname_range`: `db[01:10:3]node-[a:c]` and friends, with Ansible's rules
/// (an empty start is 0; zero-padded starts pad every number to their width; letter
/// ranges run over `a..zA..Z`; a reversed numeric range is empty).
pub(super) fn expand_hostname_range(line: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    expand_into(line, &mut hosts)?;
    Ok(hosts)
}

fn expand_into(line: &str, hosts: &mut Vec<String>) -> Result<(), String> {
    // `line.replace('[', '|', 1).replace(']', '|', 1).split('|')` must give three parts.
    let replaced = line.replacen('[', "|", 1).replacen(']', "|", 1);
    let parts: Vec<&str> = replaced.split('|').collect();
    let [head, range, tail] = parts.as_slice() else {
        return Err(format!("host range in `{line}` is not head[start:end]tail"));
    };
    let bounds: Vec<&str> = range.split(':').collect();
    let (begin, end, step) = match bounds.as_slice() {
        [begin, end] => (*begin, *end, "1"),
        [begin, end, step] => (*begin, *end, *step),
        _ => {
            return Err(format!(
                "host range `{line}` must be begin:end or begin:end:step"
            ));
        }
    };
    let begin = if begin.is_empty() { "0" } else { begin };
    if end.is_empty() {
        return Err(format!("host range `{line}` must specify an end value"));
    }
    let width = if begin.starts_with('0') && begin.len() > 1 {
        if begin.len() != end.len() {
            return Err(format!(
                "host range `{line}` must specify equal-length begin and end formats"
            ));
        }
        begin.len()
    } else {
        0
    };
    let values: Vec<String> = match (ASCII_LETTERS.find(begin), ASCII_LETTERS.find(end)) {
        (Some(first), Some(last)) => {
            if first > last {
                return Err(format!("host range `{line}` must have begin <= end"));
            }
            // A bad step makes Python fall back to the numeric reading, which fails.
            let step = python_int(step)
                .filter(|s| *s != 0)
                .ok_or_else(|| format!("host range `{line}`: invalid step `{step}`"))?;
            let letters: Vec<char> = ASCII_LETTERS.chars().collect();
            let slice = letters.get(first..=last).unwrap_or_default();
            if step > 0 {
                let step = usize::try_from(step).unwrap_or(usize::MAX);
                slice.iter().step_by(step).map(char::to_string).collect()
            } else {
                Vec::new()
            }
        }
        _ => {
            let number = |text: &str| {
                python_int(text).ok_or_else(|| {
                    format!("host range `{line}`: `{text}` is not a number or a letter")
                })
            };
            let (first, last, step) = (number(begin)?, number(end)?, number(step)?);
            if step == 0 {
                return Err(format!("host range `{line}`: the step must not be zero"));
            }
            let count = if step > 0 && last >= first {
                last.saturating_sub(first) / step
            } else if step < 0 && last < first {
                first.saturating_sub(last) / step.saturating_neg()
            } else {
                0
            };
            if count >= MAX_RANGE_HOSTS as i128 {
                return Err(format!(
                    "host range `{line}` expands to over {MAX_RANGE_HOSTS} hosts"
                ));
            }
            // `range(first, last + 1, step)`.
            let mut values = Vec::new();
            let mut value = first;
            while (step > 0 && value <= last) || (step < 0 && value > last.saturating_add(1)) {
                values.push(zero_fill(&value.to_string(), width));
                match value.checked_add(step) {
                    Some(next) => value = next,
                    None => break,
                }
            }
            values
        }
    };
    if hosts.len() + values.len() > MAX_RANGE_HOSTS {
        return Err(format!(
            "host range `{line}` expands to over {MAX_RANGE_HOSTS} hosts"
        ));
    }
    for value in values {
        let name = format!("{head}{value}{tail}");
        if name.contains('[') {
            expand_into(&name, hosts)?;
        } else {
            hosts.push(name);
        }
    }
    Ok(())
}

/// Python's `str.zfill(width)`: zeros after any sign.
fn zero_fill(text: &str, width: usize) -> String {
    if text.len() >= width {
        return text.to_owned();
    }
    let (sign, digits) = match text.strip_prefix(['-', '+']) {
        Some(rest) => (text.get(..1).unwrap_or_default(), rest),
        None => ("", text),
    };
    format!("{sign}{}{digits}", "0".repeat(width - text.len()))
}

/// `split_host_pattern`'s colon splitting: the pieces of `(?:[^\s:\[\]]|\[[^\]]*\])+`,
/// so that `[x:y]` subscripts and ranges keep their colons.
pub(super) fn split_on_colons(pattern: &str) -> Vec<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let start = at;
        loop {
            match chars.get(at) {
                Some(c) if !c.is_whitespace() && !matches!(c, ':' | '[' | ']') => at += 1,
                Some('[') => match chars
                    .get(at + 1..)
                    .and_then(|r| r.iter().position(|c| *c == ']'))
                {
                    Some(close) => at += close + 2,
                    None => break,
                },
                _ => break,
            }
        }
        if at == start {
            at += 1;
        } else {
            pieces.push(chars.get(start..at).unwrap_or_default().iter().collect());
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::{expand_host_pattern, expand_hostname_range, parse_address, split_on_colons};

    #[test]
    fn addresses_like_ansible() {
        let parse = |a: &str| parse_address(a).unwrap();
        let some = |h: &str, p: Option<&str>| Some((h.to_owned(), p.map(str::to_owned)));
        assert_eq!(parse("web1"), some("web1", None));
        assert_eq!(parse("web1:2222"), some("web1", Some("2222")));
        assert_eq!(parse("10.0.0.1:22"), some("10.0.0.1", Some("22")));
        assert_eq!(parse("[::1]:22"), some("::1", Some("22")));
        assert_eq!(parse("fe80::1"), some("fe80::1", None));
        assert_eq!(
            parse("web[01:03].example.com:22"),
            some("web[01:03].example.com", Some("22"))
        );
        assert_eq!(parse("db-[a:c]"), some("db-[a:c]", None));
        assert_eq!(parse("web:db"), None);
        assert_eq!(parse("web*"), None);
        assert_eq!(parse("web-"), None);
        assert_eq!(parse("_"), None);
        assert_eq!(parse("a_b"), some("a_b", None));
        assert_eq!(parse("my/host:22"), None);
    }

    #[test]
    fn ranges_like_ansible() {
        let expand = |p: &str| expand_hostname_range(p).unwrap();
        assert_eq!(expand("www[001:003]"), ["www001", "www002", "www003"]);
        assert_eq!(expand("n[1:9:4].x"), ["n1.x", "n5.x", "n9.x"]);
        assert_eq!(expand("r[1:2]n[a:b]"), ["r1na", "r1nb", "r2na", "r2nb"]);
        assert_eq!(expand("n[:2]"), ["n0", "n1", "n2"]);
        assert_eq!(expand("n[3:1]"), Vec::<String>::new());
        assert_eq!(expand("n[y:B]"), ["ny", "nz", "nA", "nB"]);
        assert_eq!(expand("n[a:e:2]"), ["na", "nc", "ne"]);
        for bad in [
            "n[1:999999999]",
            "n[1:2:0]",
            "n[01:100]",
            "n[1]",
            "n[1:]",
            "n[1:x]",
            "n[3",
            "n[c:a]",
        ] {
            assert!(expand_hostname_range(bad).is_err(), "{bad}");
        }
        assert_eq!(
            expand_host_pattern("web[1:2]:2222").unwrap(),
            (
                vec!["web1".to_owned(), "web2".to_owned()],
                Some("2222".to_owned())
            )
        );
        assert_eq!(
            expand_host_pattern("odd/host:22").unwrap(),
            (vec!["odd/host:22".to_owned()], None)
        );
    }

    #[test]
    fn colon_pieces() {
        assert_eq!(split_on_colons("web:&db:!c"), ["web", "&db", "!c"]);
        assert_eq!(split_on_colons("web[0:2]:db"), ["web[0:2]", "db"]);
        assert_eq!(split_on_colons("a b"), ["a", "b"]);
        assert_eq!(split_on_colons("x[1:"), ["x", "1"]);
    }
}
