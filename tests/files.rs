//! File commands, the typed file API and `stream_files`, against a real OpenSSH sshd started
//! by the testbed. The server runs on this machine, so every remote effect is checked on the
//! local disk too, and `stream_files` is compared with swiftide's own `LocalExecutor` on the
//! same tree.

mod common;

use std::{
    ffi::OsString,
    os::unix::{
        ffi::OsStringExt,
        fs::{PermissionsExt, symlink},
    },
    path::{Path, PathBuf},
    process::Command as Process,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{builder, executor, testbed, unprivileged_testbed};
use futures::StreamExt;
use swiftide_agents::tools::local_executor::LocalExecutor;
use swiftide_core::{
    Command, CommandError, CommandOutputChunk, ToolExecutor, indexing::IndexingStream,
};
use swiftide_ssh_executor::{Error, FileType, SftpStatus};

/// Random bytes from the kernel (a debug build of a userspace generator is too slow for
/// 100 MiB).
fn random_bytes(len: usize) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn non_utf8(dir: &Path, name: &[u8]) -> PathBuf {
    dir.join(OsString::from_vec(name.to_vec()))
}

/// Temporary files a write left next to its target.
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".swiftide-") && name.ends_with(".tmp"))
        .collect()
}

fn nonzero_text(result: Result<swiftide_core::CommandOutput, CommandError>) -> String {
    match result {
        Err(CommandError::NonZeroExit(output)) => output.to_string(),
        other => panic!("expected NonZeroExit, got {other:?}"),
    }
}

#[tokio::test]
async fn hostile_and_non_utf8_names_round_trip_byte_exact() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let dir = tb.scratch_dir();
    let marker = dir.join("pwned");
    let names: Vec<PathBuf> = vec![
        dir.join("with space.txt"),
        dir.join("quote'\"s.txt"),
        dir.join(format!(
            "$(touch {})`touch {}`.txt",
            marker.display(),
            marker.display()
        )),
        dir.join("-leading-dash"),
        dir.join("new\nline.txt"),
        dir.join("ünïcødé.txt"),
        non_utf8(dir, b"bad\xff\xfename.txt"),
        non_utf8(dir, b"sub\xff/nested.bin"),
    ];
    for (i, path) in names.iter().enumerate() {
        let content = [b"line\n\x00\xff\xfe".as_slice(), &random_bytes(i * 1000)].concat();
        ex.write_file_bytes(path, &content).await.unwrap();
        assert_eq!(std::fs::read(path).unwrap(), content, "{path:?} on disk");
        assert_eq!(
            ex.read_file_bytes(path).await.unwrap(),
            content,
            "{path:?} read back"
        );
        // Through swiftide: ReadFile gives the raw bytes as one Stdout chunk.
        let out = ex
            .exec_cmd(&Command::read_file(path.clone()))
            .await
            .unwrap();
        assert_eq!(out.chunks().len(), 1);
        assert_eq!(out.as_bytes().as_ref(), content.as_slice());
    }
    for path in &names {
        let text = format!("swiftide {}", path.display());
        let out = ex
            .exec_cmd(&Command::write_file(path.clone(), text.clone()))
            .await
            .unwrap();
        assert!(out.is_empty());
        assert_eq!(std::fs::read(path).unwrap(), text.as_bytes());
    }
    // Empty content and empty files.
    let empty = dir.join("empty");
    ex.write_file_bytes(&empty, b"").await.unwrap();
    assert_eq!(std::fs::read(&empty).unwrap(), b"");
    let out = ex
        .exec_cmd(&Command::read_file(empty.clone()))
        .await
        .unwrap();
    assert!(out.is_empty());
    let empty_odd = non_utf8(dir, b"empty\xff");
    ex.write_file_bytes(&empty_odd, b"").await.unwrap();
    assert_eq!(ex.read_file_bytes(&empty_odd).await.unwrap(), b"");
    assert!(!marker.exists(), "a file name was run as a command");
    assert!(temp_files(dir).is_empty(), "{:?}", temp_files(dir));
}

