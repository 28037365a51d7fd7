//! Integration tests: real sshd processes, checked with the OpenSSH client.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use swiftide_ssh_testbed::{
    KEY_PASSPHRASE, TESTBED_ENV_VAR, TESTBED_ID_ENV_VAR, Testbed, TestbedError, UNPRIVILEGED_USER,
    USER_PASSWORD,
};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[track_caller]
fn assert_ok(output: &Output) {
    assert!(
        output.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status,
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An `SSH_ASKPASS` program that prints `secret`, for prompts that BatchMode forbids.
fn askpass_script(dir: &Path, name: &str, secret: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\nprintf '%s\\n' '{secret}'\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
    path
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn runs_commands_with_the_testbed_environment() {
    let testbed = Testbed::start().unwrap();
    assert_eq!(testbed.host(), "127.0.0.1");
    assert_ne!(testbed.port(), 0);
    assert_ok(&testbed.run("true").unwrap());

    let output = testbed.run("echo hello").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "hello\n");

    let output = testbed.run("env").unwrap();
    assert_ok(&output);
    assert!(
        stdout(&output)
            .lines()
            .any(|line| line == format!("{TESTBED_ENV_VAR}=1")),
        "{}",
        stdout(&output)
    );

    let output = testbed.run("exit 3").unwrap();
    assert_eq!(output.status.code(), Some(3));

    assert!(testbed.sshd_log().contains("Server listening on"));
    assert!(testbed.sshd_log().contains("Accepted publickey"));
}

#[test]
fn files_and_keys_are_laid_out_as_documented() {
    let testbed = Testbed::start().unwrap();
    let known_hosts = fs::read_to_string(testbed.known_hosts_path()).unwrap();
    assert_eq!(
        known_hosts,
        format!(
            "[127.0.0.1]:{} {}\n",
            testbed.port(),
            testbed.host_public_key()
        )
    );
    assert!(testbed.host_public_key().starts_with("ssh-ed25519 AAAA"));
    assert_eq!(testbed.host_public_key().split(' ').count(), 2);

    for key in [
        testbed.private_key_path(),
        testbed.encrypted_private_key_path(),
        testbed.unauthorized_private_key_path(),
    ] {
        let mode = fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", key.display());
        assert!(key.starts_with(testbed.dir()));
    }

    let scratch = testbed.scratch_dir().to_owned();
    assert!(scratch.starts_with("/tmp"));
    assert_eq!(fs::read_dir(&scratch).unwrap().count(), 0);
    assert_ok(
        &testbed
            .run(&format!("echo data > {}/file", scratch.display()))
            .unwrap(),
    );
    assert_eq!(fs::read_to_string(scratch.join("file")).unwrap(), "data\n");

    let dir = testbed.dir().to_owned();
    drop(testbed);
    assert!(!dir.exists());
    assert!(!scratch.exists());
}

#[test]
fn encrypted_key_needs_the_passphrase() {
    let testbed = Testbed::start().unwrap();
    let key = testbed.encrypted_private_key_path();

    // The passphrase decrypts the key...
    let derived = Command::new("ssh-keygen")
        .args(["-y", "-P", KEY_PASSPHRASE, "-f"])
        .arg(key)
        .output()
        .unwrap();
    assert_ok(&derived);
    assert!(stdout(&derived).starts_with("ssh-ed25519 "));
    // ...and nothing else does.
    let wrong = Command::new("ssh-keygen")
        .args(["-y", "-P", "wrong", "-f"])
        .arg(key)
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    let empty = Command::new("ssh-keygen")
        .args(["-y", "-P", "", "-f"])
        .arg(key)
        .output()
        .unwrap();
    assert!(!empty.status.success());

    // Logging in with it works when the client knows the passphrase.
    let askpass = askpass_script(testbed.dir(), "askpass-key", KEY_PASSPHRASE);
    let output = Command::new("ssh")
        .args(["-F", "/dev/null", "-i"])
        .arg(key)
        .arg("-p")
        .arg(testbed.port().to_string())
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args([
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "KbdInteractiveAuthentication=no",
        ])
        .arg(format!("{}@{}", testbed.user(), testbed.host()))
        .arg("echo encrypted")
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "encrypted\n");
}

#[test]
fn unauthorized_key_is_refused() {
    let testbed = Testbed::start().unwrap();
    let mut command = Command::new("ssh");
    command
        .args(["-F", "/dev/null", "-i"])
        .arg(testbed.unauthorized_private_key_path())
        .arg("-p")
        .arg(testbed.port().to_string())
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
        ])
        .arg(format!("{}@{}", testbed.user(), testbed.host()))
        .arg("true")
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null());
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(255));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits until process `pid`'s environment names `testbed`. `$!` is printed right after
/// the fork: the child may still be inside execve, when /proc/PID/environ reads empty, so
/// one read is not enough.
fn wait_for_testbed_environment(testbed: &Testbed, pid: u32) {
    let entry = format!("{TESTBED_ID_ENV_VAR}={}", testbed.id());
    wait_until("the command's environment to name the testbed", || {
        fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
            environ
                .split(|&b| b == 0)
                .any(|var| var == entry.as_bytes())
        })
    });
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

#[test]
fn drop_kills_commands_left_running_in_the_background() {
    let testbed = Testbed::start().unwrap();
    let output = testbed
        .run("sleep 60 >/dev/null 2>&1 </dev/null & echo $!")
        .unwrap();
    assert_ok(&output);
    let pid: u32 = stdout(&output).trim().parse().unwrap();
    assert!(alive(pid));
    wait_for_testbed_environment(&testbed, pid);
    // The session is over: the command is no longer below the listener.
    wait_until("the session to end", || {
        testbed.connection_pids().is_empty()
    });
    assert!(alive(pid));

    drop(testbed);
    assert!(!alive(pid));
}

#[test]
fn restart_keeps_port_and_host_key() {
    let mut testbed = Testbed::start().unwrap();
    let port = testbed.port();
    let host_key = testbed.host_public_key().to_owned();
    let first_pid = testbed.sshd_pid();
    assert_ok(&testbed.run("true").unwrap());

    testbed.stop();
    let stat = fs::read_to_string(format!("/proc/{first_pid}/stat")).unwrap_or_default();
    assert!(!stat.contains("(sshd)"), "listener survived: {stat}");
    let output = testbed.run("true").unwrap();
    assert_eq!(
        output.status.code(),
        Some(255),
        "connected to a stopped sshd"
    );
    assert!(testbed.connection_pids().is_empty());
    assert!(matches!(testbed.freeze(), Err(TestbedError::NotRunning)));

    testbed.restart().unwrap();
    assert_eq!(testbed.port(), port);
    assert_eq!(testbed.host_public_key(), host_key);
    assert_ne!(testbed.sshd_pid(), first_pid);
    // Strict host key checking against the same known_hosts file.
    let output = testbed.run("echo again").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "again\n");

    // Restarting a running testbed works too.
    testbed.restart().unwrap();
    assert_eq!(testbed.port(), port);
    assert_ok(&testbed.run("true").unwrap());
}

