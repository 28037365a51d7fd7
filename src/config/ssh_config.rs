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

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use crate::{
    config::{jump_host, limit},
    error::{Error, Result},
};

/// Includes nested deeper than this are refused (OpenSSH's `READCONF_MAX_DEPTH`).
const MAX_INCLUDE_DEPTH: usize = 16;

/// `ProxyJump` chains reached through the first hop's own `ProxyJump` nest at most this deep.
const MAX_JUMP_DEPTH: usize = 8;

/// A resolved `ProxyJump` chain has at most this many hops (each one an SSH connection
/// kept open).
const MAX_JUMP_HOPS: usize = 64;

/// One configuration reads at most this many files through `Include` (the same file
/// included from several blocks counts each time). OpenSSH has no such limit, but also no
/// need of one: it reads the file once per `ssh` run, where a library may resolve many
/// hosts from hostile or generated files. Nesting alone (16 levels with two `Include`s each)
/// would otherwise read 2¹⁶ files.
const MAX_INCLUDED_FILES: usize = 1024;

/// One configuration reads at most this many bytes through `Include`, in all.
const MAX_INCLUDED_BYTES: usize = 64 * 1024 * 1024;

/// The identity files `ssh` tries when none is configured (the ones russh can load).
const DEFAULT_IDENTITIES: &[&str] = &["id_rsa", "id_ecdsa", "id_ed25519"];

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
struct Pattern {
    negated: bool,
    /// Lower-cased: host matching is case-insensitive.
    glob: String,
}

#[derive(Debug)]
enum Condition {
    Host(Vec<Pattern>),
    /// Inside a `Match` block, which is not supported.
    Never,
}

/// A block's condition and those of the `Include`s around it. Shared by every entry of the
/// block and linked to the enclosing one rather than copied into it, so that nesting costs
/// one node per block (copying every enclosing pattern list at every level made a
/// 5,000-pattern `Host` with nested includes take seconds), and evaluated once per host.
#[derive(Debug)]
struct Scope {
    /// Index into the per-host memo of [`SshConfig::applied`].
    id: usize,
    condition: Condition,
    outer: Option<Arc<Scope>>,
}

impl Condition {
    fn matches(&self, host: &str) -> bool {
        let Condition::Host(patterns) = self else {
            return false;
        };
        let mut matched = false;
        for pattern in patterns {
            if wildcard_match(pattern.glob.as_bytes(), host.as_bytes()) {
                if pattern.negated {
                    return false;
                }
                matched = true;
            }
        }
        matched
    }
}

/// One `ProxyJump` element.
#[derive(Debug, Clone)]
struct JumpSpec {
    user: Option<String>,
    host: String,
    port: Option<u16>,
}

#[derive(Debug, Clone)]
enum Setting {
    HostName(String),
    User(String),
    Port(u16),
    IdentityFile(String),
    CertificateFile(String),
    IdentitiesOnly(bool),
    /// Empty for `none`.
    ProxyJump(Vec<JumpSpec>),
    /// `None` for `none`.
    ProxyCommand(Option<String>),
    /// Empty for `none`.
    UserKnownHostsFile(Vec<String>),
    GlobalKnownHostsFile(Vec<String>),
    StrictHostKeyChecking(StrictHostKeyChecking),
    ServerAliveInterval(Duration),
    ServerAliveCountMax(usize),
    ConnectTimeout(Duration),
    /// A keyword this crate does not act on (kept to report it).
    Ignored(String),
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

