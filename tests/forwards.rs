//! Port forwards against real servers: local (`-L`, TCP and Unix socket), dynamic (`-D`,
//! SOCKS5) and remote (`-R`), with TCP's semantics (half-close, resets, many streams), the
//! server's refusals, a restart under open forwards, jump hosts and Dropbear.

mod common;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use swiftide_ssh_executor::{
    Error, Fleet, Forward, ForwardRefusal, ForwardSpec, JumpHost, SshExecutor,
};
use swiftide_ssh_testbed::Testbed;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

const LOOPBACK: &str = "127.0.0.1:0";

fn loopback() -> SocketAddr {
    LOOPBACK.parse().unwrap()
}

/// An echo server on this machine (the host of the testbed is this machine too): each
/// connection gets back what it sent, and its EOF once the sender's came.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(LOOPBACK).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                tokio::io::copy(&mut read, &mut write).await.ok();
                write.shutdown().await.ok();
            });
        }
    });
    addr
}

/// An echo server and a local forward to it.
async fn echo_forward(executor: &SshExecutor) -> (SocketAddr, swiftide_ssh_executor::LocalForward) {
    let echo = echo_server().await;
    let forward = executor
        .forward_local(loopback(), "127.0.0.1", echo.port())
        .await
        .unwrap();
    (echo, forward)
}

/// A port nothing listens on (bound, then let go).
async fn closed_port() -> u16 {
    let listener = TcpListener::bind(LOOPBACK).await.unwrap();
    listener.local_addr().unwrap().port()
}

/// A command for the host: connects to `127.0.0.1:port`, sends `text`, shuts its write
/// side, and prints what comes back until the end (python3: the hosts' `nc` differ in how
/// they half-close, BusyBox's not at all).
fn host_client(port: u16, text: &str) -> String {
    format!(
        "python3 -c 'import socket, sys\n\
s = socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 5)\n\
s.settimeout(10)\n\
s.sendall(sys.argv[2].encode())\n\
s.shutdown(socket.SHUT_WR)\n\
sys.stdout.buffer.write(b\"\".join(iter(lambda: s.recv(65536), b\"\")))' {port} '{text}'"
    )
}

/// Sends `data` on `stream`, shuts its write side, and reads to the end (within 60 s: a
/// lost EOF fails the test instead of hanging it).
async fn round_trip(stream: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    tokio::time::timeout(Duration::from_secs(60), round_trip_unbounded(stream, data))
        .await
        .expect("the round trip did not end within 60 s (an EOF was lost?)")
}

async fn round_trip_unbounded(stream: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    let (mut read, mut write) = stream.split();
    let send = async {
        write.write_all(data).await.unwrap();
        write.shutdown().await.unwrap();
    };
    let mut back = Vec::new();
    let receive = async {
        read.read_to_end(&mut back).await.unwrap();
    };
    tokio::join!(send, receive);
    back
}

