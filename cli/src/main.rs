//! `swiftide-ssh`: commands, file copies and jobs on many hosts over SSH, the way clush and
//! pdsh run them. This crate is the command line only: it parses the flags (clap), chooses
//! the hosts, and prints what `swiftide_ssh_executor::Fleet` reports (node sets, Ansible
//! inventories, rolling batches with thresholds, retries, folded output, JSON records, the
//! exit-code policy all live in the library's `fleet` module).
//!
//! ```sh
//! cargo install --path cli        # on Rust 1.95/1.96: add --ignore-rust-version
//! swiftide-ssh run -w 'web[01-20]!web07' -b uname -r
//! swiftide-ssh push -i hosts.ini -g 'web:&prod' --batch 1,10%,50% ./app.conf /etc/app/
//! swiftide-ssh run -w 'db[1-3]' --become-user postgres -K -- psql -c 'select 1'
//! swiftide-ssh forward -w 'node[1-3]' -L 9100:localhost:9100   # 9100, 9101, 9102
//! ```
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashSet,
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    process::ExitCode,
    str::FromStr,
    time::Duration,
};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use swiftide_ssh_executor::{
    Become, BecomeMethod, Fleet, FleetEvent, FleetReport, ForwardSpec, HostKeyPolicy, HostRecord,
    JobOptions, PushOptions, Secret, SshConfig, SshExecutor, SshExecutorBuilder,
    fleet::{
        Batches, Inventory, InventoryHost, LiveLines, exit_code, expand_nodeset, fold_records,
        max_exit_code, read_records, write_failed_hosts, write_records,
    },
};

/// The exit code of a usage error (bad flags, no hosts): the library's policy reserves 2.
const USAGE: u8 = 2;

/// The default `job start --job-retention-days`, the library's `job_retention`.
const DEFAULT_JOB_RETENTION_DAYS: u64 = 7;

/// The environment variable an escalation password may come from (for bots; -K and
/// --become-password-file win over it).
const BECOME_PASSWORD_ENV: &str = "SWIFTIDE_SSH_BECOME_PASSWORD";

