//! The executor against SSH servers in Docker containers (`DockerTestbed`): OpenSSH on
//! Debian and Dropbear on a BusyBox-only userland, both logging in as the non-root `tester`
//! (login shell `/bin/sh`).
//!
//! * the quickstart flow (and the README's example, verbatim);
//! * the differential table against swiftide's `LocalExecutor`, with a directory shared
//!   between this machine and the container at the same path
//!   (`DockerTestbedBuilder::mount`);
//! * the file tests (ReadFile/WriteFile, atomic replace, odd names, `stream_files`), over
//!   SFTP (OpenSSH) and over the shell fallback (Dropbear has no sftp-server);
//! * a fleet of 24 containers with faults injected while the command runs.
//!
//! Needs Docker (`bash testbed/docker/prepare.sh`). Without it each test prints why and
//! returns, unless the environment variable `CI` is set: then it fails.

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::differential::{self, ExpectedDifference, Outcome, cases, seed};
use futures::StreamExt;
use swiftide_core::{Command, CommandError, ToolExecutor};
use swiftide_ssh_executor::{
    Error, ExitStatus, Fleet, FleetEvent, HostResult, SshExecutor, SshExecutorBuilder,
};
use swiftide_ssh_testbed::{DockerImage, DockerTestbed, DockerTestbedBuilder};

/// Returns from the test (after printing why) when Docker cannot be used, unless `CI` is
/// set, in which case the test fails.
macro_rules! require_docker {
    () => {
        if let Err(reason) = DockerTestbed::available() {
            assert!(
                std::env::var_os("CI").is_none(),
                "Docker is required when CI is set: {reason}"
            );
            eprintln!("skipping: {reason}");
            return;
        }
    };
}

/// Starts a container (blocking docker CLI calls, off the async runtime's threads).
async fn start(builder: DockerTestbedBuilder) -> DockerTestbed {
    tokio::task::spawn_blocking(move || builder.start())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start the Docker testbed: {e}"))
}

/// An executor builder for `tb`: its key, strict host-key checking against its known_hosts.
fn builder(tb: &DockerTestbed) -> SshExecutorBuilder {
    SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file(tb.private_key_path())
        .known_hosts_file(tb.known_hosts_path())
}

fn image_name(image: DockerImage) -> &'static str {
    match image {
        DockerImage::OpenSsh => "openssh",
        _ => "dropbear-busybox",
    }
}

// ---------------------------------------------------------------------------------------
// The README's example ("Testing your code against the Docker testbed"), verbatim.

#[tokio::test]
async fn readme_example_runs_a_command_in_a_container() {
    use swiftide_core::{Command, ToolExecutor};
    use swiftide_ssh_executor::SshExecutor;
    use swiftide_ssh_testbed::DockerTestbed;

    // Without Docker: skip on a developer machine, fail in CI.
    if let Err(reason) = DockerTestbed::available() {
        assert!(
            std::env::var_os("CI").is_none(),
            "Docker is required in CI: {reason}"
        );
        eprintln!("skipping: {reason}");
        return;
    }
    // An OpenSSH server in a fresh container, published on 127.0.0.1:<ephemeral port>,
    // removed when `testbed` is dropped. (`start` blocks for about a second.)
    let testbed = DockerTestbed::start().expect("start the container");
    let executor = SshExecutor::builder()
        .host(testbed.host())
        .port(testbed.port())
        .user(testbed.user()) // "tester", login shell /bin/sh
        .private_key_file(testbed.private_key_path())
        .known_hosts_file(testbed.known_hosts_path()) // strict host-key checking
        .build()
        .await
        .expect("connect");

    let output = executor
        .exec_cmd(&Command::shell("echo \"hello from $(id -un)\""))
        .await
        .expect("run the command");
    assert_eq!(output.to_string(), "hello from tester\n");
}

// ---------------------------------------------------------------------------------------
// Quickstart flow.

