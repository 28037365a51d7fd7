//! The shell on the host side of jobs: the start script (one exec: directory, spec files,
//! the detached runner), the runner itself (written into the job directory), and the kill,
//! remove and prune scripts. All of them are the crate's own scripts
//! ([`run_collect`](crate::files::run_collect)): their text travels on the channel's stdin, and
//! every caller value in them is quoted ([`quote_line`]) or hex-encoded in the spec.
//!
//! # The job directory
//!
//! `${XDG_STATE_HOME:-$HOME/.local/state}/swiftide-ssh/jobs/<id>/`, mode 700 (umask 077):
//!
//! | file | written by | content |
//! |---|---|---|
//! | `spec` | start, the last of its files | what the job was started with ([`Spec`](super::spec::Spec)) |
//! | `launch` | start | `cd`, environment and `exec sh -c '<command>'`, as for a command |
//! | `run`, `params` | start | the runner and its numbers (`cap`, `dl`, `grace`) |
//! | `o.fifo`, `e.fifo`, `ready` | start (`mkfifo`), removed by the runner at the end | the command's stdout and stderr on their way to the spoolers; the runner's answer to the start script |
//! | `started` | start | created with `O_EXCL` (`set -C`): claims the one start of the runner (a directory, made by `mkdir`, in jobs started by earlier builds; both count) |
//! | `pid` | start (padded), runner (in place) | `<pid> <starttime> <runner pid> <runner starttime> <boot id> <started at>`; blank until recorded (earlier builds wrote it by temp + `mv`: missing until recorded) |
//! | `stdout`, `stderr` | the spoolers | the output, exactly, up to the cap |
//! | `stdout.drop`, `stderr.drop` | the spoolers, at the stream's end | `<head status> <bytes dropped> <cap>` |
//! | `stdout.err`, `stderr.err` | the spoolers | a write error (`No space left on device`) |
//! | `reason` | kill, deadline | `killed` or `deadline`, first one wins |
//! | `exit` | runner (temp + `mv`), after both streams ended | `<status> <ended at>` |
//! | `failed` | the runner's stderr | why it could not start |
//!
//! Files written while the disk may be full (`pid`, `exit`, `reason`, the `.drop` and `.err`
//! files) are created padded with spaces at the start and later overwritten in place (`1<>`),
//! so writing them needs no new block. A reader treats a blank record as a missing one. Times
//! are the host's clock (`date +%s`).
//!
//! # What a start costs the host
//!
//! The start is on the caller's critical path, so the scripts fork as little as they can:
//! records are read with the `read` builtin (`/proc/PID/stat`, the boot id, `reason`), never
//! with `cat` in a subshell; files are written with `printf`; the claim is a redirection.
//! A start that creates the job directory runs `mkdir`, one `mkfifo`, then the runner
//! (`setsid`, `sh`), which runs `date` once before it answers; the spoolers (`head`, then
//! `wc`) and the command's `setsid`/`sh` start beside it. The start script waits for the
//! runner's answer on the `ready` FIFO (the runner's stdout, opened before its `exec`): the
//! runner writes `ok` once `pid` is recorded and then lets its stdout go, and every process it
//! starts has a stdout of its own, so the read returns at once, and returns as well (at EOF)
//! when the runner dies before answering. (A command substitution of the backgrounded runner
//! does not do: dash leaks a saved copy of the pipe into the background job, fd 251, so the
//! answer would wait for the job's end.) Only a start that finds the directory there (a retry, a concurrent
//! start) reads the spec back to compare it, and only one that did not start the runner itself
//! polls for the `pid` record.

use std::{path::Path, time::Duration};

use super::spec::Spec;
use crate::{
    command::{Program, Supervision, quote_line, wrapper},
    config::{Config, EnvPlan},
    error::Result,
};

