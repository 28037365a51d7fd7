//! OpenSSH client configuration (`~/.ssh/config`): resolving a host alias the way `ssh`
//! does, and turning the result into a builder.
//!
//! # Why a parser of our own
//!
//! `russh-config` 0.58 reads `Port=2200` as 22 and ignores `Include` and `Match`;
//! `ssh2-config` 0.9 applies the lines of a `Match` block to the `Host` block before it (a
//! `Match host other` block's `User`/`HostName` leaked into an unrelated host), lets the
//! *last* value of a keyword repeated in one block win, matches host patterns
//! case-sensitively, expands no `%` tokens and does not interpret `UserKnownHostsFile`,
//! `StrictHostKeyChecking`, `IdentitiesOnly` or `ServerAliveCountMax`. Getting the
//! subset below exactly right was smaller than patching around either.
//!
//! # Semantics (OpenSSH `readconf.c`)
//!
//! * Lines before the first `Host` apply to every host. A `Host` line holds
//!   whitespace-separated patterns with `*` and `?`, matched case-insensitively against the
//!   alias as given (not against `HostName`); a `!pattern` that matches excludes the host
//!   even if another pattern matches.
//! * For each keyword the **first** value obtained wins, from the top of the file down,
//!   including within one block; only `IdentityFile` accumulates (duplicates dropped).
//!   `ProxyJump` and `ProxyCommand` compete: whichever comes first wins.
//! * `Keyword value`, `Keyword=value` and `Keyword = value` are equivalent; keywords are
//!   case-insensitive; arguments may be quoted with `"` or `'`; `#` starts a comment at the
//!   start of a line or of an argument.
//! * `Include` (several arguments, globs) reads files in sorted order; relative paths are
//!   relative to `~/.ssh`. An `Include` inside a `Host` block applies only when that block
//!   does. Includes nest at most 16 deep (a file that includes itself is refused at once,
//!   with the error OpenSSH gives at that depth); a pattern matching no file is skipped. The
//!   user config and included files must not be writable by group or others. Beyond
//!   OpenSSH, one configuration reads at most 1024 files and 64 MiB through `Include`, so
//!   that no file, however generated, makes loading take long.
//! * `ProxyJump`: only the first hop's own `ProxyJump` is followed (as `ssh` does), at most 8
//!   levels deep; a resolved chain has at most 64 hops.
//! * Values are checked when the file is loaded, for every block, as `ssh` does: a bad
//!   `Port` anywhere is an error, not only in the block that applies.
//!
//! # The parts
//!
//! Reading (`read`: files, `Include`, limits) turns each line, split as `ssh` splits it
//! (`lex`), into an entry: a setting with its value checked (`setting`), under the `Host`
//! conditions that must hold for it to apply (`matching`, with OpenSSH's host patterns from
//! `config::pattern`). Resolving an alias (`resolve`) takes the first value of each keyword
//! from the entries that apply and expands `~`, `${VAR}` and `%` tokens (`tokens`).

mod lex;
mod matching;
mod read;
mod resolve;
mod setting;
mod tokens;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use crate::error::{Error, Result};

use matching::{EntryIndex, Scope};
use read::Reading;
use resolve::Overrides;
use setting::{Setting, parse_proxy_jump};
pub(crate) use tokens::local_user;

