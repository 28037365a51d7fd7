//! `Fleet::push`, `Fleet::pull` and fleet jobs through the library API, against real sshd
//! testbeds (the command line's end-to-end tests, with odd names and modes, are in
//! cli/tests/cli.rs).

mod common;

use std::{os::unix::fs::PermissionsExt, time::Duration};

use common::{builder, testbed};
use swiftide_ssh_executor::{
    Error, ExitStatus, Fleet, FleetEvent, HostStatus, JobOptions, JobStatus, SshExecutor,
};

fn dead_member() -> SshExecutor {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    SshExecutor::builder()
        .host("127.0.0.1")
        .port(port)
        .user("nobody")
        .password("x")
        .connect_timeout(Duration::from_secs(2))
        .build_lazy()
        .unwrap()
}

#[tokio::test]
async fn push_and_pull_report_every_host_and_retry_only_unreachable_ones() {
    let beds = [testbed(), testbed()];
    let mut members: Vec<(String, SshExecutor)> = beds
        .iter()
        .enumerate()
        .map(|(i, tb)| (format!("web{}", i + 1), builder(tb).build_lazy().unwrap()))
        .collect();
    members.push(("dead".into(), dead_member()));
    let fleet = Fleet::named(members).retry_unreachable(1, Duration::from_millis(50));

    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("app.conf");
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o640)).unwrap();
    let remote = tempfile::tempdir().unwrap();
    let dest = remote.path().join("etc/app.conf");
    let mut retried = Vec::new();
    let report = fleet
        .push(&source, &dest, |event| {
            if let FleetEvent::Retrying { host, .. } = event {
                retried.push(host.to_owned());
            }
        })
        .await
        .unwrap();
    assert_eq!(retried, ["dead"]);
    let summary = report.summary();
    assert_eq!(
        (summary.succeeded, summary.unreachable),
        (2, 1),
        "{report:?}"
    );
    assert_eq!(report.exit_code(), 4);
    let ok = &report.results[0];
    let line = ok.outcome.as_ref().unwrap().stdout_lossy();
    assert_eq!(
        line,
        format!(
            "pushed 1 file, 10 bytes to {}; sha256 verified on the host\n",
            dest.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "listen 80\n");
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    // Over a file that exists: its mode stays (a secret is not made world-readable by a
    // 0644 local copy), unless the local modes are asked for.
    let live = Fleet::new(
        beds.iter()
            .map(|tb| builder(tb).build_lazy().unwrap())
            .collect::<Vec<_>>(),
    );
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&source, "listen 81\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o644)).unwrap();
    let kept = live.push(&source, &dest, |_| {}).await.unwrap();
    assert_eq!(kept.summary().succeeded, 2, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "listen 81\n");
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o640)).unwrap();
    let options = swiftide_ssh_executor::PushOptions::default().local_modes(true);
    let applied = live
        .push_with(&source, &dest, &options, |_| {})
        .await
        .unwrap();
    assert_eq!(applied.summary().succeeded, 2, "{applied:?}");
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    // Both successful hosts fold into one block; the dead one stands apart.
    let groups = report.fold();
    assert_eq!(groups[0].nodeset, "web[1-2]");
    assert_eq!(groups[1].status, "unreachable");

    // A source that cannot be read starts no host.
    let missing = fleet
        .push(&local.path().join("missing"), &dest, |_| {})
        .await;
    assert!(
        matches!(missing, Err(Error::LocalFile { .. })),
        "{missing:?}"
    );

    // Pull: one directory per host, a digest of each copy in the summary.
    let gathered = local.path().join("gathered");
    let report = fleet.pull(&dest, &gathered, |_| {}).await;
    assert_eq!(report.summary().succeeded, 2, "{report:?}");
    for name in ["web1", "web2"] {
        let copy = gathered.join(name).join("app.conf");
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "listen 80\n");
        assert_eq!(
            std::fs::metadata(&copy).unwrap().permissions().mode() & 0o7777,
            0o640
        );
    }
    let summaries: Vec<String> = report
        .results
        .iter()
        .filter_map(|r| r.outcome.as_ref().ok().map(|e| e.stdout_lossy()))
        .collect();
    assert_eq!(summaries.len(), 2);
    assert_eq!(summaries[0], summaries[1]);
    assert!(summaries[0].starts_with("pulled 1 file, 10 bytes; content sha256 "));
    // A missing remote file fails each host, none stops the others.
    let report = fleet
        .pull(&remote.path().join("nope"), &gathered, |_| {})
        .await;
    assert_eq!(
        report
            .statuses()
            .iter()
            .filter(|(_, s)| *s == HostStatus::Error)
            .count(),
        2,
        "{report:?}"
    );
}

