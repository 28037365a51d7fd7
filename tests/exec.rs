//! Shell execution, streaming, timeouts, kills, cancellation, the pool and connection errors,
//! all against a real OpenSSH sshd started by the testbed.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{
    builder, echo_concurrently, executor, remote_processes, testbed, token, wait_until_gone,
};
use swiftide_core::{Command, CommandError, ToolExecutor};
use swiftide_ssh_executor::{Error, ExecOptions, ExitStatus, OutputChunk, Runner, SshExecutor};

#[tokio::test]
async fn runs_a_command_and_returns_exact_bytes_per_stream() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let out = ex
        .run("printf 'out\\n\\n'; printf 'err\\r\\n' >&2; printf '\\377\\000bin'")
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    assert_eq!(out.stdout(), b"out\n\n\xff\x00bin");
    assert_eq!(out.stderr(), b"err\r\n");
    assert_eq!(out.host, "127.0.0.1");
}

#[tokio::test]
async fn reports_exit_codes_and_signals() {
    let tb = testbed();
    let ex = executor(&tb).await;
    assert_eq!(ex.run("exit 3").await.unwrap().status, ExitStatus::Code(3));
    let killed = ex.run("echo before; kill -KILL $$").await.unwrap();
    assert_eq!(
        killed.status,
        ExitStatus::Signal {
            name: "KILL".into(),
            core_dumped: false
        }
    );
    assert_eq!(killed.stdout(), b"before\n");
    // Through swiftide both are NonZeroExit, output kept.
    let err = ex
        .exec_cmd(&Command::shell("echo before; kill -KILL $$"))
        .await
        .unwrap_err();
    match err {
        CommandError::NonZeroExit(out) => assert_eq!(out.to_string(), "before\n"),
        other => panic!("expected NonZeroExit, got {other:?}"),
    }
}

#[tokio::test]
async fn streams_chunks_before_the_command_finishes() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let started = Instant::now();
    let first_at: Arc<Mutex<Option<Duration>>> = Arc::default();
    let seen = first_at.clone();
    let mut sink = move |chunk: &OutputChunk| {
        let mut first = seen.lock().unwrap();
        if first.is_none() {
            assert_eq!(chunk, &OutputChunk::Stdout("first".into()));
            *first = Some(started.elapsed());
        }
    };
    let out = ex
        .execute(
            "printf first; sleep 1; printf second >&2",
            ExecOptions::default(),
            &mut sink,
        )
        .await
        .unwrap();
    let total = started.elapsed();
    let first = first_at.lock().unwrap().expect("a chunk was streamed");
    assert!(
        first + Duration::from_millis(700) < total,
        "first chunk at {first:?}, result at {total:?}"
    );
    assert_eq!(out.stdout(), b"first");
    assert_eq!(out.stderr(), b"second");
}

#[tokio::test]
async fn timeout_kills_the_whole_remote_group_and_keeps_partial_output() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let t = token();
    let pattern = format!("sleep 300.{t}");
    let cmd = Command::shell(format!(
        "echo ready; {pattern} & {pattern} & (sleep 300.{t}9 &) ; {pattern}"
    ))
    .with_timeout(Duration::from_millis(500));
    let started = Instant::now();
    let err = ex.exec_cmd(&cmd).await.unwrap_err();
    match err {
        CommandError::TimedOut { timeout, output } => {
            assert_eq!(timeout, Duration::from_millis(500));
            assert_eq!(output.to_string(), "ready\n");
        }
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let left = wait_until_gone(&format!("sleep 300.{t}"), Duration::from_secs(3)).await;
    assert!(left.is_empty(), "survivors: {left:?}");
    // The connection survived: the next command reuses it.
    let dials = ex.pool_stats().dials;
    assert_eq!(ex.run("true").await.unwrap().status, ExitStatus::Code(0));
    assert_eq!(ex.pool_stats().dials, dials);
    assert!(ex.pool_stats().kills >= 1);
}

