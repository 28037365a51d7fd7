//! `Fleet::push`, `Fleet::pull` and fleet jobs through the library API, against real sshd
//! testbeds (the command line's end-to-end tests, with odd names and modes, are in
//! cli/tests/cli.rs).

mod common;

use std::{os::unix::fs::PermissionsExt, time::Duration};

use common::{builder, testbed};
use swiftide_ssh_executor::{
    AccountKind, Error, ExitStatus, FileChange, Fleet, FleetEvent, HostStatus, JobOptions,
    JobStatus, PushOptions, SshExecutor,
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
    // The testbeds share this machine's file system: each host works in a directory of its
    // own, so that one host never finds (unchanged) the file the other one just wrote.
    let remote = tempfile::tempdir().unwrap();
    let workdir = |i: usize| remote.path().join(format!("web{}", i + 1));
    let member = |i: usize, tb: &swiftide_ssh_testbed::Testbed| {
        builder(tb).workdir(workdir(i)).build_lazy().unwrap()
    };
    let mut members: Vec<(String, SshExecutor)> = beds
        .iter()
        .enumerate()
        .map(|(i, tb)| (format!("web{}", i + 1), member(i, tb)))
        .collect();
    members.push(("dead".into(), dead_member()));
    let fleet = Fleet::named(members).retry_unreachable(1, Duration::from_millis(50));

    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("app.conf");
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o640)).unwrap();
    let dest = std::path::Path::new("etc/app.conf");
    let copies = [workdir(0).join(dest), workdir(1).join(dest)];
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
    let mut retried = Vec::new();
    let report = fleet
        .push(&source, dest, |event| {
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
            "pushed 1 file, 10 bytes to {}: created; sha256 verified on the host\n",
            copies[0].display()
        )
    );
    for copy in &copies {
        assert_eq!(std::fs::read_to_string(copy).unwrap(), "listen 80\n");
        assert_eq!(mode(copy), 0o640);
    }
    // Over a file that exists: its mode stays (a secret is not made world-readable by a
    // 0644 local copy), unless the local modes are asked for.
    let live = Fleet::new(
        beds.iter()
            .enumerate()
            .map(|(i, tb)| member(i, tb))
            .collect::<Vec<_>>(),
    );
    for copy in &copies {
        std::fs::set_permissions(copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    std::fs::write(&source, "listen 81\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o644)).unwrap();
    let kept = live.push(&source, dest, |_| {}).await.unwrap();
    assert_eq!(kept.summary().succeeded, 2, "{kept:?}");
    for copy in &copies {
        assert_eq!(std::fs::read_to_string(copy).unwrap(), "listen 81\n");
        assert_eq!(mode(copy), 0o600);
    }
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o640)).unwrap();
    let options = PushOptions::default().local_modes(true);
    let applied = live
        .push_with(&source, dest, &options, |_| {})
        .await
        .unwrap();
    assert_eq!(applied.summary().succeeded, 2, "{applied:?}");
    for copy in &copies {
        assert_eq!(mode(copy), 0o640);
    }
    // Hosts that fared alike fold into one block, the dead one apart: a file pushed twice to
    // one path (the same for both hosts) is unchanged on both the second time.
    let shared = remote.path().join("shared.conf");
    let first = fleet.push(&source, &shared, |_| {}).await.unwrap();
    assert_eq!(first.summary().succeeded, 2, "{first:?}");
    let again = fleet.push(&source, &shared, |_| {}).await.unwrap();
    let groups = again.fold();
    assert_eq!(groups[0].nodeset, "web[1-2]");
    assert_eq!(
        groups[0].stdout.as_deref(),
        Some(
            format!(
                "pushed 1 file, 10 bytes to {}: unchanged; nothing written\n",
                shared.display()
            )
            .as_str()
        )
    );
    assert_eq!(groups[1].status, "unreachable");

    // A source that cannot be read starts no host.
    let missing = fleet
        .push(&local.path().join("missing"), dest, |_| {})
        .await;
    assert!(
        matches!(missing, Err(Error::LocalFile { .. })),
        "{missing:?}"
    );

    // Pull: one directory per host, a digest of each copy in the summary.
    let gathered = local.path().join("gathered");
    let report = fleet.pull(dest, &gathered, |_| {}).await;
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

/// The inode and modification time of a file: what a rewrite changes and "unchanged" keeps.
fn identity(path: &std::path::Path) -> (u64, std::time::SystemTime) {
    let metadata = std::fs::metadata(path).unwrap();
    (
        std::os::unix::fs::MetadataExt::ino(&metadata),
        metadata.modified().unwrap(),
    )
}

fn changes(report: &swiftide_ssh_executor::FleetReport) -> Vec<FileChange> {
    let pushed = report.results[0]
        .pushed
        .as_ref()
        .unwrap_or_else(|| panic!("no push result: {report:?}"));
    pushed.files.iter().map(|file| file.change).collect()
}

fn summary_line(report: &swiftide_ssh_executor::FleetReport) -> String {
    match &report.results[0].outcome {
        Ok(execution) => execution.stdout_lossy(),
        Err(error) => panic!("{error}"),
    }
}

#[tokio::test]
async fn a_second_push_of_the_same_file_is_unchanged_and_rewrites_nothing() {
    let tb = testbed();
    let fleet = Fleet::named([("web1".to_owned(), builder(&tb).build_lazy().unwrap())]);
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("app.conf");
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o644)).unwrap();
    let remote = tempfile::tempdir().unwrap();
    let dest = remote.path().join("app.conf");

    let first = fleet.push(&source, &dest, |_| {}).await.unwrap();
    assert_eq!(changes(&first), [FileChange::Created]);
    assert!(first.results[0].pushed.as_ref().unwrap().changed());
    let written = identity(&dest);
    // A second push, and one more a second later (a rewrite would show in the seconds of
    // the modification time too): nothing is written.
    for round in 0..2 {
        if round == 1 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let again = fleet.push(&source, &dest, |_| {}).await.unwrap();
        assert_eq!(changes(&again), [FileChange::Unchanged]);
        let pushed = again.results[0].pushed.as_ref().unwrap();
        assert!(!pushed.changed());
        assert_eq!(pushed.files[0].path, dest);
        assert_eq!(
            summary_line(&again),
            format!(
                "pushed 1 file, 10 bytes to {}: unchanged; nothing written\n",
                dest.display()
            )
        );
        assert_eq!(again.exit_code(), 0);
        assert_eq!(identity(&dest), written, "the file was rewritten");
    }
    // The same content with another mode asked for: written, then unchanged.
    let options = PushOptions::default().mode(0o640);
    let moded = fleet
        .push_with(&source, &dest, &options, |_| {})
        .await
        .unwrap();
    assert_eq!(changes(&moded), [FileChange::Changed]);
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    let moded_identity = identity(&dest);
    let again = fleet
        .push_with(&source, &dest, &options, |_| {})
        .await
        .unwrap();
    assert_eq!(changes(&again), [FileChange::Unchanged]);
    assert_eq!(identity(&dest), moded_identity);
    // Without --mode the existing 0640 is kept, so that is unchanged too.
    let kept = fleet.push(&source, &dest, |_| {}).await.unwrap();
    assert_eq!(changes(&kept), [FileChange::Unchanged]);
    // New content of the same size: compared, found different, written.
    std::fs::write(&source, "listen 81\n").unwrap();
    let edited = fleet.push(&source, &dest, |_| {}).await.unwrap();
    assert_eq!(changes(&edited), [FileChange::Changed]);
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "listen 81\n");
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o640
    );

    // A tree: what each file became, in the result and, when they differ, one line each.
    let tree = local.path().join("site");
    std::fs::create_dir_all(tree.join("css")).unwrap();
    std::fs::write(tree.join("index.html"), "<h1>hi</h1>\n").unwrap();
    std::fs::write(tree.join("css/site.css"), "h1 {}\n").unwrap();
    let into = format!("{}/", remote.path().display());
    let first = fleet.push(&tree, into.as_ref(), |_| {}).await.unwrap();
    assert_eq!(changes(&first), [FileChange::Created; 2]);
    assert!(
        summary_line(&first).contains(": 2 created; sha256 verified on the host\n"),
        "{}",
        summary_line(&first)
    );
    std::fs::write(tree.join("index.html"), "<h1>hello</h1>\n").unwrap();
    let second = fleet.push(&tree, into.as_ref(), |_| {}).await.unwrap();
    // In the source's order: a directory's files, then its subdirectories'.
    assert_eq!(
        changes(&second),
        [FileChange::Changed, FileChange::Unchanged]
    );
    let text = summary_line(&second);
    assert!(
        text.ends_with(
            ": 1 changed, 1 unchanged; sha256 verified on the host\n\
             changed   index.html\nunchanged css/site.css\n"
        ),
        "{text}"
    );
    // In the JSON record too.
    let record = &second.records(false)[0];
    assert_eq!(record.changed, Some(true));
    let files = record.files.as_ref().unwrap();
    assert_eq!(
        files.iter().map(|f| f.change.as_str()).collect::<Vec<_>>(),
        ["changed", "unchanged"]
    );
    assert_eq!(
        files[0].path,
        remote.path().join("site/index.html").display().to_string()
    );
}

