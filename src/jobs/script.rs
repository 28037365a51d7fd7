//! The shell on the host side of jobs: the start script (one exec: directory, spec files,
//! the detached runner), the runner itself (written into the job directory), and the kill,
//! remove and prune scripts. All of them are the crate's own scripts
//! ([`run_collect`](crate::files::run_collect)): their text travels on the channel's stdin, and
//! every caller value in them is quoted ([`quote_line`]) or hex-encoded in the spec.
//!
//! # The job directory
//!
//! `${XDG_STATE_HOME:-$HOME/.local/state}/swiftide-ssh/jobs/<id>/`, mode 700 (its files get
//! the login's umask, as the command does; the directory keeps them private):
//!
//! | file | written by | content |
//! |---|---|---|
//! | `spec` | start, the last of its files | what the job was started with ([`Spec`](super::spec::Spec)) |
//! | `params` | start | the runner's numbers (`cap`, `dl`, `grace`) and `la`, the command's `sh -c` text (`cd`, environment, command) when it takes the direct form ([`direct_text`]) |
//! | `launch` | start | otherwise: `cd`, environment and `exec sh -c '<command>'` (or a `#!` script), as for a command; empty with `la` |
//! | `run` | earlier builds' starts | their runner (now a function of the start library, `../lib/start-<hash>` beside the jobs) |
//! | `new` | start | created with `O_EXCL` (`set -C`): claims the directory for a new job, whoever made it (the client over SFTP, or the start's `mkdir`); jobs of earlier builds, claimed by their `mkdir`, have none |
//! | `started` | start | created with `O_EXCL` (`set -C`): claims the one start of the runner (a directory, made by `mkdir`, in jobs started by earlier builds; both count) |
//! | `pid` | start (padded), the job's shell ([`PRE`], in place) | `<pid> <starttime> <runner pid> <runner starttime> <boot id> <started at>`; blank until recorded (earlier builds wrote it by temp + `mv`: missing until recorded) |
//! | `stdout`, `stderr` | the spoolers (created empty by the start, or before it by the client's SFTP open of its read handle: `>` truncates the same file, which the handle then reads) | the output, exactly, up to the cap |
//! | `stdout.drop`, `stderr.drop` | the start (padded; created empty before it by the client's SFTP open, as the spool files), the spoolers, at the stream's end | `<copier status> <bytes dropped> <cap>` |
//! | `stdout.err`, `stderr.err` | the spoolers | a write error (`No space left on device`) |
//! | `reason` | kill, deadline | `killed` or `deadline`, first one wins |
//! | `exit` | runner, once both streams ended: created by `printf` (by `mv` of `exit.tmp` where that fails, as in earlier builds) | `<status> <ended at>`, a line: complete only with its newline. Missing while the job runs, so a poll's SFTP open of it fails at once: one round trip |
//! | `exit.tmp` | start (padded), runner (in place, when the command ends) | as `exit` |
//! | `failed` | the runner's stderr | why it could not start |
//!
//! Files written while the disk may be full (`pid`, `exit.tmp`, `reason`, the `.drop` and
//! `.err` files) are created padded with spaces at the start and later overwritten in place
//! (`1<>`), so writing them needs no new block (`exit` is new, but falls back to renaming the
//! padded `exit.tmp`). A reader treats a blank record as a missing one. Times are the host's:
//! `@<seconds since boot>` from `/proc/uptime` (read by a builtin), which the client turns
//! into a time with the boot time in `/proc/stat`; earlier builds wrote
//! `date +%s`, which is still read. (Jobs started by earlier builds also have `o.fifo`,
//! `e.fifo` and `ready` FIFOs; nothing reads them now.)
//!
//! # What a start costs the host
//!
//! The start is on the caller's critical path, so the scripts fork as little as they can and
//! exec even less (a fork of `sh` costs far less than an exec): records are read with the
//! `read` builtin (`/proc/PID/stat`, the boot id, the uptime, `reason`), never with `cat`,
//! `date` or a subshell; files are written with `printf`; the claim is a redirection; the
//! pipes are a pipeline's, not FIFOs; the start's text comes from the host's copy of the
//! start library (only the job's own values travel). The job directory is made over an open
//! SFTP channel beside the start (no process; the start execs `mkdir` where it is missing). The
//! runner is a fork of the start's shell; the spoolers' two copiers and the command's
//! `setsid` and `sh -c` start beside it, and `wc` only runs for a stream that reached its cap
//! (see [`RUNNER`]). The command's own shell, leading its group, records its pid and
//! answers ([`PRE`]); the runner then only waits, and at the end writes `exit` (`printf`). So
//! the execs of a start are its own `/bin/sh`, `setsid`, the job's `sh` and the two
//! copiers (`head`, unbuffered), besides the command's. The start script reads the answer on
//! a pipe (fd 3 of the runner and the job's shell): `ok` once `pid` is recorded, or EOF when
//! the job died before answering. (A command substitution of the backgrounded runner does
//! not do: dash leaks a saved copy of the pipe into the background job, fd 251, so the
//! answer would wait for the job's end; in a pipeline the reader stops at the line.) Only a
//! start that finds the job claimed (a retry, a concurrent start) reads the spec back to
//! compare it, and only one that did not start the runner itself polls for the `pid` record.

