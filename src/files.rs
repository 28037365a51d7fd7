//! File work that needs a shell: reads and writes of paths SFTP cannot carry, and the remote
//! listing behind `stream_files`.
//!
//! # `stream_files`
//!
//! LocalExecutor walks with the `ignore` crate's defaults; this module reproduces that walk
//! remotely with two `find` runs and client-side matching:
//!
//! 1. *Discovery* (one exec): the root's kind and canonical path, the ignore files and
//!    repository markers (`.ignore`, `.gitignore`, `.git`, `.jj`) in every parent directory
//!    of the root, and those in the tree (`find -print0`, hidden directories pruned). Their
//!    contents (and `.git/info/exclude`) are fetched over SFTP and compiled with
//!    [`ignore::gitignore::GitignoreBuilder`], the matcher LocalExecutor uses.
//! 2. *Listing* (one exec, streamed): every regular file, hidden directories pruned, hidden
//!    files listed so that a `!` whitelist pattern can bring them back. Each path is matched
//!    as `ignore`'s walker would (ancestor directories first, deeper files win, `.ignore`
//!    over `.gitignore` over `.git/info/exclude`, git rules only inside a repository and not
//!    beyond its root), filtered by extension, and its content read over SFTP, 16 at a time.
//!
//! Items flow through a bounded channel from a producer task that stops (and kills the remote
//! `find`) when the stream is dropped. The listing itself is buffered as it arrives (paths
//! only: the exec machinery drains every channel at once, so a slow consumer cannot slow the
//! remote `find` down); contents are read only as the consumer pulls.
//!
//! A relative root resolves against the executor's workdir (LocalExecutor uses the local
//! process's directory, which means nothing on a remote host). Yielded paths are the root
//! joined with the path below it, as LocalExecutor yields them. Every failure is an `Err`
//! item and the stream goes on: a missing root gives exactly one, with LocalExecutor's text.
//!
//! Not reproduced: git's global `core.excludesFile` (it lives in the *local* user's git
//! config); `.git/info/exclude` of worktrees and submodules whose `.git` is a file; a `!`
//! pattern that whitelists a hidden *directory* (hidden directories are pruned remotely).
//!
//! # Remote requirements
//!
//! POSIX `sh` with `pwd -P`, and a `find` with `-mindepth` and `-print0` (GNU and BusyBox
//! have both). The write fallback for non-UTF-8 paths also uses `readlink` and `stat -c %a`.