#[tokio::test]
async fn owner_and_group_apply_and_an_unknown_name_leaves_the_old_file() {
    use std::os::unix::fs::MetadataExt;
    let tb = testbed();
    let fleet = Fleet::named([("web1".to_owned(), builder(&tb).build_lazy().unwrap())]);
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("app.conf");
    std::fs::write(&source, "listen 80\n").unwrap();
    let remote = tempfile::tempdir().unwrap();
    let dest = remote.path().join("app.conf");
    std::fs::write(&dest, "old\n").unwrap();
    let before = identity(&dest);

    // An owner or group no host has: a typed error, before anything is written.
    for (options, kind, name) in [
        (
            PushOptions::default().owner("no-such-user-swiftide"),
            AccountKind::User,
            "no-such-user-swiftide",
        ),
        (
            PushOptions::default()
                .owner("daemon")
                .group("no-such-group-swiftide"),
            AccountKind::Group,
            "no-such-group-swiftide",
        ),
    ] {
        let report = fleet
            .push_with(&source, &dest, &options, |_| {})
            .await
            .unwrap();
        match &report.results[0].outcome {
            Err(Error::UnknownAccount {
                kind: got,
                name: named,
                host,
            }) => {
                assert_eq!((*got, named.as_str()), (kind, name));
                assert_eq!(host, &tb.host());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(report.results[0].status(), HostStatus::Error);
        assert!(report.results[0].pushed.is_none());
        assert_eq!(report.exit_code(), 4);
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "old\n");
        assert_eq!(identity(&dest), before);
    }
    // A name that could not be one starts no host.
    let refused = fleet
        .push_with(
            &source,
            &dest,
            &PushOptions::default().owner("root; rm -rf /"),
            |_| {},
        )
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidInput { .. })),
        "{refused:?}"
    );

    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap();
    let daemon = PushOptions::default()
        .owner("daemon")
        .group("adm")
        .mode(0o640);
    let report = fleet
        .push_with(&source, &dest, &daemon, |_| {})
        .await
        .unwrap();
    if tb.is_root_login() {
        // Names resolved on the host; both applied with the mode, then unchanged.
        assert_eq!(changes(&report), [FileChange::Changed]);
        let metadata = std::fs::metadata(&dest).unwrap();
        assert_eq!(
            (metadata.uid(), metadata.gid(), metadata.mode() & 0o7777),
            (1, 4, 0o640),
            "daemon:adm 0640"
        );
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "listen 80\n");
        let again = fleet
            .push_with(&source, &dest, &daemon, |_| {})
            .await
            .unwrap();
        assert_eq!(changes(&again), [FileChange::Unchanged]);
        // Only the group asked for (numeric): the owner is kept.
        let group = PushOptions::default().group("0");
        let report = fleet
            .push_with(&source, &dest, &group, |_| {})
            .await
            .unwrap();
        assert_eq!(changes(&report), [FileChange::Changed]);
        let metadata = std::fs::metadata(&dest).unwrap();
        assert_eq!((metadata.uid(), metadata.gid()), (1, 0));
        // A new file gets them too.
        let fresh = remote.path().join("fresh.conf");
        let report = fleet
            .push_with(&source, &fresh, &daemon, |_| {})
            .await
            .unwrap();
        assert_eq!(changes(&report), [FileChange::Created]);
        let metadata = std::fs::metadata(&fresh).unwrap();
        assert_eq!((metadata.uid(), metadata.gid()), (1, 4));
    } else {
        // A login that is not root may not give a file away: the host fails, the old file
        // stays (CI runs this as root, where the branch above checks the ownership).
        assert_ne!(uid, 0);
        assert!(
            matches!(&report.results[0].outcome, Err(Error::Sftp { .. })),
            "{report:?}"
        );
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "old\n");
    }
    let leftovers: Vec<_> = std::fs::read_dir(remote.path())
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().contains(".swiftide-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
