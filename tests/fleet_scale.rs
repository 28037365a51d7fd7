//! What a fleet holds while and after it runs: connections released as results come in,
//! and the open-file limit checked before the first connection.

mod common;

use std::time::{Duration, Instant};

use common::{builder, testbed};
use swiftide_ssh_executor::{Fleet, SshExecutor};
use swiftide_ssh_testbed::Testbed;

fn members(tb: &Testbed, n: usize) -> Vec<SshExecutor> {
    (0..n).map(|_| builder(tb).build_lazy().unwrap()).collect()
}

/// Waits until the testbed's sshd has no connection processes left.
fn wait_for_no_connections(tb: &Testbed) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = tb.connection_pids();
        if pids.is_empty() || Instant::now() > deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_connections_close_as_results_come_in_and_the_fleet_runs_again() {
    let tb = testbed();
    let fleet = Fleet::new(members(&tb, 4))
        .concurrency(2)
        .per_host_timeout(Duration::from_secs(20))
        .release_connections(true);
    let report = fleet.run("echo one", |_| {}).await;
    assert_eq!(report.summary().succeeded, 4, "{report:?}");
    // Retired at the result; closed once its last operation (the pre-started spare
    // channel, a slot going back to the pool) lets go, moments later.
    for member in fleet.members() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while member.pool_stats().connections > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            member.pool_stats().connections,
            0,
            "{:?}",
            member.pool_stats()
        );
    }
    assert_eq!(
        wait_for_no_connections(&tb),
        Vec::<u32>::new(),
        "sshd sessions left"
    );
    // The executors stay usable: the next run dials again.
    let again = fleet.run("echo two", |_| {}).await;
    assert_eq!(again.summary().succeeded, 4, "{again:?}");
    for (result, member) in again.results.iter().zip(fleet.members()) {
        assert_eq!(result.outcome.as_ref().unwrap().stdout(), b"two\n");
        assert_eq!(member.pool_stats().dials, 2, "{:?}", member.pool_stats());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_connections_stay_pooled_for_the_next_run() {
    let tb = testbed();
    let fleet = Fleet::new(members(&tb, 3))
        .concurrency(3)
        .per_host_timeout(Duration::from_secs(20));
    assert_eq!(fleet.run("true", |_| {}).await.summary().succeeded, 3);
    assert_eq!(fleet.run("true", |_| {}).await.summary().succeeded, 3);
    for member in fleet.members() {
        let stats = member.pool_stats();
        assert_eq!((stats.connections, stats.dials), (1, 1), "{stats:?}");
    }
}

#[test]
fn the_descriptor_limit_covers_the_run() {
    let tb = testbed();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    let pooled = Fleet::new(members(&tb, 300));
    let released = Fleet::new(members(&tb, 300))
        .concurrency(10)
        .release_connections(true);
    let soft = pooled.ensure_descriptor_limit().unwrap();
    // One socket per pooled host at least; the process's limit is at least that now.
    assert!(soft >= 300, "{soft}");
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let now: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(now >= 300, "{line}");
    assert!(released.ensure_descriptor_limit().unwrap() >= 20);
}