use std::{
    collections::HashMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

use futures::{StreamExt, channel::mpsc as unbounded};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use tokio::sync::mpsc;

use crate::{
    error::{Error, Result, SftpStatus},
    exec::{self, ExecRequest},
    executor::SshExecutor,
    output::{Execution, ExitStatus, OutputChunk, OutputSink},
    sftp::{EISDIR, ELOOP, ENOENT, os_error_text},
    shell::{self, quote},
};

/// File contents read at the same time while streaming.
const CONCURRENT_READS: usize = 16;
/// Items the producer may run ahead of the consumer.
const CHANNEL_CAPACITY: usize = 16;

/// A file found by [`walk_files`], with its raw content.
#[derive(Debug)]
pub(crate) struct LoadedFile {
    /// The root joined with the file's path below it.
    pub(crate) path: PathBuf,
    pub(crate) content: Vec<u8>,
}

// ---------------------------------------------------------------------------------------
// Running crate-internal scripts
// ---------------------------------------------------------------------------------------

/// Runs one of this module's scripts through the exec machinery, with the same pgid marker
/// as user commands so that a dropped future kills it. The user's environment settings do
/// not apply: these are the executor's own commands.
async fn run_script(
    executor: &SshExecutor,
    script: &[u8],
    stdin: Vec<u8>,
    sink: &mut OutputSink<'_>,
) -> Result<Execution> {
    let marker = shell::marker_prefix(rand::random());
    let mut body = b"printf '%s%s\\n' ".to_vec();
    body.extend_from_slice(&quote(marker.as_bytes()));
    body.extend_from_slice(b" \"$$\" >&2 || exit 125\n");
    body.extend_from_slice(script);
    let mut wrapper = b"exec /bin/sh -c ".to_vec();
    wrapper.extend_from_slice(&quote(&body));
    let request = ExecRequest {
        wrapper,
        stdin,
        marker,
        controlled: false,
    };
    exec::execute(&executor.inner, request, None, sink).await
}

/// What a finished script printed, collected through the sink (the [`Execution`] may keep
/// less when an output cap is configured).
#[derive(Debug, Default)]
struct Collected {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs a script to completion and returns its status and everything it printed.
async fn run_collect(
    executor: &SshExecutor,
    script: &[u8],
    stdin: Vec<u8>,
) -> Result<(ExitStatus, Collected)> {
    let mut collected = Collected::default();
    let run = run_script(executor, script, stdin, &mut |chunk| match chunk {
        OutputChunk::Stdout(bytes) => collected.stdout.extend_from_slice(bytes),
        OutputChunk::Stderr(bytes) => collected.stderr.extend_from_slice(bytes),
    })
    .await?;
    Ok((run.status, collected))
}

/// A path as one quoted shell word; relative paths get `./` so they never look like options.
fn quoted_path(path: &Path) -> Result<Vec<u8>> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.contains(&0) {
        return Err(Error::InvalidInput {
            reason: format!("path {} contains a NUL byte", path.display()),
        });
    }
    let mut word = Vec::with_capacity(bytes.len() + 2);
    if !bytes.starts_with(b"/") {
        word.extend_from_slice(b"./");
    }
    word.extend_from_slice(bytes);
    Ok(quote(&word))
}

/// The error number whose text is `text` (`"No such file or directory"` → 2), including
/// dash's own wording for a redirection into a missing directory.
fn errno_of(text: &str) -> Option<i32> {
    if text == "Directory nonexistent" {
        return Some(ENOENT);
    }
    (1..=133).find(|&code| {
        os_error_text(code).strip_suffix(&format!(" (os error {code})")) == Some(text)
    })
}

/// Turns a failed script's last stderr line (`cat: x: Is a directory`) into the same typed
/// error an SFTP failure gives.
fn script_failure(
    executor: &SshExecutor,
    operation: &'static str,
    path: &Path,
    status: &ExitStatus,
    stderr: &[u8],
) -> Error {
    if !matches!(status, ExitStatus::Code(_)) {
        return Error::ConnectionLost {
            host: executor.inner.config.host.clone(),
            port: executor.inner.config.port,
        };
    }
    let stderr = String::from_utf8_lossy(stderr);
    let line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let text = line.rsplit(": ").next().unwrap_or(line).trim();
    match errno_of(text) {
        Some(code) => executor.file_error(operation, path, code),
        None => Error::Sftp {
            host: executor.inner.config.host.clone(),
            operation,
            path: path.to_string_lossy().into_owned(),
            reason: line.to_owned(),
            status: Some(SftpStatus::Failure),
        },
    }
}

/// Reads a file with `cat` (for paths SFTP cannot carry).
pub(crate) async fn read_via_exec(executor: &SshExecutor, path: &Path) -> Result<Vec<u8>> {
    let mut script = b"exec cat -- ".to_vec();
    script.extend_from_slice(&quoted_path(path)?);
    let (status, output) = run_collect(executor, &script, Vec::new()).await?;
    if status.success() {
        Ok(output.stdout)
    } else {
        Err(script_failure(
            executor,
            "read",
            path,
            &status,
            &output.stderr,
        ))
    }
}

/// The atomic write as a script: follow symlinks, refuse directories, `cat` stdin into a
/// private temporary file next to the target, copy the old mode (or 0644), `mv` it over.
fn write_script(path: &Path, nonce: u64) -> Result<Vec<u8>> {
    let mut script = b"t=".to_vec();
    script.extend_from_slice(&quoted_path(path)?);
    script.push(b'\n');
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        script.extend_from_slice(b"mkdir -p -- ");
        script.extend_from_slice(&quoted_path(parent)?);
        script.extend_from_slice(b" 2>/dev/null\n");
    }
    script.extend_from_slice(
        format!(
            r#"n=0
while [ -L "$t" ]; do
  n=$((n+1))
  if [ "$n" -gt 40 ]; then echo "write: {loop}" >&2; exit 1; fi
  l=$(readlink -- "$t" && echo x) || exit 1
  l=${{l%??}}
  case $l in
    /*) t=$l ;;
    *) t=${{t%/*}}/$l ;;
  esac
done
if [ -d "$t" ]; then echo "write: {isdir}" >&2; exit 1; fi
tmp=${{t%/*}}/.${{t##*/}}.swiftide-{nonce:016x}.tmp
trap 'rm -f -- "$tmp"' EXIT
(umask 077 && exec cat > "$tmp") || exit 1
if [ -e "$t" ]; then m=$(stat -c %a -- "$t") && chmod "$m" "$tmp" || exit 1
else chmod 644 "$tmp" || exit 1; fi
mv -f -- "$tmp" "$t" || exit 1
"#,
            loop = os_error_text(ELOOP).replace(" (os error 40)", ""),
            isdir = os_error_text(EISDIR).replace(" (os error 21)", ""),
        )
        .as_bytes(),
    );
    Ok(script)
}

