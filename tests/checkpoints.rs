//! Checkpoints (guide, "Checkpoints"), through a real sshd: a 10,000-file tree, random
//! destructive operations, and a rollback that gives back the same tree, checked path by
//! path (type, mode, symlink target, content); a symlink pointing outside restored as a
//! symlink and never followed; what `changes_since` reports; the refusals.

mod common;

use std::{
    collections::BTreeMap,
    os::unix::fs::{PermissionsExt, symlink},
    path::{Path, PathBuf},
};

use common::{builder, testbed, token};
use sha2::{Digest, Sha256};
use swiftide_ssh_executor::{ChangeKind, Checkpoint, Error};

/// Every path below `root` (`.git` left out): its type, mode, symlink target and content
/// digest.
fn manifest(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let what = if meta.file_type().is_symlink() {
                format!("l -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                pending.push(path.clone());
                format!("d {mode:o}")
            } else {
                let digest = Sha256::digest(std::fs::read(&path).unwrap());
                let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
                format!("f {mode:o} {hex}")
            };
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), what);
        }
    }
    out
}

/// A small deterministic generator (no dependency, same sequence every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % below
    }
}

/// 100 directories × 100 files with assorted modes, empty directories, a `.gitignore` whose
/// files must be kept too, a symlink inside and one pointing outside.
fn make_tree(root: &Path, outside: &Path) {
    let modes = [0o644, 0o600, 0o755, 0o640, 0o444];
    for d in 0..100 {
        let dir = root.join(format!("dir {d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            let path = dir.join(format!("file-{f:03}.txt"));
            std::fs::write(&path, format!("{d}/{f}\n").repeat(f % 7 + 1)).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(modes[(d + f) % 5]))
                .unwrap();
        }
    }
    std::fs::create_dir_all(root.join("empty/nested empty")).unwrap();
    std::fs::set_permissions(root.join("empty"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(root.join(".gitignore"), "*.log\nbuild/\n").unwrap();
    std::fs::write(
        root.join("kept.log"),
        "ignored by the tree's git, kept by ours\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("build")).unwrap();
    std::fs::write(root.join("build/out.o"), [0u8, 1, 2, 255]).unwrap();
    symlink("dir 00/file-000.txt", root.join("inner link")).unwrap();
    symlink(outside, root.join("outside link")).unwrap();
}

#[tokio::test]
async fn a_rollback_gives_back_a_10000_file_tree_after_random_damage() {
    let tb = testbed();
    let base = std::env::temp_dir().join(format!("swiftide-checkpoint-{}", token()));
    let (root, outside) = (base.join("tree"), base.join("outside"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), "outside\n").unwrap();
    make_tree(&root, &outside);
    let before = manifest(&root);
    let outside_before = manifest(&outside);
    let ex = builder(&tb).build().await.unwrap();

    let checkpoint = ex.checkpoint(&root).await.unwrap();
    assert!(ex.changes_since(&checkpoint).await.unwrap().is_empty());

    // Damage, chosen by the generator.
    let mut rng = Lcg(7);
    let file = |rng: &mut Lcg| {
        root.join(format!(
            "dir {:02}/file-{:03}.txt",
            rng.next(100),
            rng.next(100)
        ))
    };
    for round in 0..200 {
        let path = file(&mut rng);
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        match round % 7 {
            0 => std::fs::remove_file(&path).unwrap(),
            1 => std::fs::write(&path, "").unwrap(),
            2 => std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap(),
            3 => std::fs::rename(&path, path.with_extension("moved")).unwrap(),
            4 => {
                std::fs::remove_file(&path).unwrap();
                symlink(&outside, &path).unwrap();
            }
            5 => {
                std::fs::remove_file(&path).unwrap();
                std::fs::create_dir_all(path.join("inside")).unwrap();
                std::fs::write(path.join("inside/new"), "new").unwrap();
            }
            _ => std::fs::write(&path, "replaced\n").unwrap(),
        }
    }
    std::fs::write(root.join("added.txt"), "added").unwrap();
    std::fs::create_dir_all(root.join("added empty")).unwrap();
    std::fs::remove_dir(root.join("empty/nested empty")).unwrap();
    std::fs::set_permissions(root.join("dir 01"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::remove_file(root.join("kept.log")).unwrap();
    std::fs::remove_file(root.join("outside link")).unwrap();
    std::fs::create_dir_all(root.join("outside link")).unwrap();
    std::fs::remove_dir_all(root.join("dir 02")).unwrap();
    symlink(&outside, root.join("dir 02")).unwrap();
    std::fs::write(root.join("build/out.o"), "rebuilt").unwrap();

    let changes = ex.changes_since(&checkpoint).await.unwrap();
    let kind_of = |path: &str| {
        changes
            .iter()
            .find(|change| change.path == Path::new(path))
            .map(|change| change.kind)
    };
    assert_eq!(kind_of("added.txt"), Some(ChangeKind::Added));
    assert_eq!(kind_of("added empty"), Some(ChangeKind::Added));
    assert_eq!(kind_of("empty/nested empty"), Some(ChangeKind::Removed));
    assert_eq!(kind_of("dir 01"), Some(ChangeKind::ModeChanged));
    assert_eq!(kind_of("kept.log"), Some(ChangeKind::Removed));
    assert_eq!(kind_of("build/out.o"), Some(ChangeKind::Modified));
    assert!(changes.len() > 150, "{}", changes.len());

    let undone = ex.rollback(&checkpoint).await.unwrap();
    assert_eq!(undone, changes);
    let after = manifest(&root);
    let differing: Vec<_> = before
        .iter()
        .filter(|(path, what)| after.get(*path) != Some(what))
        .map(|(path, what)| format!("{}: {what} / {:?}", path.display(), after.get(path)))
        .chain(
            after
                .keys()
                .filter(|path| !before.contains_key(*path))
                .map(|path| format!("{}: added", path.display())),
        )
        .collect();
    assert!(
        differing.is_empty(),
        "{} differ: {:#?}",
        differing.len(),
        &differing[..differing.len().min(20)]
    );
    assert_eq!(
        manifest(&outside),
        outside_before,
        "something outside the tree changed"
    );
    assert!(ex.changes_since(&checkpoint).await.unwrap().is_empty());

    // The next checkpoint after a one-file change, and its rollback.
    std::fs::write(root.join("dir 05/file-005.txt"), "one change").unwrap();
    let second = ex.checkpoint(&root).await.unwrap();
    assert_ne!(second.id, checkpoint.id);
    std::fs::write(root.join("dir 05/file-005.txt"), "another").unwrap();
    let undone = ex.rollback(&second).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("dir 05/file-005.txt")).unwrap(),
        "one change"
    );
    // And the first, reached again from a handle that only has its id.
    let again = Checkpoint {
        dir: root.clone(),
        id: checkpoint.id.clone(),
    };
    ex.rollback(&again).await.unwrap();
    assert_eq!(manifest(&root), before);
    std::fs::remove_dir_all(&base).unwrap();
}

#[tokio::test]
async fn checkpoints_refuse_what_they_cannot_do_with_typed_errors() {
    let tb = testbed();
    let ex = builder(&tb).build().await.unwrap();
    let refused = ex.checkpoint("/").await.unwrap_err();
    assert!(
        matches!(&refused, Error::Checkpoint { reason, .. } if reason.contains("holds this account's checkpoints")),
        "{refused}"
    );
    let missing = ex.checkpoint("/nonexistent/tree").await.unwrap_err();
    assert!(
        matches!(&missing, Error::Checkpoint { .. } | Error::Sftp { .. }),
        "{missing}"
    );
    let dir = std::env::temp_dir().join(format!("swiftide-checkpoint-none-{}", token()));
    std::fs::create_dir_all(&dir).unwrap();
    ex.checkpoint(&dir).await.unwrap();
    let unknown = Checkpoint {
        dir: dir.clone(),
        id: "0".repeat(40),
    };
    let error = ex.changes_since(&unknown).await.unwrap_err();
    assert!(
        matches!(&error, Error::Checkpoint { reason, .. } if reason.contains("no checkpoint")),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The store of `dir` (as `checkpoints::store_key` names it) under the login's home.
fn store_of(dir: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(dir.as_os_str().as_bytes());
    let key: String = digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".local/state"));
    state.join("swiftide-ssh/checkpoints").join(key)
}

#[tokio::test]
async fn an_operation_killed_mid_way_leaves_nothing_that_blocks_the_next() {
    let tb = testbed();
    let ex = builder(&tb).build().await.unwrap();
    let dir = std::env::temp_dir().join(format!("swiftide-checkpoint-lock-{}", token()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a"), "a").unwrap();
    let first = ex.checkpoint(&dir).await.unwrap();
    let store = store_of(&dir);
    assert!(store.join("git").is_dir(), "{}", store.display());

    // What a killed operation leaves: its lock with a pid that is gone, and git's lock.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    std::fs::create_dir_all(store.join("lock")).unwrap();
    std::fs::write(store.join("lock/pid"), dead.to_string()).unwrap();
    std::fs::write(store.join("index.lock"), "").unwrap();
    std::fs::write(dir.join("a"), "changed").unwrap();
    let undone = ex.rollback(&first).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "a");
    assert!(!store.join("lock").exists() && !store.join("index.lock").exists());

    // A live holder: refused at once, with a reason.
    let mut holder = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    std::fs::create_dir_all(store.join("lock")).unwrap();
    std::fs::write(store.join("lock/pid"), holder.id().to_string()).unwrap();
    let busy = ex.checkpoint(&dir).await.unwrap_err();
    assert!(
        matches!(&busy, Error::Checkpoint { reason, .. } if reason.contains("is running")),
        "{busy}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    std::fs::remove_dir_all(store.join("lock")).unwrap();
    ex.checkpoint(&dir).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
