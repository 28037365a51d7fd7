//! Privilege escalation ("become"): the [`Escalation`] rules (sudo, doas, su), the accounts
//! that have them, and the system files that hold the rules.
//!
//! Like the login shell accounts, escalation accounts are shared by every testbed of every
//! process on the machine and are set up under the accounts lock
//! (`/run/lock/swiftide-ssh-testbed-accounts.lock`); the rules are rewritten under the same
//! lock, atomically (temporary file, validation, rename), and only when they differ.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::shells::{self, AccountSpec, AccountsLock, LOGIN_SHELL_USER_PREFIX, LoginShell};
use crate::{DOCKER_USER, TestbedError, system};

/// The password of every escalation account ([`TestbedBuilder::escalation`]) and of the
/// Docker image's escalation accounts: what `sudo` (with [`Escalation::SudoPassword`] or
/// [`Escalation::SudoLecture`]) and `doas` (with [`Escalation::DoasPassword`]) ask for.
///
/// [`TestbedBuilder::escalation`]: crate::TestbedBuilder::escalation
pub const BECOME_PASSWORD: &str = "become-password-456";

/// A non-root account to become: the target of `sudo -u`, `doas -u` and `su` tests. It
/// exists next to every escalation account (created with the first one), with login shell
/// `/bin/sh` and the password [`BECOME_TARGET_PASSWORD`]; the Docker images have it too.
/// The native harness never changes root's password, so `su` tests there switch to this
/// account instead of root.
pub const BECOME_TARGET_USER: &str = "swiftide-become-target";

/// The password of [`BECOME_TARGET_USER`] (what `su swiftide-become-target` asks for).
pub const BECOME_TARGET_PASSWORD: &str = "become-target-password-321";

/// Root's password in the Docker images (OpenSSH and Dropbear/BusyBox), so that `su` (to
/// root) works there. The native harness leaves the machine's root password alone.
pub const ROOT_PASSWORD: &str = "root-password-789";

/// The prefix of the escalation accounts (`swiftide-b-sudo-nopw`,
/// `swiftide-b-fish-doas-pw`, ...; see [`Escalation::account_name`]).
pub const BECOME_USER_PREFIX: &str = "swiftide-b-";

/// The sudo rules of an escalation account are in `<this prefix><account>`, e.g.
/// `/etc/sudoers.d/swiftide-testbed-swiftide-b-sudo-nopw` (mode 0440, root's).
pub const SUDOERS_FILE_PREFIX: &str = "/etc/sudoers.d/swiftide-testbed-";

/// The doas configuration, in which the testbed keeps a marked block of lines for its
/// accounts (see [`DOAS_BLOCK_BEGIN`]).
pub const DOAS_CONF_PATH: &str = "/etc/doas.conf";

/// The first line of the testbed's block in [`DOAS_CONF_PATH`]; the block ends with
/// [`DOAS_BLOCK_END`]. Lines outside it are never changed.
pub const DOAS_BLOCK_BEGIN: &str =
    "# BEGIN swiftide-ssh-testbed: its escalation accounts' rules (rewritten by it; edit outside)";

/// The last line of the testbed's block in [`DOAS_CONF_PATH`].
pub const DOAS_BLOCK_END: &str = "# END swiftide-ssh-testbed";

const SUDO_PATH: &str = "/usr/bin/sudo";
const VISUDO_PATH: &str = "/usr/sbin/visudo";
const DOAS_PATH: &str = "/usr/bin/doas";
const SU_PATHS: [&str; 2] = ["/usr/bin/su", "/bin/su"];
const SUDO_DOAS_HINT: &str = "install sudo and doas with `apt-get install -y sudo doas`";