#[tokio::test]
async fn a_100_mib_binary_file_round_trips_byte_identical() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let path = tb.scratch_dir().join("big.bin");
    let content = random_bytes(100 * 1024 * 1024);
    let mib = |took: Duration| 100.0 / took.as_secs_f64();

    let started = Instant::now();
    ex.write_file_bytes(&path, &content).await.unwrap();
    let write = started.elapsed();
    assert!(
        std::fs::read(&path).unwrap() == content,
        "file on disk differs"
    );

    let started = Instant::now();
    let back = ex.read_file_bytes(&path).await.unwrap();
    let read = started.elapsed();
    assert!(back == content, "read back differs");
    // One size that is not a multiple of any request length.
    let odd = &content[..7 * 255 * 1024 + 13];
    ex.write_file_bytes(&path, odd).await.unwrap();
    assert!(ex.read_file_bytes(&path).await.unwrap() == odd);
    println!(
        "100 MiB (debug build): write {write:.2?} ({:.0} MiB/s), read {read:.2?} ({:.0} MiB/s)",
        mib(write),
        mib(read)
    );
}

#[tokio::test]
async fn writes_keep_modes_follow_symlinks_and_create_parents() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let dir = tb.scratch_dir();

    let script = dir.join("run.sh");
    std::fs::write(&script, "old").unwrap();
    set_mode(&script, 0o755);
    ex.exec_cmd(&Command::write_file(&script, "#!/bin/sh\necho new\n"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&script).unwrap(),
        "#!/bin/sh\necho new\n"
    );
    assert_eq!(mode_of(&script), 0o755);
    let private = dir.join("private");
    std::fs::write(&private, "x").unwrap();
    set_mode(&private, 0o600);
    ex.write_file_bytes(&private, b"y").await.unwrap();
    assert_eq!(mode_of(&private), 0o600);

    let fresh = dir.join("a/b/c/new.txt");
    ex.exec_cmd(&Command::write_file(&fresh, "deep"))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "deep");
    assert_eq!(mode_of(&fresh), 0o644);

    // Relative link, a chain through an absolute link, and a dangling link.
    std::fs::create_dir(dir.join("real")).unwrap();
    std::fs::write(dir.join("real/target.txt"), "old target").unwrap();
    set_mode(&dir.join("real/target.txt"), 0o640);
    symlink("real/target.txt", dir.join("rel-link")).unwrap();
    symlink(dir.join("rel-link"), dir.join("abs-link")).unwrap();
    ex.exec_cmd(&Command::write_file(dir.join("abs-link"), "via links"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("real/target.txt")).unwrap(),
        "via links"
    );
    assert_eq!(mode_of(&dir.join("real/target.txt")), 0o640);
    for link in ["rel-link", "abs-link"] {
        assert!(
            std::fs::symlink_metadata(dir.join(link))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    symlink("real/created-through-link.txt", dir.join("dangling")).unwrap();
    ex.write_file_bytes(&dir.join("dangling"), b"made")
        .await
        .unwrap();
    assert!(
        std::fs::symlink_metadata(dir.join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read(dir.join("real/created-through-link.txt")).unwrap(),
        b"made"
    );
    symlink("loop-b", dir.join("loop-a")).unwrap();
    symlink("loop-a", dir.join("loop-b")).unwrap();
    let text = nonzero_text(
        ex.exec_cmd(&Command::write_file(dir.join("loop-a"), "x"))
            .await,
    );
    assert!(
        text.ends_with("Too many levels of symbolic links (os error 40)"),
        "{text}"
    );

    // The temporary file is opened together with the first lstat, before the target is
    // known to be a directory: it must not be left behind (checked at the end).
    let text = nonzero_text(
        ex.exec_cmd(&Command::write_file(dir.join("real"), "x"))
            .await,
    );
    assert!(text.ends_with("Is a directory (os error 21)"), "{text}");

    // The same through the exec path (a non-UTF-8 name).
    let odd = non_utf8(dir, b"mode\xff.sh");
    std::fs::write(&odd, "old").unwrap();
    set_mode(&odd, 0o751);
    ex.write_file_bytes(&odd, b"new").await.unwrap();
    assert_eq!(mode_of(&odd), 0o751);
    let odd_link = non_utf8(dir, b"link\xff");
    symlink("real/target.txt", &odd_link).unwrap();
    ex.write_file_bytes(&odd_link, b"exec via link")
        .await
        .unwrap();
    assert!(
        std::fs::symlink_metadata(&odd_link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read(dir.join("real/target.txt")).unwrap(),
        b"exec via link"
    );
    assert!(temp_files(dir).is_empty() && temp_files(&dir.join("real")).is_empty());
}

#[tokio::test]
async fn file_errors_read_exactly_like_local_executor() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let local = LocalExecutor::new(tb.scratch_dir());
    let dir = tb.scratch_dir().to_path_buf();
    std::fs::create_dir(dir.join("a-dir")).unwrap();
    let odd_dir = non_utf8(&dir, b"dir\xff");
    std::fs::create_dir(&odd_dir).unwrap();
    let cases = [
        Command::read_file(dir.join("missing.txt")),
        Command::read_file(dir.join("a-dir")),
        Command::write_file(dir.join("a-dir"), "x"),
        Command::read_file(non_utf8(&dir, b"missing\xff")),
        Command::read_file(odd_dir.clone()),
        Command::write_file(odd_dir.clone(), "x"),
    ];
    for cmd in &cases {
        let sink_calls = Arc::new(Mutex::new(Vec::new()));
        let seen = sink_calls.clone();
        let mut sink = move |c: &CommandOutputChunk| seen.lock().unwrap().push(c.clone());
        let ours = ex.exec_cmd_streaming(cmd, &mut sink).await;
        let theirs = local.exec_cmd(cmd).await;
        let (ours, theirs) = (nonzero_text(ours), nonzero_text(theirs));
        assert_eq!(ours, theirs, "{cmd:?}");
        assert_eq!(
            sink_calls.lock().unwrap().len(),
            1,
            "one buffered chunk is replayed"
        );
    }
    let missing = nonzero_text(
        ex.exec_cmd(&Command::read_file(dir.join("missing.txt")))
            .await,
    );
    assert_eq!(
        missing,
        format!(
            "failed to read from file `{}`: No such file or directory (os error 2)",
            dir.join("missing.txt").display()
        )
    );
    let is_dir = nonzero_text(ex.exec_cmd(&Command::read_file(dir.join("a-dir"))).await);
    assert!(
        is_dir.ends_with(": Is a directory (os error 21)"),
        "{is_dir}"
    );

    // The typed API says which operation and path failed.
    match ex
        .read_file_bytes(&dir.join("missing.txt"))
        .await
        .unwrap_err()
    {
        Error::Sftp {
            operation,
            path,
            status,
            ..
        } => {
            assert_eq!(operation, "read");
            assert_eq!(path, dir.join("missing.txt").display().to_string());
            assert_eq!(status, Some(SftpStatus::NoSuchFile));
        }
        other => panic!("expected Error::Sftp, got {other:?}"),
    }
}

#[tokio::test]
async fn permission_problems_are_reported_and_in_place_writes_still_work() {
    let tb = unprivileged_testbed();
    let ex = executor(&tb).await;
    let dir = tb.scratch_dir();
    let locked = dir.join("locked");
    std::fs::create_dir(&locked).unwrap();
    set_mode(&locked, 0o755);
    let secret = locked.join("secret.txt");
    std::fs::write(&secret, "no").unwrap();
    set_mode(&secret, 0o600);
    let shared = locked.join("shared.txt");
    std::fs::write(&shared, "old").unwrap();
    set_mode(&shared, 0o666);

    let read = nonzero_text(ex.exec_cmd(&Command::read_file(&secret)).await);
    assert_eq!(
        read,
        format!(
            "failed to read from file `{}`: Permission denied (os error 13)",
            secret.display()
        )
    );
    let new = locked.join("new.txt");
    let write = nonzero_text(ex.exec_cmd(&Command::write_file(&new, "x")).await);
    assert_eq!(
        write,
        format!(
            "failed to write to file `{}`: Permission denied (os error 13)",
            new.display()
        )
    );
    let odd = non_utf8(&locked, b"new\xff");
    let write = nonzero_text(ex.exec_cmd(&Command::write_file(&odd, "x")).await);
    assert!(
        write.ends_with(": Permission denied (os error 13)"),
        "{write}"
    );
    // The directory refuses a temporary file, the file itself is writable: written in place,
    // as LocalExecutor would.
    ex.exec_cmd(&Command::write_file(&shared, "new"))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_write_leaves_the_old_content_or_the_new_never_a_mix() {
    let mut tb = testbed();
    let ex = executor(&tb).await;
    let dir = tb.scratch_dir().to_path_buf();
    let target = dir.join("precious.bin");
    let old = b"old content\n".to_vec();
    std::fs::write(&target, &old).unwrap();
    let new = random_bytes(64 * 1024 * 1024);

    // 1. The connection processes die mid-transfer: the write may retry on a new connection.
    let write = tokio::spawn({
        let (ex, target, new) = (ex.clone(), target.clone(), new.clone());
        async move { ex.write_file_bytes(&target, &new).await }
    });
    wait_for_partial_temp(&dir).await;
    let pids: Vec<String> = tb.connection_pids().iter().map(u32::to_string).collect();
    assert!(!pids.is_empty());
    Process::new("kill").arg("-9").args(&pids).status().unwrap();
    let result = write.await.unwrap();
    println!(
        "write through a killed connection: {:?}",
        result.as_ref().map_err(|e| e.to_string())
    );
    let now = std::fs::read(&target).unwrap();
    match &result {
        Ok(()) => assert!(now == new, "write reported success but content differs"),
        Err(error) => assert!(now == old, "failed write ({error}) changed the target"),
    }

    // 2. The server stops for good: the write fails and the old content stays.
    for leftover in temp_files(&dir) {
        std::fs::remove_file(dir.join(leftover)).unwrap();
    }
    std::fs::write(&target, &old).unwrap();
    let write = tokio::spawn({
        let (ex, target, new) = (ex.clone(), target.clone(), new.clone());
        async move { ex.write_file_bytes(&target, &new).await }
    });
    wait_for_partial_temp(&dir).await;
    tb.stop();
    let error = write.await.unwrap().unwrap_err();
    assert_eq!(std::fs::read(&target).unwrap(), old, "{error}");

    // 3. The server is back: the next write opens a new connection and SFTP channel.
    tb.restart().unwrap();
    ex.write_file_bytes(&target, b"after restart")
        .await
        .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"after restart");
}

/// Waits until a write's temporary file holds some data.
async fn wait_for_partial_temp(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let partial = temp_files(dir)
            .iter()
            .any(|name| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() > 1024 * 1024));
        if partial {
            return;
        }
        assert!(Instant::now() < deadline, "no temporary file appeared");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn file_commands_time_out_with_empty_output_and_leave_no_trace() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let dir = tb.scratch_dir();
    let target = dir.join("slow.bin");
    std::fs::write(&target, "old").unwrap();
    let content = String::from_utf8(vec![b'x'; 64 * 1024 * 1024]).unwrap();
    let timeout = Duration::from_millis(20);

    let cmd = Command::write_file(&target, content).with_timeout(timeout);
    match ex.exec_cmd(&cmd).await {
        Err(CommandError::TimedOut { timeout: t, output }) => {
            assert_eq!(t, timeout);
            assert!(output.is_empty());
        }
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !temp_files(dir).is_empty() {
        assert!(
            Instant::now() < deadline,
            "temporary file stayed: {:?}",
            temp_files(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    std::fs::write(&target, random_bytes(64 * 1024 * 1024)).unwrap();
    match ex
        .exec_cmd(&Command::read_file(&target).with_timeout(timeout))
        .await
    {
        Err(CommandError::TimedOut { output, .. }) => assert!(output.is_empty()),
        other => panic!("expected TimedOut, got {:?}", other.map(|o| o.len())),
    }
    // The default timeout applies too, and the channel still works afterwards.
    let ex = builder(&tb)
        .default_timeout(Some(timeout))
        .build()
        .await
        .unwrap();
    assert!(matches!(
        ex.exec_cmd(&Command::read_file(&target)).await,
        Err(CommandError::TimedOut { .. })
    ));
    let out = ex
        .exec_cmd(&Command::read_file(&target).with_timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(out.len(), 64 * 1024 * 1024);
}

#[tokio::test]
async fn file_commands_resolve_workdir_and_current_dir() {
    let tb = testbed();
    let dir = tb.scratch_dir().to_path_buf();
    let ex = builder(&tb).workdir(&dir).build().await.unwrap();

    ex.exec_cmd(&Command::write_file("top.txt", "top"))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("top.txt")).unwrap(), "top");
    let nested = Command::write_file("file.txt", "nested").with_current_dir("nested");
    ex.exec_cmd(&nested).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("nested/file.txt")).unwrap(),
        "nested"
    );
    let absolute = Command::write_file("abs.txt", "abs").with_current_dir(dir.join("other"));
    ex.exec_cmd(&absolute).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("other/abs.txt")).unwrap(),
        "abs"
    );

    let read = |cmd: Command| {
        let ex = ex.clone();
        async move { ex.exec_cmd(&cmd).await.unwrap().to_string() }
    };
    assert_eq!(read(Command::read_file("top.txt")).await, "top");
    assert_eq!(
        read(Command::read_file("file.txt").with_current_dir("nested")).await,
        "nested"
    );
    assert_eq!(
        read(Command::read_file(dir.join("other/abs.txt"))).await,
        "abs"
    );
    // The typed API resolves the same way.
    assert_eq!(
        ex.read_file_bytes(Path::new("nested/file.txt"))
            .await
            .unwrap(),
        b"nested"
    );
    // A scoped executor, as agents use it.
    use swiftide_core::ExecutorExt;
    ex.scoped("scope")
        .exec_cmd(&Command::write_file("s.txt", "scoped"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("scope/s.txt")).unwrap(),
        "scoped"
    );
}

