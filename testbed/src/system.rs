//! Users, helper commands and key generation.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use crate::{KEY_PASSPHRASE, TestbedError, UNPRIVILEGED_USER, USER_PASSWORD};

/// bcrypt-pbkdf rounds of the encrypted client key. ssh-keygen's default is 16, which
/// costs ~0.6 s per key load in an unoptimised (debug) Rust client; 4 rounds keep tests
/// fast and still make a properly encrypted key.
pub(crate) const ENCRYPTED_KEY_KDF_ROUNDS: u32 = 4;

/// Runs a command to completion and fails unless it exits successfully.
pub(crate) fn run_checked(command: &mut Command, what: &str) -> Result<Output, TestbedError> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| TestbedError::io(format!("running {what}"), e))?;
    check_output(output, what)
}

fn check_output(output: Output, what: &str) -> Result<Output, TestbedError> {
    if output.status.success() {
        Ok(output)
    } else {
        Err(TestbedError::Command {
            what: what.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// The path of a system administration tool: `/usr/sbin/<name>` when it exists (it is
/// not always on a non-login `PATH`), otherwise the bare name looked up on `PATH`.
pub(crate) fn sbin_tool(name: &str) -> PathBuf {
    let path = Path::new("/usr/sbin").join(name);
    if path.is_file() {
        path
    } else {
        PathBuf::from(name)
    }
}

/// `unshare` (util-linux): `/usr/bin/unshare` when it exists, otherwise looked up on
/// `PATH`.
pub(crate) fn unshare_path() -> PathBuf {
    let path = Path::new("/usr/bin/unshare");
    if path.is_file() {
        path.to_owned()
    } else {
        PathBuf::from("unshare")
    }
}

/// `unshare`'s arguments that run `/bin/sh -c script` in a private mount namespace (mounts
/// made there stay there); the script's `$0`, `$1`, ... follow.
pub(crate) fn private_mount_namespace_args(script: &str) -> Vec<String> {
    [
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        script,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// The effective uid of this process, from `/proc/self/status`.
pub(crate) fn effective_uid() -> Result<u32, TestbedError> {
    let status = fs::read_to_string("/proc/self/status")
        .map_err(|e| TestbedError::io("reading /proc/self/status", e))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|fields| fields.split_whitespace().nth(1))
        .and_then(|uid| uid.parse().ok())
        .ok_or_else(|| {
            TestbedError::io(
                "reading the effective uid from /proc/self/status",
                std::io::Error::new(std::io::ErrorKind::InvalidData, "no Uid: line"),
            )
        })
}

/// Looks a user up in `/etc/passwd`: name and uid of every entry matching `pred`.
fn passwd_find(pred: impl Fn(&str, u32) -> bool) -> Option<(String, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let uid = fields.nth(1)?.parse().ok()?;
        pred(name, uid).then(|| (name.to_owned(), uid))
    })
}

/// The name of the user with the given uid.
pub(crate) fn user_name(uid: u32) -> Result<String, TestbedError> {
    if let Some((name, _)) = passwd_find(|_, u| u == uid) {
        return Ok(name);
    }
    // Users from other NSS sources (LDAP, ...).
    let output = run_checked(Command::new("id").arg("-un"), "`id -un`")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The uid of a user, if the account exists.
fn user_uid(name: &str) -> Option<u32> {
    passwd_find(|n, _| n == name).map(|(_, uid)| uid)
}

/// Whether this process already created/unlocked the unprivileged account.
static UNPRIVILEGED_USER_READY: Mutex<bool> = Mutex::new(false);

/// How often account changes are retried: another test process may hold the
/// `/etc/passwd`/`/etc/shadow` locks at the same moment.
const ACCOUNT_ATTEMPTS: u32 = 30;
const ACCOUNT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Creates [`UNPRIVILEGED_USER`] if missing and sets its password to [`USER_PASSWORD`]
/// (which also unlocks it: sshd without PAM refuses accounts whose password is locked).
///
/// Done once per process; tolerates other processes doing the same concurrently.
/// Requires root. Returns the uid.
pub(crate) fn ensure_unprivileged_user() -> Result<u32, TestbedError> {
    let mut ready = UNPRIVILEGED_USER_READY
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if *ready && let Some(uid) = user_uid(UNPRIVILEGED_USER) {
        return Ok(uid);
    }

    let useradd = sbin_tool("useradd");
    let mut attempt = 0;
    let uid = loop {
        if let Some(uid) = user_uid(UNPRIVILEGED_USER) {
            break uid;
        }
        attempt += 1;
        let result = run_checked(
            Command::new(&useradd).args(["--create-home", "--shell", "/bin/sh", UNPRIVILEGED_USER]),
            &format!("`useradd {UNPRIVILEGED_USER}`"),
        );
        if let Some(uid) = user_uid(UNPRIVILEGED_USER) {
            // Created by us or, concurrently, by another process.
            break uid;
        }
        if attempt >= ACCOUNT_ATTEMPTS {
            result?;
            return Err(TestbedError::io(
                format!("creating user {UNPRIVILEGED_USER}"),
                std::io::Error::other("useradd succeeded but the user is not in /etc/passwd"),
            ));
        }
        thread::sleep(ACCOUNT_RETRY_DELAY);
    };

    set_password(UNPRIVILEGED_USER, USER_PASSWORD)?;
    *ready = true;
    Ok(uid)
}

/// Sets the password of `user` with `chpasswd` (a real hash, as PAM's `pam_unix` expects,
/// which also unlocks the account), retrying while another process holds the
/// `/etc/shadow` lock. Requires root.
pub(crate) fn set_password(user: &str, password: &str) -> Result<(), TestbedError> {
    let chpasswd = sbin_tool("chpasswd");
    let mut attempt = 0;
    loop {
        attempt += 1;
        match run_chpasswd(&chpasswd, user, password) {
            Ok(()) => return Ok(()),
            Err(e) if attempt >= ACCOUNT_ATTEMPTS => return Err(e),
            Err(_) => thread::sleep(ACCOUNT_RETRY_DELAY),
        }
    }
}

fn run_chpasswd(chpasswd: &Path, user: &str, password: &str) -> Result<(), TestbedError> {
    let what = format!("`chpasswd` for {user}");
    let mut child = Command::new(chpasswd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TestbedError::io(format!("running {what}"), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(format!("{user}:{password}\n").as_bytes())
            .map_err(|e| TestbedError::io(format!("writing to {what}"), e))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| TestbedError::io(format!("waiting for {what}"), e))?;
    check_output(output, &what).map(drop)
}

/// Changes the owner of `path` to `user` and its login group.
pub(crate) fn chown(path: &Path, user: &str) -> Result<(), TestbedError> {
    run_checked(
        Command::new("chown").arg(format!("{user}:")).arg(path),
        &format!("`chown {user}: {}`", path.display()),
    )
    .map(drop)
}

/// Changes the owner of every path to `user` and its login group (`chown -h`: symbolic
/// links themselves, never their targets).
pub(crate) fn chown_many(paths: &[PathBuf], user: &str) -> Result<(), TestbedError> {
    if paths.is_empty() {
        return Ok(());
    }
    run_checked(
        Command::new("chown")
            .arg("-h")
            .arg(format!("{user}:"))
            .arg("--")
            .args(paths),
        &format!("`chown -h {user}:` for {} paths", paths.len()),
    )
    .map(drop)
}

/// Sets the permission bits of `path`.
pub(crate) fn chmod(path: &Path, mode: u32) -> Result<(), TestbedError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| TestbedError::io(format!("chmod {mode:o} {}", path.display()), e))
}

/// Writes a file with the given mode (the mode applies when the file is created).
pub(crate) fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), TestbedError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| TestbedError::io(format!("creating {}", path.display()), e))?;
    file.write_all(contents)
        .map_err(|e| TestbedError::io(format!("writing {}", path.display()), e))
}

