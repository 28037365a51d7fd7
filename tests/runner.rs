//! The resident runner (`Runner`): the same results as one session per command, every kill
//! path, no leaks over many commands, its death mid-command, and hosts where it cannot start.
//! (Client death with the runner: `tests/reliability.rs`, which runs with the default
//! `Runner::Auto`.)

mod common;

use std::time::{Duration, Instant};

use common::{builder, testbed, token, wait_until_gone};
use swiftide_ssh_executor::{
    Error, ExecOptions, ExitStatus, JobOptions, JobStatus, JobStream, Runner, SshExecutor,
};
use swiftide_ssh_testbed::Testbed;

async fn executor(tb: &Testbed, runner: Runner) -> SshExecutor {
    host_executor(tb, runner, "").await
}

/// An executor for a host of [`runner_hosts`]: given the helper where that host's runner is
/// the helper.
async fn host_executor(tb: &Testbed, runner: Runner, name: &str) -> SshExecutor {
    let mut builder = builder(tb)
        .runner(runner)
        .max_connections(1)
        .kill_grace(Duration::from_millis(300));
    if name.starts_with("helper") {
        builder = builder.runner_helper(helper_binary());
    }
    builder.build().await.unwrap()
}

/// The `swiftide-ssh-runner` helper, as built for this machine.
fn helper_binary() -> Vec<u8> {
    common::runner_helper()
}

/// The runner's pid: the parent of a command it runs.
async fn runner_pid(ex: &SshExecutor) -> i32 {
    let out = ex.run("echo $PPID").await.unwrap();
    String::from_utf8_lossy(&out.stdout())
        .trim()
        .parse()
        .unwrap()
}