#[tokio::test]
async fn typed_file_operations_work_and_fail_typed() {
    let tb = testbed();
    let dir = tb.scratch_dir().to_path_buf();
    let ex = builder(&tb).workdir(&dir).build().await.unwrap();

    ex.create_dir_all(Path::new("x/y/z")).await.unwrap();
    ex.create_dir_all(Path::new("x/y/z")).await.unwrap();
    assert!(dir.join("x/y/z").is_dir());
    ex.write_file_bytes(Path::new("x/file.txt"), b"12345")
        .await
        .unwrap();
    symlink("file.txt", dir.join("x/link")).unwrap();

    let meta = ex.metadata(Path::new("x/file.txt")).await.unwrap();
    assert_eq!(
        (meta.size, meta.permissions, meta.file_type),
        (5, 0o644, FileType::File)
    );
    assert!(meta.is_file() && !meta.is_dir() && !meta.is_symlink());
    assert!(meta.modified.is_some());
    assert!(ex.metadata(Path::new("x/link")).await.unwrap().is_file());
    assert!(
        ex.symlink_metadata(Path::new("x/link"))
            .await
            .unwrap()
            .is_symlink()
    );
    assert!(ex.metadata(Path::new("x")).await.unwrap().is_dir());
    assert!(ex.exists(Path::new("x/file.txt")).await.unwrap());
    assert!(!ex.exists(Path::new("x/nope")).await.unwrap());

    let names: Vec<(String, FileType)> = ex
        .list_dir(Path::new("x"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.metadata.file_type))
        .collect();
    assert_eq!(
        names,
        [
            ("file.txt".to_owned(), FileType::File),
            ("link".to_owned(), FileType::Symlink),
            ("y".to_owned(), FileType::Dir)
        ]
    );

    std::fs::write(dir.join("x/other.txt"), "other").unwrap();
    ex.rename(Path::new("x/other.txt"), Path::new("x/file.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("x/file.txt")).unwrap(),
        "other"
    );
    assert!(!dir.join("x/other.txt").exists());
    ex.remove_file(Path::new("x/link")).await.unwrap();
    assert!(std::fs::symlink_metadata(dir.join("x/link")).is_err());

    std::fs::write(dir.join("x/y/z/deep.txt"), "d").unwrap();
    symlink("/etc", dir.join("x/y/etc-link")).unwrap();
    ex.remove_dir_all(Path::new("x")).await.unwrap();
    assert!(!dir.join("x").exists());
    assert!(Path::new("/etc/passwd").exists(), "a symlink was followed");

    let expect = |error: Error, op: &str, status: SftpStatus| match error {
        Error::Sftp {
            operation,
            status: s,
            path,
            ..
        } => {
            assert_eq!((operation, s), (op, Some(status)), "{path}");
        }
        other => panic!("expected Error::Sftp, got {other:?}"),
    };
    expect(
        ex.metadata(Path::new("nope")).await.unwrap_err(),
        "stat",
        SftpStatus::NoSuchFile,
    );
    expect(
        ex.list_dir(Path::new("nope")).await.unwrap_err(),
        "readdir",
        SftpStatus::NoSuchFile,
    );
    expect(
        ex.remove_file(Path::new("nope")).await.unwrap_err(),
        "remove",
        SftpStatus::NoSuchFile,
    );
    expect(
        ex.rename(Path::new("nope"), Path::new("n2"))
            .await
            .unwrap_err(),
        "rename",
        SftpStatus::NoSuchFile,
    );
    std::fs::write(dir.join("plain"), "").unwrap();
    expect(
        ex.remove_dir_all(Path::new("plain")).await.unwrap_err(),
        "remove_dir_all",
        SftpStatus::Failure,
    );
    expect(
        ex.create_dir_all(Path::new("plain/sub")).await.unwrap_err(),
        "mkdir",
        SftpStatus::Failure,
    );
    assert!(matches!(
        ex.metadata(&non_utf8(&dir, b"\xff")).await.unwrap_err(),
        Error::InvalidInput { .. }
    ));
}

#[tokio::test]
async fn many_concurrent_file_operations_share_the_sftp_channel() {
    let tb = testbed();
    let ex = builder(&tb).max_connections(1).build().await.unwrap();
    let dir = tb.scratch_dir().to_path_buf();
    // More than the 128 handle numbers russh-sftp can carry intact, all at once.
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let (ex, path) = (ex.clone(), dir.join(format!("c{i}.txt")));
            tokio::spawn(async move {
                let content = format!("content {i}").repeat(i % 7 * 5000 + 1);
                ex.write_file_bytes(&path, content.as_bytes())
                    .await
                    .unwrap();
                assert_eq!(ex.read_file_bytes(&path).await.unwrap(), content.as_bytes());
                assert!(ex.exists(&path).await.unwrap());
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(ex.pool_stats().dials, 1);
}

// ---------------------------------------------------------------------------------------
// stream_files
// ---------------------------------------------------------------------------------------

type Item = (PathBuf, String, usize);

async fn collect(stream: IndexingStream<String>) -> (Vec<Item>, Vec<String>) {
    let mut items = Vec::new();
    let mut errors = Vec::new();
    let mut stream = stream;
    while let Some(item) = stream.next().await {
        match item {
            Ok(node) => items.push((node.path.clone(), node.chunk.clone(), node.original_size)),
            Err(error) => errors.push(format!("{error:#}")),
        }
    }
    items.sort();
    (items, errors)
}

fn write(path: &Path, content: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn git_init(dir: &Path) {
    let status = Process::new("git")
        .args(["init", "-q"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A tree exercising every selection rule: hidden entries, `.ignore`, nested `.gitignore`
/// with whitelists, `.git/info/exclude`, a parent directory's ignore files, a nested
/// repository, symlinks, odd names and binary content.
fn build_tree(base: &Path) -> PathBuf {
    // Parent directory rules: `.ignore` applies below, `.gitignore` stops at the repo root.
    write(&base.join(".ignore"), b"*.parent-ignored\n");
    write(&base.join(".gitignore"), b"*.parent-gitignored\n");
    let root = base.join("repo");
    std::fs::create_dir_all(&root).unwrap();
    git_init(&root);
    write(&root.join(".git/info/exclude"), b"excluded.txt\n");
    write(
        &root.join(".gitignore"),
        b"*.tmp\ntarget/\nnested-ignored-from-root.txt\n**/gen/\n",
    );
    write(
        &root.join(".ignore"),
        b"!important.tmp\nignored_by_ignore/\n",
    );
    let files: &[(&str, &[u8])] = &[
        ("a.txt", b"alpha\n"),
        ("b.rs", b"fn main() {}\n"),
        ("noext", b"no extension"),
        ("UPPER.TXT", b"upper"),
        ("a.tar.gz", b"\x1f\x8b binary"),
        ("bin.dat", b"\xff\xfe\x00\x41"),
        ("empty.txt", b""),
        ("space name.txt", b"space"),
        ("new\nline.txt", b"newline"),
        ("x.parent-ignored", b"p"),
        (
            "x.parent-gitignored",
            b"kept: repo root stops parent gitignores",
        ),
        ("scratch.tmp", b"ignored"),
        ("important.tmp", b"whitelisted by .ignore"),
        ("excluded.txt", b"excluded"),
        ("target/out.txt", b"build output"),
        ("ignored_by_ignore/z.txt", b"z"),
        (".hidden", b"hidden"),
        (".hiddendir/x.txt", b"hidden dir"),
        ("sub/.gitignore", b"*.log\n!keep.log\n/anchored.txt\n"),
        ("sub/anchored.txt", b"ignored: anchored to sub/"),
        ("sub/deep/anchored.txt", b"kept: the anchor is sub/"),
        ("sub/deep/gen/made.rs", b"ignored by **/gen/"),
        ("[glob]*?.txt", b"metacharacters in a name"),
        ("sub/x.log", b"log"),
        ("sub/keep.log", b"keep"),
        ("sub/deep/y.log", b"deep log"),
        ("sub/deep/z.txt", b"deep"),
        ("nested/.gitignore", b"*.md\n"),
        ("nested/readme.md", b"ignored by nested"),
        (
            "nested/nested-ignored-from-root.txt",
            b"outer rules stop at the nested repo",
        ),
        ("nested/code.rs", b"nested code"),
    ];
    for (name, content) in files {
        write(&root.join(name), content);
    }
    git_init(&root.join("nested"));
    write(&non_utf8(&root, b"bad\xffname.txt"), b"odd name");
    symlink("a.txt", root.join("link-to-file.txt")).unwrap();
    symlink("sub", root.join("link-to-dir")).unwrap();
    symlink("/nonexistent", root.join("dangling.txt")).unwrap();
    root
}

#[tokio::test]
async fn stream_files_matches_local_executor() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let local = LocalExecutor::new(tb.scratch_dir());
    let base = tb.scratch_dir().join("base");
    let root = build_tree(&base);
    // A tree outside any repository: its .gitignore does not apply.
    let plain = tb.scratch_dir().join("plain");
    write(&plain.join(".gitignore"), b"*.txt\n");
    write(&plain.join("kept.txt"), b"kept");
    write(&plain.join(".ignore"), b"*.rs\n");
    write(&plain.join("dropped.rs"), b"dropped");

    let extension_sets: Vec<Option<Vec<String>>> = vec![
        None,
        Some(vec!["txt".into()]),
        Some(vec!["rs".into(), "gz".into()]),
        Some(vec!["TXT".into(), ".txt".into(), "tar.gz".into()]),
        Some(vec![]),
    ];
    let roots = [
        root.clone(),
        root.join("sub"),
        root.join("nested"),
        plain.clone(),
        root.join("a.txt"),
        root.join(".hidden"),
        root.join("link-to-dir"),
        // A missing root is one error item, whatever the extensions.
        root.join("missing"),
    ];
    for path in &roots {
        for extensions in &extension_sets {
            let (ours, our_errors) =
                collect(ex.stream_files(path, extensions.clone()).await.unwrap()).await;
            let (theirs, their_errors) =
                collect(local.stream_files(path, extensions.clone()).await.unwrap()).await;
            assert_eq!(ours, theirs, "root {path:?}, extensions {extensions:?}");
            assert_eq!(
                our_errors, their_errors,
                "root {path:?}, extensions {extensions:?}"
            );
        }
    }
    let (all, _) = collect(ex.stream_files(&root, None).await.unwrap()).await;
    let names: Vec<String> = all
        .iter()
        .map(|(p, _, _)| {
            p.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for expected in [
        "important.tmp",
        "sub/keep.log",
        "nested/nested-ignored-from-root.txt",
        "bad\u{fffd}name.txt",
        "sub/deep/anchored.txt",
        "x.parent-gitignored",
        "[glob]*?.txt",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    for unexpected in [
        "scratch.tmp",
        "excluded.txt",
        "sub/x.log",
        ".hidden",
        "link-to-file.txt",
        "x.parent-ignored",
        "sub/anchored.txt",
        "sub/deep/gen/made.rs",
        "nested/readme.md",
    ] {
        assert!(
            !names.iter().any(|n| n == unexpected),
            "{unexpected} in {names:?}"
        );
    }
    let binary = all.iter().find(|(p, _, _)| p.ends_with("bin.dat")).unwrap();
    assert_eq!((binary.1.as_str(), binary.2), ("\u{fffd}\u{fffd}\0A", 8));

    let (items, errors) =
        collect(ex.stream_files(&root.join("missing"), None).await.unwrap()).await;
    assert!(items.is_empty());
    assert_eq!(errors.len(), 1);
}

#[tokio::test]
async fn stream_files_resolves_relative_roots_against_the_workdir() {
    let tb = testbed();
    let dir = tb.scratch_dir().to_path_buf();
    write(&dir.join("proj/src/lib.rs"), b"lib");
    write(&dir.join("proj/README"), b"readme");
    let ex = builder(&tb).workdir(&dir).build().await.unwrap();
    let (items, errors) = collect(ex.stream_files(Path::new("proj"), None).await.unwrap()).await;
    assert!(errors.is_empty(), "{errors:?}");
    let paths: Vec<&PathBuf> = items.iter().map(|(p, _, _)| p).collect();
    assert_eq!(
        paths,
        [&dir.join("proj/README"), &dir.join("proj/src/lib.rs")]
    );
}

#[tokio::test]
async fn ten_thousand_files_stream_quickly_and_a_dropped_stream_stops() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let root = tb.scratch_dir().join("many");
    for i in 0..10_000 {
        let content = format!("file number {i}\n");
        write(
            &root.join(format!("d{:02}/f{i:05}.txt", i % 50)),
            content.as_bytes(),
        );
    }
    let started = Instant::now();
    let (items, errors) = collect(ex.stream_files(&root, None).await.unwrap()).await;
    let took = started.elapsed();
    println!("stream_files: 10,000 files in {took:.2?} (debug build)");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(items.len(), 10_000);
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let local = LocalExecutor::new(&root);
    let (theirs, _) = collect(local.stream_files(&root, None).await.unwrap()).await;
    assert!(items == theirs);

    // The consumer pulls: a dropped stream ends the producer and its remote `find`.
    let mut stream = ex.stream_files(&root, None).await.unwrap();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
    drop(stream);
    let pattern = format!("find {}", root.display());
    let left = common::wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "{left:?}");
    assert!(
        ex.read_file_bytes(&root.join("d00/f00000.txt"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn unreadable_entries_are_error_items_and_the_stream_goes_on() {
    let tb = unprivileged_testbed();
    let ex = executor(&tb).await;
    let root = tb.scratch_dir().join("tree");
    write(&root.join("a.txt"), b"a");
    write(&root.join("z.txt"), b"z");
    write(&root.join("locked/inside.txt"), b"unreachable");
    set_mode(&root.join("locked"), 0o700);
    write(&root.join("secret.txt"), b"secret");
    set_mode(&root.join("secret.txt"), 0o600);
    // The scratch directory belongs to the login user; these belong to root.
    let (items, errors) = collect(ex.stream_files(&root, None).await.unwrap()).await;
    let names: Vec<_> = items
        .iter()
        .map(|(p, _, _)| p.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a.txt", "z.txt"]);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("locked") && e.contains("Permission denied")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("secret.txt") && e.contains("Permission denied")),
        "{errors:?}"
    );

    // An unreadable root is one error item.
    let (items, errors) = collect(ex.stream_files(&root.join("locked"), None).await.unwrap()).await;
    assert!(items.is_empty());
    assert_eq!(errors.len(), 1, "{errors:?}");
}
