//! Remote walks shared by the adapters' grep and glob: the directory walk runs on the remote
//! host (`find -print0`, one exec), so only paths cross the wire; file contents are read over
//! SFTP only for the candidates a caller asks for.
//!
//! * [`list_files`]: the regular files below a directory (symlinks are neither followed nor
//!   listed), optionally only the direct children and only up to a size.
//! * [`list_tree`] and [`glob_paths`]: a snapshot of the tree below a glob pattern's literal
//!   prefix, and `glob` 0.3's own algorithm run over that snapshot, so results and their
//!   order are what `glob::glob` returns on the host itself.
//! * [`grep_lines`]: the line matcher of agent-sdk's `LocalFileSystem::grep`.
//!
//! # Remote requirements
//!
//! POSIX `sh` and a `find` with `-mindepth`, `-maxdepth` and `-print0` (GNU and BusyBox).
// The glob snapshot and the agent-sdk line matcher are used by the agent-sdk adapter only.
#![cfg_attr(not(feature = "agent-sdk"), allow(dead_code))]

use std::{
    collections::HashMap,
    ffi::OsString,
    path::{Component, Path, PathBuf},
};

use crate::{
    command::ExitStatus,
    error::{Error, Result},
    executor::SshExecutor,
    files::{option_safe, quoted_path, run_collect},
};

#[cfg(unix)]
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
}

/// `<dir>/.` as one quoted word: `find` follows a symlinked start directory, as a local walk
/// that starts with `is_dir()` does, and every printed path starts with `<dir>/./`.
fn find_start(dir: &Path) -> Result<Vec<u8>> {
    let mut start = dir.as_os_str().as_encoded_bytes().to_vec();
    start.extend_from_slice(b"/.");
    quoted_path(&path_from_bytes(&start))
}

fn find_prefix(dir: &Path) -> Vec<u8> {
    let mut prefix = option_safe(dir.as_os_str().as_encoded_bytes());
    prefix.extend_from_slice(b"/./");
    prefix
}

/// A `find` that could not run at all is an error; problems inside the tree (unreadable
/// directories) are skipped, as the local walks skip them.
fn check_ran(status: &ExitStatus, stderr: &[u8], dir: &Path) -> Result<()> {
    if matches!(status, ExitStatus::Code(126 | 127)) {
        return Err(Error::InvalidInput {
            reason: format!(
                "cannot walk {} remotely: find did not run ({})",
                dir.display(),
                String::from_utf8_lossy(stderr).trim()
            ),
        });
    }
    Ok(())
}

/// The regular files below `dir` (not following symlinks), each as `dir` joined with its
/// path below it. `recursive: false` lists direct children only; `max_size` skips larger
/// files on the remote side.
pub(crate) async fn list_files(
    executor: &SshExecutor,
    dir: &Path,
    recursive: bool,
    max_size: Option<u64>,
) -> Result<Vec<PathBuf>> {
    let mut script = b"exec find ".to_vec();
    script.extend_from_slice(&find_start(dir)?);
    script.extend_from_slice(b" -mindepth 1");
    if !recursive {
        script.extend_from_slice(b" -maxdepth 1");
    }
    script.extend_from_slice(b" -type f");
    if let Some(max) = max_size {
        // `-size -Nc`: fewer than N bytes.
        script.extend_from_slice(format!(" -size -{}c", max.saturating_add(1)).as_bytes());
    }
    script.extend_from_slice(b" -print0\n");
    let (status, out) = run_collect(executor, &script, Vec::new()).await?;
    check_ran(&status, &out.stderr, dir)?;
    let prefix = find_prefix(dir);
    Ok(out
        .stdout
        .split(|&b| b == 0)
        .filter_map(|record| record.strip_prefix(prefix.as_slice()))
        .filter(|rel| !rel.is_empty())
        .map(|rel| dir.join(path_from_bytes(rel)))
        .collect())
}

/// What the base of a [`Tree`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BaseKind {
    Missing,
    NotDir,
    Dir,
}

