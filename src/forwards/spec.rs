//! Forwards as OpenSSH spells them (`-L`, `-R`, `-D`), parsed into [`ForwardSpec`] and opened
//! by [`SshExecutor::forward`]: the one entry the command line and fleets use.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, SocketAddr},
};

use super::{ForwardTarget, LocalForward, RemoteForward};
use crate::{
    error::{Error, Result},
    executor::SshExecutor,
};

/// Where a remote forward (`-R`) listens on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostListener {
    /// A TCP port (`tcpip-forward`). `bind` as sshd takes it: `localhost` for the host's
    /// loopback, `""` for every address (granted only with `GatewayPorts clientspecified`);
    /// port 0 lets the server pick.
    Tcp {
        /// The listen address, as sent to the server.
        bind: String,
        /// The port; 0 for the server's pick.
        port: u16,
    },
    /// A Unix socket on the host (`streamlocal-forward@openssh.com`), created by sshd with
    /// its `StreamLocalBindMask`; `StreamLocalBindUnlink yes` lets it replace a stale one.
    UnixSocket(String),
}

impl fmt::Display for HostListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostListener::Tcp { bind, port } if bind.contains(':') => write!(f, "[{bind}]:{port}"),
            HostListener::Tcp { bind, port } if bind.is_empty() => write!(f, "*:{port}"),
            HostListener::Tcp { bind, port } => write!(f, "{bind}:{port}"),
            HostListener::UnixSocket(path) => f.write_str(path),
        }
    }
}

/// One forward, as `ssh -L`, `-R` or `-D` takes it ([`parse_local`](Self::parse_local),
/// [`parse_remote`](Self::parse_remote), [`parse_dynamic`](Self::parse_dynamic)), opened
/// with [`SshExecutor::forward`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardSpec {
    /// `-L`: a listener on this machine; each connection carried to `to`, reached from the
    /// host.
    Local {
        /// The local listen address.
        bind: SocketAddr,
        /// The target, as the host reaches it.
        to: ForwardTarget,
    },
    /// `-R`: a listener on the host; each connection carried to `to`, reached from this
    /// machine.
    Remote {
        /// Where the host listens.
        on_host: HostListener,
        /// The target, as this machine reaches it (a host name is resolved here, per
        /// connection).
        to: ForwardTarget,
    },
    /// `-D`: a SOCKS5 proxy on this machine whose connections the host makes.
    Dynamic {
        /// The local listen address.
        bind: SocketAddr,
    },
}

impl ForwardSpec {
    /// Parses `ssh -L`'s argument: `[bind_address:]port:host:hostport` or
    /// `[bind_address:]port:/remote/socket`. IPv6 addresses go in brackets. As with
    /// OpenSSH, no bind address (or `localhost`) means loopback, and `*` (or an empty one)
    /// every address; any other bind address must be an IP address. A Unix socket to
    /// listen on locally (`/local/socket:...`) is refused: only TCP listens here.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong.
    pub fn parse_local(text: &str) -> Result<Self> {
        let fields = split_fields(text)?;
        let invalid = |why: &str| invalid("-L", text, why);
        let (bind, port, target) = match fields.as_slice() {
            [listen, ..] if is_path(listen) => {
                return Err(invalid("listening on a local Unix socket is not supported"));
            }
            [port, path] if is_path(path) => (None, *port, ForwardTarget::UnixSocket(path.into())),
            [bind, port, path] if is_path(path) => {
                (Some(*bind), *port, ForwardTarget::UnixSocket(path.into()))
            }
            [port, host, host_port] => (None, *port, tcp_target(host, host_port, &invalid)?),
            [bind, port, host, host_port] => {
                (Some(*bind), *port, tcp_target(host, host_port, &invalid)?)
            }
            _ => {
                return Err(invalid(
                    "expected [bind_address:]port:host:hostport or [bind_address:]port:/socket",
                ));
            }
        };
        let bind = local_bind(bind, port, &invalid)?;
        Ok(ForwardSpec::Local { bind, to: target })
    }

