//! Samples, percentiles and number formatting.

use std::time::Duration;

/// Durations of repeated runs of one operation.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        Self { sorted: samples }
    }

    pub fn n(&self) -> usize {
        self.sorted.len()
    }

    /// Nearest-rank percentile (`q` in 0..=1).
    pub fn pct(&self, q: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }

    pub fn median(&self) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let n = self.sorted.len();
        if n % 2 == 1 {
            self.sorted[n / 2]
        } else {
            (self.sorted[n / 2 - 1] + self.sorted[n / 2]) / 2
        }
    }

    pub fn p90(&self) -> Duration {
        self.pct(0.9)
    }

    /// `median 2.78 ms, p90 3.21 ms (n=300)`
    pub fn describe(&self) -> String {
        format!(
            "median {}, p90 {} (n={})",
            ms(self.median()),
            ms(self.p90()),
            self.n()
        )
    }

    /// `2.78 ms (p90 3.21)`
    pub fn short(&self) -> String {
        format!("{} (p90 {})", ms(self.median()), ms_bare(self.p90()))
    }
}

pub fn ms(d: Duration) -> String {
    format!("{} ms", ms_bare(d))
}

pub fn ms_bare(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub const MIB: f64 = 1024.0 * 1024.0;

pub fn mib_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / MIB / d.as_secs_f64().max(1e-9)
}

pub fn kib(bytes: u64) -> String {
    format!("{:.0} KiB", bytes as f64 / 1024.0)
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

/// `3.4×`
pub fn ratio(x: f64) -> String {
    if !x.is_finite() {
        "n/a".to_owned()
    } else if x >= 10.0 {
        format!("{x:.0}×")
    } else {
        format!("{x:.2}×")
    }
}

/// Reads a `kB` field (VmRSS, VmHWM, …) of `/proc/<pid>/status`, in bytes.
pub fn proc_status_bytes(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

pub fn self_rss() -> u64 {
    proc_status_bytes("self", "VmRSS").unwrap_or(0)
}

pub fn self_hwm() -> u64 {
    proc_status_bytes("self", "VmHWM").unwrap_or(0)
}

/// Where [`tree_cpu_secs`] reads from: a cgroup this benchmark moved itself into before it
/// started its sshd, so that the figure holds exactly the benchmark's processes (client,
/// sshd, the sessions' shells and commands, the peers' clients) and nothing else running on
/// the machine. `None`: no cgroup could be made (not root, no cpuacct/cgroup v2), and the
/// machine-wide busy time stands in.
static CPU_CGROUP: std::sync::OnceLock<Option<CpuCgroup>> = std::sync::OnceLock::new();

#[derive(Debug)]
struct CpuCgroup {
    /// `cpuacct.usage` (v1, nanoseconds) or `cpu.stat` (v2, `usage_usec`).
    usage: std::path::PathBuf,
    v2: bool,
}

/// Moves this process (and so every process it starts from now on) into a fresh CPU
/// accounting cgroup. Returns what the CPU figures cover, for the report.
pub fn enter_cpu_cgroup() -> String {
    let cgroup = CPU_CGROUP.get_or_init(|| {
        let pid = std::process::id().to_string();
        let attempt = |root: &str, v2: bool| -> Option<CpuCgroup> {
            let dir = std::path::Path::new(root).join(format!("swiftide-bench-{pid}"));
            std::fs::create_dir_all(&dir).ok()?;
            std::fs::write(dir.join("cgroup.procs"), &pid).ok()?;
            let usage = dir.join(if v2 { "cpu.stat" } else { "cpuacct.usage" });
            usage.exists().then_some(CpuCgroup { usage, v2 })
        };
        attempt("/sys/fs/cgroup/cpuacct", false)
            .or_else(|| attempt("/sys/fs/cgroup", true))
            .or_else(|| attempt("/sys/fs/cgroup/unified", true))
    });
    match cgroup {
        Some(c) => format!(
            "CPU figures: this run's processes only (client, sshd, remote shells, peers), from {}",
            c.usage.display()
        ),
        None => "CPU figures: the whole machine's busy time (no cgroup available)".to_owned(),
    }
}

/// Busy CPU seconds of the benchmark's process tree (see [`enter_cpu_cgroup`]), or of the
/// whole machine when there is no cgroup.
pub fn tree_cpu_secs() -> f64 {
    let Some(Some(cgroup)) = CPU_CGROUP.get() else {
        return machine_busy_secs();
    };
    let Ok(text) = std::fs::read_to_string(&cgroup.usage) else {
        return f64::NAN;
    };
    if cgroup.v2 {
        text.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(f64::NAN, |us| us / 1e6)
    } else {
        text.trim().parse::<f64>().map_or(f64::NAN, |ns| ns / 1e9)
    }
}

/// The file [`tree_cpu_secs`] reads, for peers written in other languages
/// (`SWB_CPU_USAGE`), with `v2` telling its format.
pub fn tree_cpu_file() -> Option<(std::path::PathBuf, bool)> {
    CPU_CGROUP
        .get()
        .and_then(Option::as_ref)
        .map(|c| (c.usage.clone(), c.v2))
}

/// CPU seconds (user + system) used by this process so far (USER_HZ = 100 on Linux).
pub fn self_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / 100.0
}

/// Busy CPU seconds of the whole machine so far (all CPUs; everything but idle and iowait).
pub fn machine_busy_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return f64::NAN;
    };
    let Some(line) = stat.lines().next() else {
        return f64::NAN;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let busy: f64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .take(6)
        .map(|(_, x)| x)
        .sum();
    busy / 100.0
}
