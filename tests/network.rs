//! Network faults against hosts in network namespaces of their own (see the testbed's
//! `network_namespace`): a silent cut (no FIN, no RST, nothing) while a command runs, what
//! the client and the server each notice and when, recovery once the network is back,
//! isolation between hosts, and connecting to a host that is cut off.
//!
//! Needs root (network namespaces and veth pairs); CI runs as root, so there these tests
//! always run. Without root, each test prints why on stderr and returns early (passing),
//! because there is nothing it could check.
//!
//! Every measured figure is printed as `figure: <name> = <value>`; collect them with
//! `cargo test --test network -- --nocapture 2>&1 | grep '^figure:'`.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{builder, remote_processes, token, wait_until_gone};
use swiftide_ssh_executor::{Error, Execution, SshExecutor};
use swiftide_ssh_testbed::{Testbed, TestbedBuilder, TestbedError};
use tokio::task::JoinHandle;

/// The executor's keepalive in these tests: a silent server is given up on after
/// interval × (max + 1).
const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(500);
const KEEPALIVE_MAX: usize = 2;

/// The executor's connect timeout in these tests.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How late a deadline may be met on a loaded 2-core CI machine.
const SLACK: Duration = Duration::from_millis(2500);

/// Upper bound for anything a test waits on, so that no test can hang.
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// Starts a testbed in a network namespace of its own, or returns `None` (after saying
/// why) when the process is not root.
fn netns_testbed(builder: TestbedBuilder) -> Option<Testbed> {
    match builder.network_namespace(true).start() {
        Ok(testbed) => Some(testbed),
        Err(TestbedError::NotRoot { what }) => {
            eprintln!(
                "skipping: {what} requires root (network namespaces and veth pairs); run \
                 the tests as root to exercise network cuts"
            );
            None
        }
        Err(e) => panic!("cannot start a testbed in a network namespace: {e}"),
    }
}

fn figure(name: &str, value: impl std::fmt::Display) {
    eprintln!("figure: {name} = {value}");
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// An executor for `tb` with short keepalives.
async fn executor(tb: &Testbed) -> SshExecutor {
    builder(tb)
        .keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .keepalive_max(KEEPALIVE_MAX)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}\n{}", tb.host(), tb.sshd_log()))
}

/// `future`, or a panic naming `what` if it takes longer than [`HANG_LIMIT`].
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG_LIMIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {HANG_LIMIT:?}"))
}

/// Starts `command` on `ex` in a task of its own.
fn spawn_run(ex: &SshExecutor, command: String) -> JoinHandle<Result<Execution, Error>> {
    let ex = ex.clone();
    tokio::spawn(async move { ex.run(&command).await })
}