    fn read_file(
        &mut self,
        path: &Path,
        scope: Option<Arc<Scope>>,
        check_permissions: bool,
        reading: &mut Reading,
    ) -> Result<()> {
        let fail = |reason: String| Error::SshConfig {
            path: path.to_path_buf(),
            line: None,
            reason,
        };
        let metadata = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if check_permissions && writable_by_others(&metadata) {
            return Err(fail(
                "bad permissions: writable by group or others (ssh refuses it too)".to_owned(),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        reading.bytes = reading.bytes.saturating_add(text.len());
        if reading.bytes > MAX_INCLUDED_BYTES {
            return Err(fail(format!(
                "Include reads more than {MAX_INCLUDED_BYTES} bytes in all"
            )));
        }
        reading.stack.push(canonical(path));
        let read = self.read_text(Arc::from(path), &text, scope, reading);
        reading.stack.pop();
        read
    }

    fn read_text(
        &mut self,
        file: Arc<Path>,
        text: &str,
        outer: Option<Arc<Scope>>,
        reading: &mut Reading,
    ) -> Result<()> {
        let mut scope = outer.clone();
        for (index, line) in text.lines().enumerate() {
            let origin = Origin {
                file: file.clone(),
                line: index + 1,
            };
            let Some((keyword, args)) = split_line(line).map_err(|e| origin.error(e))? else {
                continue;
            };
            match keyword.to_ascii_lowercase().as_str() {
                "host" => {
                    let patterns = host_patterns(args).map_err(|e| origin.error(e))?;
                    scope = Some(self.nested(&outer, Condition::Host(patterns)));
                }
                "match" => {
                    self.push(&outer, origin, Setting::Ignored(keyword));
                    scope = Some(self.nested(&outer, Condition::Never));
                }
                "include" => self.include(&args, &scope, reading, &origin)?,
                lower => {
                    let setting =
                        Setting::parse(lower, keyword, args).map_err(|e| origin.error(e))?;
                    self.push(&scope, origin, setting);
                }
            }
        }
        Ok(())
    }

    fn nested(&mut self, outer: &Option<Arc<Scope>>, condition: Condition) -> Arc<Scope> {
        let id = self.scopes;
        self.scopes += 1;
        Arc::new(Scope {
            id,
            condition,
            outer: outer.clone(),
        })
    }

    fn push(&mut self, scope: &Option<Arc<Scope>>, origin: Origin, setting: Setting) {
        self.entries.push(Entry {
            scope: scope.clone(),
            origin,
            setting,
        });
    }

    fn include(
        &mut self,
        args: &[String],
        scope: &Option<Arc<Scope>>,
        reading: &mut Reading,
        origin: &Origin,
    ) -> Result<()> {
        if args.is_empty() {
            return Err(origin.error("Include needs at least one file"));
        }
        if reading.stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(origin.error("Include nested too deeply (a loop?)"));
        }
        for arg in args {
            for path in self.include_matches(arg).map_err(|e| origin.error(e))? {
                // A file that includes one it is being read from recurses until the depth
                // limit, as in OpenSSH, where it is the same error; saying so at once spares
                // reading it 16 times over (with every sibling `Include` at every level).
                if reading.stack.contains(&canonical(&path)) {
                    return Err(origin.error(format!(
                        "Include nested too deeply: {} includes itself (directly or through \
                         other files)",
                        path.display()
                    )));
                }
                reading.files += 1;
                if reading.files > MAX_INCLUDED_FILES {
                    return Err(origin.error(format!(
                        "Include reads more than {MAX_INCLUDED_FILES} files in all"
                    )));
                }
                self.read_file(&path, scope.clone(), true, reading)?;
            }
        }
        Ok(())
    }

    /// The files an `Include` argument names, sorted; none when the pattern matches nothing.
    fn include_matches(&self, arg: &str) -> std::result::Result<Vec<PathBuf>, String> {
        let home = self.home.as_deref();
        let pattern = if let Some(rest) = tilde_rest(arg) {
            let home = home.ok_or("`~` needs a home directory")?;
            format!("{}{rest}", glob::Pattern::escape(&home.to_string_lossy()))
        } else if arg.starts_with('/') {
            arg.to_owned()
        } else {
            let ssh_dir = home.ok_or("a relative Include needs a home directory")?;
            let ssh_dir = ssh_dir.join(".ssh");
            format!(
                "{}/{arg}",
                glob::Pattern::escape(&ssh_dir.to_string_lossy())
            )
        };
        // A plain name needs no directory listing: 5,000 of them on one line took 0.6 s
        // through `glob`.
        if !pattern.contains(['*', '?', '[']) {
            let path = PathBuf::from(pattern);
            return Ok(if path.exists() && !path.is_dir() {
                vec![path]
            } else {
                Vec::new()
            });
        }
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let matches = glob::glob_with(&pattern, options).map_err(|e| e.to_string())?;
        let mut files = Vec::new();
        for entry in matches {
            let path = entry.map_err(|e| e.to_string())?;
            if !path.is_dir() {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
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

    /// `jump_depth`: how deep in `ProxyJump` chains `alias` is, or `None` to ignore its own
    /// `ProxyJump` and `ProxyCommand` (a hop after the first, see [`Self::resolve_hops`]).
    fn resolve_as(
        &self,
        alias: &str,
        overrides: Overrides,
        jump_depth: Option<usize>,
    ) -> Result<HostConfig> {
        let applied = self.applied(alias);
        let host_name = match applied.host_name {
            Some((value, origin)) => {
                let tokens = self.tokens(alias, alias, 22, None);
                expand(value, "h", &tokens, false).map_err(|e| origin.error(e))?
            }
            None => alias.to_owned(),
        };
        let port = overrides.port.or(applied.port).unwrap_or(22);
        let user = overrides.user.or(applied.user.map(str::to_owned));
        let tokens = self.tokens(alias, &host_name, port, user.as_deref());
        let (proxy_jump, proxy_command) = match (&applied.proxy, jump_depth) {
            (Some(Proxy::Jump(specs)), Some(depth)) => (self.resolve_hops(specs, depth)?, None),
            (Some(Proxy::Command(command)), Some(_)) => (Vec::new(), command.map(str::to_owned)),
            (None, _) | (_, None) => (Vec::new(), None),
        };
        Ok(HostConfig {
            alias: alias.to_owned(),
            identity_files: self.identity_files(&applied, &tokens)?,
            certificate_files: expand_all(&applied.certificate_files, &tokens)?,
            user_known_hosts_files: self.user_known_hosts(&applied, &tokens)?,
            global_known_hosts_files: self.global_known_hosts(&applied)?,
            host_name,
            port,
            user,
            identities_only: applied.identities_only.unwrap_or(false),
            proxy_jump,
            proxy_command,
            strict_host_key_checking: applied.strict.unwrap_or(StrictHostKeyChecking::Ask),
            server_alive_interval: applied.alive_interval,
            server_alive_count_max: applied.alive_count_max,
            connect_timeout: applied.connect_timeout,
            ignored: applied.ignored,
        })
    }

    /// Collects the first value of each keyword from the entries that apply to `alias`.
    fn applied(&self, alias: &str) -> Applied<'_> {
        let host = alias.to_ascii_lowercase();
        let mut memo = vec![None; self.scopes];
        let mut applied = Applied::default();
        for entry in self
            .index
            .candidates(&host)
            .filter_map(|i| self.entries.get(i))
        {
            if entry
                .scope
                .as_ref()
                .is_none_or(|scope| holds(scope, &host, &mut memo))
            {
                applied.take(entry);
            }
        }
        applied
    }

    /// The hops of a `ProxyJump` value given elsewhere (`bastion,user@inner:2222`, `none`),
    /// each resolved through this file as `ssh -J` resolves them.
    pub(crate) fn resolve_proxy_jump(&self, value: &str) -> Result<Vec<HostConfig>> {
        let specs = parse_proxy_jump(value).map_err(|reason| Error::Config {
            reason: format!("ProxyJump `{value}`: {reason}"),
        })?;
        self.resolve_hops(&specs, 0)
    }

    /// Resolves each hop through the file. Only the first hop's own `ProxyJump` counts:
    /// OpenSSH runs `ssh -J <earlier hops> -W target <last hop>`, so the command line
    /// overrides every later hop's, while the first hop is reached by a plain `ssh`. So
    /// only the first hop's chain is resolved (resolving every hop's and throwing it away
    /// made the work grow as fan-out to the depth: seconds for a 333-byte file).
    fn resolve_hops(&self, specs: &[JumpSpec], depth: usize) -> Result<Vec<HostConfig>> {
        if depth >= MAX_JUMP_DEPTH {
            return Err(Error::Config {
                reason: format!("ProxyJump chains nest more than {MAX_JUMP_DEPTH} deep (a loop?)"),
            });
        }
        let too_long = || Error::Config {
            reason: format!("a ProxyJump chain has more than {MAX_JUMP_HOPS} hops"),
        };
        if specs.len() > MAX_JUMP_HOPS {
            return Err(too_long());
        }
        let mut hops = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let overrides = Overrides {
                user: spec.user.clone(),
                port: spec.port,
            };
            let jump_depth = (index == 0).then_some(depth + 1);
            let mut hop = self.resolve_as(&spec.host, overrides, jump_depth)?;
            hops.append(&mut hop.proxy_jump);
            hops.push(hop);
            if hops.len() > MAX_JUMP_HOPS {
                return Err(too_long());
            }
        }
        Ok(hops)
    }

    fn tokens<'a>(
        &'a self,
        alias: &'a str,
        host_name: &'a str,
        port: u16,
        user: Option<&'a str>,
    ) -> Tokens<'a> {
        Tokens {
            alias,
            host_name,
            port,
            remote_user: user.or(self.local_user.as_deref()),
            local_user: self.local_user.as_deref(),
            home: self.home.as_deref(),
        }
    }

    fn identity_files(&self, applied: &Applied<'_>, tokens: &Tokens<'_>) -> Result<Vec<PathBuf>> {
        if applied.identity_files.is_empty() {
            let Some(home) = &self.home else {
                return Ok(Vec::new());
            };
            let ssh_dir = home.join(".ssh");
            return Ok(DEFAULT_IDENTITIES.iter().map(|f| ssh_dir.join(f)).collect());
        }
        expand_all(&applied.identity_files, tokens)
    }

    fn user_known_hosts(&self, applied: &Applied<'_>, tokens: &Tokens<'_>) -> Result<Vec<PathBuf>> {
        match applied.user_known_hosts {
            Some((files, origin)) => files
                .iter()
                .map(|raw| expand_path(raw, tokens).map_err(|e| origin.error(e)))
                .collect(),
            None => Ok(self
                .home
                .iter()
                .flat_map(|home| ["known_hosts", "known_hosts2"].map(|f| home.join(".ssh").join(f)))
                .collect()),
        }
    }

    fn global_known_hosts(&self, applied: &Applied<'_>) -> Result<Vec<PathBuf>> {
        match applied.global_known_hosts {
            Some((files, origin)) => files
                .iter()
                .map(|raw| tilde(raw, self.home.as_deref()).map_err(|e| origin.error(e)))
                .map(|path| path.map(PathBuf::from))
                .collect(),
            None => Ok(vec![
                PathBuf::from("/etc/ssh/ssh_known_hosts"),
                PathBuf::from("/etc/ssh/ssh_known_hosts2"),
            ]),
        }
    }
}

/// `user@` and `:port` given in a `ProxyJump` element, which win over the hop's own config.
#[derive(Default)]
struct Overrides {
    user: Option<String>,
    port: Option<u16>,
}

enum Proxy<'a> {
    Jump(&'a [JumpSpec]),
    Command(Option<&'a str>),
}

/// The first value of every keyword, from the entries that apply to one host.
#[derive(Default)]
struct Applied<'a> {
    host_name: Option<(&'a str, &'a Origin)>,
    user: Option<&'a str>,
    port: Option<u16>,
    identity_files: Vec<(&'a str, &'a Origin)>,
    certificate_files: Vec<(&'a str, &'a Origin)>,
    identities_only: Option<bool>,
    proxy: Option<Proxy<'a>>,
    user_known_hosts: Option<(&'a [String], &'a Origin)>,
    global_known_hosts: Option<(&'a [String], &'a Origin)>,
    strict: Option<StrictHostKeyChecking>,
    alive_interval: Option<Duration>,
    alive_count_max: Option<usize>,
    connect_timeout: Option<Duration>,
    ignored: Vec<String>,
}

impl<'a> Applied<'a> {
    fn take(&mut self, entry: &'a Entry) {
        let origin = &entry.origin;
        match &entry.setting {
            Setting::HostName(v) => first(&mut self.host_name, (v.as_str(), origin)),
            Setting::User(v) => first(&mut self.user, v.as_str()),
            Setting::Port(v) => first(&mut self.port, *v),
            Setting::IdentityFile(v) => {
                if !self.identity_files.iter().any(|(f, _)| f == v) {
                    self.identity_files.push((v.as_str(), origin));
                }
            }
            Setting::CertificateFile(v) => {
                if !self.certificate_files.iter().any(|(f, _)| f == v) {
                    self.certificate_files.push((v.as_str(), origin));
                }
            }
            Setting::IdentitiesOnly(v) => first(&mut self.identities_only, *v),
            Setting::ProxyJump(v) => first(&mut self.proxy, Proxy::Jump(v)),
            Setting::ProxyCommand(v) => first(&mut self.proxy, Proxy::Command(v.as_deref())),
            Setting::UserKnownHostsFile(v) => first(&mut self.user_known_hosts, (v, origin)),
            Setting::GlobalKnownHostsFile(v) => first(&mut self.global_known_hosts, (v, origin)),
            Setting::StrictHostKeyChecking(v) => first(&mut self.strict, *v),
            Setting::ServerAliveInterval(v) => first(&mut self.alive_interval, *v),
            Setting::ServerAliveCountMax(v) => first(&mut self.alive_count_max, *v),
            Setting::ConnectTimeout(v) => first(&mut self.connect_timeout, *v),
            Setting::Ignored(keyword) => self.ignored.push(format!(
                "{keyword} ({}:{})",
                origin.file.display(),
                origin.line
            )),
        }
    }
}

fn first<T>(slot: &mut Option<T>, value: T) {
    if slot.is_none() {
        *slot = Some(value);
    }
}

/// Whether `scope` and every scope around it match `host`, each evaluated at most once per
/// host (`memo` is indexed by [`Scope::id`]).
/// The entries that can apply to a host, by entry position.
///
/// A block whose `Host` line names hosts literally (no `*` or `?` in its positive patterns)
/// applies only to those names; so does every entry inside it or inside an `Include` such a
/// block encloses. Those entries are listed under each name; all others (wildcard blocks,
/// the top of the file) are `general`. A host's candidates are both lists merged in file
/// order, then checked as before: the index only leaves out entries that cannot apply.
/// Generated configurations with a block per host (thousands of them) resolve an alias in
/// time that does not grow with the file.
#[derive(Debug, Clone, Default)]
struct EntryIndex {
    general: Vec<usize>,
    by_host: HashMap<String, Vec<usize>>,
}

impl EntryIndex {
    fn of(entries: &[Entry]) -> Self {
        let mut index = EntryIndex::default();
        for (position, entry) in entries.iter().enumerate() {
            match entry.scope.as_deref().and_then(literal_hosts) {
                Some(names) => {
                    for name in names {
                        let list = index.by_host.entry(name.to_owned()).or_default();
                        if list.last() != Some(&position) {
                            list.push(position);
                        }
                    }
                }
                None => index.general.push(position),
            }
        }
        index
    }

