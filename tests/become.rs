//! Privilege escalation (`Become`: sudo, doas, su) against real sshd servers whose login
//! accounts have real sudoers and doas rules (`swiftide_ssh_testbed::Escalation`): commands,
//! kills, files, `stream_files`, jobs and fleets as the target, and every way an escalation
//! can fail, typed and bounded.

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::{remote_processes, token, wait_until_gone};
use swiftide_core::{Command, ToolExecutor};
use swiftide_ssh_executor::{
    Become, BecomeFailure, BecomeMethod, Error, ExecOptions, ExitStatus, Fleet, HostStatus,
    JobOptions, JobStatus, JobStream, Runner, Secret, SshExecutor,
};
use swiftide_ssh_testbed::{
    BECOME_PASSWORD, BECOME_TARGET_PASSWORD, BECOME_TARGET_USER, Escalation, LoginShell, Testbed,
};

fn escalation_testbed(escalation: Escalation) -> Testbed {
    Testbed::builder()
        .escalation(escalation)
        .start()
        .unwrap_or_else(|e| panic!("cannot start a testbed with {escalation:?}: {e}"))
}

async fn login(testbed: &Testbed) -> SshExecutor {
    common::executor(testbed).await
}

fn sudo_with_password() -> Become {
    Become::sudo().password(Secret::new(BECOME_PASSWORD))
}

