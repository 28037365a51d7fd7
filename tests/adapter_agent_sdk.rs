//! The agent-sdk `Environment` adapter against a real sshd: a differential test against
//! agent-sdk's own `LocalFileSystem` on the same tree (the testbed's sshd runs on this
//! machine, so both see the same files), the SDK's primitive tools over SSH, and escape
//! attempts.
#![cfg(feature = "agent-sdk")]

mod common;

use std::{fmt::Debug, os::unix::fs::symlink, path::Path, sync::Arc};

use agent_sdk::{
    AgentCapabilities, Environment, ExecSinkSpec, FileEntry, GrepMatch, LocalFileSystem, Tool,
    ToolContext,
    primitive_tools::{BashTool, GlobTool, GrepTool, ReadTool, WriteTool},
};
use serde_json::json;
use swiftide_ssh_executor::adapters::agent_sdk::SshEnvironment;

/// A tree with the cases grep and glob treat specially.
fn make_tree(base: &Path) -> std::path::PathBuf {
    let root = base.join("work");
    let w = |rel: &str, content: &[u8]| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    w("a.txt", b"hello world\nfoo bar foo\n");
    w("b.md", b"# Title\nfoo\n");
    w("src/lib.rs", b"fn main() {}\n// foo here\n");
    w("src/nested/deep.rs", b"let foo = 1;\nlet bar = 2;\n");
    w("src/nested/crlf.txt", b"foo\r\nbar\r\n");
    w(".hidden/secret.txt", b"foo hidden\n");
    w("bin.dat", b"foo\0binary");
    w("latin1.txt", b"caf\xe9 foo\n");
    w("[x].txt", b"bracket foo\n");
    // Over grep's 16 MiB limit: skipped in a directory walk.
    let mut big = vec![b'a'; 16 * 1024 * 1024];
    big.extend_from_slice(b"\nfoo\n");
    w("big.log", &big);
    std::fs::create_dir_all(root.join("empty")).unwrap();
    symlink("a.txt", root.join("link-to-a")).unwrap();
    symlink("src", root.join("link-to-src")).unwrap();
    symlink("missing", root.join("dangling")).unwrap();
    // Outside the root, and a sibling whose name extends the root's.
    std::fs::create_dir_all(base.join("outside")).unwrap();
    std::fs::write(base.join("outside/secret.txt"), b"outside foo\n").unwrap();
    std::fs::create_dir_all(base.join("work-evil")).unwrap();
    std::fs::write(base.join("work-evil/secret.txt"), b"evil foo\n").unwrap();
    symlink("../outside", root.join("escape")).unwrap();
    symlink("../outside/new.txt", root.join("escape-file")).unwrap();
    root
}

fn same<T: PartialEq + Debug>(what: &str, local: T, remote: T) {
    assert_eq!(local, remote, "{what}: LocalFileSystem vs SshEnvironment");
}

fn key(m: &GrepMatch) -> (String, usize, String, usize, usize) {
    (
        m.path.clone(),
        m.line_number,
        m.line_content.clone(),
        m.match_start,
        m.match_end,
    )
}

async fn setup() -> (
    swiftide_ssh_testbed::Testbed,
    tempfile::TempDir,
    String,
    LocalFileSystem,
    SshEnvironment,
) {
    let testbed = common::testbed();
    let executor = common::executor(&testbed).await;
    let dir = tempfile::tempdir().unwrap();
    let root = make_tree(dir.path());
    let root = root.to_str().unwrap().to_owned();
    let local = LocalFileSystem::new(&root);
    let remote = SshEnvironment::new(executor, &root).unwrap();
    (testbed, dir, root, local, remote)
}

