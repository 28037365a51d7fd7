//! The one place where shell text is produced.
//!
//! Every value that reaches the remote shell (command, directory, environment names and
//! values, interpreter, paths) passes through [`quote`]. Besides the wrapper for user
//! commands, the crate's own scripts (the `stream_files` listing and the file fallbacks for
//! paths SFTP cannot carry) are built with [`script_request`]; SFTP handles files without a
//! shell.

use std::path::Path;

use crate::error::{Error, Result};

/// Quotes bytes as one POSIX shell word: `'…'`, with each `'` written as `'\''`.
///
/// Works for any byte except NUL (which no argv can carry), including newlines and
/// non-UTF-8 bytes.
pub(crate) fn quote(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for &byte in value {
        if byte == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(byte);
        }
    }
    out.push(b'\'');
    out
}

fn reject_nul(what: &str, value: &[u8]) -> Result<()> {
    if value.contains(&0) {
        return Err(Error::InvalidInput {
            reason: format!("{what} contains a NUL byte, which cannot be passed to a remote shell"),
        });
    }
    Ok(())
}

/// Whether `name` is a portable environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b == b'_' || b.is_ascii_alphabetic())
        && bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

/// Environment changes applied before the user's program starts, in LocalExecutor's order:
/// clear, then remove, then set.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnvPlan {
    pub(crate) clear: bool,
    pub(crate) remove: Vec<String>,
    pub(crate) set: Vec<(String, String)>,
}

impl EnvPlan {
    /// Checks names (a clear error instead of a remote syntax error) and values (no NUL).
    pub(crate) fn validate(&self) -> Result<()> {
        for name in self
            .remove
            .iter()
            .chain(self.set.iter().map(|(name, _)| name))
        {
            if !is_valid_env_name(name) {
                return Err(Error::InvalidInput {
                    reason: format!(
                        "environment variable name {name:?} is not valid \
                         (letters, digits and '_', not starting with a digit)"
                    ),
                });
            }
        }
        for (name, value) in &self.set {
            reject_nul(
                &format!("the value of environment variable {name}"),
                value.as_bytes(),
            )?;
        }
        Ok(())
    }
}

/// What the user asked to run, split the way LocalExecutor splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Program {
    /// `sh -c <command>` with stdin at EOF.
    Shell(String),
    /// A `#!` script: the interpreter (found through `PATH`), at most one argument, and the
    /// body that is written to the interpreter's stdin.
    Script {
        interpreter: String,
        argument: Option<String>,
        body: Vec<u8>,
    },
}

impl Program {
    /// Parses a command exactly as LocalExecutor 0.33 does: a shebang only at byte 0, the
    /// directive trimmed, the interpreter up to the first whitespace, the rest (trimmed) one
    /// argument, the body everything after the first newline.
    pub(crate) fn parse(command: &str) -> Program {
        if let Some(rest) = command.strip_prefix("#!") {
            let (first_line, body) = match rest.split_once('\n') {
                Some((line, body)) => (line, body),
                None => (rest, ""),
            };
            let directive = first_line.trim();
            let (interpreter, argument) = match directive.split_once(char::is_whitespace) {
                Some((interpreter, argument)) => (interpreter, Some(argument.trim())),
                None => (directive, None),
            };
            if !interpreter.is_empty() {
                return Program::Script {
                    interpreter: interpreter.to_owned(),
                    argument: argument.filter(|a| !a.is_empty()).map(str::to_owned),
                    body: body.as_bytes().to_vec(),
                };
            }
        }
        Program::Shell(command.to_owned())
    }

    /// The bytes to send on the channel's stdin before EOF.
    pub(crate) fn stdin(&self) -> &[u8] {
        match self {
            Program::Shell(_) => &[],
            Program::Script { body, .. } => body,
        }
    }
}

/// Prefix of the line the wrapper prints on stderr to report its process-group id.
pub(crate) fn marker_prefix(nonce: u64) -> String {
    format!("@@swiftide-ssh:{nonce:016x}:")
}

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

