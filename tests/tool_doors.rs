//! The same glob and grep cases through every door, against a real sshd: agent-sdk's
//! `Environment`, bamboo's `ToolExecutor` and the MCP server must give the same paths and
//! the same `(path, line, text)` matches, in the same order, and exactly the expected ones
//! (`tools::search`'s rules: glob-crate patterns, Rust regex, `.git`, binary files and
//! symlinks skipped by grep's walk).
#![cfg(all(feature = "mcp", feature = "bamboo", feature = "agent-sdk"))]

mod common;
#[path = "common/mcp_client.rs"]
mod mcp_client;

use std::{
    os::unix::fs::symlink,
    path::{Path, PathBuf},
};

use agent_sdk::Environment;
use bamboo_agent_core::{FunctionCall, ToolCall, ToolError, ToolExecutor};
use rmcp::ServiceExt;
use serde_json::json;
use swiftide_ssh_executor::adapters::{
    agent_sdk::SshEnvironment,
    bamboo::SshToolExecutor,
    mcp::{ServerOptions, SshMcpServer},
};

use mcp_client::{Client, Recorder, call, is_error, text};

/// One matching line as every door's output is normalized: path below the root, line, text.
type Hit = (String, usize, String);

/// The tree: names with spaces, a nested directory, a `.git` with matching files, a binary
/// file holding the pattern, a symlink to a file and one to a directory.
fn make_tree(root: &Path) {
    let w = |rel: &str, content: &[u8]| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    w("a file.txt", b"hello 42 world\nfoo bar\nnothing here\n");
    w(
        "dir with space/inner.rs",
        b"fn main() {}\nlet x = 7;\n// FOO upper\n",
    );
    w("dir with space/deep/more.txt", b"bar at start\r\n123\r\n");
    w("src/lib.rs", b"pub fn a() {}\n// foo\n");
    w("src/notes.md", b"baz\n");
    w(".git/config", b"[core]\nfoo 99\n");
    w(".git/HEAD", b"ref: foo\n");
    w("bin.dat", b"foo 1\0binary 2\n");
    symlink("a file.txt", root.join("link.txt")).unwrap();
    symlink("src", root.join("link-dir")).unwrap();
}

/// The three doors on one tree.
struct Doors {
    root: PathBuf,
    env: SshEnvironment,
    bamboo: SshToolExecutor,
    mcp: Client,
    /// Confined by real path: the MCP server with a root, agent-sdk in symlink-proof mode.
    mcp_rooted: Client,
    testbed: swiftide_ssh_testbed::Testbed,
    _dir: tempfile::TempDir,
}

async fn connect(server: SshMcpServer) -> Client {
    let (server_side, client_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let running = server.serve(server_side).await.expect("server handshake");
        let _ = running.waiting().await;
    });
    Recorder::default()
        .serve(client_side)
        .await
        .expect("client handshake")
}

async fn doors() -> Doors {
    let testbed = common::testbed();
    let dir = tempfile::tempdir_in(testbed.scratch_dir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    make_tree(&root);
    let executor = common::builder(&testbed)
        .workdir(&root)
        .build()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the testbed: {e}"));
    let env = SshEnvironment::new(executor.clone(), root.to_str().unwrap()).unwrap();
    let bamboo = SshToolExecutor::new(executor.clone(), &root);
    let mcp = connect(SshMcpServer::new(
        executor.clone(),
        ServerOptions::default(),
    ))
    .await;
    let mcp_rooted = connect(SshMcpServer::new(
        executor,
        ServerOptions::default().root(&root),
    ))
    .await;
    Doors {
        root,
        env,
        bamboo,
        mcp,
        mcp_rooted,
        testbed,
        _dir: dir,
    }
}

fn bamboo_call(name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "call-1".to_owned(),
        tool_type: "function".to_owned(),
        function: FunctionCall {
            name: name.to_owned(),
            arguments: arguments.to_string(),
        },
    }
}

impl Doors {
    /// `path` below the root, as the tests name it.
    fn below(&self, path: &str) -> String {
        let root = format!("{}/", self.root.display());
        path.strip_prefix(&root)
            .unwrap_or_else(|| panic!("{path} is not below {root}"))
            .to_owned()
    }

    async fn glob_env(&self, env: &SshEnvironment, pattern: &str) -> Vec<String> {
        let found = env
            .glob(pattern)
            .await
            .unwrap_or_else(|e| panic!("agent-sdk glob({pattern:?}): {e:#}"));
        found.iter().map(|p| self.below(p)).collect()
    }

    async fn glob_bamboo(&self, pattern: &str) -> Vec<String> {
        let out = self
            .bamboo
            .execute(&bamboo_call("Glob", json!({"pattern": pattern})))
            .await
            .unwrap_or_else(|e| panic!("bamboo Glob {pattern:?}: {e:?}"));
        assert!(out.success, "bamboo Glob {pattern:?}: {}", out.result);
        out.result
            .lines()
            .filter(|l| !l.is_empty())
            .map(|p| self.below(p))
            .collect()
    }

