//! The testbed's images through `testcontainers` (feature `testcontainers`): each image is
//! started with `AsyncRunner`, and the executor runs commands on it over SSH with strict
//! host-key checking.
//!
//! Without Docker these tests print why and pass, unless the environment variable `CI` is
//! set: then a missing Docker is a failure (run `bash testbed/docker/prepare.sh` first).

use std::time::Instant;

use swiftide_core::{Command, ToolExecutor};
use swiftide_ssh_executor::{Error, ExitStatus, SshExecutor};
use swiftide_ssh_testbed::{DockerImage, DockerTestbed, SshConnection, SshImage};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ImageExt};

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

/// Starts `image` the way the README shows: build if missing, publish on loopback.
async fn start(image: SshImage) -> (ContainerAsync<SshImage>, SshConnection) {
    let started = Instant::now();
    image.ensure_built().await.expect("build the image");
    let container = image
        .on_loopback()
        .start()
        .await
        .expect("start the container");
    let ssh = SshConnection::of(&container)
        .await
        .expect("connection facts");
    eprintln!(
        "{:?} ready in {:?} on {}:{}",
        container.image().image(),
        started.elapsed(),
        ssh.host(),
        ssh.port()
    );
    (container, ssh)
}

/// An executor for `ssh`: its key, strict host-key checking against its known_hosts.
async fn executor(ssh: &SshConnection) -> SshExecutor {
    SshExecutor::builder()
        .host(ssh.host())
        .port(ssh.port())
        .user(ssh.user())
        .private_key_file(ssh.private_key_path())
        .known_hosts_file(ssh.known_hosts_path())
        .build()
        .await
        .expect("connect with strict host-key checking")
}

// The README's example ("testcontainers"), verbatim.
#[tokio::test]
async fn readme_example_runs_a_command_through_testcontainers() {
    if !docker_available() {
        return;
    }
    use swiftide_core::{Command, ToolExecutor};
    use swiftide_ssh_executor::SshExecutor;
    use swiftide_ssh_testbed::{SshConnection, SshImage};
    use testcontainers::runners::AsyncRunner;

    let image = SshImage::openssh().expect("keys"); // or SshImage::dropbear()
    image.ensure_built().await.expect("build"); // prepare.sh, only when the image is missing
    let container = image.on_loopback().start().await.expect("start"); // 127.0.0.1 only
    let ssh = SshConnection::of(&container)
        .await
        .expect("port and known_hosts");

    let executor = SshExecutor::builder()
        .host(ssh.host())
        .port(ssh.port())
        .user(ssh.user()) // "tester"
        .private_key_file(ssh.private_key_path())
        .known_hosts_file(ssh.known_hosts_path()) // strict host-key checking
        .build()
        .await
        .expect("connect");
    let output = executor
        .exec_cmd(&Command::shell("echo \"hello from $(id -un)\""))
        .await
        .expect("run the command");
    assert_eq!(output.to_string(), "hello from tester\n");
}

#[tokio::test]
async fn openssh_image_runs_commands() {
    if !docker_available() {
        return;
    }
    let (container, ssh) = start(SshImage::openssh().unwrap()).await;
    assert_eq!(ssh.host(), "127.0.0.1");
    assert_eq!(ssh.user(), "tester");
    let ex = executor(&ssh).await;

    let uname = ex
        .run("uname -s; id -un; echo $SWIFTIDE_SSH_TESTBED")
        .await
        .unwrap();
    assert!(uname.success(), "{uname:?}");
    assert_eq!(uname.stdout_lossy(), "Linux\ntester\n1\n");

    // sshd is OpenSSH: its version string says so, and the server is the container's.
    let version = ex.run("/usr/sbin/sshd -V 2>&1 | head -n 1").await.unwrap();
    assert!(
        version.stdout_lossy().starts_with("OpenSSH_"),
        "{version:?}"
    );
    let hostname = ex.run("hostname").await.unwrap();
    assert_eq!(hostname.stdout_lossy().trim(), &container.id()[..12]);

    // `on_loopback`: port 22 is published on 127.0.0.1 only.
    let published = std::process::Command::new("docker")
        .args(["port", container.id(), "22/tcp"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&published.stdout),
        format!("127.0.0.1:{}\n", ssh.port())
    );

    let failed = ex.run("echo oops >&2; exit 3").await.unwrap();
    assert_eq!(failed.status, ExitStatus::Code(3));
    assert_eq!(failed.stderr(), b"oops\n");
}

