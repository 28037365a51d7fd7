//! Login shells and the per-shell accounts that use them, and the `~/.ssh/authorized_keys`
//! files of testbed accounts.
//!
//! Accounts are shared by every testbed of every process on the machine, so each change
//! happens under an exclusive lock on [`LOCK_FILE`] (`flock`), and every step is
//! idempotent: a testbed that finds the account half set up (another process crashed in
//! the middle) finishes the job.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use crate::{TestbedError, process, system};

/// The prefix of the per-shell accounts (`swiftide-sh-bash`, `swiftide-sh-fish`, ...).
pub const LOGIN_SHELL_USER_PREFIX: &str = "swiftide-sh-";

/// A directory owned by the testbed for helper files (the BusyBox `ash` link).
pub const TESTBED_LIB_DIR: &str = "/usr/local/lib/swiftide-testbed";

/// Serialises account changes across processes.
const LOCK_FILE: &str = "/run/lock/swiftide-ssh-testbed-accounts.lock";
/// Used when `/run/lock` does not exist.
const FALLBACK_LOCK_FILE: &str = "/tmp/swiftide-ssh-testbed-accounts.lock";

/// Marks the lines of `authorized_keys` that the testbed manages:
/// `<type> <base64> swiftide-ssh-testbed-owner=<pid>.<start time>`.
const OWNER_TAG: &str = "swiftide-ssh-testbed-owner=";

/// Start-up files of the supported shells, kept empty so that nothing is printed or
/// changed behind the test's back.
const RC_FILES: &[&str] = &[
    ".profile",
    ".bashrc",
    ".bash_logout",
    ".zshenv",
    ".zprofile",
    ".zshrc",
    ".zlogin",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    ".logout",
    ".config/fish/config.fish",
];

/// How often `useradd`/`usermod` are retried: another process (outside the testbed's
/// lock, e.g. one creating [`crate::UNPRIVILEGED_USER`]) may hold the `/etc/passwd` lock.
const ATTEMPTS: u32 = 30;
const RETRY_DELAY: Duration = Duration::from_millis(100);

/// The login shell of the account a testbed logs in as (see
/// [`TestbedBuilder::login_shell`](crate::TestbedBuilder::login_shell)).
///
/// Each value has its own account, [`LoginShell::account_name`]; the shell's binary is
/// looked up in `/usr/bin` and then `/bin`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LoginShell {
    /// GNU bash (`bash`).
    Bash,
    /// The Debian Almquist shell (`dash`, Debian's `/bin/sh`).
    Dash,
    /// The Z shell (`zsh`).
    Zsh,
    /// The MirBSD Korn shell (`mksh`).
    Mksh,
    /// BusyBox's `ash`. BusyBox picks the applet from the basename of `argv[0]`, and
    /// servers run the shell as `<basename of the login shell> -c <command>`, so the
    /// account's shell is a symbolic link named `ash` to the `busybox` binary:
    /// `/usr/local/lib/swiftide-testbed/ash` (created when missing).
    BusyboxAsh,
    /// The friendly interactive shell (`fish`). Not POSIX: `$0`, `$$`, `&&` (before
    /// fish 3.0), `$(...)` (before 3.4) and here-documents differ.
    Fish,
    /// The TENEX C shell (`tcsh`). Not POSIX either.
    Tcsh,
    /// Any other shell, by absolute path. Its account is `swiftide-sh-x<8 hex digits>`
    /// (a hash of the path).
    Custom(PathBuf),
}

impl LoginShell {
    /// Every named shell (all but [`LoginShell::Custom`]).
    pub const ALL: [LoginShell; 7] = [
        LoginShell::Bash,
        LoginShell::Dash,
        LoginShell::Zsh,
        LoginShell::Mksh,
        LoginShell::BusyboxAsh,
        LoginShell::Fish,
        LoginShell::Tcsh,
    ];