    /// The positions of the entries that may apply to `host` (lower-cased), in file order.
    fn candidates<'a>(&'a self, host: &str) -> impl Iterator<Item = usize> + 'a {
        let specific = self.by_host.get(host).map_or(&[][..], Vec::as_slice);
        let (mut general, mut specific) =
            (self.general.iter().peekable(), specific.iter().peekable());
        std::iter::from_fn(move || match (general.peek(), specific.peek()) {
            (Some(&&g), Some(&&s)) if g <= s => general.next().copied(),
            (Some(_), Some(_)) | (None, Some(_)) => specific.next().copied(),
            (Some(_), None) => general.next().copied(),
            (None, None) => None,
        })
    }
}

/// The only host names a scope (or one around it) can match: those of the innermost `Host`
/// condition whose positive patterns are all literal (`None` when there is none). A
/// condition without positive patterns, or a `Match` block, matches no name: `Some([])`.
fn literal_hosts(scope: &Scope) -> Option<Vec<&str>> {
    let mut next = Some(scope);
    while let Some(scope) = next {
        match &scope.condition {
            Condition::Never => return Some(Vec::new()),
            Condition::Host(patterns) => {
                let positive: Vec<&str> = patterns
                    .iter()
                    .filter(|p| !p.negated)
                    .map(|p| p.glob.as_str())
                    .collect();
                if positive.iter().all(|p| !p.contains(['*', '?'])) {
                    return Some(positive);
                }
            }
        }
        next = scope.outer.as_deref();
    }
    None
}

