//! Command-line flags that the crate's binaries share (`swiftide-ssh`, `swiftide-ssh-mcp`),
//! defined once so that both take the same words and mean the same by them. Behind the
//! `flags` feature (clap).

use std::path::PathBuf;

use crate::{Confinement, Limits, Network, SshExecutorBuilder};

/// Limits and confinement for every command (README, "Guarded commands"): `--limit-*`,
/// `--confine-writes`, `--writable`, `--no-network`, `--connect-port`.
///
/// ```
/// use clap::Parser;
/// use swiftide_ssh_executor::flags::GuardArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     guard: GuardArgs,
/// }
///
/// let cli = Cli::parse_from(["cli", "--limit-memory", "2G", "--writable", "/srv/cache"]);
/// assert!(cli.guard.is_set());
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Guards: limits and confinement on the hosts")]
pub struct GuardArgs {
    /// Bytes of address space per process (RLIMIT_AS), with an optional K, M or G suffix.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    limit_memory: Option<u64>,
    /// Seconds of CPU time per process (RLIMIT_CPU): SIGXCPU at the limit.
    #[arg(long, value_name = "SECONDS")]
    limit_cpu: Option<u64>,
    /// Processes of the login's account at once (RLIMIT_NPROC; root is exempt).
    #[arg(long, value_name = "N")]
    limit_processes: Option<u64>,
    /// Bytes of the largest file written (RLIMIT_FSIZE), with an optional K, M or G suffix.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    limit_file_size: Option<u64>,
    /// Descriptors per process (RLIMIT_NOFILE).
    #[arg(long, value_name = "N")]
    limit_open_files: Option<u64>,
    /// Commands may write only beneath their working directory, a private TMPDIR and each
    /// --writable path (Landlock; refused on hosts that cannot enforce it).
    #[arg(long)]
    confine_writes: bool,
    /// A path confined commands may also write beneath (repeatable); implies
    /// --confine-writes.
    #[arg(long, value_name = "PATH")]
    writable: Vec<PathBuf>,
    /// No TCP connect and no TCP listening (Landlock), but to each --connect-port.
    #[arg(long)]
    no_network: bool,
    /// A TCP port commands may connect to (repeatable); implies --no-network for every
    /// other port.
    #[arg(long, value_name = "PORT")]
    connect_port: Vec<u16>,
    /// DANGEROUS: run commands that the host cannot guard as asked without their guards,
    /// rather than refuse them.
    #[arg(long)]
    run_unguarded_where_unenforceable: bool,
}

impl GuardArgs {
    /// Whether any guard flag was given.
    pub fn is_set(&self) -> bool {
        !self.limits().is_empty() || self.confinement().is_some()
    }

    /// The limits these flags ask for.
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::new();
        if let Some(bytes) = self.limit_memory {
            limits = limits.memory(bytes);
        }
        if let Some(seconds) = self.limit_cpu {
            limits = limits.cpu_time(std::time::Duration::from_secs(seconds));
        }
        if let Some(count) = self.limit_processes {
            limits = limits.processes(count);
        }
        if let Some(bytes) = self.limit_file_size {
            limits = limits.file_size(bytes);
        }
        if let Some(count) = self.limit_open_files {
            limits = limits.open_files(count);
        }
        limits
    }

    /// The confinement these flags ask for, if any.
    pub fn confinement(&self) -> Option<Confinement> {
        let writes = self.confine_writes || !self.writable.is_empty();
        let network = self.no_network || !self.connect_port.is_empty();
        if !writes && !network {
            return None;
        }
        let confinement = self
            .writable
            .iter()
            .fold(Confinement::new().writes(writes), |c, path| {
                c.writable(path)
            });
        Some(
            confinement.network(match (network, self.connect_port.is_empty()) {
                (false, _) => Network::Unconfined,
                (true, true) => Network::None,
                (true, false) => Network::Ports(self.connect_port.clone()),
            }),
        )
    }

    /// `builder` with these guards.
    pub fn apply(&self, mut builder: SshExecutorBuilder) -> SshExecutorBuilder {
        let limits = self.limits();
        if !limits.is_empty() {
            builder = builder.limits(limits);
        }
        if let Some(confinement) = self.confinement() {
            builder = builder.confinement(confinement);
        }
        builder.run_unguarded_where_unenforceable(self.run_unguarded_where_unenforceable)
    }
}

/// `512`, `64K`, `100M`, `2G` (powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((at, suffix)) if suffix.is_ascii_alphabetic() => (&text[..at], Some(suffix)),
        _ => (text, None),
    };
    let shift = match unit.map(|c| c.to_ascii_uppercase()) {
        None => 0,
        Some('K') => 10,
        Some('M') => 20,
        Some('G') => 30,
        Some('T') => 40,
        Some(other) => return Err(format!("unknown unit {other:?} (K, M, G or T)")),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text} is too large"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        guard: GuardArgs,
    }

    fn parse(args: &[&str]) -> GuardArgs {
        Cli::parse_from(std::iter::once("cli").chain(args.iter().copied())).guard
    }

    #[test]
    fn flags_map_to_limits_and_confinement() {
        assert!(!parse(&[]).is_set());
        let guard = parse(&["--limit-memory", "2G", "--limit-cpu", "60"]);
        assert_eq!(
            guard.limits(),
            Limits::new()
                .memory(2 << 30)
                .cpu_time(std::time::Duration::from_secs(60))
        );
        assert_eq!(guard.confinement(), None);
        assert_eq!(
            parse(&["--writable", "/srv"]).confinement(),
            Some(
                Confinement::new()
                    .writable("/srv")
                    .network(Network::Unconfined)
            )
        );
        assert_eq!(
            parse(&["--connect-port", "443"]).confinement(),
            Some(
                Confinement::new()
                    .writes(false)
                    .network(Network::Ports(vec![443]))
            )
        );
        assert_eq!(
            parse(&["--confine-writes", "--no-network"]).confinement(),
            Some(Confinement::new())
        );
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert!(parse_bytes("1X").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