#[test]
fn stop_drops_existing_connections() {
    let mut testbed = Testbed::start().unwrap();
    assert!(testbed.connection_pids().is_empty());
    let mut ssh = testbed
        .ssh_command("echo started; sleep 60")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    ssh.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"started\n");
    // One process for a root login (sshd skips the privilege-separated child for
    // root), two (monitor and session process) for other users.
    let connections = testbed.connection_pids();
    assert!(!connections.is_empty());

    let started = Instant::now();
    testbed.stop();
    let status = ssh.wait().unwrap();
    assert!(!status.success());
    assert!(started.elapsed() < Duration::from_secs(5));
    for pid in connections {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "connection process {pid} survived: {stat}"
        );
    }
}

#[test]
fn freeze_makes_a_silent_peer_and_thaw_resumes() {
    let testbed = Testbed::start().unwrap();
    let mut ssh = testbed
        .ssh_command("read line; echo got $line")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the session is up.
    wait_until("the session", || !testbed.connection_pids().is_empty());
    wait_until("the session's command", || {
        testbed.sshd_log().contains("Starting session")
    });

    testbed.freeze().unwrap();
    let state = |pid: u32| {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(state(testbed.sshd_pid()), "T");
    for pid in testbed.connection_pids() {
        assert_eq!(state(pid), "T", "pid {pid}");
    }

    // A new connection gets no banner while frozen.
    let mut stream = connect_without_banner(&testbed);
    let mut buf = [0u8; 64];

    // The existing session does not answer either.
    {
        use std::io::Write;
        ssh.stdin.take().unwrap().write_all(b"ping\n").unwrap();
    }
    thread::sleep(Duration::from_millis(200));
    assert!(ssh.try_wait().unwrap().is_none());

    testbed.thaw().unwrap();
    assert_ne!(state(testbed.sshd_pid()), "T");
    let output = ssh.wait_with_output().unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "got ping\n");
    // The banner arrives now.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = read_restarting(&mut stream, &mut buf).unwrap();
    assert!(buf[..n].starts_with(b"SSH-2.0-"));
    drop(stream);
    assert_ok(&testbed.run("true").unwrap());
}

/// A new TCP connection to `testbed`, checked to get no banner within 300 ms.
fn connect_without_banner(testbed: &Testbed) -> std::net::TcpStream {
    let mut stream =
        std::net::TcpStream::connect((testbed.host().as_str(), testbed.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let err = read_restarting(&mut stream, &mut [0u8; 64]).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );
    stream
}

/// `stream.read`, read again after EINTR: a read with a timeout (SO_RCVTIMEO) is never
/// restarted after a signal handler ran (signal(7)), and other tests in this binary install
/// tokio's SIGCHLD handler.
fn read_restarting(stream: &mut std::net::TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[test]
fn unprivileged_user_logs_in_with_key_and_password() {
    let testbed = match Testbed::builder()
        .unprivileged_user()
        .password_auth(true)
        .start()
    {
        Err(TestbedError::NotRoot { what }) => {
            eprintln!("skipping: {what} needs root");
            return;
        }
        result => result.unwrap(),
    };
    assert_eq!(testbed.user(), UNPRIVILEGED_USER);
    assert!(!testbed.is_root_login());

    let output = testbed.run("id -u").unwrap();
    assert_ok(&output);
    let uid: u32 = stdout(&output).trim().parse().unwrap();
    assert_ne!(uid, 0);
    let output = testbed.run("id -un").unwrap();
    assert_eq!(stdout(&output).trim(), UNPRIVILEGED_USER);

    // The scratch directory belongs to the user.
    assert_eq!(fs::metadata(testbed.scratch_dir()).unwrap().uid(), uid);
    let file = testbed.scratch_dir().join("owned");
    assert_ok(&testbed.run(&format!("touch {}", file.display())).unwrap());
    assert_eq!(fs::metadata(&file).unwrap().uid(), uid);
    // But it cannot write elsewhere as root could.
    assert!(
        !testbed
            .run("touch /root/forbidden")
            .unwrap()
            .status
            .success()
    );

    // A non-root session has a privileged monitor and a privilege-separated child;
    // stop() kills both and the command.
    let mut testbed = testbed;
    let mut ssh = testbed
        .ssh_command("echo started; sleep 60")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    ssh.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    let connections = testbed.connection_pids();
    assert!(connections.len() >= 2, "{connections:?}");
    testbed.stop();
    assert!(!ssh.wait().unwrap().success());
    assert!(testbed.run("true").unwrap().status.code() == Some(255));
    testbed.restart().unwrap();
    assert_ok(&testbed.run("true").unwrap());

    // Password authentication.
    let askpass = askpass_script(testbed.dir(), "askpass-password", USER_PASSWORD);
    let output = Command::new("ssh")
        .args(["-F", "/dev/null", "-p"])
        .arg(testbed.port().to_string())
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args([
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password",
            "-o",
            "NumberOfPasswordPrompts=1",
        ])
        .arg(format!("{}@{}", testbed.user(), testbed.host()))
        .arg("echo password-ok")
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "password-ok\n");
}

#[test]
fn unprivileged_testbeds_start_concurrently() {
    if let Err(TestbedError::NotRoot { what }) = Testbed::builder().unprivileged_user().start() {
        eprintln!("skipping: {what} needs root");
        return;
    }
    let handles: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(|| {
                let testbed = Testbed::builder().unprivileged_user().start().unwrap();
                let output = testbed.run("id -un").unwrap();
                assert_ok(&output);
                assert_eq!(stdout(&output).trim(), UNPRIVILEGED_USER);
                testbed.port()
            })
        })
        .collect();
    let mut ports: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4);
}

#[test]
fn builder_settings_reach_sshd() {
    let testbed = Testbed::builder()
        .max_sessions(1)
        .max_startups("3:50:6")
        .sshd_config_line("SetEnv EXTRA_VAR=extra")
        .start()
        .unwrap();
    let config = fs::read_to_string(testbed.dir().join("sshd_config")).unwrap();
    assert!(config.lines().any(|l| l == "MaxSessions 1"), "{config}");
    assert!(
        config.lines().any(|l| l == "MaxStartups 3:50:6"),
        "{config}"
    );
    let output = testbed
        .run("echo $EXTRA_VAR $SWIFTIDE_SSH_TESTBED")
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "extra 1\n");

    // MaxSessions 1: a second session on one multiplexed connection is refused.
    let control = testbed.dir().join("control");
    let control_path = format!("ControlPath={}", control.display());
    // [options.., "--", "user@host", "sleep 30"]: mux options must precede "--".
    let base: Vec<OsString> = testbed
        .ssh_command("sleep 30")
        .get_args()
        .map(ToOwned::to_owned)
        .collect();
    let mut master = Command::new("ssh")
        .args(["-o", "ControlMaster=yes", "-o", &control_path])
        .args(&base)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the control socket", || control.exists());
    let output = Command::new("ssh")
        .args(["-o", "ControlMaster=no", "-o", &control_path])
        .args(&base[..base.len() - 1])
        .arg("echo second")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // The server refuses the second session on the shared connection (ssh then falls
    // back to a connection of its own, so the command itself still runs).
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Session open refused by peer"), "{stderr}");
    master.kill().unwrap();
    master.wait().unwrap();
}

