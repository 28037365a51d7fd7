//! Reads and writes of paths SFTP cannot carry (not valid UTF-8, see [`crate::files::sftp`]), as
//! shell scripts over exec: `cat` for a read, and for a write the same atomic replacement as
//! over SFTP (follow symlinks, private temporary file, keep the mode, `mv` over the target).
//! Failures are turned back into the typed errors an SFTP failure gives.
//!
//! # Remote requirements
//!
//! POSIX `sh`, `cat`, `mkdir -p`, `mv`, `chmod`, `chown`, `readlink` and `stat -c %a`/`%u:%g`.

use std::path::Path;

use crate::{
    command::ExitStatus,
    error::{Error, Result, SftpStatus},
    executor::SshExecutor,
    files::{
        FileRule, ModeRule,
        error::{EISDIR, ELOOP, ENOENT, os_error_reason},
        own_script::{quoted_path, run_collect},
    },
};

/// Runs a script that only reads: one whose connection (or runner) was lost under it is asked
/// again, once, on a new one, since running it twice changes nothing. (Dropbear has been
/// seen to drop a connection that many polls' execs raced on; the next one serves.)
async fn run_reading(
    executor: &SshExecutor,
    script: &[u8],
) -> Result<(ExitStatus, crate::files::own_script::Collected)> {
    match run_collect(executor, script, Vec::new()).await {
        Err(Error::ConnectionLost { .. } | Error::RunnerLost { .. }) => {
            run_collect(executor, script, Vec::new()).await
        }
        other => other,
    }
}

/// The error number whose text is `text` (`"No such file or directory"` → 2), including
/// dash's own wording for a redirection into a missing directory.
fn errno_of(text: &str) -> Option<i32> {
    if text == "Directory nonexistent" {
        return Some(ENOENT);
    }
    (1..=133).find(|&code| os_error_reason(code) == text)
}

/// Turns a failed script's last stderr line (`cat: x: Is a directory`) into the same typed
/// error an SFTP failure gives.
fn script_failure(
    executor: &SshExecutor,
    operation: &'static str,
    path: &Path,
    status: &ExitStatus,
    stderr: &[u8],
) -> Error {
    if !matches!(status, ExitStatus::Code(_)) {
        return Error::ConnectionLost {
            host: executor.inner.config.host.clone(),
            port: executor.inner.config.port,
        };
    }
    let stderr = String::from_utf8_lossy(stderr);
    let line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let text = line.rsplit(": ").next().unwrap_or(line).trim();
    match errno_of(text) {
        Some(code) => executor.file_error(operation, path, code),
        None => executor.file_failure(
            operation,
            path.to_string_lossy(),
            line,
            Some(SftpStatus::Failure),
        ),
    }
}

/// Runs a script that reads or writes `path` and returns its stdout, or the typed error
/// its stderr describes.
async fn run_file_script(
    executor: &SshExecutor,
    operation: &'static str,
    path: &Path,
    script: &[u8],
    stdin: Vec<u8>,
) -> Result<Vec<u8>> {
    let (status, output) = run_collect(executor, script, stdin).await?;
    if status.success() {
        Ok(output.stdout)
    } else {
        Err(script_failure(
            executor,
            operation,
            path,
            &status,
            &output.stderr,
        ))
    }
}

/// Reads a file with `cat` (for paths SFTP cannot carry).
pub(crate) async fn read_via_exec(executor: &SshExecutor, path: &Path) -> Result<Vec<u8>> {
    let mut script = b"exec cat -- ".to_vec();
    script.extend_from_slice(&quoted_path(path)?);
    run_file_script(executor, "read", path, &script, Vec::new()).await
}