    /// A short name: `bash`, `dash`, `zsh`, `mksh`, `ash`, `fish`, `tcsh`, or the file name
    /// of a custom shell.
    pub fn name(&self) -> String {
        match self {
            Self::Bash => "bash".to_owned(),
            Self::Dash => "dash".to_owned(),
            Self::Zsh => "zsh".to_owned(),
            Self::Mksh => "mksh".to_owned(),
            Self::BusyboxAsh => "ash".to_owned(),
            Self::Fish => "fish".to_owned(),
            Self::Tcsh => "tcsh".to_owned(),
            Self::Custom(path) => path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    /// The account that has this login shell: `swiftide-sh-<name>` (`swiftide-sh-ash`
    /// for BusyBox ash), or `swiftide-sh-x<hash>` for a custom shell.
    pub fn account_name(&self) -> String {
        match self {
            Self::Custom(path) => {
                let hash = fnv1a(path.as_os_str().as_encoded_bytes());
                format!("{LOGIN_SHELL_USER_PREFIX}x{hash:08x}")
            }
            other => format!("{LOGIN_SHELL_USER_PREFIX}{}", other.name()),
        }
    }

    /// The Debian package that provides the shell.
    fn package(&self) -> &'static str {
        match self {
            Self::Bash => "bash",
            Self::Dash => "dash",
            Self::Zsh => "zsh",
            Self::Mksh => "mksh",
            Self::BusyboxAsh => "busybox",
            Self::Fish => "fish",
            Self::Tcsh => "tcsh",
            Self::Custom(_) => "",
        }
    }

    /// The path to put into `/etc/passwd` (for BusyBox ash: the `ash` link, created
    /// here). Requires root for BusyBox ash.
    pub(crate) fn resolve(&self) -> Result<PathBuf, TestbedError> {
        match self {
            Self::Custom(path) => {
                if path.is_absolute() && path.is_file() {
                    Ok(path.clone())
                } else {
                    Err(TestbedError::ProgramNotFound {
                        path: path.clone(),
                        hint: "a custom login shell must be the absolute path of an existing \
                               executable"
                            .to_owned(),
                    })
                }
            }
            Self::BusyboxAsh => {
                let busybox = find_program("busybox", self.package())?;
                ensure_ash_link(&busybox)
            }
            other => find_program(&other.name(), other.package()),
        }
    }
}

/// The account for `shell` with `files` in its home (see
/// [`TestbedBuilder::home_file`](crate::TestbedBuilder::home_file)): the shell's own account
/// without files, else `<account>-<hash of the files>`.
pub(crate) fn account_with_files(shell: &LoginShell, files: &[(PathBuf, Vec<u8>)]) -> String {
    if files.is_empty() {
        return shell.account_name();
    }
    format!(
        "{}-{:08x}",
        shell.account_name(),
        fnv1a(&files_fingerprint(files))
    )
}

/// The bytes that stand for a set of home files in account names (paths, lengths and
/// contents, in order).
pub(crate) fn files_fingerprint(files: &[(PathBuf, Vec<u8>)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (path, contents) in files {
        bytes.extend_from_slice(path.as_os_str().as_encoded_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&(contents.len() as u64).to_le_bytes());
        bytes.extend_from_slice(contents);
    }
    bytes
}

/// 32-bit FNV-1a, for stable account names of custom shells.
pub(crate) fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &byte in bytes {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// `/usr/bin/<name>` or `/bin/<name>`, whichever exists.
fn find_program(name: &str, package: &str) -> Result<PathBuf, TestbedError> {
    let candidates = [
        Path::new("/usr/bin").join(name),
        Path::new("/bin").join(name),
    ];
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .ok_or_else(|| TestbedError::ProgramNotFound {
            path: candidates[0].clone(),
            hint: format!("install it with `apt-get install -y {package}`"),
        })
}

/// Makes `/usr/local/lib/swiftide-testbed/ash` a symbolic link to `busybox` (atomically:
/// a link with a unique name is renamed over it).
fn ensure_ash_link(busybox: &Path) -> Result<PathBuf, TestbedError> {
    let dir = Path::new(TESTBED_LIB_DIR);
    let link = dir.join("ash");
    if fs::read_link(&link).is_ok_and(|target| target == busybox) {
        return Ok(link);
    }
    fs::create_dir_all(dir)
        .map_err(|e| TestbedError::io(format!("creating {}", dir.display()), e))?;
    system::chmod(dir, 0o755)?;
    let temp = dir.join(format!(
        ".ash.{}.{:?}",
        std::process::id(),
        thread::current().id()
    ));
    let _ = fs::remove_file(&temp);
    symlink(busybox, &temp)
        .map_err(|e| TestbedError::io(format!("creating the link {}", temp.display()), e))?;
    fs::rename(&temp, &link).map_err(|e| {
        let _ = fs::remove_file(&temp);
        TestbedError::io(
            format!("renaming {} to {}", temp.display(), link.display()),
            e,
        )
    })?;
    Ok(link)
}

/// An exclusive lock on the accounts lock file, released when dropped. Also guards the
/// escalation rules (`/etc/sudoers.d/swiftide-testbed-*`, the testbed's block of
/// `/etc/doas.conf`).
pub(crate) struct AccountsLock {
    _file: File,
}

impl AccountsLock {
    /// Blocks until this thread holds the lock (each call opens the file anew, so threads
    /// of one process exclude each other too).
    pub(crate) fn acquire() -> Result<Self, TestbedError> {
        let path = if Path::new("/run/lock").is_dir() {
            LOCK_FILE
        } else {
            FALLBACK_LOCK_FILE
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| TestbedError::io(format!("opening the lock file {path}"), e))?;
        file.lock()
            .map_err(|e| TestbedError::io(format!("locking {path}"), e))?;
        Ok(Self { _file: file })
    }
}

/// One `/etc/passwd` entry.
#[derive(Debug, Clone)]
struct PasswdEntry {
    uid: u32,
    home: PathBuf,
    shell: String,
}

fn passwd_entry(name: &str) -> Option<PasswdEntry> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 7 || fields.first() != Some(&name) {
            return None;
        }
        Some(PasswdEntry {
            uid: fields.get(2)?.parse().ok()?,
            home: PathBuf::from(fields.get(5)?),
            shell: (*fields.get(6)?).to_owned(),
        })
    })
}

