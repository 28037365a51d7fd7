//! Running Dropbear instead of OpenSSH's sshd.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{TESTBED_ENV_VAR, TESTBED_ID_ENV_VAR, TestbedError, system};

/// Where Dropbear is expected (Debian's `dropbear-bin`).
pub const DEFAULT_DROPBEAR_PATH: &str = "/usr/sbin/dropbear";

/// Dropbear's key tool.
const DROPBEARKEY_PATH: &str = "/usr/bin/dropbearkey";

/// The SFTP server that Debian's Dropbear runs for the `sftp` subsystem (compiled in as
/// `SFTPSERVER_PATH`; `strings /usr/sbin/dropbear | grep sftp`). On Debian it is a
/// symbolic link to `/usr/lib/openssh/sftp-server` (package `openssh-sftp-server`).
pub const DROPBEAR_SFTP_SERVER_PATH: &str = "/usr/lib/sftp-server";

/// The line Dropbear (`-F -E`) logs once its listening sockets are bound (it is not
/// logged when binding fails).
pub(crate) const READY_LINE: &str = "Not backgrounding";

/// The `PATH` of Dropbear and its helpers. Sessions get Dropbear's own default `PATH`.
const HELPER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Hides the file `$0` behind `/dev/null` (in the private mount namespace `unshare`
/// created) and runs the rest of the arguments (Dropbear) in its place.
const HIDE_SCRIPT: &str = r#"mount --bind /dev/null "$0" && exec "$@""#;

/// The Dropbear binary.
pub(crate) fn dropbear_path() -> Result<PathBuf, TestbedError> {
    let path = PathBuf::from(DEFAULT_DROPBEAR_PATH);
    if path.is_file() {
        Ok(path)
    } else {
        Err(TestbedError::ProgramNotFound {
            path,
            hint: "install it with `apt-get install -y dropbear-bin`".to_owned(),
        })
    }
}

/// The file behind [`DROPBEAR_SFTP_SERVER_PATH`] (links resolved), if it exists.
pub(crate) fn sftp_server() -> Option<PathBuf> {
    fs::canonicalize(DROPBEAR_SFTP_SERVER_PATH)
        .ok()
        .filter(|path| path.is_file())
}

/// The error for a Dropbear testbed with SFTP when the SFTP server is missing.
pub(crate) fn sftp_server_missing() -> TestbedError {
    TestbedError::ProgramNotFound {
        path: PathBuf::from(DROPBEAR_SFTP_SERVER_PATH),
        hint: "Dropbear runs it for the sftp subsystem; install it with `apt-get install -y \
               openssh-sftp-server`, or start the testbed with sftp(false)"
            .to_owned(),
    }
}

/// Generates an ed25519 host key in Dropbear's format at `path` and returns its public
/// key as `ssh-ed25519 AAAA...` (no comment).
pub(crate) fn generate_host_key(path: &Path) -> Result<String, TestbedError> {
    let tool = Path::new(DROPBEARKEY_PATH);
    if !tool.is_file() {
        return Err(TestbedError::ProgramNotFound {
            path: tool.to_owned(),
            hint: "install it with `apt-get install -y dropbear-bin`".to_owned(),
        });
    }
    system::run_checked(
        Command::new(tool).args(["-t", "ed25519", "-f"]).arg(path),
        &format!("`dropbearkey -t ed25519 -f {}`", path.display()),
    )?;
    let output = system::run_checked(
        Command::new(tool).args(["-y", "-f"]).arg(path),
        &format!("`dropbearkey -y -f {}`", path.display()),
    )?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|line| line.starts_with("ssh-ed25519 "))
        .map(|line| {
            line.split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .ok_or_else(|| {
            TestbedError::io(
                format!("reading the public key of {}", path.display()),
                std::io::Error::other("`dropbearkey -y` printed no ssh-ed25519 line"),
            )
        })
}

/// Everything that goes into Dropbear's command line.
#[derive(Debug)]
pub(crate) struct DropbearParams<'a> {
    pub(crate) dropbear: &'a Path,
    pub(crate) address: SocketAddr,
    pub(crate) host_key: &'a Path,
    pub(crate) pid_file: &'a Path,
    pub(crate) password_auth: bool,
    /// Keepalive interval (`-K`), when set.
    pub(crate) keepalive: Option<u32>,
    /// The SFTP server file to hide (run Dropbear in a private mount namespace).
    pub(crate) hide_sftp_server: Option<&'a Path>,
}

/// Dropbear's own arguments.
pub(crate) fn arguments(params: &DropbearParams<'_>) -> Vec<String> {
    let mut args: Vec<String> = ["-F", "-E", "-e", "-m"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    if !params.password_auth {
        args.push("-s".to_owned());
    }
    args.push("-P".to_owned());
    args.push(params.pid_file.to_string_lossy().into_owned());
    args.push("-r".to_owned());
    args.push(params.host_key.to_string_lossy().into_owned());
    if let Some(interval) = params.keepalive {
        args.push("-K".to_owned());
        args.push(interval.to_string());
    }
    args.push("-p".to_owned());
    // "[::1]:2222" for IPv6, "127.0.0.1:2222" otherwise.
    args.push(params.address.to_string());
    args
}

/// The program and arguments to run: Dropbear itself, or, to hide the SFTP server,
/// `unshare --mount --propagation private -- sh -c 'mount --bind /dev/null "$0" && exec
/// "$@"' <sftp-server> <dropbear> <args...>` (which ends up as Dropbear, same pid).
pub(crate) fn program_and_args(params: &DropbearParams<'_>) -> (PathBuf, Vec<String>) {
    let args = arguments(params);
    match params.hide_sftp_server {
        None => (params.dropbear.to_owned(), args),
        Some(sftp) => {
            let mut all = system::private_mount_namespace_args(HIDE_SCRIPT);
            all.push(sftp.to_string_lossy().into_owned());
            all.push(params.dropbear.to_string_lossy().into_owned());
            all.extend(args);
            (system::unshare_path(), all)
        }
    }
}

/// The environment Dropbear starts with. `-e` passes it on to every session, so the
/// testbed variables reach the commands (Dropbear then sets `USER`, `HOME`, `SHELL`,
/// `PATH`, `SSH_*` itself). `SHLVL=1`, like sshd's testbed sessions, keeps Debian's bash
/// from sourcing `~/.bashrc` for `ssh host command` (unless `quiet_bashrc` is off: an
/// account with [home files](crate::TestbedBuilder::home_file)).
pub(crate) fn environment(testbed_id: &str, quiet_bashrc: bool) -> Vec<(&'static str, String)> {
    let mut environment = vec![
        ("PATH", HELPER_PATH.to_owned()),
        (TESTBED_ENV_VAR, "1".to_owned()),
        (TESTBED_ID_ENV_VAR, testbed_id.to_owned()),
    ];
    if quiet_bashrc {
        environment.push(("SHLVL", "1".to_owned()));
    }
    environment
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn params(hide: Option<&Path>) -> DropbearParams<'_> {
        DropbearParams {
            dropbear: Path::new("/usr/sbin/dropbear"),
            address: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2222),
            host_key: Path::new("/d/hk"),
            pid_file: Path::new("/d/pid"),
            password_auth: false,
            keepalive: None,
            hide_sftp_server: hide,
        }
    }

    #[test]
    fn command_lines() {
        let (program, args) = program_and_args(&params(None));
        assert_eq!(program, Path::new("/usr/sbin/dropbear"));
        assert_eq!(
            args.join(" "),
            "-F -E -e -m -s -P /d/pid -r /d/hk -p 127.0.0.1:2222"
        );

        let sftp = Path::new("/usr/lib/openssh/sftp-server");
        let (program, args) = program_and_args(&params(Some(sftp)));
        assert!(program.ends_with("unshare"), "{}", program.display());
        assert_eq!(
            args.join(" "),
            format!(
                "--mount --propagation private -- /bin/sh -c {HIDE_SCRIPT} \
                 /usr/lib/openssh/sftp-server /usr/sbin/dropbear \
                 -F -E -e -m -s -P /d/pid -r /d/hk -p 127.0.0.1:2222"
            )
        );

        let mut p = params(None);
        p.password_auth = true;
        p.keepalive = Some(3);
        p.address = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 2200);
        assert_eq!(
            arguments(&p).join(" "),
            "-F -E -e -m -P /d/pid -r /d/hk -K 3 -p [::1]:2200"
        );
    }
}
