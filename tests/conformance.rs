//! swiftide's 25 upstream LocalExecutor tests, translated to a remote host, and a
//! differential table that runs every command through both `LocalExecutor` and `SshExecutor`
//! on this machine (the testbed's sshd runs here, so both see the same filesystem).

mod common;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{
    builder,
    differential::{self, cases, outcome, seed, stderr, stdout},
    executor, testbed, token, wait_until_gone,
};
use swiftide_agents::tools::local_executor::LocalExecutor;
use swiftide_core::{Command, CommandError, CommandOutputChunk, ExecutorExt, ToolExecutor};
use swiftide_ssh_executor::SshExecutor;
use swiftide_ssh_testbed::Testbed;

async fn in_dir(tb: &Testbed, dir: &Path) -> SshExecutor {
    builder(tb).workdir(dir).build().await.unwrap()
}

// ---- the 25 upstream cases (numbers as in the contract's checklist) ----

#[tokio::test]
async fn le01_streams_shell_output_before_the_command_finishes() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let started = Instant::now();
    let seen: Arc<Mutex<Vec<(Duration, CommandOutputChunk)>>> = Arc::default();
    let record = seen.clone();
    let mut sink = move |c: &CommandOutputChunk| {
        record.lock().unwrap().push((started.elapsed(), c.clone()));
    };
    let out = ex
        .exec_cmd_streaming(
            &Command::shell("printf first; sleep 0.2; printf second >&2"),
            &mut sink,
        )
        .await
        .unwrap();
    let done = started.elapsed();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].1, CommandOutputChunk::Stdout("first".into()));
    assert!(seen[0].0 + Duration::from_millis(150) < done);
    assert_eq!(out.as_bytes().as_ref(), b"firstsecond");
    let streamed: Vec<_> = seen.iter().map(|(_, c)| c.clone()).collect();
    assert_eq!(streamed, out.chunks());
}

