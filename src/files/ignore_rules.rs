//! Which files `stream_files` yields, decided on the client as the `ignore` crate's walker
//! (LocalExecutor's) decides: `.ignore`, `.gitignore` and `.git/info/exclude` compiled with
//! [`GitignoreBuilder`], ancestor directories first, deeper files win, `.ignore` over
//! `.gitignore` over `.git/info/exclude`, git rules only inside a repository and not beyond
//! its root; hidden files skipped unless whitelisted; LocalExecutor's exact extension
//! filter. No I/O here: [`crate::files::stream_files`] finds and fetches the ignore files.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The ignore rules of one directory.
#[derive(Debug, Default)]
struct DirRules {
    ignore: Option<Gitignore>,
    gitignore: Option<Gitignore>,
    exclude: Option<Gitignore>,
    /// A `.git` or `.jj` is here: a repository root.
    has_git: bool,
}

/// A match result, as `ignore::Match` without the glob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Verdict {
    #[default]
    None,
    Ignore,
    Whitelist,
}

impl Verdict {
    fn of(matcher: Option<&Gitignore>, path: &Path, is_dir: bool) -> Self {
        match matcher.map(|m| m.matched(path, is_dir)) {
            Some(m) if m.is_ignore() => Verdict::Ignore,
            Some(m) if m.is_whitelist() => Verdict::Whitelist,
            _ => Verdict::None,
        }
    }

    fn or(self, other: Verdict) -> Verdict {
        if self == Verdict::None { other } else { self }
    }
}

/// The first (deepest) verdict per kind of ignore file, as `ignore`'s `matched_ignore`.
#[derive(Debug, Default)]
struct Verdicts {
    ignore: Verdict,
    gitignore: Verdict,
    exclude: Verdict,
    saw_git: bool,
}

impl Verdicts {
    fn consult(&mut self, rules: &DirRules, path: &Path, is_dir: bool, any_git: bool) {
        if self.ignore == Verdict::None {
            self.ignore = Verdict::of(rules.ignore.as_ref(), path, is_dir);
        }
        // Git rules apply inside a repository, and not beyond its root.
        if any_git && !self.saw_git {
            if self.gitignore == Verdict::None {
                self.gitignore = Verdict::of(rules.gitignore.as_ref(), path, is_dir);
            }
            if self.exclude == Verdict::None {
                self.exclude = Verdict::of(rules.exclude.as_ref(), path, is_dir);
            }
        }
        self.saw_git |= rules.has_git;
    }

    fn result(&self) -> Verdict {
        self.ignore.or(self.gitignore).or(self.exclude)
    }
}

/// Every ignore rule that applies below one root.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// The root as given (paths are matched as `root.join(rel)`).
    root: PathBuf,
    /// The canonical root (parent rules match `canonical.join(rel)`).
    canonical: PathBuf,
    /// By directory relative to the root (`""` is the root).
    tree: HashMap<PathBuf, DirRules>,
    /// The parent directories and their rules, nearest first.
    parents: Vec<(PathBuf, DirRules)>,
}

impl Rules {
    /// No rules yet for `root`, whose canonical path is `canonical`.
    pub(crate) fn new(root: &Path, canonical: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            canonical: canonical.to_path_buf(),
            ..Self::default()
        }
    }

    /// What the ignore files say about `rel` (a path below the root).
    fn verdict(&self, rel: &Path, is_dir: bool) -> Verdict {
        let chain: Vec<&DirRules> = rel
            .ancestors()
            .skip(1)
            .filter_map(|dir| self.tree.get(dir))
            .collect();
        let parents = self.parents.iter().map(|(_, rules)| rules);
        let any_git = chain
            .iter()
            .copied()
            .chain(parents.clone())
            .any(|r| r.has_git);
        let mut verdicts = Verdicts::default();
        let local = self.root.join(rel);
        for rules in chain {
            verdicts.consult(rules, &local, is_dir, any_git);
        }
        // Parent rules need the path rewritten; skip that when there are none.
        let has_rules =
            |r: &&DirRules| r.ignore.is_some() || r.gitignore.is_some() || r.exclude.is_some();
        if parents.clone().any(|r| has_rules(&r)) {
            let absolute = self.canonical.join(rel);
            for rules in parents {
                verdicts.consult(rules, &absolute, is_dir, any_git);
            }
        }
        verdicts.result()
    }
}

/// Which ignore file a fetched text belongs to.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Ignore,
    GitIgnore,
    Exclude,
}

