//! A TCP stream that acknowledges what it reads at once (`TCP_QUICKACK`), for the connection
//! to the target host.
//!
//! Why: sshd does not disable Nagle's algorithm on sessions without a terminal, so a small
//! packet it sends while an earlier one is still unacknowledged waits for our ACK. Linux
//! delays ACKs by up to 40 ms once a connection looks interactive (it answered a read within
//! the delayed-ACK timeout, which every SSH request/response exchange does), and sshd sends
//! two small packets in a row right after authentication (the `hostkeys-00@openssh.com`
//! announcement, then the answer to our first channel open). Measured on loopback against
//! OpenSSH 9.2: the first channel of every new connection took 43 ms to open, and its
//! command 47 ms in all where later ones took 2–4 ms (6 ms with this stream).
//!
//! `TCP_QUICKACK` has to be set again after each read, because Linux leaves quick-ACK mode
//! as soon as the connection looks interactive again; reads that fill the buffer (bulk
//! output) skip it, since Linux acknowledges every second full segment anyway.
//!
//! Reads go through a small buffer: russh reads each packet in two calls (length, then the
//! rest), so without it every small packet cost two `recvfrom` calls, and now a
//! `setsockopt` as well. With it, the packets that arrived together come from one
//! `recvfrom`, followed by one `setsockopt`.
//!
//! The option is Linux-only; elsewhere this is the plain (buffered) stream. A failing
//! `setsockopt` is ignored (the stream still works, only slower to acknowledge).

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, BufReader, ReadBuf},
    net::TcpStream,
};

/// Bytes read from the socket at once. A read at least this large bypasses the buffer (bulk
/// output: russh's 32 KiB packets).
const READ_BUFFER: usize = 8 * 1024;

/// A [`TcpStream`] that sets `TCP_QUICKACK` after every read from the socket that returned
/// less than a full buffer, with reads buffered (see the module docs).
#[derive(Debug)]
pub(crate) struct QuickAckStream {
    inner: BufReader<TcpStream>,
}

impl QuickAckStream {
    pub(crate) fn new(stream: TcpStream) -> Self {
        let stream = Self {
            inner: BufReader::with_capacity(READ_BUFFER, stream),
        };
        stream.ack_quickly();
        stream
    }

    fn ack_quickly(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let _ = self.inner.get_ref().set_quickack(true);
        }
    }
}

impl AsyncRead for QuickAckStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Only an empty buffer makes this call read the socket.
        let reads_socket = self.inner.buffer().is_empty();
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if reads_socket && matches!(poll, Poll::Ready(Ok(()))) {
            // What the socket gave: handed out now, plus what the buffer kept.
            let received = buf.filled().len() - before + self.inner.buffer().len();
            // A full read is bulk data, which Linux acknowledges every second segment anyway:
            // no system call for it.
            if received > 0 && received < READ_BUFFER {
                self.ack_quickly();
            }
        }
        poll
    }
}

impl AsyncWrite for QuickAckStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_arrive_in_order_and_each_socket_read_turns_quick_acks_back_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = TcpStream::connect(address).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let mut stream = QuickAckStream::new(client);

        // Linux leaves quick-ACK mode on its own; this stands in for that.
        stream.inner.get_ref().set_quickack(false).unwrap();
        assert!(!stream.inner.get_ref().quickack().unwrap());
        server.write_all(b"\0\0\0\x05hello").await.unwrap();
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).await.unwrap();
        assert_eq!(length, [0, 0, 0, 5]);
        assert!(stream.inner.get_ref().quickack().unwrap());

        // The rest of the packet came with the same socket read: served from the buffer.
        let mut body = [0u8; 5];
        stream.read_exact(&mut body).await.unwrap();
        assert_eq!(&body, b"hello");

        // A read larger than the buffer, and writes, pass straight through.
        let big: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            server.write_all(&sent).await.unwrap();
            let mut echo = [0u8; 3];
            server.read_exact(&mut echo).await.unwrap();
            echo
        });
        let mut received = vec![0u8; big.len()];
        stream.read_exact(&mut received).await.unwrap();
        assert_eq!(received, big);
        stream.write_all(b"ack").await.unwrap();
        stream.flush().await.unwrap();
        assert_eq!(&writer.await.unwrap(), b"ack");
    }
}