#[tokio::test]
async fn term_ignoring_processes_are_killed_after_the_grace_period() {
    let tb = testbed();
    let ex = builder(&tb)
        .kill_grace(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let t = token();
    let out = ex
        .execute(
            &format!("trap '' TERM; sleep 300.{t} & sleep 300.{t}"),
            ExecOptions::default().timeout(Duration::from_millis(300)),
            &mut |_| {},
        )
        .await
        .unwrap();
    eprintln!(
        "figure: TERM-ignoring group, timeout 300 ms + grace 300 ms, result after = {:?}",
        out.duration
    );
    assert!(
        matches!(
            out.status,
            ExitStatus::TimedOut {
                confirmed_dead: true,
                ..
            }
        ),
        "{:?}",
        out.status
    );
    assert!(
        wait_until_gone(&format!("sleep 300.{t}"), Duration::from_secs(3))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn dropping_the_future_kills_the_remote_group() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let t = token();
    let pattern = format!("sleep 300.{t}");
    let cmd = Command::shell(format!("{pattern} & {pattern}"));
    let result = tokio::time::timeout(Duration::from_millis(700), ex.exec_cmd(&cmd)).await;
    assert!(result.is_err(), "the command should still be running");
    assert_eq!(
        remote_processes(&format!("^{pattern}")).len(),
        2,
        "both sleeps were running"
    );
    let left = wait_until_gone(&pattern, Duration::from_secs(3)).await;
    assert!(left.is_empty(), "survivors after cancellation: {left:?}");
}

#[tokio::test]
async fn unprivileged_login_gets_the_same_kill_semantics() {
    let tb = common::unprivileged_testbed();
    let ex = executor(&tb).await;
    let id = ex.run("id -u").await.unwrap();
    assert_ne!(id.stdout(), b"0\n");
    let t = token();
    let pattern = format!("sleep 300.{t}");
    let out = ex
        .execute(
            &format!("{pattern} & {pattern}"),
            ExecOptions::default().timeout(Duration::from_millis(400)),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(matches!(out.status, ExitStatus::TimedOut { .. }));
    assert!(
        wait_until_gone(&pattern, Duration::from_secs(3))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn fifty_concurrent_commands_beyond_one_connection_all_succeed() {
    let tb = testbed();
    let ex = builder(&tb).max_connections(3).build().await.unwrap();
    let started = Instant::now();
    for out in echo_concurrently(&ex, 50, "sleep 0.3; ").await {
        assert_eq!(out.status, ExitStatus::Code(0));
    }
    let stats = ex.pool_stats();
    assert!(stats.connections <= 3, "{stats:?}");
    assert!(stats.dials <= 3, "{stats:?}");
    // 3 connections × 8 slots: 50 commands of 0.3 s need three waves, not fifty.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_flooding_command_does_not_stall_others_on_its_connection() {
    let tb = testbed();
    let ex = builder(&tb).max_connections(1).build().await.unwrap();
    let flood = {
        let ex = ex.clone();
        tokio::spawn(async move {
            ex.execute(
                "head -c 50000000 /dev/zero",
                ExecOptions::default(),
                &mut |_| {},
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let quick = ex.run("echo hi").await.unwrap();
    assert_eq!(quick.stdout(), b"hi\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(flood.await.unwrap().unwrap().stdout().len(), 50_000_000);
}

#[tokio::test]
async fn environment_is_cleared_removed_and_set_in_order() {
    let tb = testbed();
    let ex = builder(&tb)
        .env_remove(["SWIFTIDE_SSH_TESTBED", "BOTH"])
        .envs([("BOTH", "set wins"), ("QUOTED", "it's \"$x\"\nline2")])
        .build()
        .await
        .unwrap();
    let out = ex
        .run("printf '%s|%s|%s' \"${SWIFTIDE_SSH_TESTBED-unset}\" \"$BOTH\" \"$QUOTED\"")
        .await
        .unwrap();
    assert_eq!(out.stdout(), b"unset|set wins|it's \"$x\"\nline2");

    let cleared = builder(&tb)
        .env_clear(true)
        .envs([("ONLY", "1")])
        .build()
        .await
        .unwrap();
    let out = cleared.run("env | grep -v '^PWD=' | sort").await.unwrap();
    assert_eq!(out.stdout(), b"ONLY=1\n");

    let inherited = executor(&tb).await;
    let out = inherited
        .run("printenv SWIFTIDE_SSH_TESTBED")
        .await
        .unwrap();
    assert_eq!(out.stdout(), b"1\n");
}

#[tokio::test]
async fn invalid_input_is_a_typed_error_and_runs_nothing() {
    let tb = testbed();
    let err = builder(&tb)
        .envs([("BAD NAME", "x")])
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let ex = executor(&tb).await;
    let err = ex.run("echo a\0b").await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let err = ex.exec_cmd(&Command::shell("echo a\0b")).await.unwrap_err();
    assert!(matches!(err, CommandError::ExecutorError(_)), "{err}");
}

#[tokio::test]
async fn hostile_strings_reach_the_shell_unchanged() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let dir = tb.scratch_dir().join("we'ird $(dir) `x`\nnl");
    std::fs::create_dir_all(&dir).unwrap();
    let out = ex
        .execute(
            "printf '%s' \"$(pwd)\"; printf ' %s' '$(id)' \"`echo tick`\" 'ünï'",
            ExecOptions::default().current_dir(&dir),
            &mut |_| {},
        )
        .await
        .unwrap();
    let expected = format!("{} $(id) tick ünï", dir.canonicalize().unwrap().display());
    assert_eq!(String::from_utf8(out.stdout()).unwrap(), expected);
}

#[tokio::test]
async fn unknown_host_key_is_refused_before_authentication() {
    let tb = testbed();
    let empty = tb.scratch_dir().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let err = builder(&tb)
        .known_hosts_file(&empty)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownHostKey { .. }), "{err}");
    assert!(
        !tb.sshd_log().contains("Accepted publickey"),
        "{}",
        tb.sshd_log()
    );
}

#[tokio::test]
async fn changed_host_key_is_a_mismatch_and_nothing_is_sent() {
    let tb = testbed();
    let other = common::testbed();
    // A known_hosts line for this port but with another server's key.
    let forged = tb.scratch_dir().join("forged_known_hosts");
    std::fs::write(
        &forged,
        format!(
            "[{}]:{} {}\n",
            tb.host(),
            tb.port(),
            other.host_public_key()
        ),
    )
    .unwrap();
    let err = builder(&tb)
        .known_hosts_file(&forged)
        .build()
        .await
        .unwrap_err();
    match &err {
        Error::HostKeyMismatch { line, .. } => assert_eq!(*line, 1),
        other => panic!("expected HostKeyMismatch, got {other}"),
    }
    let log = tb.sshd_log();
    assert!(
        !log.contains("Accepted") && !log.contains("Failed publickey"),
        "{log}"
    );
}

#[tokio::test]
async fn accept_new_records_the_key_then_trusts_it() {
    let tb = testbed();
    let file = tb.scratch_dir().join("sub/known_hosts");
    let ex = builder(&tb)
        .accept_new_host_keys(&file)
        .build()
        .await
        .unwrap();
    assert_eq!(ex.run("echo ok").await.unwrap().stdout(), b"ok\n");
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert!(
        recorded.contains(&format!("[127.0.0.1]:{}", tb.port())),
        "{recorded}"
    );
    // Strict checking with the recorded file now succeeds.
    builder(&tb).known_hosts_file(&file).build().await.unwrap();
}

#[tokio::test]
async fn insecure_mode_accepts_any_key() {
    let tb = testbed();
    let ex = builder(&tb)
        .insecure_accept_any_host_key()
        .build()
        .await
        .unwrap();
    assert!(ex.run("true").await.unwrap().status.success());
}

#[tokio::test]
async fn wrong_credentials_are_refused_with_what_was_tried() {
    let tb = testbed();
    let err = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file(tb.unauthorized_private_key_path())
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap_err();
    match &err {
        Error::AuthRejected {
            tried, remaining, ..
        } => {
            assert!(tried.contains("publickey"), "{err}");
            assert!(remaining.contains("publickey"), "{err}");
        }
        other => panic!("expected AuthRejected, got {other}"),
    }

    let err = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file(tb.encrypted_private_key_path())
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::KeyFile { .. }), "{err}");
    assert!(err.to_string().contains("encrypted"), "{err}");
}

#[tokio::test]
async fn encrypted_key_with_passphrase_and_password_auth_work() {
    let tb = testbed();
    let ex = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file_with_passphrase(
            tb.encrypted_private_key_path(),
            swiftide_ssh_testbed::KEY_PASSPHRASE,
        )
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap();
    assert!(ex.run("true").await.unwrap().status.success());
    let debug = format!("{ex:?}");
    assert!(
        !debug.contains(swiftide_ssh_testbed::KEY_PASSPHRASE),
        "{debug}"
    );

    let user_tb = swiftide_ssh_testbed::Testbed::builder()
        .unprivileged_user()
        .password_auth(true)
        .start()
        .unwrap();
    let ex = SshExecutor::builder()
        .host(user_tb.host())
        .port(user_tb.port())
        .user(user_tb.user())
        .password(swiftide_ssh_testbed::USER_PASSWORD)
        .known_hosts_file(user_tb.known_hosts_path())
        .build()
        .await
        .unwrap();
    assert_eq!(
        ex.run("whoami").await.unwrap().stdout(),
        format!("{}\n", swiftide_ssh_testbed::UNPRIVILEGED_USER).as_bytes()
    );
    assert!(!format!("{ex:?}").contains(swiftide_ssh_testbed::USER_PASSWORD));
}

#[tokio::test]
async fn refused_port_is_a_connect_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = SshExecutor::builder()
        .host("127.0.0.1")
        .port(port)
        .user("nobody")
        .password("x")
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Connect { port: p, .. } if p == port),
        "{err}"
    );
    let err = anyhow::Error::new(err);
    assert!(format!("{err:#}").contains("refused"), "{err:#}");
}

#[tokio::test]
async fn the_pool_replaces_a_broken_connection() {
    let mut tb = testbed();
    let ex = executor(&tb).await;
    assert!(ex.run("true").await.unwrap().status.success());
    tb.restart().unwrap();
    // The old connection died with the restart; the in-flight state is gone, the next
    // command dials again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match ex.run("echo back").await {
            Ok(out) => {
                assert_eq!(out.stdout(), b"back\n");
                break;
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying after {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("pool did not recover: {e}"),
        }
    }
    assert!(ex.pool_stats().dials >= 2);
}

#[tokio::test]
async fn a_command_on_a_dying_connection_reports_it_may_have_run() {
    let mut tb = testbed();
    let ex = executor(&tb).await;
    let running = {
        let ex = ex.clone();
        tokio::spawn(async move { ex.run("sleep 30").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    tb.stop();
    let err = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("no hang")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
    assert!(err.to_string().contains("may have run"));
}

#[tokio::test]
async fn executor_is_a_cheap_clone_and_a_dyn_tool_executor() {
    let tb = testbed();
    let ex = executor(&tb).await;
    let dynamic: Arc<dyn ToolExecutor> = ex.clone().into();
    let out = dynamic.exec_cmd(&Command::shell("echo dyn")).await.unwrap();
    assert_eq!(out.to_string(), "dyn\n");
    assert_eq!(ex.pool_stats().dials, 1);
    ex.close().await;
    assert!(matches!(ex.run("true").await, Err(Error::Closed)));
}

#[tokio::test]
async fn ssh_agent_identities_authenticate() {
    let tb = testbed();
    let socket = tb.scratch_dir().join("agent.sock");
    let agent = std::process::Command::new("ssh-agent")
        .arg("-D")
        .arg("-a")
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("ssh-agent");
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _agent = KillOnDrop(agent);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !socket.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An empty agent, as the only method, is a typed agent error naming the problem.
    let err = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .agent_socket(&socket)
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Agent { .. }), "{err}");
    assert!(err.to_string().contains("no identities"), "{err}");

    let added = std::process::Command::new("ssh-add")
        .arg(tb.private_key_path())
        .env("SSH_AUTH_SOCK", &socket)
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let ex = SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .agent_socket(&socket)
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap();
    assert_eq!(
        ex.run("echo via-agent").await.unwrap().stdout(),
        b"via-agent\n"
    );
}

#[tokio::test]
async fn a_frozen_server_is_detected_by_keepalive() {
    let tb = testbed();
    let ex = builder(&tb)
        .keepalive_interval(Some(Duration::from_millis(500)))
        .keepalive_max(2)
        .build()
        .await
        .unwrap();
    assert!(ex.run("true").await.unwrap().status.success());
    let running = {
        let ex = ex.clone();
        tokio::spawn(async move { ex.run("sleep 30").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    tb.freeze().unwrap();
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), running).await;
    tb.thaw().unwrap();
    let err = result
        .expect("keepalive must end the hang")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
    eprintln!(
        "figure: frozen server detected (keepalive 0.5 s x 2) = {:?}",
        started.elapsed()
    );
    // interval × (max + 1) = 1.5 s, plus scheduling slack.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn close_lets_running_commands_finish_then_disconnects() {
    let tb = testbed();
    let ex = executor(&tb).await;
    assert!(ex.run("true").await.unwrap().status.success());
    let running = {
        let ex = ex.clone();
        tokio::spawn(async move { ex.run("sleep 0.5; echo finished").await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    ex.close().await;
    assert!(matches!(ex.run("true").await, Err(Error::Closed)));
    let out = running.await.unwrap().unwrap();
    assert_eq!(out.stdout(), b"finished\n");
    // The executor is still alive, but its connection is gone on the server.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !tb.connection_pids().is_empty() {
        assert!(
            Instant::now() < deadline,
            "connections left: {:?}",
            tb.connection_pids()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(ex);
}

#[tokio::test]
async fn openssh_user_certificates_authenticate_through_the_servers_trusted_ca() {
    let ca_dir = tempfile::tempdir().unwrap();
    let ca = common::user_ca(ca_dir.path());
    let tb = swiftide_ssh_testbed::Testbed::builder()
        .sshd_config_line(format!("TrustedUserCAKeys {}.pub", ca.display()))
        .start()
        .unwrap();
    // The testbed's "unauthorized" key is not in authorized_keys: only a certificate lets it
    // in.
    let key = tb.unauthorized_private_key_path();
    let connect = |auth: swiftide_ssh_executor::SshExecutorBuilder| {
        auth.host(tb.host())
            .port(tb.port())
            .user(tb.user())
            .known_hosts_file(tb.known_hosts_path())
            .build()
    };

    let cert = common::certify(&ca, key, tb.user(), "for-user");
    let ex = connect(SshExecutor::builder().certificate_file(key, &cert))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", tb.sshd_log()));
    assert_eq!(ex.run("echo ok").await.unwrap().stdout(), b"ok\n");
    assert!(tb.sshd_log().contains("ED25519-CERT"), "{}", tb.sshd_log());

    // Control: the same key without its certificate is refused.
    let err = connect(SshExecutor::builder().private_key_file(key))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AuthRejected { .. }), "{err}");

    // A certificate for another principal is refused by the server, and the error names it.
    let wrong_principal = common::certify(&ca, key, "somebody-else", "other-principal");
    let err = connect(SshExecutor::builder().certificate_file(key, &wrong_principal))
        .await
        .unwrap_err();
    match &err {
        Error::AuthRejected { tried, .. } => assert!(tried.contains("certificate"), "{err}"),
        other => panic!("expected AuthRejected, got {other}"),
    }

    // A certificate of a different key is caught before anything is offered.
    let foreign = common::certify(&ca, tb.private_key_path(), tb.user(), "other-key");
    let err = connect(SshExecutor::builder().certificate_file(key, &foreign))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::KeyFile { path, .. } if path == &foreign),
        "{err}"
    );
    assert!(err.to_string().contains("different key"), "{err}");
}

/// Warm commands go in the direct exec form (the login shell runs the bootstrap); with
/// `kill_on_disconnect(false)` they run without a supervisor, and a timeout kills the group
/// from a second channel instead.
#[tokio::test]
async fn warm_direct_commands_keep_the_kill_with_and_without_a_supervisor() {
    let tb = testbed();
    for kill_on_disconnect in [true, false] {
        // The per-exec path's forms (the runner's kills: tests/runner.rs).
        let ex = builder(&tb)
            .runner(Runner::PerExec)
            .kill_on_disconnect(kill_on_disconnect)
            .kill_grace(Duration::from_millis(200))
            .max_connections(1)
            .build()
            .await
            .unwrap();
        // The first command tells the connection which form its login shell runs.
        let first = ex.run("echo $0 $#; echo e >&2").await.unwrap();
        let warm = ex.run("echo $0 $#; echo e >&2").await.unwrap();
        assert_eq!(
            (first.stdout(), first.stderr()),
            (b"sh 0\n".to_vec(), b"e\n".to_vec())
        );
        assert_eq!(
            (warm.stdout(), warm.stderr()),
            (first.stdout(), first.stderr())
        );
        let t = token();
        let pattern = format!("sleep 300.{t}");
        let out = ex
            .execute(
                &format!("trap '' TERM; echo ready; {pattern} & {pattern}"),
                ExecOptions::default().timeout(Duration::from_millis(400)),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert!(
            matches!(out.status, ExitStatus::TimedOut { .. }),
            "{:?}",
            out.status
        );
        assert_eq!(out.stdout(), b"ready\n");
        let left = wait_until_gone(&pattern, Duration::from_secs(3)).await;
        assert!(
            left.is_empty(),
            "survivors ({kill_on_disconnect}): {left:?}"
        );
        let stats = ex.pool_stats();
        assert_eq!(stats.direct_requests, 2, "{stats:?}");
        assert_eq!(stats.direct_fallbacks, 0, "{stats:?}");
    }
}