#[tokio::test]
async fn a_local_forward_carries_streams_both_ways_with_half_close() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let (_, forward) = echo_forward(&executor).await;
    assert!(forward.local_addr().ip().is_loopback());
    assert_ne!(forward.local_addr().port(), 0);

    // Half-close: our EOF reaches the echo server, whose reply and EOF still come back.
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");

    // The other way round: a server that speaks first and closes, while we never write.
    let greeter = TcpListener::bind(LOOPBACK).await.unwrap();
    let greeter_port = greeter.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = greeter.accept().await.unwrap();
        stream.write_all(b"hello\n").await.unwrap();
        stream.shutdown().await.unwrap();
        // Keeps reading: what we send after its EOF must still arrive.
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"after eof");
    });
    let greeted = executor
        .forward_local(loopback(), "localhost", greeter_port)
        .await
        .unwrap();
    let mut stream = TcpStream::connect(greeted.local_addr()).await.unwrap();
    let mut hello = Vec::new();
    stream.read_to_end(&mut hello).await.unwrap();
    assert_eq!(hello, b"hello\n");
    stream.write_all(b"after eof").await.unwrap();
    stream.shutdown().await.unwrap();

    let stats = forward.stats();
    assert_eq!(stats.streams, 1);
    assert_eq!(stats.bytes_to_host, 4);
    assert_eq!(stats.bytes_from_host, 4);
    assert_eq!(stats.failed_streams, 0);
    let pool = executor.pool_stats();
    assert!(pool.forward_streams_opened >= 2, "{pool:?}");
    assert!(pool.forward_connections >= 1, "{pool:?}");

    // Closed: nothing listens any more.
    let addr = forward.local_addr();
    forward.close().await;
    assert!(TcpStream::connect(addr).await.is_err());
    let dropped_addr = greeted.local_addr();
    drop(greeted);
    let deadline = Instant::now() + Duration::from_secs(2);
    while TcpStream::connect(dropped_addr).await.is_ok() {
        assert!(Instant::now() < deadline, "a dropped forward still listens");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_thousand_concurrent_streams_are_byte_exact_on_one_connection() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let (_, forward) = echo_forward(&executor).await;
    let addr = forward.local_addr();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000u32 {
        tasks.spawn(async move {
            let data: Vec<u8> = (0..(1000 + i * 7))
                .map(|n| (n.wrapping_mul(31).wrapping_add(i)) as u8)
                .collect();
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let back = round_trip(&mut stream, &data).await;
            assert_eq!(back, data, "stream {i}");
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let stats = forward.stats();
    assert_eq!(stats.streams, 1000);
    assert_eq!(stats.failed_streams, 0);
    // One connection carried them all: streams are channels, not sessions (MaxSessions 10).
    assert_eq!(executor.pool_stats().forward_connections, 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while forward.stats().open_streams > 0 {
        assert!(Instant::now() < deadline, "{:?}", forward.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_gibibyte_each_way_arrives_intact() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    const SIZE: u64 = 1 << 30;
    // Towards the host: a sink that hashes what it gets and answers with the digest.
    let sink = TcpListener::bind(LOOPBACK).await.unwrap();
    let sink_port = sink.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = sink.accept().await.unwrap();
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        stream.write_all(&hasher.finalize()).await.unwrap();
    });
    // From the host: a source that sends SIZE bytes of a known pattern.
    let source = TcpListener::bind(LOOPBACK).await.unwrap();
    let source_port = source.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = source.accept().await.unwrap();
        let block = pattern_block();
        for _ in 0..(SIZE / block.len() as u64) {
            stream.write_all(&block).await.unwrap();
        }
        stream.shutdown().await.unwrap();
    });
    let to_sink = executor
        .forward_local(loopback(), "127.0.0.1", sink_port)
        .await
        .unwrap();
    let from_source = executor
        .forward_local(loopback(), "127.0.0.1", source_port)
        .await
        .unwrap();

    let block = pattern_block();
    let mut expected = Sha256::new();
    for _ in 0..(SIZE / block.len() as u64) {
        expected.update(&block);
    }
    let expected = expected.finalize().to_vec();

    let up = async {
        let mut stream = TcpStream::connect(to_sink.local_addr()).await.unwrap();
        for _ in 0..(SIZE / block.len() as u64) {
            stream.write_all(&block).await.unwrap();
        }
        stream.shutdown().await.unwrap();
        let mut digest = Vec::new();
        stream.read_to_end(&mut digest).await.unwrap();
        digest
    };
    let down = async {
        let mut stream = TcpStream::connect(from_source.local_addr()).await.unwrap();
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            total += n as u64;
            hasher.update(&buf[..n]);
        }
        (total, hasher.finalize().to_vec())
    };
    let (digest_up, (total_down, digest_down)) = tokio::join!(up, down);
    assert_eq!(digest_up, expected, "towards the host");
    assert_eq!(total_down, SIZE);
    assert_eq!(digest_down, expected, "from the host");
}

fn pattern_block() -> Vec<u8> {
    (0..(1u32 << 20))
        .map(|n| (n.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[tokio::test]
async fn a_refused_target_resets_at_once_and_is_counted() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let port = closed_port().await;
    let forward = executor
        .forward_local(loopback(), "127.0.0.1", port)
        .await
        .unwrap();
    let started = Instant::now();
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    let mut buf = [0u8; 16];
    let read = stream.read(&mut buf).await;
    assert_eq!(
        read.map_err(|e| e.kind()).unwrap_err(),
        std::io::ErrorKind::ConnectionReset
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(forward.stats().failed_streams, 1);
    assert_eq!(executor.pool_stats().forward_stream_failures, 1);
}

#[tokio::test]
async fn a_server_that_forbids_forwarding_refuses_typed_and_at_once() {
    let tb = Testbed::builder()
        .sshd_config_line("AllowTcpForwarding no")
        .start()
        .unwrap();
    let executor = common::executor(&tb).await;
    let echo = echo_server().await;
    // -L: each stream is refused at once (reset), the refusal counted.
    let forward = executor
        .forward_local(loopback(), "127.0.0.1", echo.port())
        .await
        .unwrap();
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    let mut buf = [0u8; 4];
    assert!(stream.read(&mut buf).await.is_err());
    assert_eq!(forward.stats().failed_streams, 1);
    // -R: the request itself is refused.
    let started = Instant::now();
    let error = executor
        .forward_remote("127.0.0.1", 0, echo)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::ForwardRefused {
                refusal: ForwardRefusal::ListenRefused,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // -D: the SOCKS5 client is told "not allowed" (reply code 2).
    let socks = executor.forward_dynamic(loopback()).await.unwrap();
    let reply = socks5_connect(socks.local_addr(), "127.0.0.1", echo.port()).await;
    assert_eq!(reply.unwrap_err(), 2);
}

#[tokio::test]
async fn permit_listen_and_permit_open_are_refusals() {
    let tb = Testbed::builder()
        .sshd_config_line("PermitListen 127.0.0.1:1")
        .sshd_config_line("PermitOpen 127.0.0.1:1")
        .start()
        .unwrap();
    let executor = common::executor(&tb).await;
    let echo = echo_server().await;
    let error = executor
        .forward_remote("127.0.0.1", 0, echo)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ForwardRefused { .. }), "{error:?}");
    let forward = executor
        .forward_local(loopback(), "127.0.0.1", echo.port())
        .await
        .unwrap();
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    let mut buf = [0u8; 4];
    assert!(stream.read(&mut buf).await.is_err());
    assert_eq!(forward.stats().failed_streams, 1);
}

/// Speaks SOCKS5 to `proxy` and asks for `host:port`: `Ok(stream)` on success, `Err(code)`
/// with the proxy's reply code otherwise.
async fn socks5_connect(proxy: SocketAddr, host: &str, port: u16) -> Result<TcpStream, u8> {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(&[5, 1, 0]).await.unwrap();
    let mut method = [0u8; 2];
    stream.read_exact(&mut method).await.unwrap();
    assert_eq!(method, [5, 0]);
    let mut request = vec![5, 1, 0, 3, host.len() as u8];
    request.extend_from_slice(host.as_bytes());
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request).await.unwrap();
    let mut reply = [0u8; 10];
    stream.read_exact(&mut reply).await.unwrap();
    if reply[1] == 0 {
        Ok(stream)
    } else {
        Err(reply[1])
    }
}

#[tokio::test]
async fn a_dynamic_forward_serves_socks5_clients_with_names_resolved_on_the_host() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let echo = echo_server().await;
    let socks = executor.forward_dynamic(loopback()).await.unwrap();
    // A hostname, resolved by the host.
    let mut stream = socks5_connect(socks.local_addr(), "localhost", echo.port())
        .await
        .unwrap();
    assert_eq!(
        round_trip(&mut stream, b"through socks").await,
        b"through socks"
    );
    // A refused destination: reply code 5 (connection refused).
    let refused = socks5_connect(socks.local_addr(), "127.0.0.1", closed_port().await).await;
    assert_eq!(refused.unwrap_err(), 5);

    // curl, as people use it: an HTTP server on the host, fetched through the proxy.
    let http = TcpListener::bind(LOOPBACK).await.unwrap();
    let http_port = http.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = http.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = stream.read(&mut request).await.unwrap();
        stream
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nhello socks\n",
            )
            .await
            .unwrap();
    });
    let curl = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--socks5-hostname"])
        .arg(socks.local_addr().to_string())
        .arg(format!("http://localhost:{http_port}/"))
        .output()
        .await
        .expect("curl (apt-get install curl)");
    assert!(
        curl.status.success(),
        "{}",
        String::from_utf8_lossy(&curl.stderr)
    );
    assert_eq!(curl.stdout, b"hello socks\n");
}