/// A parsed OpenSSH client configuration file, with its `Include`s read.
///
/// Use [`SshExecutor::from_ssh_config`](crate::SshExecutor::from_ssh_config) to go straight from an alias to a builder; use this
/// type to inspect what a file says about a host ([`SshConfig::resolve`], like `ssh -G`).
///
/// # Supported keywords
///
/// | keyword | effect |
/// |---|---|
/// | `Host` | patterns with `*`, `?` and `!negation` |
/// | `Include` | files or globs, relative to `~/.ssh`; conditional inside a `Host` block |
/// | `HostName` | the address to connect to; `%h` is the alias, `%%` a percent sign |
/// | `User` | login user ([`user`](crate::SshExecutorBuilder::user)) |
/// | `Port` | [`port`](crate::SshExecutorBuilder::port) |
/// | `IdentityFile` | key files, tried in order; `~`, `${VAR}` and tokens expanded; missing files are skipped, as `ssh` does. Without any, `~/.ssh/id_rsa`, `id_ecdsa` and `id_ed25519`. A `<file>-cert.pub` next to a key is offered first as its OpenSSH certificate, as `ssh` does |
/// | `CertificateFile` | OpenSSH user certificates (accumulate like `IdentityFile`, same expansion); each is offered with the identity file it certifies, before that key alone; one that certifies none is skipped |
/// | `IdentitiesOnly` | `yes`: only the identity files; otherwise the ssh-agent (when `$SSH_AUTH_SOCK` names an existing socket) is tried first |
/// | `ProxyJump` | comma-separated `[user@]host[:port]` or `ssh://` hops, or `none`; each hop is resolved through this file too (its `HostName`, `User`, keys, known hosts...) and the first hop's own `ProxyJump` is honoured, as `ssh` does |
/// | `UserKnownHostsFile` | several files, `~`, `${VAR}` and tokens, or `none`; defaults to `~/.ssh/known_hosts ~/.ssh/known_hosts2` |
/// | `GlobalKnownHostsFile` | several files or `none`; defaults to `/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2` |
/// | `StrictHostKeyChecking` | `yes` and `ask` (the default): [`HostKeyPolicy::Strict`](crate::HostKeyPolicy::Strict); `accept-new`: [`HostKeyPolicy::AcceptNew`](crate::HostKeyPolicy::AcceptNew); `no`/`off`: [`HostKeyPolicy::InsecureAcceptAnyHostKey`](crate::HostKeyPolicy::InsecureAcceptAnyHostKey) |
/// | `ServerAliveInterval` | [`keepalive_interval`](crate::SshExecutorBuilder::keepalive_interval); `0` turns keepalives off. Unset keeps the builder's 15 s, not OpenSSH's "off" |
/// | `ServerAliveCountMax` | [`keepalive_max`](crate::SshExecutorBuilder::keepalive_max) |
/// | `ConnectTimeout` | [`connect_timeout`](crate::SshExecutorBuilder::connect_timeout) (`0` keeps the default) |
/// | `ProxyCommand` | not supported: when it is in effect, [`HostConfig::to_builder`] fails rather than silently connecting directly (`ProxyCommand none` is fine) |
///
/// Times accept OpenSSH's units (`90`, `30s`, `5m`, `1h30m`), at most 2³¹ − 1 seconds (about
/// 68 years; `ssh` refuses more too, and timers could not hold much more). Tokens in `IdentityFile` and
/// `UserKnownHostsFile`: `%%`, `%d` (local home), `%h` (host name), `%i` (local uid), `%k`
/// and `%n` (alias), `%p` (port), `%r` (remote user), `%u` (local user); others (`%C`, `%l`,
/// `%L`, `%j`) are an error.
///
/// **Ignored:** `Match` blocks (their lines never apply), the system-wide
/// `/etc/ssh/ssh_config`, and every other keyword (`ForwardAgent`, `Ciphers`,
/// `HostKeyAlias`, `ControlMaster`, ...). The ignored lines that apply to
/// a host are listed in [`HostConfig::ignored`]. Encrypted identity files need the agent or
/// an explicit [`private_key_file_with_passphrase`](crate::SshExecutorBuilder::private_key_file_with_passphrase):
/// there is no prompt.
#[derive(Debug, Clone)]
pub struct SshConfig {
    entries: Vec<Entry>,
    /// How many [`Scope`]s the entries refer to (their ids are `0..scopes`).
    scopes: usize,
    /// Which entries can apply to which host, so that resolving one alias visits its own
    /// block and the wildcard ones, not every block of the file.
    index: EntryIndex,
    home: Option<PathBuf>,
    local_user: Option<String>,
}

/// What an [`SshConfig`] says about one host: the supported settings after pattern
/// matching, first-wins, defaults and token expansion (like `ssh -G`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostConfig {
    /// The alias that was resolved.
    pub alias: String,
    /// `HostName` with `%h` expanded, or the alias.
    pub host_name: String,
    /// `Port`, or 22.
    pub port: u16,
    /// `User`; `None` means the local user.
    pub user: Option<String>,
    /// The `IdentityFile`s, expanded, in order; OpenSSH's defaults when none is configured.
    /// Files that do not exist are listed but skipped when connecting.
    pub identity_files: Vec<PathBuf>,
    /// The `CertificateFile`s, expanded, in order. Each is offered with the identity it
    /// certifies (before that key alone); one that certifies none is skipped.
    pub certificate_files: Vec<PathBuf>,
    /// `IdentitiesOnly`, or `false`.
    pub identities_only: bool,
    /// The `ProxyJump` hops, each resolved through the file, client side first; empty for a
    /// direct connection.
    pub proxy_jump: Vec<HostConfig>,
    /// A `ProxyCommand` in effect (not supported: [`to_builder`](Self::to_builder) fails).
    pub proxy_command: Option<String>,
    /// `UserKnownHostsFile`, expanded, or the defaults; empty for `none`.
    pub user_known_hosts_files: Vec<PathBuf>,
    /// `GlobalKnownHostsFile`, or the defaults; empty for `none`.
    pub global_known_hosts_files: Vec<PathBuf>,
    /// `StrictHostKeyChecking`, or [`StrictHostKeyChecking::Ask`].
    pub strict_host_key_checking: StrictHostKeyChecking,
    /// `ServerAliveInterval`; `Some(ZERO)` turns keepalives off.
    pub server_alive_interval: Option<Duration>,
    /// `ServerAliveCountMax`.
    pub server_alive_count_max: Option<usize>,
    /// `ConnectTimeout`.
    pub connect_timeout: Option<Duration>,
    /// Lines that apply to this host but were ignored, as `Keyword (file:line)`.
    pub ignored: Vec<String>,
}

