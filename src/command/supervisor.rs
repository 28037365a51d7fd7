//! Stopping a command: the supervisor that runs beside it in its process group, and the
//! kill request sent from a second channel when there is no supervisor.

/// How the executor will stop the command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Supervision {
    /// SIGKILL the group when the connection is gone.
    pub(crate) kill_on_disconnect: bool,
    /// Time between SIGTERM and SIGKILL on a requested kill.
    pub(crate) grace: std::time::Duration,
    /// The command runs in a pseudo-terminal: its stdin is the terminal's input, not a
    /// control line, so the supervisor watches the command's leader instead (see
    /// [`supervisor_line`]) and kills come from a second channel.
    pub(crate) terminal: bool,
    /// The command's stdin comes from the caller (a FIFO the executor feeds, see
    /// `SshExecutor::spawn`), not `/dev/null`.
    pub(crate) caller_stdin: bool,
}

impl Supervision {
    /// The executor's settings for stopping commands.
    pub(crate) fn of(config: &crate::config::Config) -> Self {
        Self {
            kill_on_disconnect: config.kill_on_disconnect,
            grace: config.kill_grace,
            terminal: false,
            caller_stdin: false,
        }
    }

    /// The same settings for a command in a pseudo-terminal.
    pub(crate) fn terminal(self) -> Self {
        Self {
            terminal: true,
            ..self
        }
    }

    /// The same settings for a command whose stdin the caller feeds.
    pub(crate) fn caller_stdin(self) -> Self {
        Self {
            caller_stdin: true,
            ..self
        }
    }

    /// Whether the command's stdin is `/dev/null` (as under LocalExecutor).
    pub(crate) fn null_stdin(self) -> bool {
        !self.terminal && !self.caller_stdin
    }
}

/// The supervisor: a background job in the command's process group, reading the channel's
/// stdin (kept on fd 3 because a background job's stdin is otherwise `/dev/null`).
///
/// * `K` on a line: SIGTERM to the whole group, up to `grace` for the leader to go, then
///   SIGKILL to the group (itself included). It ignores SIGTERM so that it survives its own
///   first signal.
/// * EOF without `K`: sshd closed the pipe, so the connection or channel is gone. sshd
///   itself leaves a non-PTY command running then; with `kill_on_disconnect` the supervisor
///   SIGKILLs the group if the leader still runs. After a normal end the leader is gone and
///   the supervisor exits quietly, so redirected background jobs survive, as under
///   LocalExecutor.
///
/// Its stdout and stderr are `/dev/null`, so it never holds the channel open. It costs one
/// forked shell per command and no polling. dash's `kill` has no `--`, hence `kill -SIG -PID`.
///
/// One line of [login-shell-neutral](mod@crate::command::wrapper) text: it travels inside the
/// exec request, within single quotes, so it holds no `'`, `\`, `!` or newline.
pub(crate) fn supervisor_line(supervision: Supervision) -> String {
    if supervision.terminal {
        return TERMINAL_WATCH.to_owned();
    }
    let polls = supervision.grace.as_millis().div_ceil(50);
    let terminate = if polls == 0 {
        String::new()
    } else {
        format!(
            "kill -TERM -$$ 2>/dev/null; n=0; \
             while [ $n -lt {polls} ] && kill -0 $$ 2>/dev/null; do sleep 0.05; n=$((n+1)); done; "
        )
    };
    let on_disconnect = if supervision.kill_on_disconnect {
        "elif kill -0 $$ 2>/dev/null; then kill -KILL -$$; "
    } else {
        ""
    };
    format!(
        "exec 3<&0; (trap \"\" TERM INT HUP; exec 0<&3 3<&- >/dev/null 2>&1; read -r c || c=; \
         if [ \"$c\" = K ]; then {terminate}kill -KILL -$$; {on_disconnect}fi) & exec 3<&-; "
    )
}

/// The supervisor of a command in a pseudo-terminal, whose stdin is the terminal's input:
/// a background job in the command's group that polls (once a second, `sleep` being the one
/// process it starts) whether the command's leader still runs, and once it is gone kills
/// what is left of the group and the session. The leader goes when the program ends, when
/// it is killed (timeout, cancel, `close`), and when the connection goes: the server then
/// closes the terminal, and the kernel hangs up its session. So children that ignore SIGHUP,
/// or that a job-control shell put in groups of their own, are not orphaned. Unlike a command
/// without a terminal, redirected background jobs do not outlive a terminal's program
/// (documented). `pkill -s` reaches the session's other groups where procps or BusyBox has
/// it. Its stdin, stdout and stderr are `/dev/null`: it holds no end of the terminal.
const TERMINAL_WATCH: &str = "(trap \"\" HUP TERM INT; exec </dev/null >/dev/null 2>&1; \
     while kill -0 $$ 2>/dev/null; do sleep 1; done; pkill -KILL -s $$; kill -KILL -$$) & ";

/// The kill request run on a second channel (for the crate's own scripts, whose stdin carries
/// data instead of a supervisor): SIGTERM to the group, poll for up to `grace`, then SIGKILL
/// whatever is left. With a zero grace it sends SIGKILL at once, as LocalExecutor does.
///
/// dash's `kill` has no `--` and reads `-s TERM -PID` as options, so the form is
/// `kill -SIG -PID`. Login-shell-neutral like the wrapper's bootstrap: one line, no `'`, `\`
/// or `!` inside the quotes.
pub(crate) fn kill_request(pgid: u32, grace: std::time::Duration, session: bool) -> Vec<u8> {
    format!("exec /bin/sh -c '{}'", kill_script(pgid, grace, session)).into_bytes()
}

/// The script of [`kill_request`]: also run through an escalation, as one of the executor's
/// own scripts, for a group that belongs to another account.
///
/// With `session`, the whole session the group leads is killed too (`pkill -s`, where procps
/// or BusyBox has it): a terminal's job-control shell puts its jobs in groups of their own.
pub(crate) fn kill_script(pgid: u32, grace: std::time::Duration, session: bool) -> String {
    let polls = grace.as_millis().div_ceil(50);
    let (term_session, kill_session) = if session {
        (
            format!("pkill -TERM -s {pgid} 2>/dev/null; "),
            format!("pkill -KILL -s {pgid} 2>/dev/null; "),
        )
    } else {
        (String::new(), String::new())
    };
    if polls == 0 {
        format!("{kill_session}kill -KILL -{pgid} 2>/dev/null; exit 0")
    } else {
        format!(
            "{term_session}kill -TERM -{pgid} 2>/dev/null || exit 0; n=0; \
             while kill -0 -{pgid} 2>/dev/null; do \
             if [ $n -ge {polls} ]; then {kill_session}kill -KILL -{pgid} 2>/dev/null; exit 0; fi; \
             sleep 0.05; n=$((n+1)); done"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn kill_request_terminates_then_kills_a_group() {
        use std::os::unix::ffi::OsStrExt;
        // A group whose members ignore TERM.
        let out = Command::new("setsid")
            .args([
                "sh",
                "-c",
                "trap '' TERM; sleep 30 >/dev/null 2>&1 & echo $$",
            ])
            .output()
            .unwrap();
        let pgid: u32 = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let alive = || {
            Command::new("sh")
                .arg("-c")
                .arg(format!("kill -0 -{pgid}"))
                .status()
                .unwrap()
                .success()
        };
        assert!(alive());
        let request = kill_request(pgid, std::time::Duration::from_millis(200), false);
        let status = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&request))
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!alive(), "group {pgid} survived");
    }
}