#[test]
fn fixed_port_and_port_conflicts() {
    let first = Testbed::start().unwrap();
    // A fixed port that is taken fails with the log attached.
    let err = Testbed::builder().port(first.port()).start().unwrap_err();
    match &err {
        TestbedError::StartFailed { log, .. } => {
            assert!(log.contains("Address already in use"), "{log}")
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(err.to_string().contains("Address already in use"));

    // A free fixed port works.
    let port = first.port();
    drop(first);
    let second = Testbed::builder().port(port).start().unwrap();
    assert_eq!(second.port(), port);
    assert_ok(&second.run("true").unwrap());
}

#[test]
fn many_testbeds_in_parallel() {
    let handles: Vec<_> = (0..8)
        .map(|i| {
            thread::spawn(move || {
                let testbed = Testbed::start().unwrap();
                let output = testbed.run(&format!("echo {i}")).unwrap();
                assert_ok(&output);
                assert_eq!(stdout(&output), format!("{i}\n"));
                testbed.host_public_key().to_owned()
            })
        })
        .collect();
    let mut keys: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 8, "each testbed has its own host key");
}

#[test]
fn missing_sshd_binary_is_reported() {
    // Exercised through the Display text only: setting the environment variable would
    // affect concurrently running tests.
    let err = TestbedError::SshdNotFound {
        path: PathBuf::from("/usr/sbin/sshd"),
    };
    assert_eq!(
        err.to_string(),
        "OpenSSH server not found at /usr/sbin/sshd; install it with \
         `apt-get install -y openssh-server`, or set SWIFTIDE_SSH_TESTBED_SSHD to the \
         absolute path of an sshd binary"
    );
}

#[test]
fn ipv6_loopback() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipping: no IPv6 loopback");
        return;
    }
    let testbed = Testbed::builder()
        .listen_address("::1".parse().unwrap())
        .start()
        .unwrap();
    assert_eq!(testbed.host(), "::1");
    let known_hosts = fs::read_to_string(testbed.known_hosts_path()).unwrap();
    assert!(known_hosts.starts_with(&format!("[::1]:{} ", testbed.port())));
    let output = testbed.run("echo v6").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "v6\n");
}

/// A testbed in a network namespace, or `None` (with a message) when not root.
fn netns_testbed(builder: swiftide_ssh_testbed::TestbedBuilder) -> Option<Testbed> {
    match builder.network_namespace(true).start() {
        Ok(testbed) => Some(testbed),
        Err(TestbedError::NotRoot { what }) => {
            eprintln!("skipping: {what} requires root");
            None
        }
        Err(e) => panic!("cannot start a testbed in a network namespace: {e}"),
    }
}

#[test]
fn network_namespace_host_can_be_cut_and_restored() {
    let Some(testbed) = netns_testbed(Testbed::builder().client_alive(7, 5)) else {
        return;
    };
    let namespace = testbed.network_namespace().unwrap().to_owned();
    let interface = testbed.host_interface().unwrap().to_owned();
    let host: std::net::Ipv4Addr = testbed.host().parse().unwrap();
    let octets = host.octets();
    assert_eq!((octets[0], octets[1], octets[3]), (10, 213, 2), "{host}");
    assert_eq!(
        testbed.host_side_address(),
        Some(std::net::Ipv4Addr::new(10, 213, octets[2], 1))
    );
    assert_eq!(testbed.port(), 22);
    let known_hosts = fs::read_to_string(testbed.known_hosts_path()).unwrap();
    assert!(
        known_hosts.starts_with(&format!("{host} ssh-ed25519 ")),
        "{known_hosts}"
    );
    let config = fs::read_to_string(testbed.dir().join("sshd_config")).unwrap();
    assert!(
        config.lines().any(|l| l == "ClientAliveInterval 7"),
        "{config}"
    );
    assert!(
        config.lines().any(|l| l == "ClientAliveCountMax 5"),
        "{config}"
    );

    // sshd runs inside the namespace; the connection comes from the root end.
    let output = testbed.run("echo $SSH_CONNECTION").unwrap();
    assert_ok(&output);
    let connection = stdout(&output);
    assert!(
        connection.starts_with(&format!("{}.1 ", host.to_string().trim_end_matches(".2"))),
        "{connection}"
    );
    let sshd_netns = fs::read_link(format!("/proc/{}/ns/net", testbed.sshd_pid())).unwrap();
    assert_ne!(sshd_netns, fs::read_link("/proc/self/ns/net").unwrap());

    // A session that is open across the cut.
    let mut ssh = testbed
        .ssh_command("read line; echo got $line")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the session", || {
        testbed.sshd_log().contains("Starting session")
    });

    testbed.cut_network().unwrap();
    assert!(testbed.is_network_cut());
    testbed.cut_network().unwrap();
    // A new connection neither succeeds nor fails: it hangs.
    let addr = std::net::SocketAddr::new(host.into(), 22);
    let started = Instant::now();
    let err = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(700)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(started.elapsed() >= Duration::from_millis(600));
    // The open session gets no answer, and no error either.
    {
        use std::io::Write;
        ssh.stdin.as_mut().unwrap().write_all(b"ping\n").unwrap();
    }
    thread::sleep(Duration::from_millis(500));
    assert!(ssh.try_wait().unwrap().is_none());

    testbed.restore_network().unwrap();
    assert!(!testbed.is_network_cut());
    testbed.restore_network().unwrap();
    // The held connection resumes (TCP retransmits what was dropped).
    drop(ssh.stdin.take());
    let output = ssh.wait_with_output().unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "got ping\n");
    assert_ok(&testbed.run("true").unwrap());

    // sshd restarts inside the same namespace, on the same address.
    let mut testbed = testbed;
    testbed.restart().unwrap();
    assert_eq!(testbed.host(), host.to_string());
    assert_ok(&testbed.run("true").unwrap());

    drop(testbed);
    assert!(!Path::new("/run/netns").join(&namespace).exists());
    assert!(!Path::new("/sys/class/net").join(&interface).exists());
}

#[test]
fn network_namespace_hosts_get_their_own_addresses() {
    let builders = (0..3).map(|_| Testbed::builder());
    let testbeds: Vec<Testbed> = builders.filter_map(netns_testbed).collect();
    if testbeds.is_empty() {
        return;
    }
    let mut hosts: Vec<String> = testbeds.iter().map(Testbed::host).collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    testbeds[0].cut_network().unwrap();
    for testbed in &testbeds[1..] {
        let output = testbed.run("hostname >/dev/null && echo ok").unwrap();
        assert_ok(&output);
        assert_eq!(stdout(&output), "ok\n");
    }
}