/// Run commands, copy files, start jobs and forward ports on many hosts over SSH.
///
/// Hosts come from node sets (-w), Ansible inventories (-i, -g), host files (--hosts-file)
/// and ~/.ssh/config aliases; they run in rolling batches with failure thresholds. Output is
/// live, one `host: line` at a time (pdsh), folded by identical output (-b, clush -b), or
/// JSON records (--json).
///
/// Exit codes (the highest applicable wins): 0 every host succeeded; 1 a command (or job)
/// exited nonzero or was killed by a signal; 2 usage error (bad flags, no hosts); 3 a command
/// timed out or its connection broke under it (its effect is unknown); 4 a host could not
/// run it (unreachable, authentication refused, `become failed (<reason>)`: the escalation
/// of --become failed and nothing ran, other errors); 5 a host key was refused (unknown,
/// changed or revoked: an operator must act); 6 hosts were skipped because a threshold or
/// fail-fast stopped the rollout. With -S: the largest exit code of the remote commands
/// instead (clush -S, pdsh -S).
#[derive(Debug, Parser)]
#[command(name = "swiftide-ssh", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command on every host (`sh -c` of the words joined by spaces, as ssh does).
    Run {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Copy a local file or directory to every host (pdcp, clush --copy): atomic per file,
    /// sha256 checked on the host after the copy. A file that exists keeps its owner, group
    /// and mode; a new one gets the local file's mode.
    ///
    /// DEST that is an existing directory, or ends with `/`, receives `DEST/<name of SOURCE>`;
    /// otherwise SOURCE is copied to DEST itself.
    Push {
        #[command(flatten)]
        fleet: FleetArgs,
        /// Apply the local files' modes to existing files too (pdcp's -p; here -p is the
        /// port, as with ssh).
        #[arg(long)]
        preserve: bool,
        /// The local file or directory.
        source: PathBuf,
        /// The remote path.
        dest: PathBuf,
    },
    /// Copy a file or directory from every host into `DEST/<host>/` (rpdcp, clush --rcopy
    /// --dest), checked against its sha256 on the host.
    Pull {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The remote file or directory.
        source: PathBuf,
        /// The local directory that receives one directory per host.
        dest: PathBuf,
    },
    /// Detached jobs on every host, under one id: start them, and later ask their states,
    /// read their output or kill them by that id.
    #[command(subcommand)]
    Job(JobCommand),
    /// Forward ports through every host, as `ssh -L`, `-R` and `-D` do, until interrupted
    /// (Ctrl-C, SIGTERM) or for --for SECS.
    ///
    /// Each host's forwards are printed as they open (`web1: 127.0.0.1:9100 -> localhost:9100
    /// on 10.0.0.11`, the host's address). On several hosts a local listener's port moves up by one per host (-L
    /// 9100:localhost:9100 on three hosts listens on 9100, 9101 and 9102); port 0 picks a
    /// free one per host. A host whose forwards do not all open fails (exit code as for
    /// `run`); the others keep forwarding. When they stop, each host's streams and bytes are
    /// printed on standard error.
    Forward {
        #[command(flatten)]
        fleet: FleetArgs,
        /// A local forward: a port here, carried to HOST:HOSTPORT (or a Unix socket) as the
        /// host reaches it (ssh -L). No BIND (or localhost): loopback; `*`: every address.
        #[arg(short = 'L', value_name = "[BIND:]PORT:HOST:HOSTPORT")]
        local: Vec<String>,
        /// A remote forward: a port (or Unix socket) on the host, carried to HOST:HOSTPORT
        /// (or a Unix socket) as this machine reaches it (ssh -R). Port 0: the server picks.
        #[arg(short = 'R', value_name = "[BIND:]PORT:HOST:HOSTPORT")]
        remote: Vec<String>,
        /// A SOCKS5 proxy here whose connections the host makes (ssh -D).
        #[arg(short = 'D', value_name = "[BIND:]PORT")]
        dynamic: Vec<String>,
        /// Stop after SECS seconds (default: until interrupted).
        #[arg(long = "for", value_name = "SECS")]
        duration: Option<f64>,
    },
    /// Merge the JSON records of several runs (the shards of one run, say) into one folded
    /// report, with the exit code of the whole.
    Fold {
        /// JSON-lines record files (from --json); `-` or none: standard input.
        files: Vec<PathBuf>,
        /// Write the names of the hosts that did not succeed to FILE.
        #[arg(long, value_name = "FILE")]
        failed_hosts: Option<PathBuf>,
        /// Exit with the largest exit code of the remote commands (clush -S).
        #[arg(short = 'S')]
        max_exit_code: bool,
    },
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// Start a command as a job on every host; prints the job id on standard error.
    Start {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The job id (1-64 of `A-Za-z0-9._-`): starting the same id again starts nothing
        /// twice. Default: a new `fleet-<16 hex digits>`.
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// Kill the job after SECS seconds.
        #[arg(long, value_name = "SECS")]
        deadline: Option<u64>,
        /// The directory to run in (default: the login directory).
        #[arg(long, value_name = "DIR")]
        chdir: Option<PathBuf>,
        /// Jobs that ended at least this many days ago are removed from each host after the
        /// start, with their output (0 = keep them until removed).
        #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_JOB_RETENTION_DAYS)]
        job_retention_days: u64,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Each host's state of job ID (running, exited N, lost), folded by state.
    Status {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The job id.
        id: String,
    },
    /// Each host's output of job ID so far.
    Output {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The job id.
        id: String,
        /// The most bytes read of each stream, from its start.
        #[arg(long, value_name = "N", default_value_t = 1024 * 1024)]
        max_bytes: u64,
    },
    /// Kill job ID on every host (TERM to its process group, KILL after --grace).
    Kill {
        #[command(flatten)]
        fleet: FleetArgs,
        /// The job id.
        id: String,
        /// Seconds between TERM and KILL.
        #[arg(long, value_name = "SECS", default_value_t = 2)]
        grace: u64,
    },
}

/// Everything that chooses and runs a fleet: shared by every subcommand that talks to hosts.
#[derive(Debug, Args)]
struct FleetArgs {
    #[command(flatten)]
    hosts: HostArgs,
    #[command(flatten)]
    connection: ConnectionArgs,
    #[command(flatten)]
    escalation: BecomeArgs,
    #[command(flatten)]
    rollout: RolloutArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Host selection.
#[derive(Debug, Args)]
#[command(next_help_heading = "Hosts")]
struct HostArgs {
    /// Target hosts as a node set: `web[01-20]`, `db[1-3,7]`, `web[1-20]!web7`, `a,b` (a
    /// name may be an ~/.ssh/config alias or an inventory host), or `^FILE` (pdsh: the
    /// hosts listed in FILE); repeatable.
    #[arg(short = 'w', value_name = "NODESET")]
    nodes: Vec<String>,
    /// Exclude these hosts (a node set); repeatable.
    #[arg(short = 'x', value_name = "NODESET")]
    exclude: Vec<String>,
    /// An Ansible inventory source, as `ansible -i` reads it: an INI or YAML file, the JSON
    /// of `ansible-inventory --list`, an executable inventory script (run with --list), or a
    /// directory of them, with the group_vars/ and host_vars/ beside it; repeatable (merged
    /// in order). Alone it selects every host in it.
    #[arg(short = 'i', long, value_name = "SOURCE")]
    inventory: Vec<PathBuf>,
    /// Inventory hosts matching an Ansible pattern (`web`, `web:&prod:!canary`, `db*`,
    /// `~web0[12]`, `web[0:2]`); needs -i. Given again, each further pattern narrows the
    /// selection, as --limit does.
    #[arg(short = 'g', long = "group", value_name = "PATTERN")]
    groups: Vec<String>,
    /// Narrow the inventory selection by an Ansible pattern (`ansible --limit`: `web:!canary`,
    /// `@FILE` for a file of names); repeatable, each narrowing further; needs -i.
    #[arg(long, value_name = "PATTERN")]
    limit: Vec<String>,
    /// Hosts from FILE, one `[user@]host[:port]` or node set a line (`#` comments), e.g. the
    /// --failed-hosts file of an earlier run. Alone it selects; with -w or -g it keeps only
    /// their hosts listed in FILE (Ansible's --limit @file).
    #[arg(long, value_name = "FILE")]
    hosts_file: Option<PathBuf>,
    /// Run only shard K of N (0 <= K < N) of the selected hosts: a stable split by host
    /// name, so N runners (a Kubernetes Indexed Job, a Slurm array, GNU parallel) cover
    /// every host once. Merge their --json records with `swiftide-ssh fold`.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// The OpenSSH client configuration (default ~/.ssh/config), read once: HostName, User,
    /// Port, IdentityFile, ProxyJump, known-hosts settings of each host.
    #[arg(short = 'F', long, value_name = "FILE")]
    ssh_config: Option<PathBuf>,
}

/// Connection settings (they win over ~/.ssh/config; inventory variables win over them).
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
struct ConnectionArgs {
    /// Login user (default: ansible_user, the ssh config's User, else the login name of the
    /// running uid, from its passwd entry as ssh takes it).
    #[arg(short = 'l', value_name = "USER")]
    user: Option<String>,
    /// SSH port (default: ansible_port, the ssh config's Port, else 22).
    #[arg(short = 'p', value_name = "PORT")]
    port: Option<u16>,
    /// Connect timeout in seconds: TCP, handshake and authentication (default 10).
    #[arg(short = 't', value_name = "SECS")]
    connect_timeout: Option<f64>,
    /// Private key file (repeatable). Default: the ssh config's IdentityFile, else the
    /// ssh-agent at $SSH_AUTH_SOCK, else ~/.ssh/id_*.
    #[arg(long = "identity", value_name = "FILE")]
    identities: Vec<PathBuf>,
    /// Use the ssh-agent at $SSH_AUTH_SOCK.
    #[arg(long)]
    agent: bool,
    /// known_hosts file to check host keys against, strictly (repeatable; default: the ssh
    /// config's, else ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts).
    #[arg(long, value_name = "FILE")]
    known_hosts: Vec<PathBuf>,
    /// Record the keys of hosts never seen before in the (first) known_hosts file, as
    /// OpenSSH's StrictHostKeyChecking=accept-new; a changed key is still refused.
    #[arg(long)]
    accept_new: bool,
}

/// Rollout.
#[derive(Debug, Args)]
#[command(next_help_heading = "Rollout")]
struct RolloutArgs {
    /// How many hosts run at once.
    #[arg(short = 'f', long, value_name = "N", default_value_t = 64)]
    fanout: usize,
    /// Deadline per host in seconds: connecting, the command and killing it (clush -u).
    #[arg(short = 'u', long = "timeout", value_name = "SECS")]
    timeout: Option<f64>,
    /// Rolling batches, as Ansible's serial: a count, a percentage or a list whose last size
    /// repeats (`1,10%,50%`). A batch starts when the one before it is done.
    #[arg(long, value_name = "SIZES")]
    batch: Option<Batches>,
    /// After a batch, stop when more than P% of its hosts failed (unreachable and refused
    /// host keys count); later hosts are reported as skipped.
    #[arg(long, value_name = "P")]
    max_fail_percentage: Option<u8>,
    /// Stop starting hosts at the first failure (pdsh -k, Ansible's any_errors_fatal).
    #[arg(short = 'k', long)]
    fail_fast: bool,
    /// Try unreachable hosts (nothing was sent) up to N more times with backoff; a host
    /// whose command may have run is never retried.
    #[arg(long, value_name = "N", default_value_t = 0)]
    retries: u32,
    /// The first retry's wait in seconds, doubled each time (at most 30 s).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    retry_backoff: f64,
}

/// Output.
#[derive(Debug, Args)]
#[command(next_help_heading = "Output")]
struct OutputArgs {
    /// Gather the output at the end: hosts with identical output and status fold into one
    /// block headed by their node set (clush -b, dshbak -c).
    #[arg(short = 'b', long = "fold", conflicts_with = "json")]
    fold: bool,
    /// One JSON record per host on standard output, as each host finishes (schema_version
    /// 1, documented in the library's fleet::record).
    #[arg(long)]
    json: bool,
    /// Write the names of the hosts that did not succeed to FILE (read it back with
    /// --hosts-file).
    #[arg(long, value_name = "FILE")]
    failed_hosts: Option<PathBuf>,
    /// Exit with the largest exit code of the remote commands (clush -S, pdsh -S).
    #[arg(short = 'S')]
    max_exit_code: bool,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// Print the hosts the selection flags pick (after -w, -x, -i/-g, --hosts-file and
    /// --shard), one a line as `NAME USER@ADDRESS:PORT` (or JSON records with --json), and
    /// exit without connecting (Ansible's --list-hosts).
    #[arg(long)]
    list_hosts: bool,
}

/// Privilege escalation, Ansible's "become": everything the subcommand does on a host (the
/// command, the files pushed or pulled, the jobs) runs as another account there.
///
/// `--become` has no short flag: `-b` is `--fold`, as in clush (Ansible's `-b` is become).
#[derive(Debug, Args)]
#[command(next_help_heading = "Privilege escalation (Ansible's become)")]
struct BecomeArgs {
    /// Run as another account on every host (root with sudo unless --become-user and
    /// --become-method say otherwise): commands, pushed and pulled files, jobs. Jobs started
    /// with it live in that account's state directory: ask their status, output or kill with
    /// the same escalation. No short flag: -b is --fold (clush).
    #[arg(long = "become")]
    become_: bool,
    /// The account to become; implies --become. [default: root]
    #[arg(long, value_name = "USER")]
    become_user: Option<String>,
    /// The escalation tool; implies --become. [default: sudo]
    #[arg(long, value_name = "METHOD", value_parser = method_parser())]
    become_method: Option<BecomeMethod>,
    /// Extra arguments for the tool, split on whitespace (Ansible's become_flags), e.g.
    /// `--become-flags='-E'` or `--become-flags '-g wheel'`; implies --become.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    become_flags: Option<String>,
    /// Ask for the escalation password before the run, on the terminal (/dev/tty, not
    /// standard input; nothing is echoed; an empty answer gives none). Needs --become (or
    /// a --become-* flag that implies it).
    #[arg(short = 'K', long, conflicts_with = "become_password_file")]
    ask_become_pass: bool,
    /// Read the escalation password from the first line of FILE (its newline stripped).
    /// FILE must not be readable or writable by group or others (as ssh refuses such keys):
    /// chmod 600 it. Needs --become (or a --become-* flag that implies it). Without -K or
    /// this flag, the password comes from $SWIFTIDE_SSH_BECOME_PASSWORD if set (for bots;
    /// processes of the same user can read it in /proc/PID/environ).
    #[arg(long, value_name = "FILE")]
    become_password_file: Option<PathBuf>,
}

impl BecomeArgs {
    /// Whether these flags turn escalation on: `--become`, or a flag that says how.
    fn wanted(&self) -> bool {
        self.become_
            || self.become_user.is_some()
            || self.become_method.is_some()
            || self.become_flags.is_some()
    }

    /// The escalation these flags describe, or `None`. Reads the password (asking for it on
    /// the terminal with -K), so call it once, right before the run.
    fn escalation(&self) -> Result<Option<Become>, Usage> {
        if !self.wanted() {
            // A password alone escalates nothing: say so rather than ignore it. (The
            // variable may be set for every run, so it alone is no mistake.)
            let given = if self.ask_become_pass {
                Some("-K/--ask-become-pass")
            } else if self.become_password_file.is_some() {
                Some("--become-password-file")
            } else {
                None
            };
            return match given {
                Some(flag) => Err(Usage(format!(
                    "{flag} needs --become (or --become-user, --become-method, --become-flags); \
                     -b is --fold here, as in clush"
                ))),
                None => Ok(None),
            };
        }
        let mut escalation = Become::new(self.become_method.unwrap_or(BecomeMethod::Sudo))
            .flags_from_text(self.become_flags.as_deref().unwrap_or_default());
        if let Some(user) = &self.become_user {
            escalation = escalation.user(user.clone());
        }
        if let Some(password) = self.password()? {
            escalation = escalation.password(password);
        }
        Ok(Some(escalation))
    }

    /// The password: -K, else --become-password-file, else $SWIFTIDE_SSH_BECOME_PASSWORD;
    /// none when empty. Never printed, logged or passed on as an argument.
    fn password(&self) -> Result<Option<Secret>, Usage> {
        let password = if self.ask_become_pass {
            ask_password()?
        } else if let Some(path) = &self.become_password_file {
            return Secret::from_file(path)
                .map(Some)
                .map_err(|error| Usage(format!("--become-password-file {error}")));
        } else {
            match std::env::var(BECOME_PASSWORD_ENV) {
                Ok(password) => password,
                Err(std::env::VarError::NotPresent) => String::new(),
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(Usage(format!("${BECOME_PASSWORD_ENV} is not UTF-8")));
                }
            }
        };
        Ok((!password.is_empty()).then(|| Secret::new(password)))
    }
}

/// `--become-method`: the library's names, listed in the help and in errors.
fn method_parser() -> impl clap::builder::TypedValueParser<Value = BecomeMethod> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["sudo", "doas", "su"])
        .try_map(|method| method.parse::<BecomeMethod>())
}