/// A snapshot of the tree below `base`, as `glob` sees the file system: each directory's
/// children with whether they are directories (symlinks followed when the walk followed
/// them).
#[derive(Debug)]
pub(crate) struct Tree {
    base: PathBuf,
    kind: BaseKind,
    /// Every path below `base` that exists (including dangling symlinks) → is a directory.
    entries: HashMap<PathBuf, bool>,
    /// Directory → children (name, is a directory).
    children: HashMap<PathBuf, Vec<(OsString, bool)>>,
}

/// Lexical normalization for lookups (`.` dropped, `..` pops).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Tree {
    /// `(exists, is_dir)` of `path` (normalized lexically).
    fn lookup(&self, path: &Path) -> (bool, bool) {
        let path = normalize(path);
        if path == self.base {
            return (self.kind != BaseKind::Missing, self.kind == BaseKind::Dir);
        }
        if self.base.starts_with(&path) {
            // A strict ancestor of an existing base is a directory.
            let exists = self.kind != BaseKind::Missing;
            return (exists, exists);
        }
        match self.entries.get(&path) {
            Some(&is_dir) => (true, is_dir),
            None => (false, false),
        }
    }

    fn read_dir(&self, path: &Path) -> Option<&[(OsString, bool)]> {
        self.children.get(&normalize(path)).map(Vec::as_slice)
    }
}