/// The groups in `/etc/group` that list `name` as a member (supplementary groups).
fn supplementary_groups(name: &str) -> Vec<String> {
    let Ok(groups) = fs::read_to_string("/etc/group") else {
        return Vec::new();
    };
    groups
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let group = fields.next()?;
            let members = fields.nth(2)?;
            members
                .split(',')
                .any(|member| member.trim() == name)
                .then(|| group.to_owned())
        })
        .collect()
}

/// The password field of `name` in `/etc/shadow` (`None` if unreadable or absent).
fn shadow_password(name: &str) -> Option<String> {
    let shadow = fs::read_to_string("/etc/shadow").ok()?;
    shadow.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == name).then(|| fields.next().unwrap_or_default().to_owned())
    })
}

/// Adds `shell` to `/etc/shells` unless listed (Dropbear refuses accounts whose shell
/// is not). Call with the lock held.
fn ensure_listed_shell(shell: &Path) -> Result<(), TestbedError> {
    let shell = shell.to_string_lossy();
    let path = Path::new("/etc/shells");
    let current = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
        Err(e) => return Err(TestbedError::io("reading /etc/shells", e)),
    };
    if current.lines().any(|line| line.trim() == shell) {
        return Ok(());
    }
    let mut line = String::new();
    if !current.is_empty() && !current.ends_with('\n') {
        line.push('\n');
    }
    let _ = writeln!(line, "{shell}");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)
        .map_err(|e| TestbedError::io("opening /etc/shells", e))?;
    file.write_all(line.as_bytes())
        .map_err(|e| TestbedError::io("appending to /etc/shells", e))
}

/// Runs an account tool, retrying while another process holds the passwd lock.
fn run_account_tool(mut make: impl FnMut() -> Command, what: &str) -> Result<(), TestbedError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match system::run_checked(&mut make(), what) {
            Ok(_) => return Ok(()),
            Err(e) if attempt >= ATTEMPTS => return Err(e),
            Err(_) => thread::sleep(RETRY_DELAY),
        }
    }
}