#[tokio::test]
async fn dropbear_image_runs_commands() {
    if !docker_available() {
        return;
    }
    let (container, ssh) = start(SshImage::dropbear().unwrap()).await;
    let ex = executor(&ssh).await;

    let run = ex.run("uname -s; id -un; echo $0").await.unwrap();
    assert!(run.success(), "{run:?}");
    assert_eq!(run.stdout_lossy(), "Linux\ntester\nsh\n");

    // BusyBox is the only userland, and the server is Dropbear.
    let userland = ex
        .run("readlink /bin/sh; test -e /bin/bash || echo no bash")
        .await
        .unwrap();
    assert_eq!(userland.stdout_lossy(), "/bin/busybox\nno bash\n");
    let server = ex
        .exec_cmd(&Command::shell("ps -o comm | grep -c '^dropbear$'"))
        .await
        .unwrap();
    assert_ne!(
        server.to_string().trim(),
        "0",
        "no dropbear process: {server}"
    );
    assert_eq!(container.image().image(), DockerImage::DropbearBusybox);
}

/// Server arguments go through `ImageExt::with_cmd`, like any testcontainers image.
#[tokio::test]
async fn server_arguments_reach_sshd() {
    if !docker_available() {
        return;
    }
    let image = SshImage::openssh().unwrap();
    image.ensure_built().await.unwrap();
    let container = image
        .on_loopback()
        .with_cmd(["-o", "SetEnv=SWIFTIDE_SSH_TESTBED=from-cmd"])
        .start()
        .await
        .unwrap();
    let ssh = SshConnection::of(&container).await.unwrap();
    let run = executor(&ssh)
        .await
        .run("echo $SWIFTIDE_SSH_TESTBED")
        .await
        .unwrap();
    assert_eq!(run.stdout_lossy(), "from-cmd\n");
}

/// Host-key checking stays strict: the known_hosts of another container (another host key
/// for the same address) is refused.
#[tokio::test]
async fn a_wrong_host_key_is_refused() {
    if !docker_available() {
        return;
    }
    let (_container, ssh) = start(SshImage::dropbear().unwrap()).await;
    let other = SshImage::dropbear().unwrap();
    let other_key = other.host_public_key();
    assert_ne!(other_key, ssh.host_public_key());
    let wrong = ssh.known_hosts_path().with_file_name("known_hosts_wrong");
    std::fs::write(
        &wrong,
        format!("[{}]:{} {other_key}\n", ssh.host(), ssh.port()),
    )
    .unwrap();
    let result = SshExecutor::builder()
        .host(ssh.host())
        .port(ssh.port())
        .user(ssh.user())
        .private_key_file(ssh.private_key_path())
        .known_hosts_file(&wrong)
        .build()
        .await;
    assert!(
        matches!(&result, Err(Error::HostKeyMismatch { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn logs_in_as_an_escalation_account_and_becomes_root() {
    if !docker_available() {
        return;
    }
    let user = swiftide_ssh_testbed::Escalation::SudoNoPassword.docker_user();
    let (_container, ssh) = start(SshImage::openssh().expect("keys").user(user)).await;
    assert_eq!(ssh.user(), "sudo-nopasswd");
    let executor = executor(&ssh).await;
    let output = executor
        .exec_cmd(&Command::shell("id -un; sudo -n id -u"))
        .await
        .expect("run the command");
    assert_eq!(output.to_string(), "sudo-nopasswd\n0\n");
}
