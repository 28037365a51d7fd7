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
//! | `spec` | start (temp + `mv`) | what the job was started with ([`Spec`](super::spec::Spec)) |
//! | `launch` | start | `cd`, environment and `exec sh -c '<command>'`, as for a command |
//! | `run`, `params` | start | the runner and its numbers (`cap`, `dl`, `grace`) |
//! | `started/` | start | `mkdir` claims the one start of the runner |
//! | `pid` | runner (temp + `mv`) | `<pid> <starttime> <runner pid> <runner starttime> <boot id> <started at>` |
//! | `stdout`, `stderr` | the spoolers | the output, exactly, up to the cap |
//! | `stdout.drop`, `stderr.drop` | the spoolers, at the stream's end | `<head status> <bytes dropped> <cap>` |
//! | `stdout.err`, `stderr.err` | the spoolers | a write error (`No space left on device`) |
//! | `reason` | kill, deadline | `killed` or `deadline`, first one wins |
//! | `exit` | runner (temp + `mv`), after both streams ended | `<status> <ended at>` |
//! | `failed` | runner | why it could not start |
//!
//! Files written while the disk may be full (`pid`, `exit`, `reason`, the `.drop` and `.err`
//! files) are created padded with spaces at the start and later overwritten in place (`1<>`),
//! so writing them needs no new block. Times are the host's clock (`date +%s`).

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

/// `st PID`: the process's start time (field 22 of `/proc/PID/stat`, read after the last `)`
/// because the command name in field 2 may hold spaces and parentheses), or `-`.
const START_TIME: &str = r#"st() { s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo -; return 0; }; s=${s##*) }; set -- $s; echo "${20:--}"; }
"#;

// Signals go to a group as `kill -SIG -PGID`, without `--`: dash's `kill` refuses `--`.

/// Sleeps a little: fractions where `sleep` takes them (GNU, BusyBox), else a second.
const NAP: &str = "nap() { sleep \"$1\" 2>/dev/null || sleep 1; }\n";

/// The runner, run as `setsid /bin/sh run <dir>`: it spools the command's output through two
/// FIFOs into the stream files (`head -c cap`, the rest counted by `wc -c`), starts the command
/// in a session of its own, records its pid, start time and the boot id, arms the deadline,
/// waits for the command and both streams, and writes `exit`. Its last act kills its own
/// group (the watchdog and its `sleep`); the job's group is the command's.
const RUNNER: &str = r#"d=$1
. "$d/params"
rm -f -- "$d/o.fifo" "$d/e.fifo"
mkfifo "$d/o.fifo" "$d/e.fifo" 2>"$d/failed" || exit 1
spool() {
  head -c "$cap" >"$d/$1" 2<>"$d/$1.err"; r=$?
  n=$(wc -c); n=$((n + 0))
  printf '%s %s %s' "$r" "$n" "$cap" 1<>"$d/$1.drop"
}
spool stdout <"$d/o.fifo" &
o=$!
spool stderr <"$d/e.fifo" &
e=$!
setsid /bin/sh "$d/launch" >"$d/o.fifo" 2>"$d/e.fifo" </dev/null &
c=$!
b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null) || b=
printf '%s %s %s %s %s %s\n' "$c" "$(st "$c")" "$$" "$(st "$$")" "${b:--}" "$(date +%s)" 1<>"$d/pid.tmp" && mv -f -- "$d/pid.tmp" "$d/pid"
if [ -n "$dl" ]; then
  (
    sleep "$dl"
    case $(cat "$d/reason") in *[!\ ]*) ;; *) printf deadline 1<>"$d/reason" ;; esac
    kill -TERM "-$c" 2>/dev/null
    sleep "$grace"
    kill -KILL "-$c" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
fi
wait "$c"; r=$?
wait "$o"; wait "$e"
printf '%s %s\n' "$r" "$(date +%s)" 1<>"$d/exit.tmp" && mv -f -- "$d/exit.tmp" "$d/exit"
rm -f -- "$d/o.fifo" "$d/e.fifo"
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
pub(crate) fn start(spec: &Spec, launch: &[u8]) -> Vec<u8> {
    let mut script = b"umask 077\n".to_vec();
    script.extend_from_slice(BASE.as_bytes());
    script.extend_from_slice(NAP.as_bytes());
    script.extend_from_slice(
        b"command -v setsid >/dev/null || { echo \"setsid is not installed\" >&2; exit 3; }\n\
          command -v mkfifo >/dev/null || { echo \"mkfifo is not installed\" >&2; exit 3; }\n\
          [ -d \"$b\" ] || mkdir -p -- \"$b\" || exit 3\n\
          chmod 700 -- \"${b%/jobs}\" \"$b\" || exit 3\n\
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
        format!("{START_TIME}{RUNNER}").as_bytes(),
    );
    let params = format!(
        "cap={}\ndl={}\ngrace={}\n",
        spec.spool_cap,
        spec.deadline.map(seconds).unwrap_or_default(),
        seconds(spec.kill_grace),
    );
    assign(&mut script, "pa", params.as_bytes());
    script.extend_from_slice(
        br#"if ! mkdir -- "$d" 2>/dev/null; then
  [ -d "$d" ] || { echo "cannot create $d" >&2; exit 3; }
  n=0
  while [ ! -f "$d/spec" ] && [ "$n" -lt 300 ]; do nap 0.01; n=$((n + 1)); done
fi
# A write that fails on a full disk says only "I/O error": name the cause when it is that.
unwritable() {
  a=$(df -Pk -- "$d" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "$a" = 0 ]; then echo "cannot write the job's files in $d: No space left on device" >&3
  else echo "cannot write the job's files in $d" >&3; fi
  exit 4
}
exec 3>&2
if [ ! -f "$d/spec" ]; then
  { printf %s "$la" >"$d/launch" && printf %s "$ru" >"$d/run" && printf %s "$pa" >"$d/params" &&
    for f in pid.tmp exit.tmp reason stdout.drop stderr.drop stdout.err stderr.err; do
      printf '%256s' '' >"$d/$f" || unwritable
    done &&
    : >"$d/stdout" && : >"$d/stderr" &&
    printf %s "$sp" >"$d/spec.tmp" && mv -f -- "$d/spec.tmp" "$d/spec"; } 2>/dev/null || unwritable
fi
s=$(cat -- "$d/spec"; echo x)
[ "$s" = "${sp}x" ] || { echo differs; exit 0; }
if mkdir -- "$d/started" 2>/dev/null; then
  (cd / && exec setsid /bin/sh "$d/run" "$d" </dev/null >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-) &
fi
n=0
while [ ! -f "$d/pid" ] && [ ! -s "$d/failed" ] && [ "$n" -lt 1000 ]; do nap 0.01; n=$((n + 1)); done
if [ ! -f "$d/pid" ]; then
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
    script.extend_from_slice(format!("g={ticks}\n{START_TIME}{NAP}").as_bytes());
    script.extend_from_slice(
        br#"[ -f "$d/exit" ] && { echo ended; exit 0; }
[ -f "$d/pid" ] || { echo starting; exit 0; }
read -r c cs rp rs bid t <"$d/pid"
[ -n "$t" ] || { echo starting; exit 0; }
b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null) || b=
[ "${b:--}" = "$bid" ] || { echo lost; exit 0; }
now=$(st "$c")
if [ "$now" != - ] && [ "$now" != "$cs" ]; then echo reused; exit 0; fi
kill -0 "-$c" 2>/dev/null || { echo gone; exit 0; }
case $(cat "$d/reason") in *[!\ ]*) ;; *) printf killed 1<>"$d/reason" ;; esac
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
