//! The one place where shell text is produced: the exec request and what follows it on stdin.
//!
//! # Any login shell
//!
//! sshd (and Dropbear) run every exec request as `<login shell> -c <request>`, and the login
//! shell may be bash, dash, zsh, mksh, BusyBox ash, fish or tcsh. Their quoting rules differ:
//! fish reads `\\` and `\'` inside single quotes as escapes, tcsh rejects a newline inside
//! quotes and expands `!` even there. So until a connection knows its login shell, nothing a
//! caller passes travels in the request. This **universal form** is a fixed **bootstrap**, the
//! same for every command with the same settings:
//!
//! ```text
//! exec /bin/sh -c '<bootstrap>' sh '<bootstrap>'
//! ```
//!
//! whose text is printable ASCII without `'`, `\`, `!` or newline, which every one of those
//! shells passes through single quotes unchanged ([`is_neutral`]). The bootstrap, now under
//! `/bin/sh`:
//!
//! 1. makes sure it leads its own process group. OpenSSH starts each session with `setsid`,
//!    so the shell already does; Dropbear does not (all channels of a connection share one
//!    group), so the bootstrap starts itself again through `setsid` as a child (its text is
//!    `$1` for that purpose), the leader of a new session that runs the steps below, and
//!    waits outside it for the output pipes to close ([`NEW_SESSION_AND_WAIT`]). The check
//!    is `kill -0 -$$` (does a group numbered like this shell exist?), confirmed by
//!    `/proc/$$/stat`; without `setsid` the command runs in the server's group and the group
//!    kill cannot reach it (documented);
//! 2. prints the marker line with `$$`, the process-group id, on stderr, before it reads
//!    anything (the time from the server's reply to the marker is the login shell's start-up:
//!    `pool::startup`);
//! 3. reads the **payload**: one line on stdin, read by the shell's `read` builtin, which
//!    reads a pipe byte by byte and so leaves the rest of stdin alone;
//! 4. starts the [supervisor](supervisor_line) on the rest of stdin (the control line);
//! 5. `eval`s the payload: `cd -P` ([`CD`]), the environment plan, and the user's program,
//!    every value POSIX-quoted by [`quote_line`] (newlines written as `"$nl"`, a newline taken
//!    from the shell's default `IFS`, so the payload stays one line). The program is
//!    `exec`ed, so that it leads the group as under LocalExecutor; a script's body reaches
//!    its interpreter on a pipe ([`feed_and_exec`]).
//!
//! The payload has no size limit of its own: a command far larger than the 128 KiB one
//! argument may hold goes to `sh -c` through a pipe instead of its argv ([`ARGV_LIMIT`]), and a
//! shebang body is printed into its interpreter by the `printf` builtin ([`feed_and_exec`]).
//! The price of reading stdin byte by byte is about 1 µs per payload byte on dash (a typical
//! command: well under 0.1 ms; a 1 MiB command: about 1.5 s).
//!
//! # The direct form
//!
//! The universal form costs the server one `/bin/sh` exec more than the command needs (the
//! bootstrap's shell, then the command's `sh -c`). The marker line therefore also says whether
//! the login shell led its own process group and what `$SHELL` is (`<pgid> L bash`); once a
//! connection has seen a POSIX login shell there ([`direct_capable`]), its commands go in the
//! [direct form](direct_wrapper): the login shell runs the bootstrap itself and starts
//! `sh -c` with the command's text, which now travels in the request, quoted for POSIX
//! shells. Server CPU per warm `true`: about 0.5 ms less than the universal form (see
//! BENCHMARKS.md). If the login shell is not what `$SHELL` says, no marker comes back,
//! nothing has run, and the command runs again in the universal form.
//!
//! Besides the wrapper for user commands, the crate's own scripts (the `stream_files` listing
//! and the file fallbacks for paths SFTP cannot carry) use the same bootstrap without the
//! supervisor ([`script_request`]): their stdin carries data.

use std::path::Path;

use crate::{
    command::{
        program::Program,
        quote::quote,
        supervisor::{Supervision, supervisor_line},
    },
    config::{EnvPlan, reject_nul},
    error::Result,
};

/// Commands longer than this go to `sh -c` through a pipe, not as its argument: Linux refuses
/// a single argv string of 128 KiB or more (`MAX_ARG_STRLEN`), whatever the total.
pub(crate) const ARGV_LIMIT: usize = 100 * 1024;

/// Whether every login shell reads `text` inside single quotes as exactly these bytes:
/// printable ASCII (and spaces) only, and none of `'`, `\`, `!`.
pub(crate) fn is_neutral(text: &str) -> bool {
    text.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && !matches!(b, b'\'' | b'\\' | b'!'))
}

/// Quotes bytes as one POSIX shell word for the one-line payload: [`quote`], with every
/// newline written as `'"$nl"'` (the bootstrap sets `nl`).
pub(crate) fn quote_line(value: &[u8]) -> Vec<u8> {
    let quoted = quote(value);
    let mut out = Vec::with_capacity(quoted.len());
    for &byte in &quoted {
        if byte == b'\n' {
            out.extend_from_slice(b"'\"$nl\"'");
        } else {
            out.push(byte);
        }
    }
    out
}

/// What the bootstrap does on a server that did not start the session in a group of its own
/// (Dropbear): it runs itself again as the leader of a new session (`setsid`, `$2` = `D`) and
/// waits, outside that session, until every writer of the channel's stdout and stderr is
/// done.
///
/// Why a child and not `exec setsid`: the command's shell must lead its group, as under
/// LocalExecutor and OpenSSH (`$$` is the group id, so `trap 'kill -- -$$' EXIT` reaches its
/// children), and the process the server waits for must outlive every writer of the pipes.
/// Dropbear closes the channel soon after the session's process exits, so output a background
/// child writes later would be lost, while OpenSSH (and LocalExecutor) wait until the pipes
/// close. So the session's process stays where it is and starts the new session as a child
/// (it is not a group leader, so `setsid` needs no fork and keeps the child's pid: the new
/// session's id); the command's stdout and stderr go through pipes to two `cat`s that copy
/// them to the channel, outside the command's group, so a group kill leaves them draining.
/// The waiting shell waits for both (they end when the last writer closes its end) and exits
/// with the command's status, sent back on fd 9. The command does not inherit the extra
/// descriptors; the waiting shell's own messages ("Killed") go to `/dev/null` (hence the
/// subshell: dash applies a simple command's redirections in the parent too, and would
/// print "Terminated" into the command's stderr while it waits). Death by signal comes back
/// as status 128 + n on such servers.
const NEW_SESSION_AND_WAIT: &str = "exec 6>&1 7>&2; \
     s=$( { { { (exec setsid /bin/sh -c \"$1\" sh \"$1\" D) 2>&4 4>&- 6>&- 7>&- 9>&-; echo $? >&9; } \
     4>&1 1>&3 3>&- 2>/dev/null | cat >&7 9>&-; } 3>&1 1>&9 | cat >&6 9>&-; } 9>&1 ); \
     exit \"${s:-125}\"";

