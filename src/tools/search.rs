//! Glob and grep, implemented once for every door (the MCP server's `glob` and `grep`,
//! bamboo's `Glob` and `Grep`, agent-sdk's `Environment::glob` and `Environment::grep`). A
//! door converts its arguments, calls [`glob`] or [`grep`], and formats what they return; the
//! descriptions a model reads are [`GLOB_ABOUT`] and [`GREP_ABOUT`].
//!
//! # glob
//!
//! * **Syntax:** the `glob` crate's (0.3): `*`, `?` and `[...]`/`[!...]` match within one path
//!   component, `**` as a whole component matches any number of directories (`src/**/*.rs`,
//!   `**/nested`; a trailing `**` matches directories only), a trailing `/` keeps
//!   directories only. A leading dot needs no literal
//!   dot (`*` matches `.hidden`), and `.*` also matches `.` and `..`, as `glob::glob` does.
//! * **Where:** the pattern is relative to the directory it is given (the door's `path`
//!   argument or working directory), whose own name is taken literally; an absolute pattern
//!   stands alone. `.` components are dropped, `..` components are refused (a glob searches
//!   below its directory; a door with a root could otherwise be walked out of).
//! * **What:** every kind of entry that matches: files, directories, symbolic links
//!   (dangling ones too). A symbolic link to a directory is walked into, as `glob::glob`
//!   does, except where the door confines paths by their real location (the MCP server with
//!   a root, agent-sdk's `symlink_proof`): there links are listed but never walked into, so
//!   that no walk leaves the root.
//! * **`.git`:** an entry named `.git` (a repository's directory, a worktree's file) is
//!   invisible to wildcards: `*` and `**` neither list it nor walk into it, so `**/*` in a
//!   checkout lists the checkout, not git's objects. A literal component reaches it:
//!   `.git/config`, `*/.git/HEAD`, `.git/refs/**`.
//! * **Order:** `glob::glob`'s: sorted by path, component by component (`a/x.rs` before
//!   `a.rs`), a directory before what is below it.
//! * **Cost:** one remote `find` below the pattern's literal prefix, as deep as the pattern
//!   reaches; only names cross the wire (at most [`MAX_LISTING_BYTES`] of them).
//!
//! # grep
//!
//! * **Syntax:** Rust's `regex` crate, the dialect of ripgrep and of most agent harnesses'
//!   Grep tools (`\d`, `\w`, `\b`, `foo|bar`, `(?i)`, no backreferences), not POSIX ERE.
//!   Options a door may expose: case-insensitive, fixed strings (the pattern taken
//!   literally) and multiline (the regex runs over the whole file, `.` matches a newline).
//! * **Lines:** a file is read as lossy UTF-8 and split like `str::lines` (`\n` or `\r\n`,
//!   the ending not part of the line). A line matches when the regex finds a match in it;
//!   each matching line is reported once, with its 1-based number, its text and the byte
//!   range of its first match. In multiline mode a match is reported on the line it starts.
//! * **Which files:** a path naming a file searches that file whatever its size; a
//!   directory searches the regular files below it (only its direct children when the door
//!   asks for a non-recursive search). Below a directory, symbolic links are neither
//!   followed nor searched, entries named `.git` are skipped, and so are files over
//!   [`MAX_GREP_FILE_BYTES`]. A binary file (a NUL byte in its first KiB, agent-sdk's and
//!   git's test) has no matching lines. Files the server refuses to read are skipped. An
//!   include filter, where the door has one, is a glob over the path relative to the
//!   searched directory; without a `/` it matches the file name alone (`*.rs`), as ripgrep's
//!   `--glob` and grep's `--include` do.
//! * **Order:** sorted by path (component by component, as glob), then line number. A door
//!   that stops early (a result cap) stops the reading too.
//! * **Cost:** one remote `find` for the candidates, then each candidate read over SFTP,
//!   [`CONCURRENT_READS`] at a time, and matched here.
//!
//! # Remote requirements
//!
//! POSIX `sh` and a `find` with `-mindepth`, `-maxdepth`, `-prune` and `-print0` (GNU and
//! BusyBox).

use std::{
    collections::HashMap,
    ffi::OsString,
    fmt,
    ops::ControlFlow,
    path::{Component, Path, PathBuf},
};

