//! The login shell's start-up cost on a connection: measured on the connection's first
//! command, shown in [`PoolStats::login_shell_startup`](crate::PoolStats::login_shell_startup),
//! and reported once at `warn` level when it is large.
//!
//! # Why it matters
//!
//! sshd and Dropbear run every command through the account's login shell, and its start-up
//! files run for each one: Debian's bash reads `~/.bashrc` even for a command over SSH, and
//! a `pyenv init`, `nvm` or `conda` hook above the file's "not interactive" guard adds
//! 80–200 ms to every command that does not find a pre-started spare. That looks like a
//! slow executor; the warning says where the time goes.
//!
//! # What is measured
//!
//! The time from the server's reply to the exec request to the command's marker line. The
//! server replies once it has forked the session's process (OpenSSH and Dropbear both), and
//! the marker is the first thing the request prints, before it reads anything from the
//! client, so the link's delay is in both arrivals and cancels out: what remains is the
//! login shell's start (its rc files included) plus the bootstrap's own `/bin/sh` start
//! (about 1 ms; 2 ms where the bootstrap starts a new session, as on Dropbear). Commands on
//! pre-started spares send no exec request and measure nothing, which is the point of them.

use std::{sync::OnceLock, time::Duration};

/// A login shell start-up at least this long is reported. A quiet login shell starts in
/// 1–5 ms (bash from an empty `~/.bashrc` about 3 ms on the benchmark machine, dash under
/// 1 ms), a warm command takes 2–3 ms in all: 50 ms is ten times a quiet start, above what a
/// loaded server adds to one, and below the 80 ms and more of the inits that cause it.
pub(crate) const SLOW_LOGIN_SHELL: Duration = Duration::from_millis(50);

/// The figure of one connection, set by its first measured command.
#[derive(Debug, Default)]
pub(crate) struct LoginShellStartup(OnceLock<Duration>);

impl LoginShellStartup {
    /// The connection's figure, once measured.
    pub(crate) fn get(&self) -> Option<Duration> {
        self.0.get().copied()
    }

    /// Records `startup`, measured on a command of this connection, unless a figure is known
    /// already, and warns when it is [large](SLOW_LOGIN_SHELL). `shell` is the login shell's
    /// name as the marker line gave it (`None`: not known).
    pub(crate) fn record(&self, startup: Duration, host: &str, port: u16, shell: Option<&str>) {
        if self.0.set(startup).is_err() {
            return;
        }
        let millis = startup.as_millis() as u64;
        tracing::debug!(
            host,
            port,
            startup_ms = millis,
            "login shell start-up measured"
        );
        if startup < SLOW_LOGIN_SHELL {
            return;
        }
        let shell = shell.filter(|name| !name.is_empty()).unwrap_or("unknown");
        let hint = match shell {
            "bash" => {
                "bash reads ~/.bashrc for commands over SSH (Debian and Ubuntu build it so): \
                 move lines such as `pyenv init`, `nvm` or `conda` below its \
                 `[ -z \"$PS1\" ] && return` guard (or into ~/.bash_profile)"
            }
            "zsh" => "zsh reads ~/.zshenv for every command: keep slow initialisation in ~/.zshrc",
            "fish" => {
                "fish runs config.fish for every command: put slow initialisation inside \
                 `if status is-interactive ... end`"
            }
            "tcsh" | "csh" => {
                "tcsh reads ~/.tcshrc (or ~/.cshrc) for every command: put slow initialisation \
                 inside `if ($?prompt) then ... endif`"
            }
            _ => {
                "its start-up files run for every command over SSH: move slow initialisation \
                 (pyenv, nvm, conda) where only interactive shells run it"
            }
        };
        tracing::warn!(
            host,
            port,
            login_shell = shell,
            startup_ms = millis,
            "the login shell ({shell}) of {host}:{port} takes {millis} ms to start, before every \
             command that finds no pre-started spare: {hint}; or log in as an account with a quiet \
             login shell"
        );
    }
}
