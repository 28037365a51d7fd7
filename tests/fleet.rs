//! The fleet API against several real sshd hosts, one of them dead and one too slow.

mod common;

use std::time::{Duration, Instant};

use common::{builder, testbed};
use swiftide_ssh_executor::{Fleet, FleetEvent, FleetSummary, SshExecutor};

#[tokio::test]
async fn one_command_on_many_hosts_with_a_dead_one() {
    let hosts: Vec<_> = (0..3).map(|_| testbed()).collect();
    let dead_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut members: Vec<SshExecutor> = hosts
        .iter()
        .map(|tb| builder(tb).build_lazy().unwrap())
        .collect();
    // The last host refuses connections.
    members.push(
        SshExecutor::builder()
            .host("127.0.0.1")
            .port(dead_port)
            .user("nobody")
            .password("x")
            .build_lazy()
            .unwrap(),
    );
    let fleet = Fleet::new(members)
        .concurrency(2)
        .per_host_timeout(Duration::from_secs(2));
    let mut events = Vec::new();
    // (member, what): all hosts are 127.0.0.1, so only the member index tells them apart.
    let mut by_member = Vec::new();
    let started = Instant::now();
    let report = fleet
        .run(
            "echo \"hello from $SWIFTIDE_SSH_TESTBED_ID\"",
            |event| match event {
                FleetEvent::Started { host, member, .. } => {
                    events.push(format!("start {host}"));
                    by_member.push((member, "start".to_owned()));
                }
                FleetEvent::Output { chunk, member, .. } => {
                    let text = String::from_utf8_lossy(chunk.bytes()).trim().to_owned();
                    events.push(format!("out {text}"));
                    by_member.push((member, text));
                }
                FleetEvent::Finished { result, member, .. } => {
                    events.push(format!("done {}", result.status_text()));
                    by_member.push((member, format!("done {}", result.status_text())));
                }
                _ => {}
            },
        )
        .await;
    let mut outputs = 0;
    for (member, what) in &by_member {
        if let Some(tb) = hosts.get(*member)
            && what.starts_with("hello")
        {
            assert_eq!(what, &format!("hello from {}", tb.id()), "member {member}");
            outputs += 1;
        }
    }
    assert_eq!(outputs, 3, "{by_member:?}");
    for member in 0..4 {
        let of_member: Vec<&str> = by_member
            .iter()
            .filter(|(m, _)| *m == member)
            .map(|(_, w)| w.as_str())
            .collect();
        assert_eq!(of_member.first(), Some(&"start"), "{by_member:?}");
        let done = if member < 3 { "done ok" } else { "done error" };
        assert_eq!(of_member.last(), Some(&done), "{by_member:?}");
    }
    assert_eq!(report.results.len(), 4);
    let summary = report.summary();
    assert_eq!(summary.succeeded, 3, "{report:?}");
    assert_eq!(summary.unreachable, 1, "{report:?}");
    for (result, tb) in report.results.iter().zip(&hosts) {
        let out = result.outcome.as_ref().unwrap().stdout();
        assert_eq!(out, format!("hello from {}\n", tb.id()).as_bytes());
    }
    assert_eq!(events.iter().filter(|e| e.starts_with("done")).count(), 4);
    assert_eq!(
        events.iter().filter(|e| e.starts_with("out hello")).count(),
        3
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_slow_host_times_out_without_holding_up_the_others() {
    let fast = testbed();
    let slow = testbed();
    let fleet = Fleet::new([
        builder(&slow).build_lazy().unwrap(),
        builder(&fast).build_lazy().unwrap(),
    ])
    .per_host_timeout(Duration::from_millis(800));
    let slow_id = slow.id().to_owned();
    let started = Instant::now();
    let mut finished_order = Vec::new();
    let report = fleet
        .run(
            &format!("[ \"$SWIFTIDE_SSH_TESTBED_ID\" = {slow_id} ] && sleep 30; echo done"),
            |event| {
                if let FleetEvent::Finished { result, .. } = event {
                    finished_order.push(result.status_text());
                }
            },
        )
        .await;
    assert_eq!(finished_order, ["ok", "timeout"]);
    let summary: FleetSummary = report.summary();
    assert_eq!((summary.succeeded, summary.timed_out), (1, 1), "{report:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A host whose server dies under the command is "may have run", not "unreachable"; a
/// frozen host is a timeout reported by the per-host deadline (with the output it sent),
/// not seconds after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_and_frozen_hosts_are_reported_by_the_deadline() {
    let ok = testbed();
    let mut lost = testbed();
    let frozen = testbed();
    let members = [&ok, &lost, &frozen].map(|tb| builder(tb).build_lazy().unwrap());
    let limit = Duration::from_secs(3);
    let fleet = Fleet::new(members).per_host_timeout(limit);
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let run = fleet.run("echo started; sleep 1.5; echo done", move |event| {
        if let FleetEvent::Output { chunk, .. } = event
            && chunk.bytes().starts_with(b"started")
        {
            let _ = started_tx.send(());
        }
    });
    let faults = async {
        for _ in 0..3 {
            started_rx.recv().await.unwrap();
        }
        lost.stop();
        frozen.freeze().unwrap();
    };
    let (report, ()) = tokio::join!(run, faults);
    frozen.thaw().unwrap();

    let statuses: Vec<String> = report.results.iter().map(|r| r.status_text()).collect();
    assert_eq!(statuses, ["ok", "may have run", "timeout"], "{report:?}");
    let summary = report.summary();
    assert_eq!(
        (
            summary.succeeded,
            summary.may_have_run,
            summary.timed_out,
            summary.unreachable
        ),
        (1, 1, 1, 0),
        "{report:?}"
    );
    for result in &report.results {
        assert!(
            result.duration <= limit + Duration::from_millis(100),
            "{} reported after {:?}",
            result.status_text(),
            result.duration
        );
    }
    let frozen_result = report.results[2].outcome.as_ref().unwrap();
    assert_eq!(frozen_result.stdout(), b"started\n");
    assert!(
        matches!(
            frozen_result.status,
            swiftide_ssh_executor::ExitStatus::TimedOut {
                confirmed_dead: false,
                ..
            }
        ),
        "{frozen_result:?}"
    );
}

// Rolling batches, thresholds, retries, statuses, folding and records, on real sshd hosts.

use swiftide_ssh_executor::fleet::{
    HostKeyProblem, HostStatus, Inventory, read_host_list, read_records, write_records,
};
use swiftide_ssh_testbed::Testbed;

/// A port nobody listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A member for `testbed` that connects to `port` instead (same user, key and host key).
fn on_port(testbed: &Testbed, port: u16, dir: &std::path::Path) -> SshExecutor {
    let known_hosts = dir.join(format!("known_hosts_{port}"));
    std::fs::write(
        &known_hosts,
        format!("[127.0.0.1]:{port} {}\n", testbed.host_public_key()),
    )
    .unwrap();
    builder(testbed)
        .port(port)
        .known_hosts_file(known_hosts)
        .connect_timeout(Duration::from_secs(2))
        .build_lazy()
        .unwrap()
}

fn named(members: Vec<(&str, SshExecutor)>) -> Fleet {
    Fleet::named(members.into_iter().map(|(n, e)| (n.to_owned(), e)))
}

/// An unreachable host trips the batch threshold: later batches are reported as skipped,
/// never silently missing, and a batch starts only after the one before it finished.
#[tokio::test]
async fn an_unreachable_host_trips_the_batch_threshold_and_later_hosts_are_skipped() {
    let tb = testbed();
    let dir = tempfile::tempdir().unwrap();
    let ok = || builder(&tb).build_lazy().unwrap();
    let fleet = named(vec![
        ("web1", ok()),
        ("web2", on_port(&tb, dead_port(), dir.path())),
        ("web3", ok()),
        ("web4", ok()),
        ("web5", ok()),
    ])
    .batches("2".parse().unwrap())
    .max_fail_percentage(25)
    .retry_unreachable(1, Duration::from_millis(300));
    let mut events = Vec::new();
    let report = fleet
        .run("echo up", |event| match event {
            FleetEvent::BatchStarted { batch, members, .. } => {
                events.push(format!("batch {batch} {members:?}"))
            }
            FleetEvent::Started { host, .. } => events.push(format!("start {host}")),
            FleetEvent::Retrying { host, attempt, .. } => {
                events.push(format!("retry {host} {attempt}"))
            }
            FleetEvent::Finished { result, .. } => {
                events.push(format!("done {} {}", result.name, result.status()))
            }
            FleetEvent::Skipped { skipped, .. } => events.push(format!("skip {}", skipped.name)),
            _ => {}
        })
        .await;
    // Batch 0's events, in some order (the retry before its host's end), then the skips.
    assert_eq!(events[0], "batch 0 0..2", "{events:?}");
    let mut batch0 = events[1..6].to_vec();
    batch0.sort();
    assert_eq!(
        batch0,
        [
            "done web1 ok",
            "done web2 unreachable",
            "retry web2 1",
            "start web1",
            "start web2"
        ],
        "{events:?}"
    );
    let at = |e: &str| events.iter().position(|x| x == e).unwrap();
    assert!(
        at("start web2") < at("retry web2 1") && at("retry web2 1") < at("done web2 unreachable")
    );
    assert_eq!(
        events[6..],
        ["skip web3", "skip web4", "skip web5"],
        "{events:?}"
    );
    assert_eq!(report.results.len(), 2);
    assert_eq!(report.results[1].attempts, 2);
    let skipped: Vec<&str> = report.skipped.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(skipped, ["web3", "web4", "web5"]);
    assert!(
        report
            .stopped
            .as_deref()
            .unwrap()
            .contains("1 of 2 hosts failed"),
        "{:?}",
        report.stopped
    );
    let summary = report.summary();
    assert_eq!(
        (summary.succeeded, summary.unreachable, summary.skipped),
        (1, 1, 3)
    );
    assert_eq!(report.exit_code(), 6);
    let records = report.records(false);
    let statuses: Vec<&str> = records.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(
        statuses,
        ["ok", "unreachable", "skipped", "skipped", "skipped"]
    );
    assert!(records[2].error.as_deref().unwrap().contains("batch 0"));
    let folded: Vec<String> = report
        .fold()
        .iter()
        .map(|g| format!("{} {}", g.nodeset, g.status))
        .collect();
    assert_eq!(folded, ["web[3-5] skipped", "web1 ok", "web2 unreachable"]);

    // Under the threshold, every batch runs, one after the other.
    let fleet = named(vec![("a1", ok()), ("a2", ok()), ("a3", ok())])
        .batches("1,50%".parse().unwrap())
        .max_fail_percentage(0);
    let mut order = Vec::new();
    let report = fleet
        .run("echo up", |event| match event {
            FleetEvent::BatchStarted { batch, .. } => order.push(format!("batch {batch}")),
            FleetEvent::Finished { result, .. } => order.push(result.name.clone()),
            _ => {}
        })
        .await;
    // 1, then 50% of 3 = 1, repeated.
    assert_eq!(order, ["batch 0", "a1", "batch 1", "a2", "batch 2", "a3"]);
    let batches: Vec<usize> = report.results.iter().map(|r| r.batch).collect();
    assert_eq!(batches, [0, 1, 2]);
    assert_eq!((report.exit_code(), report.skipped.len()), (0, 0));
}

/// Fail-fast: the first failure keeps hosts not yet started from starting.
#[tokio::test]
async fn fail_fast_skips_the_hosts_not_yet_started() {
    let tb = testbed();
    let ok = || builder(&tb).build_lazy().unwrap();
    let fleet = named(vec![("n1", ok()), ("n2", ok()), ("n3", ok()), ("n4", ok())])
        .concurrency(1)
        .fail_fast(true);
    let mut count = 0;
    let report = fleet
        .run("exit 4", |event| {
            if let FleetEvent::Skipped { .. } = event {
                count += 1;
            }
        })
        .await;
    assert_eq!(report.results.len(), 1, "{report:?}");
    assert_eq!(report.results[0].status(), HostStatus::Failed { code: 4 });
    assert_eq!(count, 3);
    assert!(report.stopped.as_deref().unwrap().contains("fail-fast"));
    assert_eq!(report.exit_code(), 6);
    assert_eq!(
        swiftide_ssh_executor::fleet::max_exit_code(report.statuses().iter().map(|(_, s)| s)),
        4
    );
}

/// A changed host key gets its own status (not "unreachable"), is never retried, counts as a
/// failure for thresholds, and has its own exit code.
#[tokio::test]
async fn a_refused_host_key_is_its_own_status_and_never_retried() {
    let tb = testbed();
    let other = testbed();
    let dir = tempfile::tempdir().unwrap();
    // `other`'s key recorded for `tb`'s address: a mismatch.
    let wrong = dir.path().join("known_hosts");
    std::fs::write(
        &wrong,
        format!("[127.0.0.1]:{} {}\n", tb.port(), other.host_public_key()),
    )
    .unwrap();
    let unknown = dir.path().join("empty_known_hosts");
    std::fs::write(&unknown, "").unwrap();
    let fleet = named(vec![
        ("ok1", builder(&tb).build_lazy().unwrap()),
        (
            "changed1",
            builder(&tb).known_hosts_file(&wrong).build_lazy().unwrap(),
        ),
        (
            "new1",
            builder(&tb)
                .known_hosts_file(&unknown)
                .build_lazy()
                .unwrap(),
        ),
    ])
    .retry_unreachable(3, Duration::from_millis(10));
    let mut retries = 0;
    let report = fleet
        .run("echo hi", |event| {
            if let FleetEvent::Retrying { .. } = event {
                retries += 1;
            }
        })
        .await;
    let statuses: Vec<HostStatus> = report.results.iter().map(|r| r.status()).collect();
    assert_eq!(
        statuses,
        [
            HostStatus::Ok,
            HostStatus::HostKeyRefused(HostKeyProblem::Mismatch),
            HostStatus::HostKeyRefused(HostKeyProblem::Unknown)
        ],
        "{report:?}"
    );
    assert_eq!(retries, 0);
    assert!(report.results.iter().all(|r| r.attempts == 1));
    let summary = report.summary();
    assert_eq!((summary.host_key_refused, summary.unreachable), (2, 0));
    assert_eq!(report.exit_code(), 5);
    let records = report.records(true);
    assert_eq!(records[1].status, "host_key_mismatch");
    assert!(
        records[1]
            .error
            .as_deref()
            .unwrap()
            .contains("HOST KEY MISMATCH"),
        "{:?}",
        records[1].error
    );
    assert_eq!(records[2].status, "host_key_unknown");
}

/// A host that is down for the first attempts is retried with backoff and succeeds once it
/// is up; a host whose command timed out (it may have run) is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_host_is_retried_until_it_comes_up_and_a_timeout_never() {
    let mut late = testbed();
    let slow = testbed();
    late.stop();
    let fleet = named(vec![
        // In a fleet a refused dial fails at once, as with ssh; a host that is down (a
        // reboot) is the fleet's to retry, explicitly.
        (
            "late",
            builder(&late)
                .connect_timeout(Duration::from_millis(300))
                .build_lazy()
                .unwrap(),
        ),
        ("slow", builder(&slow).build_lazy().unwrap()),
    ])
    .per_host_timeout(Duration::from_secs(3))
    .retry_unreachable(6, Duration::from_millis(200));
    let up = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(900));
        late.restart().unwrap();
        late
    });
    let slow_id = slow.id().to_owned();
    let mut retried = Vec::new();
    let report = fleet
        .run(
            &format!("[ \"$SWIFTIDE_SSH_TESTBED_ID\" = {slow_id} ] && sleep 30; echo up"),
            |event| {
                if let FleetEvent::Retrying { host, delay, .. } = event {
                    retried.push((host.to_owned(), delay));
                }
            },
        )
        .await;
    let _late = up.join().unwrap();
    let late_result = &report.results[0];
    assert_eq!(late_result.status(), HostStatus::Ok, "{report:?}");
    assert_eq!(late_result.outcome.as_ref().unwrap().stdout(), b"up\n");
    assert!(late_result.attempts >= 2, "{report:?}");
    assert_eq!(
        retried.len() as u32,
        late_result.attempts - 1,
        "{retried:?}"
    );
    assert!(
        retried.iter().all(|(host, _)| host == "late"),
        "{retried:?}"
    );
    // Backoff doubles.
    let delays: Vec<u128> = retried.iter().map(|(_, d)| d.as_millis()).collect();
    let doubling: Vec<u128> = (0..delays.len() as u32).map(|i| 200 << i).collect();
    assert_eq!(delays, doubling);
    let slow_result = &report.results[1];
    assert_eq!(slow_result.status(), HostStatus::TimedOut);
    assert_eq!(slow_result.attempts, 1);
    assert_eq!(report.exit_code(), 3);
}