/// The uid of `name` on this machine (the testbed's host).
fn uid_of(name: &str) -> String {
    let out = std::process::Command::new("id")
        .args(["-u", name])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn become_failure(
    result: swiftide_ssh_executor::Result<impl std::fmt::Debug>,
) -> (BecomeFailure, String) {
    match result {
        Err(Error::BecomeFailed {
            reason,
            message,
            method,
            ..
        }) => {
            assert!(matches!(
                method,
                BecomeMethod::Sudo | BecomeMethod::Doas | BecomeMethod::Su
            ));
            (reason, message)
        }
        other => panic!("expected BecomeFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn nopasswd_sudo_runs_commands_as_root_exactly_as_they_run_unescalated() {
    let tb = escalation_testbed(Escalation::SudoNoPassword);
    for runner in [Runner::Resident, Runner::PerExec] {
        nopasswd_sudo_runs_commands_as_root(&tb, runner).await;
    }
}

/// The rounds of the test above through `runner`: the escalated runner, or one escalation
/// per command (pre-escalated spares).
async fn nopasswd_sudo_runs_commands_as_root(tb: &Testbed, runner: Runner) {
    let executor = common::builder(tb)
        .envs([("GREETING", "it's a \"test\"")])
        .runner(runner)
        .build()
        .await
        .unwrap();
    let root = executor.with_become(Become::sudo()).unwrap();
    assert_eq!(root.escalation().map(Become::target_user), Some("root"));
    let dir = tb.scratch_dir().join("with space");
    std::fs::create_dir_all(&dir).unwrap();
    // Several commands: the first connection learns its login shell under the escalation,
    // later ones take pre-started spares (`E` payloads).
    for round in 0..4 {
        let run = root
            .execute(
                "id -u; pwd; printf '%s\\n' \"$GREETING\"; echo to-stderr >&2; \
                 [ \"$(ps -o pgid= -p $$ | tr -d ' ')\" = \"$$\" ] && echo leader; exit 3",
                ExecOptions::default().current_dir(&dir),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(run.status, ExitStatus::Code(3), "round {round}");
        assert_eq!(
            String::from_utf8_lossy(&run.stdout()),
            format!("0\n{}\nit's a \"test\"\nleader\n", dir.display()),
            "round {round}"
        );
        assert_eq!(run.stderr(), b"to-stderr\n", "round {round}");
    }
    let stats = root.pool_stats();
    if runner == Runner::PerExec {
        // The later rounds found a shell the tool had started ahead of them.
        assert!(stats.escalated_spares_used >= 1, "{stats:?}");
    } else {
        // One runner, started through sudo once, ran every round.
        assert_eq!(
            (stats.runners_started, stats.runner_commands),
            (1, 4),
            "{stats:?}"
        );
    }
    // The unescalated handle on the same pool is still the login user.
    let me = executor.run("id -un").await.unwrap();
    assert_eq!(String::from_utf8_lossy(&me.stdout()).trim(), tb.user());
    // Through swiftide's ToolExecutor, the same.
    let output = root.exec_cmd(&Command::shell("id -un")).await.unwrap();
    assert_eq!(output.to_string(), "root\n");
    // Streaming: the first line arrives long before the command ends.
    let started = Instant::now();
    let mut first: Option<Duration> = None;
    let run = root
        .execute(
            "echo first; sleep 1; echo second",
            ExecOptions::default(),
            &mut |_| {
                first.get_or_insert(started.elapsed());
            },
        )
        .await
        .unwrap();
    assert_eq!(run.stdout(), b"first\nsecond\n");
    assert!(first.unwrap() < Duration::from_millis(900), "{first:?}");
    // A `#!` script and an exit by signal.
    let script = root.run("#!/bin/sh\nid -u\nkill -TERM $$").await.unwrap();
    assert_eq!(script.stdout(), b"0\n");
    assert!(
        matches!(script.status, ExitStatus::Signal { ref name, .. } if name == "TERM"),
        "{:?}",
        script.status
    );
}

#[tokio::test]
async fn sudo_to_another_account_and_sudo_flags() {
    let tb = escalation_testbed(Escalation::SudoNoPassword);
    let executor = login(&tb).await;
    let target = executor
        .with_become(Become::sudo().user(BECOME_TARGET_USER))
        .unwrap();
    let run = target.run("id -un; echo \"$HOME\"").await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout()),
        format!("{BECOME_TARGET_USER}\n/home/{BECOME_TARGET_USER}\n")
    );
    // A flag for the tool: `-g` picks the group.
    let grouped = executor
        .with_become(Become::sudo().flag("-g").flag("adm"))
        .unwrap();
    let run = grouped.run("id -gn").await.unwrap();
    assert_eq!(run.stdout(), b"adm\n");
    // Values that would change the request are refused before anything is sent.
    for bad in [Become::sudo().user("root; id"), Become::sudo().flag("it's")] {
        assert!(matches!(
            executor.with_become(bad),
            Err(Error::Config { .. })
        ));
    }
}

#[tokio::test]
async fn password_sudo_right_wrong_empty_and_missing() {
    let tb = escalation_testbed(Escalation::SudoPassword);
    let executor = login(&tb).await;

    let root = executor.with_become(sudo_with_password()).unwrap();
    for _ in 0..3 {
        let run = root.run("id -u").await.unwrap();
        assert_eq!(run.stdout(), b"0\n");
        assert!(
            run.stderr().is_empty(),
            "{:?}",
            String::from_utf8_lossy(&run.stderr())
        );
    }

    // Wrong: sudo's second prompt is not answered; typed, within sudo's own delay. (On a
    // connection of its own: sudo keeps an authentication for the connection.)
    let executor = login(&tb).await;
    let wrong = executor
        .with_become(Become::sudo().password("not-the-password"))
        .unwrap();
    let started = Instant::now();
    let (reason, message) = become_failure(wrong.run("touch /tmp/never-ran").await);
    assert_eq!(reason, BecomeFailure::IncorrectPassword, "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !message.contains("not-the-password") && !message.contains("swiftide-ssh-become"),
        "{message}"
    );
    assert!(!Path::new("/tmp/never-ran").exists());

    // Empty: sudo takes an empty line for no password at all.
    let executor = login(&tb).await;
    let empty = executor.with_become(Become::sudo().password("")).unwrap();
    let (reason, message) = become_failure(empty.run("true").await);
    assert!(
        matches!(
            reason,
            BecomeFailure::IncorrectPassword | BecomeFailure::PasswordRequired
        ),
        "{reason:?}: {message}"
    );

    // Missing: `sudo -n` fails at once, without reading stdin.
    let executor = login(&tb).await;
    let none = executor.with_become(Become::sudo()).unwrap();
    let started = Instant::now();
    let (reason, message) = become_failure(none.run("true").await);
    assert_eq!(reason, BecomeFailure::PasswordRequired, "{message}");
    assert!(started.elapsed() < Duration::from_secs(3));

    // A provider that has none: the prompt is not answered.
    let executor = login(&tb).await;
    let unanswered = executor
        .with_become(
            Become::sudo().password_provider(|_: &swiftide_ssh_executor::PasswordRequest| None),
        )
        .unwrap();
    let (reason, _) = become_failure(unanswered.run("true").await);
    assert_eq!(reason, BecomeFailure::PasswordRequired);

    // A provider asked with the request's particulars.
    let executor = login(&tb).await;
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let provided = executor
        .with_become(Become::sudo().password_provider(
            move |request: &swiftide_ssh_executor::PasswordRequest| {
                seen.lock()
                    .unwrap()
                    .push((request.login_user.clone(), request.target_user.clone()));
                Some(Secret::new(BECOME_PASSWORD))
            },
        ))
        .unwrap();
    assert_eq!(provided.run("id -u").await.unwrap().stdout(), b"0\n");
    assert_eq!(
        asked.lock().unwrap()[0],
        (tb.user().to_owned(), "root".to_owned())
    );

    // The swiftide door: an executor error, not a command failure.
    let wrong = login(&tb)
        .await
        .with_become(Become::sudo().password("not-the-password"))
        .unwrap();
    let error = wrong.exec_cmd(&Command::shell("true")).await.unwrap_err();
    assert!(error.to_string().contains("incorrect password"), "{error}");
}

/// Through the resident runner, a password escalation is one exchange per connection: the
/// runner started through `sudo -S` runs every later command as root. A handle without the
/// password, or with another, never uses it.
#[tokio::test]
async fn a_password_escalation_answers_one_prompt_for_many_commands() {
    let tb = escalation_testbed(Escalation::SudoPassword);
    let executor = common::builder(&tb)
        .runner(Runner::Resident)
        .build()
        .await
        .unwrap();
    let (asked, provider) = counting_provider(BECOME_PASSWORD);
    let root = executor
        .with_become(Become::sudo().password_provider(provider))
        .unwrap();
    for round in 0..5 {
        let run = root.run("id -u; echo err >&2; exit 2").await.unwrap();
        assert_eq!(
            (run.status.clone(), run.stdout(), run.stderr()),
            (ExitStatus::Code(2), b"0\n".to_vec(), b"err\n".to_vec()),
            "round {round}"
        );
    }
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    let stats = root.pool_stats();
    assert_eq!(
        (stats.runners_started, stats.runner_commands),
        (1, 5),
        "{stats:?}"
    );

    // Same pool, same target, no password: sudo -n decides, as it would per exec.
    let none = executor.with_become(Become::sudo()).unwrap();
    let (reason, message) = become_failure(none.run("touch /tmp/never-ran-none").await);
    assert_eq!(reason, BecomeFailure::PasswordRequired, "{message}");
    let wrong = executor
        .with_become(Become::sudo().password("not-the-password"))
        .unwrap();
    let (reason, message) = become_failure(wrong.run("touch /tmp/never-ran-wrong").await);
    assert_eq!(reason, BecomeFailure::IncorrectPassword, "{message}");
    assert!(!Path::new("/tmp/never-ran-none").exists());
    assert!(!Path::new("/tmp/never-ran-wrong").exists());
    // Handles built apart with the same fixed password share one runner.
    let started = root.pool_stats().runners_started;
    for _ in 0..2 {
        let again = executor
            .with_become(Become::sudo().password(BECOME_PASSWORD))
            .unwrap();
        assert_eq!(again.run("id -u").await.unwrap().stdout(), b"0\n");
    }
    assert_eq!(root.pool_stats().runners_started, started + 1);
    // Nor the escalated SFTP channel the first handle opened: a root-only file is read by
    // the handle with the password only.
    let secret = tb.scratch_dir().join("root-only.txt");
    std::fs::write(&secret, "root only").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_eq!(root.read_file_bytes(&secret).await.unwrap(), b"root only");
    let (reason, message) = become_failure(none.read_file_bytes(&secret).await.map(|_| ()));
    assert_eq!(reason, BecomeFailure::PasswordRequired, "{message}");
    // The first handle's runner still serves it, and starts its jobs (as root, in root's
    // state directory).
    assert_eq!(root.run("id -un").await.unwrap().stdout(), b"root\n");
    let before = root.pool_stats().runner_commands;
    let id = format!("runner-become-{}", token());
    let job = root
        .spawn_job("id -u; echo done", JobOptions::new().id(&id))
        .await
        .unwrap();
    assert_eq!(
        job.wait(Duration::from_secs(20)).await.unwrap(),
        JobStatus::Exited(ExitStatus::Code(0))
    );
    let out = job.read(JobStream::Stdout, 0, 1 << 20).await.unwrap();
    assert_eq!(&out.bytes[..], b"0\ndone\n");
    assert!(
        Path::new("/root/.local/state/swiftide-ssh/jobs")
            .join(&id)
            .is_dir()
    );
    let stats = root.pool_stats();
    // The provider's runner and the fixed password's: no third.
    assert_eq!(stats.runners_started, 2, "{stats:?}");
    assert!(stats.runner_commands > before, "{stats:?}");
}

/// A password provider that counts how often it was asked.
fn counting_provider(
    password: &'static str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    impl swiftide_ssh_executor::PasswordProvider + 'static,
) {
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = asked.clone();
    let provider = move |_: &swiftide_ssh_executor::PasswordRequest| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(Secret::new(password))
    };
    (asked, provider)
}

/// Under `Runner::Auto` no escalated command waits for the runner's start: the runner
/// starts through the tool in the background, and only once a command has shown the
/// password good, so a wrong password costs one attempt per command, never more.
#[tokio::test]
async fn under_auto_the_escalated_runner_starts_in_the_background_once_the_password_is_good() {
    use std::sync::atomic::Ordering::SeqCst;
    let tb = escalation_testbed(Escalation::SudoPassword);
    let executor = common::builder(&tb)
        .runner(Runner::Auto)
        .build()
        .await
        .unwrap();
    let (wrong_asked, wrong_provider) = counting_provider("not-the-password");
    let wrong = executor
        .with_become(Become::sudo().password_provider(wrong_provider))
        .unwrap();
    for _ in 0..2 {
        let (reason, message) = become_failure(wrong.run("true").await);
        assert_eq!(reason, BecomeFailure::IncorrectPassword, "{message}");
    }
    assert_eq!(wrong_asked.load(SeqCst), 2);
    assert_eq!(executor.pool_stats().runners_started, 0);

    let (asked, provider) = counting_provider(BECOME_PASSWORD);
    let root = executor
        .with_become(Become::sudo().password_provider(provider))
        .unwrap();
    // The first command escalates per exec; once the tool has let it through, the runner's
    // start through the tool is set off beside it.
    assert_eq!(root.run("id -u").await.unwrap().stdout(), b"0\n");
    let stats = common::stats_when(&root, |stats| stats.runners_started == 1).await;
    assert_eq!(
        (stats.runners_started, stats.runner_commands),
        (1, 0),
        "{stats:?}"
    );
    assert_eq!(asked.load(SeqCst), 2);
    for _ in 0..5 {
        assert_eq!(root.run("id -u").await.unwrap().stdout(), b"0\n");
    }
    let stats = root.pool_stats();
    assert_eq!(
        (stats.runners_started, stats.runner_commands),
        (1, 5),
        "{stats:?}"
    );
    assert_eq!(asked.load(SeqCst), 2);
    assert_eq!(wrong_asked.load(SeqCst), 2);
}

#[tokio::test]
async fn requiretty_not_in_sudoers_and_unknown_users_are_typed_and_quick() {
    let tty = escalation_testbed(Escalation::SudoRequireTty);
    let executor = login(&tty).await;
    let root = executor.with_become(Become::sudo()).unwrap();
    let (reason, message) = become_failure(root.run("true").await);
    assert_eq!(reason, BecomeFailure::TerminalRequired, "{message}");
    assert!(message.contains("tty"), "{message}");

    let outsider = escalation_testbed(Escalation::SudoNotInSudoers);
    let executor = login(&outsider).await;
    let root = executor.with_become(sudo_with_password()).unwrap();
    let (reason, message) = become_failure(root.run("true").await);
    assert_eq!(reason, BecomeFailure::NotAllowed, "{message}");
    assert!(message.contains("sudoers"), "{message}");

    let nopasswd = escalation_testbed(Escalation::SudoNoPassword);
    let executor = login(&nopasswd).await;
    let nobody = executor
        .with_become(Become::sudo().user("swiftide-no-such-account"))
        .unwrap();
    let (reason, message) = become_failure(nobody.run("true").await);
    assert_eq!(reason, BecomeFailure::UnknownUser, "{message}");
    // A tool that is not there.
    let doas_missing_rule = executor.with_become(Become::doas()).unwrap();
    let (reason, message) = become_failure(doas_missing_rule.run("true").await);
    assert_eq!(reason, BecomeFailure::NotAllowed, "{message}");
}

#[tokio::test]
async fn a_lecture_and_output_that_looks_like_a_prompt_are_never_answered() {
    let tb = escalation_testbed(Escalation::SudoLecture);
    let executor = login(&tb).await;
    let root = executor.with_become(sudo_with_password()).unwrap();
    // The lecture is sudo's, before the hand-over: not in the command's output.
    let run = root
        .run(
            "echo 'Password:' >&2; printf '[sudo] password for root: '; \
              read -r answer; echo \"read:${answer:-nothing}\"",
        )
        .await
        .unwrap();
    assert_eq!(run.status, ExitStatus::Code(0));
    assert_eq!(
        String::from_utf8_lossy(&run.stdout()),
        "[sudo] password for root: read:nothing\n"
    );
    assert_eq!(run.stderr(), b"Password:\n");
    let everything = [run.stdout(), run.stderr()].concat();
    assert!(!String::from_utf8_lossy(&everything).contains(BECOME_PASSWORD));
    // Again: sudo lectures every time here, and every time it stays out.
    let again = root.run("echo ok").await.unwrap();
    assert_eq!(
        (again.stdout(), again.stderr()),
        (b"ok\n".to_vec(), Vec::new())
    );
}

#[tokio::test]
async fn su_and_doas() {
    let su = escalation_testbed(Escalation::Su);
    let executor = login(&su).await;
    let target = executor
        .with_become(
            Become::su()
                .user(BECOME_TARGET_USER)
                .password(BECOME_TARGET_PASSWORD),
        )
        .unwrap();
    for _ in 0..2 {
        let run = target.run("id -un; echo err >&2").await.unwrap();
        assert_eq!(
            (run.stdout(), run.stderr()),
            (
                format!("{BECOME_TARGET_USER}\n").into_bytes(),
                b"err\n".to_vec()
            )
        );
    }
    let wrong = login(&su)
        .await
        .with_become(Become::su().user(BECOME_TARGET_USER).password("wrong"))
        .unwrap();
    let (reason, message) = become_failure(wrong.run("true").await);
    assert_eq!(reason, BecomeFailure::IncorrectPassword, "{message}");
    let none = executor
        .with_become(Become::su().user(BECOME_TARGET_USER))
        .unwrap();
    let (reason, _) = become_failure(none.run("true").await);
    assert_eq!(reason, BecomeFailure::PasswordRequired);

    let doas = escalation_testbed(Escalation::DoasNoPassword);
    let executor = login(&doas).await;
    let root = executor.with_become(Become::doas()).unwrap();
    let run = root.run("id -u; echo err >&2; exit 4").await.unwrap();
    assert_eq!(
        (run.status.clone(), run.stdout(), run.stderr()),
        (ExitStatus::Code(4), b"0\n".to_vec(), b"err\n".to_vec())
    );
    let doas_password = escalation_testbed(Escalation::DoasPassword);
    let executor = login(&doas_password).await;
    let root = executor
        .with_become(Become::doas().password(BECOME_PASSWORD))
        .unwrap();
    let (reason, message) = become_failure(root.run("true").await);
    assert_eq!(reason, BecomeFailure::PasswordRequired, "{message}");
}

/// The `sleep <marker>` processes on the host (not the shells whose command lines name it).
fn sleeps(marker: &str) -> Vec<String> {
    let wanted = format!("sleep {marker}");
    remote_processes(&wanted)
        .into_iter()
        .filter(|line| line.split_once(' ').is_some_and(|(_, args)| args == wanted))
        .collect()
}

/// Processes of a root command tree, started under become, that outlive a kill: none may.
async fn assert_root_tree_dies(
    root: &SshExecutor,
    kill: impl FnOnce(SshExecutor, String) -> futures::future::BoxFuture<'static, ()>,
) {
    let marker = format!("{}.5", token());
    // Two background members and a foreground one, all ignoring TERM and HUP.
    let task = tokio::spawn(kill(
        root.clone(),
        format!("trap '' TERM HUP; sleep {marker} & sh -c 'sleep {marker}' & sleep {marker}"),
    ));
    // The tree runs as root.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeps(&marker).len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running = sleeps(&marker);
    assert_eq!(running.len(), 3, "{running:?}");
    for line in &running {
        let pid = line.split_whitespace().next().unwrap();
        let owner = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        assert!(
            owner.lines().any(|l| l.starts_with("Uid:\t0\t")),
            "{line}: {owner}"
        );
    }
    task.await.unwrap();
    let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
    assert!(left.is_empty(), "survived the kill: {left:?}");
}

#[tokio::test]
async fn timeouts_cancels_and_lost_clients_kill_the_whole_root_group() {
    let tb = escalation_testbed(Escalation::SudoPassword);
    let executor = login(&tb).await;
    let root = executor.with_become(sudo_with_password()).unwrap();
    // Timeout: TERM is ignored by the tree, so the grace runs out and KILL takes the group.
    assert_root_tree_dies(&root, |root, command| {
        Box::pin(async move {
            let run = root
                .execute(
                    &command,
                    ExecOptions::default().timeout(Duration::from_millis(1500)),
                    &mut |_| {},
                )
                .await
                .unwrap();
            assert!(
                matches!(run.status, ExitStatus::TimedOut { .. }),
                "{:?}",
                run.status
            );
        })
    })
    .await;
    // Cancellation: the caller's future is dropped.
    assert_root_tree_dies(&root, |root, command| {
        Box::pin(async move {
            let run = root.run(&command);
            let _ = tokio::time::timeout(Duration::from_millis(1500), run).await;
        })
    })
    .await;
    // The connection goes away under a running command: sshd's processes for it die, the
    // command's stdin closes, and its supervisor (root, like the command) kills the group.
    let marker = format!("{}.7", token());
    let tree = root.clone();
    let command = format!("trap '' TERM HUP; sleep {marker} & sleep {marker}");
    let running = tokio::spawn(async move { tree.run(&command).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeps(&marker).len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sleeps(&marker).len(), 2);
    for pid in tb.connection_pids() {
        let _ = std::process::Command::new("kill")
            .args(["-s", "KILL", &pid.to_string()])
            .status();
    }
    let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
    assert!(left.is_empty(), "survived the lost connection: {left:?}");
    let outcome = running.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::ConnectionLost { .. })) || outcome.is_ok(),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn files_as_root_keep_owner_group_and_mode_and_leave_nothing_readable() {
    let tb = escalation_testbed(Escalation::SudoPassword);
    let executor = login(&tb).await;
    let root = executor.with_become(sudo_with_password()).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("swiftide-become-")
        .tempdir_in("/etc")
        .unwrap();
    std::process::Command::new("chmod")
        .arg("700")
        .arg(dir.path())
        .status()
        .unwrap();
    let path = dir.path().join("app.conf");
    std::fs::write(&path, "old\n").unwrap();
    std::process::Command::new("chown")
        .arg("daemon:adm")
        .arg(&path)
        .status()
        .unwrap();
    std::process::Command::new("chmod")
        .arg("640")
        .arg(&path)
        .status()
        .unwrap();

    // The login user can do none of this.
    assert!(executor.read_file_bytes(&path).await.is_err());

    // Atomic write over SFTP as root: owner, group and mode kept, content replaced.
    root.write_file_bytes(&path, b"new\n").await.unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (uid_of("daemon").parse().unwrap(), 4, 0o640)
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"new\n");
    assert_eq!(root.read_file_bytes(&path).await.unwrap(), b"new\n");
    // Through swiftide's file commands.
    let written = dir.path().join("created by agent");
    root.exec_cmd(&Command::write_file(&written, "hello"))
        .await
        .unwrap();
    assert_eq!(
        root.exec_cmd(&Command::read_file(&written))
            .await
            .unwrap()
            .to_string(),
        "hello"
    );
    let meta = std::fs::metadata(&written).unwrap();
    assert_eq!(meta.uid(), 0);
    // Listings and stream_files in a directory only root may read.
    let names: Vec<String> = root
        .list_dir(dir.path())
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    assert!(names.contains(&"app.conf".to_owned()), "{names:?}");
    use futures::StreamExt;
    let streamed: Vec<_> = root
        .stream_files(dir.path(), None)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(streamed.len(), 2, "{streamed:?}");
    // Nothing of the write is left behind: no temporary file, in the directory or in /tmp.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("swiftide"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn files_fall_back_to_scripts_where_no_sftp_server_can_be_started() {
    // Dropbear without SFTP: the sftp-server binary is masked for its sessions, so the
    // escalated channel finds none and files go through escalated scripts.
    let tb = Testbed::builder()
        .dropbear()
        .sftp(false)
        .escalation(Escalation::SudoNoPassword)
        .start()
        .unwrap();
    let executor = login(&tb).await;
    let root = executor.with_become(Become::sudo()).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("swiftide-become-")
        .tempdir_in("/etc")
        .unwrap();
    let path = dir.path().join("owned");
    std::fs::write(&path, "old").unwrap();
    std::process::Command::new("chown")
        .arg("daemon:adm")
        .arg(&path)
        .status()
        .unwrap();
    std::process::Command::new("chmod")
        .arg("604")
        .arg(&path)
        .status()
        .unwrap();
    root.write_file_bytes(&path, b"replaced").await.unwrap();
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (meta.uid().to_string(), meta.mode() & 0o7777),
        (uid_of("daemon"), 0o604)
    );
    assert_eq!(root.read_file_bytes(&path).await.unwrap(), b"replaced");
    let run = root.run("id -u").await.unwrap();
    assert_eq!(run.stdout(), b"0\n");
}