/// Writes a file atomically with a shell script, the content on stdin (for paths SFTP cannot
/// carry). The existing owner is not kept.
pub(crate) async fn write_via_exec(
    executor: &SshExecutor,
    path: &Path,
    content: &[u8],
) -> Result<()> {
    let script = write_script(path, rand::random())?;
    let (status, output) = run_collect(executor, &script, content.to_vec()).await?;
    if status.success() {
        Ok(())
    } else {
        Err(script_failure(
            executor,
            "write",
            path,
            &status,
            &output.stderr,
        ))
    }
}

// ---------------------------------------------------------------------------------------
// stream_files: discovery
// ---------------------------------------------------------------------------------------

/// What the root is.
#[derive(Debug, PartialEq, Eq)]
enum RootKind {
    Missing,
    File,
    /// A FIFO, socket or device: LocalExecutor yields nothing for it.
    Other,
    Dir {
        canonical: PathBuf,
    },
}

/// The discovery script's findings.
#[derive(Debug)]
struct Discovery {
    kind: RootKind,
    /// Markers in the parents of the canonical root: absolute paths.
    parent_markers: Vec<PathBuf>,
    /// Markers inside the tree: paths relative to the root.
    tree_markers: Vec<PathBuf>,
}

#[cfg(unix)]
fn path_from_bytes(bytes: Vec<u8>) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(OsString::from_vec(bytes))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(&bytes).into_owned())
}

/// The directory argument given to `find`: `<root>/.` (a symlinked root is followed, as the
/// `ignore` walker follows it) with `./` before a relative root. Every path `find` prints
/// starts with it plus `/`.
fn find_start(root: &Path) -> Result<Vec<u8>> {
    let mut start = root.as_os_str().as_encoded_bytes().to_vec();
    start.extend_from_slice(b"/.");
    quoted_path(&path_from_bytes(start))
}

