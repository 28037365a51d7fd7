//! The records the runner and the spoolers leave in a job directory, parsed. Each one may be
//! padded with spaces (see [`super::script`]): fields are split on whitespace.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::command::ExitStatus;

/// A time on the host's clock as a record keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostTime {
    /// Seconds since the epoch (`date +%s`), as earlier builds wrote it.
    Epoch(SystemTime),
    /// `@<seconds since boot>` (`/proc/uptime`, read by a builtin: no `date` process), which
    /// the host's boot time (`btime` in `/proc/stat`) turns into a time.
    SinceBoot(Duration),
    /// `-`: the host had no `/proc/uptime`.
    Unknown,
}

impl HostTime {
    fn parse(text: &str) -> Option<Self> {
        if text == "-" {
            return Some(HostTime::Unknown);
        }
        match text.strip_prefix('@') {
            Some(since_boot) => Some(HostTime::SinceBoot(Duration::from_secs(
                since_boot.parse().ok()?,
            ))),
            None => epoch(text).map(HostTime::Epoch),
        }
    }

    /// The time, given the boot time of the boot the record belongs to.
    pub(crate) fn at(self, boot_time: Option<SystemTime>) -> Option<SystemTime> {
        match self {
            HostTime::Epoch(time) => Some(time),
            HostTime::SinceBoot(since_boot) => Some(boot_time? + since_boot),
            HostTime::Unknown => None,
        }
    }
}

/// The boot time (`btime`, seconds since the epoch) in a `/proc/stat` text.
pub(crate) fn boot_time(proc_stat: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(proc_stat).ok()?;
    let line = text.lines().find_map(|line| line.strip_prefix("btime "))?;
    epoch(line.trim())
}

/// The `pid` record: the job's process (group leader, and session leader), the runner, the
/// boot they belong to, and the start on the host's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PidRecord {
    pub(crate) pid: u32,
    pub(crate) start_time: String,
    pub(crate) runner_pid: u32,
    pub(crate) runner_start_time: String,
    pub(crate) boot_id: String,
    pub(crate) started_at: HostTime,
}

fn epoch(seconds: &str) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_secs(seconds.parse().ok()?))
}

/// The fields of a padded record, `None` when it is still blank (not written yet).
fn fields(bytes: &[u8]) -> Option<Vec<&str>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    (!fields.is_empty()).then_some(fields)
}

impl PidRecord {
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let fields = fields(bytes)?;
        let [pid, start, runner, runner_start, boot, started] = fields.as_slice() else {
            return None;
        };
        Some(PidRecord {
            pid: pid.parse().ok()?,
            start_time: (*start).to_owned(),
            runner_pid: runner.parse().ok()?,
            runner_start_time: (*runner_start).to_owned(),
            boot_id: (*boot).to_owned(),
            started_at: HostTime::parse(started)?,
        })
    }
}

/// The `exit` record: the status `wait` gave the runner and the end on the host's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExitRecord {
    pub(crate) code: u32,
    pub(crate) ended_at: HostTime,
}

impl ExitRecord {
    /// The record's line, complete only with its newline: the runner creates the file with
    /// `printf` (one `write`, the newline last), so a read racing it may find the file empty
    /// or with part of the line, which is no record yet.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let end = bytes.iter().position(|&byte| byte == b'\n')?;
        let fields = fields(bytes.get(..end)?)?;
        let [code, ended] = fields.as_slice() else {
            return None;
        };
        Some(ExitRecord {
            code: code.parse().ok()?,
            ended_at: HostTime::parse(ended)?,
        })
    }

    /// The status as for a command: POSIX `sh` reports death by signal n as 128 + n, so a
    /// status above 128 that names a signal is reported as that signal (as for commands on
    /// servers that do not start sessions in a group of their own).
    pub(crate) fn status(&self) -> ExitStatus {
        match self.code.checked_sub(128).and_then(signal_name) {
            Some(name) => ExitStatus::Signal {
                name: name.to_owned(),
                core_dumped: false,
            },
            None => ExitStatus::Code(self.code),
        }
    }
}