#[test]
fn cutting_requires_a_network_namespace() {
    let testbed = Testbed::start().unwrap();
    assert_eq!(testbed.network_namespace(), None);
    assert!(!testbed.is_network_cut());
    let err = testbed.cut_network().unwrap_err();
    assert!(matches!(err, TestbedError::NoNetworkNamespace), "{err}");
    assert!(err.to_string().contains("network_namespace(true)"), "{err}");
    assert!(matches!(
        testbed.restore_network(),
        Err(TestbedError::NoNetworkNamespace)
    ));
}

// ---------------------------------------------------------------------------------------
// Login shells and Dropbear.

use swiftide_ssh_testbed::{DROPBEAR_SFTP_SERVER_PATH, LoginShell, Server, TestbedBuilder};

/// Starts a testbed that needs root; `None` (with a message on stderr) without root.
fn root_testbed(builder: TestbedBuilder) -> Option<Testbed> {
    match builder.start() {
        Err(TestbedError::NotRoot { what }) => {
            eprintln!("skipping: {what} needs root");
            None
        }
        result => Some(result.unwrap()),
    }
}

fn uid_of(user: &str) -> u32 {
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields[0] == user).then(|| fields[2].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no user {user}"))
}

fn passwd_fields(user: &str) -> Vec<String> {
    fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find(|line| line.split(':').next() == Some(user))
        .unwrap_or_else(|| panic!("no user {user}"))
        .split(':')
        .map(str::to_owned)
        .collect()
}

/// Prints the command name and binary of the process that runs it: the login shell. The
/// inner `sh` is a child of the login shell (not exec'd: another command follows), and the
/// quoting works in POSIX shells, fish and tcsh alike.
const SHOW_SHELL: &str = "sh -c 'cat /proc/$PPID/comm; readlink /proc/$PPID/exe'; echo ok";

fn check_login_shell(testbed: &Testbed, shell: &LoginShell) {
    let account = shell.account_name();
    assert_eq!(testbed.user(), account);
    assert_eq!(testbed.login_shell(), Some(shell));
    assert!(!testbed.is_root_login());
    let shell_path = testbed.login_shell_path().unwrap().to_owned();
    assert_eq!(passwd_fields(&account)[6], shell_path.to_str().unwrap());

    let output = testbed.run(SHOW_SHELL).unwrap();
    assert_ok(&output);
    let binary = fs::canonicalize(&shell_path).unwrap();
    assert_eq!(
        stdout(&output),
        format!("{}\n{}\nok\n", shell.name(), binary.display()),
        "{shell:?} on {:?}; stderr: {}",
        testbed.server(),
        String::from_utf8_lossy(&output.stderr)
    );

    // The account, and the scratch directory that belongs to it.
    let output = testbed.run("id -un; id -u").unwrap();
    assert_ok(&output);
    let uid = uid_of(&account);
    assert_eq!(stdout(&output), format!("{account}\n{uid}\n"));
    assert_eq!(fs::metadata(testbed.scratch_dir()).unwrap().uid(), uid);
    let file = testbed.scratch_dir().join("from-shell");
    assert_ok(&testbed.run(&format!("touch {}", file.display())).unwrap());
    assert_eq!(fs::metadata(&file).unwrap().uid(), uid);
}

#[test]
fn login_shells_run_commands_on_both_servers() {
    if root_testbed(Testbed::builder().login_shell(LoginShell::Dash)).is_none() {
        return;
    }
    let handles: Vec<_> = LoginShell::ALL
        .into_iter()
        .map(|shell| {
            thread::spawn(move || {
                for server in [Server::OpenSsh, Server::Dropbear] {
                    let testbed = Testbed::builder()
                        .login_shell(shell.clone())
                        .server(server)
                        .start()
                        .unwrap_or_else(|e| panic!("{shell:?} on {server:?}: {e}"));
                    assert_eq!(testbed.server(), server);
                    check_login_shell(&testbed, &shell);
                }
                shell
            })
        })
        .collect();
    for handle in handles {
        let shell = handle.join().unwrap();
        let account = shell.account_name();
        let fields = passwd_fields(&account);
        let home = Path::new(&fields[5]);
        let shell_path = &fields[6];

        // Listed in /etc/shells (Dropbear insists).
        let shells = fs::read_to_string("/etc/shells").unwrap();
        assert!(
            shells.lines().any(|l| l.trim() == shell_path),
            "{shell_path}"
        );
        // Password field `*`: not locked, no password.
        let shadow = fs::read_to_string("/etc/shadow").unwrap();
        let password = shadow
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{account}:")))
            .unwrap()
            .split(':')
            .next()
            .unwrap();
        assert_eq!(password, "*");
        // ~/.ssh 0700, authorized_keys 0600 with our key, both owned by the account.
        let uid = uid_of(&account);
        let ssh_dir = home.join(".ssh");
        let keys = ssh_dir.join("authorized_keys");
        assert_eq!(fs::metadata(&ssh_dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(&keys).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&ssh_dir).unwrap().uid(), uid);
        assert_eq!(fs::metadata(&keys).unwrap().uid(), uid);
        assert_eq!(fs::metadata(home).unwrap().uid(), uid);
        // Empty start-up files.
        for rc in [
            ".profile",
            ".bashrc",
            ".zshrc",
            ".mkshrc",
            ".cshrc",
            ".config/fish/config.fish",
        ] {
            assert_eq!(
                fs::metadata(home.join(rc)).unwrap().len(),
                0,
                "{account} {rc}"
            );
        }
    }
}

#[test]
fn busybox_ash_is_a_link_named_ash() {
    let Some(testbed) = root_testbed(Testbed::builder().login_shell(LoginShell::BusyboxAsh)) else {
        return;
    };
    let link = testbed.login_shell_path().unwrap();
    assert_eq!(link, Path::new("/usr/local/lib/swiftide-testbed/ash"));
    assert!(fs::symlink_metadata(link).unwrap().file_type().is_symlink());
    assert!(fs::canonicalize(link).unwrap().ends_with("busybox"));
    // BusyBox runs the ash applet: `$0` is `ash`, and `ash -c` semantics hold.
    let output = testbed.run("echo $0; echo $((6 * 7))").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "ash\n42\n");
}