    /// Parses `ssh -R`'s argument: `[bind_address:]port:host:hostport`,
    /// `[bind_address:]port:/local/socket`, `/remote/socket:host:hostport` or
    /// `/remote/socket:/local/socket`. No bind address means the host's loopback
    /// (`localhost`), `*` every address (sshd grants that with `GatewayPorts
    /// clientspecified`); port 0 lets the server pick. OpenSSH's remote SOCKS form (`-R
    /// port` alone) is refused.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong.
    pub fn parse_remote(text: &str) -> Result<Self> {
        let fields = split_fields(text)?;
        let invalid = |why: &str| invalid("-R", text, why);
        let tcp = |bind: Option<&str>, port: &str| -> Result<HostListener> {
            let bind = match bind {
                None => "localhost".to_owned(),
                Some("*") => String::new(),
                Some(bind) => bind.to_owned(),
            };
            Ok(HostListener::Tcp {
                bind,
                port: parse_port(port, true, &invalid)?,
            })
        };
        let (on_host, to) = match fields.as_slice() {
            [listen, path] if is_path(listen) && is_path(path) => (
                HostListener::UnixSocket((*listen).to_owned()),
                ForwardTarget::UnixSocket(path.into()),
            ),
            [port, path] if is_path(path) => {
                (tcp(None, port)?, ForwardTarget::UnixSocket(path.into()))
            }
            [listen, host, host_port] if is_path(listen) => (
                HostListener::UnixSocket((*listen).to_owned()),
                tcp_target(host, host_port, &invalid)?,
            ),
            [bind, port, path] if is_path(path) => (
                tcp(Some(bind), port)?,
                ForwardTarget::UnixSocket(path.into()),
            ),
            [port, host, host_port] => (tcp(None, port)?, tcp_target(host, host_port, &invalid)?),
            [bind, port, host, host_port] => (
                tcp(Some(bind), port)?,
                tcp_target(host, host_port, &invalid)?,
            ),
            [_] | [_, _] => {
                return Err(invalid(
                    "a remote SOCKS proxy (-R [bind_address:]port) is not supported",
                ));
            }
            _ => {
                return Err(invalid(
                    "expected [bind_address:]port:host:hostport, [bind_address:]port:/socket, \
                     /socket:host:hostport or /socket:/socket",
                ));
            }
        };
        Ok(ForwardSpec::Remote { on_host, to })
    }

    /// Parses `ssh -D`'s argument: `[bind_address:]port`, with the bind address as for
    /// [`parse_local`](Self::parse_local).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong.
    pub fn parse_dynamic(text: &str) -> Result<Self> {
        let fields = split_fields(text)?;
        let invalid = |why: &str| invalid("-D", text, why);
        let bind = match fields.as_slice() {
            [port] => local_bind(None, port, &invalid)?,
            [bind, port] => local_bind(Some(bind), port, &invalid)?,
            _ => return Err(invalid("expected [bind_address:]port")),
        };
        Ok(ForwardSpec::Dynamic { bind })
    }

    /// This forward for the `index`th host of a fleet: a local listener's port moved up by
    /// `index` (each host its own port: `-L 9100:localhost:9100` on three hosts listens on
    /// 9100, 9101 and 9102), port 0 left to the system. A remote forward listens on each
    /// host's own port, so it is the same for every host.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the port would pass 65535.
    pub fn for_host(&self, index: usize) -> Result<Self> {
        let shifted = |bind: &SocketAddr| -> Result<SocketAddr> {
            if bind.port() == 0 {
                return Ok(*bind);
            }
            let port = u16::try_from(index)
                .ok()
                .and_then(|index| bind.port().checked_add(index))
                .ok_or_else(|| Error::InvalidInput {
                    reason: format!(
                        "forward on {bind}: host {index} of the fleet would listen past port 65535"
                    ),
                })?;
            Ok(SocketAddr::new(bind.ip(), port))
        };
        Ok(match self {
            ForwardSpec::Local { bind, to } => ForwardSpec::Local {
                bind: shifted(bind)?,
                to: to.clone(),
            },
            ForwardSpec::Dynamic { bind } => ForwardSpec::Dynamic {
                bind: shifted(bind)?,
            },
            ForwardSpec::Remote { .. } => self.clone(),
        })
    }
}

impl fmt::Display for ForwardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardSpec::Local { bind, to } => write!(f, "-L {bind} -> {to}"),
            ForwardSpec::Remote { on_host, to } => write!(f, "-R {on_host} -> {to}"),
            ForwardSpec::Dynamic { bind } => write!(f, "-D {bind}"),
        }
    }
}

/// An open forward of any kind, from [`SshExecutor::forward`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Forward {
    /// `-L` or `-D`.
    Local(LocalForward),
    /// `-R`.
    Remote(RemoteForward),
}