/// Waits until `count` remote processes match `pattern`.
async fn wait_for_processes(pattern: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(pattern).len() < count {
        assert!(
            Instant::now() < deadline,
            "the command never started: {pattern}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_silent_cut_is_detected_by_keepalive_while_a_command_runs() {
    let Some(tb) = netns_testbed(Testbed::builder()) else {
        return;
    };
    let ex = executor(&tb).await;
    let t = token();
    let pattern = format!("^sleep 300.{t}");
    let running = spawn_run(&ex, format!("sleep 300.{t}"));
    wait_for_processes(&pattern, 1).await;

    tb.cut_network().unwrap();
    let cut = Instant::now();
    let result = bounded("a command on a cut connection", running).await;
    let detected = cut.elapsed();
    let err = result.unwrap().unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
    assert!(err.to_string().contains("may have run"), "{err}");
    let bound = KEEPALIVE_INTERVAL * (KEEPALIVE_MAX as u32 + 1);
    figure("keepalive_detection", secs(detected));
    figure("keepalive_detection_bound", secs(bound));
    // Nothing arrives on a silent cut, so only the keepalive can tell, and not before one
    // interval has passed.
    assert!(detected >= KEEPALIVE_INTERVAL, "{detected:?}");
    assert!(detected < bound + SLACK, "{detected:?} (bound {bound:?})");

    // The client gave up, but nothing reached the server: without ClientAliveInterval sshd
    // has not noticed, and the command still runs there (the testbed kills it on drop).
    assert_eq!(
        remote_processes(&pattern).len(),
        1,
        "the server cannot know about the cut yet"
    );
}

#[tokio::test]
async fn after_the_network_is_restored_the_pool_recovers_with_a_new_connection() {
    let Some(tb) = netns_testbed(Testbed::builder()) else {
        return;
    };
    let ex = executor(&tb).await;
    assert_eq!(ex.run("echo before").await.unwrap().stdout(), b"before\n");
    let before = ex.pool_stats();
    assert_eq!(before.dials, 1, "{before:?}");

    let t = token();
    let running = spawn_run(&ex, format!("sleep 300.{t}"));
    wait_for_processes(&format!("^sleep 300.{t}"), 1).await;
    tb.cut_network().unwrap();
    let err = bounded("a command on a cut connection", running)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");

    // While the host is still cut off, a new command cannot connect: a typed timeout, not a
    // hang and not a command on the dead connection.
    let started = Instant::now();
    let err = bounded("a command while cut off", ex.run("echo during"))
        .await
        .unwrap_err();
    let failed_after = started.elapsed();
    figure("command_while_cut_fails_after", secs(failed_after));
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(failed_after < CONNECT_TIMEOUT + SLACK, "{failed_after:?}");

    let restoring = Instant::now();
    tb.restore_network().unwrap();
    let link_up = restoring.elapsed();
    let out = bounded("the first command after the restore", ex.run("echo after"))
        .await
        .unwrap_or_else(|e| panic!("the pool did not recover: {e}"));
    let recovered = restoring.elapsed();
    assert_eq!(out.stdout(), b"after\n");
    figure("restore_network_link_up", secs(link_up));
    figure("recovery_after_restore", secs(recovered));

    let after = ex.pool_stats();
    // A new connection (one dial that timed out while cut, one that worked), and the
    // dead one is gone.
    assert!(after.dials >= 2, "{after:?}");
    assert!(after.connections_closed >= 1, "{after:?}");
    assert_eq!(after.connections, 1, "{after:?}");
    assert!(recovered < Duration::from_secs(5), "{recovered:?}");
    // And it keeps working.
    assert_eq!(ex.run("echo again").await.unwrap().stdout(), b"again\n");
}

#[tokio::test]
async fn the_server_kills_the_remote_group_when_it_notices_the_cut() {
    const CLIENT_ALIVE_INTERVAL: u32 = 1;
    const CLIENT_ALIVE_COUNT_MAX: u32 = 2;
    let Some(tb) = netns_testbed(
        Testbed::builder().client_alive(CLIENT_ALIVE_INTERVAL, CLIENT_ALIVE_COUNT_MAX),
    ) else {
        return;
    };
    let ex = executor(&tb).await;
    let t = token();
    let pattern = format!("^sleep 300.{t}");
    let running = spawn_run(&ex, format!("sleep 300.{t} & sleep 300.{t}"));
    wait_for_processes(&pattern, 2).await;

    tb.cut_network().unwrap();
    let cut = Instant::now();
    // sshd gives up when a probe finds ClientAliveCountMax probes unanswered; closing the
    // session closes the supervisor's stdin, which kills the group. sshd 9.2 probes every
    // *second* interval (it polls with the interval as timeout but then requires
    // `now > last + interval` on a clock in whole seconds), so the bound is
    // 2 × interval × (count + 1), not interval × count.
    let bound = Duration::from_secs(u64::from(
        2 * CLIENT_ALIVE_INTERVAL * (CLIENT_ALIVE_COUNT_MAX + 1),
    ));
    let left = wait_until_gone(&pattern, bound + SLACK).await;
    let gone = cut.elapsed();
    assert!(
        left.is_empty(),
        "the remote group survived the cut for {gone:?}: {left:?}\n{}",
        tb.sshd_log()
    );
    figure("server_side_group_kill", secs(gone));
    figure("server_side_group_kill_bound", secs(bound));
    assert!(gone < bound + SLACK, "{gone:?} (bound {bound:?})");
    assert!(
        tb.sshd_log().contains("Timeout, client not responding"),
        "{}",
        tb.sshd_log()
    );

    // The client side ends with its own keepalive.
    let err = bounded("a command on a cut connection", running)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
}

#[tokio::test]
async fn cutting_one_host_leaves_another_alone() {
    let (Some(a), Some(b)) = (
        netns_testbed(Testbed::builder()),
        netns_testbed(Testbed::builder()),
    ) else {
        return;
    };
    assert_ne!(a.host(), b.host());
    let ex_a = executor(&a).await;
    let ex_b = executor(&b).await;
    let t = token();
    let on_a = spawn_run(&ex_a, format!("sleep 300.{t}"));
    // Spans the cut on B's connection.
    let on_b = spawn_run(&ex_b, format!("sleep 1.5{t}; echo b-long"));
    wait_for_processes(&format!("^sleep 300.{t}"), 1).await;
    wait_for_processes(&format!("^sleep 1.5{t}"), 1).await;

    a.cut_network().unwrap();
    let cut = Instant::now();
    assert!(!b.is_network_cut());
    let mut slowest = Duration::ZERO;
    let mut count = 0;
    // Keep B busy until A's executor has given up.
    while !on_a.is_finished() || count < 5 {
        let started = Instant::now();
        let out = bounded(
            "a command on the other host",
            ex_b.run(&format!("echo {count}")),
        )
        .await
        .unwrap_or_else(|e| panic!("command {count} on the other host failed: {e}"));
        assert_eq!(out.stdout(), format!("{count}\n").as_bytes());
        slowest = slowest.max(started.elapsed());
        count += 1;
        assert!(cut.elapsed() < HANG_LIMIT, "A's command never ended");
    }
    let err = on_a.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
    let long = bounded("B's long command", on_b).await.unwrap().unwrap();
    assert_eq!(long.stdout(), b"b-long\n");
    figure("other_host_commands_during_cut", count);
    figure("other_host_slowest_command_during_cut", secs(slowest));
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    let stats = ex_b.pool_stats();
    assert_eq!(stats.dials, 1, "B kept its connection: {stats:?}");
    assert_eq!(stats.connections_closed, 0, "{stats:?}");
}

#[tokio::test]
async fn connecting_to_a_cut_host_times_out() {
    let Some(tb) = netns_testbed(Testbed::builder()) else {
        return;
    };
    tb.cut_network().unwrap();
    let connect_timeout = Duration::from_secs(2);
    let started = Instant::now();
    let result = bounded(
        "connecting to a cut host",
        builder(&tb).connect_timeout(connect_timeout).build(),
    )
    .await;
    let took = started.elapsed();
    let Err(err) = result else {
        panic!("connecting to a cut host succeeded");
    };
    figure("connect_to_cut_host_fails_after", secs(took));
    match &err {
        Error::Timeout { phase, after, .. } => {
            let phase = phase.to_string();
            figure("connect_to_cut_host_phase", &phase);
            assert!(
                phase == "connect" || phase == "handshake",
                "phase {phase}: {err}"
            );
            assert_eq!(*after, connect_timeout);
        }
        other => panic!("expected a connect timeout, got {other:?}: {other}"),
    }
    assert!(took >= connect_timeout, "{took:?}");
    assert!(took < connect_timeout + SLACK, "{took:?}");
}

/// A fleet reports dead hosts at the cost `ssh` pays: a port that refuses and a name that
/// does not resolve are unreachable at once (one attempt, no dial retried), while a host
/// that answers nothing (its network cut: SYNs dropped) keeps the connect timeout.
#[tokio::test]
async fn a_fleet_reports_refused_and_unresolvable_hosts_at_once_and_silent_ones_at_the_timeout() {
    use swiftide_ssh_executor::{Fleet, HostStatus};
    let Some(silent) = netns_testbed(Testbed::builder()) else {
        return;
    };
    silent.cut_network().unwrap();
    let up = common::testbed();
    let refused_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    // A long connect timeout: a refused dial retried within it (as a single executor rides
    // through an sshd restart) would show as seconds here.
    let long = Duration::from_secs(15);
    let silent_timeout = Duration::from_secs(2);
    let refused = builder(&up)
        .port(refused_port)
        .connect_timeout(long)
        .build_lazy()
        .unwrap();
    let unresolvable = builder(&up)
        .host("no-such-host.invalid")
        .connect_timeout(long)
        .build_lazy()
        .unwrap();
    let members = vec![
        ("up".to_owned(), builder(&up).build_lazy().unwrap()),
        ("refused".to_owned(), refused.clone()),
        ("unresolvable".to_owned(), unresolvable.clone()),
        (
            "silent".to_owned(),
            builder(&silent)
                .connect_timeout(silent_timeout)
                .build_lazy()
                .unwrap(),
        ),
    ];
    let report = bounded(
        "a fleet with dead hosts",
        Fleet::named(members).run("echo up", |_| {}),
    )
    .await;
    let by_name = |name: &str| {
        report
            .results
            .iter()
            .find(|result| result.name == name)
            .unwrap_or_else(|| panic!("no result for {name}: {report:?}"))
    };
    assert_eq!(by_name("up").status(), HostStatus::Ok, "{report:?}");
    for name in ["refused", "unresolvable"] {
        let result = by_name(name);
        figure(
            &format!("fleet_{name}_host_reported_after"),
            secs(result.duration),
        );
        assert_eq!(
            result.status(),
            HostStatus::Unreachable,
            "{name}: {report:?}"
        );
        assert_eq!(result.attempts, 1, "{name}");
        assert!(
            matches!(result.outcome, Err(Error::Connect { .. })),
            "{name}: {:?}",
            result.outcome
        );
        assert!(
            result.duration < long / 3,
            "{name} took {:?}",
            result.duration
        );
    }
    for (name, executor) in [("refused", &refused), ("unresolvable", &unresolvable)] {
        let stats = executor.pool_stats();
        assert_eq!(stats.dial_retries, 0, "{name}: {stats:?}");
        assert_eq!(stats.dial_failures, 1, "{name}: {stats:?}");
    }
    let silent_result = by_name("silent");
    figure(
        "fleet_silent_host_reported_after",
        secs(silent_result.duration),
    );
    assert_eq!(
        silent_result.status(),
        HostStatus::Unreachable,
        "{report:?}"
    );
    assert!(
        matches!(silent_result.outcome, Err(Error::Timeout { .. })),
        "{:?}",
        silent_result.outcome
    );
    assert!(silent_result.duration >= silent_timeout, "{report:?}");

    // The same refused host on its own, outside a fleet, still retries within its connect
    // timeout (the ride-through of an sshd restart).
    let alone = builder(&up)
        .port(refused_port)
        .connect_timeout(Duration::from_millis(600))
        .build_lazy()
        .unwrap();
    let error = alone.run("true").await.unwrap_err();
    assert!(
        alone.pool_stats().dial_retries >= 1,
        "{error}: {:?}",
        alone.pool_stats()
    );
}