use futures::StreamExt;
use tokio::sync::Notify;

use crate::{
    command::{ExitStatus, OutputChunk},
    error::{Error, SftpStatus},
    executor::SshExecutor,
    files::{option_safe, quoted_path, run_script},
};

/// What `glob` does, in the words every door that lists its tools gives a model.
#[cfg_attr(not(any(feature = "bamboo", feature = "mcp")), allow(dead_code))] // agent-sdk lists no tools
pub(crate) const GLOB_ABOUT: &str = "Find files and directories on the remote host whose path \
    below the search directory matches a glob: `*`, `?` and `[...]` match within one path \
    component, `**` matches any number of directories (`src/**/*.rs`). Symbolic links are \
    listed like files; entries named `.git` are skipped unless the pattern names them \
    literally (`.git/config`). Returns the matching paths, sorted.";

/// What `grep` does, in the words every door that lists its tools gives a model.
#[cfg_attr(not(any(feature = "bamboo", feature = "mcp")), allow(dead_code))] // agent-sdk lists no tools
pub(crate) const GREP_ABOUT: &str = "Search file contents on the remote host for a regular \
    expression in Rust regex syntax, as ripgrep (`\\d+`, `\\w`, `foo|bar`, `(?i)case`; not \
    POSIX), line by line. Searches one file, or every regular file below a directory; below a \
    directory, symbolic links, entries named `.git`, binary files and files over 16 MiB are \
    skipped. Matches come sorted by path, then line number.";

/// Files larger than this are skipped below a directory (agent-sdk's `LocalFileSystem`
/// limit); a file named directly is searched whatever its size.
pub(crate) const MAX_GREP_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Names a remote listing may print before the search gives up (a narrower path is needed).
pub(crate) const MAX_LISTING_BYTES: usize = 32 * 1024 * 1024;
/// Candidate files read at the same time by [`grep`].
pub(crate) const CONCURRENT_READS: usize = 8;

/// Why a search did not run. Each door turns it into its framework's error.
#[derive(Debug)]
pub(crate) enum SearchError {
    /// A pattern or filter that does not parse, or a path the search cannot take; the
    /// message says which and why.
    Invalid(String),
    /// The path to search does not exist.
    Missing(PathBuf),
    /// The server would not describe the path to search (permission denied, ...).
    Unreachable {
        /// The path.
        path: PathBuf,
        /// What the server said.
        error: Box<Error>,
    },
    /// The directory to glob in is not a directory.
    NotADirectory(PathBuf),
    /// The listing below the path went over [`MAX_LISTING_BYTES`] of names.
    TooLarge(PathBuf),
    /// The host or the connection failed, or a file named directly could not be read.
    Host(Error),
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(message) => f.write_str(message),
            Self::Missing(path) => write!(f, "{}: no such file or directory", path.display()),
            Self::Unreachable { path, error } => {
                write!(f, "cannot search {}: {error}", path.display())
            }
            Self::NotADirectory(path) => write!(f, "{} is not a directory", path.display()),
            Self::TooLarge(path) => write!(
                f,
                "{} holds too many files to list (over {MAX_LISTING_BYTES} bytes of names); \
                 search a narrower path",
                path.display()
            ),
            Self::Host(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for SearchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreachable { error, .. } => Some(&**error),
            Self::Host(error) => error.source(),
            _ => None,
        }
    }
}

type Result<T> = std::result::Result<T, SearchError>;

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
    quoted_path(&path_from_bytes(&start)).map_err(SearchError::Host)
}

fn find_prefix(dir: &Path) -> Vec<u8> {
    let mut prefix = option_safe(dir.as_os_str().as_encoded_bytes());
    prefix.extend_from_slice(b"/./");
    prefix
}

/// The `find` expression that skips entries named `.git` (printing nothing for them).
const PRUNE_GIT: &[u8] = b" -name .git -prune -o";