/// Identical output and status fold under one node set; JSON records round-trip; the
/// failed-hosts file lists the hosts that did not succeed and reads back as a host list.
#[tokio::test]
async fn folded_output_json_records_and_the_failed_hosts_file() {
    let a = testbed();
    let b = testbed();
    let dir = tempfile::tempdir().unwrap();
    let fleet = named(vec![
        ("node01", builder(&a).build_lazy().unwrap()),
        ("node02", builder(&a).build_lazy().unwrap()),
        ("node03", builder(&a).build_lazy().unwrap()),
        ("node04", builder(&b).build_lazy().unwrap()),
        ("node05", on_port(&a, dead_port(), dir.path())),
    ]);
    let b_id = b.id().to_owned();
    let report = fleet
        .run(
            &format!("echo kernel 6.1; [ \"$SWIFTIDE_SSH_TESTBED_ID\" = {b_id} ] && echo odd >&2 && exit 3; true"),
            |_| {},
        )
        .await;
    let groups = report.fold();
    let shown: Vec<String> = groups.iter().map(ToString::to_string).collect();
    let block = |header: &str, body: &str| {
        let rule = "-".repeat(header.len());
        format!("{rule}\n{header}\n{rule}\n{body}")
    };
    assert_eq!(
        shown,
        [
            block("node[01-03] (3) ok", "kernel 6.1\n"),
            block("node04 (1) exit 3", "kernel 6.1\nodd\n"),
            block("node05 (1) unreachable", ""),
        ],
        "{groups:#?}"
    );

    let mut jsonl = Vec::new();
    write_records(&report.records(false), &mut jsonl).unwrap();
    let text = String::from_utf8(jsonl).unwrap();
    assert_eq!(text.lines().count(), 5);
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    for field in [
        "schema_version",
        "host",
        "address",
        "port",
        "user",
        "member",
        "batch",
        "status",
        "exit_code",
        "signal",
        "error",
        "stdout",
        "stderr",
        "stdout_sha256",
        "stderr_sha256",
        "omitted_bytes",
        "started_ms",
        "duration_ms",
        "attempts",
    ] {
        assert!(first.get(field).is_some(), "{field} missing in {first}");
    }
    assert_eq!(first["schema_version"], 1);
    assert_eq!(first["stdout"], "kernel 6.1\n");
    assert_eq!(first["port"], a.port());
    let records = read_records(&text).unwrap();
    assert_eq!(records, report.records(false));
    assert_eq!(records[3].exit_code, Some(3));
    assert_eq!(records[3].stderr.as_deref(), Some("odd\n"));
    assert!(
        records[4]
            .error
            .as_deref()
            .unwrap()
            .contains("could not connect")
    );
    assert_eq!(records[4].exit_code, None);
    // Digest-only records fold the same way (shards can ship digests, not output).
    let digests = report.records(true);
    assert!(digests.iter().all(|r| r.stdout.is_none()));
    let heads: Vec<String> = swiftide_ssh_executor::fleet::fold_records(&digests)
        .iter()
        .map(|g| g.nodeset.clone())
        .collect();
    assert_eq!(heads, ["node[01-03]", "node04", "node05"]);
    assert_eq!(report.exit_code(), 4);

    let failed = dir.path().join("hosts.failed");
    report.write_failed_hosts(&failed).unwrap();
    assert_eq!(read_host_list(&failed).unwrap(), ["node04", "node05"]);

    // A plain host list: its members are named by their lines, so the failed-hosts file
    // is a host list for the next run.
    let dead = dead_port();
    let list = dir.path().join("hosts.txt");
    std::fs::write(
        &list,
        format!(
            "{user}@127.0.0.1:{} # a\n{user}@127.0.0.1:{dead}\n",
            a.port(),
            user = a.user()
        ),
    )
    .unwrap();
    let template = SshExecutor::builder()
        .private_key_file(a.private_key_path())
        .known_hosts_file(a.known_hosts_path());
    let report = Fleet::from_inventory(&list, &template)
        .unwrap()
        .run("true", |_| {})
        .await;
    assert_eq!(report.summary().succeeded, 1);
    report.write_failed_hosts(&failed).unwrap();
    let again = Fleet::from_inventory(&failed, &template).unwrap();
    assert_eq!(again.names(), [format!("{}@127.0.0.1:{dead}", a.user())]);
    assert_eq!(again.members()[0].port(), dead);
}