/// The exec request that starts `/bin/sh` on the bootstrap (see the module docs), directly
/// or through an escalation tool. `supervision` is `None` for the crate's own scripts, whose
/// stdin carries data.
fn bootstrap(
    marker: &str,
    supervision: Option<Supervision>,
    escalation: Option<&Escalation<'_>>,
) -> Vec<u8> {
    let script = bootstrap_text(marker, supervision);
    match escalation {
        None => format!("exec /bin/sh -c '{script}' sh '{script}'").into_bytes(),
        Some(escalation) => escalated_request(escalation, &script),
    }
}

/// The bootstrap's text (see [`bootstrap`]).
fn bootstrap_text(marker: &str, supervision: Option<Supervision>) -> String {
    let mut script = String::from(
        // A newline without writing one: every POSIX shell starts with IFS = space, tab,
        // newline (they ignore an IFS in the environment). A process group numbered `$$`
        // exists only if this shell leads one: `kill -0` asks with one system call. Only if
        // it says no is `/proc` asked too, because `setsid` run by a group leader forks and
        // its parent exits 0 at once, which would end the session early; seen once in a few
        // thousand commands while a container was being stopped. The new session (`$2` =
        // `D`, or `S` after an escalation) leads its group and asks nothing.
        //
        // Started by an escalation tool (`$2` = `B`: sudo, doas and util-linux su fork the
        // command into their own group), the shell leads no group, but the tool does when
        // the server made the session a group of its own (OpenSSH), and the server waits for
        // the output pipes to close: then `exec setsid` makes this very process the leader
        // of a new session (no fork: it leads no group), which is all LocalExecutor's group
        // needs. Otherwise (Dropbear) the new session is made as below.
        "nl=${IFS#??}; \
         [ \"$2\" = D ] || [ \"$2\" = S ] || kill -0 -$$ 2>/dev/null || { \
         [ \"$2\" = B ] && { read -r _ _ _ _ p _ </proc/$PPID/stat; } 2>/dev/null && \
         [ \"$p\" = \"$PPID\" ] && command -v setsid >/dev/null && exec setsid /bin/sh -c \"$1\" sh \"$1\" S \"$3\"; \
         read -r _ _ _ _ g _ </proc/$$/stat; \
         [ \"${g:-$$}\" = \"$$\" ] || { command -v setsid >/dev/null && { ",
    );
    script.push_str(NEW_SESSION_AND_WAIT);
    // After the pgid: `L` or `D` (whether the login shell led its own group; `S` or `B`
    // after an escalation, see above) and the login shell's name (`$3` after an escalation,
    // which passes the login's `$SHELL` on: the tool sets the target's), from which the
    // connection learns whether it may use the direct form.
    // The marker comes before the payload is read: the time from the server's reply to the
    // exec request to this line is the login shell's start-up, whatever the link's round
    // trip (`pool::startup`).
    script.push_str(&format!(
        "; }}; }}; }}; l=${{3:-$SHELL}}; echo \"{marker}$$ ${{2:-L}} ${{l##*/}}\" >&2 || exit 125; \
         IFS= read -r w || exit 125; "
    ));
    if let Some(supervision) = supervision {
        script.push_str(&supervisor_line(supervision));
    }
    script.push_str("eval \"$w\"");
    debug_assert!(is_neutral(&script), "bootstrap is not login-shell neutral");
    script
}

/// An escalation for one exec request: the setting and, for sudo with a password, the
/// random prompt the driver waits for (see `command::escalation`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Escalation<'a> {
    pub(crate) settings: &'a crate::config::Become,
    /// sudo's `-p` prompt; `None`: sudo runs with `-n` (the other tools ignore it).
    pub(crate) prompt: Option<&'a str>,
}

/// The exec request that runs `/bin/sh` on `script` as another account (`$0` = `sh`, `$1`
/// = the text, `$2` = `B`, `$3` = the login's `$SHELL`, as the bootstrap expects):
///
/// ```text
/// exec sudo -n -u 'USER' 'FLAG'... -- /bin/sh -c '<S>' sh '<S>' B "$SHELL"   (-S -p '<prompt>' with a password)
/// exec doas -n -u 'USER' 'FLAG'... -- /bin/sh -c '<S>' sh '<S>' B "$SHELL"
/// exec su 'FLAG'... -s /bin/sh -c '<S>' 'USER' sh '<S>' B "$SHELL"             (util-linux su hands
///                                                                           the words after USER to the shell)
/// ```
///
/// Login-shell neutral like the bootstrap: the user name and the flags are checked
/// (`Become::validate`), the prompt is made of letters, digits and `-`. Nothing secret is in
/// it: the password goes on stdin when the prompt asks.
pub(crate) fn escalated_request(escalation: &Escalation<'_>, script: &str) -> Vec<u8> {
    // `"$SHELL"`, expanded by the login shell (every one expands it within double quotes),
    // tells the bootstrap which login shell the connection has (see the marker line).
    tool_command(
        escalation,
        &format!("'{script}'"),
        &format!("sh '{script}' B \"$SHELL\""),
    )
    .into_bytes()
}

/// `exec <tool> ... /bin/sh -c <command> <args>` for `escalation` (see
/// [`escalated_request`]); `command` and `args` come quoted.
fn tool_command(escalation: &Escalation<'_>, command: &str, args: &str) -> String {
    use crate::error::BecomeMethod;
    let settings = escalation.settings;
    let flags: String = settings
        .flags
        .iter()
        .map(|flag| format!("'{flag}' "))
        .collect();
    let user = &settings.user;
    let program = settings.program();
    debug_assert!(
        settings.flags.iter().all(|flag| is_neutral(flag))
            && is_neutral(user)
            && is_neutral(program)
            && escalation.prompt.is_none_or(is_neutral),
        "a quoted word of the escalated request is not login-shell neutral"
    );
    let shell = format!("/bin/sh -c {command}");
    match settings.method {
        BecomeMethod::Sudo => {
            let mode = match escalation.prompt {
                Some(prompt) => format!("-S -p '{prompt}'"),
                None => "-n".to_owned(),
            };
            format!("exec '{program}' {mode} -u '{user}' {flags}-- {shell} {args}")
        }
        BecomeMethod::Doas => format!("exec '{program}' -n -u '{user}' {flags}-- {shell} {args}"),
        BecomeMethod::Su => format!("exec '{program}' {flags}-s {shell} '{user}' {args}"),
    }
}

/// The exec request of a **pre-escalated** spare: [`prestart_request`]'s shell, started
/// through the escalation tool ahead of demand, so that the tool does not run on a warm
/// command's critical path. Only for tools that read no password (`sudo -n`, `doas -n`; a
/// prompt needs the driver), and only sent to login shells known to be POSIX (pre-started
/// spares are made only there), so the text is POSIX-quoted rather than neutral. The shell
/// first makes itself the leader of a new session (`exec setsid`: the tool forked it into
/// its own group, see [`bootstrap`]), then waits for its payload like a pre-started login
/// shell, as the target.
pub(crate) fn escalated_prestart_request(
    escalation: &Escalation<'_>,
    supervision: Supervision,
) -> Option<Vec<u8>> {
    if escalation.settings.may_prompt() {
        return None;
    }
    let body = String::from_utf8(prestart_request(supervision)).ok()?;
    // `$0` is the text itself, `$1` `S` once it leads its own session.
    let script = format!("[ \"$1\" = S ] || exec setsid /bin/sh -c \"$0\" \"$0\" S; {body}");
    let quoted = String::from_utf8(quote(script.as_bytes())).ok()?;
    Some(tool_command(escalation, &quoted, &format!("{quoted} B")).into_bytes())
}