#[tokio::test]
async fn file_calls_match_local_file_system() {
    let (_testbed, _dir, root, local, remote) = setup().await;
    same("root", local.root(), remote.root());
    let paths = [
        "a.txt",
        "src",
        "src/nested/deep.rs",
        "missing",
        "link-to-a",
        "link-to-src",
        "dangling",
        "empty",
        "bin.dat",
        "latin1.txt",
        ".hidden",
        "",
        ".",
    ];
    for path in paths {
        same(
            &format!("exists({path})"),
            local.exists(path).await.unwrap(),
            remote.exists(path).await.unwrap(),
        );
        same(
            &format!("is_dir({path})"),
            local.is_dir(path).await.unwrap(),
            remote.is_dir(path).await.unwrap(),
        );
        same(
            &format!("is_file({path})"),
            local.is_file(path).await.unwrap(),
            remote.is_file(path).await.unwrap(),
        );
        let (l, r) = (local.read_file(path).await, remote.read_file(path).await);
        same(&format!("read_file({path}) ok"), l.is_ok(), r.is_ok());
        if let (Ok(l), Ok(r)) = (l, r) {
            same(&format!("read_file({path})"), l, r);
        }
        let (l, r) = (
            local.read_file_bytes(path).await,
            remote.read_file_bytes(path).await,
        );
        same(&format!("read_file_bytes({path}) ok"), l.is_ok(), r.is_ok());
        if let (Ok(l), Ok(r)) = (l, r) {
            same(&format!("read_file_bytes({path})"), l, r);
        }
        let (l, r) = (local.list_dir(path).await, remote.list_dir(path).await);
        same(&format!("list_dir({path}) ok"), l.is_ok(), r.is_ok());
        if let (Ok(l), Ok(r)) = (l, r) {
            // read_dir order is unspecified locally.
            let norm = |mut v: Vec<FileEntry>| {
                v.sort_by(|a, b| a.name.cmp(&b.name));
                v.into_iter()
                    .map(|e| (e.name, e.path, e.is_dir, e.size))
                    .collect::<Vec<_>>()
            };
            same(&format!("list_dir({path})"), norm(l), norm(r));
        }
    }
    // Absolute paths inside the root are the same files.
    same(
        "read_file(absolute)",
        local.read_file(&format!("{root}/a.txt")).await.unwrap(),
        remote.read_file(&format!("{root}/a.txt")).await.unwrap(),
    );
}

#[tokio::test]
async fn grep_and_glob_match_local_file_system() {
    let (_testbed, _dir, root, local, remote) = setup().await;
    let greps = [
        ("foo", "", true),
        ("foo", "", false),
        ("foo", "src", true),
        ("foo", "src", false),
        ("fo+ ", ".", true),
        (r"^\w+$", "src/nested", true),
        ("bar$", "src/nested/crlf.txt", true),
        ("foo", "a.txt", false),
        ("foo", "big.log", true),
        ("foo", "bin.dat", true),
        ("foo", "missing", true),
        ("caf", "latin1.txt", true),
        ("x", "link-to-src", true),
        ("(?i)HELLO", ".", true),
    ];
    for (pattern, path, recursive) in greps {
        let mut l: Vec<_> = local
            .grep(pattern, path, recursive)
            .await
            .unwrap()
            .iter()
            .map(key)
            .collect();
        let mut r: Vec<_> = remote
            .grep(pattern, path, recursive)
            .await
            .unwrap()
            .iter()
            .map(key)
            .collect();
        // The local walk's order is read_dir order: unspecified.
        l.sort();
        r.sort();
        same(&format!("grep({pattern:?}, {path:?}, {recursive})"), l, r);
    }
    same(
        "grep(invalid regex) fails",
        local.grep("(", "", true).await.is_err(),
        remote.grep("(", "", true).await.is_err(),
    );

    let globs = [
        "*",
        "*.txt",
        "**/*.rs",
        "**",
        "src/**",
        "src/*/*.rs",
        "**/nested",
        "*/",
        ".*",
        "src/nested/?eep.rs",
        "[[]x].txt",
        "link-to-src/**/*.rs",
        "missing/*",
        "a.txt",
        "src",
        "a.txt/*",
        "**/*.md",
        &format!("{root}/src/*.rs"),
    ];
    for pattern in globs {
        // glob's order is specified (sorted per directory): compared as is.
        same(
            &format!("glob({pattern:?})"),
            local.glob(pattern).await.unwrap(),
            remote.glob(pattern).await.unwrap(),
        );
    }
    same(
        "glob(invalid) fails",
        local.glob("a**").await.is_err(),
        remote.glob("a**").await.is_err(),
    );
}