/// An Ansible INI inventory drives the fleet: groups, children, `[group:vars]`, host vars,
/// ranges and a `web:&prod:!canary` pattern, with ansible_host/port/user/key applied.
#[tokio::test]
async fn an_ansible_inventory_selects_and_configures_the_hosts() {
    let a = testbed();
    let b = testbed();
    let dir = tempfile::tempdir().unwrap();
    let inventory = format!(
        "[web]\nweb[1:2] ansible_port={pa}\nweb3 ansible_port={pb}\ncanary1 ansible_port={pa}\n\n\
         [canary]\ncanary1\n\n[prod:children]\nweb\n\n\
         [prod:vars]\nansible_host=127.0.0.1\nansible_user={user}\nansible_ssh_private_key_file={key}\n",
        pa = a.port(),
        pb = b.port(),
        user = a.user(),
        key = a.private_key_path().display()
    );
    let path = dir.path().join("hosts.ini");
    std::fs::write(&path, inventory).unwrap();
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(
        &known_hosts,
        std::fs::read_to_string(a.known_hosts_path()).unwrap()
            + &std::fs::read_to_string(b.known_hosts_path()).unwrap(),
    )
    .unwrap();
    let template = SshExecutor::builder().known_hosts_file(&known_hosts);
    let inventory = Inventory::from_path(&path).unwrap();
    let fleet = Fleet::from_ansible(&inventory, "web:&prod:!canary", &template).unwrap();
    assert_eq!(fleet.names(), ["web1", "web2", "web3"]);
    let report = fleet
        .run("echo \"$(id -un) $SWIFTIDE_SSH_TESTBED_ID\"", |_| {})
        .await;
    let outputs: Vec<String> = report
        .results
        .iter()
        .map(|r| r.outcome.as_ref().unwrap().stdout_lossy())
        .collect();
    let (ua, ub) = (a.user(), b.user());
    assert_eq!(
        outputs,
        [
            format!("{ua} {}\n", a.id()),
            format!("{ua} {}\n", a.id()),
            format!("{ub} {}\n", b.id())
        ]
    );
    let heads: Vec<String> = report.fold().iter().map(|g| g.nodeset.clone()).collect();
    assert_eq!(heads, ["web[1-2]", "web3"]);
}