#[tokio::test]
async fn a_remote_forward_is_used_by_the_hosts_own_curl() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    // A "package mirror" only this client can reach.
    let mirror = TcpListener::bind(LOOPBACK).await.unwrap();
    let mirror_addr = mirror.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = mirror.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let _ = stream.read(&mut request).await;
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nmirror\n")
                    .await
                    .ok();
            });
        }
    });
    let forward = executor
        .forward_remote("127.0.0.1", 0, mirror_addr)
        .await
        .unwrap();
    let port = forward.remote_port();
    assert_ne!(port, 0);
    let run = executor
        .run(&format!("curl -sS --max-time 10 http://127.0.0.1:{port}/"))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout()),
        "mirror\n",
        "{}",
        String::from_utf8_lossy(&run.stderr())
    );
    assert_eq!(forward.stats().streams, 1);

    // Closed: the host no longer listens there.
    forward.close().await;
    let run = executor
        .run(&format!("curl -sS --max-time 5 http://127.0.0.1:{port}/"))
        .await
        .unwrap();
    assert_ne!(run.status, swiftide_ssh_executor::ExitStatus::Code(0));
}

#[tokio::test]
async fn remote_streams_are_handed_to_the_caller() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let (forward, mut connections) = executor
        .forward_remote_streams("localhost", 0)
        .await
        .unwrap();
    let port = forward.remote_port();
    let client = executor.clone();
    let sent = tokio::spawn(async move {
        client
            .run(&host_client(port, "from the host"))
            .await
            .unwrap()
    });
    let mut connection = tokio::time::timeout(Duration::from_secs(10), connections.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(connection.originator().0.starts_with("127."));
    let mut got = Vec::new();
    connection.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"from the host");
    connection.write_all(b"reply").await.unwrap();
    connection.shutdown().await.unwrap();
    let run = sent.await.unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout()), "reply");
}