/// The exec request and what goes on stdin for one of the executor's own scripts (the exec
/// fallbacks for files, the `stream_files` listing, the jobs' scripts): the bootstrap
/// without a supervisor (escalated when `escalation` says so), then `eval`'s the script,
/// then `data` (followed by EOF). It prints the same marker line as
/// the [`wrapper`], so the exec machinery learns the process group and a dropped future kills
/// the script (from a second channel); the user's directory, environment and supervisor do
/// not apply.
pub(crate) fn script_request(
    marker: &str,
    script: &[u8],
    data: &[u8],
    escalation: Option<&Escalation<'_>>,
) -> Result<Wrapped> {
    reject_nul("the script", script)?;
    let mut stdin = b"eval ".to_vec();
    stdin.extend_from_slice(&quote_line(script));
    stdin.push(b'\n');
    stdin.extend_from_slice(data);
    Ok(Wrapped {
        request: bootstrap(marker, None, escalation),
        stdin,
        controlled: false,
    })
}

/// Login shells (the name at the end of `$SHELL`) that run the [direct](direct_wrapper) form themselves:
/// POSIX shells, all checked by the login-shell tests here and in `tests/compat.rs`.
const DIRECT_SHELLS: &[&str] = &["sh", "bash", "dash", "ash", "mksh", "zsh"];

/// Whether a connection whose universal bootstrap reported `traits` on its marker line
/// (`L bash`: it led its own process group, its login shell is bash) may use the
/// [direct](direct_wrapper) form.
pub(crate) fn direct_capable(traits: &str) -> bool {
    let (group, shell) = traits.split_once(' ').unwrap_or((traits, ""));
    group == "L" && DIRECT_SHELLS.contains(&shell)
}

/// Environment names a shell treats specially: exported in the direct form's `sh -c` they
/// would act in the user's shell (IFS, a cleared PWD), while the universal form's fresh
/// `sh` starts from its own values, as LocalExecutor's does.
const SHELL_SPECIAL_NAMES: &[&str] = &[
    "IFS", "PWD", "OLDPWD", "OPTIND", "PPID", "LINENO", "PS1", "PS2", "PS4", "ENV",
];

/// The `sh -c` text of the direct form: the `cd` and the environment changes on the first
/// line, then the command; `None` when the direct form could differ (see [`direct_wrapper`]).
pub(crate) fn direct_text(program: &Program, dir: Option<&Path>, env: &EnvPlan) -> Option<Vec<u8>> {
    let Program::Shell(command) = program else {
        return None;
    };
    if command.len() > ARGV_LIMIT
        || command.starts_with(['-', '+'])
        || command.contains('\0')
        || env.clear
    {
        return None;
    }
    let special = |name: &str| SHELL_SPECIAL_NAMES.contains(&name);
    let mut text = Vec::new();
    if let Some(dir) = dir {
        let bytes = dir.as_os_str().as_encoded_bytes();
        if bytes.contains(&b'\n') || bytes.contains(&0) {
            return None;
        }
        // `./` keeps CDPATH from redirecting (and printing) a relative cd.
        let mut target = Vec::with_capacity(bytes.len() + 2);
        if !bytes.starts_with(b"/") {
            target.extend_from_slice(b"./");
        }
        target.extend_from_slice(bytes);
        text.extend_from_slice(CD);
        text.extend_from_slice(&quote(&target));
        text.extend_from_slice(b" || exit 1; ");
    }
    if env.validate().is_err() {
        return None;
    }
    if !env.remove.is_empty() {
        text.extend_from_slice(b"unset");
        for name in &env.remove {
            if special(name) {
                return None;
            }
            text.push(b' ');
            text.extend_from_slice(name.as_bytes());
        }
        text.extend_from_slice(b"; ");
    }
    for (name, value) in &env.set {
        if special(name) || value.contains(['\n', '\0']) {
            return None;
        }
        text.extend_from_slice(b"export ");
        text.extend_from_slice(name.as_bytes());
        text.push(b'=');
        text.extend_from_slice(&quote(value.as_bytes()));
        text.extend_from_slice(b"; ");
    }
    text.extend_from_slice(command.as_bytes());
    Some(text)
}

/// The exec request text a **pre-started** spare channel runs ahead of demand, on connections
/// that take the [direct form](direct_wrapper): the login shell waits on stdin for what
/// [`prestart_payload`] sends, so a warm command costs neither the channel open nor the
/// login shell's start on its critical path.
///
/// The payload's first line says how to run it: `U` (the universal form: the bootstrap
/// text follows, and the bootstrap then reads its own payload from stdin as usual), `E` (an
/// escalated universal form: the whole exec request follows, `exec sudo ... /bin/sh -c
/// '<bootstrap>' ...`, evaluated as the server would have run it) or the command's marker
/// prefix (the direct form: the `sh -c` text follows). Then a line count
/// and the lines. Nothing runs before the whole payload is there: closing stdin early makes
/// the shell exit 125 without running anything.
pub(crate) fn prestart_request(supervision: Supervision) -> Vec<u8> {
    let supervisor = if supervision.kill_on_disconnect {
        supervisor_line(supervision)
    } else {
        String::new()
    };
    format!(
        "kill -0 -$$ 2>/dev/null || exit 124; nl='\n'; \
         IFS= read -r k || exit 125; IFS= read -r n || exit 125; IFS= read -r c || exit 125; \
         while [ \"$n\" -gt 1 ]; do IFS= read -r l || exit 125; c=$c$nl$l; n=$((n-1)); done; \
         [ \"$k\" = U ] && exec /bin/sh -c \"$c\" sh \"$c\"; [ \"$k\" = E ] && eval \"$c\"; \
         {supervisor}echo \"$k$$ L direct\" >&2 || exit 125; exec sh -c \"$c\" </dev/null"
    )
    .into_bytes()
}

/// What a pre-started spare (see [`prestart_request`]) gets on stdin for one command.
#[derive(Debug)]
pub(crate) struct PrestartPayload {
    pub(crate) stdin: bytes::Bytes,
    /// stdin then stays open as the supervisor's control line.
    pub(crate) controlled: bool,
    /// The direct form's text (else the universal form's bootstrap and stdin).
    pub(crate) direct: bool,
    /// How many bytes of `stdin` the pre-started shell reads before it runs anything (its
    /// frame): all an escalation tool that may prompt gets before it hands over, the rest
    /// (the bootstrap's own payload) only after.
    pub(crate) head: usize,
}