/// -K: the password typed on the controlling terminal, without echo. rpassword (rather than
/// reading standard input) opens /dev/tty for both the prompt and the answer and turns echo
/// off there, so a password never lands on a pipe or in a captured stdout/stderr, and
/// standard input stays free; without a terminal (cron, CI, `setsid`) opening /dev/tty fails
/// and this is a usage error, never a read of whatever stdin holds.
fn ask_password() -> Result<String, Usage> {
    let _echo_off = EchoOff::on_the_terminal();
    rpassword::prompt_password("BECOME password: ").map_err(|error| {
        Usage(format!(
            "-K/--ask-become-pass needs a terminal to read the password from (/dev/tty: \
             {error}); without one use --become-password-file FILE or ${BECOME_PASSWORD_ENV}"
        ))
    })
}

/// The controlling terminal's echo turned off from before the prompt shows, and turned back
/// on when dropped. rpassword 7.5 prints its prompt first and only then turns echo off, so a
/// password typed the instant the prompt appeared (an `expect` script, a paste) was echoed:
/// the CLI test that answers the prompt at once saw it on the screen.
struct EchoOff {
    tty: std::fs::File,
    saved: rustix::termios::Termios,
}

impl EchoOff {
    /// `None` without a terminal (rpassword then reports that itself).
    fn on_the_terminal() -> Option<Self> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        let saved = tcgetattr(&tty).ok()?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        tcsetattr(&tty, OptionalActions::Now, &quiet).ok()?;
        Some(Self { tty, saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        rustix::termios::tcsetattr(
            &self.tty,
            rustix::termios::OptionalActions::Now,
            &self.saved,
        )
        .ok();
    }
}

/// `--shard K/N`.
#[derive(Debug, Clone, Copy)]
struct Shard {
    index: usize,
    count: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}`: expected K/N with 0 <= K < N, e.g. 0/4");
        let (index, count) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = index.trim().parse().map_err(|_| bad())?;
        let count: usize = count.trim().parse().map_err(|_| bad())?;
        if index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// A usage error (exit 2) or a failure before any host ran (exit 4 would claim a host).
#[derive(Debug)]
struct Usage(String);

impl<E: std::fmt::Display> From<E> for Usage {
    fn from(error: E) -> Self {
        Usage(error.to_string())
    }
}

/// `[user@]host[:port]` of a host-file line or a plain name.
fn split_destination(entry: &str) -> (Option<&str>, &str, Option<u16>) {
    let (user, rest) = match entry.split_once('@') {
        Some((user, rest)) => (Some(user), rest),
        None => (None, entry),
    };
    if let Some(inner) = rest.strip_prefix('[')
        && let Some((host, after)) = inner.split_once(']')
    {
        return (
            user,
            host,
            after.strip_prefix(':').and_then(|p| p.parse().ok()),
        );
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (user, host, Some(port)),
            Err(_) => (user, rest, None),
        },
        _ => (user, rest, None),
    }
}

/// The names of a host file: node sets expanded, `[v6]:port` lines kept whole.
fn read_hosts_file(path: &Path) -> Result<Vec<String>, Usage> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Usage(format!("cannot read {}: {e}", path.display())))?;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if line.contains("]:") || line.starts_with('[') {
            names.push(line.to_owned());
        } else {
            names.extend(expand_nodeset(line)?);
        }
    }
    Ok(names)
}

impl FleetArgs {
    /// The selected host names, in order, without duplicates.
    fn names(&self, inventory: Option<&Inventory>) -> Result<Vec<String>, Usage> {
        let hosts = &self.hosts;
        let mut names = Vec::new();
        for nodes in &hosts.nodes {
            // pdsh's `-w ^FILE`: the hosts listed in FILE.
            match nodes.strip_prefix('^') {
                Some(file) => names.extend(read_hosts_file(Path::new(file))?),
                None => names.extend(expand_nodeset(nodes)?),
            }
        }
        if !hosts.groups.is_empty() || !hosts.limit.is_empty() {
            let inventory =
                inventory.ok_or_else(|| Usage("-g and --limit need an inventory (-i)".into()))?;
            // The first -g is the pattern; later ones narrow it, as --limit does.
            let (pattern, narrowing) = match hosts.groups.split_first() {
                Some((pattern, rest)) => (pattern.as_str(), rest),
                None => ("all", &[][..]),
            };
            let limits: Vec<&String> = narrowing.iter().chain(&hosts.limit).collect();
            names.extend(
                inventory
                    .select_limited(pattern, &limits)?
                    .into_iter()
                    .map(|h| h.name),
            );
        } else if let Some(inventory) = inventory
            && hosts.nodes.is_empty()
            && hosts.hosts_file.is_none()
        {
            names.extend(inventory.host_names().iter().cloned());
        }
        if let Some(file) = &hosts.hosts_file {
            let listed = read_hosts_file(file)?;
            if hosts.nodes.is_empty() && hosts.groups.is_empty() {
                // Alone (or with only an inventory, where its names are looked up): the
                // file's hosts.
                names = listed;
            } else {
                let keep: HashSet<String> = listed.into_iter().collect();
                names.retain(|name| keep.contains(name));
            }
        }
        let mut excluded = HashSet::new();
        for nodes in &self.hosts.exclude {
            excluded.extend(expand_nodeset(nodes)?);
        }
        let mut seen = HashSet::new();
        names.retain(|name| !excluded.contains(name) && seen.insert(name.clone()));
        if names.is_empty() {
            return Err(Usage(
                "no hosts selected (give -w NODESET, -i INVENTORY [-g PATTERN] or --hosts-file)"
                    .into(),
            ));
        }
        Ok(names)
    }

    /// The executor builder of one host: its ~/.ssh/config settings, then its inventory
    /// variables, then this command line's flags where the inventory sets nothing.
    fn builder(
        &self,
        name: &str,
        config: &SshConfig,
        inventory: Option<&InventoryHost>,
    ) -> Result<SshExecutorBuilder, Usage> {
        let connection = &self.connection;
        let (mut user, mut port) = (connection.user.clone(), connection.port);
        let mut builder = match inventory {
            // The flags first: the inventory's variables win over them, as in Ansible.
            Some(host) => {
                let mut builder = config.resolve(host.address())?.to_builder()?;
                if let Some(user) = user {
                    builder = builder.user(user);
                }
                if let Some(port) = port {
                    builder = builder.port(port);
                }
                let (builder, warnings) = host.configure(builder, Some(config))?;
                for warning in warnings {
                    eprintln!("swiftide-ssh: inventory host {warning}");
                }
                builder
            }
            None => {
                let (line_user, host, line_port) = split_destination(name);
                if line_user.is_some() {
                    user = line_user.map(str::to_owned);
                }
                port = line_port.or(port);
                let mut builder = config.resolve(host)?.to_builder()?;
                if let Some(user) = user {
                    builder = builder.user(user);
                }
                if let Some(port) = port {
                    builder = builder.port(port);
                }
                builder
            }
        };
        if let Some(secs) = connection.connect_timeout {
            builder = builder.connect_timeout(seconds("-t", secs)?);
        }
        for identity in &connection.identities {
            builder = builder.private_key_file(identity.clone());
        }
        if connection.agent {
            builder = builder.agent();
        }
        if connection.accept_new {
            let file = connection
                .known_hosts
                .first()
                .cloned()
                .unwrap_or_else(|| PathBuf::from("~/.ssh/known_hosts"));
            builder = builder.accept_new_host_keys(file);
        } else if !connection.known_hosts.is_empty() {
            builder = builder.host_key_policy(HostKeyPolicy::Strict {
                known_hosts: connection.known_hosts.clone(),
            });
        }
        Ok(builder)
    }

    /// The fleet these flags describe (built without connecting; inside the runtime), each
    /// executor's builder passed through `tune` (a subcommand's own settings) last.
    fn fleet(
        &self,
        tune: impl Fn(SshExecutorBuilder) -> SshExecutorBuilder,
    ) -> Result<Fleet, Usage> {
        let fleet = self.selected(tune)?;
        // Last, after every usage error the hosts could give: -K asks on the terminal here.
        if let Some(escalation) = self.escalation.escalation()? {
            return Ok(fleet.with_become(escalation)?);
        }
        Ok(fleet)
    }

    /// `--list-hosts`: prints the selected hosts without connecting to any; true when it
    /// did (the subcommand then does nothing else).
    fn list_hosts(&self) -> Result<bool, Usage> {
        if !self.output.list_hosts {
            return Ok(false);
        }
        let fleet = self.selected(|builder| builder)?;
        let mut stdout = std::io::stdout().lock();
        for (name, executor) in fleet.names().iter().zip(fleet.members()) {
            let (user, address, port) = (executor.user(), executor.host(), executor.port());
            let line = if self.output.json {
                serde_json::json!({"name": name, "user": user, "address": address, "port": port})
                    .to_string()
            } else if address.contains(':') {
                format!("{name} {user}@[{address}]:{port}")
            } else {
                format!("{name} {user}@{address}:{port}")
            };
            // A closed pipe (`| head`) ends the listing, nothing more.
            if writeln!(stdout, "{line}").is_err() {
                break;
            }
        }
        Ok(true)
    }

    /// The selected hosts as a fleet with this command line's rollout settings, without
    /// the escalation (which may ask for a password).
    fn selected(
        &self,
        tune: impl Fn(SshExecutorBuilder) -> SshExecutorBuilder,
    ) -> Result<Fleet, Usage> {
        let config = match &self.hosts.ssh_config {
            Some(path) => SshConfig::load(path)?,
            None => SshConfig::user_config()?,
        };
        let inventory = if self.hosts.inventory.is_empty() {
            None
        } else {
            let inventory = Inventory::from_paths(&self.hosts.inventory)?;
            for warning in inventory.warnings() {
                eprintln!("swiftide-ssh: inventory: {warning}");
            }
            Some(inventory)
        };
        let names = self.names(inventory.as_ref())?;
        let members = names
            .into_iter()
            .map(|name| {
                let host = inventory.as_ref().and_then(|i| i.host(&name));
                let executor = self
                    .builder(&name, &config, host.as_ref())
                    .and_then(|builder| Ok(tune(builder).build_lazy()?))
                    .map_err(|Usage(message)| Usage(format!("{name}: {message}")))?;
                Ok((name, executor))
            })
            .collect::<Result<Vec<(String, SshExecutor)>, Usage>>()?;
        let mut fleet = Fleet::named(members);
        if let Some(shard) = self.hosts.shard {
            fleet = fleet.shard(shard.index, shard.count)?;
        }
        let rollout = &self.rollout;
        fleet = fleet.concurrency(rollout.fanout).retry_unreachable(
            rollout.retries,
            seconds("--retry-backoff", rollout.retry_backoff)?,
        );
        if let Some(secs) = rollout.timeout {
            fleet = fleet.per_host_timeout(seconds("-u", secs)?);
        }
        if let Some(batches) = &rollout.batch {
            fleet = fleet.batches(batches.clone());
        }
        if let Some(percent) = rollout.max_fail_percentage {
            fleet = fleet.max_fail_percentage(percent);
        }
        Ok(fleet.fail_fast(rollout.fail_fast))
    }
}

fn seconds(flag: &str, secs: f64) -> Result<Duration, Usage> {
    Duration::try_from_secs_f64(secs).map_err(|_| Usage(format!("{flag} {secs}: not a duration")))
}

/// What a subcommand reports as each host finishes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Streamed {
    /// A command: its output arrives as `Output` events.
    Output,
    /// Everything else: a host's summary (or output) comes with its result.
    AtTheEnd,
}

/// Prints a fleet's events: live `host: line` output, JSON records or nothing (folded at
/// the end), with a progress bar on a terminal.
struct Printer {
    fold: bool,
    json: bool,
    streamed: Streamed,
    live: LiveLines,
    progress: ProgressBar,
}

impl Printer {
    fn new(output: &OutputArgs, streamed: Streamed, hosts: usize) -> Self {
        let progress = if !output.no_progress && std::io::stderr().is_terminal() {
            let bar =
                ProgressBar::with_draw_target(Some(hosts as u64), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {pos}/{len} hosts  {msg}  [{elapsed}]")
            {
                bar.set_style(style);
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Printer {
            fold: output.fold,
            json: output.json,
            streamed,
            live: LiveLines::new(),
            progress,
        }
    }

    fn live(&self) -> bool {
        !self.fold && !self.json
    }

    /// Prints `host: text` lines to stdout or stderr, above the progress bar.
    fn lines(&self, host: &str, stderr: bool, lines: impl IntoIterator<Item = String>) {
        let lines: Vec<String> = lines.into_iter().collect();
        if lines.is_empty() {
            return;
        }
        self.progress.suspend(|| {
            let mut text = String::new();
            for line in lines {
                text.push_str(host);
                text.push_str(": ");
                text.push_str(&line);
                text.push('\n');
            }
            // A closed pipe (`| head`) is not worth a panic: the rest is dropped.
            let _ = if stderr {
                std::io::stderr().lock().write_all(text.as_bytes())
            } else {
                std::io::stdout().lock().write_all(text.as_bytes())
            };
        });
    }

    fn record(&self, record: &HostRecord) {
        self.progress.suspend(|| {
            let mut stdout = std::io::stdout().lock();
            let _ = write_records([record], &mut stdout);
            let _ = stdout.flush();
        });
    }

    fn event(&mut self, event: FleetEvent<'_>) {
        match event {
            FleetEvent::Output {
                host,
                member,
                chunk,
                ..
            } if self.live() => {
                for line in self.live.push(member, chunk) {
                    self.lines(host, line.stderr, [line.text]);
                }
            }
            FleetEvent::Retrying {
                host,
                attempt,
                error,
                delay,
                ..
            } => {
                self.progress.set_message(format!("retrying {host}"));
                if !self.json {
                    self.lines(
                        host,
                        true,
                        [format!(
                            "attempt {attempt} failed ({error}); again in {delay:?}"
                        )],
                    );
                }
            }
            FleetEvent::Finished { result, member, .. } => {
                self.progress.inc(1);
                if self.json {
                    self.record(&HostRecord::from_result(result, false));
                    return;
                }
                if self.live() {
                    for line in self.live.finish(member) {
                        self.lines(&result.name, line.stderr, [line.text]);
                    }
                    if self.streamed == Streamed::AtTheEnd
                        && let Ok(execution) = &result.outcome
                    {
                        let text = |bytes: Vec<u8>| {
                            String::from_utf8_lossy(&bytes)
                                .lines()
                                .map(str::to_owned)
                                .collect::<Vec<_>>()
                        };
                        self.lines(&result.name, false, text(execution.stdout()));
                        self.lines(&result.name, true, text(execution.stderr()));
                    }
                }
                let status = result.status();
                if !status.is_ok() {
                    let why = match &result.outcome {
                        Err(error) => format!("{status}: {}", error_chain(error)),
                        Ok(_) => status.to_string(),
                    };
                    self.lines(&result.name, true, [why]);
                }
            }
            FleetEvent::Skipped { skipped, .. } => {
                self.progress.inc(1);
                if self.json {
                    self.record(&HostRecord::from_skipped(skipped));
                } else {
                    self.lines(
                        &skipped.name,
                        true,
                        [format!("skipped: {}", skipped.reason)],
                    );
                }
            }
            _ => {}
        }
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Prints folded groups to stdout.
fn print_folded(records: &[HostRecord]) {
    let mut stdout = std::io::stdout().lock();
    for group in fold_records(records) {
        let _ = write!(stdout, "{group}");
    }
    let _ = stdout.flush();
}

/// One line of counts on stderr when not every host succeeded.
fn print_summary(records: &[HostRecord], stopped: Option<&str>) {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for record in records {
        match counts
            .iter_mut()
            .find(|(status, _)| *status == record.status)
        {
            Some((_, n)) => *n += 1,
            None => counts.push((record.status.clone(), 1)),
        }
    }
    if counts.iter().all(|(status, _)| status == "ok") {
        return;
    }
    let text: Vec<String> = counts
        .iter()
        .map(|(status, n)| format!("{n} {}", status.replace('_', " ")))
        .collect();
    eprintln!(
        "swiftide-ssh: {} of {} hosts",
        text.join(", "),
        records.len()
    );
    if let Some(reason) = stopped {
        eprintln!("swiftide-ssh: rollout stopped: {reason}");
    }
}

/// After a rollout: the folded report, the failed-hosts file, the counts, the exit code.
fn finish(printer: Printer, output: &OutputArgs, report: &FleetReport) -> Result<u8, Usage> {
    printer.progress.finish_and_clear();
    let records = report.records(false);
    if output.fold {
        print_folded(&records);
    }
    if let Some(path) = &output.failed_hosts {
        write_failed_hosts(path, &records)?;
    }
    print_summary(&records, report.stopped.as_deref());
    let statuses: Vec<_> = records.iter().map(HostRecord::host_status).collect();
    Ok(if output.max_exit_code {
        u8::try_from(max_exit_code(&statuses)).unwrap_or(u8::MAX)
    } else {
        report.exit_code()
    })
}

async fn rollout(args: &FleetArgs, streamed: Streamed, work: Work<'_>) -> Result<u8, Usage> {
    if args.list_hosts()? {
        return Ok(0);
    }
    let fleet = args.fleet(|builder| match &work {
        Work::JobStart { retention, .. } => builder.job_retention(*retention),
        _ => builder,
    })?;
    let mut printer = Printer::new(&args.output, streamed, fleet.members().len());
    let on_event = |event: FleetEvent<'_>| printer.event(event);
    let report = match work {
        Work::Run(command) => fleet.run(command, on_event).await,
        Work::Push(source, dest, options) => {
            fleet.push_with(source, dest, &options, on_event).await?
        }
        Work::Pull(source, dest) => fleet.pull(source, dest, on_event).await,
        Work::JobStart {
            command, options, ..
        } => {
            let started = fleet.start_job(command, options, on_event).await;
            eprintln!("swiftide-ssh: job {}", started.id);
            started.report
        }
        Work::JobStatus(id) => fleet.job_states(id, on_event).await.report,
        Work::JobOutput(id, max) => fleet.job_output(id, max, on_event).await,
        Work::JobKill(id, grace) => fleet.kill_job(id, grace, on_event).await.report,
    };
    finish(printer, &args.output, &report)
}

/// What a rollout does on each host.
enum Work<'a> {
    Run(&'a str),
    Push(&'a Path, &'a Path, PushOptions),
    Pull(&'a Path, &'a Path),
    JobStart {
        command: &'a str,
        options: JobOptions,
        /// `None`: keep the jobs that ended.
        retention: Option<Duration>,
    },
    JobStatus(&'a str),
    JobOutput(&'a str, u64),
    JobKill(&'a str, Duration),
}

/// `swiftide-ssh forward`: opens the forwards on every host, keeps them until interrupted
/// (or for `duration`), then closes them and prints their counts.
async fn forward(
    args: &FleetArgs,
    specs: &[ForwardSpec],
    duration: Option<Duration>,
) -> Result<u8, Usage> {
    if args.list_hosts()? {
        return Ok(0);
    }
    if specs.is_empty() {
        return Err(Usage("forward needs at least one -L, -R or -D".into()));
    }
    if args.escalation.wanted() {
        return Err(Usage(
            "forward does not escalate: forwards are the login user's (drop --become)".into(),
        ));
    }
    let fleet = args.fleet(|builder| builder)?;
    // Watched from before the first forward opens: a signal while the hosts connect stops
    // the forwards as soon as they are all open (rather than killing the process).
    let stop = Stop::watch(duration)?;
    let mut printer = Printer::new(&args.output, Streamed::AtTheEnd, fleet.members().len());
    let opened = fleet
        .forward(specs, |event: FleetEvent<'_>| printer.event(event))
        .await;
    let code = finish(printer, &args.output, &opened.report)?;
    if opened.forwards.is_empty() {
        return Ok(code);
    }
    eprintln!(
        "swiftide-ssh: {} forwards open; {}",
        opened.forwards.len(),
        match duration {
            Some(duration) => format!("closing them in {duration:?}"),
            None => "Ctrl-C closes them".to_owned(),
        }
    );
    stop.wait().await;
    for open in &opened.forwards {
        let stats = open.forward.stats();
        eprintln!(
            "{}: {}: {} streams ({} failed), {} bytes to the host, {} from it",
            open.host,
            open.forward,
            stats.streams,
            stats.failed_streams,
            stats.bytes_to_host,
            stats.bytes_from_host
        );
    }
    opened.close().await;
    Ok(code)
}

/// What ends `forward`: Ctrl-C, SIGTERM or the end of a duration.
struct Stop {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    deadline: Option<tokio::time::Instant>,
}

impl Stop {
    /// Starts watching for the signals (from now on they no longer kill the process).
    fn watch(duration: Option<Duration>) -> Result<Self, Usage> {
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|error| Usage(format!("cannot watch for {name}: {error}")))
        };
        Ok(Stop {
            interrupt: watch(SignalKind::interrupt(), "SIGINT")?,
            terminate: watch(SignalKind::terminate(), "SIGTERM")?,
            deadline: duration.map(|duration| tokio::time::Instant::now() + duration),
        })
    }

    async fn wait(mut self) {
        let elapsed = async {
            match self.deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            () = elapsed => {}
        }
    }
}

/// `swiftide-ssh fold`: merges record files into one report.
fn fold(files: &[PathBuf], failed_hosts: Option<&Path>, max: bool) -> Result<u8, Usage> {
    let mut text = String::new();
    let stdin = [PathBuf::from("-")];
    for file in if files.is_empty() { &stdin[..] } else { files } {
        if file.as_os_str() == "-" {
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        } else {
            text.push_str(
                &std::fs::read_to_string(file)
                    .map_err(|e| Usage(format!("cannot read {}: {e}", file.display())))?,
            );
        }
        text.push('\n');
    }
    let records = read_records(&text)?;
    print_folded(&records);
    if let Some(path) = failed_hosts {
        write_failed_hosts(path, &records)?;
    }
    print_summary(&records, None);
    let statuses: Vec<_> = records.iter().map(HostRecord::host_status).collect();
    Ok(if max {
        u8::try_from(max_exit_code(&statuses)).unwrap_or(u8::MAX)
    } else {
        exit_code(&statuses)
    })
}

async fn dispatch(command: &Command) -> Result<u8, Usage> {
    match command {
        Command::Run { fleet, command } => {
            rollout(fleet, Streamed::Output, Work::Run(&command.join(" "))).await
        }
        Command::Push {
            fleet,
            preserve,
            source,
            dest,
        } => {
            let options = PushOptions::default().local_modes(*preserve);
            rollout(fleet, Streamed::AtTheEnd, Work::Push(source, dest, options)).await
        }
        Command::Pull {
            fleet,
            source,
            dest,
        } => rollout(fleet, Streamed::AtTheEnd, Work::Pull(source, dest)).await,
        Command::Job(job) => match job {
            JobCommand::Start {
                fleet,
                id,
                deadline,
                chdir,
                job_retention_days,
                command,
            } => {
                let mut options = JobOptions::new();
                if let Some(id) = id {
                    options = options.id(id.clone());
                }
                if let Some(secs) = deadline {
                    options = options.deadline(Duration::from_secs(*secs));
                }
                if let Some(dir) = chdir {
                    options = options.current_dir(dir.clone());
                }
                let command = command.join(" ");
                let retention = (*job_retention_days > 0)
                    .then(|| Duration::from_secs(job_retention_days.saturating_mul(24 * 3600)));
                let work = Work::JobStart {
                    command: &command,
                    options,
                    retention,
                };
                rollout(fleet, Streamed::AtTheEnd, work).await
            }
            JobCommand::Status { fleet, id } => {
                rollout(fleet, Streamed::AtTheEnd, Work::JobStatus(id)).await
            }
            JobCommand::Output {
                fleet,
                id,
                max_bytes,
            } => rollout(fleet, Streamed::AtTheEnd, Work::JobOutput(id, *max_bytes)).await,
            JobCommand::Kill { fleet, id, grace } => {
                let grace = Duration::from_secs(*grace);
                rollout(fleet, Streamed::AtTheEnd, Work::JobKill(id, grace)).await
            }
        },
        Command::Forward {
            fleet,
            local,
            remote,
            dynamic,
            duration,
        } => {
            let specs = local
                .iter()
                .map(|spec| ForwardSpec::parse_local(spec))
                .chain(remote.iter().map(|spec| ForwardSpec::parse_remote(spec)))
                .chain(dynamic.iter().map(|spec| ForwardSpec::parse_dynamic(spec)))
                .collect::<Result<Vec<_>, _>>()?;
            let duration = duration.map(|secs| seconds("--for", secs)).transpose()?;
            forward(fleet, &specs, duration).await
        }
        Command::Fold {
            files,
            failed_hosts,
            max_exit_code,
        } => fold(files, failed_hosts.as_deref(), *max_exit_code),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("swiftide-ssh: cannot start the runtime: {error}");
            return ExitCode::from(USAGE);
        }
    };
    let result = runtime.block_on(dispatch(&cli.command));
    // Blocking work in flight (a known_hosts append) gets up to 2 s. Async tasks still in
    // flight are dropped at their next await, which is why the fleet waits for a job start's
    // pruning itself; a command still running when the process exits (a background kill of
    // one cut short included) is killed by its supervisor when the connection closes.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Usage(message)) => {
            eprintln!("swiftide-ssh: {message}");
            ExitCode::from(USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn shards_and_destinations_parse() {
        let shard: Shard = "1/4".parse().unwrap_or(Shard { index: 9, count: 9 });
        assert_eq!((shard.index, shard.count), (1, 4));
        assert!("4/4".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
        assert_eq!(split_destination("web1"), (None, "web1", None));
        assert_eq!(
            split_destination("ci@web-2:2222"),
            (Some("ci"), "web-2", Some(2222))
        );
        assert_eq!(split_destination("[::1]:2200"), (None, "::1", Some(2200)));
        assert_eq!(split_destination("fe80::1"), (None, "fe80::1", None));
    }

    #[test]
    fn become_flags_parse_like_ansible() {
        let parse = |args: &[&str]| {
            let all = ["swiftide-ssh", "run", "-w", "web1"]
                .into_iter()
                .chain(args.iter().copied())
                .chain(["true"]);
            match Cli::try_parse_from(all) {
                Ok(Cli {
                    command: Command::Run { fleet, .. },
                }) => Ok(fleet),
                Ok(other) => unreachable!("{other:?}"),
                Err(error) => Err(error.kind()),
            }
        };
        // Nothing: no escalation; -b stays --fold.
        let none = parse(&["-b"]).map_err(drop);
        assert!(none.is_ok_and(|f| !f.escalation.wanted() && f.output.fold));
        let escalation = parse(&["--become"])
            .ok()
            .and_then(|f| f.escalation.escalation().ok().flatten());
        assert_eq!(
            escalation
                .as_ref()
                .map(|e| (e.method(), e.target_user(), e.has_password())),
            Some((BecomeMethod::Sudo, "root", false))
        );
        // --become-user, --become-method and --become-flags imply --become; the flags are
        // split on whitespace, a leading `-` is no option of ours.
        let escalation = parse(&[
            "--become-method",
            "doas",
            "--become-user",
            "postgres",
            "--become-flags",
            " -g  wheel ",
        ])
        .ok()
        .and_then(|f| f.escalation.escalation().ok().flatten());
        assert_eq!(
            escalation
                .as_ref()
                .map(|e| (e.method(), e.target_user(), e.flags().to_vec())),
            Some((
                BecomeMethod::Doas,
                "postgres",
                vec!["-g".to_owned(), "wheel".to_owned()]
            ))
        );
        assert!(parse(&["--become-flags=-E"]).is_ok_and(|f| f.escalation.wanted()));
        // -K and a password file exclude each other; a password alone is a usage error.
        assert_eq!(
            parse(&["--become", "-K", "--become-password-file", "/f"]).map(drop),
            Err(clap::error::ErrorKind::ArgumentConflict)
        );
        let alone = parse(&["--become-password-file", "/f"]).map_err(drop);
        assert!(alone.is_ok_and(|f| f.escalation.escalation().is_err()));
        assert!(parse(&["--become-method", "pkexec"]).is_err());
    }

    #[test]
    fn flags_parse_like_clush_and_pdsh() {
        let cli = Cli::try_parse_from([
            "swiftide-ssh",
            "run",
            "-w",
            "web[1-3]",
            "-x",
            "web2",
            "-f",
            "8",
            "-l",
            "ops",
            "-p",
            "2222",
            "-t",
            "3",
            "-u",
            "30",
            "--batch",
            "1,50%",
            "--max-fail-percentage",
            "10",
            "-b",
            "ls",
            "-la",
        ]);
        let Ok(Cli {
            command: Command::Run { fleet, command },
        }) = cli
        else {
            unreachable!("{cli:?}");
        };
        assert_eq!(command, ["ls", "-la"]);
        assert_eq!(fleet.hosts.nodes, ["web[1-3]"]);
        assert_eq!(fleet.rollout.fanout, 8);
        assert!(fleet.output.fold);
        assert_eq!(
            fleet.names(None).map_err(|u| u.0).ok(),
            Some(vec!["web1".to_owned(), "web3".to_owned()])
        );
    }
}