#[test]
fn login_shell_accounts_work_from_concurrent_testbeds() {
    if root_testbed(Testbed::builder().login_shell(LoginShell::Zsh)).is_none() {
        return;
    }
    let handles: Vec<_> = (0..4)
        .map(|i| {
            thread::spawn(move || {
                let server = if i % 2 == 0 {
                    Server::OpenSsh
                } else {
                    Server::Dropbear
                };
                let testbed = Testbed::builder()
                    .login_shell(LoginShell::Zsh)
                    .server(server)
                    .start()
                    .unwrap();
                let output = testbed
                    .run("echo $ZSH_VERSION >/dev/null && id -un")
                    .unwrap();
                assert_ok(&output);
                assert_eq!(stdout(&output).trim(), "swiftide-sh-zsh");
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

/// Run by `login_shell_accounts_work_across_processes` in child processes, each of which
/// has its own client keys: start a Dropbear testbed (which needs the key in the account's
/// `~/.ssh/authorized_keys`) and log in.
#[test]
#[ignore = "helper, run in child processes by login_shell_accounts_work_across_processes"]
fn cross_process_helper() {
    let testbed = Testbed::builder()
        .login_shell(LoginShell::Mksh)
        .dropbear()
        .start()
        .unwrap();
    let output = testbed.run("id -un").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "swiftide-sh-mksh\n");
    // Stay up a little so that the processes overlap.
    thread::sleep(Duration::from_millis(500));
    assert_ok(&testbed.run("true").unwrap());
}

#[test]
fn login_shell_accounts_work_across_processes() {
    if root_testbed(Testbed::builder().login_shell(LoginShell::Mksh)).is_none() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "cross_process_helper",
                    "--ignored",
                    "--test-threads=1",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    cross_process_helper();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_ok(&output);
        assert!(stdout(&output).contains("1 passed"), "{}", stdout(&output));
    }
}

/// `sftp` in batch mode against the testbed, with strict host key checking.
fn sftp(testbed: &Testbed, batch: &str) -> Output {
    let batch_file = testbed.dir().join("sftp-batch");
    fs::write(&batch_file, batch).unwrap();
    Command::new("sftp")
        .args(["-F", "/dev/null", "-i"])
        .arg(testbed.private_key_path())
        .arg("-P")
        .arg(testbed.port().to_string())
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            testbed.known_hosts_path().display()
        ))
        .args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-b",
        ])
        .arg(&batch_file)
        .arg(format!("{}@{}", testbed.user(), testbed.host()))
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// ssh with `known_hosts` pointing at the wrong key must fail: proof that the testbed's
/// `known_hosts` is really what verifies the server.
fn assert_host_key_is_verified(testbed: &Testbed) {
    let wrong = testbed.dir().join("known_hosts_wrong");
    let other =
        fs::read_to_string(format!("{}.pub", testbed.private_key_path().display())).unwrap();
    let other: Vec<&str> = other.split_whitespace().take(2).collect();
    fs::write(
        &wrong,
        format!(
            "[{}]:{} {}\n",
            testbed.host(),
            testbed.port(),
            other.join(" ")
        ),
    )
    .unwrap();
    let args: Vec<OsString> = testbed
        .ssh_command("true")
        .get_args()
        .map(|a| {
            let text = a.to_string_lossy();
            if text.starts_with("UserKnownHostsFile=") {
                OsString::from(format!("UserKnownHostsFile={}", wrong.display()))
            } else {
                a.to_owned()
            }
        })
        .collect();
    let output = Command::new("ssh")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(255));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Host key verification failed"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn dropbear_logs_in_with_keys_and_serves_sftp() {
    let Some(testbed) = root_testbed(Testbed::builder().dropbear()) else {
        return;
    };
    assert_eq!(testbed.server(), Server::Dropbear);
    assert!(testbed.sftp_enabled());
    assert_eq!(testbed.user(), UNPRIVILEGED_USER);
    assert!(testbed.login_shell().is_none());

    // known_hosts: the Dropbear host key in OpenSSH format.
    let known_hosts = fs::read_to_string(testbed.known_hosts_path()).unwrap();
    assert_eq!(
        known_hosts,
        format!(
            "[127.0.0.1]:{} {}\n",
            testbed.port(),
            testbed.host_public_key()
        )
    );
    assert!(testbed.host_public_key().starts_with("ssh-ed25519 AAAA"));
    assert_host_key_is_verified(&testbed);

    // Really Dropbear, with the testbed environment.
    let output = testbed
        .run(&format!(
            "echo ${TESTBED_ENV_VAR} ${TESTBED_ID_ENV_VAR}; cat /proc/$PPID/comm; id -un"
        ))
        .unwrap();
    assert_ok(&output);
    assert_eq!(
        stdout(&output),
        format!("1 {}\ndropbear\n{UNPRIVILEGED_USER}\n", testbed.id())
    );
    assert!(
        testbed.sshd_log().contains("Pubkey auth succeeded"),
        "{}",
        testbed.sshd_log()
    );
    assert!(testbed.dir().join("dropbear.log").is_file());
    assert_eq!(testbed.run("exit 3").unwrap().status.code(), Some(3));

    // The encrypted key works too (Dropbear reads ~/.ssh/authorized_keys).
    let askpass = askpass_script(testbed.dir(), "askpass-key", KEY_PASSPHRASE);
    let args: Vec<OsString> = testbed
        .ssh_command("echo encrypted")
        .get_args()
        .map(|a| {
            if a == testbed.private_key_path().as_os_str() {
                testbed.encrypted_private_key_path().as_os_str().to_owned()
            } else if a == "BatchMode=yes" {
                OsString::from("BatchMode=no")
            } else {
                a.to_owned()
            }
        })
        .collect();
    let output = Command::new("ssh")
        .args(&args)
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "encrypted\n");

    // SFTP: upload into the scratch directory, list it.
    let local = testbed.dir().join("upload.txt");
    fs::write(&local, "via sftp\n").unwrap();
    let remote = testbed.scratch_dir().join("uploaded.txt");
    let output = sftp(
        &testbed,
        &format!(
            "put {} {}\nls {}\n",
            local.display(),
            remote.display(),
            testbed.scratch_dir().display()
        ),
    );
    assert_ok(&output);
    assert!(
        stdout(&output).contains("uploaded.txt"),
        "{}",
        stdout(&output)
    );
    assert_eq!(fs::read_to_string(&remote).unwrap(), "via sftp\n");
    assert_eq!(
        fs::metadata(&remote).unwrap().uid(),
        uid_of(UNPRIVILEGED_USER)
    );
}

#[test]
fn dropbear_without_sftp_refuses_the_subsystem() {
    let Some(testbed) = root_testbed(Testbed::builder().dropbear().sftp(false)) else {
        return;
    };
    assert!(!testbed.sftp_enabled());
    assert_host_key_is_verified(&testbed);
    let output = testbed.run("echo exec-works").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "exec-works\n");

    let local = testbed.dir().join("upload.txt");
    fs::write(&local, "data\n").unwrap();
    let remote = testbed.scratch_dir().join("never.txt");
    let output = sftp(
        &testbed,
        &format!("put {} {}\n", local.display(), remote.display()),
    );
    assert!(
        !output.status.success(),
        "sftp worked without an SFTP server"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Connection closed"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!remote.exists());

    // The raw subsystem request: the channel ends at once, as the server cannot be run.
    let mut args: Vec<OsString> = testbed
        .ssh_command("sftp")
        .get_args()
        .map(ToOwned::to_owned)
        .collect();
    args.insert(0, OsString::from("-s"));
    let output = Command::new("ssh")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(126), "{output:?}");

    // Hidden only from Dropbear's sessions: the file is intact for everyone else.
    let real = fs::canonicalize(DROPBEAR_SFTP_SERVER_PATH).unwrap();
    assert!(fs::metadata(&real).unwrap().is_file());
    let output = testbed
        .run(&format!("test -c {} && echo hidden", real.display()))
        .unwrap();
    assert_eq!(stdout(&output), "hidden\n");
}