/// The [`PrestartPayload`] for a command: the direct form's text when the command takes it
/// (`controlled` then as in [`direct_wrapper`]), else `wrapped` (the universal form: its
/// bootstrap, then its own stdin).
pub(crate) fn prestart_payload(
    program: Option<&Program>,
    dir: Option<&Path>,
    env: &EnvPlan,
    marker: &str,
    supervision: Supervision,
    wrapped: &Wrapped,
) -> PrestartPayload {
    let framed = |kind: &[u8], text: &[u8]| {
        let lines = text.iter().filter(|&&b| b == b'\n').count() + 1;
        let mut stdin = kind.to_vec();
        stdin.push(b'\n');
        stdin.extend_from_slice(format!("{lines}\n").as_bytes());
        stdin.extend_from_slice(text);
        stdin.push(b'\n');
        stdin
    };
    if let Some(text) = program.and_then(|program| direct_text(program, dir, env)) {
        let stdin = framed(marker.as_bytes(), &text);
        return PrestartPayload {
            head: stdin.len(),
            stdin: stdin.into(),
            controlled: supervision.kill_on_disconnect,
            direct: true,
        };
    }
    // The universal request is `exec /bin/sh -c '<S>' sh '<S>'`: S, without the quotes. An
    // escalated one is evaluated whole.
    let mut stdin = match universal_bootstrap_text(&wrapped.request) {
        Some(bootstrap) => framed(b"U", bootstrap),
        None => framed(b"E", &wrapped.request),
    };
    let head = stdin.len();
    stdin.extend_from_slice(&wrapped.stdin);
    PrestartPayload {
        stdin: stdin.into(),
        controlled: wrapped.controlled,
        direct: false,
        head,
    }
}

/// The bootstrap text inside a universal request (see [`bootstrap`]); `None` for an
/// escalated one.
fn universal_bootstrap_text(request: &[u8]) -> Option<&[u8]> {
    let inner = request.strip_prefix(b"exec /bin/sh -c '".as_slice())?;
    let end = inner
        .windows(6)
        .position(|w| w == b"' sh '")
        .unwrap_or(inner.len());
    inner.get(..end)
}

/// The **direct form**: one `/bin/sh` exec fewer per command, for connections whose login
/// shell is known to be POSIX and to lead its own process group (see [`direct_capable`]).
///
/// The login shell itself runs the bootstrap, and since it is known to be POSIX the command
/// travels in the request, POSIX-quoted:
///
/// ```text
/// kill -0 -$$ 2>/dev/null || exit 124; <supervisor>; echo '<marker>'$$ L direct >&2;
/// exec sh -c '<text>' </dev/null
/// ```
///
/// Nothing is read from stdin before the command starts (stdin is only the supervisor's
/// control line), and the supervisor is forked first, so that it has long closed its copies
/// of stdout and stderr (which the server waits for) when a short command ends. The text is
/// the user's command preceded, on its first line, by the `cd` and the environment changes, so
/// that the command's line numbers (in `$LINENO` and error messages) are its own. This gives
/// what the universal form gives, exactly, so only commands for which that holds take it:
///
/// With [`kill_on_disconnect(false)`](crate::SshExecutorBuilder::kill_on_disconnect) the
/// direct form has no supervisor: its only remaining job, the kill on timeout or
/// cancellation, is then done from a second channel, as for the crate's own scripts.
///
/// * a shell command (not a `#!` script), not starting with `-` or `+` (`sh -c -x` reads an
///   option), whose request stays below [`ARGV_LIMIT`];
/// * no `env_clear`, no environment change to a [name the shell treats
///   specially](SHELL_SPECIAL_NAMES), no newline in the directory or a value.
///
/// One difference remains, documented: a command with a syntax error on its first line in a
/// directory that does not exist reports the syntax error (status 2) where the universal
/// form reports the failed `cd` (status 1).
///
/// The request is not login-shell neutral (it carries the caller's text between quotes), which
/// is why it is only sent to shells from [`DIRECT_SHELLS`]. Should the login shell still not
/// run it, no marker comes back and nothing has run: the executor then runs the command in
/// the universal form and keeps to that form on this connection.
pub(crate) fn direct_wrapper(
    program: &Program,
    dir: Option<&Path>,
    env: &EnvPlan,
    marker: &str,
    supervision: Supervision,
) -> Option<Wrapped> {
    let text = direct_text(program, dir, env)?;
    // Without kill-on-disconnect the supervisor's only job would be the kill request, which a
    // second channel can do as well: the command runs without it, one forked shell less.
    let supervisor = if supervision.kill_on_disconnect || supervision.terminal {
        supervisor_line(supervision)
    } else {
        String::new()
    };
    let mut request = format!(
        // Not a group leader (a server that does not setsid): no marker, and the executor
        // falls back to the universal form, which handles that.
        "kill -0 -$$ 2>/dev/null || exit 124; {supervisor}\
         echo \"{marker}$$ L direct\" >&2 || exit 125; exec sh -c "
    )
    .into_bytes();
    request.extend_from_slice(&quote(&text));
    // In a terminal the command's stdin is the terminal.
    if supervision.null_stdin() {
        request.extend_from_slice(b" </dev/null");
    }
    // The login shell gets the request as one argument, which Linux limits to 128 KiB.
    if request.len() > ARGV_LIMIT {
        return None;
    }
    Some(Wrapped {
        request,
        stdin: Vec::new(),
        controlled: supervision.kill_on_disconnect && !supervision.terminal,
    })
}

/// How the payload changes directory: `-P`, so that `pwd` and `$PWD` name the directory
/// without symbolic links, as they do under LocalExecutor (its `sh` starts in a directory
/// set with `chdir`, finds that the inherited `PWD` does not name it and takes the physical
/// path). A logical `cd` would keep the link's name, and `..` would mean the link's parent.
const CD: &[u8] = b"cd -P -- ";

/// Appends to `payload` what hands `body` to a program on a pipe, as LocalExecutor writes
/// a script's body to its interpreter's stdin, with the program `exec`ed by the bootstrap's
/// shell so that it leads the command's process group (`$$` is the group id, as under
/// LocalExecutor). `from_pipe` is the program run with the pipe's read end on fd 5,
/// `from_stdin` the same program at the end of a pipeline (the fallback).
///
/// POSIX sh has no way to make a pipe for itself, but a here-document is one in dash,
/// BusyBox ash and bash (a pipe for a small document); Linux opens a pipe through
/// `/proc/self/fd` like a FIFO, so the shell adds a write end to it, hands that to a
/// background writer (`printf` of the body) and `exec`s the program on the read end. The
/// writer holds nothing else (none of the channel's descriptors: dash would keep saved
/// copies of them for a builtin, hence the `exec`s). Where the document is a file (mksh, zsh
/// as `/bin/sh`) or `/proc` is missing, the body goes through a pipeline as before, and the
/// program is not the group leader.
fn feed_and_exec(payload: &mut Vec<u8>, body: &[u8], from_pipe: &[u8], from_stdin: &[u8]) {
    payload.extend_from_slice(b"swiftide_body=");
    payload.extend_from_slice(&quote_line(body));
    payload.extend_from_slice(
        b"; eval \"exec 5<<E${nl}x${nl}E${nl}\"; \
          if [ -p /proc/self/fd/5 ] && read -r _ <&5 && command exec 6>/proc/self/fd/5; then \
          { exec 5<&- >&6 6>&- 2>/dev/null; printf %s \"$swiftide_body\"; } & exec 6>&-; ",
    );
    payload.extend_from_slice(from_pipe);
    payload.extend_from_slice(b"; fi; exec 5<&-; printf %s \"$swiftide_body\" | ");
    payload.extend_from_slice(from_stdin);
}

