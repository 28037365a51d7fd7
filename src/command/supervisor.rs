//! Stopping a command: the supervisor that runs beside it in its process group, and the
//! kill request sent from a second channel when there is no supervisor.

/// How the executor will stop the command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Supervision {
    /// SIGKILL the group when the connection is gone.
    pub(crate) kill_on_disconnect: bool,
    /// Time between SIGTERM and SIGKILL on a requested kill.
    pub(crate) grace: std::time::Duration,
}

impl Supervision {
    /// The executor's settings for stopping commands.
    pub(crate) fn of(config: &crate::config::Config) -> Self {
        Self {
            kill_on_disconnect: config.kill_on_disconnect,
            grace: config.kill_grace,
        }
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

/// The kill request run on a second channel (for the crate's own scripts, whose stdin carries
/// data instead of a supervisor): SIGTERM to the group, poll for up to `grace`, then SIGKILL
/// whatever is left. With a zero grace it sends SIGKILL at once, as LocalExecutor does.
///
/// dash's `kill` has no `--` and reads `-s TERM -PID` as options, so the form is
/// `kill -SIG -PID`. Login-shell-neutral like the wrapper's bootstrap: one line, no `'`, `\`
/// or `!` inside the quotes.
pub(crate) fn kill_request(pgid: u32, grace: std::time::Duration) -> Vec<u8> {
    format!("exec /bin/sh -c '{}'", kill_script(pgid, grace)).into_bytes()
}

/// The script of [`kill_request`]: also run through an escalation, as one of the executor's
/// own scripts, for a group that belongs to another account.
pub(crate) fn kill_script(pgid: u32, grace: std::time::Duration) -> String {
    let polls = grace.as_millis().div_ceil(50);
    if polls == 0 {
        format!("kill -KILL -{pgid} 2>/dev/null; exit 0")
    } else {
        format!(
            "kill -TERM -{pgid} 2>/dev/null || exit 0; n=0; \
             while kill -0 -{pgid} 2>/dev/null; do \
             if [ $n -ge {polls} ]; then kill -KILL -{pgid} 2>/dev/null; exit 0; fi; \
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
        let request = kill_request(pgid, std::time::Duration::from_millis(200));
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