/// The same inventory in YAML.
#[cfg(feature = "yaml")]
#[tokio::test]
async fn a_yaml_inventory_selects_and_configures_the_hosts() {
    let a = testbed();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "all:\n  vars:\n    ansible_host: 127.0.0.1\n    ansible_port: {port}\n  children:\n    prod:\n      children:\n        db:\n          hosts:\n            db[01:03]:\n            db04:\n              ansible_port: {dead}\n      vars:\n        ansible_user: {user}\n        ansible_ssh_private_key_file: {key}\n",
        port = a.port(),
        dead = dead_port(),
        user = a.user(),
        key = a.private_key_path().display()
    );
    let path = dir.path().join("inventory.yml");
    std::fs::write(&path, yaml).unwrap();
    let inventory = Inventory::from_path(&path).unwrap();
    let template = SshExecutor::builder().known_hosts_file(a.known_hosts_path());
    let fleet = Fleet::from_ansible(&inventory, "prod", &template).unwrap();
    let report = fleet.run("echo ok", |_| {}).await;
    let heads: Vec<String> = report
        .fold()
        .iter()
        .map(|g| format!("{} {}", g.nodeset, g.status))
        .collect();
    // db04's port has no host key on record and nobody listens: unreachable.
    assert_eq!(heads, ["db[01-03] ok", "db04 unreachable"], "{report:?}");
}