use std::{path::Path, sync::LazyLock, time::Duration};

use super::spec::Spec;
use crate::{
    command::{Program, Supervision, direct_text, quote_line, wrapper},
    config::{Config, EnvPlan},
    error::Result,
};

/// The base directory, as shell text setting `b`; fails (exit 3) without an absolute one.
const BASE: &str = r#"b=${XDG_STATE_HOME:-$HOME/.local/state}/swiftide-ssh/jobs
case $b in /*) ;; *) echo "no absolute state directory (HOME and XDG_STATE_HOME are unset)" >&2; exit 3 ;; esac
"#;

/// `st PID`: sets `t` to the process's start time (field 22 of `/proc/PID/stat`, read after
/// the last `)` because the command name in field 2 may hold spaces and parentheses), or `-`,
/// and `pi` to its pid (field 1; what `st self` is for, in a fork whose `$$` is its
/// parent's). Builtins only: `read` and parameter expansion, no subshell, no `cat`.
const START_TIME: &str = r#"st() { t=-; pi=; s=; read -r s 2>/dev/null <"/proc/$1/stat" || [ -n "$s" ] || return 0; pi=${s%% *}; s=${s##*) }; set -- $s; t=${20:--}; }
"#;

/// `boot`: sets `bid` to the host's boot id, or `-` (a builtin `read`, no `cat`).
const BOOT_ID: &str = r#"boot() { bid=; read -r bid 2>/dev/null </proc/sys/kernel/random/boot_id; bid=${bid:--}; }
"#;

// Signals go to a group as `kill -SIG -PGID`, without `--`: dash's `kill` refuses `--`.

/// Sleeps a little: fractions where `sleep` takes them (GNU, BusyBox), else a second.
const NAP: &str = "nap() { sleep \"$1\" 2>/dev/null || sleep 1; }\n";

/// `clock`: sets `u` to the host's clock as the records keep it, `@<seconds since boot>`
/// (a builtin `read` of `/proc/uptime`, no `date` process), or `-`. The client turns it into a
/// time with the boot time from `/proc/stat` ([`HostTime`](super::state::HostTime)).
const CLOCK: &str = r#"clock() { u=; read -r u _ 2>/dev/null </proc/uptime; case $u in [0-9]*) u=@${u%.*} ;; *) u=- ;; esac; }
"#;

/// `pre`: the first words of the job's own shell, the `sh -c` that `setsid` started (for a
/// `launch` file: the words before `. "$0"`). That shell leads its group by then, so it
/// writes the `pid` record itself, `<its pid> <its start time> <runner pid> <runner start
/// time> <boot id> <started at>` (the runner's two numbers and the job directory come as
/// `$1`, `$2`, `$3`), says `ok` on fd 3 (the start's answer pipe), closes fd 3 and runs the
/// command. A record it cannot write ends it with status 125 before the command runs, so
/// the start fails instead of leaving an unrecorded job.
///
/// Why here and not in the runner: the runner could only wait until the command's `setsid`
/// had run, by reading `/proc/PID/stat` in a loop (no `sleep` is short enough), and on two
/// cores that loop took as much CPU as an exec. Its words leave nothing behind for the
/// command: they are on the command's first line (so `$LINENO` and error messages keep the
/// command's own line numbers), the positional parameters are cleared and its variables,
/// all named `swiftide_job_*`, are unset. That is also why they repeat the reads of `st`,
/// `boot` and `clock` rather than call them: those functions are not in the command's shell,
/// and their variables (`s`, `t`, `bid`, `u`) could be the command's own.
const PRE: &str = concat!(
    "pre='",
    r#"{ swiftide_job_r="$1 $2" swiftide_job_d=$3; "#,
    r#"swiftide_job_s=; read -r swiftide_job_s </proc/$$/stat; "#,
    r#"set -- ${swiftide_job_s##*) }; swiftide_job_t=${20:--}; "#,
    r#"swiftide_job_b=; read -r swiftide_job_b </proc/sys/kernel/random/boot_id; "#,
    r#"swiftide_job_u=; read -r swiftide_job_u _ </proc/uptime; "#,
    r#"case $swiftide_job_u in [0-9]*) swiftide_job_u=@${swiftide_job_u%.*} ;; *) swiftide_job_u=- ;; esac; "#,
    r#"printf "%s %s %s %s %s\n" "$$" "$swiftide_job_t" "$swiftide_job_r" "${swiftide_job_b:--}" "$swiftide_job_u" 1<>"$swiftide_job_d/pid" && echo ok >&3; "#,
    r#"} 2>/dev/null || exit 125; exec 3>&-; set --; "#,
    r#"unset swiftide_job_r swiftide_job_d swiftide_job_s swiftide_job_t swiftide_job_b swiftide_job_u; "#,
    "'\n"
);

/// The runner, a function of the start library (see [`LIBRARY`]), forked by the start script
/// as `runner <dir>` with its stdout on the pipe the start script reads its answer from. It
/// spools the command's output through two pipes (`head -c cap` into the stream file,
/// unbuffered, or BusyBox's `dd` (see the copier's choice in the text); the rest, if any,
/// counted by `wc -c`), starts the command in a session of its own, with its
/// own pid and start time for the record (a fork has its parent's `$$`: its own pid comes
/// from `/proc/self/stat`) and the answer pipe on fd 3: the command's shell records and
/// answers ([`PRE`]). It arms the deadline, waits for the command, and writes `exit` once
/// both streams have ended. Its last act ends the deadline's watchdog, if it still runs
/// and is still the one it started (its start time); the job's group is the command's.
///
/// Processes: the runner and the pipelines' shells are forks of the start script's shell (no
/// exec); the execs are the two copiers and the command's `setsid` and `sh -c` (and `mv` at
/// the end, only on a full disk). `wc` runs only for a stream that reached its cap or failed:
/// a spooler knows how much its copier wrote from the offset of the spool file it shares with
/// it (`/proc/self/fdinfo/5`, a builtin `read`).
///
/// The copier writes what it reads at once, so that a running job's output can be read
/// (a dev server's "listening" line, a prompt without its newline). GNU `head` alone would
/// not: its output into a file is stdio-buffered, up to 4 KiB held until the job ends. It runs
/// with coreutils' `libstdbuf` preloaded (`_STDBUF_O=0`: what `stdbuf -o0` does, without
/// its exec), or under `stdbuf -o0` where the library is not at a known path; BusyBox, whose
/// `head` buffers too, spools with its `dd`, which counts `count=` in bytes across short
/// reads (`iflag=count_bytes`; GNU `dd` counts reads). Plain `head` remains only on a host
/// with none of these.
///
/// Why a fork and not `setsid /bin/sh`, as before: those were two execs on the start's
/// critical path. The runner stays in the start script's process group, which nothing
/// signals: no terminal, so no hangup; the start's channel closing sends nothing; and a
/// dropped [`spawn_job`](crate::SshExecutor::spawn_job) lets its start script finish instead
/// of killing its group (see there).
const RUNNER: &str = r#"runner() {
d=$1
. "$d/params"
spool() {
  case $cw in
  l) _STDBUF_O=0 LD_PRELOAD=$cl head -c "$cap" >&5 2<>"$d/$1.err" ;;
  s) stdbuf -o0 head -c "$cap" >&5 2<>"$d/$1.err" ;;
  b) busybox dd bs=65536 count="$cap" iflag=count_bytes status=none >&5 2<>"$d/$1.err" ;;
  *) head -c "$cap" >&5 2<>"$d/$1.err" ;;
  esac; r=$?
  k=; p=; read -r k p 2>/dev/null <"/proc/self/fdinfo/5"
  if [ "$r" = 0 ] && [ "$k" = pos: ] && [ "$p" -lt "$cap" ] 2>/dev/null; then n=0
  else n=$(wc -c); n=$((n + 0)); fi
  printf '%s %s %s' "$r" "$n" "$cap" 1<>"$d/$1.drop"
}
job() {
  # The job's stdin: /dev/null, or what clients write into `stdin.d/` (see `feed`), through
  # a FIFO (each side's open waits for the other's; both are in the background).
  i=/dev/null; f=
  if [ -n "$sin" ]; then
    mkdir -p -- "$d/stdin.d" && mkfifo -m 600 "$d/stdin.fifo" 2>/dev/null || [ -p "$d/stdin.fifo" ] || exit 125
    i=$d/stdin.fifo
    (feed) >"$i" 2>/dev/null 3>&- 4>&- </dev/null & f=$!
  fi
  if [ -n "$la" ]; then setsid sh -c "$pre$la" sh "$me" "$rt" "$d" 2>&4 4>&- <"$i" &
  else setsid /bin/sh -c "$pre"'. "$0"' "$d/launch" "$me" "$rt" "$d" 2>&4 4>&- <"$i" &
  fi
  c=$!
  exec 3>&- 4>&- >/dev/null
  wait "$c"; r=$?
  [ -n "$f" ] && kill "$f" 2>/dev/null
  clock
  printf '%s %s\n' "$r" "$u" 1<>"$d/exit.tmp"
}
# A job's stdin, in order: record 0, 1, 2, ... (`stdin.d/<n>/data`, each moved there whole
# by `Job::write_stdin`'s script once it claimed `<n>` with `mkdir`), until `stdin.d/closed`
# says how many there are. While nothing is new it naps, longer the longer it waits (50 ms
# up to a second); its naps are its children, ended with it (the trap) when the job ends.
feed() {
  trap 'kill "$z" 2>/dev/null; exit 0' TERM
  n=0; p=5
  while :; do
    if [ -f "$d/stdin.d/$n/data" ]; then
      cat -- "$d/stdin.d/$n/data" || exit 0
      n=$((n + 1)); p=5; continue
    fi
    if [ -f "$d/stdin.d/closed" ]; then
      l=; read -r l 2>/dev/null <"$d/stdin.d/closed"
      [ "$n" -ge "${l:-0}" ] 2>/dev/null && exit 0
    fi
    sleep "0.$((p / 10))$((p % 10))" 2>/dev/null & z=$!; wait "$z" || sleep 1
    [ "$p" -lt 99 ] && p=$((p * 2 > 99 ? 99 : p * 2))
  done
}
exec 3>&1
# The runner's own pid and start time (a fork's `$$` is its parent's), read here: `job`
# is a subshell.
st self; me=$pi; rt=$t
# The spoolers' copier, one that writes what it reads at once (see the runner's docs):
# GNU `head` unbuffered by libstdbuf (l) or `stdbuf -o0` (s), else BusyBox's `dd` (b).
cw=
for cl in /usr/libexec/coreutils/libstdbuf.so /usr/lib/coreutils/libstdbuf.so /usr/lib64/coreutils/libstdbuf.so /usr/local/libexec/coreutils/libstdbuf.so; do
  [ -r "$cl" ] && { cw=l; break; }
done
if [ -n "$cw" ]; then :
elif command -v stdbuf >/dev/null 2>&1; then cw=s
elif command -v busybox >/dev/null 2>&1 &&
  busybox dd count=0 iflag=count_bytes status=none </dev/null >/dev/null 2>&1; then cw=b
fi
w=
if [ -n "$dl" ]; then
  # The deadline's watchdog. Its sleeps are its children, ended with it (the trap) when the
  # job ends first, so that no `sleep` outlives the job. It reads the group from the `pid`
  # record (written long before any deadline but the shortest, hence the wait for it).
  (
    trap 'kill "$z" 2>/dev/null; exit 0' TERM
    sleep "$dl" & z=$!; wait "$z"
    n=0
    while :; do
      c=; read -r c _ 2>/dev/null <"$d/pid"
      [ -n "$c" ] || [ "$n" -ge 1000 ] && break
      nap 0.01; n=$((n + 1))
    done
    [ -n "$c" ] || exit 0
    x=; read -r x 2>/dev/null <"$d/reason"
    case $x in *[!\ ]*) ;; *) printf deadline 1<>"$d/reason" ;; esac
    kill -TERM "-$c" 2>/dev/null
    sleep "$grace" & z=$!; wait "$z"
    kill -KILL "-$c" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 3>&- &
  w=$!; st "$w"; wt=$t
fi
# Redirections by `exec`: on a function call dash would keep saved copies of the descriptors
# (fd 10 and up) for the call's duration, and the answer pipe would stay open in the spoolers.
{ job | { exec 5>"$d/stdout" 3>&- 4>&- >/dev/null; spool stdout; }; } 4>&1 |
  { exec 5>"$d/stderr" 3>&- >/dev/null; spool stderr; }
exec 3>&- >/dev/null
# Only a written status becomes `exit` (the command's waiter may have been killed). It is
# created by a builtin (a reader takes it only once its line has its newline); where that
# fails (a full disk: a new file needs a block), `exit.tmp` is renamed, as earlier builds did.
x=; y=; read -r x y 2>/dev/null <"$d/exit.tmp"
[ -n "$x" ] && { printf '%s %s\n' "$x" "$y" 2>/dev/null >"$d/exit" || mv -f -- "$d/exit.tmp" "$d/exit"; }
if [ -n "$w" ]; then st "$w"; [ "$t" = "$wt" ] && kill -TERM "$w" 2>/dev/null; fi
}
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

/// How the job's command is started: its `sh -c` text when the command takes the direct form
/// (as [`direct_text`] gives it: `cd`, environment, the command), else the text of the
/// `launch` file, the payload a command gets (`cd`, environment, `exec sh -c`, or a `#!`
/// script), run by the job's own `/bin/sh`.
pub(crate) struct Launch {
    /// The `sh -c` text, kept as `la` in `params`; `None` for the `launch` file.
    direct: Option<Vec<u8>>,
    /// The `launch` file's text (empty with a direct text).
    file: Vec<u8>,
}

impl Launch {
    /// The command's `sh -c` text, when it takes the direct form.
    pub(crate) fn direct(&self) -> Option<&[u8]> {
        self.direct.as_deref()
    }
}

/// The [`Launch`] of `spec`.
pub(crate) fn launch(
    spec: &Spec,
    dir: Option<&Path>,
    env: &EnvPlan,
    config: &Config,
) -> Result<Launch> {
    let program = Program::parse(&spec.command);
    // A job with stdin gets it from the runner (`<stdin.fifo`, see [`RUNNER`]): its payload
    // must not point it at `/dev/null`.
    let supervision = if spec.stdin {
        Supervision::of(config).caller_stdin()
    } else {
        Supervision::of(config)
    };
    if let Some(text) = direct_text(&program, dir, env) {
        return Ok(Launch {
            direct: Some(text),
            file: Vec::new(),
        });
    }
    // The marker and supervision belong to the exec request, which a job does not use; only
    // the payload (stdin) is kept.
    let wrapped = wrapper(&program, dir, env, "", supervision, None)?;
    let mut file = b"nl='\n'\n".to_vec();
    file.extend_from_slice(&wrapped.stdin);
    Ok(Launch { direct: None, file })
}

/// Makes the base directory `$b` when it is missing, private (700) with its parent.
macro_rules! make_base {
    () => {
        r#"[ -d "$b" ] || { mkdir -p -- "$b" && chmod 700 -- "${b%/jobs}" "$b"; }"#
    };
}

/// The start's logic, once `b`, `d`, `sp`, `lf` and `pa` are set (see [`start`]).
const START: &str = concat!(
    r#"command -v setsid >/dev/null || { echo "setsid is not installed" >&2; exit 3; }
"#,
    make_base!(),
    r#" || exit 3
echo "$b"
# A write that fails on a full disk says only "I/O error": name the cause when it is that.
unwritable() {
  a=$(df -Pk -- "$d" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ "$a" = 0 ]; then echo "cannot write the job's files in $d: No space left on device" >&3
  else echo "cannot write the job's files in $d" >&3; fi
  exit 4
}
# The job's files, the spec last. `true`, not `:`, under redirections: a special builtin's
# failed redirection would end the shell before `unwritable` names the cause. The directory
# is private (700); its files get the login's umask, as the command does.
files() {
  { printf %s "$lf" >"$d/launch" && printf %s "$pa" >"$d/params" &&
    for f in pid exit.tmp reason stdout.drop stderr.drop stdout.err stderr.err; do
      printf '%256s' '' >"$d/$f" || unwritable
    done &&
    true >"$d/stdout" && true >"$d/stderr" && printf %s "$sp" >"$d/spec"; } 2>/dev/null || unwritable
}
# Whether the runner's `pid` record is there (padded since the first version that padded
# it; written by `mv` before: missing until recorded).
recorded() { x=; read -r x 2>/dev/null <"$d/pid"; [ -n "$x" ]; }
# Whether the runner start was claimed (a file now, a directory before).
claimed() { [ -e "$d/started" ]; }
exec 3>&2
# The directory may be there already: the client makes it over SFTP beside this start (no
# process), and only where it is missing is `mkdir` run. A new job is claimed by creating
# `new` in it (`set -C`: `O_EXCL`), unless it holds a spec: a job of an earlier build, which
# claimed it by its `mkdir`.
[ -d "$d" ] || mkdir -m 700 -- "$d" 2>/dev/null || [ -d "$d" ] || { echo "cannot create $d" >&2; exit 3; }
set -C
if [ ! -e "$d/spec" ] && true 2>/dev/null >"$d/new"; then
  set +C
  files
  new=1
else
  set +C
  new=
  n=0
  while ! claimed && [ "$n" -lt 300 ]; do nap 0.01; n=$((n + 1)); done
  # The start that made the directory broke before its claim: write the files again.
  claimed || files
  s=$(cat -- "$d/spec"; echo x)
  [ "$s" = "${sp}x" ] || { echo differs; exit 0; }
fi
set -C
if true 2>/dev/null >"$d/started"; then
  set +C
  if [ -z "$new" ]; then
    # The files may be a previous version's (whose start broke before its claim): these
    # parameters, and a padded `pid`.
    { printf %s "$pa" >"$d/params" &&
      { [ -f "$d/pid" ] || printf '%256s' '' >"$d/pid"; }; } 2>/dev/null || unwritable
  fi
  # The runner's answer comes on the pipe: `ok` once `pid` is recorded, or EOF when it ends
  # before that. The pipeline's first shell only forks it into the background (the
  # pipeline itself in the background would not do: dash's `wait PID` waits for the whole
  # pipeline, the runner included).
  if { (cd / && runner "$d") </dev/null 2>"$d/failed" 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- & } |
    { r=; IFS= read -r r; [ "$r" = ok ]; }; then
    echo ok; exit 0
  fi
  # The pipe closed without an answer: the runner is gone.
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
"#
);

/// The start library: what every start runs, the same text for every job (the helpers, the
/// [`RUNNER`] and [`START`]). A start sends only its own values and sources the library from
/// the host (see [`start`]); its name carries a hash of its text, so builds that differ in it
/// never share a file.
static LIBRARY: LazyLock<String> =
    LazyLock::new(|| format!("{START_TIME}{CLOCK}{NAP}{PRE}{RUNNER}{START}"));

/// The library's path under the base directory `$b`, as shell text:
/// `${b%/jobs}/lib/start-<hash>` (a sibling of the jobs, so that listing them never sees it).
static LIBRARY_PATH: LazyLock<String> = LazyLock::new(|| {
    // FNV-1a: stable across builds and Rust versions, unlike `std`'s hasher.
    let hash = LIBRARY
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("${{b%/jobs}}/lib/start-{hash:016x}")
});

/// Which text a start sends (see [`start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartForm {
    /// Only the job's values, then `. <library>`; answers `nolib` when the host has no copy
    /// of the library.
    Short,
    /// The library's text too: installs the host's copy (when it can) and runs the text.
    Full,
}

/// The start script for `spec` (see the module docs). Prints the base directory, then `ok`
/// once the runner has recorded its pid, `differs` when the id exists with another spec, or
/// (the [short](StartForm::Short) form only) `nolib` when the host lacks the library and
/// nothing was done.
///
/// The short form is what keeps a start cheap: the bootstrap reads its payload byte by byte
/// (about 1 µs a byte on dash; see `command::wrapper`), and the library is about 5 KB, while
/// a job's own values are typically a few hundred bytes. The host reads the library from its
/// file with `.` (in blocks). The full form is sent only when the host had no copy: once per
/// host and build, or after the copy was removed.
///
/// A start runs no process of its own besides the job's (its `mkdir` only where the client
/// did not make the directory over SFTP): the runner is a fork of this shell, the files are
/// written with `printf`, the claims (of a new job, `new`; of the one runner start,
/// `started`) are `set -C` (`O_EXCL`) redirections, and the answer comes on a pipe from the
/// job's shell (no poll, no `sleep`; a pipeline's shells are forks). A start that finds the
/// job claimed (a second start with the same id, a retry after a broken connection) waits
/// for the runner's claim, compares the spec and, if the runner was started by another,
/// polls for its `pid` record.
pub(crate) fn start(spec: &Spec, launch: &Launch, form: StartForm) -> Vec<u8> {
    let mut script = BASE.as_bytes().to_vec();
    // The id is checked (letters, digits, `.`, `_`, `-`), so inside double quotes it is
    // literal and only `$b` expands.
    script.extend_from_slice(format!("d=\"$b/{}\"\n", spec.id).as_bytes());
    assign(&mut script, "sp", spec.encode().as_bytes());
    assign(&mut script, "lf", &launch.file);
    assign(&mut script, "pa", &params(spec, launch));
    script.extend_from_slice(format!("L={}\n", *LIBRARY_PATH).as_bytes());
    match form {
        StartForm::Short => script.extend_from_slice(
            b"[ -r \"$L\" ] || { echo \"$b\"; echo nolib; exit 0; }\n. \"$L\"\n",
        ),
        StartForm::Full => {
            assign(&mut script, "li", LIBRARY.as_bytes());
            // The copy is written whole, then renamed into place, so that a concurrent start
            // never sources half of it; a failure (a full disk) only means the next start
            // sends the full form again.
            script.extend_from_slice(
                concat!(
                    r#"if [ ! -r "$L" ] && { "#,
                    make_base!(),
                    r#"; } 2>/dev/null; then
  { mkdir -p -- "${L%/*}" && printf %s "$li" >"$L.$$" && mv -f -- "$L.$$" "$L"; } 2>/dev/null || rm -f -- "$L.$$" 2>/dev/null
fi
eval "$li"
"#
                )
                .as_bytes(),
            );
        }
    }
    script
}

/// The `params` file's text: the runner's numbers and the direct form's text (see the module
/// docs).
pub(crate) fn params(spec: &Spec, launch: &Launch) -> Vec<u8> {
    let mut params = format!(
        "nl='\n'\ncap={}\ndl={}\ngrace={}\nsin={}\n",
        spec.spool_cap,
        spec.deadline.map(seconds).unwrap_or_default(),
        seconds(spec.kill_grace),
        if spec.stdin { "1" } else { "" },
    )
    .into_bytes();
    assign(
        &mut params,
        "la",
        launch.direct.as_deref().unwrap_or_default(),
    );
    params
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
        br#"x=; read -r x _ 2>/dev/null <"$d/exit"; [ -n "$x" ] && { echo ended; exit 0; }
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

/// The script of one [`Job::write_stdin`](crate::Job::write_stdin): its stdin is the data
/// (`len` bytes), `id` the write's own random id. A write that landed before (a retry after a
/// lost connection) finds its record by its id and says so; otherwise the data goes into a
/// file of its own, whole (checked against `len`: a connection lost halfway leaves a short
/// file, which is dropped), then record `<n>` is claimed with `mkdir` (atomic; the first
/// free `n`) and the data moved in. Prints the record's number. Exit 3: the job has no stdin;
/// 4: its stdin is closed.
pub(crate) fn write_stdin(dir: &Path, id: u64, len: usize) -> Vec<u8> {
    let mut script = Vec::new();
    assign(&mut script, "d", dir.as_os_str().as_encoded_bytes());
    script.extend_from_slice(format!("id={id:016x}\nlen={len}\n").as_bytes());
    script.extend_from_slice(
        br#"s=$d/stdin.d
[ -d "$s" ] || { echo "the job reads no stdin (it was started without JobOptions::stdin)" >&2; exit 3; }
[ -f "$s/closed" ] && { echo "the job's stdin is closed" >&2; exit 4; }
for r in "$s"/*/id; do
  [ -f "$r" ] || continue
  x=; read -r x 2>/dev/null <"$r"
  [ "$x" = "$id" ] && { r=${r%/id}; echo "${r##*/}"; exit 0; }