impl Forward {
    /// Where a local (or dynamic) forward listens on this machine; `None` for a remote one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Forward::Local(forward) => Some(forward.local_addr()),
            Forward::Remote(_) => None,
        }
    }

    /// This forward's streams and bytes so far.
    pub fn stats(&self) -> super::ForwardStats {
        match self {
            Forward::Local(forward) => forward.stats(),
            Forward::Remote(forward) => forward.stats(),
        }
    }

    /// Closes it: see [`LocalForward::close`] and [`RemoteForward::close`].
    pub async fn close(self) {
        match self {
            Forward::Local(forward) => forward.close().await,
            Forward::Remote(forward) => forward.close().await,
        }
    }
}

impl fmt::Display for Forward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Forward::Local(forward) => forward.fmt(f),
            Forward::Remote(forward) => forward.fmt(f),
        }
    }
}

impl SshExecutor {
    /// Opens the forward `spec` describes: [`forward_local`](Self::forward_local) or
    /// [`forward_local_to_socket`](Self::forward_local_to_socket) for `-L`,
    /// [`forward_dynamic`](Self::forward_dynamic) for `-D`,
    /// [`forward_remote`](Self::forward_remote) or
    /// [`forward_remote_socket`](Self::forward_remote_socket) for `-R` (its target is
    /// reached from this machine per connection: a host name resolved, a Unix socket
    /// connected, each time).
    ///
    /// # Errors
    /// As the method it stands for.
    pub async fn forward(&self, spec: &ForwardSpec) -> Result<Forward> {
        Ok(match spec {
            ForwardSpec::Local { bind, to } => Forward::Local(
                self.listen(*bind, super::Listening::Fixed(to.clone()))
                    .await?,
            ),
            ForwardSpec::Dynamic { bind } => Forward::Local(self.forward_dynamic(*bind).await?),
            ForwardSpec::Remote { on_host, to } => Forward::Remote(
                self.remote(on_host.clone(), super::remote::Deliver::To(to.clone()))
                    .await?,
            ),
        })
    }
}

fn invalid(flag: &str, text: &str, why: &str) -> Error {
    Error::InvalidInput {
        reason: format!("{flag} {text:?}: {why}"),
    }
}

/// A field naming a Unix socket: OpenSSH takes a field with a `/` in it for a path.
fn is_path(field: &str) -> bool {
    field.contains('/')
}

/// Splits at colons outside brackets (`[::1]:8080:[fe80::1]:80`), dropping the brackets. A
/// socket path cannot hold a colon (as with OpenSSH, which has no escape for one either).
fn split_fields(text: &str) -> Result<Vec<&str>> {
    let mut fields = Vec::new();
    let mut rest = text;
    loop {
        let (field, after) = if let Some(bracketed) = rest.strip_prefix('[') {
            let Some(end) = bracketed.find(']') else {
                return Err(invalid("forward", text, "a '[' without its ']'"));
            };
            let after = &bracketed[end + 1..];
            if !(after.is_empty() || after.starts_with(':')) {
                return Err(invalid("forward", text, "']' must end its field"));
            }
            (&bracketed[..end], after.strip_prefix(':'))
        } else {
            match rest.split_once(':') {
                Some((field, after)) => (field, Some(after)),
                None => (rest, None),
            }
        };
        fields.push(field);
        match after {
            Some(after) => rest = after,
            None => return Ok(fields),
        }
    }
}

fn parse_port(text: &str, zero_allowed: bool, invalid: &dyn Fn(&str) -> Error) -> Result<u16> {
    match text.parse::<u16>() {
        Ok(0) if !zero_allowed => Err(invalid("port 0 is not a port to connect to")),
        Ok(port) => Ok(port),
        Err(_) => Err(invalid(&format!("{text:?} is not a port (0-65535)"))),
    }
}

fn tcp_target(host: &str, port: &str, invalid: &dyn Fn(&str) -> Error) -> Result<ForwardTarget> {
    if host.is_empty() {
        return Err(invalid("an empty target host"));
    }
    Ok(ForwardTarget::Tcp {
        host: host.to_owned(),
        port: parse_port(port, false, invalid)?,
    })
}