/// Where a rule lives: a directory of the tree (relative to the root) or a parent directory
/// of the canonical root (absolute).
#[derive(Debug, Clone)]
enum Scope {
    Tree(PathBuf),
    Parent(PathBuf),
}

/// One ignore file to fetch.
#[derive(Debug)]
pub(crate) struct Source {
    scope: Scope,
    kind: Kind,
    /// The directory the patterns are relative to (as matched paths spell it).
    base: PathBuf,
    /// The file to read.
    pub(crate) file: PathBuf,
}

/// Turns marker paths (`.ignore`, `.gitignore`, `.git`, `.jj`; absolute in the parents of
/// the canonical root, relative below the root) into repository flags and ignore files to
/// fetch.
pub(crate) fn plan(
    rules: &mut Rules,
    parent_markers: &[PathBuf],
    tree_markers: &[PathBuf],
) -> Vec<Source> {
    rules.parents = rules
        .canonical
        .ancestors()
        .skip(1)
        .map(|dir| (dir.to_path_buf(), DirRules::default()))
        .collect();
    let tree = tree_markers.iter().filter_map(|rel| {
        let dir = rel.parent()?;
        // `root.join("")` would add a trailing slash.
        let base = if dir.as_os_str().is_empty() {
            rules.root.clone()
        } else {
            rules.root.join(dir)
        };
        Some((Scope::Tree(dir.to_path_buf()), base, rel.file_name()?))
    });
    let parents = parent_markers.iter().filter_map(|path| {
        let dir = path.parent()?.to_path_buf();
        Some((Scope::Parent(dir.clone()), dir, path.file_name()?))
    });
    let mut sources = Vec::new();
    let mut repositories = Vec::new();
    for (scope, base, name) in tree.chain(parents) {
        let (kind, file) = match name.to_str() {
            Some(".ignore") => (Kind::Ignore, base.join(name)),
            Some(".gitignore") => (Kind::GitIgnore, base.join(name)),
            Some(".git") => {
                repositories.push(scope.clone());
                (Kind::Exclude, base.join(".git/info/exclude"))
            }
            Some(".jj") => {
                repositories.push(scope);
                continue;
            }
            _ => continue,
        };
        sources.push(Source {
            scope,
            kind,
            base,
            file,
        });
    }
    for scope in repositories {
        if let Some(dir) = rules.dir_mut(&scope) {
            dir.has_git = true;
        }
    }
    sources
}

impl Rules {
    /// Compiles a fetched ignore file into the rules of its directory.
    pub(crate) fn add(&mut self, source: &Source, text: &[u8]) {
        let Some(matcher) = compile(&source.base, &source.file, text) else {
            return;
        };
        let Some(dir) = self.dir_mut(&source.scope) else {
            return;
        };
        match source.kind {
            Kind::Ignore => dir.ignore = Some(matcher),
            Kind::GitIgnore => dir.gitignore = Some(matcher),
            Kind::Exclude => dir.exclude = Some(matcher),
        }
    }

    fn dir_mut(&mut self, scope: &Scope) -> Option<&mut DirRules> {
        match scope {
            Scope::Tree(dir) => Some(self.tree.entry(dir.clone()).or_default()),
            Scope::Parent(dir) => self
                .parents
                .iter_mut()
                .find(|(path, _)| path == dir)
                .map(|(_, rules)| rules),
        }
    }
}

/// Compiles one ignore file as `ignore`'s `GitignoreBuilder::add` reads it: lines split on
/// `\n` (a trailing `\r` dropped), a leading BOM removed, lines that are not UTF-8 skipped.
fn compile(base: &Path, file: &Path, text: &[u8]) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(base);
    let mut lines = text.split(|&b| b == b'\n').peekable();
    let mut first = true;
    while let Some(line) = lines.next() {
        if line.is_empty() && lines.peek().is_none() {
            break;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Ok(line) = std::str::from_utf8(line) {
            let line = if first {
                line.trim_start_matches('\u{feff}')
            } else {
                line
            };
            // A bad glob is skipped, as the `ignore` walker skips it.
            let _ = builder.add_line(Some(file.to_path_buf()), line);
        }
        first = false;
    }
    builder.build().ok()
}

/// Decides which listed files are yielded.
#[derive(Debug)]
pub(crate) struct Selector {
    rules: Rules,
    extensions: Option<Vec<String>>,
    /// Whether each directory seen so far is ignored (itself or through an ancestor).
    dirs: HashMap<PathBuf, bool>,
}