fn holds(scope: &Scope, host: &str, memo: &mut [Option<bool>]) -> bool {
    let mut chain = Vec::new();
    let mut next = Some(scope);
    // Innermost first; stops at the first scope already known.
    while let Some(scope) = next {
        match memo.get(scope.id).copied().flatten() {
            Some(known) => {
                if !known {
                    return false;
                }
                break;
            }
            None => chain.push(scope),
        }
        next = scope.outer.as_deref();
    }
    // Outermost first, so that a scope's answer includes those around it.
    let mut result = true;
    for scope in chain.into_iter().rev() {
        result = result && scope.condition.matches(host);
        if let Some(slot) = memo.get_mut(scope.id) {
            *slot = Some(result);
        }
    }
    result
}

/// `path` with symbolic links and `..` resolved, to recognise a file included again; as
/// given when that fails (the read reports why).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// What reading one configuration has used so far.
#[derive(Default)]
struct Reading {
    /// The files being read, outermost first.
    stack: Vec<PathBuf>,
    /// Files read through `Include`.
    files: usize,
    /// Bytes read, from every file.
    bytes: usize,
}

impl Setting {
    /// Parses the value of `keyword` (`lower` is its lower-case form).
    fn parse(lower: &str, keyword: String, args: Vec<String>) -> std::result::Result<Self, String> {
        Ok(match lower {
            "hostname" => Setting::HostName(single(&keyword, args)?),
            "user" => Setting::User(single(&keyword, args)?),
            "port" => Setting::Port(parse_port(&single(&keyword, args)?)?),
            "identityfile" => Setting::IdentityFile(single(&keyword, args)?),
            "certificatefile" => Setting::CertificateFile(single(&keyword, args)?),
            "identitiesonly" => Setting::IdentitiesOnly(parse_flag(&single(&keyword, args)?)?),
            "proxyjump" => Setting::ProxyJump(parse_proxy_jump(&single(&keyword, args)?)?),
            "proxycommand" => Setting::ProxyCommand(parse_proxy_command(&keyword, args)?),
            "userknownhostsfile" => Setting::UserKnownHostsFile(file_list(&keyword, args)?),
            "globalknownhostsfile" => Setting::GlobalKnownHostsFile(file_list(&keyword, args)?),
            "stricthostkeychecking" => {
                Setting::StrictHostKeyChecking(parse_strict(&single(&keyword, args)?)?)
            }
            "serveraliveinterval" => {
                Setting::ServerAliveInterval(parse_time(&single(&keyword, args)?)?)
            }
            "serveralivecountmax" => Setting::ServerAliveCountMax(
                single(&keyword, args)?
                    .parse()
                    .map_err(|_| "ServerAliveCountMax must be a number".to_owned())?,
            ),
            "connecttimeout" => Setting::ConnectTimeout(parse_time(&single(&keyword, args)?)?),
            _ => Setting::Ignored(keyword),
        })
    }
}