#[tokio::test]
async fn a_job_on_every_host_is_collected_by_its_id() {
    let tb = testbed();
    let state = tempfile::tempdir().unwrap();
    let member = builder(&tb)
        .envs([("XDG_STATE_HOME", state.path().display().to_string())])
        .build_lazy()
        .unwrap();
    let fleet = Fleet::named([("web1".to_owned(), member)]);
    let started = fleet
        .start_job("echo hi; exit 4", JobOptions::new(), |_| {})
        .await;
    assert!(started.id.starts_with("fleet-"), "{}", started.id);
    assert_eq!(
        started.report.summary().succeeded,
        1,
        "{:?}",
        started.report
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let states = fleet.job_states(&started.id, |_| {}).await;
        match &states.states[0] {
            Some(JobStatus::Exited(status)) => {
                assert_eq!(status, &ExitStatus::Code(4));
                assert_eq!(states.report.exit_code(), 1);
                break;
            }
            Some(JobStatus::Running { .. } | JobStatus::Starting) => {}
            other => panic!("{other:?} {:?}", states.report),
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let output = fleet.job_output(&started.id, 1024, |_| {}).await;
    let execution = output.results[0].outcome.as_ref().unwrap();
    assert_eq!(execution.stdout(), b"hi\n");
    assert_eq!(execution.status, ExitStatus::Code(4));
}

/// A PATH with every tool of /usr/bin and /usr/sbin but `sha256sum` and `shasum`.
fn path_without_digest_tools() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for bin in ["/usr/bin", "/usr/sbin"] {
        for entry in std::fs::read_dir(bin).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name == "sha256sum" || name == "shasum" {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), dir.path().join(&name));
        }
    }
    dir
}

#[tokio::test]
async fn a_host_without_sha256sum_is_verified_by_reading_back() {
    let path = path_without_digest_tools();
    let tb = swiftide_ssh_testbed::Testbed::builder()
        .sshd_config_line(format!("SetEnv PATH={}", path.path().display()))
        .start()
        .unwrap();
    let executor = builder(&tb).build_lazy().unwrap();
    // The session really lacks the tools.
    let probe = executor
        .run("command -v sha256sum shasum; echo \"$PATH\"")
        .await
        .unwrap();
    assert_eq!(
        probe.stdout_lossy(),
        format!("{}\n", path.path().display()),
        "{probe:?}"
    );
    let fleet = Fleet::named([("bare".to_owned(), executor)]);
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("script.sh");
    std::fs::write(&source, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o755)).unwrap();
    let remote = tempfile::tempdir().unwrap();
    let dest = remote.path().join("script.sh");
    let report = fleet.push(&source, &dest, |_| {}).await.unwrap();
    let line = report.results[0].outcome.as_ref().unwrap().stdout_lossy();
    assert!(
        line.ends_with("sha256 verified by reading back (no sha256sum or shasum on the host)\n"),
        "{line}"
    );
    assert_eq!(report.exit_code(), 0);
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o755
    );
    let report = fleet.pull(&dest, &local.path().join("back"), |_| {}).await;
    let line = report.results[0].outcome.as_ref().unwrap().stdout_lossy();
    assert!(
        line.contains("not verified on the host (no sha256sum or shasum)"),
        "{line}"
    );
    assert_eq!(
        std::fs::read(local.path().join("back/bare/script.sh")).unwrap(),
        b"#!/bin/sh\n"
    );
}