#[tokio::test]
async fn forwards_recover_when_sshd_restarts_under_them() {
    let mut tb = common::testbed();
    let executor = common::executor(&tb).await;
    let (echo, forward) = echo_forward(&executor).await;
    let remote = executor.forward_remote("127.0.0.1", 0, echo).await.unwrap();
    let remote_port = remote.remote_port();

    // A stream in flight when the server goes: it ends with an error, not a hang.
    let mut in_flight = TcpStream::connect(forward.local_addr()).await.unwrap();
    in_flight.write_all(b"before").await.unwrap();
    let mut buf = [0u8; 6];
    in_flight.read_exact(&mut buf).await.unwrap();
    tb.restart().unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = Vec::new();
        in_flight.read_to_end(&mut rest).await
    })
    .await
    .expect("a stream in flight hung after the restart");
    assert!(ended.is_err(), "a broken stream ended cleanly: {ended:?}");

    // The listener stayed; a new stream dials a new connection.
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"after").await, b"after");
    assert!(forward.stats().failed_streams >= 1);

    // The remote forward asked the new connection for its port again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let run = executor
            .run(&host_client(remote_port, "again"))
            .await
            .unwrap();
        if run.stdout() == b"again" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the remote forward did not come back: {:?}",
            String::from_utf8_lossy(&run.stderr())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(remote.remote_port(), remote_port);
}

#[tokio::test]
async fn a_forward_through_a_jump_host_is_made_by_the_target() {
    // LogLevel DEBUG1: sshd logs each forward it is asked for, with its target.
    let debug = || {
        Testbed::builder()
            .sshd_config_line("LogLevel DEBUG1")
            .start()
            .unwrap()
    };
    let (bastion, target) = (debug(), debug());
    let executor = common::builder(&target)
        .jump_host(
            JumpHost::new(bastion.host())
                .port(bastion.port())
                .user(bastion.user())
                .private_key_file(bastion.private_key_path())
                .known_hosts_file(bastion.known_hosts_path()),
        )
        .build()
        .await
        .unwrap();
    let (echo, forward) = echo_forward(&executor).await;
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    assert_eq!(
        round_trip(&mut stream, b"via the bastion").await,
        b"via the bastion"
    );
    // The bastion forwarded to the target's sshd only; the target made the stream's
    // connection.
    let asked = |tb: &Testbed, port: u16| {
        tb.sshd_log()
            .contains(&format!("target 127.0.0.1 port {port}\n"))
    };
    assert!(asked(&bastion, target.port()), "{}", bastion.sshd_log());
    assert!(!asked(&bastion, echo.port()), "{}", bastion.sshd_log());
    assert!(asked(&target, echo.port()), "{}", target.sshd_log());
}