/// The base directory, as shell text setting `b`; fails (exit 3) without an absolute one.
const BASE: &str = r#"b=${XDG_STATE_HOME:-$HOME/.local/state}/swiftide-ssh/jobs
case $b in /*) ;; *) echo "no absolute state directory (HOME and XDG_STATE_HOME are unset)" >&2; exit 3 ;; esac
"#;

/// `st PID`: sets `t` to the process's start time (field 22 of `/proc/PID/stat`, read after
/// the last `)` because the command name in field 2 may hold spaces and parentheses), or `-`.
/// Builtins only: `read` and parameter expansion, no subshell, no `cat`.
const START_TIME: &str = r#"st() { t=-; s=; read -r s 2>/dev/null <"/proc/$1/stat" || [ -n "$s" ] || return 0; s=${s##*) }; set -- $s; t=${20:--}; }
"#;

/// `boot`: sets `bid` to the host's boot id, or `-` (a builtin `read`, no `cat`).
const BOOT_ID: &str = r#"boot() { bid=; read -r bid 2>/dev/null </proc/sys/kernel/random/boot_id; bid=${bid:--}; }
"#;

// Signals go to a group as `kill -SIG -PGID`, without `--`: dash's `kill` refuses `--`.

/// Sleeps a little: fractions where `sleep` takes them (GNU, BusyBox), else a second.
const NAP: &str = "nap() { sleep \"$1\" 2>/dev/null || sleep 1; }\n";

/// The runner, run as `setsid /bin/sh run <dir>` with its stdout on the `ready` FIFO the start
/// script reads: it spools the command's output through the two FIFOs the start script made
/// (`head -c cap` into the stream file, the rest counted by `wc -c`), starts the command in
/// a session of its own, records its pid, start time and the boot id in the padded `pid`
/// file, says `ok` on the FIFO and lets it go, arms the deadline, waits for the command and
/// both streams, and writes `exit`. Its last act kills its own group (the watchdog and its
/// `sleep`); the job's group is the command's. Every child gets a stdout of its own, so the
/// FIFO closes when the runner lets it go (or dies): the start script never waits on a poll.
const RUNNER: &str = r#"d=$1
. "$d/params"
spool() {
  head -c "$cap" >"$d/$1" 2<>"$d/$1.err"; r=$?
  n=$(wc -c); n=$((n + 0))
  printf '%s %s %s' "$r" "$n" "$cap" 1<>"$d/$1.drop"
}
spool stdout <"$d/o.fifo" >/dev/null &
o=$!
spool stderr <"$d/e.fifo" >/dev/null &
e=$!
setsid /bin/sh "$d/launch" >"$d/o.fifo" 2>"$d/e.fifo" </dev/null &
c=$!
now=$(date +%s)
boot
st "$c"; ct=$t
st "$$"
printf '%s %s %s %s %s %s\n' "$c" "$ct" "$$" "$t" "$bid" "$now" 1<>"$d/pid" && echo ok
exec >/dev/null
if [ -n "$dl" ]; then
  (
    sleep "$dl"
    x=; read -r x 2>/dev/null <"$d/reason"
    case $x in *[!\ ]*) ;; *) printf deadline 1<>"$d/reason" ;; esac
    kill -TERM "-$c" 2>/dev/null
    sleep "$grace"
    kill -KILL "-$c" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
fi
wait "$c"; r=$?
wait "$o"; wait "$e"
printf '%s %s\n' "$r" "$(date +%s)" 1<>"$d/exit.tmp" && mv -f -- "$d/exit.tmp" "$d/exit"
rm -f -- "$d/o.fifo" "$d/e.fifo" "$d/ready"
kill -KILL "-$$" 2>/dev/null
"#;

/// Seconds with millisecond precision, as `sleep` takes them (`1.5`).
fn seconds(duration: Duration) -> String {
    let millis = duration.as_millis();
    format!("{}.{:03}", millis / 1000, millis % 1000)
}

/// `name=<value>` for the script, the value quoted.
fn assign(script: &mut Vec<u8>, name: &str, value: &[u8]) {
    script.extend_from_slice(name.as_bytes());
    script.push(b'=');
    script.extend_from_slice(&quote_line(value));
    script.push(b'\n');
}

/// The text of the job's `launch` file: what a command's payload does (`cd`, environment,
/// `exec sh -c`, or a `#!` script), run by the job's own `/bin/sh`.
pub(crate) fn launch(
    spec: &Spec,
    dir: Option<&Path>,
    env: &EnvPlan,
    config: &Config,
) -> Result<Vec<u8>> {
    let program = Program::parse(&spec.command);
    // The marker and supervision belong to the exec request, which a job does not use; only
    // the payload (stdin) is kept.
    let wrapped = wrapper(&program, dir, env, "", Supervision::of(config))?;
    let mut text = b"nl='\n'\n".to_vec();
    text.extend_from_slice(&wrapped.stdin);
    Ok(text)
}

/// The start script for `spec` (see the module docs). Prints the base directory, then `ok`
/// once the runner has recorded its pid, or `differs` when the id exists with another spec.
///
/// The path of a start that creates the directory forks three processes besides the runner:
/// `mkdir` of the job directory, one `mkfifo` and the subshell that starts the runner; the
/// files are written with `printf`, the claim of the one runner start is a `set -C`
/// (`O_EXCL`) redirection, and the answer comes on the `ready` FIFO from the runner (no poll,
/// no `sleep`). A start that finds the directory there (a second start with the same id, a
/// retry after a broken connection) waits for the claim, compares the spec and, if the
/// runner was started by another, polls for its `pid` record.
pub(crate) fn start(spec: &Spec, launch: &[u8]) -> Vec<u8> {
    let mut script = b"umask 077\n".to_vec();
    script.extend_from_slice(BASE.as_bytes());
    script.extend_from_slice(NAP.as_bytes());
    script.extend_from_slice(
        b"command -v setsid >/dev/null || { echo \"setsid is not installed\" >&2; exit 3; }\n\
          command -v mkfifo >/dev/null || { echo \"mkfifo is not installed\" >&2; exit 3; }\n\
          [ -d \"$b\" ] || { mkdir -p -- \"$b\" && chmod 700 -- \"${b%/jobs}\" \"$b\"; } || exit 3\n\
          echo \"$b\"\n",
    );
    // The id is checked (letters, digits, `.`, `_`, `-`), so inside double quotes it is
    // literal and only `$b` expands.
    script.extend_from_slice(format!("d=\"$b/{}\"\n", spec.id).as_bytes());
    assign(&mut script, "sp", spec.encode().as_bytes());
    assign(&mut script, "la", launch);
    assign(
        &mut script,
        "ru",
        format!("{START_TIME}{BOOT_ID}{RUNNER}").as_bytes(),
    );
    let params = format!(
        "cap={}\ndl={}\ngrace={}\n",
        spec.spool_cap,
        spec.deadline.map(seconds).unwrap_or_default(),
        seconds(spec.kill_grace),
    );
    assign(&mut script, "pa", params.as_bytes());
    script.extend_from_slice(
        br#"# A write that fails on a full disk says only "I/O error": name the cause when it is that.
unwritable() {
  a=$(df -Pk -- "$d" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "$a" = 0 ]; then echo "cannot write the job's files in $d: No space left on device" >&3
  else echo "cannot write the job's files in $d" >&3; fi
  exit 4
}
# The job's files, the spec last. `true`, not `:`, under redirections: a special builtin's
# failed redirection would end the shell before `unwritable` names the cause.
files() {
  { printf %s "$la" >"$d/launch" && printf %s "$ru" >"$d/run" && printf %s "$pa" >"$d/params" &&
    for f in pid exit.tmp reason stdout.drop stderr.drop stdout.err stderr.err; do
      printf '%256s' '' >"$d/$f" || unwritable
    done &&
    true >"$d/stdout" && true >"$d/stderr" && mkfifo -- "$d/o.fifo" "$d/e.fifo" "$d/ready" &&
    printf %s "$sp" >"$d/spec"; } 2>/dev/null || unwritable
}
# Whether the runner's `pid` record is there (this version pads it; the previous one wrote
# it by `mv`).
recorded() { x=; read -r x 2>/dev/null <"$d/pid"; [ -n "$x" ]; }
# Whether the runner start was claimed (a file now, a directory before).
claimed() { [ -e "$d/started" ]; }
exec 3>&2
if mkdir -- "$d" 2>/dev/null; then
  files
  new=1
else
  new=
  [ -d "$d" ] || { echo "cannot create $d" >&2; exit 3; }
  n=0
  while ! claimed && [ "$n" -lt 300 ]; do nap 0.01; n=$((n + 1)); done
  if ! claimed; then
    # The start that made the directory broke before its claim: write the files again.
    rm -f -- "$d/o.fifo" "$d/e.fifo" "$d/ready"
    files
  fi
  s=$(cat -- "$d/spec"; echo x)
  [ "$s" = "${sp}x" ] || { echo differs; exit 0; }
fi
set -C
if true 2>/dev/null >"$d/started"; then
  set +C
  if [ -z "$new" ]; then
    # The files may be a previous version's (whose start broke before its claim): this
    # runner, its FIFOs and its padded `pid`.
    { printf %s "$ru" >"$d/run" && { [ -p "$d/ready" ] || { rm -f -- "$d/o.fifo" "$d/e.fifo"; mkfifo -- "$d/o.fifo" "$d/e.fifo" "$d/ready"; }; } &&
      { [ -f "$d/pid" ] || printf '%256s' '' >"$d/pid"; }; } 2>/dev/null || unwritable
  fi
  (cd / && exec setsid /bin/sh "$d/run" "$d" </dev/null >"$d/ready" 2>"$d/failed" 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-) &
  r=; read -r r <"$d/ready"
  [ "$r" = ok ] && { echo ok; exit 0; }
  # The FIFO closed without an answer: the runner is gone.
  recorded && { echo ok; exit 0; }
  if [ -s "$d/failed" ]; then cat -- "$d/failed" >&2; else echo "the job's runner ended before it recorded the start" >&2; fi
  exit 5
fi
set +C
# Another start runs the runner: wait for its record.
n=0
while ! recorded && [ ! -s "$d/failed" ] && [ "$n" -lt 1000 ]; do nap 0.01; n=$((n + 1)); done
if ! recorded; then
  if [ -s "$d/failed" ]; then cat -- "$d/failed" >&2; else echo "the job did not record its start within 10 s" >&2; fi
  exit 5
fi
echo ok
"#,
    );
    script
}

/// Prints the base directory (for reattaching from a new client).
pub(crate) fn base() -> Vec<u8> {
    format!("{BASE}echo \"$b\"\n").into_bytes()
}

/// The kill script for the job in `dir`: checks the boot id and the leader's start time, then
/// `SIGTERM` to the group, up to `grace` for it to go, `SIGKILL`. Prints one word: `ended`,
/// `starting`, `lost`, `reused`, `gone` or `killed`.
pub(crate) fn kill(dir: &Path, grace: Duration) -> Vec<u8> {
    let mut script = Vec::new();
    assign(&mut script, "d", dir.as_os_str().as_encoded_bytes());
    let ticks = grace.as_millis().div_ceil(50);
    script.extend_from_slice(format!("g={ticks}\n{START_TIME}{BOOT_ID}{NAP}").as_bytes());
    script.extend_from_slice(
        br#"[ -f "$d/exit" ] && { echo ended; exit 0; }
[ -f "$d/pid" ] || { echo starting; exit 0; }
read -r c cs rp rs bid t <"$d/pid"
[ -n "$t" ] || { echo starting; exit 0; }
b=$bid
boot
[ "$bid" = "$b" ] || { echo lost; exit 0; }
st "$c"
if [ "$t" != - ] && [ "$t" != "$cs" ]; then echo reused; exit 0; fi
kill -0 "-$c" 2>/dev/null || { echo gone; exit 0; }
x=; read -r x 2>/dev/null <"$d/reason"
case $x in *[!\ ]*) ;; *) printf killed 1<>"$d/reason" ;; esac
kill -TERM "-$c" 2>/dev/null
n=0
while kill -0 "-$c" 2>/dev/null && [ "$n" -lt "$g" ]; do nap 0.05; n=$((n + 1)); done
kill -KILL "-$c" 2>/dev/null
echo killed
"#,
    );
    script
}

/// Removes the job directory `dir`.
pub(crate) fn remove(dir: &Path) -> Vec<u8> {
    let mut script = Vec::new();
    assign(&mut script, "d", dir.as_os_str().as_encoded_bytes());
    script.extend_from_slice(b"rm -rf -- \"$d\"\n");
    script
}

/// Removes the jobs in `base` that ended at least `older_than` ago by the host's clock, and
/// prints their ids.
pub(crate) fn prune(base: &Path, older_than: Duration) -> Vec<u8> {
    let mut script = Vec::new();
    assign(&mut script, "b", base.as_os_str().as_encoded_bytes());
    script.extend_from_slice(
        format!(
            r#"a={}
now=$(date +%s)
for d in "$b"/*; do
  [ -f "$d/exit" ] || continue
  read -r r t <"$d/exit" || continue
  [ $((now - t)) -ge "$a" ] || continue
  rm -rf -- "$d" && echo "${{d##*/}}"
done
exit 0
"#,
            older_than.as_secs()
        )
        .as_bytes(),
    );
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_have_millis() {
        assert_eq!(seconds(Duration::from_millis(1500)), "1.500");
        assert_eq!(seconds(Duration::from_secs(3)), "3.000");
    }
}