/// The one argument of `keyword`; more is an error, as in OpenSSH ("garbage at end of line").
fn single(keyword: &str, args: Vec<String>) -> std::result::Result<String, String> {
    let mut args = args.into_iter();
    match (args.next(), args.next()) {
        (Some(value), None) => Ok(value),
        (None, _) => Err(format!("{keyword} needs a value")),
        (Some(_), Some(extra)) => Err(format!("{keyword} takes one value; `{extra}` is extra")),
    }
}

fn file_list(keyword: &str, args: Vec<String>) -> std::result::Result<Vec<String>, String> {
    match args.as_slice() {
        [] => Err(format!("{keyword} needs a value")),
        [none] if none.eq_ignore_ascii_case("none") => Ok(Vec::new()),
        _ => Ok(args),
    }
}

fn parse_port(value: &str) -> std::result::Result<u16, String> {
    match value.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("bad port `{value}`")),
    }
}

fn parse_flag(value: &str) -> std::result::Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("expected yes or no, not `{value}`")),
    }
}

fn parse_strict(value: &str) -> std::result::Result<StrictHostKeyChecking, String> {
    Ok(match value.to_ascii_lowercase().as_str() {
        "yes" | "true" => StrictHostKeyChecking::Yes,
        "accept-new" => StrictHostKeyChecking::AcceptNew,
        "no" | "false" | "off" => StrictHostKeyChecking::No,
        "ask" => StrictHostKeyChecking::Ask,
        _ => return Err(format!("bad StrictHostKeyChecking value `{value}`")),
    })
}

