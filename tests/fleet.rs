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