/// A private key file's contents and the matching public key line.
#[derive(Debug, Clone)]
pub(crate) struct KeyPair {
    pub(crate) private: Vec<u8>,
    /// `ssh-ed25519 AAAA... comment`
    pub(crate) public: String,
}

impl KeyPair {
    /// Writes `<path>` (0600) and `<path>.pub` (0644).
    pub(crate) fn write(&self, path: &Path) -> Result<(), TestbedError> {
        write_file(path, &self.private, 0o600)?;
        write_file(
            &pub_path(path),
            format!("{}\n", self.public.trim_end()).as_bytes(),
            0o644,
        )
    }
}

fn pub_path(path: &Path) -> PathBuf {
    let mut os = path.as_os_str().to_owned();
    os.push(".pub");
    PathBuf::from(os)
}

/// Starts `ssh-keygen` creating an ed25519 key at `path`.
fn spawn_keygen(path: &Path, passphrase: &str, comment: &str) -> Result<Child, TestbedError> {
    let mut command = Command::new("ssh-keygen");
    command.args(["-q", "-t", "ed25519", "-N", passphrase, "-C", comment]);
    if !passphrase.is_empty() {
        command.args(["-a", &ENCRYPTED_KEY_KDF_ROUNDS.to_string()]);
    }
    command
        .arg("-f")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TestbedError::io("running ssh-keygen (is openssh-client installed?)", e))
}