/// `~/.ssh/config` aliases: the file is parsed once and each alias resolved from it; a shard
/// split is stable and covers every host exactly once.
#[tokio::test]
async fn ssh_config_aliases_and_stable_shards() {
    let a = testbed();
    let dir = tempfile::tempdir().unwrap();
    let mut config = String::new();
    for n in 1..=3 {
        config.push_str(&format!(
            "Host box{n}\n  HostName 127.0.0.1\n  Port {}\n  User {}\n  IdentityFile {}\n  UserKnownHostsFile {}\n\n",
            a.port(),
            a.user(),
            a.private_key_path().display(),
            a.known_hosts_path().display()
        ));
    }
    let path = dir.path().join("ssh_config");
    std::fs::write(&path, config).unwrap();
    let config = swiftide_ssh_executor::SshConfig::load(&path).unwrap();
    let fleet = Fleet::from_ssh_config(&config, ["box1", "box2", "box3"]).unwrap();
    let report = fleet.run("echo hi", |_| {}).await;
    let heads: Vec<String> = report
        .fold()
        .iter()
        .map(|g| format!("{} {}", g.nodeset, g.status))
        .collect();
    assert_eq!(heads, ["box[1-3] ok"], "{report:?}");

    let template = SshExecutor::builder().user("ops").password("unused");
    let names: Vec<String> = (1..=200).map(|i| format!("web{i:03}")).collect();
    let shards: Vec<Vec<String>> = (0..4)
        .map(|k| {
            Fleet::from_nodeset("web[001-200]", &template)
                .unwrap()
                .shard(k, 4)
                .unwrap()
                .names()
                .to_vec()
        })
        .collect();
    let mut union: Vec<String> = shards.concat();
    union.sort();
    assert_eq!(union, names, "every host in exactly one shard");
    assert!(
        shards.iter().all(|s| (25..=75).contains(&s.len())),
        "{:?}",
        shards.iter().map(Vec::len).collect::<Vec<_>>()
    );
    // The same split every time.
    let again = Fleet::from_hosts(names.iter().rev().cloned(), &template)
        .unwrap()
        .shard(2, 4)
        .unwrap();
    let mut again = again.names().to_vec();
    again.sort();
    let mut third = shards[2].clone();
    third.sort();
    assert_eq!(again, third);
    assert!(
        Fleet::from_hosts(["a"], &template)
            .unwrap()
            .shard(4, 4)
            .is_err()
    );
}