#[test]
fn openssh_without_sftp_refuses_the_subsystem() {
    let testbed = Testbed::builder().sftp(false).start().unwrap();
    let config = fs::read_to_string(testbed.dir().join("sshd_config")).unwrap();
    assert!(!config.contains("Subsystem"), "{config}");
    let output = sftp(&testbed, "ls\n");
    assert!(!output.status.success());
    assert!(
        testbed.sshd_log().contains("subsystem request for sftp"),
        "{}",
        testbed.sshd_log()
    );
    let with = Testbed::start().unwrap();
    assert_ok(&sftp(&with, "ls\n"));
}

#[test]
fn dropping_a_dropbear_testbed_kills_background_commands() {
    let Some(testbed) = root_testbed(Testbed::builder().dropbear().login_shell(LoginShell::Bash))
    else {
        return;
    };
    let output = testbed
        .run("sleep 100 >/dev/null 2>&1 </dev/null & echo $!")
        .unwrap();
    assert_ok(&output);
    let pid: u32 = stdout(&output).trim().parse().unwrap();
    assert!(alive(pid));
    wait_for_testbed_environment(&testbed, pid);
    wait_until("the session to end", || {
        testbed.connection_pids().is_empty()
    });
    assert!(alive(pid));
    let listener = testbed.sshd_pid();
    assert!(alive(listener));

    drop(testbed);
    assert!(!alive(pid));
    assert!(!alive(listener));
}

#[test]
fn dropbear_restart_stop_freeze_and_thaw() {
    let Some(mut testbed) = root_testbed(Testbed::builder().dropbear().sftp(false)) else {
        return;
    };
    let port = testbed.port();
    let host_key = testbed.host_public_key().to_owned();
    let first_pid = testbed.sshd_pid();

    // stop() drops a running session.
    let mut ssh = testbed
        .ssh_command("echo started; sleep 60")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    ssh.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"started\n");
    let connections = testbed.connection_pids();
    assert_eq!(connections.len(), 1, "{connections:?}");
    testbed.stop();
    assert!(!ssh.wait().unwrap().success());
    assert!(connections.iter().all(|&pid| !alive(pid)));
    assert!(!alive(first_pid));
    assert_eq!(testbed.run("true").unwrap().status.code(), Some(255));

    testbed.restart().unwrap();
    assert_eq!(testbed.port(), port);
    assert_eq!(testbed.host_public_key(), host_key);
    assert_ne!(testbed.sshd_pid(), first_pid);
    let output = testbed.run("echo again").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "again\n");
    // Still without SFTP after the restart.
    assert!(!sftp(&testbed, "ls\n").status.success());

    // freeze: no banner for new connections; thaw: it arrives.
    testbed.freeze().unwrap();
    let mut stream = connect_without_banner(&testbed);
    let mut buf = [0u8; 64];
    testbed.thaw().unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = read_restarting(&mut stream, &mut buf).unwrap();
    assert!(buf[..n].starts_with(b"SSH-2.0-dropbear"), "{:?}", &buf[..n]);
    drop(stream);
    assert_ok(&testbed.run("true").unwrap());
}

#[test]
fn dropbear_rejects_sshd_config_lines() {
    let result = Testbed::builder()
        .dropbear()
        .sshd_config_line("LogLevel DEBUG")
        .start();
    match result {
        Err(TestbedError::Unsupported { what }) => assert!(what.contains("Dropbear"), "{what}"),
        Err(TestbedError::NotRoot { what }) => eprintln!("skipping: {what} needs root"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn dropbear_on_ipv6_loopback_and_in_a_network_namespace() {
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let Some(testbed) = root_testbed(
            Testbed::builder()
                .dropbear()
                .listen_address("::1".parse().unwrap()),
        ) else {
            return;
        };
        let known_hosts = fs::read_to_string(testbed.known_hosts_path()).unwrap();
        assert!(known_hosts.starts_with(&format!("[::1]:{} ", testbed.port())));
        let output = testbed.run("echo v6").unwrap();
        assert_ok(&output);
        assert_eq!(stdout(&output), "v6\n");
    } else {
        eprintln!("skipping the IPv6 part: no IPv6 loopback");
    }

    let Some(testbed) = root_testbed(
        Testbed::builder()
            .dropbear()
            .login_shell(LoginShell::Dash)
            .network_namespace(true),
    ) else {
        return;
    };
    assert!(testbed.host().starts_with("10.213."));
    assert_eq!(testbed.port(), 22);
    let output = testbed.run("echo $0").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "dash\n");
    assert_host_key_is_verified(&testbed);
}

// ---------------------------------------------------------------------------------------
// Privilege escalation: sudo, doas and su rules.

use swiftide_ssh_testbed::{
    BECOME_PASSWORD, BECOME_TARGET_PASSWORD, BECOME_TARGET_USER, DOAS_BLOCK_BEGIN, DOAS_BLOCK_END,
    Escalation, SUDOERS_FILE_PREFIX,
};

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A testbed logging in as `escalation`'s account; `None` without root.
fn escalation_testbed(escalation: Escalation) -> Option<Testbed> {
    let testbed = root_testbed(Testbed::builder().escalation(escalation))?;
    assert_eq!(testbed.escalation(), Some(escalation));
    assert_eq!(testbed.user(), escalation.account_name(None));
    assert!(!testbed.is_root_login());
    Some(testbed)
}

/// `command` with `password` and a newline on its standard input.
fn piped(password: &str, command: &str) -> String {
    format!("printf '%s\\n' '{password}' | {command}")
}

/// The testbed's OpenSSH client with a terminal for the remote command (`ssh -tt`).
fn ssh_with_tty(testbed: &Testbed, remote_command: &str) -> Command {
    let plain = testbed.ssh_command(remote_command);
    let mut command = Command::new("ssh");
    command
        .arg("-tt")
        .args(plain.get_args())
        .stdin(Stdio::null());
    command
}

/// Runs `command` (an `ssh -tt`), waits until its output shows `prompt`, then types
/// `answer` and a newline; returns everything it printed (the terminal's `\r\n` and all).
/// Answering only after the prompt matters: programs that read passwords from the terminal
/// flush pending input first (`tcsetattr(TCSAFLUSH)`).
fn answer_prompt(mut command: Command, prompt: &str, answer: &str) -> (Output, String) {
    use std::io::Write;
    use std::sync::mpsc;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel::<Vec<u8>>();
    let reader = thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sender.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stdin = child.stdin.take().unwrap();
    while !String::from_utf8_lossy(&seen).contains(prompt) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no prompt {prompt:?}; so far: {:?}",
            String::from_utf8_lossy(&seen)
        );
        if let Ok(chunk) = receiver.recv_timeout(left) {
            seen.extend(chunk);
        }
    }
    stdin.write_all(format!("{answer}\n").as_bytes()).unwrap();
    // EOF on ssh's stdin would end the terminal session early: keep it open until exit.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the command did not finish");
        while let Ok(chunk) = receiver.try_recv() {
            seen.extend(chunk);
        }
        thread::sleep(Duration::from_millis(10));
    };
    drop(stdin);
    reader.join().unwrap();
    while let Ok(chunk) = receiver.try_recv() {
        seen.extend(chunk);
    }
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let text = String::from_utf8_lossy(&seen).into_owned();
    (
        Output {
            status,
            stdout: seen,
            stderr: err.into_bytes(),
        },
        text,
    )
}

