//! Command-line flags that the crate's binaries share (`swiftide-ssh`, `swiftide-ssh-mcp`),
//! defined once so that both take the same words and mean the same by them. Behind the
//! `flags` feature (clap).

use std::{ffi::OsString, path::PathBuf};

use crate::{
    Become, BecomeMethod, Confinement, Limits, Network, Secret, SshExecutorBuilder,
    audit::AuditTrail,
};

/// Limits and confinement for every command ([Guarded commands](crate::guide::guards)):
/// `--limit-*`, `--confine-writes`, `--writable`, `--no-network`, `--connect-port`.
///
/// ```
/// use clap::Parser;
/// use swiftide_ssh_executor::flags::GuardArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     guard: GuardArgs,
/// }
///
/// let cli = Cli::parse_from(["cli", "--limit-memory", "2G", "--writable", "/srv/cache"]);
/// assert!(cli.guard.is_set());
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Guards: limits and confinement on the hosts")]
pub struct GuardArgs {
    /// Bytes of address space per process (RLIMIT_AS), with an optional K, M or G suffix.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    limit_memory: Option<u64>,
    /// Seconds of CPU time per process (RLIMIT_CPU): SIGXCPU at the limit.
    #[arg(long, value_name = "SECONDS")]
    limit_cpu: Option<u64>,
    /// Processes of the login's account at once (RLIMIT_NPROC; root is exempt).
    #[arg(long, value_name = "N")]
    limit_processes: Option<u64>,
    /// Bytes of the largest file written (RLIMIT_FSIZE), with an optional K, M or G suffix.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    limit_file_size: Option<u64>,
    /// Descriptors per process (RLIMIT_NOFILE).
    #[arg(long, value_name = "N")]
    limit_open_files: Option<u64>,
    /// Commands may write only beneath their working directory, a private TMPDIR and each
    /// --writable path (Landlock; refused on hosts that cannot enforce it).
    #[arg(long)]
    confine_writes: bool,
    /// A path confined commands may also write beneath (repeatable); implies
    /// --confine-writes.
    #[arg(long, value_name = "PATH")]
    writable: Vec<PathBuf>,
    /// No TCP connect and no TCP listening (Landlock), but to each --connect-port.
    #[arg(long)]
    no_network: bool,
    /// A TCP port commands may connect to (repeatable); implies --no-network for every
    /// other port.
    #[arg(long, value_name = "PORT")]
    connect_port: Vec<u16>,
    /// DANGEROUS: run commands that the host cannot guard as asked without their guards,
    /// rather than refuse them.
    #[arg(long)]
    run_unguarded_where_unenforceable: bool,
}

impl GuardArgs {
    /// Whether any guard flag was given.
    pub fn is_set(&self) -> bool {
        !self.limits().is_empty() || self.confinement().is_some()
    }

    /// The limits these flags ask for.
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::new();
        if let Some(bytes) = self.limit_memory {
            limits = limits.memory(bytes);
        }
        if let Some(seconds) = self.limit_cpu {
            limits = limits.cpu_time(std::time::Duration::from_secs(seconds));
        }
        if let Some(count) = self.limit_processes {
            limits = limits.processes(count);
        }
        if let Some(bytes) = self.limit_file_size {
            limits = limits.file_size(bytes);
        }
        if let Some(count) = self.limit_open_files {
            limits = limits.open_files(count);
        }
        limits
    }

    /// The confinement these flags ask for, if any.
    pub fn confinement(&self) -> Option<Confinement> {
        let writes = self.confine_writes || !self.writable.is_empty();
        let network = self.no_network || !self.connect_port.is_empty();
        if !writes && !network {
            return None;
        }
        let confinement = self
            .writable
            .iter()
            .fold(Confinement::new().writes(writes), |c, path| {
                c.writable(path)
            });
        Some(
            confinement.network(match (network, self.connect_port.is_empty()) {
                (false, _) => Network::Unconfined,
                (true, true) => Network::None,
                (true, false) => Network::Ports(self.connect_port.clone()),
            }),
        )
    }

    /// `builder` with these guards.
    pub fn apply(&self, mut builder: SshExecutorBuilder) -> SshExecutorBuilder {
        let limits = self.limits();
        if !limits.is_empty() {
            builder = builder.limits(limits);
        }
        if let Some(confinement) = self.confinement() {
            builder = builder.confinement(confinement);
        }
        builder.run_unguarded_where_unenforceable(self.run_unguarded_where_unenforceable)
    }
}