/// How the testbed's login account may become another user (see
/// [`TestbedBuilder::escalation`](crate::TestbedBuilder::escalation)). Each rule has its
/// own account ([`Escalation::account_name`]), whose password is [`BECOME_PASSWORD`];
/// `<account>` below stands for it. sudo rules live in
/// `/etc/sudoers.d/swiftide-testbed-<account>`, doas rules in the testbed's block of
/// `/etc/doas.conf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Escalation {
    /// sudo without a password: `<account> ALL=(ALL:ALL) NOPASSWD: ALL`.
    SudoNoPassword,
    /// sudo with the account's password: `<account> ALL=(ALL:ALL) ALL`.
    SudoPassword,
    /// sudo without a password, but only from a terminal: `Defaults:<account> requiretty`
    /// and `<account> ALL=(ALL:ALL) NOPASSWD: ALL`.
    SudoRequireTty,
    /// sudo with the password, printing its lecture before every prompt (also with `-S`
    /// and no terminal): `Defaults:<account> lecture=always` and
    /// `<account> ALL=(ALL:ALL) ALL`.
    SudoLecture,
    /// No sudo rule at all: sudo asks for the password, then refuses with `<account> is
    /// not in the sudoers file.`
    SudoNotInSudoers,
    /// doas without a password: `permit nopass <account> as root` and
    /// `permit nopass <account> as swiftide-become-target`.
    DoasNoPassword,
    /// doas with the account's password: `permit <account> as root` and
    /// `permit <account> as swiftide-become-target`. opendoas reads the password from the
    /// terminal only (`-n` fails at once, without a terminal it fails too).
    DoasPassword,
    /// No sudo or doas rule: the account becomes [`BECOME_TARGET_USER`] with `su`, giving
    /// [`BECOME_TARGET_PASSWORD`].
    Su,
}

impl Escalation {
    /// Every rule.
    pub const ALL: [Escalation; 8] = [
        Escalation::SudoNoPassword,
        Escalation::SudoPassword,
        Escalation::SudoRequireTty,
        Escalation::SudoLecture,
        Escalation::SudoNotInSudoers,
        Escalation::DoasNoPassword,
        Escalation::DoasPassword,
        Escalation::Su,
    ];

    /// A short name, used in account names: `sudo-nopw`, `sudo-pw`, `sudo-tty`,
    /// `sudo-lect`, `sudo-none`, `doas-nopw`, `doas-pw`, `su`.
    pub fn name(self) -> &'static str {
        match self {
            Self::SudoNoPassword => "sudo-nopw",
            Self::SudoPassword => "sudo-pw",
            Self::SudoRequireTty => "sudo-tty",
            Self::SudoLecture => "sudo-lect",
            Self::SudoNotInSudoers => "sudo-none",
            Self::DoasNoPassword => "doas-nopw",
            Self::DoasPassword => "doas-pw",
            Self::Su => "su",
        }
    }

    /// The native harness's account with this rule: `swiftide-b-<name>` (login shell
    /// `/bin/sh`) without a login shell, `swiftide-b-<shell>-<name>` with one, `<shell>`
    /// being the shell's part of [`LoginShell::account_name`] (`bash`, `ash`, `fish`, ...,
    /// `x<hash>` for a custom shell): one account per (shell, rule) pair, so that testbeds
    /// with different rules or shells never share one. At most 30 characters (useradd
    /// allows 32). With [home files](crate::TestbedBuilder::home_file) the account is
    /// `swiftide-b-<name>-<8 hex digits>`, a hash of the shell and the files.
    pub fn account_name(self, login_shell: Option<&LoginShell>) -> String {
        match login_shell {
            None => format!("{BECOME_USER_PREFIX}{}", self.name()),
            Some(shell) => format!("{BECOME_USER_PREFIX}{}-{}", shell_part(shell), self.name()),
        }
    }

    /// The account of the Docker OpenSSH image ([`DockerImage::OpenSsh`]) with this rule,
    /// for [`DockerTestbedBuilder::user`]: `sudo-nopasswd`, `sudo-password`, `sudo-tty`,
    /// `sudo-lecture`, `sudo-none`, `doas-nopass`, `doas-password`; for [`Escalation::Su`]
    /// [`DOCKER_USER`] (`tester`, which has no sudo or doas rule and becomes root with `su`
    /// and [`ROOT_PASSWORD`], also in the Dropbear/BusyBox image). Their password is
    /// [`BECOME_PASSWORD`], their login shell `/bin/sh`.
    ///
    /// [`DockerImage::OpenSsh`]: crate::DockerImage::OpenSsh
    /// [`DockerTestbedBuilder::user`]: crate::DockerTestbedBuilder::user
    pub fn docker_user(self) -> &'static str {
        match self {
            Self::SudoNoPassword => "sudo-nopasswd",
            Self::SudoPassword => "sudo-password",
            Self::SudoRequireTty => "sudo-tty",
            Self::SudoLecture => "sudo-lecture",
            Self::SudoNotInSudoers => "sudo-none",
            Self::DoasNoPassword => "doas-nopass",
            Self::DoasPassword => "doas-password",
            Self::Su => DOCKER_USER,
        }
    }

    /// The lines of `/etc/sudoers.d/swiftide-testbed-<account>`, if the rule has any.
    pub(crate) fn sudoers_rules(self, account: &str) -> Option<String> {
        let all = format!("{account} ALL=(ALL:ALL) ALL\n");
        let nopasswd = format!("{account} ALL=(ALL:ALL) NOPASSWD: ALL\n");
        match self {
            Self::SudoNoPassword => Some(nopasswd),
            Self::SudoPassword => Some(all),
            Self::SudoRequireTty => Some(format!("Defaults:{account} requiretty\n{nopasswd}")),
            Self::SudoLecture => Some(format!("Defaults:{account} lecture=always\n{all}")),
            Self::SudoNotInSudoers | Self::DoasNoPassword | Self::DoasPassword | Self::Su => None,
        }
    }

    /// The account's lines in the testbed's block of `/etc/doas.conf`.
    pub(crate) fn doas_rules(self, account: &str) -> Vec<String> {
        let options = match self {
            Self::DoasNoPassword => "nopass ",
            Self::DoasPassword => "",
            _ => return Vec::new(),
        };
        ["root", BECOME_TARGET_USER]
            .iter()
            .map(|target| format!("permit {options}{account} as {target}"))
            .collect()
    }

    /// The programs the rule needs: sudo and visudo, doas, or su.
    fn check_programs(self) -> Result<(), TestbedError> {
        let (paths, hint): (&[&str], &str) = match self {
            Self::SudoNoPassword
            | Self::SudoPassword
            | Self::SudoRequireTty
            | Self::SudoLecture
            | Self::SudoNotInSudoers => (&[SUDO_PATH, VISUDO_PATH], SUDO_DOAS_HINT),
            Self::DoasNoPassword | Self::DoasPassword => (&[DOAS_PATH], SUDO_DOAS_HINT),
            Self::Su => {
                if SU_PATHS.iter().any(|path| Path::new(path).is_file()) {
                    return Ok(());
                }
                (
                    &SU_PATHS[..1],
                    "su is part of util-linux: `apt-get install -y util-linux`",
                )
            }
        };
        match paths.iter().find(|path| !Path::new(path).is_file()) {
            None => Ok(()),
            Some(missing) => Err(TestbedError::ProgramNotFound {
                path: PathBuf::from(missing),
                hint: hint.to_owned(),
            }),
        }
    }
}