#[tokio::test]
async fn jobs_as_root_are_private_and_reattach_from_a_new_executor() {
    let tb = escalation_testbed(Escalation::SudoPassword);
    let executor = login(&tb).await;
    let root = executor.with_become(sudo_with_password()).unwrap();
    let id = format!("become-{}", token());
    let job = root
        .spawn_job(
            "id -u; echo err >&2; sleep 1; echo done",
            JobOptions::new().id(&id),
        )
        .await
        .unwrap();
    // Another client process would hold another executor: a new one, on a new pool.
    let other = login(&tb).await.with_become(sudo_with_password()).unwrap();
    let again = other.job(&id).await.unwrap();
    assert_eq!(
        again.wait(Duration::from_secs(20)).await.unwrap(),
        JobStatus::Exited(ExitStatus::Code(0))
    );
    let out = again.read(JobStream::Stdout, 0, 1 << 20).await.unwrap();
    assert_eq!(&out.bytes[..], b"0\ndone\n");
    let err = job.read(JobStream::Stderr, 0, 1 << 20).await.unwrap();
    assert_eq!(&err.bytes[..], b"err\n");
    // The job's state is root's: not in the login's list, nor readable by it.
    assert!(
        executor.job(&id).await.is_err(),
        "the login user sees root's job"
    );
    let dir = Path::new("/root/.local/state/swiftide-ssh/jobs").join(&id);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700));
    // A root job's kill goes through the escalation too.
    let long = root
        .spawn_job("trap '' TERM; sleep 300", JobOptions::new())
        .await
        .unwrap();
    long.kill(Duration::from_millis(200)).await.unwrap();
    let status = long.wait(Duration::from_secs(20)).await.unwrap();
    assert!(
        matches!(status, JobStatus::Exited(ExitStatus::Signal { .. })),
        "{status:?}"
    );
    long.remove().await.unwrap();
    again.remove().await.unwrap();
}