/// The audit trail (README, "Audit trail"): `--audit FILE`, a hash-chained JSON-lines
/// record of every operation, which `swiftide-ssh audit verify FILE` checks.
///
/// ```
/// use clap::Parser;
/// use swiftide_ssh_executor::flags::AuditArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     audit: AuditArgs,
/// }
///
/// let cli = Cli::parse_from(["cli", "--audit", "/var/log/agent.jsonl"]);
/// assert_eq!(cli.audit.file(), Some(std::path::Path::new("/var/log/agent.jsonl")));
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Audit")]
pub struct AuditArgs {
    /// Append a hash-chained JSON line for every operation on every host (command, file
    /// read and write, job, forward) to FILE, created 0600; an existing FILE is verified
    /// and continued, and one whose chain is broken is refused.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
}

impl AuditArgs {
    /// The file `--audit` names.
    pub fn file(&self) -> Option<&std::path::Path> {
        self.audit.as_deref()
    }

    /// Opens the trail `--audit` names (none without the flag), to give every executor's
    /// builder with [`apply`](Self::apply).
    ///
    /// # Errors
    /// [`Error::Audit`](crate::Error::Audit), as [`AuditTrail::to_file`] says.
    pub async fn open(&self) -> crate::Result<Option<AuditTrail>> {
        match &self.audit {
            Some(path) => AuditTrail::to_file(path).await.map(Some),
            None => Ok(None),
        }
    }

    /// `builder` recording to `trail`, when there is one.
    pub fn apply(trail: Option<&AuditTrail>, builder: SshExecutorBuilder) -> SshExecutorBuilder {
        match trail {
            Some(trail) => builder.audit(trail.clone()),
            None => builder,
        }
    }
}

/// The variable of `--become` (`true`/`false`, `yes`/`no`, `1`/`0`...).
pub const BECOME_VARIABLE: &str = "SWIFTIDE_SSH_BECOME";
/// The variable an escalation password comes from when no password flag is given (for bots
/// and MCP hosts); unset or empty: no password.
pub const BECOME_PASSWORD_VARIABLE: &str = "SWIFTIDE_SSH_BECOME_PASSWORD";

/// Privilege escalation, Ansible's "become" ([Become](crate::guide::escalation)): `--become`,
/// `--become-user`, `--become-method`, `--become-flags`, `--become-password-file`,
/// `--become-password-env`.
///
/// Every flag can also be set through its `SWIFTIDE_SSH_BECOME*` variable (as Ansible reads
/// `ANSIBLE_BECOME*`); a flag on the command line wins over its variable. The password is
/// the first line of `--become-password-file`, else the variable named by
/// `--become-password-env`, else [`$SWIFTIDE_SSH_BECOME_PASSWORD`](BECOME_PASSWORD_VARIABLE)
/// when it is set and not empty. A program that can ask for the password on a terminal (the
/// CLI's `-K`) passes it to [`escalation_asking`](Self::escalation_asking) instead.
///
/// ```
/// use clap::Parser;
/// use swiftide_ssh_executor::{BecomeMethod, flags::BecomeArgs};
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     escalation: BecomeArgs,
/// }
///
/// let cli = Cli::parse_from(["cli", "--become-user", "postgres", "--become-method", "su"]);
/// let escalation = cli.escalation.escalation().unwrap().unwrap();
/// assert_eq!(escalation.method(), BecomeMethod::Su);
/// assert_eq!(escalation.target_user(), "postgres");
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Privilege escalation (Ansible's become)")]
pub struct BecomeArgs {
    /// Run as another account on the host (root with sudo unless --become-user and
    /// --become-method say otherwise): commands, the files read and written, jobs. Jobs
    /// started with it live in that account's state directory: reach them with the same
    /// escalation.
    #[arg(
        long = "become",
        env = BECOME_VARIABLE,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    become_: bool,
    /// The account to become; implies --become. [default: root]
    #[arg(long, value_name = "USER", env = "SWIFTIDE_SSH_BECOME_USER")]
    become_user: Option<String>,
    /// The escalation tool; implies --become. [default: sudo]
    #[arg(
        long,
        value_name = "METHOD",
        env = "SWIFTIDE_SSH_BECOME_METHOD",
        value_parser = method_parser()
    )]
    become_method: Option<BecomeMethod>,
    /// Extra arguments for the tool, split on whitespace (Ansible's become_flags), e.g.
    /// `--become-flags='-E'` or `--become-flags '-g wheel'`; implies --become.
    #[arg(
        long,
        value_name = "FLAGS",
        env = "SWIFTIDE_SSH_BECOME_FLAGS",
        allow_hyphen_values = true
    )]
    become_flags: Option<String>,
    /// Read the escalation password from the first line of FILE (its newline stripped).
    /// FILE must not be readable or writable by group or others (as ssh refuses such keys):
    /// chmod 600 it. Needs --become (or a --become-* flag that implies it).
    #[arg(
        long,
        value_name = "FILE",
        env = "SWIFTIDE_SSH_BECOME_PASSWORD_FILE",
        conflicts_with = "become_password_env"
    )]
    become_password_file: Option<PathBuf>,
    /// Read the escalation password from environment variable VAR (set and not empty).
    /// Needs --become (or a --become-* flag that implies it). Without a password flag the
    /// password comes from $SWIFTIDE_SSH_BECOME_PASSWORD when it is set and not empty (for
    /// bots; processes of the same user can read variables in /proc/PID/environ).
    #[arg(long, value_name = "VAR", env = "SWIFTIDE_SSH_BECOME_PASSWORD_ENV")]
    become_password_env: Option<String>,
}