/// The exec request and how to drive it.
#[derive(Debug)]
pub(crate) struct Wrapped {
    /// The exec request: the [bootstrap], free of caller data.
    pub(crate) request: Vec<u8>,
    /// Bytes to send on stdin right after the request: the payload line, and for
    /// uncontrolled requests their data (then EOF).
    pub(crate) stdin: Vec<u8>,
    /// The rest of the channel's stdin is the control line of a supervisor: sending `K\n`
    /// kills the group, EOF means the client is gone. Otherwise the kill needs a second
    /// channel.
    pub(crate) controlled: bool,
}

/// Builds the exec request and its payload for a user's program (see the module docs). The
/// payload
///
/// 1. changes to `dir`;
/// 2. applies the environment plan;
/// 3. runs the user's program: `exec sh -c <command> </dev/null` (through a pipe when the
///    command is longer than [`ARGV_LIMIT`]), or for a script
///    `printf %s <body> | <interpreter> [argument]`.
pub(crate) fn wrapper(
    program: &Program,
    dir: Option<&Path>,
    env: &EnvPlan,
    marker: &str,
    supervision: Supervision,
    escalation: Option<&Escalation<'_>>,
) -> Result<Wrapped> {
    let mut payload = Vec::new();

    if let Some(dir) = dir {
        let bytes = dir.as_os_str().as_encoded_bytes();
        reject_nul("the working directory", bytes)?;
        // `./` keeps CDPATH from redirecting (and printing) a relative cd.
        let mut target = Vec::with_capacity(bytes.len() + 2);
        if !bytes.starts_with(b"/") {
            target.extend_from_slice(b"./");
        }
        target.extend_from_slice(bytes);
        payload.extend_from_slice(CD);
        payload.extend_from_slice(&quote_line(&target));
        payload.extend_from_slice(b" || exit 1; ");
    }

    env.validate()?;
    if !env.clear {
        if !env.remove.is_empty() {
            payload.extend_from_slice(b"unset");
            for name in &env.remove {
                payload.push(b' ');
                payload.extend_from_slice(name.as_bytes());
            }
            payload.extend_from_slice(b"; ");
        }
        for (name, value) in &env.set {
            payload.extend_from_slice(b"export ");
            payload.extend_from_slice(name.as_bytes());
            payload.push(b'=');
            payload.extend_from_slice(&quote_line(value.as_bytes()));
            payload.extend_from_slice(b"; ");
        }
    }

    let mut env_prefix = Vec::new();
    if env.clear {
        // Removing after clearing changes nothing; only the set pairs survive.
        env_prefix.extend_from_slice(b"env -i ");
        for (name, value) in &env.set {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            env_prefix.extend_from_slice(&quote_line(&pair));
            env_prefix.push(b' ');
        }
    }
    match program {
        Program::Shell(command) => {
            reject_nul("the command", command.as_bytes())?;
            if command.len() <= ARGV_LIMIT {
                payload.extend_from_slice(b"exec ");
                payload.extend_from_slice(&env_prefix);
                payload.extend_from_slice(b"sh -c ");
                payload.extend_from_slice(&quote_line(command.as_bytes()));
                // In a terminal the command's stdin is the terminal; one the caller feeds
                // was opened by the payload's prefix.
                if supervision.null_stdin() {
                    payload.extend_from_slice(b" </dev/null");
                }
            } else if !supervision.null_stdin() {
                return Err(stdin_taken(
                    "a command over 100 KiB, which reaches its shell on a pipe",
                ));
            } else {
                // Too long for one argv string: the shell reads it from a pipe on fd 3 and
                // evals it, with `$0` = `sh` and stdin at EOF as under `sh -c`.
                const READ_AND_EVAL: &[u8] = b"sh -c 'c=$(cat <&3); exec 3<&-; eval \"$c\"' sh ";
                let mut from_pipe = b"exec ".to_vec();
                from_pipe.extend_from_slice(&env_prefix);
                from_pipe.extend_from_slice(READ_AND_EVAL);
                from_pipe.extend_from_slice(b"3<&5 5<&- </dev/null");
                let mut from_stdin = b"{ exec ".to_vec();
                from_stdin.extend_from_slice(&env_prefix);
                from_stdin.extend_from_slice(READ_AND_EVAL);
                from_stdin.extend_from_slice(b"3<&0 </dev/null; }");
                feed_and_exec(&mut payload, command.as_bytes(), &from_pipe, &from_stdin);
            }
        }
        Program::Script { .. } if !supervision.null_stdin() => {
            return Err(stdin_taken(
                "a `#!` script, whose interpreter reads its body on stdin (run the file through \
                 its interpreter instead)",
            ));
        }
        Program::Script {
            interpreter,
            argument,
            body,
        } => {
            reject_nul("the interpreter", interpreter.as_bytes())?;
            reject_nul("the script", body)?;
            let mut run = env_prefix.clone();
            run.extend_from_slice(&quote_line(interpreter.as_bytes()));
            if let Some(argument) = argument {
                reject_nul("the interpreter argument", argument.as_bytes())?;
                run.push(b' ');
                run.extend_from_slice(&quote_line(argument.as_bytes()));
            }
            let mut from_pipe = b"exec ".to_vec();
            from_pipe.extend_from_slice(&run);
            from_pipe.extend_from_slice(b" <&5 5<&-");
            feed_and_exec(&mut payload, body, &from_pipe, &run);
        }
    }
    payload.push(b'\n');

    Ok(Wrapped {
        request: bootstrap(marker, Some(supervision), escalation),
        stdin: payload,
        // A terminal's stdin is its input: the kill comes from a second channel.
        controlled: !supervision.terminal,
    })
}

/// The error for a command that cannot take a terminal or the caller's stdin.
fn stdin_taken(what: &str) -> crate::error::Error {
    crate::error::Error::InvalidInput {
        reason: format!("{what} cannot take a terminal or stdin from the caller"),
    }
}