fn discovery_script(root: &Path) -> Result<Vec<u8>> {
    let mut script = b"r=".to_vec();
    script.extend_from_slice(&quoted_path(root)?);
    script.extend_from_slice(
        br#"
if [ ! -e "$r" ]; then printf M; exit 0; fi
if [ ! -d "$r" ]; then if [ -f "$r" ]; then printf F; else printf O; fi; exit 0; fi
c=$(cd -P -- "$r" && pwd -P && echo x) || exit 1
c=${c%??}
printf 'D%s\0' "$c"
a=$c
while [ "$a" != / ]; do
  a=${a%/*}
  a=${a:-/}
  for f in .ignore .gitignore .git .jj; do
    if [ -e "${a%/}/$f" ]; then printf 'P%s\0' "${a%/}/$f"; fi
  done
done
exec find "#,
    );
    script.extend_from_slice(&find_start(root)?);
    script.extend_from_slice(
        b" -mindepth 1 \\( -name .git -o -name .jj -o -name .ignore -o -name .gitignore \\) \
          -print0 -prune -o -name '.*' -prune\n",
    );
    Ok(script)
}

fn listing_script(root: &Path) -> Result<Vec<u8>> {
    let mut script = b"exec find ".to_vec();
    script.extend_from_slice(&find_start(root)?);
    script.extend_from_slice(b" -mindepth 1 -name '.*' ! -type f -prune -o -type f -print0\n");
    Ok(script)
}

/// The prefix every `find` path starts with (the unquoted start argument plus `/`).
fn find_prefix(root: &Path) -> Vec<u8> {
    let bytes = root.as_os_str().as_encoded_bytes();
    let mut prefix = Vec::with_capacity(bytes.len() + 5);
    if !bytes.starts_with(b"/") {
        prefix.extend_from_slice(b"./");
    }
    prefix.extend_from_slice(bytes);
    prefix.extend_from_slice(b"/./");
    prefix
}

fn parse_discovery(stdout: &[u8], prefix: &[u8]) -> Option<Discovery> {
    let mut records = stdout.split(|&b| b == 0).filter(|r| !r.is_empty());
    let kind = match records.next()?.split_first()? {
        (b'M', _) => RootKind::Missing,
        (b'F', _) => RootKind::File,
        (b'O', _) => RootKind::Other,
        (b'D', path) if !path.is_empty() => RootKind::Dir {
            canonical: path_from_bytes(path.to_vec()),
        },
        _ => return None,
    };
    let mut discovery = Discovery {
        kind,
        parent_markers: Vec::new(),
        tree_markers: Vec::new(),
    };
    for record in records {
        match record.split_first() {
            Some((b'P', path)) => discovery
                .parent_markers
                .push(path_from_bytes(path.to_vec())),
            _ => {
                if let Some(rel) = record.strip_prefix(prefix) {
                    discovery.tree_markers.push(path_from_bytes(rel.to_vec()));
                }
            }
        }
    }
    Some(discovery)
}

async fn discover(executor: &SshExecutor, root: &Path) -> anyhow::Result<Discovery> {
    let (_, output) = run_collect(executor, &discovery_script(root)?, Vec::new()).await?;
    // `find` reports unreadable directories again during the listing: not here.
    parse_discovery(&output.stdout, &find_prefix(root)).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: cannot list the directory: {}",
            root.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })
}

// ---------------------------------------------------------------------------------------
// stream_files: ignore rules
// ---------------------------------------------------------------------------------------

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
struct Rules {
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
struct Source {
    scope: Scope,
    kind: Kind,
    /// The directory the patterns are relative to (as matched paths spell it).
    base: PathBuf,
    /// The file to read.
    file: PathBuf,
}

/// Turns marker paths into repository flags and ignore files to fetch.
fn plan(rules: &mut Rules, discovery: &Discovery) -> Vec<Source> {
    rules.parents = rules
        .canonical
        .ancestors()
        .skip(1)
        .map(|dir| (dir.to_path_buf(), DirRules::default()))
        .collect();
    let tree = discovery.tree_markers.iter().filter_map(|rel| {
        let dir = rel.parent()?;
        // `root.join("")` would add a trailing slash.
        let base = if dir.as_os_str().is_empty() {
            rules.root.clone()
        } else {
            rules.root.join(dir)
        };
        Some((Scope::Tree(dir.to_path_buf()), base, rel.file_name()?))
    });
    let parents = discovery.parent_markers.iter().filter_map(|path| {
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

/// Fetches and compiles every ignore file; unreadable ones are skipped, as `ignore` does.
async fn load_rules(executor: &SshExecutor, root: &Path, discovery: &Discovery) -> Rules {
    let RootKind::Dir { canonical } = &discovery.kind else {
        return Rules::default();
    };
    let mut rules = Rules {
        root: root.to_path_buf(),
        canonical: canonical.clone(),
        ..Rules::default()
    };
    let sources = plan(&mut rules, discovery);
    let fetched: Vec<_> = futures::stream::iter(sources)
        .map(|source| async move {
            let text = executor.read_resolved(&source.file).await;
            (source, text)
        })
        .buffer_unordered(CONCURRENT_READS)
        .collect()
        .await;
    for (source, text) in fetched {
        let Ok(text) = text else { continue };
        let Some(matcher) = compile(&source.base, &source.file, &text) else {
            continue;
        };
        let Some(dir) = rules.dir_mut(&source.scope) else {
            continue;
        };
        match source.kind {
            Kind::Ignore => dir.ignore = Some(matcher),
            Kind::GitIgnore => dir.gitignore = Some(matcher),
            Kind::Exclude => dir.exclude = Some(matcher),
        }
    }
    rules
}

// ---------------------------------------------------------------------------------------
// stream_files: selection, listing, loading
// ---------------------------------------------------------------------------------------

/// Decides which listed files are yielded.
#[derive(Debug)]
struct Selector {
    rules: Rules,
    extensions: Option<Vec<String>>,
    /// Whether each directory seen so far is ignored (itself or through an ancestor).
    dirs: HashMap<PathBuf, bool>,
}

/// LocalExecutor's extension filter: `Path::extension` equal to an entry, exactly.
fn wants_extension(extensions: Option<&[String]>, path: &Path) -> bool {
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
    fn wants(&mut self, rel: &Path) -> bool {
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

/// One item of the streamed listing.
#[derive(Debug)]
enum Listed {
    File(PathBuf),
    Problem(anyhow::Error),
}

/// Splits `find -print0` stdout into paths and stderr into lines, as chunks arrive.
struct ListingSink {
    prefix: Vec<u8>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    problems: usize,
    out: unbounded::UnboundedSender<Listed>,
}

impl ListingSink {
    fn feed(&mut self, chunk: &OutputChunk) {
        match chunk {
            OutputChunk::Stdout(bytes) => {
                self.stdout.extend_from_slice(bytes);
                while let Some(end) = self.stdout.iter().position(|&b| b == 0) {
                    let record: Vec<u8> = self.stdout.drain(..=end).collect();
                    let path = record
                        .get(..end)
                        .and_then(|p| p.strip_prefix(self.prefix.as_slice()));
                    if let Some(rel) = path {
                        let _ = self
                            .out
                            .unbounded_send(Listed::File(path_from_bytes(rel.to_vec())));
                    }
                }
            }
            OutputChunk::Stderr(bytes) => {
                self.stderr.extend_from_slice(bytes);
                while let Some(end) = self.stderr.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.stderr.drain(..=end).collect();
                    self.problem(&line);
                }
            }
        }
    }

    fn problem(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line).trim().to_owned();
        if !text.is_empty() {
            self.problems += 1;
            let _ = self
                .out
                .unbounded_send(Listed::Problem(anyhow::anyhow!(text)));
        }
    }
}

/// Runs the listing `find`, sending paths and problems as they arrive.
async fn list(executor: &SshExecutor, root: &Path, out: unbounded::UnboundedSender<Listed>) {
    let script = match listing_script(root) {
        Ok(script) => script,
        Err(error) => {
            let _ = out.unbounded_send(Listed::Problem(error.into()));
            return;
        }
    };
    let mut sink = ListingSink {
        prefix: find_prefix(root),
        stdout: Vec::new(),
        stderr: Vec::new(),
        problems: 0,
        out,
    };
    let run = run_script(executor, &script, Vec::new(), &mut |chunk| sink.feed(chunk)).await;
    let leftover = std::mem::take(&mut sink.stderr);
    sink.problem(&leftover);
    match run {
        // A failing `find` explains itself on stderr, already reported line by line.
        Ok(run) if run.status.success() || sink.problems > 0 => {}
        Ok(run) => {
            let text = format!("{}: find ended with {:?}", root.display(), run.status);
            sink.problem(text.as_bytes());
        }
        Err(error) => {
            let _ = sink.out.unbounded_send(Listed::Problem(error.into()));
        }
    }
}

async fn load(executor: &SshExecutor, path: PathBuf) -> anyhow::Result<LoadedFile> {
    match executor.read_resolved(&path).await {
        Ok(content) => Ok(LoadedFile { path, content }),
        Err(error) => {
            Err(anyhow::Error::new(error)
                .context(format!("Failed to read file {}", path.display())))
        }
    }
}

/// Sends the selected files of a directory root, reading 16 at a time.
async fn stream_tree(
    executor: &SshExecutor,
    root: &Path,
    selector: Selector,
    tx: &mpsc::Sender<anyhow::Result<LoadedFile>>,
) {
    let (listed_tx, listed_rx) = unbounded::unbounded();
    let listing = async {
        list(executor, root, listed_tx).await;
        // The loader below ends the walk once it has drained what was listed.
        std::future::pending::<()>().await;
    };
    let mut selector = selector;
    let jobs = listed_rx.filter_map(move |listed| {
        let job = match listed {
            Listed::File(rel) if selector.wants(&rel) => Some(Ok(root.join(rel))),
            Listed::File(_) => None,
            Listed::Problem(error) => Some(Err(error)),
        };
        std::future::ready(job)
    });
    let loading = async {
        let mut loaded = jobs
            .map(|job| async move {
                match job {
                    Ok(path) => load(executor, path).await,
                    Err(error) => Err(error),
                }
            })
            .buffered(CONCURRENT_READS);
        while let Some(item) = loaded.next().await {
            if tx.send(item).await.is_err() {
                return;
            }
        }
    };
    // Whichever ends first: loading ends after the listing (or when the consumer left), and
    // dropping an unfinished listing kills the remote `find`.
    tokio::select! {
        () = loading => {}
        () = listing => {}
    }
}

/// Producer side of `stream_files`.
async fn walk(
    executor: &SshExecutor,
    root: &Path,
    extensions: Option<Vec<String>>,
    tx: &mpsc::Sender<anyhow::Result<LoadedFile>>,
) -> anyhow::Result<()> {
    let discovery = discover(executor, root).await?;
    match &discovery.kind {
        RootKind::Missing => {
            let name = root.display();
            anyhow::bail!(
                "{name}: IO error for operation on {name}: {}",
                os_error_text(ENOENT)
            );
        }
        RootKind::Other => Ok(()),
        RootKind::File => {
            if wants_extension(extensions.as_deref(), root) {
                let _ = tx.send(load(executor, root.to_path_buf()).await).await;
            }
            Ok(())
        }
        RootKind::Dir { .. } => {
            let selector = Selector {
                rules: load_rules(executor, root, &discovery).await,
                extensions,
                dirs: HashMap::new(),
            };
            stream_tree(executor, root, selector, tx).await;
            Ok(())
        }
    }
}

/// Starts `stream_files` for a resolved root: a producer task feeding a bounded channel.
/// The task ends when the walk does or when the receiver is dropped.
pub(crate) fn walk_files(
    executor: SshExecutor,
    root: PathBuf,
    extensions: Option<Vec<String>>,
) -> mpsc::Receiver<anyhow::Result<LoadedFile>> {
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    tokio::spawn(async move {
        tokio::select! {
            () = tx.closed() => {}
            result = walk(&executor, &root, extensions, &tx) => {
                if let Err(error) = result {
                    let _ = tx.send(Err(error)).await;
                }
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sftp::EACCES;

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

    #[test]
    fn discovery_output_is_parsed() {
        let prefix = find_prefix(Path::new("/r"));
        assert_eq!(prefix, b"/r/./");
        let out = b"D/real/r\0P/real/.gitignore\0P/.git\0/r/./a/.ignore\0/r/./.git\0";
        let d = parse_discovery(out, &prefix).unwrap();
        assert_eq!(
            d.kind,
            RootKind::Dir {
                canonical: "/real/r".into()
            }
        );
        assert_eq!(
            d.parent_markers,
            [PathBuf::from("/real/.gitignore"), "/.git".into()]
        );
        assert_eq!(d.tree_markers, [PathBuf::from("a/.ignore"), ".git".into()]);
        assert_eq!(
            parse_discovery(b"M", &prefix).unwrap().kind,
            RootKind::Missing
        );
        assert!(parse_discovery(b"", &prefix).is_none());
        assert_eq!(find_prefix(Path::new("rel")), b"./rel/./");
    }

    #[test]
    fn error_texts_map_back_to_numbers() {
        assert_eq!(errno_of("No such file or directory"), Some(ENOENT));
        assert_eq!(errno_of("Is a directory"), Some(EISDIR));
        assert_eq!(errno_of("Permission denied"), Some(EACCES));
        assert_eq!(errno_of("Directory nonexistent"), Some(ENOENT));
        assert_eq!(errno_of("whatever"), None);
    }
}