#[tokio::test]
async fn writes_and_deletes_match_local_file_system() {
    let (_testbed, _dir, root, local, remote) = setup().await;
    let root = Path::new(&root);
    // Each side writes, the other side reads.
    remote
        .write_file("new/dir/r.txt", "from ssh")
        .await
        .unwrap();
    same(
        "write over ssh, read locally",
        local.read_file("new/dir/r.txt").await.unwrap(),
        "from ssh".to_owned(),
    );
    local
        .write_file_bytes("new/l.bin", b"\0\xff")
        .await
        .unwrap();
    same(
        "write locally, read over ssh",
        remote.read_file_bytes("new/l.bin").await.unwrap(),
        b"\0\xff".to_vec(),
    );
    same(
        "read_file of invalid UTF-8 fails",
        local.read_file("new/l.bin").await.is_err(),
        remote.read_file("new/l.bin").await.is_err(),
    );
    remote.create_dir("made/a/b").await.unwrap();
    assert!(root.join("made/a/b").is_dir());
    same(
        "delete_dir(non-empty, not recursive) fails",
        local.delete_dir("made", false).await.is_err(),
        remote.delete_dir("made", false).await.is_err(),
    );
    remote.delete_dir("made/a/b", false).await.unwrap();
    assert!(!root.join("made/a/b").exists());
    remote.delete_dir("made", true).await.unwrap();
    assert!(!root.join("made").exists());
    same(
        "delete_file(dir) fails",
        local.delete_file("src").await.is_err(),
        remote.delete_file("src").await.is_err(),
    );
    same(
        "delete_file(missing) fails",
        local.delete_file("nope").await.is_err(),
        remote.delete_file("nope").await.is_err(),
    );
    remote.delete_file("new/l.bin").await.unwrap();
    assert!(!root.join("new/l.bin").exists());
    // A symlink is removed, not its target.
    remote.delete_file("link-to-a").await.unwrap();
    assert!(root.join("a.txt").exists());
    same(
        "write_file into a file's place fails",
        local.write_file("a.txt/x", "x").await.is_err(),
        remote.write_file("a.txt/x", "x").await.is_err(),
    );
}

#[tokio::test]
async fn exec_matches_local_file_system() {
    let (_testbed, _dir, _root, local, remote) = setup().await;
    let commands = [
        "pwd",
        "echo out; echo err >&2; exit 3",
        "ls src",
        "printf 'no newline'",
        "kill -9 $$",
        "#!/bin/false\necho still sh",
    ];
    for command in commands {
        let l = local.exec(command, Some(10_000)).await.unwrap();
        let r = remote.exec(command, Some(10_000)).await.unwrap();
        same(
            &format!("exec({command:?})"),
            (l.stdout, l.stderr, l.exit_code),
            (r.stdout, r.stderr, r.exit_code),
        );
    }
    // Timeouts are errors with the same text.
    let l = local.exec("sleep 5", Some(300)).await.unwrap_err();
    let r = remote.exec("sleep 5", Some(300)).await.unwrap_err();
    same("exec timeout", l.to_string(), r.to_string());
    // Non-UTF-8 output is withheld.
    same(
        "exec binary output fails",
        local.exec("printf '\\377'", None).await.is_err(),
        remote.exec("printf '\\377'", None).await.is_err(),
    );
    // Over the legacy 1 MiB capture: an error, not truncated output.
    let l = local
        .exec("head -c 2000000 /dev/zero", None)
        .await
        .unwrap_err();
    let r = remote
        .exec("head -c 2000000 /dev/zero", None)
        .await
        .unwrap_err();
    same("exec over the cap", l.to_string(), r.to_string());
}

fn spec(head: usize, tail: usize, max: u64) -> ExecSinkSpec {
    ExecSinkSpec {
        stdout: tempfile::tempfile().unwrap(),
        stderr: tempfile::tempfile().unwrap(),
        head_bytes: head,
        tail_bytes: tail,
        max_bytes_per_stream: max,
    }
}