/// Not part of the API: the exec request and the stdin payload the executor sends for a shell
/// `command` with no workdir, no environment changes and the default kill grace (1 s), on a
/// warm connection to an OpenSSH server whose login shell is POSIX (the [direct](direct_wrapper)
/// form; the universal form for commands that cannot take it). The
/// benchmark harness sends them over a bare russh channel, so that the remote work is
/// identical and the difference is the pool's own cost. After the payload the channel's
/// stdin must stay open until the command ends (it is the supervisor's control line; EOF
/// means "the client is gone").
#[doc(hidden)]
pub fn exec_request_for_benchmarks(
    command: &str,
    kill_on_disconnect: bool,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let supervision = Supervision {
        kill_on_disconnect,
        grace: std::time::Duration::from_secs(1),
        terminal: false,
        caller_stdin: false,
    };
    let program = Program::Shell(command.to_owned());
    let marker = crate::command::marker::marker_prefix(0);
    let wrapped = match direct_wrapper(&program, None, &EnvPlan::default(), &marker, supervision) {
        Some(direct) => direct,
        None => wrapper(
            &program,
            None,
            &EnvPlan::default(),
            &marker,
            supervision,
            None,
        )?,
    };
    Ok((wrapped.request, wrapped.stdin))
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
        terminal: false,
        caller_stdin: false,
    };

    /// Runs `request` as `<login shell> -c <request>` (as sshd does) with `stdin`, in the
    /// test's process group (not a group leader: the bootstrap's `setsid` path).
    fn run_as(login_shell: &[&str], request: &[u8], stdin: &[u8]) -> std::process::Output {
        use std::io::Write;
        use std::os::unix::ffi::OsStrExt;
        let mut child = Command::new(login_shell[0])
            .args(&login_shell[1..])
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

    fn run_wrapper_locally(wrapped: &Wrapped, extra: &[u8]) -> std::process::Output {
        let mut stdin = wrapped.stdin.clone();
        stdin.extend_from_slice(extra);
        run_as(&["sh"], &wrapped.request, &stdin)
    }

    fn strip_marker(marker: &str, stderr: Vec<u8>) -> (Option<u32>, Vec<u8>) {
        let mut parser = MarkerParser::new(marker);
        let (pgid, rest) = parser.feed(Bytes::from(stderr));
        let mut rest = rest.concat();
        rest.extend(parser.give_up().concat());
        (pgid, rest)
    }

    #[test]
    fn wrapper_reports_pid_changes_dir_and_applies_env_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let env = EnvPlan {
            clear: false,
            remove: vec!["HOME".into(), "KEEP".into()],
            set: vec![("KEEP".into(), "it's\nset".into())],
        };
        let wrapped = wrapper(
            &Program::Shell("pwd; printf '%s|' \"${HOME-unset}\" \"$KEEP\"; cat".into()),
            Some(dir.path()),
            &env,
            &marker_prefix(7),
            QUIET,
            None,
        )
        .unwrap();
        assert!(!wrapped.request.windows(4).any(|w| w == b"KEEP"));
        // The user command's stdin is /dev/null whatever the channel carries.
        let out = run_wrapper_locally(&wrapped, b"not for the command");
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
    fn wrapper_clears_env_and_runs_scripts() {
        let env = EnvPlan {
            clear: true,
            remove: vec![],
            set: vec![("ONLY".into(), "1".into())],
        };
        let program =
            Program::parse("#!/bin/sh -e\nenv | sort | grep -v '^PWD='\nfalse\necho after");
        let wrapped = wrapper(&program, None, &env, &marker_prefix(1), QUIET, None).unwrap();
        assert!(wrapped.controlled);
        let out = run_wrapper_locally(&wrapped, b"");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ONLY=1\n");
        assert!(!out.status.success());
    }

    #[test]
    fn own_scripts_report_their_group_and_read_their_data() {
        let marker = marker_prefix(9);
        let wrapped =
            script_request(&marker, b"echo out\necho err >&2\ncat", b"DATA\nmore", None).unwrap();
        assert!(!wrapped.controlled);
        let out = run_wrapper_locally(&wrapped, b"");
        assert_eq!(out.stdout, b"out\nDATA\nmore");
        let (pgid, rest) = strip_marker(&marker, out.stderr);
        assert!(pgid.is_some_and(|pgid| pgid > 0));
        assert_eq!(rest, b"err\n");
    }

    #[test]
    fn bodies_and_commands_of_any_size_keep_the_supervisor() {
        // A shebang body far above what an argv string or Dropbear's request limit holds.
        let body = format!("printf %s {}\n", "x".repeat(300 * 1024));
        let program = Program::parse(&format!("#!/bin/sh\n{body}"));
        let wrapped = wrapper(&program, None, &EnvPlan::default(), "@@m:", QUIET, None).unwrap();
        assert!(wrapped.controlled && wrapped.request.len() < 4096);
        let out = run_wrapper_locally(&wrapped, b"");
        assert_eq!(out.stdout.len(), 300 * 1024);

        // A command above ARGV_LIMIT, with quotes and newlines, runs as `sh -c` would.
        let command = format!(
            "x='{}'\nprintf '%s|%s' \"${{#x}}\" \"$0\"; cat",
            "a'b".replace('\'', "q").repeat(60 * 1024)
        );
        assert!(command.len() > ARGV_LIMIT);
        let wrapped = wrapper(
            &Program::Shell(command),
            None,
            &EnvPlan::default(),
            "@@m:",
            QUIET,
            None,
        )
        .unwrap();
        let out = run_wrapper_locally(&wrapped, b"not for the command");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{}|sh", 3 * 60 * 1024)
        );
        assert!(out.status.success(), "{out:?}");
    }

    /// Every kind of command leads its process group (`$$` is the group id, as under
    /// LocalExecutor), both where the server made the session a group of its own (OpenSSH)
    /// and where the bootstrap makes one (Dropbear); and a directory reached through a
    /// symbolic link is named by its physical path in `pwd` and `$PWD`.
    #[test]
    fn every_command_leads_its_group_and_sees_the_physical_directory() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let real = real.canonicalize().unwrap();
        let check = "g=$(ps -o pgid= -p $$ | tr -d ' '); [ \"$$\" = \"$g\" ] && printf 'leader|'; \
                     printf '%s|%s' \"$(pwd)\" \"$PWD\"";
        let big = format!("# {}\n{check}", "pad ".repeat(ARGV_LIMIT / 3));
        let programs = [
            ("shell", Program::Shell(check.into())),
            ("script", Program::parse(&format!("#!/bin/sh\n{check}"))),
            (
                "bash script",
                Program::parse(&format!("#!/bin/bash\n{check}")),
            ),
            ("big command", Program::Shell(big)),
        ];
        let expected = format!("leader|{}|{}", real.display(), real.display());
        for (name, program) in &programs {
            let wrapped = wrapper(
                program,
                Some(&dir.path().join("link")),
                &EnvPlan::default(),
                "@@m:",
                QUIET,
                None,
            )
            .unwrap();
            for login in [&["setsid", "sh"][..], &["sh"][..]] {
                let out = run_as(login, &wrapped.request, &wrapped.stdin);
                let (pgid, stderr) = strip_marker("@@m:", out.stderr.clone());
                assert!(pgid.is_some(), "{name} {login:?}: {out:?}");
                assert!(stderr.is_empty(), "{name} {login:?}: {out:?}");
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    expected,
                    "{name} {login:?}: {:?}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            if let Some(direct) = direct_wrapper(
                program,
                Some(&dir.path().join("link")),
                &EnvPlan::default(),
                "@@m:",
                QUIET,
            ) {
                let out = run_as(&["setsid", "sh"], &direct.request, &direct.stdin);
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    expected,
                    "{name} direct"
                );
            }
        }
        // Where the bootstrap waits for a new session, its own shells say nothing about how
        // the command died (dash prints "Terminated" for a child it waits for).
        for command in ["kill -TERM $$", "#!/bin/sh\nkill -KILL $$"] {
            let program = Program::parse(command);
            let wrapped =
                wrapper(&program, None, &EnvPlan::default(), "@@m:", QUIET, None).unwrap();
            let out = run_as(&["sh"], &wrapped.request, &wrapped.stdin);
            let (pgid, stderr) = strip_marker("@@m:", out.stderr);
            assert!(pgid.is_some(), "{command}");
            assert_eq!(String::from_utf8_lossy(&stderr), "", "{command}");
            assert!(
                matches!(out.status.code(), Some(143 | 137)),
                "{command}: {:?}",
                out.status
            );
        }
    }

    /// `(login shell, how to run it)`; every one must be installed where `CI` is set.
    const LOGIN_SHELLS: &[(&str, &[&str])] = &[
        ("sh", &["sh"]),
        ("dash", &["dash"]),
        ("bash", &["bash"]),
        ("zsh", &["zsh", "-f"]),
        ("mksh", &["mksh"]),
        ("ash", &["busybox", "ash"]),
        ("fish", &["fish", "--no-config"]),
        ("tcsh", &["tcsh", "-f"]),
    ];

    /// The [`LOGIN_SHELLS`] that take the direct form.
    fn posix_login_shells() -> Vec<(&'static str, &'static [&'static str])> {
        LOGIN_SHELLS
            .iter()
            .copied()
            .filter(|(name, _)| direct_capable(&format!("L {name}")))
            .collect()
    }

    fn installed(name: &str) -> bool {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {name}"))
            .output()
            .is_ok_and(|o| o.status.success())
    }

    #[test]
    fn every_login_shell_runs_exactly_the_text_sent() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let odd_dir = dir.path().join("it's a \\ $HOME !x\nnew");
        std::fs::create_dir(&odd_dir).unwrap();
        // Everything a login shell could reinterpret: quotes, backslash pairs, `!`, `$`,
        // newlines, a quoted heredoc, CR, non-UTF-8.
        let command = "printf '%s\\n' \"$0\" 'it'\\''s' '\\\\' '!x' \"$V\"; cat <<'EOF'\n$HOME \\\\ `x` !!\nEOF\nprintf 'a\\\\nb\\r\\xff'; pwd";
        let env = EnvPlan {
            clear: false,
            remove: vec![],
            set: vec![("V".into(), "v'\\\\ $x !y\nz".into())],
        };
        let wrapped = wrapper(
            &Program::Shell(command.into()),
            Some(&odd_dir),
            &env,
            "@@m:",
            QUIET,
            None,
        )
        .unwrap();
        let request = std::str::from_utf8(&wrapped.request).unwrap();
        assert!(request.starts_with("exec /bin/sh -c '"));
        assert!(is_neutral(
            &request["exec /bin/sh -c '".len()..request.len() - 1].replace("' sh '", "")
        ));

        // What `sh -c` prints for the same command in the same place: the reference.
        let expected = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&odd_dir)
            .env("V", "v'\\\\ $x !y\nz")
            .output()
            .unwrap();
        assert!(expected.status.success());
        let mut missing = Vec::new();
        for (name, invocation) in LOGIN_SHELLS {
            if !installed(invocation[0]) {
                missing.push(*name);
                continue;
            }
            let out = run_as(invocation, &wrapped.request, &wrapped.stdin);
            let (pgid, stderr) = strip_marker("@@m:", out.stderr);
            assert!(
                pgid.is_some(),
                "{name}: no marker; stderr {:?}",
                String::from_utf8_lossy(&stderr)
            );
            assert_eq!(
                out.stdout,
                expected.stdout,
                "{name} ran different text: {:?}",
                std::ffi::OsStr::from_bytes(&out.stdout)
            );
            assert_eq!(stderr, expected.stderr, "{name}");
            assert!(out.status.success(), "{name}: {:?}", out.status);
        }
        if !missing.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "login shells missing in CI: {missing:?}"
            );
            eprintln!("login shells not installed here, not tested: {missing:?}");
        }
    }

    #[test]
    fn direct_form_runs_exactly_what_sh_runs_under_every_posix_login_shell() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        // Everything but a newline (which sends the command to the universal form).
        let odd_dir = dir.path().join("it's a \\ $HOME !x \"q\"");
        std::fs::create_dir(&odd_dir).unwrap();
        let command = "printf '%s\\n' \"$0\" \"$#\" 'it'\\''s' '\\\\' '!x' \"$V\" \"$LINENO\"; cat <<'EOF'\n$HOME \\\\ `x` !!\nEOF\necho \"$LINENO\"; nosuch_cmd_xyz; pwd; printf 'a\\r\\n'\n";
        let env = EnvPlan {
            clear: false,
            remove: vec!["DROPPED".into()],
            set: vec![("V".into(), "v'\\\\ $x !y \"z\"".into())],
        };
        let marker = "@@m:";
        let direct = direct_wrapper(
            &Program::Shell(command.into()),
            Some(&odd_dir),
            &env,
            marker,
            QUIET,
        )
        .expect("eligible for the direct form");
        assert!(
            !direct.controlled,
            "QUIET: no kill-on-disconnect, no supervisor"
        );
        let expected = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&odd_dir)
            .env("V", "v'\\\\ $x !y \"z\"")
            .env("DROPPED", "1")
            .env_remove("DROPPED")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            !expected.stderr.is_empty(),
            "the reference reports the missing command"
        );
        let shells = posix_login_shells();
        let names: Vec<&str> = shells.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["sh", "dash", "bash", "zsh", "mksh", "ash"]);
        for (name, invocation) in shells {
            if !installed(invocation[0]) {
                assert!(std::env::var_os("CI").is_none(), "{name} missing in CI");
                continue;
            }
            let mut child = Command::new(invocation[0]);
            child
                .args(&invocation[1..])
                .arg("-c")
                .arg(std::ffi::OsStr::from_bytes(&direct.request))
                .env("DROPPED", "still here")
                // sshd makes the login shell a session (and group) leader.
                .process_group(0)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = child.spawn().unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(&direct.stdin)
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let (pgid, stderr) = strip_marker(marker, out.stderr);
            assert!(
                pgid.is_some(),
                "{name}: no marker: {:?}",
                String::from_utf8_lossy(&stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&expected.stdout),
                "{name}"
            );
            assert_eq!(
                String::from_utf8_lossy(&stderr),
                String::from_utf8_lossy(&expected.stderr),
                "{name}"
            );
            assert_eq!(out.status.code(), expected.status.code(), "{name}");
        }
        use std::os::unix::ffi::OsStrExt;
    }

    #[test]
    fn prestarted_shells_run_both_forms_exactly_as_sh_does() {
        use std::io::Write;
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        let supervision = Supervision {
            kill_on_disconnect: true,
            grace: std::time::Duration::from_millis(200),
            terminal: false,
            caller_stdin: false,
        };
        let request = prestart_request(supervision);
        let command = "printf '%s|' \"$0\" \"$#\" 'it'\\''s'\necho \"$LINENO\"; nosuch_cmd_xyz";
        let expected = Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let plain = EnvPlan::default();
        let direct_program = Program::Shell(command.into());
        let script = Program::parse("#!/bin/sh\nprintf script; nosuch_cmd_xyz");
        for (name, invocation) in posix_login_shells() {
            if !installed(invocation[0]) {
                assert!(std::env::var_os("CI").is_none(), "{name} missing in CI");
                continue;
            }
            for program in [&direct_program, &script] {
                let wrapped = wrapper(program, None, &plain, "@@m:", supervision, None).unwrap();
                let payload =
                    prestart_payload(Some(program), None, &plain, "@@m:", supervision, &wrapped);
                assert_eq!(payload.direct, program == &direct_program, "{name}");
                let mut child = Command::new(invocation[0])
                    .args(&invocation[1..])
                    .arg("-c")
                    .arg(std::ffi::OsStr::from_bytes(&request))
                    .process_group(0)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                // The shell is up and waiting before the payload comes, as on a spare; stdin
                // then closes (a clean end: the command has finished by then).
                std::thread::sleep(std::time::Duration::from_millis(50));
                let mut stdin = child.stdin.take().unwrap();
                stdin.write_all(&payload.stdin).unwrap();
                let out = {
                    let waited = std::thread::spawn(move || child.wait_with_output().unwrap());
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    drop(stdin);
                    waited.join().unwrap()
                };
                let (pgid, stderr) = strip_marker("@@m:", out.stderr);
                assert!(pgid.is_some(), "{name}: no marker");
                if program == &direct_program {
                    assert_eq!(out.stdout, expected.stdout, "{name}");
                    assert_eq!(stderr, expected.stderr, "{name}");
                    assert_eq!(out.status.code(), expected.status.code(), "{name}");
                } else {
                    assert_eq!(out.stdout, b"script", "{name}");
                    assert!(String::from_utf8_lossy(&stderr).contains("nosuch_cmd_xyz"));
                }
            }
        }
    }

    #[test]
    fn a_prestarted_shell_whose_stdin_closes_first_runs_nothing() {
        let request = prestart_request(QUIET);
        let out = run_as(&["setsid", "bash"], &request, b"");
        assert_eq!(out.status.code(), Some(125));
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    }

    #[test]
    fn direct_form_is_only_for_what_it_runs_exactly() {
        let shell = |c: &str| Program::Shell(c.into());
        let plain = EnvPlan::default();
        let d = |program: &Program, dir: Option<&Path>, env: &EnvPlan| {
            direct_wrapper(program, dir, env, "@@m:", QUIET).is_some()
        };
        assert!(d(&shell("true"), None, &plain));
        assert!(!d(&shell("-x"), None, &plain));
        assert!(!d(&Program::parse("#!/bin/sh\ntrue"), None, &plain));
        assert!(!d(&shell(&"x".repeat(ARGV_LIMIT + 1)), None, &plain));
        assert!(!d(&shell("true"), Some(Path::new("a\nb")), &plain));
        let with = |name: &str, value: &str| EnvPlan {
            clear: false,
            remove: vec![],
            set: vec![(name.into(), value.into())],
        };
        assert!(d(&shell("true"), None, &with("A", "1")));
        assert!(!d(&shell("true"), None, &with("IFS", ":")));
        assert!(!d(&shell("true"), None, &with("A", "1\n2")));
        let cleared = EnvPlan {
            clear: true,
            ..EnvPlan::default()
        };
        assert!(!d(&shell("true"), None, &cleared));
        assert!(!direct_capable("D bash"));
        assert!(!direct_capable("L fish"));
        assert!(!direct_capable("L tcsh"));
        assert!(!direct_capable(""));
    }

    #[test]
    fn direct_form_without_a_group_of_its_own_prints_no_marker_and_runs_nothing() {
        let direct = direct_wrapper(
            &Program::Shell("echo ran".into()),
            None,
            &EnvPlan::default(),
            "@@m:",
            QUIET,
        )
        .unwrap();
        // Not a group leader: the test's own group.
        let out = run_as(&["bash"], &direct.request, &direct.stdin);
        assert_eq!(out.status.code(), Some(124));
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    }

    /// Starts a wrapped command locally in its own session (as sshd does) with a pipe for
    /// the channel's stdin; returns the child and its pgid (read from the marker).
    /// `direct`: the direct form (run by `sh` as the login shell), else the universal one.
    fn spawn_supervised(
        command: &str,
        supervision: Supervision,
        direct: bool,
    ) -> (std::process::Child, u32) {
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::ffi::OsStrExt;
        let program = Program::Shell(command.into());
        let wrapped = if direct {
            direct_wrapper(&program, None, &EnvPlan::default(), "@@m:", supervision).unwrap()
        } else {
            wrapper(
                &program,
                None,
                &EnvPlan::default(),
                "@@m:",
                supervision,
                None,
            )
            .unwrap()
        };
        let mut child = Command::new("setsid")
            .arg("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&wrapped.request))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The payload line; stdin then stays open as the supervisor's control line.
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(&wrapped.stdin)
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // `<pgid> L sh` (universal) or `<pgid> L direct`.
        let pgid = line
            .trim()
            .trim_start_matches("@@m:")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
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
            // (Without kill-on-disconnect the direct form has no supervisor.)
            kill_on_disconnect: true,
            grace: std::time::Duration::from_millis(200),
            terminal: false,
            caller_stdin: false,
        };
        for direct in [false, true] {
            let (mut child, pgid) =
                spawn_supervised("trap '' TERM; sleep 30 & sleep 30", supervision, direct);
            assert!(group_alive(pgid));
            child.stdin.as_mut().unwrap().write_all(b"K\n").unwrap();
            assert!(
                wait_dead(pgid),
                "group {pgid} survived the kill request ({direct})"
            );
            let _ = child.wait();
        }
    }

    #[test]
    fn supervisor_kills_the_group_when_the_channel_goes_away() {
        let supervision = Supervision {
            kill_on_disconnect: true,
            grace: std::time::Duration::from_secs(1),
            terminal: false,
            caller_stdin: false,
        };
        for direct in [false, true] {
            let (mut child, pgid) = spawn_supervised("sleep 30 & sleep 30", supervision, direct);
            drop(child.stdin.take()); // what sshd does when the connection dies
            assert!(
                wait_dead(pgid),
                "group {pgid} survived the disconnect ({direct})"
            );
            let _ = child.wait();
        }
    }

    #[test]
    fn without_kill_on_disconnect_eof_leaves_the_command_alone() {
        for direct in [false, true] {
            let (mut child, pgid) = spawn_supervised("sleep 0.5; echo done", QUIET, direct);
            drop(child.stdin.take());
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(group_alive(pgid), "{direct}");
            assert!(child.wait().unwrap().success());
        }
    }

    #[test]
    fn nul_bytes_are_refused() {
        let err = wrapper(
            &Program::Shell("echo a\0b".into()),
            None,
            &EnvPlan::default(),
            "m",
            QUIET,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("NUL"));
    }
}
