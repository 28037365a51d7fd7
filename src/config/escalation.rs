//! Privilege escalation ("become", as Ansible calls it): the [`Become`] setting, the password
//! it may carry, and the checks that keep its values out of the remote shells' syntax.
//!
//! Only data lives here; `command::escalation` turns it into the text that runs the
//! escalation tool and talks to its prompts.

use std::{fmt, sync::Arc, time::Duration};

use crate::{
    config::Secret,
    error::{BecomeMethod, Error, Result},
};

/// What [`PasswordProvider::password`] is asked for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PasswordRequest {
    /// The host the escalation runs on.
    pub host: String,
    /// Its SSH port.
    pub port: u16,
    /// The account logged in over SSH, whose password sudo asks for (su asks for the
    /// target's).
    pub login_user: String,
    /// The escalation tool.
    pub method: BecomeMethod,
    /// The account escalated to.
    pub target_user: String,
}

/// Hands out the escalation password when a prompt asks for it: for passwords kept in a
/// vault, an agent, or anywhere else the caller fetches them from.
///
/// It is asked each time a prompt appears (so at most once per command, file channel or job
/// operation that escalates), never before: a host that does not prompt (`NOPASSWD`) never
/// causes a call. Returning `None` answers nothing, and the escalation fails with
/// [`BecomeFailure::PasswordRequired`](crate::BecomeFailure::PasswordRequired). Cache inside
/// the provider if fetching is slow.
#[async_trait::async_trait]
pub trait PasswordProvider: Send + Sync {
    /// The password for `request`, or `None`.
    async fn password(&self, request: &PasswordRequest) -> Option<Secret>;
}

/// Any `Fn(&PasswordRequest) -> Option<Secret>` is a provider.
#[async_trait::async_trait]
impl<F> PasswordProvider for F
where
    F: Fn(&PasswordRequest) -> Option<Secret> + Send + Sync,
{
    async fn password(&self, request: &PasswordRequest) -> Option<Secret> {
        self(request)
    }
}

/// Where the escalation password comes from.
#[derive(Clone)]
pub(crate) enum BecomePassword {
    Fixed(Secret),
    Provider(Arc<dyn PasswordProvider>),
}

impl BecomePassword {
    /// The password for `request`, if the caller has one.
    pub(crate) async fn get(&self, request: &PasswordRequest) -> Option<Secret> {
        match self {
            BecomePassword::Fixed(secret) => Some(secret.clone()),
            BecomePassword::Provider(provider) => provider.password(request).await,
        }
    }
}

/// How commands, file operations and jobs escalate to another account: the method (`sudo`,
/// `doas` or `su`), the target account, extra flags for the tool, and the password its prompt
/// gets, if any.
///
/// Set it for everything an executor does with
/// [`SshExecutorBuilder::with_become`](crate::SshExecutorBuilder::with_become), or for some
/// of it with [`SshExecutor::with_become`](crate::SshExecutor::with_become), which returns a
/// handle on the same pool whose commands, files, `stream_files` and jobs all run as the
/// target.
///
/// ```
/// use swiftide_ssh_executor::{Become, Secret};
///
/// let root = Become::sudo(); // sudo -n -u root, for NOPASSWD rules
/// let postgres = Become::sudo().user("postgres").password(Secret::new("hunter2"));
/// let legacy = Become::su().password(Secret::new("the root password"));
/// # let _ = (root, postgres, legacy);
/// ```
///
/// What runs on the host is `<tool> ... /bin/sh -c <the executor's bootstrap>`: the rule the
/// login user has must allow running `/bin/sh` as the target (`ALL`, as Ansible's become
/// needs too). The password travels on the command's channel, only when the tool's prompt
/// asks for it; never in an argument, an environment variable, a log line or an error.
#[derive(Clone)]
pub struct Become {
    pub(crate) method: BecomeMethod,
    pub(crate) user: String,
    pub(crate) flags: Vec<String>,
    pub(crate) password: Option<BecomePassword>,
    pub(crate) timeout: Duration,
    /// The tool's path (Ansible's `become_exe`); `None`: its name, found on `PATH`.
    pub(crate) exe: Option<String>,
    /// What [`access_key`](Self::access_key) names the credential by (0: none): a fixed
    /// password's [`fingerprint`], so that handles built apart with the same password share
    /// what it opened; a random token for a provider, which clones share.
    pub(crate) credential: u64,
}

