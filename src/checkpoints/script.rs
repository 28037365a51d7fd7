//! The shell scripts behind checkpoints: a private git object store per work tree, reached
//! with `GIT_DIR`/`GIT_WORK_TREE`/`GIT_INDEX_FILE` so that nothing of the tree's own git
//! (its `.git`, its hooks, its ignore rules, the user's configuration) takes part.

use std::path::Path;

use crate::command::quote;

/// The exit code of a host without `git`.
pub(super) const NO_GIT: u32 = 3;
/// The exit code of a tree that is not a directory.
pub(super) const NO_TREE: u32 = 4;
/// The exit code of an unknown checkpoint.
pub(super) const NO_CHECKPOINT: u32 = 5;
/// The exit code of a tree that holds the store (a home directory, `/`).
pub(super) const HOLDS_STORE: u32 = 6;
/// The exit code of a store another operation is using.
pub(super) const BUSY: u32 = 7;

/// What every script starts with: the tree, the store, git's environment and `g`, git with
/// the settings that make it record exactly what is there.
fn prologue(tree: &Path, key: &str) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut script = b"set -eu\ntree=".to_vec();
    script.extend_from_slice(&quote(tree.as_os_str().as_bytes()));
    script.extend_from_slice(b"\nkey=");
    script.extend_from_slice(&quote(key.as_bytes()));
    script.extend_from_slice(
        br#"
command -v git >/dev/null 2>&1 || { echo "git is not installed on the host" >&2; exit 3; }
cd "$tree" 2>/dev/null || { echo "$tree is not a directory" >&2; exit 4; }
tree=$(pwd -P)
umask 077
state="${XDG_STATE_HOME:-$HOME/.local/state}/swiftide-ssh"
store="$state/checkpoints/$key"
mkdir -p "$store/manifests"
state=$(cd "$state" && pwd -P)
case "$state/" in "${tree%/}"/*)
  echo "$tree holds this account's checkpoints ($state): choose a directory below it" >&2
  exit 6
esac
# One operation on a store at a time. A lock whose holder is gone (an operation killed when
# its caller gave up) is taken over, and git's own lock with it, which a killed git leaves.
lock="$store/lock"
if ! mkdir "$lock" 2>/dev/null; then
  holder=$(cat "$lock/pid" 2>/dev/null || :)
  if [ -n "$holder" ] && kill -0 "$holder" 2>/dev/null; then
    echo "another checkpoint operation on $tree is running (pid $holder)" >&2
    exit 7
  fi
  if [ -z "$holder" ] && [ -z "$(find "$lock" -prune -mmin +1 2>/dev/null)" ]; then
    echo "another checkpoint operation on $tree is starting" >&2
    exit 7
  fi
  rm -rf "$lock" "$store/index.lock"
  mkdir "$lock" || { echo "another checkpoint operation on $tree took the lock" >&2; exit 7; }
fi
echo $$ > "$lock/pid"
trap 'rm -rf "$lock"' EXIT
[ -d "$store/git" ] || git init -q --bare "$store/git"
GIT_DIR="$store/git" GIT_WORK_TREE="$tree" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
GIT_AUTHOR_NAME=swiftide-ssh GIT_AUTHOR_EMAIL=swiftide-ssh@localhost
GIT_COMMITTER_NAME=swiftide-ssh GIT_COMMITTER_EMAIL=swiftide-ssh@localhost
export GIT_DIR GIT_WORK_TREE GIT_CONFIG_NOSYSTEM GIT_CONFIG_GLOBAL GIT_AUTHOR_NAME \
  GIT_AUTHOR_EMAIL GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL
g() {
  git -c core.bare=false -c core.excludesFile=/dev/null -c core.fileMode=true \
    -c core.symlinks=true -c core.autocrlf=false -c core.safecrlf=false -c gc.auto=0 \
    -c core.hooksPath=/dev/null "$@"
}
"#,
    );
    script
}

/// Lines that fail with [`NO_CHECKPOINT`] unless `id` is a checkpoint of this store.
fn known(id: &str) -> Vec<u8> {
    let mut script = b"id=".to_vec();
    script.extend_from_slice(&quote(id.as_bytes()));
    script.extend_from_slice(
        br#"
g rev-parse -q --verify "refs/checkpoints/$id" >/dev/null || { echo "no checkpoint $id of $tree" >&2; exit 5; }
"#,
    );
    script
}

/// Records the tree as a commit (every file, ignored ones too; no `.git`) and prints its id.
pub(super) fn checkpoint(tree: &Path, key: &str) -> Vec<u8> {
    let mut script = prologue(tree, key);
    script.extend_from_slice(
        br#"GIT_INDEX_FILE="$store/index"; export GIT_INDEX_FILE
g add -A -f -- .
id=$(printf 'checkpoint\n' | g commit-tree "$(g write-tree)")
g update-ref "refs/checkpoints/$id" "$id"
printf '%s\n' "$id"
"#,
    );
    script
}

/// Stores the manifest read on stdin beside checkpoint `id`.
pub(super) fn keep_manifest(tree: &Path, key: &str, id: &str) -> Vec<u8> {
    let mut script = prologue(tree, key);
    script.extend_from_slice(&known(id));
    script.extend_from_slice(b"cat > \"$store/manifests/$id.part\"\nmv -f \"$store/manifests/$id.part\" \"$store/manifests/$id\"\n");
    script
}

/// Prints what differs from checkpoint `id` as git sees it (`STATUS\0PATH\0` each), an empty
/// token, then the checkpoint's manifest. The store's one index, which the checkpoints
/// keep, is brought up to the tree first: with its file times, git hashes only the files
/// that changed since it last looked.
pub(super) fn changes(tree: &Path, key: &str, id: &str) -> Vec<u8> {
    let mut script = prologue(tree, key);
    script.extend_from_slice(&known(id));
    script.extend_from_slice(
        br#"GIT_INDEX_FILE="$store/index"; export GIT_INDEX_FILE
g add -A -f -- .
g diff-index --cached -z --no-renames --name-status "$id"
printf '\000'
cat "$store/manifests/$id"
"#,
    );
    script
}

/// Puts the tree back as checkpoint `id` recorded it, as git can: the index brought up to
/// the tree (every file in it, ignored ones too), then moved to the checkpoint with the work
/// tree (`read-tree --reset -u`): what was added is removed, what differs is written again
/// (only that), symlinks and executable bits restored, never through a symlink (git
/// replaces what is in the way). Then prints an empty token and the checkpoint's manifest,
/// for the modes and empty directories git does not keep.
pub(super) fn rollback(tree: &Path, key: &str, id: &str) -> Vec<u8> {
    let mut script = prologue(tree, key);
    script.extend_from_slice(&known(id));
    script.extend_from_slice(
        br#"GIT_INDEX_FILE="$store/index"; export GIT_INDEX_FILE
g add -A -f -- .
umask 022
g read-tree --reset -u "$id"
printf '\000'
cat "$store/manifests/$id"
"#,
    );
    script
}

/// Makes the directories named on stdin (NUL-separated, relative to the tree, parents
/// first): the empty directories git does not keep.
pub(super) fn make_dirs(tree: &Path) -> Vec<u8> {
    in_tree(tree, b"xargs -0 mkdir -p\n")
}

/// Removes the directories named on stdin (NUL-separated, deepest first) that are empty:
/// the ones added since the checkpoint, which git does not track. One that is not empty (a
/// nested repository, say) stays.
pub(super) fn remove_empty_dirs(tree: &Path) -> Vec<u8> {
    in_tree(tree, b"xargs -0 rmdir 2>/dev/null || :\n")
}

/// Sets the modes named on stdin (`MODE\0PATH\0` pairs, octal, paths relative to the tree,
/// deepest first, so that a directory's own mode never stops what is done inside it). Only
/// directories and regular files are named: a symlink's target is never changed.
pub(super) fn set_modes(tree: &Path) -> Vec<u8> {
    in_tree(tree, b"xargs -0 -n 2 chmod\n")
}

fn in_tree(tree: &Path, line: &[u8]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut script = b"set -eu\ncd ".to_vec();
    script.extend_from_slice(&quote(tree.as_os_str().as_bytes()));
    script.push(b'\n');
    script.extend_from_slice(line);
    script
}