fn finish_keygen(child: Child, path: &Path) -> Result<KeyPair, TestbedError> {
    let what = format!("`ssh-keygen -f {}`", path.display());
    let output = child
        .wait_with_output()
        .map_err(|e| TestbedError::io(format!("waiting for {what}"), e))?;
    check_output(output, &what)?;
    let private =
        fs::read(path).map_err(|e| TestbedError::io(format!("reading {}", path.display()), e))?;
    let public_path = pub_path(path);
    let public = fs::read_to_string(&public_path)
        .map_err(|e| TestbedError::io(format!("reading {}", public_path.display()), e))?;
    Ok(KeyPair {
        private,
        public: public.trim().to_owned(),
    })
}

/// Generates an unencrypted ed25519 key at `path` (+ `.pub`).
pub(crate) fn generate_key(path: &Path, comment: &str) -> Result<KeyPair, TestbedError> {
    let child = spawn_keygen(path, "", comment)?;
    finish_keygen(child, path)
}

/// The client keys, shared by all testbeds of a process (generating the encrypted one
/// costs a noticeable fraction of a second).
#[derive(Debug, Clone)]
pub(crate) struct ClientKeys {
    pub(crate) plain: KeyPair,
    pub(crate) encrypted: KeyPair,
    pub(crate) unauthorized: KeyPair,
}

static CLIENT_KEYS: Mutex<Option<ClientKeys>> = Mutex::new(None);

/// The process-wide client keys, generated on first use.
pub(crate) fn client_keys() -> Result<ClientKeys, TestbedError> {
    let mut cached = CLIENT_KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(keys) = cached.as_ref() {
        return Ok(keys.clone());
    }
    let dir = tempfile::Builder::new()
        .prefix("swiftide-ssh-testbed-keys-")
        .tempdir()
        .map_err(|e| TestbedError::io("creating a temporary directory for client keys", e))?;
    let plain_path = dir.path().join("id_ed25519");
    let encrypted_path = dir.path().join("id_ed25519_encrypted");
    let unauthorized_path = dir.path().join("id_ed25519_unauthorized");
    // Generate the three keys in parallel.
    let plain = spawn_keygen(&plain_path, "", "swiftide-ssh-testbed")?;
    let encrypted = spawn_keygen(
        &encrypted_path,
        KEY_PASSPHRASE,
        "swiftide-ssh-testbed-encrypted",
    );
    let unauthorized = spawn_keygen(&unauthorized_path, "", "swiftide-ssh-testbed-unauthorized");
    // Reap every started child even if a later one failed to start.
    let plain = finish_keygen(plain, &plain_path);
    let encrypted = encrypted.and_then(|child| finish_keygen(child, &encrypted_path));
    let unauthorized = unauthorized.and_then(|child| finish_keygen(child, &unauthorized_path));
    let keys = ClientKeys {
        plain: plain?,
        encrypted: encrypted?,
        unauthorized: unauthorized?,
    };
    *cached = Some(keys.clone());
    Ok(keys)
}

/// The OpenSSH client ready to run `remote_command` as `destination` (`user@host`) on `port`
/// with the key `key`, strict host-key checking against `known_hosts` only, batch mode, no
/// `ssh_config`, `extra_options` (`-o` values) and standard input `/dev/null`. The arguments
/// end with `-- user@host remote_command`.
pub(crate) fn ssh_client(
    key: &Path,
    port: u16,
    known_hosts: &Path,
    extra_options: &[&str],
    destination: &str,
    remote_command: &str,
) -> Command {
    let mut command = Command::new("ssh");
    command
        .arg("-F")
        .arg("/dev/null")
        .arg("-i")
        .arg(key)
        .arg("-p")
        .arg(port.to_string())
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "UpdateHostKeys=no",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ]);
    for option in extra_options {
        command.arg("-o").arg(option);
    }
    command
        .args(["-o", "ConnectTimeout=10", "--", destination, remote_command])
        .stdin(Stdio::null());
    command
}
