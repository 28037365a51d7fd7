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
    let started = Instant::now();
    let report = fleet
        .run(
            "echo \"hello from $SWIFTIDE_SSH_TESTBED_ID\"",
            |event| match event {
                FleetEvent::Started { host } => events.push(format!("start {host}")),
                FleetEvent::Output { chunk, .. } => events.push(format!(
                    "out {}",
                    String::from_utf8_lossy(chunk.bytes()).trim()
                )),
                FleetEvent::Finished { result } => {
                    events.push(format!("done {}", result.status_text()))
                }
                _ => {}
            },
        )
        .await;
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
                if let FleetEvent::Finished { result } = event {
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
