//! Guarded commands (the guide, docs/guide/09-guarded-commands.md): limits and Landlock
//! confinement applied by the host's runner, through a real sshd, with Python's runner and with
//! the helper; and the refusals wherever a guard cannot be enforced.

mod common;

use std::time::Duration;

use common::{builder, testbed, token, unprivileged_testbed};
use swiftide_ssh_executor::{
    Confinement, Error, ExecOptions, ExitStatus, JobOptions, Limit, Limits, Network, Pty, Runner,
    SshExecutor, SshExecutorBuilder,
};
use swiftide_ssh_testbed::Testbed;

/// A fresh directory on the host (this machine).
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("swiftide-guard-{name}-{}", token()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The two runners that apply guards: Python's (the testbed's default) and the helper.
fn runners(tb: &Testbed) -> Vec<(&'static str, SshExecutorBuilder)> {
    let base = || builder(tb).runner(Runner::Auto).max_connections(1);
    vec![
        ("python", base()),
        ("helper", base().runner_helper(common::runner_helper())),
    ]
}

async fn runner_name(ex: &SshExecutor) -> String {
    ex.pool_stats().runner.unwrap_or_default()
}

#[tokio::test]
async fn a_confined_command_writes_only_beneath_its_workdir_and_private_tmp() {
    let tb = testbed();
    for (name, builder) in runners(&tb) {
        let root = scratch(name);
        let (work, outside) = (root.join("work"), root.join("outside"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "precious").unwrap();
        let ex = builder
            .workdir(&work)
            .confinement(Confinement::new())
            .build()
            .await
            .unwrap();
        let out = outside.display();
        let script = format!(
            r#"echo in > inside && echo inside-ok
echo out > {out}/plain 2>/dev/null || echo plain-refused
cp inside {out}/cp 2>/dev/null || echo cp-refused
python3 -c 'open("{out}/py", "w")' 2>/dev/null || echo python-refused
ln -s {out} link && {{ echo via > link/via 2>/dev/null || echo symlink-refused; }}
( sleep 0.3; echo late > {out}/late 2>/dev/null || echo late-refused > late ) &
printf 'echo b64 > {out}/b64\n' | base64 | base64 -d | sh 2>/dev/null || echo base64-refused
truncate -s 0 {out}/keep 2>/dev/null || echo truncate-refused
echo tmp > "$TMPDIR/t" && echo tmp-ok"#
        );
        let run = ex.run(&script).await.unwrap();
        let said = run.stdout_lossy();
        for word in [
            "inside-ok",
            "plain-refused",
            "cp-refused",
            "python-refused",
            "symlink-refused",
            "base64-refused",
            "truncate-refused",
            "tmp-ok",
        ] {
            assert!(
                said.lines().any(|line| line == word),
                "{name} ({}): no {word} in {said:?}: {run:?}",
                runner_name(&ex).await
            );
        }
        let runner = runner_name(&ex).await;
        assert!(runner.starts_with(name), "{name}: ran on {runner}");
        let stats = ex.pool_stats();
        assert_eq!(
            (stats.guarded_commands, stats.guard_refusals),
            (1, 0),
            "{name}: {stats:?}"
        );
        // The background child is confined too, after the command ended.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            std::fs::read_to_string(work.join("late")).unwrap_or_default(),
            "late-refused\n",
            "{name}"
        );
        let mut written: Vec<String> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        written.sort();
        assert_eq!(written, ["keep"], "{name}: written outside");
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "precious"
        );
        // One command may be given more room, and one without confinement writes anywhere.
        let wider = ExecOptions::default().confinement(Confinement::new().writable(&outside));
        let run = ex
            .execute(&format!("echo ok > {out}/given"), wider, &mut |_| {})
            .await
            .unwrap();
        assert!(run.success(), "{name}: {run:?}");
        ex.close().await;
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test]
async fn a_command_without_network_connects_nowhere_and_one_with_a_port_only_there() {
    let tb = testbed();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let connect = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)' \
         2>/dev/null && echo connected || echo refused"
    );
    for (name, builder) in runners(&tb) {
        let ex = builder
            .confinement(Confinement::new())
            .build()
            .await
            .unwrap();
        let run = ex.run(&connect).await.unwrap();
        assert_eq!(run.stdout_lossy(), "refused\n", "{name}: {run:?}");
        let to_port = ExecOptions::default()
            .confinement(Confinement::new().network(Network::Ports(vec![port])));
        let run = ex.execute(&connect, to_port, &mut |_| {}).await.unwrap();
        assert_eq!(run.stdout_lossy(), "connected\n", "{name}: {run:?}");
        ex.close().await;
    }
}