async fn quickstart(image: DockerImage) {
    let name = image_name(image);
    let tb = start(DockerTestbed::builder().image(image)).await;
    let ex = builder(&tb)
        .workdir("/home/tester")
        .default_timeout(Some(Duration::from_secs(30)))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{name}: connect: {e}\n{}", tb.logs().unwrap_or_default()));

    // Streaming output arrives in order.
    let mut streamed = Vec::new();
    let out = ex
        .exec_cmd_streaming(
            &Command::shell("for i in 1 2 3; do echo step $i; sleep 0.1; done"),
            &mut |chunk: &swiftide_core::CommandOutputChunk| {
                streamed.extend_from_slice(chunk.as_bytes())
            },
        )
        .await
        .unwrap();
    assert_eq!(out.to_string(), "step 1\nstep 2\nstep 3\n", "{name}");
    assert_eq!(streamed, b"step 1\nstep 2\nstep 3\n", "{name}");

    // Who and where.
    let run = ex.run("id -un; pwd; echo $0").await.unwrap();
    assert_eq!(run.stdout(), b"tester\n/home/tester\nsh\n", "{name}");

    // Failure keeps its output; a timeout kills the group.
    let failed = ex.exec_cmd(&Command::shell("echo oops >&2; exit 3")).await;
    assert!(
        matches!(&failed, Err(CommandError::NonZeroExit(out)) if out.to_string() == "oops\n"),
        "{name}: {failed:?}"
    );
    let started = Instant::now();
    let slow = ex
        .exec_cmd(
            &Command::shell("echo started; sleep 300 & sleep 300")
                .with_timeout(Duration::from_millis(500)),
        )
        .await;
    assert!(
        matches!(&slow, Err(CommandError::TimedOut { output, .. }) if output.to_string() == "started\n"),
        "{name}: {slow:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{name}");
    let left = tb.run("ps -o args | grep '^sleep 300' || true").unwrap();
    assert!(
        left.stdout.is_empty(),
        "{name}: survivors of the timeout: {}",
        String::from_utf8_lossy(&left.stdout)
    );

    // Files: write (parents created), read, and stream_files.
    ex.exec_cmd(&Command::write_file("proj/src/main.rs", "fn main() {}\n"))
        .await
        .unwrap();
    ex.exec_cmd(&Command::write_file("proj/README.md", "# proj\n"))
        .await
        .unwrap();
    let read = ex
        .exec_cmd(&Command::read_file("proj/src/main.rs"))
        .await
        .unwrap();
    assert_eq!(read.to_string(), "fn main() {}\n", "{name}");
    let mut stream = ex
        .stream_files(Path::new("proj"), Some(vec!["rs".into()]))
        .await
        .unwrap();
    let mut found = Vec::new();
    while let Some(node) = stream.next().await {
        let node = node.unwrap();
        found.push((node.path.clone(), node.chunk.clone()));
    }
    assert_eq!(
        found,
        vec![(
            Path::new("/home/tester/proj/src/main.rs").to_path_buf(),
            "fn main() {}\n".to_owned()
        )],
        "{name}"
    );
    eprintln!("docker: {name} quickstart ok");
}

#[tokio::test]
async fn quickstart_openssh() {
    require_docker!();
    quickstart(DockerImage::OpenSsh).await;
}

#[tokio::test]
async fn quickstart_dropbear_busybox() {
    require_docker!();
    quickstart(DockerImage::DropbearBusybox).await;
}

// ---------------------------------------------------------------------------------------
// The differential table against LocalExecutor, sharing a directory with the container.

/// What a BusyBox-only host (no python, no bash, BusyBox's ash and applets) legitimately
/// does differently from this Debian machine. Each entry is checked, not skipped.
fn busybox_differences() -> Vec<ExpectedDifference> {
    fn not_found(o: &Outcome) -> bool {
        o.variant == "NonZeroExit" && String::from_utf8_lossy(&o.stderr).contains("not found")
    }
    vec![
        ExpectedDifference {
            case: "shebang python",
            why: "no /usr/bin/env (BusyBox's applets are in /bin) and no python3",
            remote: not_found,
        },
        ExpectedDifference {
            case: "shebang env -S",
            why: "no /usr/bin/env (BusyBox's applets are in /bin)",
            remote: not_found,
        },
        ExpectedDifference {
            case: "env set",
            why: "Debian's static BusyBox has no printenv applet",
            remote: not_found,
        },
        ExpectedDifference {
            case: "env removed",
            why: "Debian's static BusyBox has no printenv applet (exit 127 echoed)",
            remote: |o| {
                o.variant == "Ok"
                    && o.stdout == b"127\n"
                    && String::from_utf8_lossy(&o.stderr).contains("not found")
            },
        },
        ExpectedDifference {
            case: "shebang bash",
            why: "no /bin/bash on a BusyBox-only host",
            remote: not_found,
        },
        ExpectedDifference {
            case: "bashism fails on sh",
            why: "BusyBox ash implements `[[`, dash does not",
            remote: |o| o.variant == "Ok" && o.stdout.is_empty() && o.stderr.is_empty(),
        },
    ]
}