fn parse_proxy_jump(value: &str) -> std::result::Result<Vec<JumpSpec>, String> {
    if value.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|element| {
            let (user, host, port) = jump_host::parse_spec(element)
                .map_err(|e| format!("bad ProxyJump element `{element}`: {e}"))?;
            Ok(JumpSpec { user, host, port })
        })
        .collect()
}

fn parse_proxy_command(
    keyword: &str,
    args: Vec<String>,
) -> std::result::Result<Option<String>, String> {
    match args.as_slice() {
        [] => Err(format!("{keyword} needs a value")),
        [none] if none.eq_ignore_ascii_case("none") => Ok(None),
        _ => Ok(Some(args.join(" "))),
    }
}

/// OpenSSH's `convtime`: `90`, `90s`, `5m`, `1h30m`, units s, m, h, d, w in any case; at
/// most 2³¹ − 1 seconds in all, as there (timers could not hold much more).
fn parse_time(value: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("bad time value `{value}`");
    let too_long = || {
        format!(
            "time value `{value}` is longer than {} seconds (ssh refuses it too)",
            limit::MAX_DURATION.as_secs()
        )
    };
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in value.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit: u64 = match c.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        if number.is_empty() {
            return Err(bad());
        }
        let n: u64 = number.parse().map_err(|_| too_long())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(too_long)?;
        number.clear();
    }
    if !number.is_empty() {
        let n: u64 = number.parse().map_err(|_| too_long())?;
        total = total.checked_add(n).ok_or_else(too_long)?;
    } else if value.is_empty() {
        return Err(bad());
    }
    let total = Duration::from_secs(total);
    if total > limit::MAX_DURATION {
        return Err(too_long());
    }
    Ok(total)
}

fn host_patterns(args: Vec<String>) -> std::result::Result<Vec<Pattern>, String> {
    if args.is_empty() {
        return Err("Host needs at least one pattern".to_owned());
    }
    Ok(args
        .into_iter()
        .map(|arg| match arg.strip_prefix('!') {
            Some(rest) => Pattern {
                negated: true,
                glob: rest.to_ascii_lowercase(),
            },
            None => Pattern {
                negated: false,
                glob: arg.to_ascii_lowercase(),
            },
        })
        .collect())
}

/// OpenSSH's `match_pattern`: `*` matches any run of characters, `?` exactly one.
fn wildcard_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it currently covers up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// Splits a line into its keyword and arguments like OpenSSH's `argv_split`; `None` for a
/// blank or comment line.
fn split_line(line: &str) -> std::result::Result<Option<(String, Vec<String>)>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let end = line
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(line.len());
    let (keyword, rest) = line.split_at(end);
    let rest = rest.trim_start();
    // `Keyword=value`, `Keyword = value`: one `=` may separate keyword and value.
    let rest = rest.strip_prefix('=').unwrap_or(rest);
    Ok(Some((keyword.to_owned(), split_args(rest)?)))
}