#[tokio::test]
async fn a_cpu_hog_is_stopped_with_a_typed_result_and_a_memory_hog_fails_its_allocation() {
    let tb = testbed();
    for (name, builder) in runners(&tb) {
        let ex = builder
            .limits(
                Limits::new()
                    .cpu_time(Duration::from_secs(1))
                    .memory(256 << 20),
            )
            .build()
            .await
            .unwrap();
        let run = ex.run("while :; do :; done").await.unwrap();
        assert_eq!(
            run.limit_exceeded(),
            Some(Limit::CpuTime),
            "{name}: {run:?}"
        );
        let run = ex.run("python3 -c 'b = bytearray(1 << 30)'").await.unwrap();
        assert!(!run.success(), "{name}: {run:?}");
        assert!(
            String::from_utf8_lossy(&run.stderr()).contains("MemoryError"),
            "{name}: {run:?}"
        );
        // The limits are the command's, not the runner's: an unlimited one after it runs.
        let run = ex
            .execute(
                "python3 -c 'b = bytearray(1 << 29); print(len(b))'",
                ExecOptions::default().limits(Limits::new()),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(run.stdout_lossy(), "536870912\n", "{name}: {run:?}");
        ex.close().await;
    }
}

#[tokio::test]
async fn a_fork_bomb_under_a_process_limit_leaves_the_host_usable() {
    // RLIMIT_NPROC does not hold root back: an account of its own.
    let tb = unprivileged_testbed();
    let ex = builder(&tb)
        .limits(Limits::new().processes(64))
        .build()
        .await
        .unwrap();
    let limits = ex
        .run("grep 'Max processes' /proc/self/limits")
        .await
        .unwrap();
    let fields: Vec<String> = limits
        .stdout_lossy()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(fields[2..4], ["64", "64"], "{limits:?}");
    let run = ex
        .execute(
            "bomb() { bomb | bomb & }; bomb; sleep 30",
            ExecOptions::default().timeout(Duration::from_secs(3)),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(matches!(run.status, ExitStatus::TimedOut { .. }), "{run:?}");
    let started = std::time::Instant::now();
    let alive = ex.run("echo alive").await.unwrap();
    assert_eq!(alive.stdout_lossy(), "alive\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The bomb's processes went with its group.
    let user = tb.user().to_owned();
    let mut left = usize::MAX;
    for _ in 0..50 {
        let out = std::process::Command::new("pgrep")
            .args(["-c", "-u", &user, "-f", "bomb"])
            .output()
            .unwrap();
        left = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "bomb processes left");
    ex.close().await;
}

#[tokio::test]
async fn a_guard_that_cannot_be_enforced_is_refused_and_nothing_runs() {
    let tb = testbed();
    let marker = scratch("refused").join("ran");
    let touch = format!("touch {}", marker.display());
    let refused = |result: Result<swiftide_ssh_executor::Execution, Error>, what: &str| match result
    {
        Err(Error::GuardUnavailable { reason, .. }) => reason,
        other => panic!("{what}: {other:?}"),
    };
    // Per exec: nothing would apply it.
    let per_exec = builder(&tb)
        .runner(Runner::PerExec)
        .confinement(Confinement::new())
        .build()
        .await
        .unwrap();
    let reason = refused(per_exec.run(&touch).await, "per exec");
    assert!(reason.contains("PerExec"), "{reason}");
    let stats = per_exec.pool_stats();
    assert_eq!(
        (stats.guarded_commands, stats.guard_refusals),
        (0, 1),
        "{stats:?}"
    );
    // A terminal and a job take no runner.
    let guarded = builder(&tb)
        .limits(Limits::new().open_files(256))
        .build()
        .await
        .unwrap();
    let in_terminal = ExecOptions::default().pty(Pty::default());
    refused(
        guarded.execute(&touch, in_terminal, &mut |_| {}).await,
        "a terminal",
    );
    match guarded.spawn_job(&touch, JobOptions::default()).await {
        Err(Error::GuardUnavailable { .. }) => {}
        other => panic!("a job: {other:?}"),
    }
    // A host whose kernel has no Landlock (the runner is told so): confinement is refused,
    // limits alone still run.
    let no_landlock = Testbed::builder()
        .sshd_config_line("SetEnv SWIFTIDE_SSH_RUNNER_NO_LANDLOCK=1")
        .start()
        .unwrap();
    let ex = builder(&no_landlock)
        .confinement(Confinement::new())
        .build()
        .await
        .unwrap();
    let reason = refused(ex.run(&touch).await, "no Landlock");
    assert!(reason.contains("Landlock"), "{reason}");
    assert_eq!(ex.pool_stats().guard_refusals, 1);
    let limited = ExecOptions::default().limits(Limits::new().open_files(64));
    let ex_limits = builder(&no_landlock)
        .limits(Limits::new().open_files(64))
        .build()
        .await
        .unwrap();
    let run = ex_limits
        .execute("ulimit -n", limited, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(run.stdout_lossy(), "64\n", "{run:?}");
    assert!(!marker.exists(), "a refused command ran");
    // Unless the caller explicitly allows running unguarded.
    let unguarded = builder(&tb)
        .runner(Runner::PerExec)
        .confinement(Confinement::new())
        .run_unguarded_where_unenforceable(true)
        .build()
        .await
        .unwrap();
    assert!(unguarded.run(&touch).await.unwrap().success());
    assert!(marker.exists());
}