#[tokio::test]
async fn dropbear_forwards_both_ways() {
    let tb = Testbed::builder().dropbear().start().unwrap();
    let executor = common::executor(&tb).await;
    let (echo, forward) = echo_forward(&executor).await;
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    assert_eq!(
        round_trip(&mut stream, b"dropbear -L").await,
        b"dropbear -L"
    );

    let remote = executor.forward_remote("127.0.0.1", 0, echo).await.unwrap();
    let port = remote.remote_port();
    assert_ne!(port, 0);
    let run = executor
        .run(&host_client(port, "dropbear -R"))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout()), "dropbear -R");

    // Dropbear has no Unix socket forwards: refused, typed, at once.
    let error = executor
        .forward_remote_socket("/tmp/swiftide-dropbear.sock", echo)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            Error::ForwardRefused {
                refusal: ForwardRefusal::ListenRefused,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_unix_socket_on_the_host_is_reached_through_direct_streamlocal() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let (mut read, mut write) = stream.split();
        tokio::io::copy(&mut read, &mut write).await.ok();
        write.shutdown().await.ok();
    });
    // The testbed's login may be another account: let it reach the socket.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let forward = executor
        .forward_local_to_socket(loopback(), &path)
        .await
        .unwrap();
    let mut stream = TcpStream::connect(forward.local_addr()).await.unwrap();
    assert_eq!(
        round_trip(&mut stream, b"over a socket").await,
        b"over a socket"
    );
}

/// [`host_client`] for a Unix socket on the host.
fn host_socket_client(path: &str, text: &str) -> String {
    format!(
        "python3 -c 'import socket, sys\n\
s = socket.socket(socket.AF_UNIX)\n\
s.settimeout(10)\n\
s.connect(sys.argv[1])\n\
s.sendall(sys.argv[2].encode())\n\
s.shutdown(socket.SHUT_WR)\n\
sys.stdout.buffer.write(b\"\".join(iter(lambda: s.recv(65536), b\"\")))' '{path}' '{text}'"
    )
}

#[tokio::test]
async fn a_remote_forward_listens_on_a_unix_socket_of_the_host() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let echo = echo_server().await;
    // A directory of the login user's on the host, with a space in its name.
    let dir = executor
        .run("d=$(mktemp -d) && mkdir \"$d/a dir\" && printf %s \"$d/a dir\"")
        .await
        .unwrap();
    let dir = String::from_utf8(dir.stdout()).unwrap();
    let path = format!("{dir}/app.sock");
    let forward = executor.forward_remote_socket(&path, echo).await.unwrap();
    assert_eq!(forward.remote_port(), 0);
    assert_eq!(forward.remote_bind(), path);
    let run = executor
        .run(&host_socket_client(&path, "through the socket"))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout()),
        "through the socket",
        "{}",
        String::from_utf8_lossy(&run.stderr())
    );
    assert_eq!(forward.stats().streams, 1);

    // Handed to the caller: no originator for a socket.
    let streams_path = format!("{dir}/streams.sock");
    let (streams, mut connections) = executor
        .forward_remote_socket_streams(&streams_path)
        .await
        .unwrap();
    let client = executor.clone();
    let command = host_socket_client(&streams_path, "hello");
    let sent = tokio::spawn(async move { client.run(&command).await.unwrap() });
    let mut connection = tokio::time::timeout(Duration::from_secs(10), connections.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(connection.originator(), ("", 0));
    let mut got = Vec::new();
    connection.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"hello");
    connection.write_all(b"olleh").await.unwrap();
    connection.shutdown().await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sent.await.unwrap().stdout()),
        "olleh"
    );

    // The same path again on this connection's host: refused, typed.
    let error = executor
        .forward_remote_socket(&path, echo)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::ForwardRefused { refusal: ForwardRefusal::ListenRefused, target, .. } if *target == path),
        "{error:?}"
    );

    // Closed: nothing answers on the socket any more.
    forward.close().await;
    streams.close().await;
    let run = executor
        .run(&host_socket_client(&path, "closed"))
        .await
        .unwrap();
    assert_ne!(run.status, swiftide_ssh_executor::ExitStatus::Code(0));
    assert!(run.stdout().is_empty());
}