fn shadow_field(user: &str) -> String {
    fs::read_to_string("/etc/shadow")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{user}:")))
        .unwrap_or_else(|| panic!("{user} not in /etc/shadow"))
        .split(':')
        .next()
        .unwrap()
        .to_owned()
}

/// The account and the target exist as documented: login shell, a real password hash, the
/// home and its keys.
fn check_escalation_accounts(testbed: &Testbed, shell: &str) {
    let user = testbed.user();
    let fields = passwd_fields(user);
    assert_eq!(fields[5], format!("/home/{user}"));
    assert_eq!(fields[6], shell);
    assert!(shadow_field(user).starts_with('$'), "{user}: not a hash");
    let keys = fs::read_to_string(format!("/home/{user}/.ssh/authorized_keys")).unwrap();
    assert!(keys.contains("swiftide-ssh-testbed-owner="), "{keys}");
    let groups = fs::read_to_string("/etc/group").unwrap();
    assert!(
        !groups.lines().any(|line| line
            .rsplit(':')
            .next()
            .is_some_and(|members| members.split(',').any(|m| m == user))),
        "{user} is in a supplementary group"
    );
    let target = passwd_fields(BECOME_TARGET_USER);
    assert_eq!(target[6], "/bin/sh");
    assert!(shadow_field(BECOME_TARGET_USER).starts_with('$'));
}

fn sudoers_file(account: &str) -> PathBuf {
    PathBuf::from(format!("{SUDOERS_FILE_PREFIX}{account}"))
}

#[test]
fn sudo_without_password_becomes_root_and_the_target() {
    let Some(testbed) = escalation_testbed(Escalation::SudoNoPassword) else {
        return;
    };
    assert_eq!(testbed.user(), "swiftide-b-sudo-nopw");
    check_escalation_accounts(&testbed, "/bin/sh");
    let file = sudoers_file(testbed.user());
    let meta = fs::metadata(&file).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o440);
    assert_eq!(meta.uid(), 0);
    let rules = fs::read_to_string(&file).unwrap();
    assert!(
        rules.ends_with("\nswiftide-b-sudo-nopw ALL=(ALL:ALL) NOPASSWD: ALL\n"),
        "{rules}"
    );

    let output = testbed.run("sudo -n id -u").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n");
    let output = testbed
        .run(&format!("sudo -n -u {BECOME_TARGET_USER} id -un"))
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), format!("{BECOME_TARGET_USER}\n"));
    // The login account itself stays unprivileged.
    let output = testbed.run("id -u").unwrap();
    assert_eq!(stdout(&output), format!("{}\n", uid_of(testbed.user())));
}

#[test]
fn sudo_with_password_needs_the_password() {
    let Some(testbed) = escalation_testbed(Escalation::SudoPassword) else {
        return;
    };
    check_escalation_accounts(&testbed, "/bin/sh");
    let output = testbed.run("sudo -n true").unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("a password is required"),
        "{}",
        stderr(&output)
    );

    let output = testbed
        .run(&piped(BECOME_PASSWORD, "sudo -S -p '' id -u"))
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n");

    // The prompt goes to standard error.
    let output = testbed
        .run(&piped(BECOME_PASSWORD, "sudo -S -p 'PROMPT:' id -u"))
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n");
    assert!(stderr(&output).contains("PROMPT:"), "{}", stderr(&output));

    // A wrong password fails, after PAM's delay of about 2 s.
    let started = Instant::now();
    let output = testbed
        .run(&piped("wrong-password", "sudo -S -p '' true"))
        .unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("incorrect password attempt"),
        "{}",
        stderr(&output)
    );
    eprintln!("a wrong sudo password failed after {:?}", started.elapsed());
}

#[test]
fn sudo_requiring_a_tty_refuses_sessions_without_one() {
    let Some(testbed) = escalation_testbed(Escalation::SudoRequireTty) else {
        return;
    };
    let rules = fs::read_to_string(sudoers_file(testbed.user())).unwrap();
    assert!(
        rules.contains("Defaults:swiftide-b-sudo-tty requiretty\n"),
        "{rules}"
    );
    let output = testbed.run("sudo -n id -u").unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("you must have a tty"),
        "{}",
        stderr(&output)
    );
    // With a terminal (ssh -tt) the same command works, without a password.
    let output = ssh_with_tty(&testbed, "sudo -n id -u").output().unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\r\n");
}

const LECTURE: &str = "We trust you have received the usual lecture";

#[test]
fn sudo_lecture_is_printed_before_every_prompt() {
    let Some(testbed) = escalation_testbed(Escalation::SudoLecture) else {
        return;
    };
    for _ in 0..2 {
        let output = testbed
            .run(&piped(BECOME_PASSWORD, "sudo -S -p '' id -u"))
            .unwrap();
        assert_ok(&output);
        assert_eq!(stdout(&output), "0\n");
        assert!(stderr(&output).contains(LECTURE), "{}", stderr(&output));
    }
    // In one session, too, once sudo asks again (`sudo -k` drops the cached credentials,
    // which would otherwise spare the second prompt, and with it the lecture).
    let sudo = piped(BECOME_PASSWORD, "sudo -S -p '' id -u");
    let output = testbed.run(&format!("{sudo}; sudo -k; {sudo}")).unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n0\n");
    assert_eq!(
        stderr(&output).matches(LECTURE).count(),
        2,
        "{}",
        stderr(&output)
    );
    // Without `sudo -k`, the second sudo uses the cached credentials: no prompt.
    let output = testbed.run(&format!("{sudo}; sudo -n id -u")).unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n0\n");
    assert_eq!(
        stderr(&output).matches(LECTURE).count(),
        1,
        "{}",
        stderr(&output)
    );
}

#[test]
fn sudo_refuses_an_account_not_in_sudoers() {
    let Some(testbed) = escalation_testbed(Escalation::SudoNotInSudoers) else {
        return;
    };
    assert!(!sudoers_file(testbed.user()).exists());
    let output = testbed
        .run(&piped(BECOME_PASSWORD, "sudo -S -p '' true"))
        .unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("swiftide-b-sudo-none is not in the sudoers file"),
        "{}",
        stderr(&output)
    );
}