fn split_args(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None | Some('#') => break,
            Some(_) => args.push(next_arg(&mut chars)?),
        }
    }
    Ok(args)
}

fn next_arg(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
) -> std::result::Result<String, String> {
    let mut arg = String::new();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => break,
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (_, '\\') => match chars
                .next_if(|&n| matches!(n, '"' | '\'' | '\\') || (quote.is_none() && n == ' '))
            {
                Some(escaped) => arg.push(escaped),
                None => arg.push('\\'),
            },
            (_, c) => arg.push(c),
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".to_owned());
    }
    Ok(arg)
}

/// Values for `%` tokens.
struct Tokens<'a> {
    alias: &'a str,
    host_name: &'a str,
    port: u16,
    remote_user: Option<&'a str>,
    local_user: Option<&'a str>,
    home: Option<&'a Path>,
}

impl Tokens<'_> {
    fn value(&self, token: char) -> std::result::Result<String, String> {
        let missing = |what: &str| format!("%{token} needs {what}");
        Ok(match token {
            'h' => self.host_name.to_owned(),
            'n' | 'k' => self.alias.to_owned(),
            'p' => self.port.to_string(),
            'r' => self
                .remote_user
                .ok_or_else(|| missing("a User or a local login name"))?
                .to_owned(),
            'u' => self
                .local_user
                .ok_or_else(|| {
                    missing("the local login name (no passwd entry for the running uid)")
                })?
                .to_owned(),
            'd' => self
                .home
                .ok_or_else(|| missing("a home directory"))?
                .to_string_lossy()
                .into_owned(),
            'i' => local_uid()
                .ok_or_else(|| missing("/proc/self"))?
                .to_string(),
            other => return Err(format!("token %{other} is not supported")),
        })
    }
}