/// LocalExecutor's extension filter: `Path::extension` equal to an entry, exactly.
pub(crate) fn wants_extension(extensions: Option<&[String]>, path: &Path) -> bool {
    let Some(extensions) = extensions else {
        return true;
    };
    let Some(extension) = path.extension() else {
        return false;
    };
    let extension = extension.to_string_lossy();
    extensions.iter().any(|wanted| *wanted == extension)
}

impl Selector {
    pub(crate) fn new(rules: Rules, extensions: Option<Vec<String>>) -> Self {
        Self {
            rules,
            extensions,
            dirs: HashMap::new(),
        }
    }

    fn dir_ignored(&mut self, dir: &Path) -> bool {
        if dir.as_os_str().is_empty() {
            return false;
        }
        if let Some(&ignored) = self.dirs.get(dir) {
            return ignored;
        }
        let ignored = dir.parent().is_some_and(|parent| self.dir_ignored(parent))
            || self.rules.verdict(dir, true) == Verdict::Ignore;
        self.dirs.insert(dir.to_path_buf(), ignored);
        ignored
    }

    /// Whether the walker would yield the regular file at `rel` (below the root).
    pub(crate) fn wants(&mut self, rel: &Path) -> bool {
        if !wants_extension(self.extensions.as_deref(), rel) {
            return false;
        }
        if rel.parent().is_some_and(|parent| self.dir_ignored(parent)) {
            return false;
        }
        let hidden = rel
            .file_name()
            .is_some_and(|name| name.as_encoded_bytes().starts_with(b"."));
        match self.rules.verdict(rel, false) {
            Verdict::Ignore => false,
            Verdict::Whitelist => true,
            Verdict::None => !hidden,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_with(tree: Vec<(&str, DirRules)>) -> Rules {
        Rules {
            root: PathBuf::from("/r"),
            canonical: PathBuf::from("/r"),
            tree: tree
                .into_iter()
                .map(|(d, r)| (PathBuf::from(d), r))
                .collect(),
            parents: Vec::new(),
        }
    }

    fn matcher(base: &str, lines: &str) -> Option<Gitignore> {
        compile(
            Path::new(base),
            &Path::new(base).join(".x"),
            lines.as_bytes(),
        )
    }

    #[test]
    fn deeper_files_win_and_ignore_beats_gitignore() {
        let rules = rules_with(vec![
            (
                "",
                DirRules {
                    gitignore: matcher("/r", "*.log\n"),
                    has_git: true,
                    ..DirRules::default()
                },
            ),
            (
                "sub",
                DirRules {
                    gitignore: matcher("/r/sub", "!keep.log\r\n"),
                    ignore: matcher("/r/sub", "\u{feff}secret*\n"),
                    ..DirRules::default()
                },
            ),
        ]);
        assert_eq!(rules.verdict(Path::new("a.log"), false), Verdict::Ignore);
        assert_eq!(
            rules.verdict(Path::new("sub/keep.log"), false),
            Verdict::Whitelist
        );
        assert_eq!(
            rules.verdict(Path::new("sub/other.log"), false),
            Verdict::Ignore
        );
        assert_eq!(
            rules.verdict(Path::new("sub/secret.txt"), false),
            Verdict::Ignore
        );
        assert_eq!(rules.verdict(Path::new("b.txt"), false), Verdict::None);
    }

    #[test]
    fn gitignore_needs_a_repository() {
        let rules = rules_with(vec![(
            "",
            DirRules {
                gitignore: matcher("/r", "*.log\n"),
                ..DirRules::default()
            },
        )]);
        assert_eq!(rules.verdict(Path::new("a.log"), false), Verdict::None);
    }

    #[test]
    fn selector_prunes_ignored_directories_and_hidden_files() {
        let rules = rules_with(vec![(
            "",
            DirRules {
                ignore: matcher("/r", "build/\n!.keep\n"),
                ..DirRules::default()
            },
        )]);
        let mut selector = Selector {
            rules,
            extensions: None,
            dirs: HashMap::new(),
        };
        assert!(!selector.wants(Path::new("build/x/y.rs")));
        assert!(selector.wants(Path::new("src/build.rs")));
        assert!(!selector.wants(Path::new(".hidden")));
        assert!(selector.wants(Path::new(".keep")));
        selector.extensions = Some(vec!["rs".into()]);
        assert!(selector.wants(Path::new("src/main.rs")));
        assert!(!selector.wants(Path::new("src/main.RS")));
        assert!(!selector.wants(Path::new("Makefile")));
    }
}
