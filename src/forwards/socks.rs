//! The server side of SOCKS5 (RFC 1928) that a dynamic forward (`ssh -D`) speaks to local
//! clients: no authentication, `CONNECT` only, the destination passed to the host as given
//! (a hostname is resolved by the host, as `curl --socks5-hostname` expects).
//!
//! Written here rather than taken from a crate: the part a dynamic forward needs is two
//! small messages each way, and the crates that serve SOCKS5 (`fast-socks5`,
//! `socks5-server`) bring their own connect and resolve steps that would have to be undone
//! to open a channel instead.

use std::{
    io,
    net::{Ipv4Addr, Ipv6Addr},
};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const VERSION: u8 = 5;
const NO_AUTHENTICATION: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CONNECT: u8 = 1;
const ATYP_IPV4: u8 = 1;
const ATYP_DOMAIN: u8 = 3;
const ATYP_IPV6: u8 = 4;

/// A reply code of RFC 1928, section 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    Succeeded = 0,
    GeneralFailure = 1,
    NotAllowed = 2,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    CommandNotSupported = 7,
    AddressTypeNotSupported = 8,
}

/// Reads the client's greeting and its request. `Ok(Some((host, port)))` for a `CONNECT`;
/// `Ok(None)` when the request was refused here (the reply is sent, the stream should be
/// dropped).
pub(crate) async fn accept<S>(stream: &mut S) -> io::Result<Option<(String, u16)>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    if head[0] != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a SOCKS5 client (version byte {})", head[0]),
        ));
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    stream.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTHENTICATION) {
        stream.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Ok(None);
    }
    stream.write_all(&[VERSION, NO_AUTHENTICATION]).await?;

    let mut request = [0u8; 4];
    stream.read_exact(&mut request).await?;
    let [version, command, _reserved, address_type] = request;
    if version != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "SOCKS5 request with another version",
        ));
    }
    let host = match address_type {
        ATYP_IPV4 => {
            let mut octets = [0u8; 4];
            stream.read_exact(&mut octets).await?;
            Ipv4Addr::from(octets).to_string()
        }
        ATYP_IPV6 => {
            let mut octets = [0u8; 16];
            stream.read_exact(&mut octets).await?;
            Ipv6Addr::from(octets).to_string()
        }
        ATYP_DOMAIN => {
            let length = stream.read_u8().await?;
            let mut name = vec![0u8; usize::from(length)];
            stream.read_exact(&mut name).await?;
            match String::from_utf8(name) {
                Ok(name) if !name.is_empty() => name,
                _ => {
                    reply(stream, Reply::AddressTypeNotSupported).await?;
                    return Ok(None);
                }
            }
        }
        _ => {
            reply(stream, Reply::AddressTypeNotSupported).await?;
            return Ok(None);
        }
    };
    let port = stream.read_u16().await?;
    if command != CONNECT {
        reply(stream, Reply::CommandNotSupported).await?;
        return Ok(None);
    }
    Ok(Some((host, port)))
}

/// Sends the reply to a request. The bound address is reported as `0.0.0.0:0`: the
/// connection is made by the host, whose address the client has no use for.
pub(crate) async fn reply<S>(stream: &mut S, code: Reply) -> io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    stream
        .write_all(&[VERSION, code as u8, 0, ATYP_IPV4, 0, 0, 0, 0, 0, 0])
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn exchange(client_sends: &[u8]) -> (io::Result<Option<(String, u16)>>, Vec<u8>) {
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        theirs.write_all(client_sends).await.unwrap();
        let accepted = accept(&mut ours).await;
        drop(ours);
        let mut answered = Vec::new();
        theirs.read_to_end(&mut answered).await.unwrap();
        (accepted, answered)
    }

    #[tokio::test]
    async fn connect_requests_name_the_destination_as_the_client_gave_it() {
        let mut domain = vec![5, 1, 0, 5, 1, 0, 3, 11];
        domain.extend_from_slice(b"example.org");
        domain.extend_from_slice(&443u16.to_be_bytes());
        let (accepted, answered) = exchange(&domain).await;
        assert_eq!(accepted.unwrap(), Some(("example.org".to_owned(), 443)));
        assert_eq!(answered, [5, 0]);

        let (accepted, _) = exchange(&[5, 2, 2, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80]).await;
        assert_eq!(accepted.unwrap(), Some(("127.0.0.1".to_owned(), 80)));

        let mut v6 = vec![5, 1, 0, 5, 1, 0, 4];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0x1f, 0x90]);
        let (accepted, _) = exchange(&v6).await;
        assert_eq!(accepted.unwrap(), Some(("::1".to_owned(), 8080)));
    }

    #[tokio::test]
    async fn what_a_dynamic_forward_cannot_do_is_refused_with_its_code() {
        // Username/password authentication only.
        let (accepted, answered) = exchange(&[5, 1, 2]).await;
        assert_eq!(accepted.unwrap(), None);
        assert_eq!(answered, [5, 0xff]);
        // BIND and UDP ASSOCIATE.
        for command in [2, 3] {
            let (accepted, answered) =
                exchange(&[5, 1, 0, 5, command, 0, 1, 127, 0, 0, 1, 0, 80]).await;
            assert_eq!(accepted.unwrap(), None);
            assert_eq!(answered, [5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0]);
        }
        // SOCKS4.
        let (accepted, _) = exchange(&[4, 1, 0, 80, 127, 0, 0, 1, 0]).await;
        assert_eq!(accepted.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
