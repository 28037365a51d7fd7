//! The one place where shell text is produced.
//!
//! Every value that reaches the remote shell (command, directory, environment names and
//! values, interpreter, paths) passes through [`quote`]. Besides the wrapper for user
//! commands, the crate's own scripts (the `stream_files` listing and the file fallbacks for
//! paths SFTP cannot carry) are built with [`script_request`]; SFTP handles files without a
//! shell.

use std::path::Path;

use crate::{
    command::{
        marker::marker_prefix,
        program::Program,
        quote::quote,
        supervisor::{Supervision, supervisor_script},
    },
    config::{EnvPlan, reject_nul},
    error::Result,
};

/// The script line that prints the marker and `$$` (the process-group id) on stderr, or
/// gives up with status 125 if it cannot.
fn marker_line(marker: &str) -> Vec<u8> {
    let mut line = b"printf '%s%s\\n' ".to_vec();
    line.extend_from_slice(&quote(marker.as_bytes()));
    line.extend_from_slice(b" \"$$\" >&2 || exit 125\n");
    line
}

/// The exec request for one of the executor's own scripts (the exec fallbacks for files,
/// the `stream_files` listing): `exec /bin/sh -c '<marker line><script>'`. It prints the
/// same marker line as the [`wrapper`], so the exec machinery learns the process group and a
/// dropped future kills the script; the user's directory, environment and supervisor do not
/// apply.
pub(crate) fn script_request(marker: &str, script: &[u8]) -> Vec<u8> {
    let mut body = marker_line(marker);
    body.extend_from_slice(script);
    let mut request = b"exec /bin/sh -c ".to_vec();
    request.extend_from_slice(&quote(&body));
    request
}

/// Script bodies up to this size travel inside the exec request, so that the channel's stdin
/// stays free for control; larger ones are streamed on stdin (one argv string may hold at
/// most 128 KiB on Linux, and the request is one).
pub(crate) const INLINE_BODY_LIMIT: usize = 48 * 1024;

/// The exec request and how to drive it.
#[derive(Debug)]
pub(crate) struct Wrapped {
    pub(crate) request: Vec<u8>,
    /// Bytes to send on stdin, then EOF (only when not `controlled`).
    pub(crate) stdin: Vec<u8>,
    /// The channel's stdin is the control line of a supervisor: sending `K\n` kills the
    /// group, EOF means the client is gone. Otherwise the kill needs a second channel.
    pub(crate) controlled: bool,
}

/// Builds the exec request: the login shell runs `exec /bin/sh -c '<script>'`, and the script
///
/// 1. prints the marker line with `$$` on stderr. sshd runs every exec request in a new
///    session, and `exec` keeps the pid, so `$$` is the process-group (and session) id;
/// 2. changes to `dir`;
/// 3. applies the environment plan;
/// 4. starts the [supervisor](supervisor_script) on the channel's stdin (unless a script body
///    too large to inline needs stdin);
/// 5. runs the user's program: `exec sh -c <command> </dev/null`, or for a script
///    `printf %s <body> | <interpreter> [argument]` (or `exec <interpreter> [argument]` with
///    the body on the channel's stdin when it is too large).
pub(crate) fn wrapper(
    program: &Program,
    dir: Option<&Path>,
    env: &EnvPlan,
    marker: &str,
    supervision: Supervision,
) -> Result<Wrapped> {
    let mut script = marker_line(marker);

    if let Some(dir) = dir {
        let bytes = dir.as_os_str().as_encoded_bytes();
        reject_nul("the working directory", bytes)?;
        // `./` keeps CDPATH from redirecting (and printing) a relative cd.
        let mut target = Vec::with_capacity(bytes.len() + 2);
        if !bytes.starts_with(b"/") {
            target.extend_from_slice(b"./");
        }
        target.extend_from_slice(bytes);
        script.extend_from_slice(b"cd -- ");
        script.extend_from_slice(&quote(&target));
        script.extend_from_slice(b" || exit 1\n");
    }

    env.validate()?;
    if !env.clear {
        if !env.remove.is_empty() {
            script.extend_from_slice(b"unset");
            for name in &env.remove {
                script.push(b' ');
                script.extend_from_slice(name.as_bytes());
            }
            script.push(b'\n');
        }
        for (name, value) in &env.set {
            script.extend_from_slice(b"export ");
            script.extend_from_slice(name.as_bytes());
            script.push(b'=');
            script.extend_from_slice(&quote(value.as_bytes()));
            script.push(b'\n');
        }
    }

    let controlled = program.stdin().len() <= INLINE_BODY_LIMIT;
    if controlled {
        script.extend_from_slice(supervisor_script(supervision).as_bytes());
    }

    let mut env_prefix = Vec::new();
    if env.clear {
        // Removing after clearing changes nothing; only the set pairs survive.
        env_prefix.extend_from_slice(b"env -i ");
        for (name, value) in &env.set {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            env_prefix.extend_from_slice(&quote(&pair));
            env_prefix.push(b' ');
        }
    }
    let mut stdin = Vec::new();
    match program {
        Program::Shell(command) => {
            reject_nul("the command", command.as_bytes())?;
            script.extend_from_slice(b"exec ");
            script.extend_from_slice(&env_prefix);
            script.extend_from_slice(b"sh -c ");
            script.extend_from_slice(&quote(command.as_bytes()));
            script.extend_from_slice(b" </dev/null");
        }
        Program::Script {
            interpreter,
            argument,
            body,
        } => {
            reject_nul("the interpreter", interpreter.as_bytes())?;
            if controlled {
                reject_nul("the script", body)?;
                script.extend_from_slice(b"printf %s ");
                script.extend_from_slice(&quote(body));
                script.extend_from_slice(b" | ");
            } else {
                script.extend_from_slice(b"exec ");
                stdin = body.clone();
            }
            script.extend_from_slice(&env_prefix);
            script.extend_from_slice(&quote(interpreter.as_bytes()));
            if let Some(argument) = argument {
                reject_nul("the interpreter argument", argument.as_bytes())?;
                script.push(b' ');
                script.extend_from_slice(&quote(argument.as_bytes()));
            }
        }
    }
    script.push(b'\n');

    let mut request = b"exec /bin/sh -c ".to_vec();
    request.extend_from_slice(&quote(&script));
    Ok(Wrapped {
        request,
        stdin,
        controlled,
    })
}