impl fmt::Debug for Become {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Become")
            .field("method", &self.method)
            .field("user", &self.user)
            .field("flags", &self.flags)
            .field("exe", &self.exe)
            .field(
                "password",
                &self.password.as_ref().map(|password| match password {
                    BecomePassword::Fixed(_) => "***",
                    BecomePassword::Provider(_) => "<provider>",
                }),
            )
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A fixed password's name in [`Become::access_key`]: 64 bits of SHA-256 over a random key
/// drawn once per process and the password, so equal passwords match within the process and
/// the value says nothing about the password outside it. Never 0.
fn fingerprint(password: &Secret) -> u64 {
    use sha2::Digest;
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(rand::random);
    let digest = sha2::Sha256::new()
        .chain_update(key)
        .chain_update(password.expose().as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first) | 1
}

/// The longest an escalation may take, prompt and password check included, by default:
/// sudo and su wait 2–3 s after a wrong password before they say so.
pub(crate) const DEFAULT_BECOME_TIMEOUT: Duration = Duration::from_secs(10);

impl Become {
    /// Escalation with `method` to root, without a password.
    pub fn new(method: BecomeMethod) -> Self {
        Become {
            method,
            user: "root".to_owned(),
            flags: Vec::new(),
            password: None,
            timeout: DEFAULT_BECOME_TIMEOUT,
            exe: None,
            credential: 0,
        }
    }

    /// `sudo` (`sudo -n -u <user>`, or `sudo -S -p <random prompt> -u <user>` with a password).
    pub fn sudo() -> Self {
        Self::new(BecomeMethod::Sudo)
    }

    /// `doas` (`doas -n -u <user>`). doas reads passwords only from a terminal, which
    /// commands here do not have: give the rule `nopass` (or `persist` after a login).
    pub fn doas() -> Self {
        Self::new(BecomeMethod::Doas)
    }

    /// `su` (`su -s /bin/sh -c ... <user>`), which asks for the *target's* password (none for
    /// a login as root).
    pub fn su() -> Self {
        Self::new(BecomeMethod::Su)
    }

    /// The account to become. Defaults to `root`. A name of letters, digits, `_`, `.` and
    /// `-` (not starting with `-`), or `#<uid>` for sudo.
    #[must_use]
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = user.into();
        self
    }