/// Up to `max` bytes of `path` from `offset`, or `None` when it does not exist (for servers
/// without SFTP).
pub(crate) async fn read_range_via_exec(
    executor: &SshExecutor,
    path: &Path,
    offset: u64,
    max: u64,
) -> Result<Option<Vec<u8>>> {
    let mut script = b"f=".to_vec();
    script.extend_from_slice(&quoted_path(path)?);
    script.extend_from_slice(
        format!(
            "\n[ -e \"$f\" ] || exit 3\ntail -c +{} -- \"$f\" | head -c {max}\n",
            offset.saturating_add(1)
        )
        .as_bytes(),
    );
    let (status, output) = run_reading(executor, &script).await?;
    match status {
        ExitStatus::Code(0) => Ok(Some(output.stdout)),
        ExitStatus::Code(3) => Ok(None),
        other => Err(script_failure(
            executor,
            "read",
            path,
            &other,
            &output.stderr,
        )),
    }
}

/// The names in directory `path` (with `ls -A`, one a line), or `None` when it does not
/// exist (for servers without SFTP). Names with a newline are not listed.
pub(crate) async fn dir_names_via_exec(
    executor: &SshExecutor,
    path: &Path,
) -> Result<Option<Vec<String>>> {
    let mut script = b"d=".to_vec();
    script.extend_from_slice(&quoted_path(path)?);
    script.extend_from_slice(b"\n[ -d \"$d\" ] || exit 3\nexec ls -A -- \"$d\"\n");
    let (status, output) = run_reading(executor, &script).await?;
    match status {
        ExitStatus::Code(0) => Ok(Some(
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(str::to_owned)
                .collect(),
        )),
        ExitStatus::Code(3) => Ok(None),
        other => Err(script_failure(
            executor,
            "list",
            path,
            &other,
            &output.stderr,
        )),
    }
}

/// The atomic write as a script: follow symlinks, refuse directories, `cat` stdin into a
/// private temporary file next to the target, give it the old owner and group where the
/// script may (as root: an escalated handle), then the owner and group `rule` asks for (which
/// must succeed), then its mode (else the old mode, or 0644), `mv` it over. The owner before
/// the mode: `chown` clears set-id bits.
fn write_script(path: &Path, nonce: u64, rule: FileRule) -> Result<Vec<u8>> {
    let mut script = b"t=".to_vec();
    script.extend_from_slice(&quoted_path(path)?);
    script.push(b'\n');
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        script.extend_from_slice(b"mkdir -p -- ");
        script.extend_from_slice(&quoted_path(parent)?);
        script.extend_from_slice(b" 2>/dev/null\n");
    }
    script.extend_from_slice(
        format!(
            r#"n=0
while [ -L "$t" ]; do
  n=$((n+1))
  if [ "$n" -gt 40 ]; then echo "write: {loop}" >&2; exit 1; fi
  l=$(readlink -- "$t" && echo x) || exit 1
  l=${{l%??}}
  case $l in
    /*) t=$l ;;
    *) t=${{t%/*}}/$l ;;
  esac
done
if [ -d "$t" ]; then echo "write: {isdir}" >&2; exit 1; fi
tmp=${{t%/*}}/.${{t##*/}}.swiftide-{nonce:016x}.tmp
trap 'rm -f -- "$tmp"' EXIT
(umask 077 && exec cat > "$tmp") || exit 1
if [ -e "$t" ]; then o=$(stat -c %u:%g -- "$t") && chown "$o" "$tmp" 2>/dev/null; fi
{chown}{chmod}mv -f -- "$tmp" "$t" || exit 1
"#,
            chown = match (rule.uid, rule.gid) {
                (None, None) => String::new(),
                (uid, gid) => format!(
                    "chown {}{} \"$tmp\" || exit 1\n",
                    uid.map(|u| u.to_string()).unwrap_or_default(),
                    gid.map(|g| format!(":{g}")).unwrap_or_default()
                ),
            },
            chmod = match rule.mode {
                ModeRule::Set(bits) => format!("chmod {:o} \"$tmp\" || exit 1\n", bits & 0o7777),
                ModeRule::Keep | ModeRule::KeepOrNew(_) => format!(
                    "if [ -e \"$t\" ]; then m=$(stat -c %a -- \"$t\") && chmod \"$m\" \"$tmp\" || exit 1\n\
                     else chmod {:o} \"$tmp\" || exit 1; fi\n",
                    rule.mode.bits(None) & 0o7777
                ),
            },
            loop = os_error_reason(ELOOP),
            isdir = os_error_reason(EISDIR),
        )
        .as_bytes(),
    );
    Ok(script)
}

