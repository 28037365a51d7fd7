//! The executor against SSH servers in Docker containers (`DockerTestbed`): OpenSSH on
//! Debian and Dropbear on a BusyBox-only userland, both logging in as the non-root `tester`
//! (login shell `/bin/sh`).
//!
//! * the quickstart flow (and the guide's example, `docs/guide/11-testing.md`);
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

use common::{
    differential::{self, ExpectedDifference, Outcome, cases, seed},
    docker_builder,
};
use futures::StreamExt;
use swiftide_core::{Command, CommandError, ToolExecutor};
use swiftide_ssh_executor::{Error, ExitStatus, Fleet, FleetEvent, HostResult};
use swiftide_ssh_testbed::{DockerImage, DockerTestbed, DockerTestbedBuilder};

/// Returns from the test (after printing why) when Docker cannot be used, unless `CI` is
/// set, in which case the test fails.
macro_rules! require_docker {
    () => {
        if let Err(reason) = DockerTestbed::available() {
            swiftide_ssh_testbed::skip_unless_ci(&reason, "bash testbed/docker/prepare.sh");
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

fn image_name(image: DockerImage) -> &'static str {
    match image {
        DockerImage::OpenSsh => "openssh",
        _ => "dropbear-busybox",
    }
}

// ---------------------------------------------------------------------------------------
// The guide's example (docs/guide/11-testing.md, "Testing your code against the Docker
// testbed"), verbatim but for its name and attribute.

#[tokio::test]
async fn readme_example_runs_a_command_in_a_container() {
    use swiftide_core::{Command, ToolExecutor};
    use swiftide_ssh_executor::SshExecutor;
    use swiftide_ssh_testbed::DockerTestbed;

    // Without Docker: skip on a developer machine, fail in CI.
    if let Err(reason) = DockerTestbed::available() {
        swiftide_ssh_testbed::skip_unless_ci(&reason, "bash testbed/docker/prepare.sh");
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
    let ex = docker_builder(&tb)
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
            case: "a bash script leads its process group",
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
    let (local, remote) = differential::executors(&dir, docker_builder(&tb));
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
    let ex = docker_builder(&tb).workdir(&dir).build().await.unwrap();

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

// ---------------------------------------------------------------------------------------
// A fleet of 24 containers, with faults while the command runs.

/// What happens to a host of the chaos fleet while the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Kill,
    Pause,
    Disconnect,
    Restart,
}

/// How a `HostResult` is classified for the assertions (and the log).
fn category(result: &HostResult) -> &'static str {
    match &result.outcome {
        Ok(execution) if execution.status.success() => "ok",
        Ok(execution) if matches!(execution.status, ExitStatus::TimedOut { .. }) => "timeout",
        Ok(_) => "failed",
        Err(Error::Timeout { .. }) => "timeout",
        // The connection broke under the running command.
        Err(Error::ConnectionLost { .. }) => "may have run",
        Err(_) => "unreachable",
    }
}

const FLEET_SIZE: usize = 24;

/// Fleet hosts alternate between the images: OpenSSH at even positions, Dropbear at odd.
fn fleet_image(i: usize) -> DockerImage {
    if i.is_multiple_of(2) {
        DockerImage::OpenSsh
    } else {
        DockerImage::DropbearBusybox
    }
}

/// Starts `n` containers at once, alternating images.
async fn start_fleet_containers(n: usize) -> Vec<DockerTestbed> {
    tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    scope.spawn(move || DockerTestbed::builder().image(fleet_image(i)).start())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap_or_else(|e| panic!("start: {e}")))
                .collect()
        })
    })
    .await
    .unwrap()
}
const PER_HOST_TIMEOUT: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_of_24_containers_with_faults_mid_run() {
    require_docker!();
    // Hosts alternate between the images; the first six get a fault each.
    let faults = [
        Fault::Kill,
        Fault::Kill,
        Fault::Pause,
        Fault::Pause,
        Fault::Disconnect,
        Fault::Restart,
    ];
    let fault_of = move |i: usize| faults.get(i).copied().unwrap_or(Fault::None);

    let setup = Instant::now();
    let mut testbeds = start_fleet_containers(FLEET_SIZE).await;
    let mut members = Vec::new();
    for tb in &testbeds {
        members.push(
            docker_builder(tb)
                .connect_timeout(Duration::from_secs(3))
                .build()
                .await
                .unwrap_or_else(|e| panic!("connect to {}: {e}", tb.port())),
        );
    }
    eprintln!(
        "docker: fleet: {FLEET_SIZE} containers started and connected in {:?}",
        setup.elapsed()
    );
    let fleet = Fleet::new(members)
        .concurrency(FLEET_SIZE)
        .per_host_timeout(PER_HOST_TIMEOUT);

    // Run 1: the faults land while every host is inside `sleep 4`.
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let run_began = Instant::now();
    let run = fleet.run("echo started; sleep 4; echo done", move |event| {
        if let FleetEvent::Output { chunk, .. } = event
            && chunk.bytes().starts_with(b"started")
        {
            let _ = started_tx.send(());
        }
    });
    // (`Fleet::run`'s future cannot be handed to `tokio::spawn`, rustc #102211; so the
    // faults run beside it in the same task.)
    let inject = async move {
        for _ in 0..FLEET_SIZE {
            tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
                .await
                .expect("every host starts the command")
                .unwrap();
        }
        let all_started = run_began.elapsed();
        let (testbeds, times) = tokio::task::spawn_blocking(move || {
            let times: Vec<Option<Duration>> = std::thread::scope(|scope| {
                let handles: Vec<_> = testbeds
                    .iter_mut()
                    .enumerate()
                    .map(|(i, tb)| {
                        scope.spawn(move || {
                            let result = match fault_of(i) {
                                Fault::None => return None,
                                Fault::Kill => tb.kill(),
                                Fault::Pause => tb.pause(),
                                Fault::Disconnect => tb.disconnect_network(),
                                Fault::Restart => tb.restart(),
                            };
                            result.unwrap_or_else(|e| panic!("host {i}: {:?}: {e}", fault_of(i)));
                            Some(run_began.elapsed())
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            (testbeds, times)
        })
        .await
        .unwrap();
        (testbeds, times, all_started)
    };
    let (report, (testbeds_back, fault_times, all_started)) = tokio::join!(run, inject);
    testbeds = testbeds_back;
    eprintln!(
        "docker: fleet run 1: all started after {all_started:?}, finished in {:?}, {:?}",
        report.duration,
        report.summary()
    );

    // Run 2: the next command on every host.
    let report2 = fleet.run("echo again", |_| {}).await;
    eprintln!(
        "docker: fleet run 2 finished in {:?}, {:?}",
        report2.duration,
        report2.summary()
    );

    let mut problems = Vec::new();
    for (i, ((first, second), tb)) in report
        .results
        .iter()
        .zip(&report2.results)
        .zip(&testbeds)
        .enumerate()
    {
        let fault = fault_of(i);
        eprintln!(
            "docker: fleet host {i:2} {:16} port {} fault {:10} (done at {:>6}) | run 1: {:12} {:>7.2?} {:<12} | run 2: {:12} {:>7.2?} {:<12}",
            image_name(fleet_image(i)),
            tb.port(),
            format!("{fault:?}"),
            fault_times
                .get(i)
                .copied()
                .flatten()
                .map(|t| format!("{:.1}s", t.as_secs_f64()))
                .unwrap_or_default(),
            category(first),
            first.duration,
            first.status_text(),
            category(second),
            second.duration,
            second.status_text(),
        );
        let (want_first, want_second) = match fault {
            Fault::None => ("ok", "ok"),
            // The connection breaks under a running command: it may have run.
            Fault::Kill => ("may have run", "unreachable"),
            // A silent peer: the command's deadline; then no channel within the deadline.
            Fault::Pause => ("timeout", "timeout"),
            // The published port goes away with the network.
            Fault::Disconnect => ("may have run", "unreachable"),
            // The connection breaks; the pool reconnects for the next command.
            Fault::Restart => ("may have run", "ok"),
        };
        if category(first) != want_first || category(second) != want_second {
            problems.push(format!(
                "host {i} ({fault:?}): want {want_first}/{want_second}, got {}/{}: {:?} / {:?}",
                category(first),
                category(second),
                first.outcome,
                second.outcome
            ));
        }
        if first.success() && first.outcome.as_ref().unwrap().stdout() != b"started\ndone\n" {
            problems.push(format!("host {i}: output {:?}", first.outcome));
        }
        if second.success() && second.outcome.as_ref().unwrap().stdout() != b"again\n" {
            problems.push(format!("host {i}: output {:?}", second.outcome));
        }
        for (run, result) in [(1, first), (2, second)] {
            // (Scheduling slack only: the fleet reports at the deadline at the latest.)
            if result.duration > PER_HOST_TIMEOUT + Duration::from_millis(250) {
                problems.push(format!(
                    "host {i} ({fault:?}) run {run}: reported after {:?}, over the per-host deadline {PER_HOST_TIMEOUT:?}",
                    result.duration
                ));
            }
        }
    }
    // The summaries count the same categories.
    let counts = |r: &swiftide_ssh_executor::FleetReport| {
        let s = r.summary();
        (
            s.succeeded,
            s.failed,
            s.timed_out,
            s.may_have_run,
            s.unreachable,
        )
    };
    let faulty = faults.len();
    assert_eq!(counts(&report), (FLEET_SIZE - faulty, 0, 2, 4, 0), "run 1");
    assert_eq!(
        counts(&report2),
        (FLEET_SIZE - faulty + 1, 0, 2, 0, 3),
        "run 2"
    );
    // A paused host's result carries what it sent before it froze.
    for (i, result) in report.results.iter().enumerate() {
        if fault_of(i) == Fault::Pause {
            let execution = result.outcome.as_ref().unwrap();
            assert_eq!(execution.stdout(), b"started\n", "host {i}");
            assert!(
                matches!(
                    execution.status,
                    ExitStatus::TimedOut {
                        confirmed_dead: false,
                        ..
                    }
                ),
                "host {i}: {execution:?}"
            );
        }
    }
    // Leave nothing frozen behind.
    for (i, tb) in testbeds.iter().enumerate() {
        if fault_of(i) == Fault::Pause {
            let _ = tb.unpause();
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------
// A rolling run over containers of both images: a host down at the start is retried until
// it is back, a changed host key is its own status and never retried, and a batch
// threshold trips on an unreachable host.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_rollout_over_containers_retries_refuses_and_trips() {
    use swiftide_ssh_executor::fleet::{HostKeyProblem, HostStatus};
    require_docker!();
    let mut testbeds = start_fleet_containers(6).await;
    let dir = tempfile::tempdir().unwrap();
    // c4 (index 3) is checked against c3's key: a changed host key.
    let wrong = dir.path().join("known_hosts");
    std::fs::write(
        &wrong,
        format!(
            "[127.0.0.1]:{} {}\n",
            testbeds[3].port(),
            testbeds[2].host_public_key()
        ),
    )
    .unwrap();
    let fleet = |testbeds: &[DockerTestbed]| {
        Fleet::named(testbeds.iter().enumerate().map(|(i, tb)| {
            let mut b = docker_builder(tb).connect_timeout(Duration::from_millis(500));
            if i == 3 {
                b = b.known_hosts_file(&wrong);
            }
            (format!("c{}", i + 1), b.build_lazy().unwrap())
        }))
        .per_host_timeout(Duration::from_secs(10))
    };

    // Run 1: c2 is down when the run starts and comes back a second later; the fleet is
    // built first (build_lazy opens nothing), and c2's port stays the same.
    testbeds[1].stop().unwrap();
    let run1 = fleet(&testbeds).retry_unreachable(6, Duration::from_millis(300));
    let mut down = testbeds.remove(1);
    let back = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        down.start_again().unwrap();
        down
    });
    let mut retried = Vec::new();
    let report = run1
        .run("uname -s", |event| {
            if let FleetEvent::Retrying { host, .. } = event {
                retried.push(host.to_owned());
            }
        })
        .await;
    testbeds.insert(1, back.join().unwrap());
    let heads: Vec<String> = report
        .fold()
        .iter()
        .map(|g| format!("{} {} {:?}", g.nodeset, g.status, g.stdout))
        .collect();
    eprintln!("docker: fleet rollout run 1: {heads:?}, retried {retried:?}");
    assert_eq!(
        heads,
        [
            "c[1-3,5-6] ok Some(\"Linux\\n\")",
            "c4 host key mismatch None",
        ],
        "{report:?}"
    );
    assert!(
        !retried.is_empty() && retried.iter().all(|h| h == "c2"),
        "{retried:?}"
    );
    assert!(report.results[1].attempts >= 2);
    assert_eq!(report.results[3].attempts, 1);
    assert_eq!(
        report.results[3].status(),
        HostStatus::HostKeyRefused(HostKeyProblem::Mismatch)
    );
    assert_eq!(report.exit_code(), 5);

    // Run 2: c2 down again, no retries, batches of 2 with at most 40 % failures: the first
    // batch (c1 ok, c2 unreachable) trips, c3..c6 are skipped and say so.
    testbeds[1].stop().unwrap();
    let report = fleet(&testbeds)
        .batches("2".parse().unwrap())
        .max_fail_percentage(40)
        .run("uname -s", |_| {})
        .await;
    let records = report.records(true);
    let statuses: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.host.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("c1", "ok"),
            ("c2", "unreachable"),
            ("c3", "skipped"),
            ("c4", "skipped"),
            ("c5", "skipped"),
            ("c6", "skipped")
        ]
    );
    assert!(
        records[2]
            .error
            .as_deref()
            .unwrap()
            .contains("1 of 2 hosts failed")
    );
    assert_eq!(report.exit_code(), 6);
}