    async fn glob_mcp(&self, client: &Client, pattern: &str) -> Vec<String> {
        let out = call(client, "glob", json!({"pattern": pattern})).await;
        assert!(!is_error(&out), "mcp glob {pattern:?}: {}", text(&out));
        let out = text(&out);
        if out.starts_with("no paths under") {
            return Vec::new();
        }
        out.lines().map(str::to_owned).collect()
    }

    /// `grep(pattern)` in `path` (below the root; "" for the root) through each door.
    async fn grep_env(&self, pattern: &str, path: &str) -> Vec<Hit> {
        let found = self
            .env
            .grep(pattern, path, true)
            .await
            .unwrap_or_else(|e| panic!("agent-sdk grep({pattern:?}, {path:?}): {e:#}"));
        found
            .iter()
            .map(|m| (self.below(&m.path), m.line_number, m.line_content.clone()))
            .collect()
    }

    /// `path:line:text` lines (bamboo's content mode with `-n`, the MCP server's grep).
    fn parse_lines(&self, door: &str, out: &str) -> Vec<Hit> {
        out.lines()
            .map(|line| {
                let mut fields = line.splitn(3, ':');
                let (Some(path), Some(number), Some(text)) =
                    (fields.next(), fields.next(), fields.next())
                else {
                    panic!("{door}: not path:line:text: {line:?}");
                };
                let number = number
                    .parse()
                    .unwrap_or_else(|_| panic!("{door}: no line number in {line:?}"));
                (self.below(path), number, text.to_owned())
            })
            .collect()
    }

    async fn grep_bamboo(&self, pattern: &str, path: &str) -> Vec<Hit> {
        let mut arguments = json!({"pattern": pattern, "output_mode": "content", "-n": true});
        if !path.is_empty() {
            arguments["path"] = json!(path);
        }
        let out = self
            .bamboo
            .execute(&bamboo_call("Grep", arguments))
            .await
            .unwrap_or_else(|e| panic!("bamboo Grep {pattern:?} in {path:?}: {e:?}"));
        assert!(out.success, "bamboo Grep {pattern:?}: {}", out.result);
        self.parse_lines("bamboo", &out.result)
    }