impl BecomeArgs {
    /// Whether these flags turn escalation on: `--become`, or a flag that says how.
    pub fn wanted(&self) -> bool {
        self.become_
            || self.become_user.is_some()
            || self.become_method.is_some()
            || self.become_flags.is_some()
    }

    /// The combinations these flags refuse, found without reading any password: a password
    /// flag without escalation, and `SWIFTIDE_SSH_BECOME=false` next to a flag that implies
    /// `--become`. [`escalation`](Self::escalation) checks them too; call this to refuse a
    /// command line early.
    pub fn check(&self) -> Result<(), String> {
        self.check_in(&|name| std::env::var_os(name))
    }

    /// The escalation these flags describe, or `None`, with its password (see the type's
    /// documentation). Reads the password, so call it once, right before the run.
    ///
    /// # Errors
    /// The message of a refused combination ([`check`](Self::check)) or of a password that
    /// cannot be read (`--become-password-file`'s file missing, too open or empty; the
    /// variable of `--become-password-env` unset, empty or not UTF-8). It never contains
    /// the password.
    pub fn escalation(&self) -> Result<Option<Become>, String> {
        self.resolve(None, &|name| std::env::var_os(name))
    }

    /// [`escalation`](Self::escalation) with the password from `ask` (a terminal prompt, the
    /// CLI's `-K`), called only when escalation is on and the flags are consistent; `None`
    /// from it means no password. A password flag given as well is refused.
    pub fn escalation_asking(
        &self,
        ask: impl FnOnce() -> Result<Option<Secret>, String>,
    ) -> Result<Option<Become>, String> {
        self.resolve(Some(Box::new(ask)), &|name| std::env::var_os(name))
    }

    fn check_in(&self, var: &dyn Fn(&str) -> Option<OsString>) -> Result<(), String> {
        if !self.wanted() {
            // A password alone escalates nothing: say so rather than ignore it. (The
            // fallback variable may be set for every run, so it alone is no mistake.)
            return match self.password_flag() {
                Some(flag) => Err(format!(
                    "{flag} needs --become (or --become-user, --become-method, --become-flags)"
                )),
                None => Ok(()),
            };
        }
        // SWIFTIDE_SSH_BECOME=false next to a --become-* setting that implies it: which one
        // is meant is not for this program to guess when the answer may be root.
        if !self.become_ && var(BECOME_VARIABLE).is_some_and(|value| !value.is_empty()) {
            return Err(format!(
                "{BECOME_VARIABLE} is false, but --become-user, --become-method or \
                 --become-flags turns escalation on; unset one of them"
            ));
        }
        Ok(())
    }

