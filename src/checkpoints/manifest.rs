//! What git does not keep of a tree: every entry's type and permission bits, and the empty
//! directories. Walked over SFTP (never following a symlink), stored beside the checkpoint's
//! commit, and compared with the tree later.

use std::{collections::BTreeMap, path::Path};

use super::{Change, ChangeKind};
use crate::{error::Result, executor::SshExecutor, files::FileType};

/// Path relative to the tree (`/`-separated) → (kind, permission bits); kind is `f` (file),
/// `d` (directory), `l` (symlink) or `o` (anything else).
pub(super) type Manifest = BTreeMap<String, (char, u32)>;

/// The manifest of the tree at `root` as it is now (`.git` entries left out, as git leaves
/// them out).
pub(super) async fn walk(executor: &SshExecutor, root: &Path) -> Result<Manifest> {
    let mut manifest = Manifest::new();
    let mut pending = vec![String::new()];
    while let Some(relative) = pending.pop() {
        let dir = if relative.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&relative)
        };
        for entry in executor.list_dir(&dir).await? {
            // SFTP names are text: one that is not UTF-8 cannot be named back (its content
            // is still git's to restore; its mode is not recorded).
            if entry.name == ".git" || entry.name.contains('\u{fffd}') {
                continue;
            }
            let path = if relative.is_empty() {
                entry.name.clone()
            } else {
                format!("{relative}/{}", entry.name)
            };
            let kind = match entry.metadata.file_type {
                FileType::File => 'f',
                FileType::Dir => 'd',
                FileType::Symlink => 'l',
                _ => 'o',
            };
            if kind == 'd' {
                pending.push(path.clone());
            }
            manifest.insert(path, (kind, entry.metadata.permissions & 0o7777));
        }
    }
    Ok(manifest)
}

/// What differs between `recorded` and `now` that git's own comparison does not say
/// (`reported` holds the paths it did): directories that came or went, types and modes.
pub(super) fn differences(
    recorded: &Manifest,
    now: &Manifest,
    reported: &std::collections::HashSet<String>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut change = |path: &str, kind: ChangeKind| {
        if !reported.contains(path) {
            changes.push(Change {
                path: path.into(),
                kind,
            });
        }
    };
    for (path, (kind, mode)) in recorded {
        match now.get(path) {
            None if *kind == 'd' => change(path, ChangeKind::Removed),
            None => {}
            Some((now_kind, _)) if now_kind != kind => change(path, ChangeKind::TypeChanged),
            Some((_, now_mode)) if now_mode != mode && *kind != 'l' => {
                change(path, ChangeKind::ModeChanged);
            }
            Some(_) => {}
        }
    }
    for (path, (kind, _)) in now {
        if *kind == 'd' && !recorded.contains_key(path) {
            change(path, ChangeKind::Added);
        }
    }
    changes
}

/// The fixes that make `now` (just restored by git) what `recorded` says: directories to
/// make and modes to set, parents first (see `script::make_dirs` and `script::set_modes`).
pub(super) fn fixes(recorded: &Manifest, now: &Manifest) -> Vec<(u32, String, bool)> {
    recorded
        .iter()
        .filter(|(_, (kind, _))| *kind == 'd' || *kind == 'f')
        .filter_map(|(path, (kind, mode))| match now.get(path) {
            None if *kind == 'd' => Some((*mode, path.clone(), true)),
            Some((now_kind, now_mode)) if now_kind == kind && now_mode != mode => {
                Some((*mode, path.clone(), false))
            }
            _ => None,
        })
        .collect()
}

/// The directories `now` has and `recorded` does not, deepest first: added since, and left
/// by git when empty.
pub(super) fn added_dirs(recorded: &Manifest, now: &Manifest) -> Vec<String> {
    now.iter()
        .rev()
        .filter(|(path, (kind, _))| *kind == 'd' && !recorded.contains_key(*path))
        .map(|(path, _)| path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_types_and_empty_directories_are_told_apart_from_what_git_said() {
        let recorded: Manifest = [
            ("a".to_owned(), ('f', 0o640)),
            ("empty".to_owned(), ('d', 0o755)),
            ("link".to_owned(), ('l', 0o777)),
            ("t".to_owned(), ('f', 0o644)),
        ]
        .into();
        let now: Manifest = [
            ("a".to_owned(), ('f', 0o600)),
            ("link".to_owned(), ('l', 0o777)),
            ("new".to_owned(), ('d', 0o700)),
            ("t".to_owned(), ('d', 0o755)),
        ]
        .into();
        let reported = ["t".to_owned()].into();
        let kinds: Vec<_> = differences(&recorded, &now, &reported)
            .into_iter()
            .map(|change| (change.path.display().to_string(), change.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("a".to_owned(), ChangeKind::ModeChanged),
                ("empty".to_owned(), ChangeKind::Removed),
                ("new".to_owned(), ChangeKind::Added),
            ]
        );
        assert_eq!(
            fixes(&recorded, &now),
            [
                (0o640, "a".to_owned(), false),
                (0o755, "empty".to_owned(), true)
            ]
        );
    }
}