/// A fleet's one command per host starts no resident runner under `Runner::Auto`, however
/// the members were built (the command line builds them with `build_lazy`): a runner's
/// start per host is one exec more, not one fewer. The same executor used alone afterwards
/// starts one, so the rule is the fleet's, not the member's.
#[tokio::test]
async fn a_fleet_under_auto_starts_no_runner_and_its_members_alone_do() {
    use swiftide_ssh_executor::Runner;
    let hosts: Vec<_> = (0..2).map(|_| testbed()).collect();
    let members: Vec<SshExecutor> = hosts
        .iter()
        .map(|tb| builder(tb).runner(Runner::Auto).build_lazy().unwrap())
        .collect();
    let fleet = Fleet::new(members.clone());
    for _ in 0..2 {
        let report = fleet.run("echo fleet", |_| {}).await;
        assert_eq!(report.summary().succeeded, 2, "{:?}", report.results);
    }
    for member in &members {
        let stats = member.pool_stats();
        assert_eq!(
            (
                stats.runners_started,
                stats.runner_commands,
                stats.runner_fallbacks
            ),
            (0, 0, 0),
            "{stats:?}"
        );
    }
    // Alone, the first command starts the connection's runner in the background (the
    // testbed has Python) and runs per exec meanwhile.
    let alone = members[0].run("echo alone").await.unwrap();
    assert_eq!(alone.stdout(), b"alone\n".to_vec());
    let stats = common::stats_when(&members[0], |stats| stats.runners_started == 1).await;
    assert_eq!(
        (stats.runners_started, stats.runner_commands),
        (1, 0),
        "{stats:?}"
    );
    // And a fleet then uses the runner already running instead of a session per command.
    let report = Fleet::new(vec![members[0].clone()])
        .run("echo again", |_| {})
        .await;
    assert_eq!(report.summary().succeeded, 1, "{:?}", report.results);
    let stats = members[0].pool_stats();
    assert_eq!(
        (stats.runners_started, stats.runner_commands),
        (1, 1),
        "{stats:?}"
    );
}