    /// Everything [`escalation`](Self::escalation) does, with the environment as `var`
    /// reads it (the tests pass their own).
    #[allow(clippy::type_complexity)]
    fn resolve(
        &self,
        ask: Option<Box<dyn FnOnce() -> Result<Option<Secret>, String> + '_>>,
        var: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Option<Become>, String> {
        self.check_in(var)?;
        if !self.wanted() {
            return Ok(None);
        }
        let mut escalation = Become::new(self.become_method.unwrap_or(BecomeMethod::Sudo))
            .flags_from_text(self.become_flags.as_deref().unwrap_or_default());
        if let Some(user) = &self.become_user {
            escalation = escalation.user(user.clone());
        }
        let password = match ask {
            Some(ask) => {
                if let Some(flag) = self.password_flag() {
                    return Err(format!(
                        "{flag} and a password asked for exclude each other; pass only one"
                    ));
                }
                ask()?
            }
            None => self.password(var)?,
        };
        if let Some(password) = password {
            escalation = escalation.password(password);
        }
        Ok(Some(escalation))
    }

    fn password_flag(&self) -> Option<&'static str> {
        if self.become_password_file.is_some() {
            Some("--become-password-file")
        } else if self.become_password_env.is_some() {
            Some("--become-password-env")
        } else {
            None
        }
    }

    /// The password: --become-password-file, else --become-password-env's variable, else
    /// $SWIFTIDE_SSH_BECOME_PASSWORD (none when unset or empty). Never printed or logged.
    fn password(&self, var: &dyn Fn(&str) -> Option<OsString>) -> Result<Option<Secret>, String> {
        if let Some(path) = &self.become_password_file {
            return Secret::from_file(path)
                .map(Some)
                .map_err(|error| format!("--become-password-file {error}"));
        }
        if let Some(name) = &self.become_password_env {
            let flag = format!("--become-password-env {name}");
            return match var(name).map(OsString::into_string) {
                None => Err(format!("{flag}: the variable is not set")),
                Some(Err(_)) => Err(format!("{flag}: the variable is not UTF-8")),
                Some(Ok(password)) if password.is_empty() => {
                    Err(format!("{flag}: the variable is empty"))
                }
                Some(Ok(password)) => Ok(Some(Secret::new(password))),
            };
        }
        match var(BECOME_PASSWORD_VARIABLE).map(OsString::into_string) {
            None => Ok(None),
            Some(Err(_)) => Err(format!("${BECOME_PASSWORD_VARIABLE} is not UTF-8")),
            Some(Ok(password)) => Ok((!password.is_empty()).then(|| Secret::new(password))),
        }
    }
}

/// `--become-method`: the library's names, listed in the help and in errors.
fn method_parser() -> impl clap::builder::TypedValueParser<Value = BecomeMethod> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["sudo", "doas", "su"])
        .try_map(|method| method.parse::<BecomeMethod>())
}