fn proc_count(dir: String) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Children of `pid` on the host (zombies included).
fn children(pid: i32) -> Vec<String> {
    let out = std::process::Command::new("ps")
        .args(["-o", "pid=,stat=,args=", "--ppid", &pid.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn commands_give_the_same_results_through_the_runner_and_per_exec() {
    for (tb, runner) in runner_hosts() {
        same_results(&tb, runner).await;
    }
}

async fn same_results(tb: &Testbed, runner: &str) {
    let resident = host_executor(tb, Runner::Resident, runner).await;
    let per_exec = executor(tb, Runner::PerExec).await;
    let dir = tb.scratch_dir().join("a dir with 'quotes' and\nnewline");
    std::fs::create_dir_all(&dir).unwrap();
    let cases: Vec<(&str, ExecOptions)> = vec![
        (
            "printf 'a\\0b'; printf err >&2; exit 3",
            ExecOptions::default(),
        ),
        (
            "echo $0 $# $$; ps -o pgid= -p $$ | tr -d ' '",
            ExecOptions::default(),
        ),
        ("kill -TERM $$", ExecOptions::default()),
        ("kill -BUS $$", ExecOptions::default()),
        (
            "pwd; echo \"$PWD\"",
            ExecOptions::default().current_dir(&dir),
        ),
        ("cd /nonexistent-dir-xyz", ExecOptions::default()),
        (
            "pwd",
            ExecOptions::default().current_dir("/nonexistent-dir-xyz"),
        ),
        ("read line; echo \"[$line]\" $?", ExecOptions::default()),
        (
            "(sleep 0.3; echo late; echo late-err >&2) & echo early",
            ExecOptions::default(),
        ),
        ("echo $HOME; id -u; umask", ExecOptions::default()),
        (
            "head -c 3000000 /dev/zero | tr '\\0' x",
            ExecOptions::default(),
        ),
        ("no-such-command-xyz", ExecOptions::default()),
        (
            "trap 'echo trapped' TERM; echo ready; sleep 5 & wait",
            ExecOptions::default().timeout(Duration::from_millis(500)),
        ),
    ];
    for (command, options) in cases {
        let a = resident
            .execute(command, options.clone(), &mut |_| {})
            .await
            .unwrap();
        let b = per_exec
            .execute(command, options, &mut |_| {})
            .await
            .unwrap();
        // `$$` differs between runs: compare the shape of the second case instead.
        if command.starts_with("echo $0") {
            let text = a.stdout_lossy();
            let words: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(&words[..2], ["sh", "0"], "{command}");
            assert_eq!(words[2], words[3], "the command leads its group: {text}");
            continue;
        }
        let status = |e: &swiftide_ssh_executor::Execution| match &e.status {
            ExitStatus::TimedOut { .. } => "timed out".to_owned(),
            other => format!("{other:?}"),
        };
        assert_eq!(status(&a), status(&b), "{runner}: {command}");
        assert_eq!(a.stdout(), b.stdout(), "{runner}: {command}");
        assert_eq!(a.stderr(), b.stderr(), "{runner}: {command}");
    }
    let stats = resident.pool_stats();
    // All but the directory with a newline, which the direct form (and so the runner)
    // leaves to the universal form.
    assert_eq!(stats.runner_commands, 12, "{stats:?}");
    assert_eq!(per_exec.pool_stats().runner_commands, 0);
    assert!(
        stats.runner.as_deref().unwrap_or("").starts_with(runner),
        "{stats:?}"
    );
}

#[tokio::test]
async fn output_written_after_the_leader_exits_is_kept_and_redirected_children_survive() {
    let tb = testbed();
    let ex = executor(&tb, Runner::Resident).await;
    let out = ex
        .run("(sleep 0.5; echo late; echo late-err >&2) & echo early")
        .await
        .unwrap();
    assert_eq!(out.stdout(), b"early\nlate\n");
    assert_eq!(out.stderr(), b"late-err\n");
    assert_eq!(out.status, ExitStatus::Code(0));

    let marker = tb.scratch_dir().join(format!("survivor-{}", token()));
    let started = Instant::now();
    let out = ex
        .run(&format!(
            "(sleep 1; touch '{}') >/dev/null 2>&1 & echo started",
            marker.display()
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout(), b"started\n");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "waited for a redirected child"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        marker.exists(),
        "the redirected background child was killed"
    );
}

#[tokio::test]
async fn timeouts_and_dropped_futures_kill_the_whole_group_through_the_runner() {
    for (tb, runner) in runner_hosts() {
        kills(&tb, runner).await;
    }
}

async fn kills(tb: &Testbed, runner: &str) {
    let ex = host_executor(tb, Runner::Resident, runner).await;
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
    assert_eq!(out.stdout(), b"ready\n");
    assert!(
        wait_until_gone(&pattern, Duration::from_secs(3))
            .await
            .is_empty()
    );

    let pattern = format!("sleep 301.{t}");
    let command = format!("{pattern} & {pattern}");
    let _ = tokio::time::timeout(Duration::from_millis(400), ex.run(&command)).await;
    assert!(
        wait_until_gone(&pattern, Duration::from_secs(3))
            .await
            .is_empty()
    );
    let stats = ex.pool_stats();
    assert_eq!((stats.runners_started, stats.kills), (1, 2), "{stats:?}");
    assert!(
        stats.runner.as_deref().unwrap_or("").starts_with(runner),
        "{stats:?}"
    );
}

#[tokio::test]
async fn a_runner_killed_mid_command_fails_it_as_may_have_run_and_the_next_gets_a_new_one() {
    for (tb, runner) in runner_hosts() {
        runner_death(&tb, runner).await;
    }
}

async fn runner_death(tb: &Testbed, runner: &str) {
    let ex = host_executor(tb, Runner::Resident, runner).await;
    let pid = runner_pid(&ex).await;
    let t = token();
    let pattern = format!("sleep 303.{t}");
    let command = ex.clone();
    let pattern_in = pattern.clone();
    let running = tokio::spawn(async move {
        command
            .run(&format!("echo started; {pattern_in} & {pattern_in}"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the command hung after its runner died")
        .unwrap();
    assert!(
        matches!(result, Err(Error::RunnerLost { .. })),
        "{result:?}"
    );
    // Its group is killed from a new channel.
    assert!(
        wait_until_gone(&pattern, Duration::from_secs(5))
            .await
            .is_empty()
    );
    let out = ex.run("echo again").await.unwrap();
    assert_eq!(out.stdout(), b"again\n");
    let stats = ex.pool_stats();
    assert_eq!(
        (stats.runners_started, stats.runners_lost),
        (2, 1),
        "{stats:?}"
    );
    assert_ne!(runner_pid(&ex).await, pid);
}

#[tokio::test]
async fn ten_thousand_commands_on_one_runner_leak_no_process_descriptor_or_memory() {
    let tb = testbed();
    let ex = executor(&tb, Runner::Resident).await;
    let pid = runner_pid(&ex).await;
    for _ in 0..100 {
        ex.run("true").await.unwrap();
    }
    let fds = || proc_count(format!("/proc/{pid}/fd"));
    let rss = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("VmRSS:").map(|v| {
                    v.trim()
                        .trim_end_matches(" kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap()
                })
            })
            .unwrap()
    };
    let (fds_before, rss_before) = (fds(), rss());
    let mut failures = 0;
    for i in 0..10_000 {
        let command = if i % 2 == 0 {
            "true"
        } else {
            "echo out; echo err >&2"
        };
        match ex.run(command).await {
            Ok(out) if out.status == ExitStatus::Code(0) => {}
            _ => failures += 1,
        }
    }
    assert_eq!(failures, 0);
    assert_eq!(runner_pid(&ex).await, pid, "the runner was replaced");
    assert_eq!(fds(), fds_before, "descriptors leaked");
    assert!(
        rss() < rss_before + 2048,
        "the runner grew from {rss_before} to {} KiB",
        rss()
    );
    assert!(
        children(pid).is_empty(),
        "children left: {:?}",
        children(pid)
    );
    let stats = ex.pool_stats();
    assert_eq!(stats.runners_started, 1, "{stats:?}");
    assert!(stats.runner_commands >= 10_100, "{stats:?}");
}

/// A host whose account's `PATH` has BusyBox's tools (a BusyBox system) and, of the
/// runner's interpreters, only `interpreters` (`perl`, `python3`).
fn host_with(interpreters: &[&str]) -> Testbed {
    let bin = std::env::temp_dir().join(format!("swiftide-runner-path-{}", token()));
    std::fs::create_dir_all(&bin).unwrap();
    let busybox = which("busybox");
    for tool in [
        "sh",
        "echo",
        "cat",
        "sleep",
        "setsid",
        "kill",
        "tr",
        "id",
        "env",
        "printf",
        "grep",
        "head",
        "pwd",
        "sha256sum",
        "mkdir",
        "chmod",
        "mv",
        "rm",
    ] {
        std::os::unix::fs::symlink(&busybox, bin.join(tool)).unwrap();
    }
    std::os::unix::fs::symlink(which("ps"), bin.join("ps")).unwrap();
    for interpreter in interpreters {
        // Debian's own, not a version manager's shim that needs its own PATH.
        std::os::unix::fs::symlink(format!("/usr/bin/{interpreter}"), bin.join(interpreter))
            .unwrap();
    }
    Testbed::builder()
        .sshd_config_line(format!("SetEnv PATH={}", bin.display()))
        .start()
        .unwrap()
}

/// The hosts every runner test runs on: one per program that can run the runner (this
/// machine's accounts have Python 3.8 or later, which comes first), the last a BusyBox
/// host with neither Perl nor Python, where only the helper can run it.
fn runner_hosts() -> Vec<(Testbed, &'static str)> {
    vec![
        (testbed(), "python 3."),
        (host_with(&["perl"]), "perl "),
        (host_with(&[]), "helper "),
    ]
}

#[tokio::test]
async fn the_helper_is_installed_privately_and_an_altered_copy_never_runs() {
    // A home of its own: other tests run the helper from the shared one meanwhile.
    let home = std::env::temp_dir().join(format!("swiftide-helper-home-{}", token()));
    std::fs::create_dir_all(&home).unwrap();
    let tb = Testbed::builder()
        .sshd_config_line(format!("SetEnv HOME={}", home.display()))
        .start()
        .unwrap();
    let binary = helper_binary();
    let sha256 = {
        let out = std::process::Command::new("sha256sum")
            .arg(common::runner_helper_path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let ex = host_executor(&tb, Runner::Resident, "helper").await;
    let said = ex.run("printf %s \"$HOME\"").await.unwrap().stdout_lossy();
    assert_eq!(std::path::Path::new(&said), home);
    let dir = home.join(".cache/swiftide-ssh");
    let copy = dir.join(format!("runner-{sha256}"));
    let stats = ex.pool_stats();
    assert!(
        stats.runner.as_deref().unwrap_or("").starts_with("helper "),
        "{stats:?}"
    );
    assert_eq!(std::fs::read(&copy).unwrap(), binary);
    let mode = |path: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions())
            & 0o777
    };
    assert_eq!((mode(&dir), mode(&copy)), (0o700, 0o700));

    // A copy altered on the host is never run: the next start finds its checksum wrong and
    // writes it again.
    let marker = tb
        .scratch_dir()
        .join(format!("altered-helper-ran-{}", token()));
    // Replaced, not written over: the copy is running (a write would fail, "text file busy").
    std::fs::remove_file(&copy).unwrap();
    std::fs::write(
        &copy,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let again = host_executor(&tb, Runner::Resident, "helper").await;
    let out = again.run("echo through the helper").await.unwrap();
    assert_eq!(out.stdout_lossy(), "through the helper\n");
    assert!(!marker.exists(), "the altered copy ran");
    assert!(
        again
            .pool_stats()
            .runner
            .as_deref()
            .unwrap_or("")
            .starts_with("helper "),
        "{:?}",
        again.pool_stats()
    );
    assert_eq!(std::fs::read(&copy).unwrap(), binary);

    // A helper that cannot run on this host (not a program for it): Python runs the runner.
    let foreign = builder(&tb)
        .runner(Runner::Resident)
        .runner_helper(b"\x7fELF, but not for this host".to_vec())
        .build()
        .await
        .unwrap();
    assert_eq!(foreign.run("echo hi").await.unwrap().stdout_lossy(), "hi\n");
    let stats = foreign.pool_stats();
    assert!(
        stats
            .runner
            .as_deref()
            .unwrap_or("")
            .starts_with("python 3."),
        "{stats:?}"
    );
    drop((ex, again, foreign, tb));
    std::fs::remove_dir_all(&home).ok();
}

/// Under `Runner::Auto` no command waits for a runner's start: the first ones on a connection
/// go per exec while the runner starts in the background, and the later ones take it.
#[tokio::test]
async fn under_auto_no_command_waits_for_the_runners_start() {
    let tb = testbed();
    let auto = executor(&tb, Runner::Auto).await;
    let first = auto.run("echo first; exit 3").await.unwrap();
    assert_eq!(
        (first.stdout(), first.status.clone()),
        (b"first\n".to_vec(), ExitStatus::Code(3))
    );
    let stats = auto.pool_stats();
    assert_eq!(
        stats.runner_commands, 0,
        "the first command waited: {stats:?}"
    );
    let stats = common::stats_when(&auto, |stats| stats.runners_started == 1).await;
    assert_eq!(stats.runners_started, 1, "{stats:?}");
    for round in 0..3 {
        let out = auto.run("echo later").await.unwrap();
        assert_eq!(out.stdout(), b"later\n", "round {round}");
    }
    let stats = auto.pool_stats();
    assert_eq!(
        (stats.runners_started, stats.runner_commands),
        (1, 3),
        "{stats:?}"
    );
}

#[tokio::test]
async fn a_host_without_perl_or_python_runs_per_exec_under_auto_and_refuses_resident() {
    let tb = host_with(&[]);
    let auto = executor(&tb, Runner::Auto).await;
    for _ in 0..3 {
        let out = auto
            .run("echo $PATH | grep -c swiftide-runner-path; exit 4")
            .await
            .unwrap();
        assert_eq!(
            (out.stdout(), out.status.clone()),
            (b"1\n".to_vec(), ExitStatus::Code(4))
        );
    }
    // The start that found no interpreter ran in the background, once.
    let stats = common::stats_when(&auto, |stats| stats.runner_fallbacks > 0).await;
    assert_eq!(
        (
            stats.runner.clone(),
            stats.runners_started,
            stats.runner_fallbacks,
            stats.runner_commands
        ),
        (None, 0, 1, 0),
        "{stats:?}"
    );
    // A timeout still kills the group on the per-exec path.
    let t = token();
    let out = auto
        .execute(
            &format!("sleep 304.{t}"),
            ExecOptions::default().timeout(Duration::from_millis(300)),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(matches!(out.status, ExitStatus::TimedOut { .. }));
    assert!(
        wait_until_gone(&format!("sleep 304.{t}"), Duration::from_secs(3))
            .await
            .is_empty()
    );

    let resident = executor(&tb, Runner::Resident).await;
    match resident.run("echo never").await {
        Err(Error::RunnerUnavailable { reason, .. }) => {
            assert!(
                reason.contains("127") || reason.contains("perl"),
                "{reason}"
            );
        }
        other => panic!("expected RunnerUnavailable, got {other:?}"),
    }
}

fn which(tool: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[tokio::test]
async fn jobs_start_through_the_python_runner_and_read_back_from_its_mirror() {
    let tb = testbed();
    let ex = executor(&tb, Runner::Resident).await;
    // A running job: its `pid` record names its supervisor, a fork of the Python runner (a
    // shell start's runner is `sh`).
    let job = ex
        .spawn_job(
            "printf 'out\\0put'; printf err >&2; sleep 30",
            JobOptions::new(),
        )
        .await
        .unwrap();
    let record = std::fs::read_to_string(job.dir().join("pid")).unwrap();
    let supervisor: u32 = record.split_whitespace().nth(2).unwrap().parse().unwrap();
    let cmdline = std::fs::read(format!("/proc/{supervisor}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("python3"),
        "{}",
        String::from_utf8_lossy(&cmdline)
    );
    job.kill(Duration::from_secs(1)).await.unwrap();
    assert!(matches!(
        job.wait(Duration::from_secs(10)).await.unwrap(),
        JobStatus::Exited(_)
    ));
    // What the handle reads (from its mirror) is what the files hold, ends included.
    for (stream, file) in [(JobStream::Stdout, "stdout"), (JobStream::Stderr, "stderr")] {
        let spooled = std::fs::read(job.dir().join(file)).unwrap();
        let out = job.read(stream, 0, 1 << 20).await.unwrap();
        assert!(out.eof, "{stream:?}");
        assert_eq!(out.bytes, spooled);
        let middle = job.read(stream, 1, 1).await.unwrap();
        assert_eq!((&middle.bytes[..], middle.eof), (&spooled[1..2], false));
    }
    // Removed by another client: the mirror does not outlive the files.
    let other = executor(&tb, Runner::PerExec).await;
    other.job(job.id()).await.unwrap().remove().await.unwrap();
    assert!(matches!(
        job.read(JobStream::Stdout, 0, 100).await,
        Err(Error::JobNotFound { .. })
    ));
}