    /// Adds one argument for the tool, placed before the command (e.g. `-E`, `-g`, `wheel`
    /// as two calls). Defaults to none. Printable ASCII without `'`, `\` or `!` (the request
    /// must read the same under every login shell); flags that change what runs or where
    /// (`-i`, `-s`, `-l`) change what the executor's bootstrap sees and are the caller's
    /// responsibility.
    #[must_use]
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.flags.push(flag.into());
        self
    }

    /// The tool to run, by path (Ansible's `become_exe`): e.g. `/bin/su` where the login
    /// shell is BusyBox ash, which would run its own non-setuid `su` applet for a plain `su`,
    /// or a sudo outside `PATH`. Defaults to the method's name, found on the login's `PATH`.
    /// Printable ASCII without spaces, `'`, `\` or `!`.
    #[must_use]
    pub fn exe(mut self, path: impl Into<String>) -> Self {
        self.exe = Some(path.into());
        self
    }

    /// Adds each whitespace-separated word of `flags` as one [`flag`](Self::flag): Ansible's
    /// `become_flags` string (`"-E -g wheel"`).
    #[must_use]
    pub fn flags_from_text(self, flags: &str) -> Self {
        flags.split_whitespace().fold(self, Self::flag)
    }

    /// The password the tool's prompt gets. Defaults to none: sudo and doas then run with
    /// `-n` and fail at once where a password is needed, and su fails at its prompt. It must
    /// not contain a newline or NUL.
    #[must_use]
    pub fn password(mut self, password: impl Into<Secret>) -> Self {
        let password = password.into();
        self.credential = fingerprint(&password);
        self.password = Some(BecomePassword::Fixed(password));
        self
    }

    /// A provider asked for the password when a prompt appears (see [`PasswordProvider`]).
    /// Replaces a [`password`](Self::password).
    #[must_use]
    pub fn password_provider(mut self, provider: impl PasswordProvider + 'static) -> Self {
        self.password = Some(BecomePassword::Provider(Arc::new(provider)));
        self.credential = rand::random::<u64>() | 1;
        self
    }

    /// The longest the escalation may take before the command starts: the tool's start, its
    /// prompt, the password check. Defaults to 10 s. Past it the attempt is
    /// [`BecomeFailure::Timeout`](crate::BecomeFailure::Timeout) and nothing ran.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The escalation tool.
    pub fn method(&self) -> BecomeMethod {
        self.method
    }

    /// The account escalated to.
    pub fn target_user(&self) -> &str {
        &self.user
    }

    /// The extra arguments for the tool.
    pub fn flags(&self) -> &[String] {
        &self.flags
    }

    /// The tool's command: its [`exe`](Self::exe) path, or the method's name.
    pub fn program(&self) -> &str {
        self.exe.as_deref().unwrap_or(self.method.name())
    }

    /// Whether a password (or a provider) is configured.
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Whether the tool may read a password from the channel before the command starts: the
    /// command's payload must then wait until the tool has handed over (the marker), or the
    /// tool would read the payload as a password. su always prompts unless the login is
    /// root; sudo and doas run with `-n` without a password and never read.
    pub(crate) fn may_prompt(&self) -> bool {
        match self.method {
            BecomeMethod::Su => true,
            BecomeMethod::Sudo => self.password.is_some(),
            BecomeMethod::Doas => false,
        }
    }

    /// The identity the escalation gives, as a key for what is kept per target (SFTP
    /// channels, the jobs' directory): method, user and flags.
    pub(crate) fn identity(&self) -> String {
        let mut key = format!("{}:{}:{}", self.program(), self.method, self.user);
        for flag in &self.flags {
            key.push('\0');
            key.push_str(flag);
        }
        key
    }

    /// The key for what an escalation keeps open once it succeeded (a connection's escalated
    /// SFTP channels and runners): the [`identity`](Self::identity) and the credential that
    /// opened it, so that a handle without the password, or with another one, never uses
    /// what a handle with it opened; it escalates on its own, as the tool decides. Clones of
    /// a `Become` share it.
    pub(crate) fn access_key(&self) -> String {
        let mut key = self.identity();
        if self.credential != 0 {
            key.push_str(&format!("\0credential:{:016x}", self.credential));
        }
        key
    }

    /// Checks the values that travel in the exec request.
    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::Config { reason });
        let name_ok = |name: &str| {
            let mut bytes = name.bytes();
            matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric() || b == b'_')
                && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        };
        let uid_ok = |name: &str| {
            self.method == BecomeMethod::Sudo
                && name
                    .strip_prefix('#')
                    .is_some_and(|uid| !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()))
        };
        if self.user.len() > 64 || !(name_ok(&self.user) || uid_ok(&self.user)) {
            return invalid(format!(
                "become user {:?} is not an account name (letters, digits, '_', '.', '-'{})",
                self.user,
                if self.method == BecomeMethod::Sudo {
                    ", or #uid"
                } else {
                    ""
                }
            ));
        }
        for flag in &self.flags {
            let neutral = flag
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && !matches!(b, b'\'' | b'\\' | b'!'));
            if flag.is_empty() || !neutral {
                return invalid(format!(
                    "become flag {flag:?} must be non-empty printable ASCII without ', \\ or !"
                ));
            }
        }
        if let Some(exe) = &self.exe {
            let plain = exe
                .bytes()
                .all(|b| (b'!'..=b'~').contains(&b) && !matches!(b, b'\'' | b'\\' | b'!'));
            if exe.is_empty() || exe.starts_with('-') || !plain {
                return invalid(format!(
                    "become exe {exe:?} must be a path of printable ASCII without spaces, ', \\ or !"
                ));
            }
        }
        if let Some(BecomePassword::Fixed(secret)) = &self.password
            && secret.expose().contains(['\n', '\r', '\0'])
        {
            // Never the password itself in the message.
            return invalid(
                "the become password contains a newline or NUL, which the tool's prompt \
                 would cut"
                    .to_owned(),
            );
        }
        if self.timeout.is_zero() {
            return invalid("the become timeout must be longer than zero".to_owned());
        }
        crate::config::limit::check("become timeout", self.timeout)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_could_change_the_request_are_refused() {
        assert!(Become::sudo().validate().is_ok());
        assert!(Become::sudo().user("#1000").validate().is_ok());
        assert!(Become::su().user("#1000").validate().is_err());
        assert!(Become::doas().user("www-data").validate().is_ok());
        for user in ["", "-x", "a b", "a'b", "root;id", "é"] {
            assert!(Become::sudo().user(user).validate().is_err(), "{user}");
        }
        for flag in ["", "it's", "a\\b", "!x", "a\nb"] {
            assert!(Become::sudo().flag(flag).validate().is_err(), "{flag:?}");
        }
        assert!(Become::sudo().flag("--preserve-env=A,B").validate().is_ok());
        assert_eq!(
            Become::sudo().flags_from_text(" -E  -g wheel ").flags(),
            ["-E", "-g", "wheel"]
        );
        assert!(Become::su().exe("/bin/su").validate().is_ok());
        for exe in ["", "-x", "/bin/s u", "/bin/'su"] {
            assert!(Become::su().exe(exe).validate().is_err(), "{exe:?}");
        }
        let error = Become::sudo()
            .password("multi\nline")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(!error.contains("multi"), "{error}");
        assert!(Become::sudo().timeout(Duration::ZERO).validate().is_err());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let text = format!("{:?}", Become::sudo().password("hunter2"));
        assert!(!text.contains("hunter2") && text.contains("***"), "{text}");
    }

    #[test]
    fn only_a_tool_that_may_read_stdin_makes_the_payload_wait() {
        assert!(!Become::sudo().may_prompt());
        assert!(Become::sudo().password("x").may_prompt());
        assert!(!Become::doas().password("x").may_prompt());
        assert!(Become::su().may_prompt());
    }
}
