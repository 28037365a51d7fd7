//! Which entries apply to a host: the `Host` conditions of a block and of the `Include`s
//! around it, each evaluated once per host, and the index that skips the blocks which name
//! other hosts literally.

use std::{collections::HashMap, sync::Arc};

use crate::config::pattern;

use super::Entry;

#[derive(Debug, Clone)]
pub(super) struct Pattern {
    negated: bool,
    /// Lower-cased, so that literal ones index the block by name ([`EntryIndex`]); matching
    /// ignores case anyway.
    glob: String,
}

#[derive(Debug)]
pub(super) enum Condition {
    Host(Vec<Pattern>),
    /// Inside a `Match` block, which is not supported.
    Never,
}

/// A block's condition and those of the `Include`s around it. Shared by every entry of the
/// block and linked to the enclosing one rather than copied into it, so that nesting costs
/// one node per block (copying every enclosing pattern list at every level made a
/// 5,000-pattern `Host` with nested includes take seconds), and evaluated once per host.
#[derive(Debug)]
pub(super) struct Scope {
    /// Index into the per-host memo of [`SshConfig::applied`](super::SshConfig::applied).
    pub(super) id: usize,
    pub(super) condition: Condition,
    pub(super) outer: Option<Arc<Scope>>,
}

impl Condition {
    /// Whether `host` (lower-cased) passes: OpenSSH's rule for a `Host` line, where a
    /// negated pattern that matches excludes the host whatever else matches.
    fn matches(&self, host: &str) -> bool {
        let Condition::Host(patterns) = self else {
            return false;
        };
        let patterns = patterns.iter().map(|p| (p.negated, p.glob.as_str()));
        pattern::match_list(host, patterns) == Some(true)
    }
}

/// The patterns of a `Host` line, each argument one pattern (a comma in it is literal, as in
/// OpenSSH's `Host`).
pub(super) fn host_patterns(args: Vec<String>) -> std::result::Result<Vec<Pattern>, String> {
    if args.is_empty() {
        return Err("Host needs at least one pattern".to_owned());
    }
    Ok(args
        .iter()
        .map(|arg| {
            let (negated, glob) = pattern::split_negation(arg);
            Pattern {
                negated,
                glob: glob.to_ascii_lowercase(),
            }
        })
        .collect())
}

/// The entries that can apply to a host, by entry position.
///
/// A block whose `Host` line names hosts literally (no `*` or `?` in its positive patterns)
/// applies only to those names; so does every entry inside it or inside an `Include` such a
/// block encloses. Those entries are listed under each name; all others (wildcard blocks,
/// the top of the file) are `general`. A host's candidates are both lists merged in file
/// order, then checked as before: the index only leaves out entries that cannot apply.
/// Generated configurations with a block per host (thousands of them) resolve an alias in
/// time that does not grow with the file.
#[derive(Debug, Clone, Default)]
pub(super) struct EntryIndex {
    general: Vec<usize>,
    by_host: HashMap<String, Vec<usize>>,
}

impl EntryIndex {
    pub(super) fn of(entries: &[Entry]) -> Self {
        let mut index = EntryIndex::default();
        for (position, entry) in entries.iter().enumerate() {
            match entry.scope.as_deref().and_then(literal_hosts) {
                Some(names) => {
                    for name in names {
                        let list = index.by_host.entry(name.to_owned()).or_default();
                        if list.last() != Some(&position) {
                            list.push(position);
                        }
                    }
                }
                None => index.general.push(position),
            }
        }
        index
    }

    /// The positions of the entries that may apply to `host` (lower-cased), in file order.
    pub(super) fn candidates<'a>(&'a self, host: &str) -> impl Iterator<Item = usize> + 'a {
        let specific = self.by_host.get(host).map_or(&[][..], Vec::as_slice);
        let (mut general, mut specific) =
            (self.general.iter().peekable(), specific.iter().peekable());
        std::iter::from_fn(move || match (general.peek(), specific.peek()) {
            (Some(&&g), Some(&&s)) if g <= s => general.next().copied(),
            (Some(_), Some(_)) | (None, Some(_)) => specific.next().copied(),
            (Some(_), None) => general.next().copied(),
            (None, None) => None,
        })
    }
}

/// The only host names a scope (or one around it) can match: those of the innermost `Host`
/// condition whose positive patterns are all literal (`None` when there is none). A
/// condition without positive patterns, or a `Match` block, matches no name: `Some([])`.
fn literal_hosts(scope: &Scope) -> Option<Vec<&str>> {
    let mut next = Some(scope);
    while let Some(scope) = next {
        match &scope.condition {
            Condition::Never => return Some(Vec::new()),
            Condition::Host(patterns) => {
                let positive: Vec<&str> = patterns
                    .iter()
                    .filter(|p| !p.negated)
                    .map(|p| p.glob.as_str())
                    .collect();
                if positive.iter().all(|glob| pattern::is_literal(glob)) {
                    return Some(positive);
                }
            }
        }
        next = scope.outer.as_deref();
    }
    None
}

/// Whether `scope` and every scope around it match `host`, each evaluated at most once per
/// host (`memo` is indexed by [`Scope::id`]).
pub(super) fn holds(scope: &Scope, host: &str, memo: &mut [Option<bool>]) -> bool {
    let mut chain = Vec::new();
    let mut next = Some(scope);
    // Innermost first; stops at the first scope already known.
    while let Some(scope) = next {
        match memo.get(scope.id).copied().flatten() {
            Some(known) => {
                if !known {
                    return false;
                }
                break;
            }
            None => chain.push(scope),
        }
        next = scope.outer.as_deref();
    }
    // Outermost first, so that a scope's answer includes those around it.
    let mut result = true;
    for scope in chain.into_iter().rev() {
        result = result && scope.condition.matches(host);
        if let Some(slot) = memo.get_mut(scope.id) {
            *slot = Some(result);
        }
    }
    result
}
