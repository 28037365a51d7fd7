//! Jump hosts as settings: [`JumpHost`] as the caller describes it, and the resolved
//! hops (every setting decided) that `ssh::jump` connects through.

use std::{fmt, path::PathBuf};

use crate::{
    config::{AuthMethod, HostKeyPolicy, Secret},
    error::{Error, Result},
};

/// One jump host of a chain (OpenSSH `ProxyJump`), for
/// [`SshExecutorBuilder::jump_host`](crate::SshExecutorBuilder::jump_host).
///
/// Whatever is not set is inherited from the target: its user, its authentication methods
/// and its host-key policy (the hop's key is still looked up under the hop's own host and
/// port).
///
/// ```
/// use swiftide_ssh_executor::JumpHost;
///
/// let bastion = JumpHost::new("bastion.example.com")
///     .port(2222)
///     .user("jump")
///     .private_key_file("~/.ssh/id_bastion");
/// let same = JumpHost::parse("jump@bastion.example.com:2222")?;
/// # Ok::<(), swiftide_ssh_executor::Error>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct JumpHost {
    host: String,
    port: u16,
    user: Option<String>,
    auth: Vec<AuthMethod>,
    host_key_policy: Option<HostKeyPolicy>,
}

impl fmt::Debug for JumpHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Auth methods redact their secrets themselves.
        f.debug_struct("JumpHost")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("auth", &self.auth)
            .field("host_key_policy", &self.host_key_policy)
            .finish()
    }
}

impl JumpHost {
    /// A jump host reached at `host` (name or address, resolved by the previous hop, or
    /// locally for the first one).
    pub fn new(host: impl Into<String>) -> Self {
        JumpHost {
            host: host.into(),
            port: 22,
            user: None,
            auth: Vec::new(),
            host_key_policy: None,
        }
    }

    /// Parses an OpenSSH `ProxyJump` element: `[user@]host[:port]`, `[user@][v6addr]:port`
    /// or `ssh://[user@]host[:port]`.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty host or a bad port.
    pub fn parse(spec: &str) -> Result<Self> {
        let (user, host, port) = parse_spec(spec).map_err(|reason| Error::Config {
            reason: format!("jump host `{spec}`: {reason}"),
        })?;
        let mut hop = JumpHost::new(host);
        hop.user = user;
        hop.port = port.unwrap_or(22);
        Ok(hop)
    }

    /// The SSH port of the jump host. Defaults to 22.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The login user on the jump host. Defaults to the target's user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Adds an unencrypted private key file for this hop. Defaults to no methods of its
    /// own: the target's authentication methods are used.
    pub fn private_key_file(self, path: impl Into<PathBuf>) -> Self {
        self.auth_method(AuthMethod::KeyFile {
            path: path.into(),
            passphrase: None,
        })
    }

    /// Adds a private key file encrypted with `passphrase` for this hop. Defaults to the
    /// target's authentication methods.
    pub fn private_key_file_with_passphrase(
        self,
        path: impl Into<PathBuf>,
        passphrase: impl Into<Secret>,
    ) -> Self {
        self.auth_method(AuthMethod::KeyFile {
            path: path.into(),
            passphrase: Some(passphrase.into()),
        })
    }

    /// Adds the identities of the ssh-agent at `$SSH_AUTH_SOCK` for this hop. Defaults to
    /// the target's authentication methods.
    pub fn agent(self) -> Self {
        self.auth_method(AuthMethod::Agent { socket: None })
    }

    /// Adds password authentication for this hop. Defaults to the target's authentication
    /// methods.
    pub fn password(self, password: impl Into<Secret>) -> Self {
        self.auth_method(AuthMethod::Password(password.into()))
    }

    /// Adds any [`AuthMethod`] for this hop; methods are tried in the order added. Defaults
    /// to the target's authentication methods.
    pub fn auth_method(mut self, method: AuthMethod) -> Self {
        self.auth.push(method);
        self
    }

    /// Verifies this hop's host key strictly against this known_hosts file. Defaults to the
    /// target's host-key policy.
    pub fn known_hosts_file(self, path: impl Into<PathBuf>) -> Self {
        self.host_key_policy(HostKeyPolicy::Strict {
            known_hosts: vec![path.into()],
        })
    }

    /// Sets this hop's host-key policy. Defaults to the target's host-key policy.
    pub fn host_key_policy(mut self, policy: HostKeyPolicy) -> Self {
        self.host_key_policy = Some(policy);
        self
    }

    /// Fills what was not set from the target's settings.
    fn resolve(self, target: &JumpTarget<'_>) -> Result<Hop> {
        if self.host.is_empty() {
            return Err(Error::Config {
                reason: "a jump host needs a host".to_owned(),
            });
        }
        Ok(Hop {
            host: self.host,
            port: self.port,
            user: self.user.unwrap_or_else(|| target.user.to_owned()),
            auth: if self.auth.is_empty() {
                target.auth.to_vec()
            } else {
                self.auth
            },
            host_key_policy: self
                .host_key_policy
                .unwrap_or_else(|| target.policy.clone()),
        })
    }
}