#[tokio::test]
async fn fleets_report_the_host_whose_escalation_failed_on_its_own() {
    let good = escalation_testbed(Escalation::SudoNoPassword);
    let bad = escalation_testbed(Escalation::SudoPassword);
    let members = vec![
        (
            "good".to_owned(),
            common::builder(&good).build_lazy().unwrap(),
        ),
        (
            "bad".to_owned(),
            common::builder(&bad).build_lazy().unwrap(),
        ),
    ];
    let fleet = Fleet::named(members)
        .with_become(Become::sudo())
        .unwrap()
        .retry_unreachable(3, Duration::from_millis(10));
    let report = fleet.run("id -u", |_| {}).await;
    let statuses = report.statuses();
    assert_eq!(statuses[0].1, HostStatus::Ok);
    assert_eq!(
        statuses[1].1,
        HostStatus::BecomeFailed {
            reason: BecomeFailure::PasswordRequired
        }
    );
    let records = report.records(false);
    assert_eq!(records[1].status, "become_failed");
    assert_eq!(
        records[1].become_failure.as_deref(),
        Some("password_required")
    );
    assert_eq!(
        records[1].attempts, 1,
        "an escalation failure is never retried"
    );
    assert_eq!(records[1].host_status(), statuses[1].1);
    assert_eq!(records[0].stdout.as_deref(), Some("0\n"));
    assert_eq!(report.exit_code(), 4);
    let folded: Vec<String> = report
        .fold()
        .iter()
        .map(|group| group.to_string())
        .collect();
    assert!(
        folded
            .iter()
            .any(|group| group.contains("become failed (a password is required)")),
        "{folded:?}"
    );
}