/// Not part of the API: the exec request the executor sends for a shell `command` with no
/// workdir, no environment changes and the default kill grace (1 s). The benchmark harness
/// sends it over a bare russh channel, so that the remote work is identical and the
/// difference is the pool's own cost. The channel's stdin must stay open until the command
/// ends (it is the supervisor's control line; EOF means "the client is gone").
#[doc(hidden)]
pub fn exec_request_for_benchmarks(command: &str, kill_on_disconnect: bool) -> Result<Vec<u8>> {
    let supervision = Supervision {
        kill_on_disconnect,
        grace: std::time::Duration::from_secs(1),
    };
    let program = Program::Shell(command.to_owned());
    let wrapped = wrapper(
        &program,
        None,
        &EnvPlan::default(),
        &marker_prefix(0),
        supervision,
    )?;
    Ok(wrapped.request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{marker::MarkerParser, marker_prefix};
    use bytes::Bytes;
    use std::process::Command;

    /// No kill on disconnect: local tests close stdin whenever they like.
    const QUIET: Supervision = Supervision {
        kill_on_disconnect: false,
        grace: std::time::Duration::from_secs(1),
    };

    fn run_wrapper_locally(request: &[u8], stdin: &[u8]) -> std::process::Output {
        use std::io::Write;
        use std::os::unix::ffi::OsStrExt;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(request))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A program that never reads stdin may exit first: EPIPE here is expected.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().unwrap()
    }

    #[test]
    fn wrapper_reports_pid_changes_dir_and_applies_env_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let env = EnvPlan {
            clear: false,
            remove: vec!["HOME".into(), "KEEP".into()],
            set: vec![("KEEP".into(), "it's\nset".into())],
        };
        let request = wrapper(
            &Program::Shell("pwd; printf '%s|' \"${HOME-unset}\" \"$KEEP\"; cat".into()),
            Some(dir.path()),
            &env,
            &marker_prefix(7),
            QUIET,
        )
        .unwrap()
        .request;
        // The user command's stdin is /dev/null whatever the channel carries.
        let out = run_wrapper_locally(&request, b"not for the command");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.starts_with("@@swiftide-ssh:0000000000000007:"),
            "{stderr}"
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(stdout, format!("{}\nunset|it's\nset|", real.display()));
    }

    #[test]
    fn wrapper_clears_env_and_runs_inline_scripts() {
        let env = EnvPlan {
            clear: true,
            remove: vec![],
            set: vec![("ONLY".into(), "1".into())],
        };
        let program =
            Program::parse("#!/bin/sh -e\nenv | sort | grep -v '^PWD='\nfalse\necho after");
        let wrapped = wrapper(&program, None, &env, &marker_prefix(1), QUIET).unwrap();
        assert!(wrapped.controlled && wrapped.stdin.is_empty());
        let out = run_wrapper_locally(&wrapped.request, b"");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ONLY=1\n");
        assert!(!out.status.success());
    }

    #[test]
    fn own_scripts_report_their_group_like_the_wrapper() {
        let marker = marker_prefix(9);
        let request = script_request(&marker, b"echo out; echo err >&2");
        let wrapped = wrapper(
            &Program::Shell("true".into()),
            None,
            &EnvPlan::default(),
            &marker,
            QUIET,
        )
        .unwrap();
        // Both scripts open with the same marker line, so one parser serves both.
        let quoted_line = quote(&marker_line(&marker));
        let opening = quoted_line.strip_suffix(b"'").unwrap();
        let shell = b"exec /bin/sh -c ".len();
        assert!(request[shell..].starts_with(opening));
        assert!(wrapped.request[shell..].starts_with(opening));

        let out = run_wrapper_locally(&request, b"");
        assert_eq!(out.stdout, b"out\n");
        let mut parser = MarkerParser::new(&marker);
        let (pgid, rest) = parser.feed(Bytes::from(out.stderr));
        assert!(pgid.is_some_and(|pgid| pgid > 0));
        assert_eq!(rest.concat(), b"err\n");
    }

    #[test]
    fn large_script_bodies_go_on_stdin() {
        let body = format!("echo {}\n", "x".repeat(INLINE_BODY_LIMIT));
        let program = Program::parse(&format!("#!/bin/sh\n{body}"));
        let wrapped = wrapper(&program, None, &EnvPlan::default(), "m", QUIET).unwrap();
        assert!(!wrapped.controlled);
        assert_eq!(wrapped.stdin, body.as_bytes());
        let out = run_wrapper_locally(&wrapped.request, &wrapped.stdin);
        assert_eq!(out.stdout.len(), INLINE_BODY_LIMIT + 1);
    }

    /// Starts a wrapped command locally in its own session (as sshd does) with a pipe for
    /// the channel's stdin; returns the child and its pgid (read from the marker).
    fn spawn_supervised(command: &str, supervision: Supervision) -> (std::process::Child, u32) {
        use std::io::{BufRead, BufReader};
        use std::os::unix::ffi::OsStrExt;
        let wrapped = wrapper(
            &Program::Shell(command.into()),
            None,
            &EnvPlan::default(),
            "@@m:",
            supervision,
        )
        .unwrap();
        let mut child = Command::new("setsid")
            .arg("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&wrapped.request))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pgid = line.trim().trim_start_matches("@@m:").parse().unwrap();
        (child, pgid)
    }

    fn group_alive(pgid: u32) -> bool {
        // Zombies do not count: nobody may reap them quickly in a sandbox.
        let out = Command::new("ps")
            .args(["-o", "stat=", "-g", &pgid.to_string()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|stat| !stat.trim().starts_with('Z'))
    }

    fn wait_dead(pgid: u32) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while group_alive(pgid) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }
    #[test]
    fn supervisor_kills_the_group_on_request_even_when_term_is_ignored() {
        use std::io::Write;
        let supervision = Supervision {
            kill_on_disconnect: false,
            grace: std::time::Duration::from_millis(200),
        };
        let (mut child, pgid) = spawn_supervised("trap '' TERM; sleep 30 & sleep 30", supervision);
        assert!(group_alive(pgid));
        child.stdin.as_mut().unwrap().write_all(b"K\n").unwrap();
        assert!(wait_dead(pgid), "group {pgid} survived the kill request");
        let _ = child.wait();
    }

    #[test]
    fn supervisor_kills_the_group_when_the_channel_goes_away() {
        let supervision = Supervision {
            kill_on_disconnect: true,
            grace: std::time::Duration::from_secs(1),
        };
        let (mut child, pgid) = spawn_supervised("sleep 30 & sleep 30", supervision);
        drop(child.stdin.take()); // what sshd does when the connection dies
        assert!(wait_dead(pgid), "group {pgid} survived the disconnect");
        let _ = child.wait();
    }

    #[test]
    fn without_kill_on_disconnect_eof_leaves_the_command_alone() {
        let (mut child, pgid) = spawn_supervised("sleep 0.5; echo done", QUIET);
        drop(child.stdin.take());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(group_alive(pgid));
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn nul_bytes_are_refused() {
        let err = wrapper(
            &Program::Shell("echo a\0b".into()),
            None,
            &EnvPlan::default(),
            "m",
            QUIET,
        )
        .unwrap_err();
        assert!(err.to_string().contains("NUL"));
    }
}