/// The shell's part of an escalation account name: `bash`, `ash`, ..., `x<hash>`.
fn shell_part(shell: &LoginShell) -> String {
    let account = shell.account_name();
    account
        .strip_prefix(LOGIN_SHELL_USER_PREFIX)
        .unwrap_or(&account)
        .to_owned()
}

/// The account for `escalation` with `login_shell` and `files` in its home (see
/// [`Escalation::account_name`]).
pub(crate) fn account(
    escalation: Escalation,
    login_shell: Option<&LoginShell>,
    files: &[(PathBuf, Vec<u8>)],
) -> String {
    if files.is_empty() {
        return escalation.account_name(login_shell);
    }
    let shell = login_shell.map_or_else(|| "sh".to_owned(), shell_part);
    let mut bytes = shell.into_bytes();
    bytes.push(0);
    bytes.extend(shells::files_fingerprint(files));
    format!(
        "{BECOME_USER_PREFIX}{}-{:08x}",
        escalation.name(),
        shells::fnv1a(&bytes)
    )
}

/// Sets up what a testbed with `escalation` needs and returns its account and uid: the
/// programs must exist; the account (login shell `shell_path`, password
/// [`BECOME_PASSWORD`], `keys` authorized, `files` in its home), [`BECOME_TARGET_USER`]
/// and the rule are created or repaired. Requires root.
pub(crate) fn ensure(
    escalation: Escalation,
    login_shell: Option<&LoginShell>,
    shell_path: &Path,
    keys: &[String],
    files: &[(PathBuf, Vec<u8>)],
) -> Result<(String, u32), TestbedError> {
    escalation.check_programs()?;
    let name = account(escalation, login_shell, files);
    let uid = shells::ensure_account(&AccountSpec {
        name: &name,
        shell: shell_path,
        password: Some(BECOME_PASSWORD),
        keys,
        files,
        comment: "swiftide-ssh-testbed escalation account",
    })?;
    shells::ensure_account(&AccountSpec {
        name: BECOME_TARGET_USER,
        shell: Path::new("/bin/sh"),
        password: Some(BECOME_TARGET_PASSWORD),
        keys: &[],
        files: &[],
        comment: "swiftide-ssh-testbed escalation target",
    })?;
    let _lock = AccountsLock::acquire()?;
    sync_sudoers(&name, escalation)?;
    sync_doas(&name, &escalation.doas_rules(&name))?;
    Ok((name, uid))
}