/// OpenSSH's `StrictHostKeyChecking` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StrictHostKeyChecking {
    /// `yes`: only known keys ([`HostKeyPolicy::Strict`](crate::HostKeyPolicy::Strict)).
    Yes,
    /// `accept-new`: record unknown hosts, refuse changed keys ([`HostKeyPolicy::AcceptNew`](crate::HostKeyPolicy::AcceptNew)).
    AcceptNew,
    /// `no` or `off`: no verification ([`HostKeyPolicy::InsecureAcceptAnyHostKey`](crate::HostKeyPolicy::InsecureAcceptAnyHostKey)).
    No,
    /// `ask`, OpenSSH's default: there is no one to ask, so strict.
    Ask,
}

#[derive(Debug, Clone)]
struct Origin {
    file: Arc<Path>,
    line: usize,
}

impl Origin {
    fn error(&self, reason: impl Into<String>) -> Error {
        Error::SshConfig {
            path: self.file.to_path_buf(),
            line: Some(self.line),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// Every condition must hold (the block's `Host`, and those of enclosing `Include`s);
    /// `None` at the top of the main file.
    scope: Option<Arc<Scope>>,
    origin: Origin,
    setting: Setting,
}

impl SshConfig {
    /// Reads the user's `~/.ssh/config` (a missing file is an empty configuration).
    ///
    /// # Errors
    /// [`Error::SshConfig`] when the file or an included one cannot be read, is writable
    /// by group or others, or holds an invalid value.
    pub fn user_config() -> Result<Self> {
        let home = home_dir();
        let Some(path) = home.as_ref().map(|h| h.join(".ssh").join("config")) else {
            return Ok(Self::empty(None));
        };
        if !path.exists() {
            return Ok(Self::empty(home));
        }
        Self::read(&path, home, true)
    }

    /// Reads `path` (like `ssh -F path`), expanding `~` against `$HOME`.
    ///
    /// # Errors
    /// [`Error::SshConfig`] when the file or an included one cannot be read or holds an
    /// invalid value.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::read(path.as_ref(), home_dir(), false)
    }

    /// Reads `path`, expanding `~`, `%d` and relative `Include`s against `home` instead of
    /// `$HOME` (for tools that manage a configuration of their own, and for tests).
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn load_with_home(path: impl AsRef<Path>, home: impl Into<PathBuf>) -> Result<Self> {
        Self::read(path.as_ref(), Some(home.into()), false)
    }

    fn empty(home: Option<PathBuf>) -> Self {
        SshConfig {
            entries: Vec::new(),
            scopes: 0,
            index: EntryIndex::default(),
            home,
            local_user: local_user(),
        }
    }

    fn read(path: &Path, home: Option<PathBuf>, check_permissions: bool) -> Result<Self> {
        let mut config = Self::empty(home);
        let mut reading = Reading::default();
        config.read_file(path, None, check_permissions, &mut reading)?;
        config.index = EntryIndex::of(&config.entries);
        Ok(config)
    }

    /// What the file says about `alias`, with defaults and tokens filled in.
    ///
    /// # Errors
    /// [`Error::SshConfig`] for a token that cannot be expanded (unknown, or `%r`/`%u`
    /// without a known user); [`Error::Config`] for a `ProxyJump` chain nested more than 8
    /// deep or longer than 64 hops.
    pub fn resolve(&self, alias: &str) -> Result<HostConfig> {
        self.resolve_as(alias, Overrides::default(), Some(0))
    }

    /// The hops of a `ProxyJump` value given elsewhere (`bastion,user@inner:2222`, `none`),
    /// each resolved through this file as `ssh -J` resolves them.
    pub(crate) fn resolve_proxy_jump(&self, value: &str) -> Result<Vec<HostConfig>> {
        let specs = parse_proxy_jump(value).map_err(|reason| Error::Config {
            reason: format!("ProxyJump `{value}`: {reason}"),
        })?;
        self.resolve_hops(&specs, 0)
    }
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Whether `certificate` exists and certifies the key in `key` (whose public half is readable
/// even when the key is encrypted). `ssh` skips a certificate that does not match, with a
/// debug message, rather than failing the login; so does this.
pub(crate) fn certifies(certificate: &Path, key: &Path) -> bool {
    if !certificate.is_file() {
        return false;
    }
    let certified = russh::keys::load_openssh_certificate(certificate).ok();
    let public = russh::keys::PrivateKey::read_openssh_file(key)
        .ok()
        .map(|key| key.public_key().key_data().clone());
    let matches = certified
        .zip(public)
        .is_some_and(|(c, k)| c.public_key() == &k);
    if !matches {
        tracing::debug!(certificate = %certificate.display(), key = %key.display(),
            "certificate unreadable or for another key; skipped");
    }
    matches
}

/// Whether `$SSH_AUTH_SOCK` names an existing socket: an unreachable agent would fail the
/// whole authentication, while `ssh` silently goes on without it.
pub(crate) fn agent_available() -> bool {
    std::env::var_os("SSH_AUTH_SOCK").is_some_and(|sock| Path::new(&sock).exists())
}

#[cfg(test)]
mod tests;