/// Accounts this process has set up (with its client keys).
static READY: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// What [`ensure_account`] sets up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccountSpec<'a> {
    pub(crate) name: &'a str,
    /// The login shell, as it goes into `/etc/passwd`.
    pub(crate) shell: &'a Path,
    /// `None`: password field `*` (no password, not locked). `Some`: this password, set
    /// with `chpasswd` (a real hash, for PAM: sudo and su check it); the account is then
    /// also kept out of every supplementary group (so that no `%group` rule applies).
    pub(crate) password: Option<&'a str>,
    /// Authorized keys for `~/.ssh/authorized_keys` (none: the file is left alone).
    pub(crate) keys: &'a [String],
    /// Files for the home directory (see [`write_home_files`]).
    pub(crate) files: &'a [(PathBuf, Vec<u8>)],
    /// The GECOS field of a new account.
    pub(crate) comment: &'a str,
}

/// Creates (or repairs) the account `name` with login shell `shell`, password field `*`
/// (not locked: OpenSSH without PAM refuses `!` accounts; no password login possible),
/// a home directory with empty shell start-up files, and `~/.ssh/authorized_keys`
/// holding `keys`. Lists the shell in `/etc/shells`. Requires root. Returns the uid.
pub(crate) fn ensure_login_account(
    name: &str,
    shell: &Path,
    keys: &[String],
    files: &[(PathBuf, Vec<u8>)],
) -> Result<u32, TestbedError> {
    ensure_account(&AccountSpec {
        name,
        shell,
        password: None,
        keys,
        files,
        comment: "swiftide-ssh-testbed login shell account",
    })
}

/// Creates (or repairs) an account as `spec` says: login shell (listed in `/etc/shells`),
/// password (`*` or a real one), home `/home/<name>` (0755) with empty shell start-up files
/// and `spec.files`, `~/.ssh/authorized_keys` with `spec.keys`. Everything happens under
/// [`AccountsLock`]; a password is set once per process. Requires root. Returns the uid.
pub(crate) fn ensure_account(spec: &AccountSpec<'_>) -> Result<u32, TestbedError> {
    let AccountSpec {
        name,
        shell,
        password,
        keys,
        files,
        comment,
    } = *spec;
    let mut ready = READY.lock().unwrap_or_else(PoisonError::into_inner);
    if ready.contains(name)
        && let Some(entry) = passwd_entry(name)
        && Path::new(&entry.shell) == shell
    {
        return Ok(entry.uid);
    }
    let _lock = AccountsLock::acquire()?;
    ensure_listed_shell(shell)?;
    let shell_text = shell.to_string_lossy().into_owned();
    let entry = match passwd_entry(name) {
        Some(entry) => {
            let wrong_password =
                password.is_none() && shadow_password(name).as_deref() != Some("*");
            if entry.shell != shell_text || wrong_password {
                let usermod = system::sbin_tool("usermod");
                run_account_tool(
                    || {
                        let mut command = Command::new(&usermod);
                        command.args(["--shell", &shell_text]);
                        if password.is_none() {
                            command.args(["--password", "*"]);
                        }
                        command.arg(name);
                        command
                    },
                    &format!("`usermod --shell {shell_text} {name}`"),
                )?;
            }
            passwd_entry(name)
        }
        None => {
            let useradd = system::sbin_tool("useradd");
            let home = format!("/home/{name}");
            run_account_tool(
                || {
                    let mut command = Command::new(&useradd);
                    command.args([
                        "--no-create-home",
                        "--home-dir",
                        &home,
                        "--shell",
                        &shell_text,
                        "--password",
                        "*",
                        "--comment",
                        comment,
                        name,
                    ]);
                    command
                },
                &format!("`useradd {name}`"),
            )?;
            passwd_entry(name)
        }
    };
    let entry = entry.ok_or_else(|| {
        TestbedError::io(
            format!("creating user {name}"),
            std::io::Error::other("the account is not in /etc/passwd after useradd/usermod"),
        )
    })?;
    if let Some(password) = password {
        system::set_password(name, password)?;
        if !supplementary_groups(name).is_empty() {
            let usermod = system::sbin_tool("usermod");
            run_account_tool(
                || {
                    let mut command = Command::new(&usermod);
                    command.args(["--groups", "", name]);
                    command
                },
                &format!("`usermod --groups '' {name}`"),
            )?;
        }
    }
    prepare_home(name, &entry.home, Some(files))?;
    write_home_files(name, &entry.home, files)?;
    if !keys.is_empty() {
        install_keys(name, &entry.home, keys)?;
    }
    ready.insert(name.to_owned());
    Ok(entry.uid)
}