async fn differential_table(image: DockerImage, expected: Vec<ExpectedDifference>) {
    let name = image_name(image);
    let shared = tempfile::Builder::new()
        .prefix("swiftide-docker-diff-")
        .tempdir()
        .unwrap();
    let dir = shared.path().to_path_buf();
    seed(&dir);
    // Seeded by root here; `tester` (uid 1000) in the container must write into it too.
    let chmod = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(chmod.success());
    let tb = start(DockerTestbed::builder().image(image).mount(&dir)).await;
    let (local, remote) = differential::executors(&dir, builder(&tb));
    let remote = remote.build().await.unwrap();
    let mut cases = cases(&dir);
    // The environment plan without `printenv` (which BusyBox lacks, see above).
    cases.push((
        "env with shell builtins",
        Command::shell("echo \"${DIFF_SET-unset}|${DIFF_REMOVED-unset}\""),
        differential::Compare::Exact,
    ));
    let started = Instant::now();
    let (mismatches, seen) =
        differential::compare_expecting(&local, &remote, &cases, &expected).await;
    for line in &seen {
        eprintln!("docker: {name} {line}");
    }
    eprintln!(
        "docker: {name} differential {}/{} same, {} expected differences, in {:?}",
        cases.len() - mismatches.len() - seen.len(),
        cases.len(),
        seen.len(),
        started.elapsed()
    );
    assert!(
        mismatches.is_empty(),
        "{name}: {} of {} cases differ from LocalExecutor unexpectedly:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
    assert_eq!(seen.len(), expected.len(), "{name}");
}

#[tokio::test]
async fn differential_table_openssh() {
    require_docker!();
    differential_table(DockerImage::OpenSsh, Vec::new()).await;
}

#[tokio::test]
async fn differential_table_dropbear_busybox() {
    require_docker!();
    differential_table(DockerImage::DropbearBusybox, busybox_differences()).await;
}

// ---------------------------------------------------------------------------------------
// File tests: SFTP on OpenSSH, the shell fallback on Dropbear (no sftp-server).

async fn files(image: DockerImage) {
    use std::os::unix::fs::PermissionsExt;
    let name = image_name(image);
    let shared = tempfile::Builder::new()
        .prefix("swiftide-docker-files-")
        .tempdir()
        .unwrap();
    let dir = shared.path().to_path_buf();
    let tb = start(DockerTestbed::builder().image(image).mount(&dir)).await;
    let ex = builder(&tb).workdir(&dir).build().await.unwrap();

    // Odd names, through ReadFile / WriteFile.
    let odd = "it's a \\ $HOME !x\nnew.txt";
    ex.exec_cmd(&Command::write_file(odd, "content 'quoted' \\ $x\n"))
        .await
        .unwrap_or_else(|e| panic!("{name}: write: {e}"));
    let read = ex.exec_cmd(&Command::read_file(odd)).await.unwrap();
    assert_eq!(read.to_string(), "content 'quoted' \\ $x\n", "{name}");
    assert_eq!(
        std::fs::read_to_string(dir.join(odd)).unwrap(),
        "content 'quoted' \\ $x\n",
        "{name}"
    );
    // Atomic replace: a new inode, the mode kept, no temporary file left.
    std::fs::set_permissions(dir.join(odd), std::fs::Permissions::from_mode(0o640)).unwrap();
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = inode(&dir.join(odd));
    ex.exec_cmd(&Command::write_file(odd, "second"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.join(odd)).unwrap(), b"second", "{name}");
    assert_ne!(inode(&dir.join(odd)), before, "{name}: replaced in place");
    let mode = std::fs::metadata(dir.join(odd))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640, "{name}");
    // Parents are created; binary bytes round-trip.
    ex.exec_cmd(&Command::write_file("a/b/c.txt", "deep"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.join("a/b/c.txt")).unwrap(), b"deep");
    let bytes: Vec<u8> = (0..=255).collect();
    ex.write_file_bytes(Path::new("bin.dat"), &bytes)
        .await
        .unwrap();
    assert_eq!(
        ex.read_file_bytes(Path::new("bin.dat")).await.unwrap(),
        bytes
    );
    // Errors read like LocalExecutor's.
    let missing = ex.exec_cmd(&Command::read_file("missing.txt")).await;
    assert!(
        matches!(&missing, Err(CommandError::NonZeroExit(out)) if out.to_string().contains("No such file")),
        "{name}: {missing:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp") || name.starts_with(".swiftide"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "{name}: temp files left: {leftovers:?}"
    );

    // stream_files with the server's own `find` (GNU or BusyBox): hidden files and
    // .gitignore'd ones are skipped inside a git repository.
    std::fs::write(dir.join("a/one.rs"), "fn one() {}").unwrap();
    std::fs::write(dir.join("a/.hidden.rs"), "hidden").unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(dir.join(".gitignore"), "ignored.rs\n").unwrap();
    std::fs::write(dir.join("a/ignored.rs"), "ignored").unwrap();
    std::fs::write(dir.join(odd).with_extension("rs"), "odd").unwrap();
    let mut stream = ex
        .stream_files(&dir, Some(vec!["rs".into()]))
        .await
        .unwrap();
    let mut found = Vec::new();
    while let Some(node) = stream.next().await {
        let node = node.unwrap();
        found.push((node.path, node.chunk));
    }
    found.sort();
    let mut want = vec![
        (dir.join("a/one.rs"), "fn one() {}".to_owned()),
        (dir.join(odd).with_extension("rs"), "odd".to_owned()),
    ];
    want.sort();
    assert_eq!(found, want, "{name}");
    eprintln!("docker: {name} files ok");
}

#[tokio::test]
async fn file_commands_openssh() {
    require_docker!();
    files(DockerImage::OpenSsh).await;
}

#[tokio::test]
async fn file_commands_dropbear_busybox() {
    require_docker!();
    files(DockerImage::DropbearBusybox).await;
}