#[tokio::test]
async fn openssh_syntax_forwards_open_through_one_entry() {
    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let echo = echo_server().await;

    // -L with OpenSSH's syntax, port 0 picked here.
    let local = executor
        .forward(&ForwardSpec::parse_local(&format!("0:localhost:{}", echo.port())).unwrap())
        .await
        .unwrap();
    let addr = local.local_addr().unwrap();
    assert!(addr.ip().is_loopback());
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"-L").await, b"-L");
    assert!(
        local
            .to_string()
            .contains(&format!("localhost:{}", echo.port())),
        "{local}"
    );

    // -R to a Unix socket on this machine, connected per stream.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("local echo.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                tokio::io::copy(&mut read, &mut write).await.ok();
                write.shutdown().await.ok();
            });
        }
    });
    let spec = ForwardSpec::parse_remote(&format!("0:{}", socket.display())).unwrap();
    let remote = executor.forward(&spec).await.unwrap();
    assert_eq!(remote.local_addr(), None);
    let Forward::Remote(remote) = remote else {
        panic!("-R made a local forward");
    };
    let run = executor
        .run(&host_client(remote.remote_port(), "-R to a socket"))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout()), "-R to a socket");
    // A local target that refuses ends the host's connection at once, counted.
    drop(dir);
    let run = executor
        .run(&host_client(remote.remote_port(), "nobody"))
        .await
        .unwrap();
    assert!(run.stdout().is_empty());
    assert_eq!(remote.stats().failed_streams, 1);

    // -D: a SOCKS5 proxy.
    let socks = executor
        .forward(&ForwardSpec::parse_dynamic("127.0.0.1:0").unwrap())
        .await
        .unwrap();
    let mut stream = socks5_connect(socks.local_addr().unwrap(), "localhost", echo.port())
        .await
        .unwrap();
    assert_eq!(round_trip(&mut stream, b"-D").await, b"-D");
}

/// The first of three ports in a row that are free now (bound, then let go).
fn three_free_ports() -> u16 {
    for _ in 0..100 {
        let first = std::net::TcpListener::bind(LOOPBACK).unwrap();
        let port = first.local_addr().unwrap().port();
        let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if port < u16::MAX - 2 && free(port + 1) && free(port + 2) {
            return port;
        }
    }
    panic!("no three free ports in a row");
}

#[tokio::test]
async fn a_fleet_forwards_each_host_on_a_local_port_of_its_own() {
    let (one, two) = (common::testbed(), common::testbed());
    let dead = common::builder(&one)
        .port(closed_port().await)
        .connect_timeout(Duration::from_secs(2))
        .build_lazy()
        .unwrap();
    let fleet = Fleet::named([
        ("one".to_owned(), common::executor(&one).await),
        ("dead".to_owned(), dead),
        ("two".to_owned(), common::executor(&two).await),
    ]);
    let echo = echo_server().await;
    let base = three_free_ports();
    let spec = ForwardSpec::parse_local(&format!("{base}:127.0.0.1:{}", echo.port())).unwrap();
    let opened = fleet.forward(&[spec], |_| {}).await;

    let statuses = opened.report.statuses();
    assert!(statuses[0].1.is_ok(), "{statuses:?}");
    assert!(
        matches!(
            statuses[1].1,
            swiftide_ssh_executor::HostStatus::Unreachable
        ),
        "{statuses:?}"
    );
    assert!(statuses[2].1.is_ok(), "{statuses:?}");
    assert_eq!(opened.report.exit_code(), 4);
    let ports: Vec<(String, u16)> = opened
        .forwards
        .iter()
        .map(|open| (open.host.clone(), open.forward.local_addr().unwrap().port()))
        .collect();
    assert_eq!(
        ports,
        [("one".to_owned(), base), ("two".to_owned(), base + 2)]
    );
    // Each host's summary names its forward.
    let records = opened.report.records(false);
    let summary = records[0].stdout.as_deref().unwrap_or_default();
    assert!(
        summary.contains(&format!("127.0.0.1:{base} -> 127.0.0.1:")),
        "{records:?}"
    );

    for (host, port) in &ports {
        let mut stream = TcpStream::connect(("127.0.0.1", *port)).await.unwrap();
        assert_eq!(
            round_trip(&mut stream, host.as_bytes()).await,
            host.as_bytes()
        );
    }
    for open in &opened.forwards {
        let stats = open.forward.stats();
        assert_eq!(stats.streams, 1, "{}", open.host);
        assert_eq!(stats.bytes_to_host, open.host.len() as u64);
    }
    opened.close().await;
    for (_, port) in ports {
        assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
    }
}