/// Linux's signal names by number (without `SIG`).
fn signal_name(number: u32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    let index = usize::try_from(number.checked_sub(1)?).ok()?;
    NAMES.get(index).copied()
}

/// A stream's `.drop` record, written by its spooler when the stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DropRecord {
    /// `head`'s status: 0, or a write failure.
    pub(crate) head_status: u32,
    /// Bytes after the spooled ones, counted and dropped.
    pub(crate) dropped: u64,
    pub(crate) cap: u64,
}

impl DropRecord {
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let fields = fields(bytes)?;
        let [status, dropped, cap] = fields.as_slice() else {
            return None;
        };
        Some(DropRecord {
            head_status: status.parse().ok()?,
            dropped: dropped.parse().ok()?,
            cap: cap.parse().ok()?,
        })
    }
}

/// The start time in a `/proc/PID/stat` text: field 22, counted after the last `)` (field 2,
/// the command name, may hold spaces and parentheses).
pub(crate) fn proc_start_time(stat: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(stat).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts with field 3 (the state), so field 22 is the 20th.
    rest.split_ascii_whitespace().nth(19).map(str::to_owned)
}

/// The text of a padded record or message, trimmed.
pub(crate) fn trimmed(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_with_padding() {
        let pid = PidRecord::parse(b"12 345 11 340 abc-def 1700000000      ").unwrap();
        assert_eq!(pid.pid, 12);
        assert_eq!(pid.start_time, "345");
        assert_eq!(pid.runner_pid, 11);
        assert_eq!(pid.boot_id, "abc-def");
        assert_eq!(
            pid.started_at.at(None),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        let pid = PidRecord::parse(b"12 345 11 340 abc-def @3600\n").unwrap();
        assert_eq!(
            pid.started_at,
            HostTime::SinceBoot(Duration::from_secs(3600))
        );
        assert_eq!(pid.started_at.at(None), None);
        let boot = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            pid.started_at.at(Some(boot)),
            Some(boot + Duration::from_secs(3600))
        );
        assert_eq!(
            ExitRecord::parse(b"0 -\n").unwrap().ended_at,
            HostTime::Unknown
        );
        assert_eq!(PidRecord::parse(b"12 345 11 340 abc-def @x"), None);
        assert_eq!(PidRecord::parse(b"      "), None);
        // A blank `exit` and a line without its newline yet are no record.
        assert_eq!(ExitRecord::parse(b"      "), None);
        assert_eq!(ExitRecord::parse(b"13      "), None);
        let exit = ExitRecord::parse(b"143 1700000001\n   ").unwrap();
        assert_eq!(
            exit.status(),
            ExitStatus::Signal {
                name: "TERM".into(),
                core_dumped: false
            }
        );
        assert_eq!(
            ExitRecord::parse(b"3 1\n").unwrap().status(),
            ExitStatus::Code(3)
        );
        assert_eq!(
            ExitRecord::parse(b"200 1\n").unwrap().status(),
            ExitStatus::Code(200)
        );
        assert_eq!(
            DropRecord::parse(b"0 5 10   "),
            Some(DropRecord {
                head_status: 0,
                dropped: 5,
                cap: 10
            })
        );
    }

    #[test]
    fn boot_time_is_the_btime_line() {
        let stat = b"cpu  1 2 3\ncpu0 1 2 3\nintr 5 0 0\nctxt 99\nbtime 1700000123\nprocesses 7\n";
        assert_eq!(
            boot_time(stat),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_123))
        );
        assert_eq!(boot_time(b"cpu 1 2 3\n"), None);
    }

    #[test]
    fn start_time_is_read_after_the_last_paren() {
        let stat =
            b"4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(proc_start_time(stat).as_deref(), Some("987654"));
        assert_eq!(proc_start_time(b"garbage"), None);
    }
}