/// How the executor will stop the command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Supervision {
    /// SIGKILL the group when the connection is gone.
    pub(crate) kill_on_disconnect: bool,
    /// Time between SIGTERM and SIGKILL on a requested kill.
    pub(crate) grace: std::time::Duration,
}

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
fn supervisor_script(supervision: Supervision) -> String {
    let polls = supervision.grace.as_millis().div_ceil(50);
    let terminate = if polls == 0 {
        String::new()
    } else {
        format!(
            "  kill -TERM -$$ 2>/dev/null; n=0\n  \
             while [ $n -lt {polls} ] && kill -0 $$ 2>/dev/null; do sleep 0.05; n=$((n+1)); done\n"
        )
    };
    let on_disconnect = if supervision.kill_on_disconnect {
        "elif kill -0 $$ 2>/dev/null; then\n  kill -KILL -$$\n"
    } else {
        ""
    };
    format!(
        "exec 3<&0\n\
         (trap '' TERM INT HUP\n\
         \x20exec 0<&3 3<&- >/dev/null 2>&1\n\
         \x20read -r c || c=\n\
         \x20if [ \"$c\" = K ]; then\n\
         {terminate}  kill -KILL -$$\n\
         \x20{on_disconnect}\x20fi) &\n\
         exec 3<&-\n"
    )
}

/// The kill request run on a second channel: SIGTERM to the group, poll for up to `grace`,
/// then SIGKILL whatever is left. With a zero grace it sends SIGKILL at once, as
/// LocalExecutor does.
///
/// dash's `kill` has no `--` and reads `-s TERM -PID` as options, so the form is
/// `kill -SIG -PID`.
pub(crate) fn kill_request(pgid: u32, grace: std::time::Duration) -> Vec<u8> {
    let polls = grace.as_millis().div_ceil(50);
    let script = if polls == 0 {
        format!("kill -KILL -{pgid} 2>/dev/null; exit 0")
    } else {
        format!(
            "kill -TERM -{pgid} 2>/dev/null || exit 0\n\
             n=0\n\
             while kill -0 -{pgid} 2>/dev/null; do\n\
             \x20 if [ $n -ge {polls} ]; then kill -KILL -{pgid} 2>/dev/null; exit 0; fi\n\
             \x20 sleep 0.05; n=$((n+1))\n\
             done\n"
        )
    };
    let mut request = b"exec /bin/sh -c ".to_vec();
    request.extend_from_slice(&quote(script.as_bytes()));
    request
}

/// Splits the wrapper's marker line out of the stderr stream.
///
/// Bytes before the marker (a login rc file's noise) and after it pass through unchanged. If
/// no marker shows up within 64 KiB, parsing gives up and everything passes through: the
/// command then cannot be killed by group, which is logged.
#[derive(Debug)]
pub(crate) struct MarkerParser {
    prefix: Vec<u8>,
    pending: Vec<u8>,
    done: bool,
}

const MARKER_SEARCH_LIMIT: usize = 64 * 1024;