/// Expands `%x` tokens (those in `allowed`, plus `%%`) and, with `env`, `${VAR}`.
fn expand(
    text: &str,
    allowed: &str,
    tokens: &Tokens<'_>,
    env: bool,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('%') => out.push('%'),
                Some(t) if allowed.contains(t) => out.push_str(&tokens.value(t)?),
                Some(t) => return Err(format!("token %{t} is not supported here")),
                None => return Err("`%` at the end of a value".to_owned()),
            },
            '$' if env && chars.as_str().starts_with('{') => {
                let rest = &chars.as_str()[1..];
                let (name, after) = rest
                    .split_once('}')
                    .ok_or_else(|| "unterminated `${`".to_owned())?;
                let value = std::env::var(name)
                    .map_err(|_| format!("environment variable {name} is not set"))?;
                out.push_str(&value);
                chars = after.chars();
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// [`expand_path`] for each file of an accumulating keyword, errors naming its line.
fn expand_all(files: &[(&str, &Origin)], tokens: &Tokens<'_>) -> Result<Vec<PathBuf>> {
    files
        .iter()
        .map(|(raw, origin)| expand_path(raw, tokens).map_err(|e| origin.error(e)))
        .collect()
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

/// `~` expansion, then tokens and `${VAR}`, as OpenSSH does for `IdentityFile` and
/// `UserKnownHostsFile`.
fn expand_path(raw: &str, tokens: &Tokens<'_>) -> std::result::Result<PathBuf, String> {
    let tilded = tilde(raw, tokens.home)?;
    expand(&tilded, "dhiknpru", tokens, true).map(PathBuf::from)
}

/// The part after a leading `~` that refers to the own home (`~` or `~/...`).
fn tilde_rest(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix('~')?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

fn tilde(raw: &str, home: Option<&Path>) -> std::result::Result<String, String> {
    match tilde_rest(raw) {
        Some(rest) => {
            let home = home.ok_or_else(|| format!("`{raw}` needs a home directory"))?;
            Ok(format!("{}{rest}", home.to_string_lossy()))
        }
        None if raw.starts_with('~') => Err(format!("`{raw}`: ~user is not supported")),
        None => Ok(raw.to_owned()),
    }
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The local login name, as OpenSSH finds it: the passwd entry of the running uid (never
/// `$USER`, which containers, systemd units and cron often leave unset, and which a caller
/// can set to anything). Looked up once per process: a passwd lookup may ask NSS (LDAP,
/// SSSD), and a fleet builds thousands of executors.
pub(crate) fn local_user() -> Option<String> {
    static LOGIN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    LOGIN
        .get_or_init(|| {
            #[cfg(unix)]
            {
                nix::unistd::User::from_uid(nix::unistd::Uid::current())
                    .ok()
                    .flatten()
                    .map(|user| user.name)
                    .filter(|name| !name.is_empty())
            }
            #[cfg(not(unix))]
            {
                std::env::var("USERNAME").ok().filter(|u| !u.is_empty())
            }
        })
        .clone()
}

#[cfg(unix)]
fn local_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

#[cfg(not(unix))]
fn local_uid() -> Option<u32> {
    None
}

#[cfg(unix)]
fn writable_by_others(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    metadata.mode() & 0o022 != 0
}

#[cfg(not(unix))]
fn writable_by_others(_: &std::fs::Metadata) -> bool {
    false
}

/// Whether `$SSH_AUTH_SOCK` names an existing socket: an unreachable agent would fail the
/// whole authentication, while `ssh` silently goes on without it.
pub(crate) fn agent_available() -> bool {
    std::env::var_os("SSH_AUTH_SOCK").is_some_and(|sock| Path::new(&sock).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_openssh() {
        let m = |p: &str, t: &str| wildcard_match(p.as_bytes(), t.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("build-?", "build-1"));
        assert!(!m("build-?", "build-10"));
        assert!(m("*.example.com", "a.b.example.com"));
        assert!(!m("*.example.com", "example.com"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("10.0.*.1", "10.0.255.1"));
        assert!(m("**x", "abx"));
    }

    #[test]
    fn lines_split_like_argv_split() {
        let split = |line: &str| split_line(line).unwrap_or_default();
        assert_eq!(
            split("Port=2200"),
            Some(("Port".into(), vec!["2200".into()]))
        );
        assert_eq!(
            split("  Port = 2200 "),
            Some(("Port".into(), vec!["2200".into()]))
        );
        assert_eq!(
            split("Port\t2200"),
            Some(("Port".into(), vec!["2200".into()]))
        );
        assert_eq!(
            split(r#"IdentityFile "/a b/key" # comment"#),
            Some(("IdentityFile".into(), vec!["/a b/key".into()]))
        );
        assert_eq!(
            split(r"Host a\ b 'c d' e#f"),
            Some((
                "Host".into(),
                vec!["a b".into(), "c d".into(), "e#f".into()]
            ))
        );
        assert_eq!(split("  # comment"), None);
        assert_eq!(split(""), None);
        assert!(split_line("User \"open").is_err());
    }

    #[test]
    fn times_parse_like_convtime() {
        let t = |s: &str| parse_time(s).map(|d| d.as_secs());
        assert_eq!(t("90"), Ok(90));
        assert_eq!(t("30s"), Ok(30));
        assert_eq!(t("5M"), Ok(300));
        assert_eq!(t("1h30m"), Ok(5400));
        assert_eq!(t("1w"), Ok(604_800));
        for bad in ["", "x", "1x", "m", "-1"] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
        // convtime's limit, INT_MAX seconds, checked against `ssh -G` (9.2p1): one more
        // second, in any spelling, is "invalid time value" there.
        assert_eq!(t("2147483647"), Ok(2_147_483_647));
        assert_eq!(t("3550w5d3h14m7s"), Ok(2_147_483_647));
        for long in [
            "2147483648",
            "30500568904943w",
            "18446744073709551615",
            "99999999999999999999999",
            "3550w5d3h14m8s",
        ] {
            let error = parse_time(long).unwrap_err();
            assert!(
                error.contains("longer than 2147483647 seconds"),
                "{long}: {error}"
            );
        }
    }

    #[test]
    fn tokens_and_env_expand() {
        let tokens = Tokens {
            alias: "b1",
            host_name: "build-1.internal",
            port: 2200,
            remote_user: Some("ci"),
            local_user: Some("me"),
            home: Some(Path::new("/home/me")),
        };
        let path = expand_path("~/.ssh/%r@%h:%p-%n-%u-%%-%d", &tokens);
        assert_eq!(
            path,
            Ok(PathBuf::from(
                "/home/me/.ssh/ci@build-1.internal:2200-b1-me-%-/home/me"
            ))
        );
        assert!(expand_path("%C", &tokens).is_err());
        assert!(expand_path("%", &tokens).is_err());
        assert!(expand_path("~other/x", &tokens).is_err());
        assert!(expand_path("${SWIFTIDE_SSH_SURELY_UNSET_VAR}", &tokens).is_err());
        assert!(expand_path("${UNTERMINATED", &tokens).is_err());
        assert_eq!(
            expand_path("$HOME/plain", &tokens),
            Ok(PathBuf::from("$HOME/plain"))
        );
        assert!(
            expand("%p", "h", &tokens, false).is_err(),
            "HostName takes %h only"
        );
    }
}
