//! A loopback TCP proxy that delays each direction by a fixed time, preserving byte order.
//! Runs on its own thread and runtime so the code under test cannot starve it.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    time::Instant,
};

/// Starts the proxy and returns the address to connect to. It lives until the process exits.
pub fn start(target: SocketAddr, one_way: Duration) -> std::io::Result<SocketAddr> {
    start_many(&[target], one_way)?
        .pop()
        .ok_or_else(|| std::io::Error::other("proxy thread returned no address"))
}

/// Reads as data arrives, stamps it, and writes it `delay` later; EOF is forwarded the same way.
///
/// Every read is acknowledged at once (`TCP_QUICKACK`), so that the proxy adds no
/// delayed-ACK stall of its own: a TCP-terminating proxy cannot pass on the client's ACK
/// timing, and with Linux's default an sshd packet held by Nagle's algorithm waited up to
/// 40 ms for the proxy's ACK, whatever the client did. With this the link's round trips are
/// the protocols' own (and a client's own quick or delayed ACKs do not show here).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    tokio::spawn(async move {
        loop {
            let mut buf = vec![0u8; 64 * 1024];
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = tx.send((Instant::now() + delay, None));
                    break;
                }
                Ok(n) => {
                    let _ = from.as_ref().set_quickack(true);
                    buf.truncate(n);
                    if tx.send((Instant::now() + delay, Some(buf))).is_err() {
                        break;
                    }
                }
            }
        }
    });
    while let Some((at, data)) = rx.recv().await {
        tokio::time::sleep_until(at).await;
        match data {
            Some(data) => {
                if to.write_all(&data).await.is_err() {
                    break;
                }
            }
            None => {
                let _ = to.shutdown().await;
                break;
            }
        }
    }
}

/// Starts one delaying listener per target, all on one thread and runtime, and returns the
/// address to connect to for each target (in order). They live until the process exits.
pub fn start_many(targets: &[SocketAddr], one_way: Duration) -> std::io::Result<Vec<SocketAddr>> {
    let targets = targets.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("delay-proxies".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            runtime.block_on(async move {
                let mut addresses = Vec::with_capacity(targets.len());
                let mut listeners = Vec::with_capacity(targets.len());
                for target in targets {
                    match TcpListener::bind("127.0.0.1:0").await {
                        Ok(listener) => {
                            addresses.push(listener.local_addr());
                            listeners.push((listener, target));
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                let _ = tx.send(addresses.into_iter().collect());
                let accepting: Vec<_> = listeners
                    .into_iter()
                    .map(|(listener, target)| {
                        tokio::spawn(async move {
                            while let Ok((inbound, _)) = listener.accept().await {
                                tokio::spawn(async move {
                                    let Ok(outbound) = TcpStream::connect(target).await else {
                                        return;
                                    };
                                    let _ = inbound.set_nodelay(true);
                                    let _ = outbound.set_nodelay(true);
                                    let (ir, iw) = inbound.into_split();
                                    let (or, ow) = outbound.into_split();
                                    tokio::spawn(pipe(ir, ow, one_way));
                                    tokio::spawn(pipe(or, iw, one_way));
                                });
                            }
                        })
                    })
                    .collect();
                for task in accepting {
                    let _ = task.await;
                }
            });
        })?;
    rx.recv()
        .map_err(|_| std::io::Error::other("proxy thread died"))?
}
