//! Process-tree helpers built on `/proc` and the shell's `kill` builtin (no libc).

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::TestbedError;

/// One process as seen in `/proc/<pid>/stat`.
#[derive(Debug, Clone)]
struct ProcInfo {
    ppid: u32,
    state: char,
    comm: String,
}

impl ProcInfo {
    fn is_alive(&self) -> bool {
        // Z: zombie, X: dead. Both are gone for our purposes.
        !matches!(self.state, 'Z' | 'X')
    }
}

/// Parses the contents of `/proc/<pid>/stat`: `pid (comm) state ppid ...`.
fn parse_stat(stat: &str) -> Option<ProcInfo> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(ProcInfo { ppid, state, comm })
}

fn read_proc(pid: u32) -> Option<ProcInfo> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// A snapshot of all processes.
fn snapshot() -> HashMap<u32, ProcInfo> {
    let mut procs = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return procs;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(info) = read_proc(pid) {
            procs.insert(pid, info);
        }
    }
    procs
}

/// Living descendants of `root` (not including `root`), in breadth-first order, with
/// their command names.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let procs = snapshot();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, info) in &procs {
        children.entry(info.ppid).or_default().push(pid);
    }
    let mut result = Vec::new();
    let mut seen = BTreeSet::from([root]);
    let mut frontier = vec![root];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for parent in frontier {
            for &child in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
                if !seen.insert(child) {
                    continue;
                }
                next.push(child);
                if let Some(info) = procs.get(&child).filter(|info| info.is_alive()) {
                    result.push((child, info.comm.clone()));
                }
            }
        }
        frontier = next;
    }
    result
}

/// Living processes below `root` whose command name starts with `prefix`: a server's
/// per-connection processes, not the commands they run. For OpenSSH (`sshd`) that is
/// the per-connection processes and their privilege separated children (`sshd`, or
/// `sshd-session`/`sshd-auth` in OpenSSH 9.8 and later); for Dropbear (`dropbear`) one
/// process per connection.
pub(crate) fn server_descendants(root: u32, prefix: &str) -> Vec<u32> {
    descendants(root)
        .into_iter()
        .filter(|(_, comm)| comm.starts_with(prefix))
        .map(|(pid, _)| pid)
        .collect()
}

/// When `pid` started (field 22 of `/proc/<pid>/stat`, in clock ticks since boot); with
/// the pid, it identifies a process for good (pids are reused, start times are not).
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    // After "(comm)": state is field 3, so start time (field 22) is the 20th word.
    stat.get(close + 1..)?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether `pid` exists and is not a zombie.
pub(crate) fn is_alive(pid: u32) -> bool {
    read_proc(pid).is_some_and(|info| info.is_alive())
}