/// Writes a file atomically with a shell script, the content on stdin (for paths SFTP cannot
/// carry, and hosts without SFTP). The existing owner and group are kept where the script
/// may set them (as root); `rule` as for [`write_atomic`](SshExecutor::write_atomic).
pub(crate) async fn write_via_exec(
    executor: &SshExecutor,
    path: &Path,
    content: &[u8],
    rule: FileRule,
) -> Result<()> {
    let script = write_script(path, rand::random(), rule)?;
    run_file_script(executor, "write", path, &script, content.to_vec())
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::error::EACCES;

    #[test]
    fn error_texts_map_back_to_numbers() {
        assert_eq!(errno_of("No such file or directory"), Some(ENOENT));
        assert_eq!(errno_of("Is a directory"), Some(EISDIR));
        assert_eq!(errno_of("Permission denied"), Some(EACCES));
        assert_eq!(errno_of("Directory nonexistent"), Some(ENOENT));
        assert_eq!(errno_of("whatever"), None);
    }

    /// The shell write gives the bits each [`ModeRule`] says, as the SFTP write does
    /// ([`ModeRule::bits`]): run here with `sh`, as a host without SFTP runs it.
    #[test]
    fn the_shell_write_follows_the_mode_rule() {
        use std::{io::Write, os::unix::fs::PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, mode: ModeRule| {
            let path = dir.path().join(name);
            let script = write_script(&path, 7, mode.into()).unwrap();
            let mut child = std::process::Command::new("sh")
                .arg("-c")
                .arg(std::str::from_utf8(&script).unwrap())
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(b"new").unwrap();
            assert!(child.wait().unwrap().success());
            assert_eq!(std::fs::read(&path).unwrap(), b"new");
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777
        };
        let existing = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, "old").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        for (rule, over_existing, new) in [
            (ModeRule::Keep, 0o600, 0o644),
            (ModeRule::KeepOrNew(0o750), 0o600, 0o750),
            (ModeRule::Set(0o640), 0o640, 0o640),
        ] {
            existing("old");
            assert_eq!(write("old", rule), over_existing, "{rule:?}");
            assert_eq!(rule.bits(Some(0o600)), over_existing, "{rule:?}");
            let _ = std::fs::remove_file(dir.path().join("fresh"));
            assert_eq!(write("fresh", rule), new, "{rule:?}");
            assert_eq!(rule.bits(None), new, "{rule:?}");
        }
    }

    /// An owner or group the rule asks for is set by the shell write (here the group this
    /// process already has, which any account may set), and one that cannot be set fails
    /// the write and leaves the old file.
    #[test]
    fn the_shell_write_sets_the_group_asked_for_or_fails() {
        use std::{io::Write, os::unix::fs::MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        std::fs::write(&path, "old").unwrap();
        let gid = std::fs::metadata(&path).unwrap().gid();
        let write = |rule: FileRule| {
            let script = write_script(&path, 9, rule).unwrap();
            let mut child = std::process::Command::new("sh")
                .arg("-c")
                .arg(std::str::from_utf8(&script).unwrap())
                .stdin(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(b"new").unwrap();
            child.wait().unwrap().success()
        };
        let group = FileRule {
            gid: Some(gid),
            ..ModeRule::Keep.into()
        };
        assert!(write(group));
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().gid(), gid);
        // A group no account is in (root may give any, so only a non-root run checks this).
        std::fs::write(&path, "old").unwrap();
        let refused = FileRule {
            gid: Some(u32::MAX - 1),
            ..ModeRule::Keep.into()
        };
        if std::fs::metadata("/proc/self")
            .map(|m| m.uid())
            .unwrap_or(0)
            != 0
        {
            assert!(!write(refused));
            assert_eq!(std::fs::read(&path).unwrap(), b"old");
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().count() == 1,
            "a temporary file was left"
        );
    }
}