#[tokio::test]
async fn exec_streamed_fills_spools_and_windows_like_local() {
    use std::io::{Read, Seek};
    let (_testbed, _dir, _root, local, remote) = setup().await;
    let command = "seq 1 20000; seq 1 5 >&2; exit 4";
    let l = local
        .exec_streamed(command, None, spec(100, 50, 1 << 20))
        .await
        .unwrap();
    let r = remote
        .exec_streamed(command, None, spec(100, 50, 1 << 20))
        .await
        .unwrap();
    same("exit code", l.exit_code, r.exit_code);
    for (name, mut l, mut r) in [
        ("stdout", l.stdout, r.stdout),
        ("stderr", l.stderr, r.stderr),
    ] {
        same(&format!("{name} head"), &l.head, &r.head);
        same(&format!("{name} tail"), &l.tail, &r.tail);
        same(&format!("{name} total"), l.total_bytes, r.total_bytes);
        let read = |file: &mut std::fs::File| {
            file.rewind().unwrap();
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).unwrap();
            bytes
        };
        same(
            &format!("{name} spool"),
            read(&mut l.spool),
            read(&mut r.spool),
        );
    }
    // Over the per-stream cap: an explicit error with the same text...
    let command = "head -c 200000 /dev/zero";
    let l = local
        .exec_streamed(command, None, spec(10, 10, 100_000))
        .await
        .unwrap_err();
    let r = remote
        .exec_streamed(command, None, spec(10, 10, 100_000))
        .await
        .unwrap_err();
    same("over the cap", l.to_string(), r.to_string());
    // ...and the whole remote group is killed (LocalFileSystem kills only `sh`, so a
    // background writer would keep its pipe open: not compared).
    let token = common::token();
    let command = format!("yes {token} & sleep 30; echo done");
    let r = remote
        .exec_streamed(&command, None, spec(10, 10, 100_000))
        .await
        .unwrap_err();
    assert!(r.to_string().contains("exceeded the 100000-byte"), "{r}");
    let left = common::wait_until_gone(&token, std::time::Duration::from_secs(5)).await;
    assert!(left.is_empty(), "left running: {left:?}");
    // Windows over the hard limit are refused.
    assert!(
        remote
            .exec_streamed("true", None, spec(2 << 20, 0, 10))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn escapes_are_clamped_or_refused() {
    let (_testbed, dir, root, local, remote) = setup().await;
    let base = dir.path().to_str().unwrap().to_owned();
    // Lexical clamp (the SDK's default resolve_path), in every method.
    for (input, expected) in [
        (
            "../outside/secret.txt",
            format!("{root}/outside/secret.txt"),
        ),
        ("/etc/passwd", format!("{root}/etc/passwd")),
        (
            &format!("{base}/work-evil/secret.txt") as &str,
            format!("{root}{base}/work-evil/secret.txt"),
        ),
        ("src/../../..", root.clone()),
    ] {
        same(
            &format!("resolve_path({input})"),
            local.resolve_path(input),
            remote.resolve_path(input),
        );
        assert_eq!(remote.resolve_path(input), expected);
        assert!(remote.read_file(input).await.is_err() || input == "src/../../..");
    }
    assert!(!remote.exists("/etc/passwd").await.unwrap());
    assert!(
        !remote
            .exists(&format!("{base}/work-evil/secret.txt"))
            .await
            .unwrap()
    );
    assert!(remote.grep("root", "/etc", true).await.unwrap().is_empty());
    assert!(remote.glob("/etc/*").await.unwrap().is_empty());

    // The lexical clamp does not see symlinks: the default mode reads through them.
    assert_eq!(
        remote.read_file("escape/secret.txt").await.unwrap(),
        "outside foo\n"
    );
    // Symlink-proof mode refuses them, with an error naming the root.
    let strict = remote.clone().symlink_proof(true);
    for attempt in ["escape/secret.txt", "escape", "escape/new.txt"] {
        let error = strict.read_file(attempt).await.unwrap_err().to_string();
        assert!(error.contains("escapes the environment root"), "{error}");
    }
    let error = strict
        .write_file("escape/planted.txt", "x")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("escapes the environment root"), "{error}");
    assert!(!dir.path().join("outside/planted.txt").exists());
    // A dangling link pointing out: writing through it would create the file outside.
    let error = strict
        .write_file("escape-file", "x")
        .await
        .unwrap_err()
        .to_string();
    // OpenSSH's realpath resolves a dangling last component: refused as an escape.
    assert!(
        error.contains("dangling") || error.contains("escapes the environment root"),
        "{error}"
    );
    assert!(!dir.path().join("outside/new.txt").exists());
    assert!(strict.delete_dir("escape", true).await.is_err());
    assert!(dir.path().join("outside/secret.txt").exists());
    assert!(strict.grep("foo", "escape", true).await.is_err());
    // Globs skip what resolves outside; inside links keep working.
    let found = strict.glob("*/secret.txt").await.unwrap();
    assert_eq!(found, vec![format!("{root}/.hidden/secret.txt")]);
    assert_eq!(
        strict.read_file("link-to-src/lib.rs").await.unwrap(),
        "fn main() {}\n// foo here\n"
    );
    strict.write_file("inside/new.txt", "ok").await.unwrap();
    assert!(strict.exists("inside/new.txt").await.unwrap());
    // The sibling directory whose name extends the root's is not inside it.
    let sibling = tempfile::tempdir().unwrap();
    let evil_root = format!("{base}/work");
    symlink(format!("{evil_root}-evil"), format!("{root}/to-evil")).unwrap();
    assert!(strict.read_file("to-evil/secret.txt").await.is_err());
    drop(sibling);
}