#[tokio::test]
async fn other_login_shells_and_dropbear_escalate_the_same() {
    for (name, builder) in [
        ("fish", Testbed::builder().login_shell(LoginShell::Fish)),
        ("tcsh", Testbed::builder().login_shell(LoginShell::Tcsh)),
        ("dropbear", Testbed::builder().dropbear()),
    ] {
        let tb = builder
            .escalation(Escalation::SudoPassword)
            .start()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let executor = login(&tb).await;
        let root = executor.with_become(sudo_with_password()).unwrap();
        for _ in 0..3 {
            let run = root
                .run("id -u; printf '%s' \"it's\" >&2; exit 5")
                .await
                .unwrap();
            assert_eq!(
                (run.status.clone(), run.stdout(), run.stderr()),
                (ExitStatus::Code(5), b"0\n".to_vec(), b"it's".to_vec()),
                "{name}"
            );
        }
        // On a connection of its own: sudo keeps a successful authentication for the
        // connection (its parent process) and would not ask again on this one.
        let (reason, _) = become_failure(
            login(&tb)
                .await
                .with_become(Become::sudo().password("wrong"))
                .unwrap()
                .run("true")
                .await,
        );
        assert_eq!(reason, BecomeFailure::IncorrectPassword, "{name}");
        // A timeout still kills the root group (Dropbear: through the new session).
        let token = token();
        let run = root
            .execute(
                &format!("sleep {token}.9 & sleep {token}.9"),
                ExecOptions::default().timeout(Duration::from_millis(800)),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert!(matches!(run.status, ExitStatus::TimedOut { .. }), "{name}");
        let left = wait_until_gone(&format!("sleep {token}.9"), Duration::from_secs(10)).await;
        assert!(left.is_empty(), "{name}: {left:?}");
    }
}

// ---- The Docker images: a Debian host with sudo, doas and a root password for su, and a
// BusyBox-only Dropbear host where su is the one way up.

macro_rules! require_docker {
    () => {
        if let Err(reason) = swiftide_ssh_testbed::DockerTestbed::available() {
            swiftide_ssh_testbed::skip_unless_ci(&reason, "bash testbed/docker/prepare.sh");
            return;
        }
    };
}

async fn docker(
    builder: swiftide_ssh_testbed::DockerTestbedBuilder,
) -> swiftide_ssh_testbed::DockerTestbed {
    tokio::task::spawn_blocking(move || builder.start())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start the Docker testbed: {e}"))
}

#[tokio::test]
async fn the_debian_image_escalates_with_sudo_doas_and_su_to_root() {
    require_docker!();
    use swiftide_ssh_testbed::{DockerTestbed, ROOT_PASSWORD};
    let cases = [
        ("sudo-nopasswd", Become::sudo()),
        ("sudo-password", sudo_with_password()),
        ("doas-nopass", Become::doas()),
        ("tester", Become::su().password(ROOT_PASSWORD)),
    ];
    for (user, escalation) in cases {
        let tb = docker(DockerTestbed::builder().user(user)).await;
        let executor = common::docker_builder(&tb).build().await.unwrap();
        let root = executor.with_become(escalation).unwrap();
        let run = root.run("id -u; echo err >&2; exit 2").await.unwrap();
        assert_eq!(
            (run.status.clone(), run.stdout(), run.stderr()),
            (ExitStatus::Code(2), b"0\n".to_vec(), b"err\n".to_vec()),
            "{user}"
        );
        // Files over an sftp-server started through the tool: root's own.
        root.write_file_bytes("/etc/become-test".as_ref(), b"written")
            .await
            .unwrap();
        let owner = tb.run("stat -c %u:%a /etc/become-test").unwrap();
        assert_eq!(String::from_utf8_lossy(&owner.stdout), "0:644\n", "{user}");
        // A timed-out root tree dies whole.
        let run = root
            .execute(
                "trap '' TERM; sleep 301 & sleep 301",
                ExecOptions::default().timeout(Duration::from_millis(800)),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert!(matches!(run.status, ExitStatus::TimedOut { .. }), "{user}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = tb
                .run("ps -eo args= | grep -x 'sleep 301' || true")
                .unwrap();
            if left.stdout.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{user}: {:?}",
                String::from_utf8_lossy(&left.stdout)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A wrong root password for su.
    let tb = docker(DockerTestbed::builder()).await;
    let executor = common::docker_builder(&tb).build().await.unwrap();
    let (reason, _) = become_failure(
        executor
            .with_become(Become::su().password("wrong"))
            .unwrap()
            .run("true")
            .await,
    );
    assert_eq!(reason, BecomeFailure::IncorrectPassword);
}

#[tokio::test]
async fn the_busybox_dropbear_image_escalates_with_su() {
    require_docker!();
    use swiftide_ssh_testbed::{DockerImage, DockerTestbed, ROOT_PASSWORD};
    let tb = docker(DockerTestbed::builder().image(DockerImage::DropbearBusybox)).await;
    let executor = common::docker_builder(&tb).build().await.unwrap();
    // BusyBox ash runs its own (non-setuid) su applet for a plain `su`: the setuid copy by
    // path, as Ansible's become_exe would.
    let root = executor
        .with_become(Become::su().exe("/bin/su").password(ROOT_PASSWORD))
        .unwrap();
    for _ in 0..2 {
        let run = root.run("id -u; echo err >&2").await.unwrap();
        // BusyBox's su prompts on stdout: that is the tool's, not the command's.
        assert_eq!(
            (run.stdout(), run.stderr()),
            (b"0\n".to_vec(), b"err\n".to_vec())
        );
    }
    // No SFTP here: files go through escalated scripts.
    root.write_file_bytes("/etc/become-test".as_ref(), b"written")
        .await
        .unwrap();
    assert_eq!(
        root.read_file_bytes("/etc/become-test".as_ref())
            .await
            .unwrap(),
        b"written"
    );
    let owner = tb.run("stat -c %u /etc/become-test").unwrap();
    assert_eq!(String::from_utf8_lossy(&owner.stdout), "0\n");
    // A timeout kills the root group through the new session the bootstrap makes there.
    let run = root
        .execute(
            "sleep 302 & sleep 302",
            ExecOptions::default().timeout(Duration::from_millis(800)),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(matches!(run.status, ExitStatus::TimedOut { .. }));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = tb.run("ps -o args | grep -x 'sleep 302' || true").unwrap();
        if left.stdout.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{:?}",
            String::from_utf8_lossy(&left.stdout)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wrong = common::docker_builder(&tb)
        .build()
        .await
        .unwrap()
        .with_become(Become::su().exe("/bin/su").password("wrong"))
        .unwrap();
    let (reason, message) = become_failure(wrong.run("true").await);
    assert_eq!(reason, BecomeFailure::IncorrectPassword, "{message}");
}

/// The differential table (LocalExecutor run by root here, the executor escalated to root
/// there): every case gives the same result, with commands on pre-escalated spares (sudo
/// without a password: the direct form's text to a waiting root shell) and through sudo's
/// prompt (a password: the whole escalated request to the waiting login shell).
#[tokio::test]
async fn escalated_commands_give_exactly_what_local_executor_gives_as_root() {
    use common::differential::{self, cases, seed};
    for (escalation, become_root) in [
        (Escalation::SudoNoPassword, Become::sudo()),
        (Escalation::SudoPassword, sudo_with_password()),
    ] {
        let tb = escalation_testbed(escalation);
        let dir = tempfile::Builder::new()
            .prefix("swiftide-become-diff-")
            .tempdir()
            .unwrap();
        let dir = dir.path().canonicalize().unwrap();
        seed(&dir);
        for envs in [&differential::ENVS, &differential::ONE_LINE_ENVS] {
            let (local, remote) = differential::executors_with(&dir, common::builder(&tb), envs);
            let remote = remote
                .with_become(become_root.clone())
                .build()
                .await
                .unwrap();
            let cases = cases(&dir);
            let mismatches = differential::compare(&local, &remote, &cases).await;
            assert!(
                mismatches.is_empty(),
                "{escalation:?}: {} of {} cases differ from LocalExecutor:\n{}",
                mismatches.len(),
                cases.len(),
                mismatches.join("\n")
            );
            let stats = remote.pool_stats();
            if escalation == Escalation::SudoNoPassword {
                assert!(stats.escalated_spares_used > 0, "{stats:?}");
            } else {
                assert_eq!(stats.escalated_spares_used, 0, "{stats:?}");
            }
        }
    }
}

/// Set in the environment of the child process of
/// [`a_root_job_is_reattached_from_a_new_process_after_its_client_was_killed`].
const BECOME_CHILD_ENV: &str = "SWIFTIDE_BECOME_TEST_CHILD";

#[tokio::test]
async fn a_root_job_is_reattached_from_a_new_process_after_its_client_was_killed() {
    if let Ok(spec) = std::env::var(BECOME_CHILD_ENV) {
        // The child: start the job as root, say so, and wait to be killed.
        let [host, port, user, key, known_hosts, id] = spec.split('\u{1f}').collect::<Vec<_>>()[..]
        else {
            panic!("bad child spec {spec:?}");
        };
        let executor = SshExecutor::builder()
            .host(host)
            .port(port.parse().unwrap())
            .user(user)
            .private_key_file(key)
            .known_hosts_file(known_hosts)
            .with_become(sudo_with_password())
            .build()
            .await
            .unwrap();
        executor
            .spawn_job(
                "id -u; i=0; while [ $i -lt 50 ]; do echo line $i; i=$((i+1)); sleep 0.02; done; exit 7",
                JobOptions::new().id(id),
            )
            .await
            .unwrap();
        println!("JOB-SPAWNED");
        tokio::time::sleep(Duration::from_secs(300)).await;
        return;
    }
    let tb = escalation_testbed(Escalation::SudoPassword);
    let id = format!("become-reattach-{}", token());
    let spec = [
        tb.host(),
        tb.port().to_string(),
        tb.user().to_owned(),
        tb.private_key_path().display().to_string(),
        tb.known_hosts_path().display().to_string(),
        id.clone(),
    ]
    .join("\u{1f}");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_root_job_is_reattached_from_a_new_process_after_its_client_was_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BECOME_CHILD_ENV, spec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(n > 0, "the child ended before it started the job");
        if line.contains("JOB-SPAWNED") {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no goodbye
    child.wait().unwrap();

    let root = login(&tb).await.with_become(sudo_with_password()).unwrap();
    let job = root.job(&id).await.unwrap();
    assert_eq!(
        job.wait(Duration::from_secs(30)).await.unwrap(),
        JobStatus::Exited(ExitStatus::Code(7))
    );
    let out = job.read(JobStream::Stdout, 0, 1 << 20).await.unwrap();
    let expected: String = std::iter::once("0\n".to_owned())
        .chain((0..50).map(|i| format!("line {i}\n")))
        .collect();
    assert_eq!(String::from_utf8_lossy(&out.bytes), expected);
    job.remove().await.unwrap();
}
