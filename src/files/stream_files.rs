//! `stream_files`: LocalExecutor's walk with the `ignore` crate's defaults, reproduced
//! remotely with two `find` runs and client-side matching.
//!
//! 1. *Discovery* (one exec): the root's kind and canonical path, the ignore files and
//!    repository markers (`.ignore`, `.gitignore`, `.git`, `.jj`) in every parent directory
//!    of the root, and those in the tree (`find -print0`, hidden directories pruned). Their
//!    contents (and `.git/info/exclude`) are fetched over SFTP and compiled with the matcher
//!    LocalExecutor uses ([`crate::files::ignore_rules`]).
//! 2. *Listing* (one exec, streamed): every regular file, hidden directories pruned, hidden
//!    files listed so that a `!` whitelist pattern can bring them back. Each path is matched
//!    as `ignore`'s walker would, filtered by extension, and its content read over SFTP, 16
//!    at a time.
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
//! have both).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
};

use futures::{StreamExt, channel::mpsc as unbounded};
use tokio::sync::mpsc;

use crate::{
    command::OutputChunk,
    error::Result,
    executor::SshExecutor,
    files::{
        error::{ENOENT, os_error_text},
        ignore_rules::{Rules, Selector, plan, wants_extension},
        own_script::{option_safe, quoted_path, run_collect, run_script},
    },
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
// Discovery
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
    let mut prefix = option_safe(root.as_os_str().as_encoded_bytes());
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

/// Fetches and compiles every ignore file; unreadable ones are skipped, as `ignore` does.
async fn load_rules(executor: &SshExecutor, root: &Path, discovery: &Discovery) -> Rules {
    let RootKind::Dir { canonical } = &discovery.kind else {
        return Rules::default();
    };
    let mut rules = Rules::new(root, canonical);
    let sources = plan(
        &mut rules,
        &discovery.parent_markers,
        &discovery.tree_markers,
    );
    let fetched: Vec<_> = futures::stream::iter(sources)
        .map(|source| async move {
            let text = executor.read_unaudited(&source.file).await;
            (source, text)
        })
        .buffer_unordered(CONCURRENT_READS)
        .collect()
        .await;
    for (source, text) in fetched {
        if let Ok(text) = text {
            rules.add(&source, &text);
        }
    }
    rules
}

// ---------------------------------------------------------------------------------------
// Listing and loading
// ---------------------------------------------------------------------------------------

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
    match executor.read_unaudited(&path).await {
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
            let rules = load_rules(executor, root, &discovery).await;
            let selector = Selector::new(rules, extensions);
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
    // Recorded once, as a walk: the reads it makes are part of it. A caller that drops the
    // stream early is recorded as having cancelled it.
    let audit = executor.audit_path("stream_files", &root, None);
    tokio::spawn(async move {
        let audit = match audit {
            Ok(audit) => audit,
            Err(refused) => {
                let _ = tx.send(Err(refused.into())).await;
                return;
            }
        };
        tokio::select! {
            () = tx.closed() => {}
            result = walk(&executor, &root, extensions, &tx) => {
                audit.end(match &result {
                    Ok(()) => crate::audit::Exit::Ok,
                    Err(error) => crate::audit::Exit::Error(format!("{error:#}")),
                });
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
}