/// Sends `signal` (a name such as `STOP`) to `pids` using the shell's `kill` builtin.
///
/// Fails if `kill` reports an error, e.g. because one of the processes no longer exists.
pub(crate) fn signal(signal: &str, pids: &[u32]) -> Result<(), TestbedError> {
    if pids.is_empty() {
        return Ok(());
    }
    let output = Command::new("sh")
        .arg("-c")
        .arg("kill -s \"$0\" \"$@\"")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| TestbedError::io("running `sh -c kill`", e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Command {
            what: format!("`kill -s {signal}` for pids {pids:?}"),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// Waits (up to `timeout`) until each of `pids` is stopped (state `T`) or gone. A signal
/// is delivered asynchronously: `kill` returns while a busy target may still be running on
/// another CPU.
pub(crate) fn wait_stopped(pids: &[u32], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let running =
        |pid: &u32| read_proc(*pid).is_some_and(|info| info.is_alive() && info.state != 'T');
    while pids.iter().any(running) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
}

/// Stops (SIGSTOP) every living server process (command name starting with `prefix`)
/// below `root` until no new ones show up, and returns them. `root` itself must already
/// be stopped, so that it cannot accept new connections meanwhile.
pub(crate) fn stop_server_descendants(root: u32, prefix: &str) -> Vec<u32> {
    let mut stopped = BTreeSet::new();
    for _ in 0..20 {
        let new: Vec<u32> = server_descendants(root, prefix)
            .into_iter()
            .filter(|pid| !stopped.contains(pid))
            .collect();
        if new.is_empty() {
            break;
        }
        // Best effort: a process may exit between the scan and the signal.
        let _ = signal("STOP", &new);
        stopped.extend(new);
    }
    stopped.into_iter().collect()
}

/// Kills `root` (which must be the caller's child, passed as `child`) and every process
/// below it, and waits until they are gone.
///
/// The tree is frozen first (SIGSTOP, level by level) so that no process can fork a new
/// child that would escape as an orphan; then everything gets SIGKILL.
pub(crate) fn kill_tree(child: &mut Child) {
    let root = child.id();
    if signal("STOP", &[root]).is_ok() {
        let mut all = BTreeSet::new();
        for _ in 0..50 {
            let new: Vec<u32> = descendants(root)
                .into_iter()
                .map(|(pid, _)| pid)
                .filter(|pid| !all.contains(pid))
                .collect();
            if new.is_empty() {
                break;
            }
            let _ = signal("STOP", &new);
            all.extend(new);
        }
        let all: Vec<u32> = all.into_iter().collect();
        let _ = signal("KILL", &all);
        let _ = child.kill();
        let _ = child.wait();
        wait_gone(&all, Duration::from_secs(5));
    } else {
        // The listener is already gone (or cannot be signalled); just reap it.
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Polls until none of `pids` is alive, or the timeout passes.
pub(crate) fn wait_gone(pids: &[u32], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while pids.iter().any(|&pid| is_alive(pid)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
}

/// Kills every process (other than this one) whose environment contains exactly
/// `entry` (`NAME=value`), e.g. commands that a session left running in the background
/// after its connection closed. Best effort.
pub(crate) fn kill_by_env(entry: &str) {
    let me = std::process::id();
    let needle = entry.as_bytes();
    let mut found = BTreeSet::new();
    for _ in 0..10 {
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let new: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
            .filter(|&pid| pid != me && !found.contains(&pid) && is_alive(pid))
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle))
            })
            .collect();
        if new.is_empty() {
            break;
        }
        // Stop first so that none of them forks an escaping child meanwhile.
        let _ = signal("STOP", &new);
        found.extend(new);
    }
    let found: Vec<u32> = found.into_iter().collect();
    let _ = signal("KILL", &found);
    wait_gone(&found, Duration::from_secs(5));
}

/// A shell script that waits for end-of-file on its standard input (the test process
/// holds the write end, so EOF means the test process exited without dropping the
/// testbed) and then kills the listener `$1`, every process below it, and every
/// process whose environment contains the entry `$2` (see [`kill_by_env`]), and removes
/// the directories given as further arguments (only `/tmp/swiftide-ssh-*` ones).
const WATCHDOG_SCRIPT: &str = r#"
while read -r _line; do :; done
root=$1
entry=$2
shift 2
dirs="$*"
cleanup() {
  kill -s KILL $(leftovers) 2>/dev/null
  for d in $dirs; do
    case "$d" in
      /tmp/swiftide-ssh-*) rm -rf -- "$d" ;;
    esac
  done
  exit 0
}
leftovers() {
  grep -l -z -x -F -e "$entry" /proc/[0-9]*/environ 2>/dev/null |
    sed -n 's#^/proc/\([0-9]*\)/environ$#\1#p'
}
kill -s STOP "$root" 2>/dev/null || cleanup
all=$root
frontier=$root
while [ -n "$frontier" ]; do
  next=
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    rest=${line##*) }
    set -- $rest
    case " $frontier " in
      *" $2 "*)
        p=${f#/proc/}
        p=${p%/stat}
        case " $all " in
          *" $p "*) ;;
          *) next="$next $p" ;;
        esac
        ;;
    esac
  done
  if [ -n "$next" ]; then
    kill -s STOP $next 2>/dev/null
    all="$all $next"
  fi
  frontier=$next
done
kill -s KILL $all 2>/dev/null
cleanup
"#;

/// Starts a watchdog process for the listener `root`: if the test process dies without
/// dropping the testbed (for example when the testbed lives in a `static`, or the test
/// binary is killed), the watchdog sees its standard input close and kills sshd.
///
/// Drop the returned child with [`stop_watchdog`], which kills it before its input
/// closes.
pub(crate) fn spawn_watchdog(root: u32, env_entry: &str, dirs: &[&Path]) -> Option<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("swiftide-ssh-testbed-watchdog")
        .arg(root.to_string())
        .arg(env_entry)
        .args(dirs)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Kills a watchdog without letting it act.
pub(crate) fn stop_watchdog(mut watchdog: Child) {
    let _ = watchdog.kill();
    let _ = watchdog.wait();
}

/// Makes a watchdog act now, as if the test process had exited: closes its input and
/// waits for it to finish.
#[cfg(test)]
pub(crate) fn trigger_watchdog(mut watchdog: Child) {
    drop(watchdog.stdin.take());
    let _ = watchdog.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let info = parse_stat("123 (sshd: root@notty) S 45 123 123 0 -1").unwrap();
        assert_eq!(info.ppid, 45);
        assert_eq!(info.state, 'S');
        assert_eq!(info.comm, "sshd: root@notty");

        let info = parse_stat("7 (a) b (c)) Z 1 7 7").unwrap();
        assert_eq!(info.comm, "a) b (c)");
        assert_eq!(info.state, 'Z');
        assert_eq!(info.ppid, 1);
        assert!(!info.is_alive());

        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn finds_own_children() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let me = std::process::id();
        assert!(descendants(me).iter().any(|(pid, _)| *pid == child.id()));
        kill_tree(&mut child);
        assert!(!is_alive(child.id()));
    }

    #[test]
    fn kill_tree_kills_grandchildren() {
        // sh -> sleep (grandchild of us); sh waits so the grandchild stays its child.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("sleep 30 & wait")
            .spawn()
            .unwrap();
        let root = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let grandchildren = loop {
            let found = descendants(root);
            if !found.is_empty() || Instant::now() > deadline {
                break found;
            }
            thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(grandchildren.len(), 1, "{grandchildren:?}");
        kill_tree(&mut child);
        assert!(!is_alive(grandchildren[0].0));
    }
}