#[tokio::test]
async fn le02_streams_buffered_error_output() {
    let tb = testbed();
    let ex = in_dir(&tb, tb.scratch_dir()).await;
    for cmd in [
        Command::read_file("missing.txt"),
        Command::write_file(tb.scratch_dir(), "x"),
        Command::shell("#!/missing/interpreter\necho hi"),
    ] {
        let mut streamed = Vec::new();
        let result = ex
            .exec_cmd_streaming(&cmd, &mut |c: &CommandOutputChunk| streamed.push(c.clone()))
            .await;
        match result {
            Err(CommandError::NonZeroExit(out)) => {
                assert!(!out.is_empty(), "{cmd:?}");
                assert_eq!(streamed, out.chunks(), "{cmd:?}");
            }
            other => panic!("{cmd:?}: expected NonZeroExit, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn le03_write_and_read_file_through_the_shell_and_read_file() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let path = tb.scratch_dir().join("hello.txt");
    ex.exec_cmd(&Command::shell(format!(
        "echo 'Hello, world!' > {}",
        path.display()
    )))
    .await
    .unwrap();
    let cat = ex
        .exec_cmd(&Command::shell(format!("cat {}", path.display())))
        .await
        .unwrap();
    assert_eq!(cat.to_string(), "Hello, world!\n");
    let read = ex.exec_cmd(&Command::read_file(&path)).await.unwrap();
    assert_eq!(read.to_string(), "Hello, world!\n");
}

#[tokio::test]
async fn le04_echo_hello_world() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let out = ex
        .exec_cmd(&Command::shell("echo 'hello world'"))
        .await
        .unwrap();
    assert_eq!(out.to_string().trim(), "hello world");
}

#[tokio::test]
async fn le05_preserves_stderr_only_failure() {
    let tb = testbed();
    let ex = executor(&tb).await;
    match ex
        .exec_cmd(&Command::shell("printf 'boom' >&2; exit 1"))
        .await
    {
        Err(CommandError::NonZeroExit(out)) => {
            assert!(stdout(&out).is_empty());
            assert_eq!(stderr(&out), b"boom");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn le06_retains_observed_chunk_order() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let out = ex
        .exec_cmd(&Command::shell(
            "printf one; sleep .05; printf two >&2; sleep .05; printf three",
        ))
        .await
        .unwrap();
    assert_eq!(out.to_string(), "onetwothree");
    assert_eq!(stdout(&out), b"onethree");
    assert_eq!(stderr(&out), b"two");
    let kinds: Vec<_> = out
        .chunks()
        .iter()
        .map(|c| matches!(c, CommandOutputChunk::Stdout(_)))
        .collect();
    assert_eq!(kinds, [true, false, true]);
}

#[tokio::test]
async fn le07_does_not_invent_or_remove_newlines() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let out = ex
        .exec_cmd(&Command::shell(
            "printf 'one\\n\\n'; printf 'two\\r\\n' >&2",
        ))
        .await
        .unwrap();
    assert_eq!(stdout(&out), b"one\n\n");
    assert_eq!(stderr(&out), b"two\r\n");
}

#[tokio::test]
async fn le08_preserves_partial_output_on_timeout() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let cmd = Command::shell("printf one; printf two >&2; sleep 1")
        .with_timeout(Duration::from_millis(100));
    match ex.exec_cmd(&cmd).await {
        Err(CommandError::TimedOut { timeout, output }) => {
            assert_eq!(timeout, Duration::from_millis(100));
            assert_eq!(stdout(&output), b"one");
            assert_eq!(stderr(&output), b"two");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn le09_timing_out_execution_kills_spawned_processes() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let t = token();
    let pidfile = tb.scratch_dir().join("pid");
    let cmd = Command::shell(format!(
        "sleep 30.{t} & echo $! > {}; wait",
        pidfile.display()
    ))
    .with_timeout(Duration::from_millis(500));
    assert!(matches!(
        ex.exec_cmd(&cmd).await,
        Err(CommandError::TimedOut { .. })
    ));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert!(!pid.trim().is_empty());
    assert!(
        wait_until_gone(&format!("sleep 30.{t}"), Duration::from_secs(2))
            .await
            .is_empty()
    );
    // Dead, or a zombie waiting for a reaper (this sandbox's PID 1 may not reap orphans).
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next());
    assert!(
        matches!(state, None | Some("Z")),
        "process {} still running: {stat}",
        pid.trim()
    );
}

#[tokio::test]
async fn le10_passes_shebang_argument() {
    let tb = testbed();
    let ex = executor(&tb).await;
    match ex
        .exec_cmd(&Command::shell(
            "#!/bin/sh -e\nprintf before\nfalse\nprintf after",
        ))
        .await
    {
        Err(CommandError::NonZeroExit(out)) => assert_eq!(out.to_string(), "before"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn le11_does_not_wait_for_redirected_background_processes() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let t = token();
    let cmd = Command::shell(format!("sleep 5.{t} >/dev/null 2>&1 &"))
        .with_timeout(Duration::from_millis(500));
    let out = ex.exec_cmd(&cmd).await.unwrap();
    assert!(out.is_empty());
    // Like LocalExecutor, a detached, redirected job survives a successful command.
    assert!(!common::remote_processes(&format!("^sleep 5.{t}")).is_empty());
}

#[tokio::test]
async fn le12_shell_timeout() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let cmd = Command::shell("echo ready && sleep 1 && echo done")
        .with_timeout(Duration::from_millis(100));
    match ex.exec_cmd(&cmd).await {
        Err(CommandError::TimedOut { timeout, output }) => {
            assert_eq!(timeout, Duration::from_millis(100));
            assert!(output.to_string().contains("ready"));
            assert!(!output.to_string().contains("done"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn le13_default_timeout_applies() {
    let tb = testbed();
    let ex = builder(&tb)
        .default_timeout(Some(Duration::from_millis(100)))
        .build()
        .await
        .unwrap();
    match ex.exec_cmd(&Command::shell("sleep 1")).await {
        Err(CommandError::TimedOut { timeout, output }) => {
            assert_eq!(timeout, Duration::from_millis(100));
            assert!(output.is_empty());
        }
        other => panic!("{other:?}"),
    }
    // The command's own timeout wins in either direction.
    let out = ex
        .exec_cmd(&Command::shell("sleep 0.3; echo ok").with_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(out.to_string(), "ok\n");
}

// Tests 14-16 use SWIFTIDE_SSH_TESTBED, which the testbed's sshd sets in every session (the
// remote counterpart of the local test process's CARGO_PKG_VERSION).
#[tokio::test]
async fn le14_clear_env() {
    let tb = testbed();
    let ex = builder(&tb).env_clear(true).build().await.unwrap();
    let out = ex.exec_cmd(&Command::shell("printenv")).await.unwrap();
    assert!(!out.to_string().contains("SWIFTIDE_SSH_TESTBED="), "{out}");
}

#[tokio::test]
async fn le15_add_env() {
    let tb = testbed();
    let ex = builder(&tb)
        .envs([("TEST_ENV", "HELLO")])
        .build()
        .await
        .unwrap();
    let out = ex
        .exec_cmd(&Command::shell("printenv"))
        .await
        .unwrap()
        .to_string();
    assert!(out.contains("TEST_ENV=HELLO"), "{out}");
    assert!(out.contains("SWIFTIDE_SSH_TESTBED=1"), "{out}");
}

#[tokio::test]
async fn le16_env_remove() {
    let tb = testbed();
    let ex = builder(&tb)
        .env_remove(["SWIFTIDE_SSH_TESTBED"])
        .build()
        .await
        .unwrap();
    let out = ex
        .exec_cmd(&Command::shell("printenv"))
        .await
        .unwrap()
        .to_string();
    assert!(!out.contains("SWIFTIDE_SSH_TESTBED="), "{out}");
}

#[tokio::test]
async fn le17_run_shebang() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let script = "#!/usr/bin/env python3\nimport sys\nprint('hello from python')\nprint(sys.version_info.major)\n";
    let out = ex
        .exec_cmd(&Command::shell(script))
        .await
        .unwrap()
        .to_string();
    assert!(out.contains("hello from python"), "{out}");
    assert!(out.contains('3'), "{out}");
}

#[tokio::test]
async fn le18_multiline_with_quotes() {
    let tb = testbed();
    let ex = in_dir(&tb, tb.scratch_dir()).await;
    let code = "fn main() {\n    println!(\"Hello, world!\");\n    let s = \"it's\";\n}";
    let quoted = code.replace('\'', "'\\''");
    ex.exec_cmd(&Command::shell(format!("echo '{quoted}' > test_file2.txt")))
        .await
        .unwrap();
    let out = ex
        .exec_cmd(&Command::shell("cat test_file2.txt"))
        .await
        .unwrap();
    assert_eq!(out.to_string(), format!("{code}\n"));
}

#[tokio::test]
async fn le19_write_and_read_file_commands() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let path = tb.scratch_dir().join("written.txt");
    match ex.exec_cmd(&Command::read_file(&path)).await {
        Err(CommandError::NonZeroExit(out)) => {
            assert!(
                out.to_string().starts_with("failed to read from file"),
                "{out}"
            )
        }
        other => panic!("{other:?}"),
    }
    let out = ex
        .exec_cmd(&Command::write_file(&path, "Hello, world!"))
        .await
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), b"Hello, world!");
    let out = ex.exec_cmd(&Command::read_file(&path)).await.unwrap();
    assert_eq!(out.to_string(), "Hello, world!");
}

#[tokio::test]
async fn le20_read_file_preserves_invalid_utf8() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let path = tb.scratch_dir().join("bytes.bin");
    std::fs::write(&path, b"valid\xff").unwrap();
    let out = ex.exec_cmd(&Command::read_file(&path)).await.unwrap();
    assert_eq!(out.as_bytes().as_ref(), b"valid\xff");
    assert_eq!(out.chunks().len(), 1);
}

// Test 21 (stream_files) lives in tests/files.rs with the rest of the file streaming tests.

#[tokio::test]
async fn le22_honors_workdir() {
    let tb = testbed();
    let dir = tb.scratch_dir().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let ex = in_dir(&tb, &dir).await;
    let out = ex.exec_cmd(&Command::shell("pwd")).await.unwrap();
    assert_eq!(
        PathBuf::from(out.to_string().trim()),
        dir.canonicalize().unwrap()
    );
    ex.exec_cmd(&Command::write_file("rel.txt", "x"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.join("rel.txt")).unwrap(), b"x");
    let out = ex.exec_cmd(&Command::read_file("rel.txt")).await.unwrap();
    assert_eq!(out.to_string(), "x");
}

#[tokio::test]
async fn le23_command_current_dir() {
    let tb = testbed();
    let ex = in_dir(&tb, tb.scratch_dir()).await;
    let nested = tb.scratch_dir().join("nested");
    std::fs::create_dir_all(&nested).unwrap();
    let out = ex
        .exec_cmd(&Command::shell("pwd").with_current_dir("nested"))
        .await
        .unwrap();
    assert_eq!(
        PathBuf::from(out.to_string().trim()),
        nested.canonicalize().unwrap()
    );
    ex.exec_cmd(&Command::write_file("f.txt", "n").with_current_dir("nested"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(nested.join("f.txt")).unwrap(), b"n");
    let out = ex
        .exec_cmd(&Command::read_file("f.txt").with_current_dir("nested"))
        .await
        .unwrap();
    assert_eq!(out.to_string(), "n");
}

#[tokio::test]
async fn le24_scoped_current_dir() {
    let tb = testbed();
    let ex = in_dir(&tb, tb.scratch_dir()).await;
    let scoped = ex.scoped("nested");
    scoped
        .exec_cmd(&Command::write_file("s.txt", "scoped"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(tb.scratch_dir().join("nested/s.txt")).unwrap(),
        b"scoped"
    );
    assert_eq!(ex.workdir(), Some(tb.scratch_dir()));
}

#[tokio::test]
async fn le25_scoped_current_dir_dyn() {
    let tb = testbed();
    let ex: Arc<dyn ToolExecutor> = in_dir(&tb, tb.scratch_dir()).await.into();
    let scoped = ex.scoped("nested");
    scoped
        .exec_cmd(&Command::write_file("d.txt", "dyn"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(tb.scratch_dir().join("nested/d.txt")).unwrap(),
        b"dyn"
    );
}

#[tokio::test]
async fn differential_local_vs_ssh() {
    let tb = testbed();
    let dir = tb.scratch_dir().to_path_buf();
    seed(&dir);
    let (local, remote) = differential::executors(&dir, builder(&tb));
    let remote = remote.build().await.unwrap();
    let cases = cases(&dir);
    assert!(cases.len() >= 30);
    let mismatches = differential::compare(&local, &remote, &cases).await;
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[tokio::test]
async fn differential_env_clear_and_default_timeout() {
    let tb = testbed();
    let dir = tb.scratch_dir().to_path_buf();
    let local = LocalExecutor::builder()
        .workdir(&dir)
        .env_clear(true)
        .envs(std::collections::HashMap::from([(
            "ONLY".to_owned(),
            "1".to_owned(),
        )]))
        .default_timeout(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let remote = builder(&tb)
        .workdir(&dir)
        .env_clear(true)
        .envs([("ONLY", "1")])
        .default_timeout(Some(Duration::from_millis(200)))
        .build()
        .await
        .unwrap();
    for cmd in [
        Command::shell("env | sort"),
        Command::shell("sleep 1"),
        Command::shell("sleep 0.5; echo late").with_timeout(Duration::from_secs(3)),
        Command::shell("#!/bin/sh\necho $ONLY"),
    ] {
        let l = outcome(local.exec_cmd(&cmd).await);
        let r = outcome(remote.exec_cmd(&cmd).await);
        assert_eq!(l, r, "{cmd:?}");
    }
}