/// Makes `/etc/sudoers.d/swiftide-testbed-<account>` hold exactly the rule's lines (mode
/// 0440, validated with `visudo -cf` before it is renamed into place), or removes it for a
/// rule without sudo lines. The temporary file's name starts with a dot, so sudo ignores
/// it meanwhile (it skips names with a `.` or ending in `~`). Call with the lock held.
fn sync_sudoers(account: &str, escalation: Escalation) -> Result<(), TestbedError> {
    let path = PathBuf::from(format!("{SUDOERS_FILE_PREFIX}{account}"));
    let Some(rules) = escalation.sudoers_rules(account) else {
        return match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(TestbedError::io(format!("removing {}", path.display()), e)),
        };
    };
    let text = format!(
        "# Written by swiftide-ssh-testbed for its account {account} \
         (Escalation::{escalation:?}).\n{rules}"
    );
    let current_ok = fs::read(&path).is_ok_and(|current| current == text.as_bytes())
        && fs::metadata(&path).is_ok_and(|m| m.mode() & 0o7777 == 0o440 && m.uid() == 0);
    if current_ok {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("/etc/sudoers.d"));
    if !dir.is_dir() {
        fs::create_dir_all(dir)
            .map_err(|e| TestbedError::io(format!("creating {}", dir.display()), e))?;
        system::chmod(dir, 0o755)?;
    }
    let temp = dir.join(format!(
        ".swiftide-testbed-{account}.{}",
        std::process::id()
    ));
    let result = write_temp(&temp, text.as_bytes(), 0o440)
        .and_then(|()| {
            system::run_checked(
                Command::new(VISUDO_PATH).arg("-cf").arg(&temp),
                &format!(
                    "`visudo -cf {}` (checking the rule for {account})",
                    temp.display()
                ),
            )
            .map(drop)
        })
        .and_then(|()| {
            fs::rename(&temp, &path).map_err(|e| {
                TestbedError::io(
                    format!("renaming {} to {}", temp.display(), path.display()),
                    e,
                )
            })
        });
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Writes `contents` to a fresh `path` (replacing a leftover) and sets `mode` (which the
/// umask may have narrowed).
fn write_temp(path: &Path, contents: &[u8], mode: u32) -> Result<(), TestbedError> {
    let _ = fs::remove_file(path);
    system::write_file(path, contents, mode)?;
    system::chmod(path, mode)
}

/// Makes the testbed's block of `/etc/doas.conf` hold `rules` for `account` (and nothing
/// else for it), keeping every other line. The new file is written next to it with the old
/// file's mode (minus group and other write: opendoas refuses a config writable by them or
/// not owned by root), or 0644 for a new one, checked with `doas -C` and renamed into
/// place. Nothing is written when nothing changes. Call with the lock held.
fn sync_doas(account: &str, rules: &[String]) -> Result<(), TestbedError> {
    let path = Path::new(DOAS_CONF_PATH);
    let (current, mode) = match fs::read_to_string(path) {
        Ok(text) => {
            let mode = fs::metadata(path)
                .map_err(|e| TestbedError::io(format!("reading {}", path.display()), e))?
                .mode();
            (text, mode & 0o7755)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if rules.is_empty() {
                return Ok(());
            }
            (String::new(), 0o644)
        }
        Err(e) => return Err(TestbedError::io(format!("reading {}", path.display()), e)),
    };
    let Some(text) = merge_doas_conf(&current, account, rules) else {
        return Ok(());
    };
    let temp = Path::new("/etc").join(format!(
        ".doas.conf.swiftide-ssh-testbed.{}",
        std::process::id()
    ));
    let result = write_temp(&temp, text.as_bytes(), mode)
        .and_then(|()| {
            if !Path::new(DOAS_PATH).is_file() {
                // Only removing lines (doas is not needed for this rule): nothing to check with.
                return Ok(());
            }
            system::run_checked(
                Command::new(DOAS_PATH).arg("-C").arg(&temp),
                &format!(
                    "`doas -C {}` (checking the rules for {account})",
                    temp.display()
                ),
            )
            .map(drop)
        })
        .and_then(|()| {
            fs::rename(&temp, path).map_err(|e| {
                TestbedError::io(
                    format!("renaming {} to {}", temp.display(), path.display()),
                    e,
                )
            })
        });
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// The new text of `/etc/doas.conf` with `account`'s lines in the testbed's block replaced
/// by `rules`, or `None` when that changes nothing. Lines outside the block stay as they
/// are; the block (without lines, it disappears) moves to the end, because doas applies
/// the *last* matching rule. The text ends with a newline (doas reports a syntax error for
/// a last line without one).
pub(crate) fn merge_doas_conf(current: &str, account: &str, rules: &[String]) -> Option<String> {
    let mut outside = Vec::new();
    let mut block = Vec::new();
    let mut in_block = false;
    for line in current.lines() {
        if !in_block && line.trim() == DOAS_BLOCK_BEGIN {
            in_block = true;
        } else if in_block && line.trim() == DOAS_BLOCK_END {
            in_block = false;
        } else if in_block {
            block.push(line.to_owned());
        } else {
            outside.push(line);
        }
    }
    let mut new_block: Vec<String> = block
        .iter()
        .filter(|line| {
            !line.trim().is_empty() && !line.split_whitespace().any(|word| word == account)
        })
        .cloned()
        .collect();
    new_block.extend(rules.iter().cloned());
    let had_block = current.lines().any(|line| line.trim() == DOAS_BLOCK_BEGIN);
    let block_at_end = current
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .is_some_and(|line| line.trim() == DOAS_BLOCK_END);
    if new_block == block && (new_block.is_empty() || (had_block && block_at_end)) {
        return None;
    }
    while outside.last().is_some_and(|line| line.trim().is_empty()) {
        outside.pop();
    }
    let mut text = String::new();
    for line in outside {
        text.push_str(line);
        text.push('\n');
    }
    if !new_block.is_empty() {
        text.push_str(DOAS_BLOCK_BEGIN);
        text.push('\n');
        for line in &new_block {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(DOAS_BLOCK_END);
        text.push('\n');
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names_are_unique_and_short_enough() {
        let mut shells: Vec<Option<LoginShell>> = vec![None];
        shells.extend(LoginShell::ALL.into_iter().map(Some));
        shells.push(Some(LoginShell::Custom(PathBuf::from("/opt/shells/bash"))));
        let mut names = std::collections::BTreeSet::new();
        for shell in &shells {
            for escalation in Escalation::ALL {
                let name = escalation.account_name(shell.as_ref());
                assert!(name.len() <= 32, "{name}");
                assert!(name.starts_with(BECOME_USER_PREFIX), "{name}");
                // sudo ignores files in sudoers.d whose names contain a dot.
                assert!(!name.contains('.'), "{name}");
                assert!(names.insert(name.clone()), "{name} twice");
                let with_files = account(
                    escalation,
                    shell.as_ref(),
                    &[(".bashrc".into(), b"x".to_vec())],
                );
                assert!(with_files.len() <= 32, "{with_files}");
                assert!(names.insert(with_files.clone()), "{with_files} twice");
            }
        }
        assert_eq!(
            Escalation::SudoNoPassword.account_name(None),
            "swiftide-b-sudo-nopw"
        );
        assert_eq!(
            Escalation::DoasPassword.account_name(Some(&LoginShell::Fish)),
            "swiftide-b-fish-doas-pw"
        );
        let docker: std::collections::BTreeSet<_> =
            Escalation::ALL.iter().map(|e| e.docker_user()).collect();
        assert_eq!(docker.len(), Escalation::ALL.len());
    }

    #[test]
    fn rules_are_as_documented() {
        let a = "acct";
        assert_eq!(
            Escalation::SudoNoPassword.sudoers_rules(a).unwrap(),
            "acct ALL=(ALL:ALL) NOPASSWD: ALL\n"
        );
        assert_eq!(
            Escalation::SudoPassword.sudoers_rules(a).unwrap(),
            "acct ALL=(ALL:ALL) ALL\n"
        );
        assert_eq!(
            Escalation::SudoRequireTty.sudoers_rules(a).unwrap(),
            "Defaults:acct requiretty\nacct ALL=(ALL:ALL) NOPASSWD: ALL\n"
        );
        assert_eq!(
            Escalation::SudoLecture.sudoers_rules(a).unwrap(),
            "Defaults:acct lecture=always\nacct ALL=(ALL:ALL) ALL\n"
        );
        for escalation in [
            Escalation::SudoNotInSudoers,
            Escalation::DoasNoPassword,
            Escalation::DoasPassword,
            Escalation::Su,
        ] {
            assert_eq!(escalation.sudoers_rules(a), None);
        }
        assert_eq!(
            Escalation::DoasNoPassword.doas_rules(a),
            [
                "permit nopass acct as root",
                "permit nopass acct as swiftide-become-target"
            ]
        );
        assert_eq!(
            Escalation::DoasPassword.doas_rules(a),
            [
                "permit acct as root",
                "permit acct as swiftide-become-target"
            ]
        );
        assert!(Escalation::Su.doas_rules(a).is_empty());
    }

    #[test]
    fn doas_block_keeps_other_lines_and_moves_to_the_end() {
        let rules = Escalation::DoasNoPassword.doas_rules("b-one");
        // A file without a trailing newline gets one, and the block.
        let merged = merge_doas_conf("permit alice as root", "b-one", &rules).unwrap();
        assert_eq!(
            merged,
            format!(
                "permit alice as root\n{DOAS_BLOCK_BEGIN}\npermit nopass b-one as root\n\
                 permit nopass b-one as swiftide-become-target\n{DOAS_BLOCK_END}\n"
            )
        );
        // Nothing changes the second time.
        assert_eq!(merge_doas_conf(&merged, "b-one", &rules), None);
        // Another account joins; a line added after the block by someone else stays, and
        // the block moves below it.
        let edited = format!("{merged}permit bob as root\n");
        let two = merge_doas_conf(
            &edited,
            "b-two",
            &Escalation::DoasPassword.doas_rules("b-two"),
        )
        .unwrap();
        assert_eq!(
            two,
            format!(
                "permit alice as root\npermit bob as root\n{DOAS_BLOCK_BEGIN}\n\
                 permit nopass b-one as root\npermit nopass b-one as swiftide-become-target\n\
                 permit b-two as root\npermit b-two as swiftide-become-target\n{DOAS_BLOCK_END}\n"
            )
        );
        // An account without doas rules loses its lines; an empty block disappears.
        let one = merge_doas_conf(&two, "b-two", &[]).unwrap();
        assert!(!one.contains("b-two"), "{one}");
        let none = merge_doas_conf(&one, "b-one", &[]).unwrap();
        assert_eq!(none, "permit alice as root\npermit bob as root\n");
        assert_eq!(merge_doas_conf(&none, "b-one", &[]), None);
        assert_eq!(merge_doas_conf("", "b-one", &[]), None);
    }

    #[test]
    fn docker_images_use_the_same_passwords() {
        let openssh = include_str!("../docker/Dockerfile");
        let dropbear = include_str!("../docker/dropbear/Dockerfile");
        for (dockerfile, name) in [(openssh, "openssh"), (dropbear, "dropbear")] {
            for arg in [
                format!("ARG ROOT_PASSWORD={ROOT_PASSWORD}\n"),
                format!("ARG BECOME_TARGET_PASSWORD={BECOME_TARGET_PASSWORD}\n"),
            ] {
                assert!(dockerfile.contains(&arg), "{name}: {arg}");
            }
        }
        assert!(openssh.contains(&format!("ARG BECOME_PASSWORD={BECOME_PASSWORD}\n")));
        for escalation in Escalation::ALL {
            assert!(
                openssh.contains(escalation.docker_user()),
                "{}",
                escalation.docker_user()
            );
        }
    }
}