impl std::str::FromStr for JumpHost {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        JumpHost::parse(spec)
    }
}

/// Splits `[user@]host[:port]`, `[user@][v6]:port` or `ssh://[user@]host[:port]` the way
/// OpenSSH's `parse_user_host_port` does (the user ends at the *last* `@`).
pub(crate) fn parse_spec(
    spec: &str,
) -> std::result::Result<(Option<String>, String, Option<u16>), String> {
    let rest = spec.strip_prefix("ssh://").unwrap_or(spec);
    if spec.starts_with("ssh://") && rest.contains('/') {
        return Err("an ssh:// jump host cannot have a path".to_owned());
    }
    let (user, hostport) = match rest.rsplit_once('@') {
        Some((user, hostport)) if !user.is_empty() => (Some(user.to_owned()), hostport),
        Some(_) => return Err("empty user name".to_owned()),
        None => (None, rest),
    };
    let (host, port) = split_host_port(hostport)?;
    if host.is_empty() {
        return Err("empty host".to_owned());
    }
    let port = port
        .map(|p| match p.parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(format!("bad port `{p}`")),
        })
        .transpose()?;
    Ok((user, host.to_owned(), port))
}

fn split_host_port(hostport: &str) -> std::result::Result<(&str, Option<&str>), String> {
    if let Some(bracketed) = hostport.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| "unclosed `[`".to_owned())?;
        return match after {
            "" => Ok((host, None)),
            _ => after
                .strip_prefix(':')
                .map(|port| (host, Some(port)))
                .ok_or_else(|| format!("unexpected `{after}` after `]`")),
        };
    }
    // A bare IPv6 address has several colons and no port.
    match hostport.split_once(':') {
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        _ => Ok((hostport, None)),
    }
}

/// The target's settings that hops inherit.
pub(crate) struct JumpTarget<'a> {
    pub(crate) user: &'a str,
    pub(crate) auth: &'a [AuthMethod],
    pub(crate) policy: &'a HostKeyPolicy,
}

/// Resolves the builder's hops against the target's settings.
pub(crate) fn resolve_hops(hops: Vec<JumpHost>, target: &JumpTarget<'_>) -> Result<Vec<Hop>> {
    hops.into_iter().map(|hop| hop.resolve(target)).collect()
}

/// A jump host with every setting decided.
#[derive(Clone)]
pub(crate) struct Hop {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) auth: Vec<AuthMethod>,
    pub(crate) host_key_policy: HostKeyPolicy,
}

impl fmt::Debug for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.user, self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proxy_jump_elements_like_openssh() {
        let ok = |s: &str| parse_spec(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("host"), (None, "host".into(), None));
        assert_eq!(ok("u@h:2200"), (Some("u".into()), "h".into(), Some(2200)));
        assert_eq!(
            ok("a@b@h"),
            (Some("a@b".into()), "h".into(), None),
            "the user ends at the last @"
        );
        assert_eq!(ok("ssh://u@h:22"), (Some("u".into()), "h".into(), Some(22)));
        assert_eq!(ok("[::1]:2222"), (None, "::1".into(), Some(2222)));
        assert_eq!(ok("[::1]"), (None, "::1".into(), None));
        assert_eq!(ok("fe80::1"), (None, "fe80::1".into(), None));
        for bad in [
            "",
            "u@",
            "@h",
            "h:0",
            "h:x",
            "h:70000",
            "[::1",
            "[::1]x",
            "ssh://h/p",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn hops_inherit_what_they_do_not_set() {
        let target_auth = vec![AuthMethod::Password(Secret::new("pw"))];
        let policy = HostKeyPolicy::InsecureAcceptAnyHostKey;
        let target = JumpTarget {
            user: "ci",
            auth: &target_auth,
            policy: &policy,
        };
        let hops = resolve_hops(
            vec![
                JumpHost::new("a"),
                JumpHost::new("b")
                    .user("jump")
                    .port(2)
                    .private_key_file("/k")
                    .known_hosts_file("/kh"),
            ],
            &target,
        )
        .unwrap_or_default();
        assert_eq!(format!("{hops:?}"), "[ci@a:22, jump@b:2]");
        assert!(matches!(hops[0].auth[..], [AuthMethod::Password(_)]));
        assert!(matches!(
            hops[0].host_key_policy,
            HostKeyPolicy::InsecureAcceptAnyHostKey
        ));
        assert!(matches!(hops[1].auth[..], [AuthMethod::KeyFile { .. }]));
        assert!(matches!(
            hops[1].host_key_policy,
            HostKeyPolicy::Strict { .. }
        ));
        assert!(resolve_hops(vec![JumpHost::new("")], &target).is_err());
    }
}