#[tokio::test]
async fn sdk_primitive_tools_run_over_ssh() {
    let (_testbed, _dir, root, local, remote) = setup().await;
    let local = Arc::new(local);
    let remote = Arc::new(remote);
    let ctx = ToolContext::new(());
    let caps = AgentCapabilities::full_access;

    let l = ReadTool::new(local.clone(), caps())
        .execute(&ctx, json!({"path": "a.txt"}))
        .await
        .unwrap();
    let r = ReadTool::new(remote.clone(), caps())
        .execute(&ctx, json!({"path": "a.txt"}))
        .await
        .unwrap();
    same("ReadTool", (l.success, l.output), (r.success, r.output));

    let r = WriteTool::new(remote.clone(), caps())
        .execute(&ctx, json!({"path": "tool/w.txt", "content": "written\n"}))
        .await
        .unwrap();
    assert!(r.success, "{}", r.output);
    assert_eq!(
        std::fs::read_to_string(format!("{root}/tool/w.txt")).unwrap(),
        "written\n"
    );

    let l = GrepTool::new(local.clone(), caps())
        .execute(&ctx, json!({"pattern": "foo", "path": "src"}))
        .await
        .unwrap();
    let r = GrepTool::new(remote.clone(), caps())
        .execute(&ctx, json!({"pattern": "foo", "path": "src"}))
        .await
        .unwrap();
    let sorted = |s: &str| {
        let mut lines: Vec<_> = s.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    same("GrepTool", sorted(&l.output), sorted(&r.output));
    assert!(r.output.contains("deep.rs"), "{}", r.output);

    let l = GlobTool::new(local.clone(), caps())
        .execute(&ctx, json!({"pattern": "**/*.rs"}))
        .await
        .unwrap();
    let r = GlobTool::new(remote.clone(), caps())
        .execute(&ctx, json!({"pattern": "**/*.rs"}))
        .await
        .unwrap();
    same("GlobTool", l.output, r.output);

    let l = BashTool::new(local.clone(), caps())
        .execute(&ctx, json!({"command": "echo hi; ls src | sort; exit 2"}))
        .await
        .unwrap();
    let r = BashTool::new(remote.clone(), caps())
        .execute(&ctx, json!({"command": "echo hi; ls src | sort; exit 2"}))
        .await
        .unwrap();
    same("BashTool", (l.success, l.output), (r.success, r.output));
}