done
t=$s/.w-$id
cat >"$t" || exit 5
c=$(wc -c <"$t"); c=$((c + 0))
[ "$c" -eq "$len" ] || { rm -f -- "$t"; echo "only $c of $len bytes arrived" >&2; exit 6; }
n=0
while [ -e "$s/$n" ]; do n=$((n + 1)); done
while ! mkdir -- "$s/$n" 2>/dev/null; do n=$((n + 1)); done
printf '%s
' "$id" >"$s/$n/id" && mv -f -- "$t" "$s/$n/data" || exit 5
echo "$n"
"#,
    );
    script
}

/// Closes a job's stdin: `stdin.d/closed` with the number of records written (created once,
/// `set -C`: a second close changes nothing). The job reads EOF after those records.
pub(crate) fn close_stdin(dir: &Path) -> Vec<u8> {
    let mut script = Vec::new();
    assign(&mut script, "d", dir.as_os_str().as_encoded_bytes());
    script.extend_from_slice(
        br#"s=$d/stdin.d
[ -d "$s" ] || { echo "the job reads no stdin (it was started without JobOptions::stdin)" >&2; exit 3; }
n=0
while [ -e "$s/$n" ]; do n=$((n + 1)); done
set -C
{ printf '%s
' "$n" >"$s/closed"; } 2>/dev/null
exit 0
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
/// prints their ids. An end kept as a time since boot is aged by `/proc/uptime`; one from an
/// earlier boot (its `pid` record names another boot id) ended at least the uptime ago.
pub(crate) fn prune(base: &Path, older_than: Duration) -> Vec<u8> {
    let mut script = Vec::new();
    assign(&mut script, "b", base.as_os_str().as_encoded_bytes());
    script.extend_from_slice(format!("a={}\n{BOOT_ID}", older_than.as_secs()).as_bytes());
    script.extend_from_slice(
        br#"now=$(date +%s)
up=; read -r up _ 2>/dev/null </proc/uptime; up=${up%.*}; up=${up:-0}
boot
for d in "$b"/*; do
  [ -f "$d/exit" ] || continue
  r=; t=; read -r r t <"$d/exit" || [ -n "$t" ] || continue
  case $t in
    @*[!0-9]* | @) continue ;;
    @*)
      e=; read -r x x x x e x 2>/dev/null <"$d/pid"
      if [ "$e" = "$bid" ]; then age=$((up - ${t#@})); else age=$up; fi ;;
    '' | *[!0-9]*) continue ;;
    *) age=$((now - t)) ;;
  esac
  [ "$age" -ge "$a" ] || continue
  rm -rf -- "$d" && echo "${d##*/}"
done
exit 0
"#,
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

    /// Runs one of these scripts with `sh` here, its stdin `data`.
    fn sh(script: &[u8], data: &[u8]) -> (bool, String, String) {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::new(std::str::from_utf8(script).unwrap()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A script that exits without reading its stdin closes the pipe first (a loaded
        // machine shows it): not the script's failure.
        if let Err(error) = child.stdin.take().unwrap().write_all(data) {
            assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn stdin_writes_are_whole_numbered_and_never_stored_twice() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path();
        // No stdin.d: the job reads none.
        let (ok, _, err) = sh(&write_stdin(job, 1, 3), b"abc");
        assert!(!ok && err.contains("no stdin"), "{err}");
        std::fs::create_dir(job.join("stdin.d")).unwrap();
        assert_eq!(
            sh(&write_stdin(job, 1, 3), b"abc"),
            (true, "0".into(), String::new())
        );
        // The same write again (a retry after a lost connection): found, not stored again.
        assert_eq!(
            sh(&write_stdin(job, 1, 3), b"abc"),
            (true, "0".into(), String::new())
        );
        assert_eq!(
            sh(&write_stdin(job, 2, 2), b"de"),
            (true, "1".into(), String::new())
        );
        // Half a write (the connection broke): dropped, nothing claimed.
        let (ok, _, err) = sh(&write_stdin(job, 3, 10), b"fgh");
        assert!(!ok && err.contains("3 of 10"), "{err}");
        assert_eq!(std::fs::read(job.join("stdin.d/0/data")).unwrap(), b"abc");
        assert_eq!(std::fs::read(job.join("stdin.d/1/data")).unwrap(), b"de");
        assert!(!job.join("stdin.d/2").exists());
        let leftovers: Vec<_> = std::fs::read_dir(job.join("stdin.d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|name| name.to_string_lossy().starts_with(".w-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        // Closed: the count of records, once; writes after it are refused.
        assert!(sh(&close_stdin(job), b"").0);
        assert_eq!(
            std::fs::read_to_string(job.join("stdin.d/closed")).unwrap(),
            "2\n"
        );
        assert!(sh(&close_stdin(job), b"").0);
        let (ok, _, err) = sh(&write_stdin(job, 4, 1), b"x");
        assert!(!ok && err.contains("closed"), "{err}");
    }
}
