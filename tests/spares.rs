//! Spare channels: session channels the pool opens ahead of demand so that a warm command
//! needs no channel-open round trip. Against a real OpenSSH sshd.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::Duration,
};

use common::{echo_concurrently, testbed};
use swiftide_ssh_executor::{Runner, SshExecutor, SshExecutorBuilder};
use swiftide_ssh_testbed::Testbed as SparesTestbed;

/// Spares belong to the per-exec path: these tests pin it (the resident runner needs none).
fn builder(tb: &SparesTestbed) -> SshExecutorBuilder {
    common::builder(tb).runner(Runner::PerExec)
}

async fn executor(tb: &SparesTestbed) -> SshExecutor {
    builder(tb).build().await.unwrap()
}

/// Sequential warm commands start on spares (the first opens its own channel and a spare
/// behind it); with `spare_channels(0)` none is opened. An idle executor keeps one spare.
#[tokio::test]
async fn warm_commands_start_on_spare_channels() {
    let tb = testbed();
    let ex = executor(&tb).await;
    for i in 0..20 {
        let out = ex.run(&format!("echo {i}")).await.unwrap();
        assert_eq!(out.stdout(), format!("{i}\n").as_bytes());
    }
    let stats = ex.pool_stats();
    eprintln!("figure: 20 sequential commands with spares: {stats:?}");
    assert!(
        stats.spare_channels_used >= 18,
        "commands did not take spares: {stats:?}"
    );
    assert!(stats.spare_channels <= 1, "{stats:?}");
    assert_eq!(stats.channel_open_refusals, 0, "{stats:?}");

    let off = builder(&tb).spare_channels(0).build().await.unwrap();
    for _ in 0..5 {
        assert!(off.run("true").await.unwrap().status.success());
    }
    let stats = off.pool_stats();
    assert_eq!(stats.spare_channels_opened, 0, "{stats:?}");
    assert_eq!(stats.spare_channels_used, 0, "{stats:?}");
}

/// Spares count against the connection's channel limit: with `channels_per_connection(2)`
/// and two spares wanted, the client never has more than two session channels open on the
/// connection (commands and spares together; without that rule a burst holds two commands
/// and two spares), and the server refuses nothing. (`reliability::a_two_session_server_*`
/// runs with the default spare on a `MaxSessions 2` server.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spares_never_exceed_the_channel_limit() {
    let tb = testbed();
    let ex = builder(&tb)
        .max_connections(1)
        .channels_per_connection(2)
        .spare_channels(2)
        .build()
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicU32::new(0));
    let monitor = {
        let (ex, stop, most) = (ex.clone(), stop.clone(), most.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                most.fetch_max(ex.pool_stats().open_channels, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    echo_concurrently(&ex, 60, "sleep 0.02; ").await;
    // Then sequential ones, which run on spares.
    for _ in 0..10 {
        assert!(ex.run("true").await.unwrap().status.success());
    }
    stop.store(true, Ordering::Relaxed);
    monitor.await.unwrap();
    let stats = ex.pool_stats();
    eprintln!(
        "figure: at most {} channels open with channels_per_connection(2) and 2 spares: {stats:?}",
        most.load(Ordering::Relaxed)
    );
    assert!(most.load(Ordering::Relaxed) <= 2, "{stats:?}");
    assert!(stats.spare_channels_used >= 5, "{stats:?}");
    assert_eq!(stats.channel_open_refusals, 0, "{stats:?}");
}

/// Warm commands run on pre-started spares (the login shell already waiting for them), and
/// a login shell whose rc files print keeps its connection from pre-starting: every
/// pre-started spare would say something before its command and be thrown away.
#[tokio::test]
async fn spares_are_pre_started_unless_the_login_shell_talks() {
    use swiftide_ssh_testbed::{LoginShell, Testbed};
    let quiet = Testbed::builder()
        .login_shell(LoginShell::Bash)
        .start()
        .unwrap();
    let ex = builder(&quiet).max_connections(1).build().await.unwrap();
    for i in 0..10 {
        let out = ex.run(&format!("echo {i}")).await.unwrap();
        assert_eq!(out.stdout(), format!("{i}\n").as_bytes());
    }
    let stats = ex.pool_stats();
    eprintln!("figure: quiet login shell: {stats:?}");
    // The first two commands' spares open before the connection knows its shell.
    assert!(stats.prestarted_spares_used >= 6, "{stats:?}");

    // bash sources $BASH_ENV before every non-interactive command: a talking rc file.
    let rc_dir = tempfile::tempdir().unwrap();
    let rc = rc_dir.path().join("noise.sh");
    std::fs::write(&rc, "echo rc-noise >&2\n").unwrap();
    for path in [rc_dir.path(), rc.as_path()] {
        std::process::Command::new("chmod")
            .arg("a+rx")
            .arg(path)
            .status()
            .unwrap();
    }
    let talking = Testbed::builder()
        .login_shell(LoginShell::Bash)
        .sshd_config_line(format!("SetEnv BASH_ENV={}", rc.display()))
        .start()
        .unwrap();
    let ex = builder(&talking).max_connections(1).build().await.unwrap();
    for i in 0..10 {
        let out = ex.run(&format!("echo {i}")).await.unwrap();
        assert_eq!(out.stdout(), format!("{i}\n").as_bytes());
        // The rc file's noise is part of each command's stderr (it runs before each one),
        // exactly once.
        assert_eq!(out.stderr(), b"rc-noise\n", "command {i}");
    }
    let stats = ex.pool_stats();
    eprintln!("figure: talking login shell: {stats:?}");
    // The first command's rc noise came before its marker: the connection never pre-starts
    // (before this was noticed from the first command on, a pre-started spare taken before
    // its noise had arrived slipped through).
    assert_eq!(stats.prestarted_spares_used, 0, "{stats:?}");
    // Plain spares still serve: pre-started ones would all be thrown away.
    assert!(stats.spare_channels_used >= 7, "{stats:?}");
    assert_eq!(stats.direct_fallbacks, 0, "{stats:?}");
}