/// What a listing script printed.
struct Listing {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs one of the search's scripts, collecting its output; stops it (dropping the future
/// kills its process group) once stdout goes over [`MAX_LISTING_BYTES`].
async fn run_listing(executor: &SshExecutor, script: &[u8], dir: &Path) -> Result<Listing> {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let over = Notify::new();
    let finished = {
        let mut sink = |chunk: &OutputChunk| match chunk {
            OutputChunk::Stdout(bytes) => {
                stdout.extend_from_slice(bytes);
                if stdout.len() > MAX_LISTING_BYTES {
                    over.notify_one();
                }
            }
            OutputChunk::Stderr(bytes) => {
                if stderr.len() < 64 * 1024 {
                    stderr.extend_from_slice(bytes);
                }
            }
        };
        tokio::select! {
            run = run_script(executor, script, Vec::new(), &mut sink) => Some(run),
            () = over.notified() => None,
        }
    };
    match finished {
        Some(Ok(run)) => Ok(Listing {
            status: run.status,
            stdout,
            stderr,
        }),
        Some(Err(error)) => Err(SearchError::Host(error)),
        None => Err(SearchError::TooLarge(dir.to_path_buf())),
    }
}

/// A `find` that could not run at all is an error; problems inside the tree (unreadable
/// directories, symlink loops) are skipped, as the local walks skip them.
fn check_ran(listing: &Listing, dir: &Path) -> Result<()> {
    if matches!(listing.status, ExitStatus::Code(126 | 127)) {
        return Err(SearchError::Host(Error::InvalidInput {
            reason: format!(
                "cannot walk {} remotely: find did not run ({})",
                dir.display(),
                String::from_utf8_lossy(&listing.stderr).trim()
            ),
        }));
    }
    Ok(())
}

/// The regular files below `dir` (not following symlinks, skipping entries named `.git`),
/// each as `dir` joined with its path below it, sorted. `recursive: false` lists direct
/// children only; `max_size` skips larger files on the remote side.
async fn list_files(
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
    script.extend_from_slice(PRUNE_GIT);
    script.extend_from_slice(b" -type f");
    if let Some(max) = max_size {
        // `-size -Nc`: fewer than N bytes.
        script.extend_from_slice(format!(" -size -{}c", max.saturating_add(1)).as_bytes());
    }
    script.extend_from_slice(b" -print0\n");
    let listing = run_listing(executor, &script, dir).await?;
    check_ran(&listing, dir)?;
    let prefix = find_prefix(dir);
    let mut files: Vec<PathBuf> = listing
        .stdout
        .split(|&b| b == 0)
        .filter_map(|record| record.strip_prefix(prefix.as_slice()))
        .filter(|rel| !rel.is_empty())
        .map(|rel| dir.join(path_from_bytes(rel)))
        .collect();
    files.sort();
    Ok(files)
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
struct Tree {
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

/// The script that checks `dir` (`O`k, `N`ot a directory, or missing: `X`), then prints what
/// `plan.base` is (`D`, `F`, `M`) and, for a directory, the tree below it down to the plan's
/// depth: directories, an empty record, then everything else.
fn tree_script(dir: &Path, plan: &GlobPlan, follow_links: bool) -> Result<Vec<u8>> {
    let mut walk = b"find ".to_vec();
    if follow_links {
        walk.extend_from_slice(b"-L ");
    }
    walk.extend_from_slice(&find_start(&plan.base)?);
    walk.extend_from_slice(b" -mindepth 1");
    if let Some(depth) = plan.depth {
        walk.extend_from_slice(format!(" -maxdepth {depth}").as_bytes());
    }
    if !plan.names_git {
        // Nothing can reach inside a `.git` but a literal component: do not list it.
        walk.extend_from_slice(PRUNE_GIT);
    }
    let mut script = b"d=".to_vec();
    script.extend_from_slice(&quoted_path(dir).map_err(SearchError::Host)?);
    script.extend_from_slice(
        b"\nif [ -d \"$d\" ]; then printf 'O\\0'; \
          elif [ -e \"$d\" ] || [ -h \"$d\" ]; then printf 'N\\0'; exit 0; \
          else printf 'X\\0'; exit 0; fi\nb=",
    );
    script.extend_from_slice(&quoted_path(&plan.base).map_err(SearchError::Host)?);
    script.extend_from_slice(
        b"\nif [ -d \"$b\" ]; then printf 'D\\0'; \
          elif [ -e \"$b\" ] || [ -h \"$b\" ]; then printf 'F\\0'; exit 0; \
          else printf 'M\\0'; exit 0; fi\n",
    );
    script.extend_from_slice(&walk);
    script.extend_from_slice(b" -type d -print0\nprintf '\\0'\n");
    script.extend_from_slice(&walk);
    script.extend_from_slice(b" ! -type d -print0\n");
    Ok(script)
}

/// Checks `dir` and walks the tree below `plan.base` remotely. With `follow_links`,
/// symlinked directories are walked into (`find -L`, as `glob` does); without, a symlink is
/// listed as a non-directory.
async fn list_tree(
    executor: &SshExecutor,
    dir: &Path,
    plan: &GlobPlan,
    follow_links: bool,
) -> Result<Tree> {
    let script = tree_script(dir, plan, follow_links)?;
    let listing = run_listing(executor, &script, dir).await?;
    check_ran(&listing, &plan.base)?;
    let unexpected = || {
        SearchError::Host(Error::InvalidInput {
            reason: format!(
                "cannot walk {} remotely: {}",
                plan.base.display(),
                String::from_utf8_lossy(&listing.stderr).trim()
            ),
        })
    };
    let mut records = listing.stdout.split(|&b| b == 0);
    match records.next() {
        Some(b"O") => {}
        Some(b"N") => return Err(SearchError::NotADirectory(dir.to_path_buf())),
        Some(b"X") => return Err(SearchError::Missing(dir.to_path_buf())),
        _ => return Err(unexpected()),
    }
    let kind = match records.next() {
        Some(b"D") => BaseKind::Dir,
        Some(b"F") => BaseKind::NotDir,
        Some(b"M") => BaseKind::Missing,
        _ => return Err(unexpected()),
    };
    let mut tree = Tree {
        base: plan.base.clone(),
        kind,
        entries: HashMap::new(),
        children: HashMap::new(),
    };
    if kind != BaseKind::Dir {
        return Ok(tree);
    }
    tree.children.insert(plan.base.clone(), Vec::new());
    let prefix = find_prefix(&plan.base);
    let mut dirs_done = false;
    for record in records {
        if record.is_empty() {
            dirs_done = true;
            continue;
        }
        let Some(rel) = record.strip_prefix(prefix.as_slice()) else {
            continue;
        };
        let path = plan.base.join(path_from_bytes(rel));
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

/// The name wildcards skip.
const GIT: &str = ".git";

/// One component of a glob pattern, with what `glob`'s parser would know of it.
struct Part {
    pattern: glob::Pattern,
    text: String,
    recursive: bool,
    meta: bool,
}

/// The components of an absolute pattern after its root, as `glob::glob` splits them, and
/// the literal directory prefix to walk from plus how deep below it the pattern reaches.
struct GlobPlan {
    parts: Vec<Part>,
    require_dir: bool,
    /// The literal prefix: the directory the remote walk starts at.
    base: PathBuf,
    /// Levels below `base` the pattern can reach (`None`: `**`, unbounded).
    depth: Option<usize>,
    /// Whether a literal component is `.git` (only then is a `.git` walked).
    names_git: bool,
}

fn has_meta(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Plans `glob::glob(pattern)` for an absolute `pattern` (`/`-separated).
///
/// # Errors
/// The pattern error `glob` itself reports.
fn plan_glob(pattern: &str) -> std::result::Result<GlobPlan, glob::PatternError> {
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
    let names_git = parts.iter().any(|p| !p.meta && p.text == GIT);
    Ok(GlobPlan {
        parts,
        require_dir: pattern.ends_with('/'),
        base,
        depth,
        names_git,
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
    // A wildcard never lists or enters a `.git`.
    todo.extend(
        children
            .iter()
            .rev()
            .filter(|(name, _)| name != GIT)
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
fn glob_paths(plan: &GlobPlan, tree: &Tree) -> Vec<PathBuf> {
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

/// A glob to run: `pattern` below `dir`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GlobQuery<'a> {
    /// The directory a relative pattern is below (absolute; its name is taken literally).
    pub(crate) dir: &'a Path,
    /// The pattern: relative to `dir`, or absolute.
    pub(crate) pattern: &'a str,
    /// Walk into symbolic links to directories (off where the door confines by real path).
    pub(crate) follow_links: bool,
}

/// `path` without its `.` components (`..` stays: it depends on symlinks).
fn lexical(path: &Path) -> PathBuf {
    path.components().collect()
}

/// The whole pattern `glob::glob` runs: `dir` escaped (unless the pattern is absolute), then
/// the pattern's components without `.`; `..` refused.
fn full_pattern(dir: &Path, pattern: &str) -> Result<String> {
    let mut components = Vec::new();
    for component in pattern.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                return Err(SearchError::Invalid(format!(
                    "glob pattern `{pattern}` has a `..` component: a glob searches below its \
                     directory (pass the directory to search instead)"
                )));
            }
            other => components.push(other),
        }
    }
    let mut full = if pattern.starts_with('/') {
        String::new()
    } else {
        let dir = lexical(dir);
        let dir = dir.to_str().ok_or_else(|| {
            SearchError::Invalid(format!(
                "cannot glob below {}: the path is not valid UTF-8",
                dir.display()
            ))
        })?;
        glob::Pattern::escape(dir.trim_end_matches('/'))
    };
    for component in &components {
        full.push('/');
        full.push_str(component);
    }
    // The root for an empty pattern, and a trailing `/` kept (directories only).
    if full.is_empty() || (pattern.ends_with('/') && !components.is_empty()) {
        full.push('/');
    }
    Ok(full)
}

/// Plans `pattern` below the absolute `dir`.
fn plan(dir: &Path, pattern: &str) -> Result<GlobPlan> {
    let full = full_pattern(dir, pattern)?;
    plan_glob(&full)
        .map_err(|e| SearchError::Invalid(format!("invalid glob pattern `{pattern}`: {e}")))
}

/// The directory the remote walk of `query` starts at (the pattern's literal prefix), for
/// a door that checks it before the walk. For an absolute pattern or directory.
///
/// # Errors
/// [`SearchError::Invalid`] for a pattern that does not parse.
#[cfg(feature = "agent-sdk")]
pub(crate) fn glob_base(query: &GlobQuery<'_>) -> Result<PathBuf> {
    Ok(plan(query.dir, query.pattern)?.base)
}

/// Where a relative `dir` is: the remote scripts run in the login directory, as SFTP
/// resolves relative paths.
async fn absolute_dir(executor: &SshExecutor, dir: &Path) -> Result<PathBuf> {
    let mut script = b"d=".to_vec();
    script.extend_from_slice(&quoted_path(dir).map_err(SearchError::Host)?);
    script.extend_from_slice(
        b"\nif [ -d \"$d\" ]; then cd -- \"$d\" && pwd; \
          elif [ -e \"$d\" ] || [ -h \"$d\" ]; then echo N; else echo X; fi\n",
    );
    let listing = run_listing(executor, &script, dir).await?;
    let out = listing
        .stdout
        .strip_suffix(b"\n")
        .unwrap_or(&listing.stdout);
    match out {
        b"N" => Err(SearchError::NotADirectory(dir.to_path_buf())),
        b"X" => Err(SearchError::Missing(dir.to_path_buf())),
        absolute if absolute.starts_with(b"/") => Ok(path_from_bytes(absolute)),
        _ => Err(SearchError::Host(Error::InvalidInput {
            reason: format!(
                "cannot find {} remotely: {}",
                dir.display(),
                String::from_utf8_lossy(&listing.stderr).trim()
            ),
        })),
    }
}

/// The paths that match `query`, in glob's order (module docs). Below a relative `dir`
/// (the login directory's), the paths are relative too.
///
/// # Errors
/// [`SearchError::Invalid`] (the pattern), [`SearchError::Missing`] and
/// [`SearchError::NotADirectory`] (`dir`), [`SearchError::TooLarge`], [`SearchError::Host`].
pub(crate) async fn glob(executor: &SshExecutor, query: &GlobQuery<'_>) -> Result<Vec<PathBuf>> {
    let dir = lexical(query.dir);
    if dir.is_absolute() || query.pattern.starts_with('/') {
        let plan = plan(&dir, query.pattern)?;
        let tree = list_tree(executor, &dir, &plan, query.follow_links).await?;
        return Ok(glob_paths(&plan, &tree));
    }
    // Checked before the round trip that finds the directory.
    full_pattern(&dir, query.pattern)?;
    let absolute = absolute_dir(executor, &dir).await?;
    let plan = plan(&absolute, query.pattern)?;
    let tree = list_tree(executor, &absolute, &plan, query.follow_links).await?;
    Ok(glob_paths(&plan, &tree)
        .into_iter()
        .map(|path| match path.strip_prefix(&absolute) {
            Ok(below) => dir.join(below),
            Err(_) => path,
        })
        .collect())
}

/// How a door's grep arguments shape the regex.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RegexOptions {
    /// Match case-insensitively.
    pub(crate) case_insensitive: bool,
    /// Take the pattern literally.
    pub(crate) fixed_strings: bool,
    /// Run the regex over the whole file (`.` matches a newline, `^`/`$` at line ends).
    pub(crate) multiline: bool,
}

/// A compiled grep pattern.
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    regex: regex::Regex,
    multiline: bool,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineMatch {
    /// 1-based.
    pub(crate) line_number: usize,
    /// The line without its ending.
    pub(crate) line: String,
    /// Byte offset of the first match in the line.
    pub(crate) start: usize,
    /// Byte offset of its end (at most the line's length).
    pub(crate) end: usize,
}

/// Whether `content` looks binary: a NUL byte in its first KiB.
pub(crate) fn looks_binary(content: &[u8]) -> bool {
    content.iter().take(1024).any(|&b| b == 0)
}

impl Matcher {
    /// Compiles `pattern` (Rust regex syntax).
    ///
    /// # Errors
    /// [`SearchError::Invalid`] with the regex crate's explanation.
    pub(crate) fn new(pattern: &str, options: RegexOptions) -> Result<Self> {
        let source = if options.fixed_strings {
            regex::escape(pattern)
        } else {
            pattern.to_owned()
        };
        let regex = regex::RegexBuilder::new(&source)
            .case_insensitive(options.case_insensitive)
            .multi_line(options.multiline)
            .dot_matches_new_line(options.multiline)
            .build()
            .map_err(|e| SearchError::Invalid(format!("invalid regex pattern: {e}")))?;
        Ok(Self {
            regex,
            multiline: options.multiline,
        })
    }

    /// The matching lines of `content` and its text: none for a binary file; otherwise the
    /// first match of each line (lossy UTF-8, `str::lines`), 1-based line numbers, byte
    /// offsets within the line (agent-sdk's `LocalFileSystem::grep_bytes`).
    pub(crate) fn lines(&self, content: &[u8]) -> (String, Vec<LineMatch>) {
        if looks_binary(content) {
            return (String::new(), Vec::new());
        }
        let text = String::from_utf8_lossy(content).into_owned();
        let hits = if self.multiline {
            self.multiline_hits(&text)
        } else {
            text.lines()
                .enumerate()
                .filter_map(|(index, line)| {
                    self.regex.find(line).map(|m| LineMatch {
                        line_number: index + 1,
                        line: line.to_owned(),
                        start: m.start(),
                        end: m.end(),
                    })
                })
                .collect()
        };
        (text, hits)
    }

    /// Multiline: each match reported on the line it starts on, once per line.
    fn multiline_hits(&self, text: &str) -> Vec<LineMatch> {
        let lines: Vec<&str> = text.lines().collect();
        let mut hits: Vec<LineMatch> = Vec::new();
        for m in self.regex.find_iter(text) {
            let before = text.get(..m.start()).unwrap_or_default();
            let index = before.matches('\n').count();
            if hits.last().is_some_and(|hit| hit.line_number == index + 1) {
                continue;
            }
            let line_start = before.rfind('\n').map_or(0, |at| at + 1);
            let line = lines.get(index).copied().unwrap_or_default();
            let start = m.start() - line_start;
            hits.push(LineMatch {
                line_number: index + 1,
                line: line.to_owned(),
                start: start.min(line.len()),
                end: (m.end() - line_start).min(line.len()),
            });
        }
        hits
    }
}

/// A grep include filter: a glob over the path below the searched directory, or over the
/// file name alone when it has no `/`.
#[derive(Debug, Clone)]
pub(crate) struct Include {
    pattern: glob::Pattern,
    by_name: bool,
}

impl Include {
    /// Parses `glob`.
    ///
    /// # Errors
    /// [`SearchError::Invalid`] for a glob that does not parse.
    #[cfg_attr(not(any(feature = "bamboo", feature = "mcp")), allow(dead_code))] // no filter in agent-sdk
    pub(crate) fn new(glob: &str) -> Result<Self> {
        let pattern = glob::Pattern::new(glob)
            .map_err(|e| SearchError::Invalid(format!("invalid glob filter `{glob}`: {e}")))?;
        Ok(Self {
            pattern,
            by_name: !glob.contains('/'),
        })
    }

    fn matches(&self, relative: &Path) -> bool {
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        if self.by_name {
            relative
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| self.pattern.matches_with(name, options))
        } else {
            self.pattern.matches_path_with(relative, options)
        }
    }
}

/// A grep to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrepQuery<'a> {
    /// The file or directory to search (absolute).
    pub(crate) path: &'a Path,
    /// The pattern.
    pub(crate) matcher: &'a Matcher,
    /// Only files this filter accepts.
    pub(crate) include: Option<&'a Include>,
    /// Below a directory: every level (`true`) or its direct children only.
    pub(crate) recursive: bool,
}

/// One file's matching lines.
#[derive(Debug)]
pub(crate) struct FileHits {
    /// The file: the searched path, or it joined with the file's path below it.
    pub(crate) path: PathBuf,
    /// The file's text (lossy UTF-8), for a door that shows context lines (bamboo's).
    #[cfg_attr(not(feature = "bamboo"), allow(dead_code))]
    pub(crate) text: String,
    /// Its matching lines, in order (never empty).
    pub(crate) hits: Vec<LineMatch>,
}

/// Whether an error is about a file (the server answered with a status).
fn is_file_failure(error: &Error) -> bool {
    matches!(
        error,
        Error::Sftp {
            status: Some(_),
            ..
        }
    )
}

/// Searches `query.path` (module docs), handing each file with matching lines to `visit`
/// in order; `visit` returns `Break` to stop (no further file is read).
///
/// # Errors
/// [`SearchError::Missing`] and [`SearchError::Unreachable`] (the path),
/// [`SearchError::TooLarge`], [`SearchError::Host`] (including a file named directly that
/// cannot be read).
pub(crate) async fn grep(
    executor: &SshExecutor,
    query: &GrepQuery<'_>,
    mut visit: impl FnMut(FileHits) -> ControlFlow<()>,
) -> Result<()> {
    let path: &Path = &lexical(query.path);
    let meta = match executor.metadata(path).await {
        Ok(meta) => meta,
        Err(Error::Sftp {
            status: Some(SftpStatus::NoSuchFile),
            ..
        }) => return Err(SearchError::Missing(path.to_path_buf())),
        Err(error) if is_file_failure(&error) => {
            return Err(SearchError::Unreachable {
                path: path.to_path_buf(),
                error: Box::new(error),
            });
        }
        Err(error) => return Err(SearchError::Host(error)),
    };
    let included = |relative: &Path| {
        query
            .include
            .is_none_or(|include| include.matches(relative))
    };
    if meta.is_file() {
        let name = path.file_name().map_or(path, Path::new);
        if !included(name) {
            return Ok(());
        }
        // A file named directly is read whatever its size, and its errors count.
        let content = executor
            .read_file_bytes(path)
            .await
            .map_err(SearchError::Host)?;
        let (text, hits) = query.matcher.lines(&content);
        if !hits.is_empty() {
            let _ = visit(FileHits {
                path: path.to_path_buf(),
                text,
                hits,
            });
        }
        return Ok(());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let mut files = list_files(executor, path, query.recursive, Some(MAX_GREP_FILE_BYTES)).await?;
    files.retain(|file| included(file.strip_prefix(path).unwrap_or(file)));
    let mut reads = futures::stream::iter(files)
        .map(|file| async move {
            let content = executor.read_file_bytes(&file).await;
            (file, content)
        })
        .buffered(CONCURRENT_READS);
    while let Some((file, content)) = reads.next().await {
        let content = match content {
            Ok(content) => content,
            // Unreadable files are skipped, as a local walk skips them.
            Err(error) if is_file_failure(&error) => continue,
            Err(error) => return Err(SearchError::Host(error)),
        };
        let (text, hits) = query.matcher.lines(&content);
        if hits.is_empty() {
            continue;
        }
        if visit(FileHits {
            path: file,
            text,
            hits,
        })
        .is_break()
        {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(dir: &str, pattern: &str) -> String {
        full_pattern(Path::new(dir), pattern).unwrap()
    }

    #[test]
    fn glob_plans_split_like_glob() {
        let plan = plan_glob("/w/src/*/mod.rs").unwrap();
        assert_eq!(plan.base, Path::new("/w/src"));
        assert_eq!(plan.depth, Some(2));
        assert!(!plan.names_git);
        let plan = plan_glob("/w/**/*.rs").unwrap();
        assert_eq!(plan.base, Path::new("/w"));
        assert_eq!(plan.depth, None);
        assert!(plan_glob("/w/[").is_err());
        assert!(plan_glob("/w/a**").is_err());
        assert!(plan_glob("/w/*/.git/HEAD").unwrap().names_git);
    }

    #[test]
    fn patterns_are_below_their_directory() {
        assert_eq!(query("/w", "src/*.rs"), "/w/src/*.rs");
        assert_eq!(query("/w/", "./src//*.rs"), "/w/src/*.rs");
        assert_eq!(query("/w", "*/"), "/w/*/");
        assert_eq!(query("/", "*"), "/*");
        assert_eq!(query("/a [b]", "*"), "/a [[]b[]]/*");
        assert_eq!(query("/w/./x", "*"), "/w/x/*");
        assert_eq!(query("/w", "/etc/*"), "/etc/*");
        assert_eq!(query("/w", "."), "/w");
        let refused = full_pattern(Path::new("/w"), "../*");
        assert!(matches!(refused, Err(SearchError::Invalid(_))));
    }

    #[test]
    fn grep_takes_the_first_match_per_line() {
        let matcher = Matcher::new("o+", RegexOptions::default()).unwrap();
        let (_, hits) = matcher.lines(b"foo boo\r\nbar\nzoo");
        assert_eq!(hits.len(), 2);
        assert_eq!((hits[0].line_number, hits[0].start, hits[0].end), (1, 1, 3));
        assert_eq!(hits[0].line, "foo boo");
        assert_eq!(hits[1].line_number, 3);
        assert!(matcher.lines(b"foo\0").1.is_empty());
    }

    #[test]
    fn regex_options_shape_the_pattern() {
        let fixed = RegexOptions {
            fixed_strings: true,
            ..RegexOptions::default()
        };
        let matcher = Matcher::new("a.b", fixed).unwrap();
        assert_eq!(matcher.lines(b"axb\na.b\n").1.len(), 1);
        let folded = RegexOptions {
            case_insensitive: true,
            ..RegexOptions::default()
        };
        assert_eq!(
            Matcher::new("HI", folded).unwrap().lines(b"hi\n").1.len(),
            1
        );
        let multiline = RegexOptions {
            multiline: true,
            ..RegexOptions::default()
        };
        let (_, hits) = Matcher::new("b.c", multiline)
            .unwrap()
            .lines(b"a\nxb\ncd\nb c\n");
        let lines: Vec<_> = hits.iter().map(|h| (h.line_number, h.start)).collect();
        assert_eq!(lines, [(2, 1), (4, 0)]);
        assert!(matches!(
            Matcher::new("(", RegexOptions::default()),
            Err(SearchError::Invalid(_))
        ));
    }

    #[test]
    fn include_filters_by_name_or_relative_path() {
        let by_name = Include::new("*.rs").unwrap();
        assert!(by_name.matches(Path::new("src/nested/m.rs")));
        assert!(!by_name.matches(Path::new("src/m.txt")));
        let by_path = Include::new("src/*.rs").unwrap();
        assert!(by_path.matches(Path::new("src/m.rs")));
        assert!(!by_path.matches(Path::new("src/nested/m.rs")));
        assert!(Include::new("**/m.rs").unwrap().matches(Path::new("m.rs")));
    }
}