/// A local listen address as OpenSSH reads one: none or `localhost` is loopback, `*` or
/// an empty one every address; anything else must be an IP address (nothing is resolved).
fn local_bind(
    bind: Option<&str>,
    port: &str,
    invalid: &dyn Fn(&str) -> Error,
) -> Result<SocketAddr> {
    let ip = match bind {
        None | Some("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some("" | "*") => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Some(address) => address.parse().map_err(|_| {
            invalid(&format!(
                "bind address {address:?} is not an IP address, localhost or *"
            ))
        })?,
    };
    Ok(SocketAddr::new(ip, parse_port(port, true, invalid)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> ForwardTarget {
        ForwardTarget::Tcp {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn local_forwards_parse_like_openssh() {
        let cases = [
            ("8080:localhost:80", "127.0.0.1:8080", tcp("localhost", 80)),
            (
                "0:db.internal:5432",
                "127.0.0.1:0",
                tcp("db.internal", 5432),
            ),
            ("*:8080:localhost:80", "0.0.0.0:8080", tcp("localhost", 80)),
            (
                "localhost:9:10.0.0.7:22",
                "127.0.0.1:9",
                tcp("10.0.0.7", 22),
            ),
            ("[::1]:8080:[fe80::1]:80", "[::1]:8080", tcp("fe80::1", 80)),
            (
                "5432:/run/postgresql/.s.PGSQL.5432",
                "127.0.0.1:5432",
                ForwardTarget::UnixSocket("/run/postgresql/.s.PGSQL.5432".into()),
            ),
            (
                "127.0.0.2:1:/tmp/a b",
                "127.0.0.2:1",
                ForwardTarget::UnixSocket("/tmp/a b".into()),
            ),
        ];
        for (text, bind, to) in cases {
            let expected = ForwardSpec::Local {
                bind: bind.parse().unwrap(),
                to,
            };
            assert_eq!(ForwardSpec::parse_local(text).unwrap(), expected, "{text}");
        }
        for bad in [
            "8080",
            "8080:localhost",
            "x:localhost:80",
            "8080:localhost:0",
            "8080:localhost:70000",
            "example.com:8080:localhost:80",
            "/tmp/local.sock:localhost:80",
            "[::1:8080:localhost:80",
            "1:2:3:4:5",
        ] {
            let error = ForwardSpec::parse_local(bad).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidInput { reason } if reason.contains(bad)),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn remote_forwards_parse_like_openssh() {
        let listen = |bind: &str, port| HostListener::Tcp {
            bind: bind.to_owned(),
            port,
        };
        let cases = [
            (
                "8080:localhost:3000",
                listen("localhost", 8080),
                tcp("localhost", 3000),
            ),
            (
                "0:127.0.0.1:3000",
                listen("localhost", 0),
                tcp("127.0.0.1", 3000),
            ),
            (
                "*:8080:localhost:3000",
                listen("", 8080),
                tcp("localhost", 3000),
            ),
            ("[::1]:80:[::1]:3000", listen("::1", 80), tcp("::1", 3000)),
            (
                "8080:/run/app.sock",
                listen("localhost", 8080),
                ForwardTarget::UnixSocket("/run/app.sock".into()),
            ),
            (
                "/tmp/host.sock:localhost:3000",
                HostListener::UnixSocket("/tmp/host.sock".into()),
                tcp("localhost", 3000),
            ),
            (
                "/tmp/host.sock:/tmp/local.sock",
                HostListener::UnixSocket("/tmp/host.sock".into()),
                ForwardTarget::UnixSocket("/tmp/local.sock".into()),
            ),
        ];
        for (text, on_host, to) in cases {
            let expected = ForwardSpec::Remote { on_host, to };
            assert_eq!(ForwardSpec::parse_remote(text).unwrap(), expected, "{text}");
        }
        for bad in [
            "8080",
            "localhost:8080",
            "8080:localhost:0",
            "8080:localhost",
        ] {
            assert!(ForwardSpec::parse_remote(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dynamic_forwards_parse_and_shift_per_host() {
        let spec = ForwardSpec::parse_dynamic("1080").unwrap();
        assert_eq!(
            spec,
            ForwardSpec::Dynamic {
                bind: "127.0.0.1:1080".parse().unwrap()
            }
        );
        assert_eq!(
            spec.for_host(2).unwrap(),
            ForwardSpec::Dynamic {
                bind: "127.0.0.1:1082".parse().unwrap()
            }
        );
        assert_eq!(
            ForwardSpec::parse_dynamic("[::1]:0")
                .unwrap()
                .for_host(7)
                .unwrap(),
            ForwardSpec::Dynamic {
                bind: "[::1]:0".parse().unwrap()
            }
        );
        assert!(
            ForwardSpec::parse_dynamic("65535")
                .unwrap()
                .for_host(1)
                .is_err()
        );
        let remote = ForwardSpec::parse_remote("9000:localhost:9000").unwrap();
        assert_eq!(remote.for_host(3).unwrap(), remote);
        assert!(ForwardSpec::parse_dynamic("a:b:c").is_err());
    }
}