/// Puts `keys` into `~name/.ssh/authorized_keys` (for servers that only read that file,
/// such as Dropbear), creating `~/.ssh` if needed. Requires root. Done once per process
/// and account.
pub(crate) fn ensure_home_keys(name: &str, keys: &[String]) -> Result<(), TestbedError> {
    let mut ready = READY.lock().unwrap_or_else(PoisonError::into_inner);
    let marker = format!("keys:{name}");
    if ready.contains(&marker) {
        return Ok(());
    }
    let entry = passwd_entry(name).ok_or_else(|| {
        TestbedError::io(
            format!("looking up user {name}"),
            std::io::Error::new(ErrorKind::NotFound, "not in /etc/passwd"),
        )
    })?;
    let _lock = AccountsLock::acquire()?;
    prepare_home(name, &entry.home, None)?;
    install_keys(name, &entry.home, keys)?;
    ready.insert(marker);
    Ok(())
}

/// Creates the home directory (0755) and `~/.ssh` (0700), owned by the account; with
/// `rc_files`, also creates/empties the shells' start-up files, except those among the
/// account's own files (written next, see [`write_home_files`]).
fn prepare_home(
    name: &str,
    home: &Path,
    rc_files: Option<&[(PathBuf, Vec<u8>)]>,
) -> Result<(), TestbedError> {
    let ssh_dir = home.join(".ssh");
    fs::create_dir_all(&ssh_dir)
        .map_err(|e| TestbedError::io(format!("creating {}", ssh_dir.display()), e))?;
    let mut owned = vec![home.to_owned(), ssh_dir.clone()];
    if let Some(own_files) = rc_files {
        system::chmod(home, 0o755)?;
        for rc in RC_FILES
            .iter()
            .filter(|rc| !own_files.iter().any(|(path, _)| path == Path::new(rc)))
        {
            let path = home.join(rc);
            if let Some(parent) = path.parent()
                && parent != home
            {
                fs::create_dir_all(parent)
                    .map_err(|e| TestbedError::io(format!("creating {}", parent.display()), e))?;
                let mut dir = parent;
                while dir != home {
                    owned.push(dir.to_owned());
                    match dir.parent() {
                        Some(up) => dir = up,
                        None => break,
                    }
                }
            }
            if fs::metadata(&path).map_or(true, |m| m.len() != 0) {
                system::write_file(&path, b"", 0o644)?;
            }
            owned.push(path);
        }
    }
    system::chmod(&ssh_dir, 0o700)?;
    chown_all(&owned, name)
}

/// Writes `files` (paths relative to `home`) with mode 0644, owned by the account, creating
/// their directories. Call with the lock held, after [`prepare_home`] (which empties the
/// start-up files).
fn write_home_files(
    name: &str,
    home: &Path,
    files: &[(PathBuf, Vec<u8>)],
) -> Result<(), TestbedError> {
    let mut owned = Vec::new();
    for (relative, contents) in files {
        let path = home.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| TestbedError::io(format!("creating {}", parent.display()), e))?;
        }
        if fs::read(&path).ok().as_deref() != Some(contents.as_slice()) {
            system::write_file(&path, contents, 0o644)?;
        }
        owned.push(path);
    }
    chown_all(&owned, name)
}

/// `chown name: paths...` (without following symbolic links), skipping it when all
/// already belong to the account.
fn chown_all(paths: &[PathBuf], name: &str) -> Result<(), TestbedError> {
    let Some(entry) = passwd_entry(name) else {
        return system::chown_many(paths, name);
    };
    if paths
        .iter()
        .all(|path| fs::symlink_metadata(path).is_ok_and(|m| m.uid() == entry.uid))
    {
        return Ok(());
    }
    system::chown_many(paths, name)
}

