//! Integration tests of the Docker testbed: containers checked with the OpenSSH client.
//!
//! Without Docker these tests print why and pass, unless the environment variable `CI`
//! is set: then a missing Docker is a failure (run `bash testbed/docker/prepare.sh`
//! first).

use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use swiftide_ssh_testbed::{
    CONTAINER_LABEL, DockerImage, DockerTestbed, OWNER_PID_LABEL, TestbedError,
};

/// Whether Docker tests can run; prints the reason when they are skipped, panics in CI.
fn docker_available() -> bool {
    match DockerTestbed::available() {
        Ok(()) => true,
        Err(reason) => {
            swiftide_ssh_testbed::skip_unless_ci(&reason, "bash testbed/docker/prepare.sh");
            false
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_ok(output: &Output) {
    assert!(
        output.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
}

#[track_caller]
fn login_name(testbed: &DockerTestbed) -> String {
    let output = testbed.ssh("id -un").unwrap();
    assert_ok(&output);
    text(&output.stdout).trim().to_owned()
}

fn start(image: DockerImage) -> DockerTestbed {
    let started = Instant::now();
    let testbed = DockerTestbed::builder().image(image).start().unwrap();
    eprintln!(
        "{image:?} container {} started in {:?} on 127.0.0.1:{}",
        &testbed.container_id()[..12],
        started.elapsed(),
        testbed.port()
    );
    testbed
}

fn container_exists(id: &str) -> bool {
    Command::new("docker")
        .args(["inspect", "--format", "{{.Id}}", id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// The OpenSSH client to the container's bridge address, port 22, checking the host
/// key against the testbed's known_hosts file.
fn ssh_via_bridge(testbed: &DockerTestbed, remote_command: &str) -> Output {
    let ip = testbed
        .container_ip()
        .expect("the container has a bridge address");
    Command::new("ssh")
        .args(["-F", "/dev/null", "-i"])
        .arg(testbed.private_key_path())
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args([
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=10",
        ])
        .arg(format!("{}@{ip}", testbed.user()))
        .arg(remote_command)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn openssh_container_accepts_the_key_with_strict_host_key_checking() {
    if !docker_available() {
        return;
    }
    let testbed = start(DockerImage::OpenSsh);
    assert_eq!(testbed.host(), "127.0.0.1");
    assert_eq!(testbed.user(), "tester");
    assert_eq!(login_name(&testbed), "tester");

    let known_hosts = std::fs::read_to_string(testbed.known_hosts_path()).unwrap();
    assert!(
        known_hosts.contains(&format!(
            "[127.0.0.1]:{} {}",
            testbed.port(),
            testbed.host_public_key()
        )),
        "{known_hosts}"
    );
    let ip = testbed.container_ip().unwrap();
    assert!(
        known_hosts.contains(&format!("{ip} {}", testbed.host_public_key())),
        "{known_hosts}"
    );

    // The container's bridge address, port 22, with the same known_hosts file.
    let output = ssh_via_bridge(&testbed, "id -un; echo $SWIFTIDE_SSH_TESTBED");
    assert_ok(&output);
    assert_eq!(text(&output.stdout), "tester\n1\n");

    // Non-root, with /bin/sh as its login shell.
    let output = testbed.ssh("id -u; echo $SHELL").unwrap();
    assert_ok(&output);
    assert_eq!(text(&output.stdout), "1000\n/bin/sh\n");

    // The unauthorized key is refused.
    let output = Command::new("ssh")
        .args(["-F", "/dev/null", "-i"])
        .arg(testbed.unauthorized_private_key_path())
        .args(["-p", &testbed.port().to_string()])
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args(["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"])
        .args(["-o", "IdentitiesOnly=yes", "tester@127.0.0.1", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(255), "{}", text(&output.stderr));

    // docker exec runs as root inside the container.
    let output = testbed
        .run("id -un; cat /etc/ssh/ssh_host_ed25519_key.pub")
        .unwrap();
    assert_ok(&output);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("root\n"), "{stdout}");
    assert!(stdout.contains(testbed.host_public_key()), "{stdout}");
    assert!(
        testbed
            .logs()
            .unwrap()
            .contains("Accepted publickey for tester")
    );
}

#[test]
fn dropbear_busybox_container_accepts_the_key() {
    if !docker_available() {
        return;
    }
    let testbed = start(DockerImage::DropbearBusybox);
    assert_eq!(login_name(&testbed), "tester");

    let output = testbed
        .ssh("readlink -f /bin/sh; sh --help 2>&1 | head -n 1; id -u")
        .unwrap();
    assert_ok(&output);
    let stdout = text(&output.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("/bin/busybox"), "{stdout}");
    assert!(
        lines.next().is_some_and(|l| l.contains("BusyBox")),
        "{stdout}"
    );
    assert_eq!(lines.next(), Some("1000"), "{stdout}");

    // No bash, no coreutils, no SFTP server, no python.
    let output = testbed
        .ssh(
            "for p in bash python3 /usr/lib/openssh/sftp-server /usr/lib/sftp-server \
             /usr/libexec/sftp-server /usr/bin/env; do \
               if command -v $p >/dev/null 2>&1 || [ -e $p ]; then echo $p; fi; \
             done; readlink -f /bin/find; readlink -f /bin/ls",
        )
        .unwrap();
    assert_ok(&output);
    assert_eq!(text(&output.stdout), "/bin/busybox\n/bin/busybox\n");
    let sftp = Command::new("sftp")
        .args(["-F", "/dev/null", "-b", "-", "-i"])
        .arg(testbed.private_key_path())
        .args(["-P", &testbed.port().to_string()])
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args(["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"])
        .arg("tester@127.0.0.1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!sftp.status.success(), "sftp unexpectedly worked");

    let output = ssh_via_bridge(&testbed, "id -un");
    assert_ok(&output);
    assert_eq!(text(&output.stdout), "tester\n");
    let logs = testbed.logs().unwrap();
    assert!(logs.contains(testbed.host_public_key()), "{logs}");
}

#[test]
fn pause_silences_the_server_and_unpause_revives_it() {
    if !docker_available() {
        return;
    }
    let testbed = start(DockerImage::OpenSsh);
    assert!(testbed.banner_received(Duration::from_secs(5)));
    testbed.pause().unwrap();
    assert_eq!(testbed.state().unwrap(), "paused");
    assert!(!testbed.banner_received(Duration::from_secs(1)));
    testbed.unpause().unwrap();
    assert!(testbed.banner_received(Duration::from_secs(5)));
    assert_eq!(login_name(&testbed), "tester");
}

#[test]
fn stop_kill_start_again_and_restart_keep_port_and_host_key() {
    if !docker_available() {
        return;
    }
    let mut testbed = start(DockerImage::DropbearBusybox);
    let port = testbed.port();
    let key = testbed.host_public_key().to_owned();

    testbed.stop().unwrap();
    assert_eq!(testbed.state().unwrap(), "exited");
    assert!(!testbed.banner_received(Duration::from_secs(1)));
    assert_eq!(testbed.ssh("true").unwrap().status.code(), Some(255));
    testbed.start_again().unwrap();
    assert_eq!(login_name(&testbed), "tester");

    testbed.kill().unwrap();
    assert!(!testbed.banner_received(Duration::from_secs(1)));
    testbed.start_again().unwrap();
    assert_eq!(login_name(&testbed), "tester");

    let started = Instant::now();
    testbed.restart().unwrap();
    eprintln!("restart took {:?}", started.elapsed());
    assert_eq!(testbed.port(), port);
    assert_eq!(testbed.host_public_key(), key);
    // Strict host key checking against the same known_hosts file.
    assert_eq!(login_name(&testbed), "tester");
    let output = ssh_via_bridge(&testbed, "id -un");
    assert_ok(&output);
}

#[test]
fn network_disconnect_breaks_the_published_port_and_reconnect_restores_it() {
    if !docker_available() {
        return;
    }
    let mut testbed = start(DockerImage::OpenSsh);
    assert_eq!(testbed.network(), "bridge");
    // A session that is open when the network goes away.
    let mut held = testbed
        .ssh_command("echo started; sleep 30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    std::io::Read::read_exact(held.stdout.as_mut().unwrap(), &mut first).unwrap();

    testbed.disconnect_network().unwrap();
    assert_eq!(testbed.container_ip(), None);
    assert!(!testbed.banner_received(Duration::from_secs(1)));
    assert_eq!(testbed.ssh("true").unwrap().status.code(), Some(255));
    // The server itself keeps running.
    assert_eq!(testbed.state().unwrap(), "running");
    let output = testbed
        .run("ip -o link 2>/dev/null || cat /proc/net/dev")
        .unwrap();
    assert!(
        !text(&output.stdout).contains("eth0"),
        "{}",
        text(&output.stdout)
    );

    testbed.reconnect_network().unwrap();
    assert!(testbed.container_ip().is_some());
    assert!(testbed.banner_received(Duration::from_secs(5)));
    assert_eq!(login_name(&testbed), "tester");
    let output = ssh_via_bridge(&testbed, "id -un");
    assert_ok(&output);
    let _ = held.kill();
    let _ = held.wait();
}

#[test]
fn dropping_removes_the_container() {
    if !docker_available() {
        return;
    }
    let testbed = start(DockerImage::OpenSsh);
    let id = testbed.container_id().to_owned();
    let dir = testbed.dir().to_owned();
    assert!(container_exists(&id));
    let labels = Command::new("docker")
        .args([
            "inspect",
            "--format",
            &format!(
                "{{{{index .Config.Labels \"{CONTAINER_LABEL}\"}}}} {{{{index .Config.Labels \"{OWNER_PID_LABEL}\"}}}}"
            ),
            &id,
        ])
        .output()
        .unwrap();
    assert_eq!(
        text(&labels.stdout).trim(),
        format!("1 {}", std::process::id())
    );
    drop(testbed);
    assert!(!container_exists(&id));
    assert!(!dir.exists());
}

#[test]
fn watchdog_and_cleanup_stale_remove_orphaned_containers() {
    if !docker_available() {
        return;
    }
    // A child process (this test binary, running only `orphan_helper`) starts a testbed
    // and is then killed with SIGKILL: its watchdog must remove the container.
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "orphan_helper", "--ignored", "--nocapture"])
        .env("SWIFTIDE_DOCKER_ORPHAN_HELPER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = String::new();
    let stdout = child.stdout.as_mut().unwrap();
    let mut buf = [0u8; 1];
    while !out.contains("CONTAINER=") || !out.ends_with('\n') {
        let n = std::io::Read::read(stdout, &mut buf).unwrap();
        assert!(n > 0, "helper exited early: {out}");
        out.push(buf[0] as char);
    }
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("CONTAINER="))
        .unwrap()
        .to_owned();
    assert!(container_exists(&id));
    child.kill().unwrap();
    child.wait().unwrap();
    wait_until(
        "the watchdog removed the container",
        Duration::from_secs(20),
        || !container_exists(&id),
    );

    // cleanup_stale: a labelled container whose owner pid is gone.
    let output = Command::new("docker")
        .args(["create", "--label", &format!("{CONTAINER_LABEL}=1")])
        .arg("--label")
        .arg(format!("{OWNER_PID_LABEL}={}", u32::MAX - 1))
        .arg("--label")
        .arg(format!(
            "swiftide-ssh-testbed.owner-host={}",
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap()
                .trim()
        ))
        .arg(DockerImage::OpenSsh.ensure_built().unwrap())
        .output()
        .unwrap();
    assert_ok(&output);
    let stale = text(&output.stdout).trim().to_owned();
    // A live testbed of this process is kept.
    let live = start(DockerImage::DropbearBusybox);
    let removed = DockerTestbed::cleanup_stale().unwrap();
    assert!(removed >= 1);
    assert!(!container_exists(&stale));
    assert!(container_exists(live.container_id()));
}

/// Started by `watchdog_and_cleanup_stale_remove_orphaned_containers` in a child process.
#[test]
#[ignore = "helper for watchdog_and_cleanup_stale_remove_orphaned_containers"]
fn orphan_helper() {
    if std::env::var_os("SWIFTIDE_DOCKER_ORPHAN_HELPER").is_none() {
        return;
    }
    let testbed = start(DockerImage::DropbearBusybox);
    println!("CONTAINER={}", testbed.container_id());
    thread::sleep(Duration::from_secs(120));
}

#[test]
fn twenty_containers_at_once() {
    if !docker_available() {
        return;
    }
    const N: usize = 20;
    let started = Instant::now();
    let handles: Vec<_> = (0..N)
        .map(|i| {
            thread::spawn(move || {
                let image = if i % 2 == 0 {
                    DockerImage::OpenSsh
                } else {
                    DockerImage::DropbearBusybox
                };
                DockerTestbed::builder().image(image).start()
            })
        })
        .collect();
    let testbeds: Vec<DockerTestbed> = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect::<Result<_, TestbedError>>()
        .unwrap();
    let start_time = started.elapsed();
    let logins = Instant::now();
    let children: Vec<_> = testbeds
        .iter()
        .map(|t| {
            t.ssh_command("id -un")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_ok(&output);
        assert_eq!(text(&output.stdout), "tester\n");
    }
    let login_time = logins.elapsed();
    let ids: Vec<&str> = testbeds.iter().map(DockerTestbed::container_id).collect();
    let mut args = vec![
        "stats",
        "--no-stream",
        "--format",
        "{{.Name}} {{.MemUsage}}",
    ];
    args.extend(&ids);
    let stats = Command::new("docker").args(&args).output().unwrap();
    eprintln!(
        "{N} containers: started in {start_time:?}, {N} logins in {login_time:?}; memory:\n{}{}",
        text(&stats.stdout),
        text(&stats.stderr)
    );
    let mut ports: Vec<u16> = testbeds.iter().map(DockerTestbed::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), N);
    let removing = Instant::now();
    drop(testbeds);
    eprintln!("removed in {:?}", removing.elapsed());
}

// ---------------------------------------------------------------------------------------
// Privilege escalation: the OpenSSH image's escalation accounts, and su in both images.

use swiftide_ssh_testbed::{
    BECOME_PASSWORD, BECOME_TARGET_PASSWORD, BECOME_TARGET_USER, Escalation, ROOT_PASSWORD,
};

/// `command` with `password` and a newline on its standard input.
fn piped(password: &str, command: &str) -> String {
    format!("printf '%s\\n' '{password}' | {command}")
}

#[test]
fn openssh_escalation_accounts_follow_their_rules() {
    if !docker_available() {
        return;
    }
    let escalations: Vec<Escalation> = Escalation::ALL
        .into_iter()
        .filter(|e| *e != Escalation::Su)
        .collect();
    let handles: Vec<_> = escalations
        .into_iter()
        .map(|escalation| {
            thread::spawn(move || {
                let user = escalation.docker_user();
                let testbed = DockerTestbed::builder().user(user).start().unwrap();
                assert_eq!(testbed.user(), user);
                assert_eq!(login_name(&testbed), user);
                let run = |command: &str| testbed.ssh(command).unwrap();
                let fails_with = |command: &str, message: &str| {
                    let output = run(command);
                    assert!(!output.status.success(), "{user}: {command} worked");
                    let stderr = text(&output.stderr);
                    assert!(stderr.contains(message), "{user}: {command}: {stderr}");
                };
                let prints = |command: &str, expected: &str| {
                    let output = run(command);
                    assert_ok(&output);
                    assert_eq!(text(&output.stdout), expected, "{user}: {command}");
                    text(&output.stderr)
                };
                let with_password = piped(BECOME_PASSWORD, "sudo -S -p '' id -u");
                match escalation {
                    Escalation::SudoNoPassword => {
                        prints("sudo -n id -u", "0\n");
                        prints(
                            &format!("sudo -n -u {BECOME_TARGET_USER} id -un"),
                            &format!("{BECOME_TARGET_USER}\n"),
                        );
                    }
                    Escalation::SudoPassword => {
                        fails_with("sudo -n true", "a password is required");
                        prints(&with_password, "0\n");
                    }
                    Escalation::SudoRequireTty => {
                        fails_with("sudo -n id -u", "you must have a tty");
                    }
                    Escalation::SudoLecture => {
                        for _ in 0..2 {
                            let stderr = prints(&with_password, "0\n");
                            assert!(stderr.contains("usual lecture"), "{stderr}");
                        }
                    }
                    Escalation::SudoNotInSudoers => {
                        fails_with(
                            &piped(BECOME_PASSWORD, "sudo -S -p '' true"),
                            "sudo-none is not in the sudoers file",
                        );
                    }
                    Escalation::DoasNoPassword => {
                        prints("doas -n id -u", "0\n");
                        prints(
                            &format!("doas -n -u {BECOME_TARGET_USER} id -un"),
                            &format!("{BECOME_TARGET_USER}\n"),
                        );
                    }
                    Escalation::DoasPassword => {
                        fails_with("doas -n true", "Authentication required");
                    }
                    other => panic!("no check for {other:?}"),
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn su_to_root_with_the_root_password_in_both_images() {
    if !docker_available() {
        return;
    }
    let openssh = thread::spawn(|| {
        let testbed = start(DockerImage::OpenSsh);
        assert_eq!(testbed.user(), "tester");
        // util-linux su: the prompt goes to standard error.
        let output = testbed.ssh(&piped(ROOT_PASSWORD, "su -c 'id -u'")).unwrap();
        assert_ok(&output);
        assert_eq!(text(&output.stdout), "0\n");
        assert!(text(&output.stderr).contains("Password:"));
        let output = testbed
            .ssh(&piped(
                BECOME_TARGET_PASSWORD,
                &format!("su -c 'id -un' {BECOME_TARGET_USER}"),
            ))
            .unwrap();
        assert_ok(&output);
        assert_eq!(text(&output.stdout), format!("{BECOME_TARGET_USER}\n"));
        // tester has no sudo rule.
        let output = testbed.ssh("sudo -n true").unwrap();
        assert!(!output.status.success());
    });
    let dropbear = thread::spawn(|| {
        let testbed = start(DockerImage::DropbearBusybox);
        // BusyBox su, called by its path (a bare `su` runs the applet from the BusyBox that is
        // not setuid), prints its prompt and a newline on standard output.
        let output = testbed
            .ssh(&piped(ROOT_PASSWORD, "/bin/su -c 'id -u'"))
            .unwrap();
        assert_ok(&output);
        assert_eq!(text(&output.stdout), "Password: \n0\n");
        let output = testbed
            .ssh(&piped(
                BECOME_TARGET_PASSWORD,
                &format!("/bin/su -c 'id -un' {BECOME_TARGET_USER}"),
            ))
            .unwrap();
        assert_ok(&output);
        assert!(
            text(&output.stdout).ends_with(&format!("\n{BECOME_TARGET_USER}\n")),
            "{}",
            text(&output.stdout)
        );
        let output = testbed.ssh(&piped(ROOT_PASSWORD, "su -c 'id -u'")).unwrap();
        assert!(!output.status.success());
        assert!(
            text(&output.stderr).contains("must be suid"),
            "{}",
            text(&output.stderr)
        );
        let started = Instant::now();
        let output = testbed
            .ssh(&piped("wrong-password", "/bin/su -c 'id -u'"))
            .unwrap();
        assert!(!output.status.success());
        assert!(
            text(&output.stderr).contains("incorrect password"),
            "{}",
            text(&output.stderr)
        );
        eprintln!(
            "a wrong BusyBox su password failed after {:?}",
            started.elapsed()
        );
    });
    openssh.join().unwrap();
    dropbear.join().unwrap();
}

#[test]
fn unknown_docker_users_are_refused() {
    let err = DockerTestbed::builder()
        .image(DockerImage::DropbearBusybox)
        .user(Escalation::SudoNoPassword.docker_user())
        .start()
        .unwrap_err();
    assert!(
        matches!(&err, TestbedError::Unsupported { what } if what.contains("sudo-nopasswd")),
        "{err}"
    );
    assert_eq!(DockerImage::DropbearBusybox.users(), ["tester"]);
    assert!(DockerImage::OpenSsh.users().contains(&"doas-password"));
}