/// Walks the tree below `base` remotely, down to `max_depth` levels (`None`: all of it).
/// With `follow_links`, symlinked directories are walked into (`find -L`, as `glob` does);
/// without, a symlink is listed as a non-directory.
pub(crate) async fn list_tree(
    executor: &SshExecutor,
    base: &Path,
    max_depth: Option<usize>,
    follow_links: bool,
) -> Result<Tree> {
    let mut walk = b"find ".to_vec();
    if follow_links {
        walk.extend_from_slice(b"-L ");
    }
    walk.extend_from_slice(&find_start(base)?);
    walk.extend_from_slice(b" -mindepth 1");
    if let Some(depth) = max_depth {
        walk.extend_from_slice(format!(" -maxdepth {depth}").as_bytes());
    }
    let mut script = b"b=".to_vec();
    script.extend_from_slice(&quoted_path(base)?);
    script.extend_from_slice(
        b"\nif [ -d \"$b\" ]; then printf 'D\\0'; \
          elif [ -e \"$b\" ] || [ -h \"$b\" ]; then printf 'F\\0'; exit 0; \
          else printf 'M\\0'; exit 0; fi\n",
    );
    script.extend_from_slice(&walk);
    script.extend_from_slice(b" -type d -print0\nprintf '\\0'\n");
    script.extend_from_slice(&walk);
    script.extend_from_slice(b" ! -type d -print0\n");
    let (status, out) = run_collect(executor, &script, Vec::new()).await?;
    check_ran(&status, &out.stderr, base)?;
    let mut records = out.stdout.split(|&b| b == 0);
    let kind = match records.next() {
        Some(b"D") => BaseKind::Dir,
        Some(b"F") => BaseKind::NotDir,
        Some(b"M") => BaseKind::Missing,
        _ => {
            return Err(Error::InvalidInput {
                reason: format!(
                    "cannot walk {} remotely: {}",
                    base.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
    };
    let mut tree = Tree {
        base: base.to_path_buf(),
        kind,
        entries: HashMap::new(),
        children: HashMap::new(),
    };
    if kind != BaseKind::Dir {
        return Ok(tree);
    }
    tree.children.insert(base.to_path_buf(), Vec::new());
    let prefix = find_prefix(base);
    let mut dirs_done = false;
    for record in records {
        if record.is_empty() {
            dirs_done = true;
            continue;
        }
        let Some(rel) = record.strip_prefix(prefix.as_slice()) else {
            continue;
        };
        let path = base.join(path_from_bytes(rel));
        let is_dir = !dirs_done;
        if is_dir {
            tree.children.entry(path.clone()).or_default();
        }
        tree.entries.insert(path, is_dir);
    }
    for (path, &is_dir) in &tree.entries {
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            tree.children
                .entry(parent.to_path_buf())
                .or_default()
                .push((name.to_os_string(), is_dir));
        }
    }
    for list in tree.children.values_mut() {
        list.sort_by(|a, b| a.0.cmp(&b.0));
    }
    Ok(tree)
}

/// One component of a glob pattern, with what `glob`'s parser would know of it.
struct Part {
    pattern: glob::Pattern,
    text: String,
    recursive: bool,
    meta: bool,
}

/// The components of an absolute pattern after its root, as `glob::glob` splits them, and
/// the literal directory prefix to walk from plus how deep below it the pattern reaches.
pub(crate) struct GlobPlan {
    parts: Vec<Part>,
    require_dir: bool,
    /// The literal prefix: the directory the remote walk starts at.
    pub(crate) base: PathBuf,
    /// Levels below `base` the pattern can reach (`None`: `**`, unbounded).
    pub(crate) depth: Option<usize>,
}

fn has_meta(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Plans `glob::glob(pattern)` for an absolute `pattern` (`/`-separated).
///
/// # Errors
/// The pattern error `glob` itself reports.
pub(crate) fn plan_glob(pattern: &str) -> std::result::Result<GlobPlan, glob::PatternError> {
    glob::Pattern::new(pattern)?;
    let rest = pattern.trim_start_matches('/');
    let mut parts = Vec::new();
    for text in rest.split_terminator('/') {
        parts.push(Part {
            pattern: glob::Pattern::new(text)?,
            text: text.to_owned(),
            recursive: text == "**",
            meta: has_meta(text),
        });
    }
    if rest.is_empty() {
        parts.push(Part {
            pattern: glob::Pattern::new("")?,
            text: String::new(),
            recursive: false,
            meta: false,
        });
    }
    let literal = parts.iter().take_while(|p| !p.meta).count();
    let mut base = PathBuf::from("/");
    for part in parts.iter().take(literal) {
        base.push(&part.text);
    }
    let below = parts.len() - literal;
    let depth = if parts.iter().any(|p| p.recursive) {
        None
    } else {
        Some(below)
    };
    Ok(GlobPlan {
        parts,
        require_dir: pattern.ends_with('/'),
        base,
        depth,
    })
}

/// A todo entry of `glob`'s iterator: a path, whether it is a directory, and the index of
/// the pattern component it still has to match (`None`: a finished match).
type Todo = (PathBuf, bool, Option<usize>);

/// `glob` 0.3's `fill_todo`, over the snapshot.
fn fill_todo(
    todo: &mut Vec<Todo>,
    plan: &GlobPlan,
    tree: &Tree,
    idx: usize,
    path: &Path,
    dir: bool,
) {
    let options = glob::MatchOptions::new();
    let add = |todo: &mut Vec<Todo>, next: PathBuf, next_dir: bool| {
        if idx + 1 == plan.parts.len() {
            todo.push((next, next_dir, None));
        } else {
            fill_todo(todo, plan, tree, idx + 1, &next, next_dir);
        }
    };
    let part = &plan.parts[idx];
    if !part.meta {
        let special = part.text == "." || part.text == "..";
        let next = path.join(&part.text);
        let (exists, next_dir) = tree.lookup(&next);
        if (special && dir) || (!special && exists) {
            add(todo, next, next_dir);
        }
        return;
    }
    if !dir {
        return;
    }
    // `glob` reports an unreadable directory as an error item, which the callers drop.
    let Some(children) = tree.read_dir(path) else {
        return;
    };
    todo.extend(
        children
            .iter()
            .rev()
            .map(|(name, child_dir)| (path.join(name), *child_dir, Some(idx))),
    );
    if part.text.starts_with('.') {
        for special in [".", ".."] {
            if part.pattern.matches_with(special, options) {
                let next = path.join(special);
                let (_, next_dir) = tree.lookup(&next);
                add(todo, next, next_dir);
            }
        }
    }
}

/// `glob::glob`'s results (errors dropped, as `LocalFileSystem::glob` drops them), in its
/// order, computed over a snapshot from [`list_tree`] taken at `plan.base`.
pub(crate) fn glob_paths(plan: &GlobPlan, tree: &Tree) -> Vec<PathBuf> {
    let options = glob::MatchOptions::new();
    let mut results = Vec::new();
    let mut todo: Vec<Todo> = Vec::new();
    let parts = &plan.parts;
    if parts.is_empty() {
        return results;
    }
    let (_, root_dir) = tree.lookup(Path::new("/"));
    fill_todo(&mut todo, plan, tree, 0, Path::new("/"), root_dir);
    while let Some((path, dir, idx)) = todo.pop() {
        let Some(mut idx) = idx else {
            if !plan.require_dir || dir {
                results.push(path);
            }
            continue;
        };
        if parts[idx].recursive {
            let mut next = idx;
            while next + 1 < parts.len() && parts[next + 1].recursive {
                next += 1;
            }
            if dir {
                // The snapshot is finite and every child path is longer than its parent, so
                // even a symlink cycle ends (`find -L` does not descend into one).
                fill_todo(&mut todo, plan, tree, next, &path, dir);
                if next == parts.len() - 1 {
                    results.push(path);
                    continue;
                }
                idx = next + 1;
            } else if next == parts.len() - 1 {
                continue;
            } else {
                idx = next + 1;
            }
        }
        let Some(name) = path.file_name().and_then(|s| s.to_str()) else {
            continue;
        };
        if parts[idx].pattern.matches_with(name, options) {
            if idx == parts.len() - 1 {
                if !plan.require_dir || dir {
                    results.push(path);
                }
            } else {
                fill_todo(&mut todo, plan, tree, idx + 1, &path, dir);
            }
        }
    }
    results
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineMatch {
    pub(crate) line_number: usize,
    pub(crate) line: String,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Whether `content` looks binary: a NUL byte in its first KiB.
pub(crate) fn looks_binary(content: &[u8]) -> bool {
    content.iter().take(1024).any(|&b| b == 0)
}

/// `LocalFileSystem::grep_bytes`: binary files (a NUL in the first KiB) have no matches;
/// otherwise the first match of each line (lossy UTF-8, `str::lines`), 1-based line
/// numbers, byte offsets within the line.
pub(crate) fn grep_lines(content: &[u8], regex: &regex::Regex) -> Vec<LineMatch> {
    if looks_binary(content) {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(content);
    text.lines()
        .enumerate()
        .filter_map(|(index, line)| {
            regex.find(line).map(|m| LineMatch {
                line_number: index + 1,
                line: line.to_owned(),
                start: m.start(),
                end: m.end(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_plans_split_like_glob() {
        let plan = plan_glob("/w/src/*/mod.rs").unwrap();
        assert_eq!(plan.base, Path::new("/w/src"));
        assert_eq!(plan.depth, Some(2));
        let plan = plan_glob("/w/**/*.rs").unwrap();
        assert_eq!(plan.base, Path::new("/w"));
        assert_eq!(plan.depth, None);
        assert!(plan_glob("/w/[").is_err());
        assert!(plan_glob("/w/a**").is_err());
    }

    #[test]
    fn grep_takes_the_first_match_per_line() {
        let regex = regex::Regex::new("o+").unwrap();
        let hits = grep_lines(b"foo boo\r\nbar\nzoo", &regex);
        assert_eq!(hits.len(), 2);
        assert_eq!((hits[0].line_number, hits[0].start, hits[0].end), (1, 1, 3));
        assert_eq!(hits[0].line, "foo boo");
        assert_eq!(hits[1].line_number, 3);
        assert!(grep_lines(b"foo\0", &regex).is_empty());
    }
}