/// `<type> <base64> swiftide-ssh-testbed-owner=<pid>.<start time>` for this process.
fn owner_tag() -> String {
    let pid = std::process::id();
    let start = process::start_time(pid).unwrap_or(0);
    format!("{OWNER_TAG}{pid}.{start}")
}

/// Whether the process named by a tag (`<pid>.<start time>`) still runs.
fn owner_alive(tag: &str) -> bool {
    let Some((pid, start)) = tag.split_once('.') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    process::is_alive(pid) && process::start_time(pid) == Some(start)
}

/// The new contents of an `authorized_keys` file: untagged lines and lines of living
/// owners other than this process stay, this process's keys are (re)added.
pub(crate) fn merge_authorized_keys(current: &str, keys: &[String], tag: &str) -> String {
    let mut text = String::new();
    for line in current.lines() {
        let owner = line
            .split_whitespace()
            .last()
            .and_then(|word| word.strip_prefix(OWNER_TAG));
        let keep = match owner {
            None => !line.trim().is_empty(),
            Some(owner) => format!("{OWNER_TAG}{owner}") != tag && owner_alive(owner),
        };
        if keep {
            text.push_str(line);
            text.push('\n');
        }
    }
    for key in keys {
        let key: Vec<&str> = key.split_whitespace().take(2).collect();
        let _ = writeln!(text, "{} {tag}", key.join(" "));
    }
    text
}

/// Writes `~/.ssh/authorized_keys` (0600, owned by the account) atomically (temporary
/// file + rename), keeping other processes' keys. Call with the lock held.
fn install_keys(name: &str, home: &Path, keys: &[String]) -> Result<(), TestbedError> {
    let path = home.join(".ssh").join("authorized_keys");
    let current = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
        Err(e) => return Err(TestbedError::io(format!("reading {}", path.display()), e)),
    };
    let text = merge_authorized_keys(&current, keys, &owner_tag());
    let temp = home
        .join(".ssh")
        .join(format!(".authorized_keys.{}", std::process::id()));
    system::write_file(&temp, text.as_bytes(), 0o600)?;
    system::chmod(&temp, 0o600)?;
    system::chown_many(std::slice::from_ref(&temp), name)?;
    fs::rename(&temp, &path).map_err(|e| {
        let _ = fs::remove_file(&temp);
        TestbedError::io(
            format!("renaming {} to {}", temp.display(), path.display()),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names() {
        assert_eq!(LoginShell::Bash.account_name(), "swiftide-sh-bash");
        assert_eq!(LoginShell::BusyboxAsh.account_name(), "swiftide-sh-ash");
        assert_eq!(LoginShell::Fish.account_name(), "swiftide-sh-fish");
        let custom = LoginShell::Custom(PathBuf::from("/opt/shells/bash")).account_name();
        assert!(custom.starts_with("swiftide-sh-x"), "{custom}");
        assert_eq!(custom.len(), "swiftide-sh-x".len() + 8);
        assert_ne!(
            custom,
            LoginShell::Custom(PathBuf::from("/opt/shells/zsh")).account_name()
        );
        for shell in LoginShell::ALL {
            // useradd's limit.
            assert!(shell.account_name().len() <= 32);
        }
    }

    #[test]
    fn authorized_keys_keep_foreign_and_living_lines() {
        let me = owner_tag();
        let current = format!(
            "ssh-ed25519 AAAAuser own-line\n\
             ssh-ed25519 AAAAold {OWNER_TAG}999999999.1\n\
             ssh-ed25519 AAAAmine {me}\n\n"
        );
        let keys = vec!["ssh-ed25519 AAAAnew comment here".to_owned()];
        let merged = merge_authorized_keys(&current, &keys, &me);
        assert_eq!(
            merged,
            format!("ssh-ed25519 AAAAuser own-line\nssh-ed25519 AAAAnew {me}\n")
        );
    }
}