    async fn grep_mcp(&self, pattern: &str, path: &str) -> Vec<Hit> {
        let mut arguments = json!({"pattern": pattern});
        if !path.is_empty() {
            arguments["path"] = json!(path);
        }
        let out = call(&self.mcp, "grep", arguments).await;
        assert!(!is_error(&out), "mcp grep {pattern:?}: {}", text(&out));
        let out = text(&out);
        if out.starts_with("no matches for") {
            return Vec::new();
        }
        self.parse_lines("mcp", &out)
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn hits(list: &[(&str, usize, &str)]) -> Vec<Hit> {
    list.iter()
        .map(|(path, line, text)| ((*path).to_owned(), *line, (*text).to_owned()))
        .collect()
}

#[tokio::test]
async fn glob_gives_the_same_paths_on_every_door() {
    let doors = doors().await;
    // Unconfined: symlinks listed, a symlinked directory walked into; `.git` invisible to
    // wildcards; sorted component by component.
    let cases: [(&str, &[&str]); 8] = [
        (
            "**/*.txt",
            &["a file.txt", "dir with space/deep/more.txt", "link.txt"],
        ),
        (
            "**/*.rs",
            &["dir with space/inner.rs", "link-dir/lib.rs", "src/lib.rs"],
        ),
        (
            "*",
            &[
                "a file.txt",
                "bin.dat",
                "dir with space",
                "link-dir",
                "link.txt",
                "src",
            ],
        ),
        (".git/*", &[".git/HEAD", ".git/config"]),
        (
            "dir with space/**/*",
            &[
                "dir with space/deep",
                "dir with space/deep/more.txt",
                "dir with space/inner.rs",
            ],
        ),
        ("**/[a-c]*", &["a file.txt", "bin.dat"]),
        ("src/?ib.rs", &["src/lib.rs"]),
        // (Not a trailing `/`: agent-sdk's `resolve_path` drops it, as `LocalFileSystem`'s.)
        ("*/*.md", &["link-dir/notes.md", "src/notes.md"]),
    ];
    for (pattern, expected) in cases {
        let env = doors.glob_env(&doors.env, pattern).await;
        let bamboo = doors.glob_bamboo(pattern).await;
        let mcp = doors.glob_mcp(&doors.mcp, pattern).await;
        assert_eq!(env, bamboo, "glob {pattern:?}: agent-sdk vs bamboo");
        assert_eq!(env, mcp, "glob {pattern:?}: agent-sdk vs MCP");
        assert_eq!(env, strings(expected), "glob {pattern:?}");
    }

    // Confined by real path (the MCP server's root, agent-sdk's symlink-proof mode): links
    // are listed but not walked into.
    let strict = doors.env.clone().symlink_proof(true);
    for (pattern, expected) in [
        (
            "**/*.rs",
            &["dir with space/inner.rs", "src/lib.rs"] as &[&str],
        ),
        ("*.txt", &["a file.txt", "link.txt"]),
    ] {
        let env = doors.glob_env(&strict, pattern).await;
        let mcp = doors.glob_mcp(&doors.mcp_rooted, pattern).await;
        assert_eq!(env, mcp, "confined glob {pattern:?}: agent-sdk vs MCP");
        assert_eq!(env, strings(expected), "confined glob {pattern:?}");
    }

    // A bad pattern is refused by every door, each in its own way.
    assert!(doors.env.glob("a**").await.is_err());
    assert!(matches!(
        doors
            .bamboo
            .execute(&bamboo_call("Glob", json!({"pattern": "a**"})))
            .await,
        Err(ToolError::InvalidArguments(_))
    ));
    assert!(is_error(
        &call(&doors.mcp, "glob", json!({"pattern": "a**"})).await
    ));
}

#[tokio::test]
async fn grep_gives_the_same_matches_on_every_door() {
    let doors = doors().await;
    // Rust regex (`\d`, `(?i)` mean nothing or fail in POSIX ERE); `.git`, the binary file
    // and the symlinks are skipped; sorted by path, then line.
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, usize, &'a str)]);
    let cases: [Case<'_>; 6] = [
        (
            r"\d+",
            "",
            &[
                ("a file.txt", 1, "hello 42 world"),
                ("dir with space/deep/more.txt", 2, "123"),
                ("dir with space/inner.rs", 2, "let x = 7;"),
            ],
        ),
        (
            "foo|bar",
            "",
            &[
                ("a file.txt", 2, "foo bar"),
                ("dir with space/deep/more.txt", 1, "bar at start"),
                ("src/lib.rs", 2, "// foo"),
            ],
        ),
        (
            "(?i)foo",
            "",
            &[
                ("a file.txt", 2, "foo bar"),
                ("dir with space/inner.rs", 3, "// FOO upper"),
                ("src/lib.rs", 2, "// foo"),
            ],
        ),
        (
            "^bar",
            "dir with space",
            &[("dir with space/deep/more.txt", 1, "bar at start")],
        ),
        // A path named explicitly is searched, `.git` or not.
        (
            "foo",
            ".git",
            &[(".git/HEAD", 1, "ref: foo"), (".git/config", 2, "foo 99")],
        ),
        (
            r"o\b",
            "a file.txt",
            &[
                ("a file.txt", 1, "hello 42 world"),
                ("a file.txt", 2, "foo bar"),
            ],
        ),
    ];
    for (pattern, path, expected) in cases {
        let env = doors.grep_env(pattern, path).await;
        let bamboo = doors.grep_bamboo(pattern, path).await;
        let mcp = doors.grep_mcp(pattern, path).await;
        assert_eq!(
            env, bamboo,
            "grep {pattern:?} in {path:?}: agent-sdk vs bamboo"
        );
        assert_eq!(env, mcp, "grep {pattern:?} in {path:?}: agent-sdk vs MCP");
        assert_eq!(env, hits(expected), "grep {pattern:?} in {path:?}");
    }

    // A bad regex is refused by every door.
    assert!(doors.env.grep("(", "", true).await.is_err());
    assert!(matches!(
        doors
            .bamboo
            .execute(&bamboo_call("Grep", json!({"pattern": "("})))
            .await,
        Err(ToolError::InvalidArguments(_))
    ));
    assert!(is_error(
        &call(&doors.mcp, "grep", json!({"pattern": "("})).await
    ));
}

#[tokio::test]
async fn relative_paths_are_below_the_login_directory() {
    // Without a working directory, a relative `path` is the login directory's (as SFTP and
    // a command see it): the same glob and grep, reached as `../../<root>`.
    let doors = doors().await;
    let executor = common::builder(&doors.testbed)
        .build()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the testbed: {e}"));
    let mcp = connect(SshMcpServer::new(executor, ServerOptions::default())).await;
    let pwd = text(&call(&mcp, "run_command", json!({"command": "pwd"})).await);
    let home = pwd.lines().next().unwrap().to_owned();
    let ups = Path::new(&home).components().count() - 1;
    let relative = format!(
        "{}{}",
        "../".repeat(ups),
        doors.root.display().to_string().trim_start_matches('/')
    );
    let found = text(
        &call(
            &mcp,
            "glob",
            json!({"pattern": "**/*.rs", "path": relative}),
        )
        .await,
    );
    assert_eq!(
        found.lines().collect::<Vec<_>>(),
        ["dir with space/inner.rs", "link-dir/lib.rs", "src/lib.rs"],
        "glob below {relative} from {home}"
    );
    let out = text(&call(&mcp, "grep", json!({"pattern": r"\d+", "path": relative})).await);
    let prefix = format!("{relative}/");
    let lines: Vec<_> = out
        .lines()
        .map(|line| {
            line.strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{line:?} is not below {prefix}"))
        })
        .collect();
    assert_eq!(
        lines,
        [
            "a file.txt:1:hello 42 world",
            "dir with space/deep/more.txt:2:123",
            "dir with space/inner.rs:2:let x = 7;"
        ],
        "grep below {relative} from {home}"
    );
}