impl MarkerParser {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.as_bytes().to_vec(),
            pending: Vec::new(),
            done: false,
        }
    }

    /// Feeds stderr bytes; returns the pgid once the marker line is complete, and the bytes
    /// that belong to the user's stderr.
    pub(crate) fn feed(&mut self, data: bytes::Bytes) -> (Option<u32>, Vec<bytes::Bytes>) {
        if self.done {
            return (None, vec![data]);
        }
        self.pending.extend_from_slice(&data);
        let Some(start) = find(&self.pending, &self.prefix) else {
            if self.pending.len() > MARKER_SEARCH_LIMIT {
                return (None, self.give_up());
            }
            return (None, Vec::new());
        };
        let digits_start = start + self.prefix.len();
        let Some(newline) = self
            .pending
            .get(digits_start..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
            .map(|offset| digits_start + offset)
        else {
            return (None, Vec::new());
        };
        let pgid = self
            .pending
            .get(digits_start..newline)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| digits.parse::<u32>().ok());
        let pending = std::mem::take(&mut self.pending);
        self.done = true;
        let mut out = Vec::new();
        if let Some(before) = pending.get(..start).filter(|b| !b.is_empty()) {
            out.push(bytes::Bytes::copy_from_slice(before));
        }
        if let Some(after) = pending.get(newline + 1..).filter(|b| !b.is_empty()) {
            out.push(bytes::Bytes::copy_from_slice(after));
        }
        (pgid, out)
    }

    /// Returns whatever is still buffered (the stream ended without a marker).
    pub(crate) fn give_up(&mut self) -> Vec<bytes::Bytes> {
        self.done = true;
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            Vec::new()
        } else {
            vec![bytes::Bytes::from(pending)]
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::process::Command;

    /// No kill on disconnect: local tests close stdin whenever they like.
    const QUIET: Supervision = Supervision {
        kill_on_disconnect: false,
        grace: std::time::Duration::from_secs(1),
    };

    /// Runs `sh -c 'printf %s <quoted>'` locally and returns what the shell saw.
    fn roundtrip(value: &[u8]) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let mut script = b"printf %s ".to_vec();
        script.extend_from_slice(&quote(value));
        let out = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&script))
            .output()
            .unwrap();
        out.stdout
    }

    #[test]
    fn quote_survives_hostile_bytes() {
        for value in [
            &b""[..],
            b"plain",
            b"it's",
            b"''",
            b"$(touch /tmp/pwned) `id` $HOME \\ \"x\" !event",
            b"line1\nline2\r\n",
            b"\xff\xfe non-utf8",
            b"-n",
            b"*?[a]",
        ] {
            assert_eq!(
                roundtrip(value),
                value,
                "value {:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn env_names_are_checked() {
        assert!(is_valid_env_name("PATH"));
        assert!(is_valid_env_name("_x1"));
        for bad in ["", "1A", "A=B", "A B", "A-B", "é"] {
            assert!(!is_valid_env_name(bad), "{bad}");
            let plan = EnvPlan {
                set: vec![(bad.to_owned(), "v".to_owned())],
                ..EnvPlan::default()
            };
            assert!(matches!(plan.validate(), Err(Error::InvalidInput { .. })));
        }
    }

    #[test]
    fn shebang_parsing_matches_local_executor() {
        assert_eq!(
            Program::parse("#!/bin/sh -e\nprintf a\n"),
            Program::Script {
                interpreter: "/bin/sh".into(),
                argument: Some("-e".into()),
                body: b"printf a\n".to_vec()
            }
        );
        assert_eq!(
            Program::parse("#!/usr/bin/env -S sh -e \r\nx"),
            Program::Script {
                interpreter: "/usr/bin/env".into(),
                argument: Some("-S sh -e".into()),
                body: b"x".to_vec()
            }
        );
        assert_eq!(
            Program::parse("#!python3"),
            Program::Script {
                interpreter: "python3".into(),
                argument: None,
                body: Vec::new()
            }
        );
        assert_eq!(
            Program::parse("#!\necho"),
            Program::Shell("#!\necho".into())
        );
        assert_eq!(
            Program::parse(" #!/bin/bash\necho"),
            Program::Shell(" #!/bin/bash\necho".into())
        );
    }

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

    #[test]
    fn marker_is_split_out_across_packets() {
        let mut parser = MarkerParser::new("@@m:");
        let (pgid, out) = parser.feed(Bytes::from_static(b"rc noise\n@@m:12"));
        assert_eq!((pgid, out.len()), (None, 0));
        let (pgid, out) = parser.feed(Bytes::from_static(b"34\nuser err"));
        assert_eq!(pgid, Some(1234));
        assert_eq!(
            out,
            vec![
                Bytes::from_static(b"rc noise\n"),
                Bytes::from_static(b"user err")
            ]
        );
        let (pgid, out) = parser.feed(Bytes::from_static(b"more"));
        assert_eq!((pgid, out), (None, vec![Bytes::from_static(b"more")]));
    }

    #[test]
    fn marker_parser_gives_up_after_limit() {
        let mut parser = MarkerParser::new("@@m:");
        let big = Bytes::from(vec![b'x'; MARKER_SEARCH_LIMIT + 1]);
        let (pgid, out) = parser.feed(big.clone());
        assert_eq!(pgid, None);
        assert_eq!(out.concat(), big.to_vec());
    }
}