#[tokio::test]
async fn a_closed_executor_makes_no_forwards() {
    let tb = common::testbed();
    let executor: SshExecutor = common::executor(&tb).await;
    executor.close().await;
    let error = executor
        .forward_local(loopback(), "127.0.0.1", 1)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Closed), "{error:?}");
}

#[tokio::test]
async fn expose_port_gives_an_agent_a_local_address_for_a_server_started_as_a_job() {
    use swiftide_agents::DefaultContext;
    use swiftide_core::chat_completion::{ToolCall, ToolOutput};

    let tb = common::testbed();
    let executor = common::executor(&tb).await;
    let site = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    std::fs::write(
        site.path().join("index.html"),
        "hello from the build host\n",
    )
    .unwrap();
    std::fs::set_permissions(
        site.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (job, port) = common::http_server_job(&executor, site.path()).await;

    let tools = swiftide_ssh_executor::PortTools::new(executor.clone()).tools();
    let context = DefaultContext::from_executor(executor.clone());
    let call = |name: &'static str, args: serde_json::Value| {
        let tools = &tools;
        let context = &context;
        async move {
            let call = ToolCall::builder()
                .id("call-1")
                .name(name)
                .args(args.to_string())
                .build()
                .unwrap();
            let tool = tools.iter().find(|t| t.name() == name).unwrap();
            tool.invoke(context, &call).await.unwrap()
        }
    };
    let ToolOutput::Text(exposed) = call("expose_port", serde_json::json!({ "port": port })).await
    else {
        panic!("expose_port failed");
    };
    assert!(
        exposed.starts_with(&format!("remote port {port} is exposed at 127.0.0.1:")),
        "{exposed}"
    );
    // The address the model reads, opened as its other tools would.
    let address = exposed
        .split_whitespace()
        .nth(6)
        .unwrap()
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .to_owned();
    let page = common::http_get(&address, "/index.html").await;
    assert!(page.starts_with("HTTP/1.0 200"), "{page}");
    assert!(page.ends_with("hello from the build host\n"), "{page}");

    // Again: the same address, not a second forward.
    let ToolOutput::Text(again) = call("expose_port", serde_json::json!({ "port": port })).await
    else {
        panic!("expose_port failed");
    };
    assert!(
        again.contains(&format!("already exposed at {address}")),
        "{again}"
    );
    let ToolOutput::Text(listed) = call("list_ports", serde_json::json!({})).await else {
        panic!("list_ports failed");
    };
    // (The fetched stream may still be closing: "1 open" or "0 open".)
    let prefix = format!(
        "1 of at most 16 ports exposed:\n{address} -> localhost:{port} on the remote host: \
         connections 1 ("
    );
    assert!(
        listed.starts_with(&prefix) && listed.ends_with(" open, 0 failed)"),
        "{listed}"
    );
    // A mistake the model can act on.
    assert!(matches!(
        call("expose_port", serde_json::json!({ "port": 0 })).await,
        ToolOutput::Fail(_)
    ));
    // The tools gone: nothing listens.
    drop(tools);
    let deadline = Instant::now() + Duration::from_secs(2);
    while TcpStream::connect(&address).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "an exposed port outlived its tools"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    job.kill(Duration::from_secs(1)).await.unwrap();
}