/// `512`, `64K`, `100M`, `2G` (powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((at, suffix)) if suffix.is_ascii_alphabetic() => (&text[..at], Some(suffix)),
        _ => (text, None),
    };
    let shift = match unit.map(|c| c.to_ascii_uppercase()) {
        None => 0,
        Some('K') => 10,
        Some('M') => 20,
        Some('G') => 30,
        Some('T') => 40,
        Some(other) => return Err(format!("unknown unit {other:?} (K, M, G or T)")),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text} is too large"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        guard: GuardArgs,
        #[command(flatten)]
        escalation: BecomeArgs,
    }

    fn parse(args: &[&str]) -> GuardArgs {
        Cli::parse_from(std::iter::once("cli").chain(args.iter().copied())).guard
    }

    /// The become flags of `args`. (Parsed with the process's environment: no test here
    /// sets a `SWIFTIDE_SSH_BECOME*` variable; the password variables come from `env`.)
    fn become_flags(args: &[&str]) -> Result<BecomeArgs, clap::error::ErrorKind> {
        Cli::try_parse_from(std::iter::once("cli").chain(args.iter().copied()))
            .map(|cli| cli.escalation)
            .map_err(|error| error.kind())
    }

    /// `flags` resolved with the variables `env` (and no others).
    fn resolve(flags: &BecomeArgs, env: &[(&str, &str)]) -> Result<Option<Become>, String> {
        let env: Vec<(String, OsString)> = env
            .iter()
            .map(|(name, value)| ((*name).to_owned(), OsString::from(value)))
            .collect();
        flags.resolve(None, &|name| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        })
    }

    fn password_of(flags: &BecomeArgs, env: &[(&str, &str)]) -> Result<Option<String>, String> {
        let env: Vec<(String, OsString)> = env
            .iter()
            .map(|(name, value)| ((*name).to_owned(), OsString::from(value)))
            .collect();
        flags
            .password(&|name| {
                env.iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
            })
            .map(|secret| secret.map(|s| s.expose().to_owned()))
    }

    #[test]
    fn become_flags_map_to_become() {
        let none = become_flags(&[]).unwrap();
        assert!(!none.wanted());
        assert!(resolve(&none, &[(BECOME_PASSWORD_VARIABLE, "pw")]).is_ok_and(|b| b.is_none()));

        let plain = resolve(&become_flags(&["--become"]).unwrap(), &[]).unwrap();
        assert_eq!(
            plain.as_ref().map(|b| (
                b.method(),
                b.target_user(),
                b.flags().len(),
                b.has_password()
            )),
            Some((BecomeMethod::Sudo, "root", 0, false))
        );

        // --become-user, --become-method and --become-flags imply --become; the flags text
        // is split on whitespace, and a leading `-` is no option of ours.
        let how = become_flags(&[
            "--become-method",
            "doas",
            "--become-user",
            "postgres",
            "--become-flags",
            " -g  wheel ",
        ])
        .unwrap();
        assert!(how.wanted());
        let how = resolve(&how, &[]).unwrap().unwrap();
        assert_eq!(
            (how.method(), how.target_user(), how.flags()),
            (
                BecomeMethod::Doas,
                "postgres",
                &["-g".to_owned(), "wheel".to_owned()][..]
            )
        );
        let su = resolve(
            &become_flags(&["--become-method=su", "--become-flags=-l"]).unwrap(),
            &[],
        );
        assert_eq!(
            su.unwrap().map(|b| (b.method(), b.flags().to_vec())),
            Some((BecomeMethod::Su, vec!["-l".to_owned()]))
        );
        assert_eq!(
            become_flags(&["--become-method", "pkexec"]).map(drop),
            Err(clap::error::ErrorKind::InvalidValue)
        );
        assert_eq!(
            become_flags(&["--become-password-file", "/f", "--become-password-env", "P"]).map(drop),
            Err(clap::error::ErrorKind::ArgumentConflict)
        );
    }

    #[test]
    fn become_refuses_passwords_without_it_and_a_false_variable() {
        for args in [
            &["--become-password-file", "/f"][..],
            &["--become-password-env", "P"],
        ] {
            let flags = become_flags(args).unwrap();
            let error = resolve(&flags, &[("P", "pw")]).unwrap_err();
            assert!(error.contains("needs --become"), "{args:?}: {error}");
        }
        // SWIFTIDE_SSH_BECOME=false (what clap parsed as false) next to a flag implying it.
        let implied = become_flags(&["--become-user", "postgres"]).unwrap();
        let error = resolve(&implied, &[(BECOME_VARIABLE, "false")]).unwrap_err();
        assert!(error.contains("SWIFTIDE_SSH_BECOME is false"), "{error}");
        assert!(resolve(&implied, &[(BECOME_VARIABLE, "")]).is_ok_and(|b| b.is_some()));
        let explicit = become_flags(&["--become", "--become-user", "postgres"]).unwrap();
        assert!(resolve(&explicit, &[(BECOME_VARIABLE, "true")]).is_ok_and(|b| b.is_some()));
    }

    #[test]
    fn become_passwords_from_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("become");
        std::fs::write(&file, "s3cret\nsecond line\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = file.to_str().unwrap();
        let flags = become_flags(&["--become", "--become-password-file", path]).unwrap();
        // The file wins over the fallback variable.
        assert_eq!(
            password_of(&flags, &[(BECOME_PASSWORD_VARIABLE, "other")]),
            Ok(Some("s3cret".to_owned()))
        );
        assert!(resolve(&flags, &[]).unwrap().unwrap().has_password());

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = resolve(&flags, &[]).unwrap_err();
        assert!(error.starts_with("--become-password-file "), "{error}");
        assert!(error.contains("too open"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");

        let missing = dir.path().join("missing");
        let flags = become_flags(&[
            "--become",
            "--become-password-file",
            missing.to_str().unwrap(),
        ])
        .unwrap();
        assert!(resolve(&flags, &[]).is_err());
    }

    #[test]
    fn become_passwords_from_the_environment() {
        let named = become_flags(&["--become", "--become-password-env", "OPS_PW"]).unwrap();
        assert_eq!(
            password_of(&named, &[("OPS_PW", "pw")]),
            Ok(Some("pw".to_owned()))
        );
        // The named variable wins over the fallback; unset or empty is an error.
        assert_eq!(
            password_of(
                &named,
                &[("OPS_PW", "pw"), (BECOME_PASSWORD_VARIABLE, "other")]
            ),
            Ok(Some("pw".to_owned()))
        );
        let unset = password_of(&named, &[(BECOME_PASSWORD_VARIABLE, "other")]).unwrap_err();
        assert_eq!(
            unset,
            "--become-password-env OPS_PW: the variable is not set"
        );
        let empty = password_of(&named, &[("OPS_PW", "")]).unwrap_err();
        assert_eq!(empty, "--become-password-env OPS_PW: the variable is empty");

        // No password flag: $SWIFTIDE_SSH_BECOME_PASSWORD if set and not empty, else none.
        let plain = become_flags(&["--become"]).unwrap();
        assert_eq!(
            password_of(&plain, &[(BECOME_PASSWORD_VARIABLE, "pw")]),
            Ok(Some("pw".to_owned()))
        );
        assert_eq!(
            password_of(&plain, &[(BECOME_PASSWORD_VARIABLE, "")]),
            Ok(None)
        );
        assert_eq!(password_of(&plain, &[]), Ok(None));
    }

    #[test]
    fn an_asked_password_replaces_the_flags_and_is_asked_only_when_needed() {
        let plain = become_flags(&["--become"]).unwrap();
        let asked = plain
            .resolve(Some(Box::new(|| Ok(Some(Secret::new("typed"))))), &|_| None)
            .unwrap()
            .unwrap();
        assert!(asked.has_password());
        let nothing = plain
            .resolve(Some(Box::new(|| Ok(None))), &|_| None)
            .unwrap();
        assert!(nothing.is_some_and(|b| !b.has_password()));
        // Not asked without escalation, nor when a flag is refused.
        let off = become_flags(&[]).unwrap();
        let never = || -> Result<Option<Secret>, String> { unreachable!("asked") };
        assert!(
            off.resolve(Some(Box::new(never)), &|_| None)
                .is_ok_and(|b| b.is_none())
        );
        let file = become_flags(&["--become", "--become-password-file", "/f"]).unwrap();
        let error = file.resolve(Some(Box::new(never)), &|_| None).unwrap_err();
        assert!(error.contains("exclude each other"), "{error}");
        let failed = plain.resolve(Some(Box::new(|| Err("no terminal".to_owned()))), &|_| None);
        assert_eq!(failed.map(drop), Err("no terminal".to_owned()));
    }

    #[test]
    fn flags_map_to_limits_and_confinement() {
        assert!(!parse(&[]).is_set());
        let guard = parse(&["--limit-memory", "2G", "--limit-cpu", "60"]);
        assert_eq!(
            guard.limits(),
            Limits::new()
                .memory(2 << 30)
                .cpu_time(std::time::Duration::from_secs(60))
        );
        assert_eq!(guard.confinement(), None);
        assert_eq!(
            parse(&["--writable", "/srv"]).confinement(),
            Some(
                Confinement::new()
                    .writable("/srv")
                    .network(Network::Unconfined)
            )
        );
        assert_eq!(
            parse(&["--connect-port", "443"]).confinement(),
            Some(
                Confinement::new()
                    .writes(false)
                    .network(Network::Ports(vec![443]))
            )
        );
        assert_eq!(
            parse(&["--confine-writes", "--no-network"]).confinement(),
            Some(Confinement::new())
        );
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert!(parse_bytes("1X").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