/// The testbed's lines in `/etc/doas.conf`.
fn doas_block() -> Vec<String> {
    let conf = fs::read_to_string("/etc/doas.conf").unwrap();
    let begin = conf.find(DOAS_BLOCK_BEGIN).expect("the testbed's block");
    let end = conf.find(DOAS_BLOCK_END).expect("the block's end");
    conf[begin..end]
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

#[test]
fn doas_without_password_becomes_root_and_the_target() {
    let Some(testbed) = escalation_testbed(Escalation::DoasNoPassword) else {
        return;
    };
    assert_eq!(testbed.user(), "swiftide-b-doas-nopw");
    check_escalation_accounts(&testbed, "/bin/sh");
    let block = doas_block();
    for line in [
        "permit nopass swiftide-b-doas-nopw as root",
        "permit nopass swiftide-b-doas-nopw as swiftide-become-target",
    ] {
        assert!(block.iter().any(|l| l == line), "{block:?}");
    }
    // opendoas refuses a config that group or others may write, or root does not own.
    let meta = fs::metadata("/etc/doas.conf").unwrap();
    assert_eq!(meta.mode() & 0o022, 0);
    assert_eq!(meta.uid(), 0);
    assert_ok(
        &Command::new("doas")
            .args(["-C", "/etc/doas.conf"])
            .output()
            .unwrap(),
    );

    let output = testbed.run("doas -n id -u").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n");
    let output = testbed
        .run(&format!("doas -n -u {BECOME_TARGET_USER} id -un"))
        .unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), format!("{BECOME_TARGET_USER}\n"));
}

#[test]
fn doas_with_password_asks_on_the_terminal() {
    let Some(testbed) = escalation_testbed(Escalation::DoasPassword) else {
        return;
    };
    let block = doas_block();
    assert!(
        block
            .iter()
            .any(|l| l == "permit swiftide-b-doas-pw as root"),
        "{block:?}"
    );
    let output = testbed.run("doas -n true").unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("Authentication required"),
        "{}",
        stderr(&output)
    );
    // Without a terminal, a password on standard input does not help.
    let output = testbed.run(&piped(BECOME_PASSWORD, "doas true")).unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("Authentication failed"),
        "{}",
        stderr(&output)
    );
    // With one, doas asks there.
    let (output, text) = answer_prompt(
        ssh_with_tty(&testbed, "doas id -u"),
        "password:",
        BECOME_PASSWORD,
    );
    assert_ok(&output);
    assert!(text.contains("doas (swiftide-b-doas-pw@"), "{text:?}");
    assert!(text.ends_with("\r\n0\r\n"), "{text:?}");
}

#[test]
fn su_becomes_the_target_with_its_password() {
    let Some(testbed) = escalation_testbed(Escalation::Su) else {
        return;
    };
    check_escalation_accounts(&testbed, "/bin/sh");
    assert!(!sudoers_file(testbed.user()).exists());
    let su = format!("su -s /bin/sh -c 'id -un' {BECOME_TARGET_USER}");
    let output = testbed.run(&piped(BECOME_TARGET_PASSWORD, &su)).unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), format!("{BECOME_TARGET_USER}\n"));
    // The prompt goes to standard error.
    assert!(stderr(&output).contains("Password:"), "{}", stderr(&output));

    let started = Instant::now();
    let output = testbed.run(&piped("wrong-password", &su)).unwrap();
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("Authentication failure"),
        "{}",
        stderr(&output)
    );
    eprintln!("a wrong su password failed after {:?}", started.elapsed());
}

#[test]
fn escalation_account_with_a_login_shell() {
    let Some(testbed) = root_testbed(
        Testbed::builder()
            .login_shell(LoginShell::Fish)
            .escalation(Escalation::SudoNoPassword),
    ) else {
        return;
    };
    assert_eq!(testbed.user(), "swiftide-b-fish-sudo-nopw");
    assert_eq!(testbed.login_shell(), Some(&LoginShell::Fish));
    let fish = testbed
        .login_shell_path()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    check_escalation_accounts(&testbed, &fish);
    let output = testbed.run(SHOW_SHELL).unwrap();
    assert_ok(&output);
    assert!(stdout(&output).starts_with("fish\n"), "{}", stdout(&output));
    let output = testbed.run("sudo -n id -u").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "0\n");
}

#[test]
fn escalation_account_on_dropbear() {
    let Some(testbed) = root_testbed(
        Testbed::builder()
            .dropbear()
            .escalation(Escalation::SudoNoPassword),
    ) else {
        return;
    };
    assert_eq!(testbed.server(), Server::Dropbear);
    assert_eq!(testbed.user(), "swiftide-b-sudo-nopw");
    let output = testbed.run("id -un; sudo -n id -u").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), "swiftide-b-sudo-nopw\n0\n");
}

#[test]
fn escalation_account_with_home_files_is_one_of_its_own() {
    let Some(testbed) = root_testbed(
        Testbed::builder()
            .escalation(Escalation::Su)
            .home_file(".profile", "echo from-profile\n"),
    ) else {
        return;
    };
    let user = testbed.user().to_owned();
    assert!(user.starts_with("swiftide-b-su-"), "{user}");
    assert_eq!(user.len(), "swiftide-b-su-".len() + 8);
    assert_eq!(
        fs::read_to_string(format!("/home/{user}/.profile")).unwrap(),
        "echo from-profile\n"
    );
    let output = testbed.run("id -un").unwrap();
    assert_ok(&output);
    assert_eq!(stdout(&output), format!("{user}\n"));
}

#[test]
fn every_escalation_at_once() {
    if root_testbed(Testbed::builder().escalation(Escalation::Su)).is_none() {
        return;
    }
    let handles: Vec<_> = Escalation::ALL
        .into_iter()
        .map(|escalation| {
            thread::spawn(move || {
                let testbed = Testbed::builder().escalation(escalation).start().unwrap();
                let output = testbed.run("id -un").unwrap();
                assert_ok(&output);
                assert_eq!(stdout(&output).trim(), escalation.account_name(None));
                let output = testbed.run("sudo -n true").unwrap();
                let sudo_ok = output.status.success();
                let output = testbed.run("doas -n true").unwrap();
                let doas_ok = output.status.success();
                (escalation, sudo_ok, doas_ok)
            })
        })
        .collect();
    for handle in handles {
        let (escalation, sudo_ok, doas_ok) = handle.join().unwrap();
        assert_eq!(
            sudo_ok,
            escalation == Escalation::SudoNoPassword,
            "{escalation:?}: sudo -n"
        );
        assert_eq!(
            doas_ok,
            escalation == Escalation::DoasNoPassword,
            "{escalation:?}: doas -n"
        );
    }
    // Every doas line of the block is there once.
    let block = doas_block();
    let mut unique = block.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), block.len(), "{block:?}");
}
