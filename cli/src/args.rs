//! The command line's clap types (subcommands and their flag groups), the escalation flags
//! (the library's shared ones) with their password prompt, and `Usage`, the error of every step before a run.

use std::{path::PathBuf, str::FromStr, time::Duration};

use clap::{Args, Parser, Subcommand};
use swiftide_ssh_executor::{
    Become, Secret,
    flags::{self, BECOME_PASSWORD_VARIABLE},
    fleet::Batches,
};

/// The default `job start --job-retention-days`, the library's `job_retention`.
const DEFAULT_JOB_RETENTION_DAYS: u64 = 7;

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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// and mode; a new one gets the local file's mode (--mode and --owner set them on every
    /// file, as Ansible's copy does).
    ///
    /// A file that already has the content (sha256), owner, group and mode the push would
    /// give it is not rewritten: it is reported `unchanged` (Ansible's "ok"), in the live
    /// and folded output and in --json (`"changed": false` and each file's `"change"`).
    ///
    /// DEST that is an existing directory, or ends with `/`, receives `DEST/<name of SOURCE>`;
    /// otherwise SOURCE is copied to DEST itself.
    Push {
        #[command(flatten)]
        fleet: FleetArgs,
        /// Apply the local files' modes to existing files too (pdcp's -p; here -p is the
        /// port, as with ssh).
        #[arg(long, conflicts_with = "mode")]
        preserve: bool,
        /// Give every pushed file this mode, in octal (0640), new or existing. Directories
        /// the push creates get the server's default mode; existing ones are left alone.
        #[arg(long, value_name = "MODE", value_parser = octal_mode)]
        mode: Option<u32>,
        /// Give every pushed file this owner and group, as chown writes them: USER,
        /// USER:GROUP or :GROUP (the group only; -g is the inventory group here, as in
        /// clush). Names are looked up on each host before anything is written there (a
        /// host without one fails, its files untouched); numbers are ids. Needs the right
        /// to (root, or --become: the change is made by the account the push runs as). Not
        /// applied to directories.
        #[arg(long, value_name = "USER[:GROUP]")]
        owner: Option<String>,
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
    /// Audit trails written with --audit.
    #[command(subcommand)]
    Audit(AuditCommand),
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
pub(crate) enum JobCommand {
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

/// `swiftide-ssh audit ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Check that FILE's hash chain is whole: exit 0 with its record count and head, or 1
    /// naming the first line that breaks it (a line removed, moved or edited).
    Verify {
        /// The trail (JSON lines, as --audit writes them).
        file: PathBuf,
        /// The head (the last line's SHA-256) recorded elsewhere earlier: the trail must
        /// still hold that line, which catches lines cut off its end.
        #[arg(long, value_name = "SHA256")]
        head: Option<String>,
    },
}

/// Everything that chooses and runs a fleet: shared by every subcommand that talks to hosts.
#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    #[command(flatten)]
    pub(crate) hosts: HostArgs,
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,
    #[command(flatten)]
    pub(crate) escalation: Escalation,
    #[command(flatten)]
    pub(crate) guard: swiftide_ssh_executor::flags::GuardArgs,
    #[command(flatten)]
    pub(crate) audit: swiftide_ssh_executor::flags::AuditArgs,
    #[command(flatten)]
    pub(crate) rollout: RolloutArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

/// Host selection.
#[derive(Debug, Args)]
#[command(next_help_heading = "Hosts")]
pub(crate) struct HostArgs {
    /// Target hosts as a node set: `web[01-20]`, `db[1-3,7]`, `web[1-20]!web7`, `a,b` (a
    /// name may be an ~/.ssh/config alias or an inventory host), or `^FILE` (pdsh: the
    /// hosts listed in FILE); repeatable.
    #[arg(short = 'w', value_name = "NODESET")]
    pub(crate) nodes: Vec<String>,
    /// Exclude these hosts (a node set); repeatable.
    #[arg(short = 'x', value_name = "NODESET")]
    pub(crate) exclude: Vec<String>,
    /// An Ansible inventory source, as `ansible -i` reads it: an INI or YAML file, the JSON
    /// of `ansible-inventory --list`, an executable inventory script (run with --list), or a
    /// directory of them, with the group_vars/ and host_vars/ beside it; repeatable (merged
    /// in order). Alone it selects every host in it.
    #[arg(short = 'i', long, value_name = "SOURCE")]
    pub(crate) inventory: Vec<PathBuf>,
    /// Inventory hosts matching an Ansible pattern (`web`, `web:&prod:!canary`, `db*`,
    /// `~web0[12]`, `web[0:2]`); needs -i. Given again, each further pattern narrows the
    /// selection, as --limit does.
    #[arg(short = 'g', long = "group", value_name = "PATTERN")]
    pub(crate) groups: Vec<String>,
    /// Narrow the inventory selection by an Ansible pattern (`ansible --limit`: `web:!canary`,
    /// `@FILE` for a file of names); repeatable, each narrowing further; needs -i.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) limit: Vec<String>,
    /// Hosts from FILE, one `[user@]host[:port]` or node set a line (`#` comments), e.g. the
    /// --failed-hosts file of an earlier run. Alone it selects; with -w or -g it keeps only
    /// their hosts listed in FILE (Ansible's --limit @file).
    #[arg(long, value_name = "FILE")]
    pub(crate) hosts_file: Option<PathBuf>,
    /// Run only shard K of N (0 <= K < N) of the selected hosts: a stable split by host
    /// name, so N runners (a Kubernetes Indexed Job, a Slurm array, GNU parallel) cover
    /// every host once. Merge their --json records with `swiftide-ssh fold`.
    #[arg(long, value_name = "K/N")]
    pub(crate) shard: Option<Shard>,
    /// The OpenSSH client configuration (default ~/.ssh/config), read once: HostName, User,
    /// Port, IdentityFile, ProxyJump, known-hosts settings of each host.
    #[arg(short = 'F', long, value_name = "FILE")]
    pub(crate) ssh_config: Option<PathBuf>,
}

/// Connection settings (they win over ~/.ssh/config; inventory variables win over them).
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct ConnectionArgs {
    /// Login user (default: ansible_user, the ssh config's User, else the login name of the
    /// running uid, from its passwd entry as ssh takes it).
    #[arg(short = 'l', value_name = "USER")]
    pub(crate) user: Option<String>,
    /// SSH port (default: ansible_port, the ssh config's Port, else 22).
    #[arg(short = 'p', value_name = "PORT")]
    pub(crate) port: Option<u16>,
    /// Connect timeout in seconds: TCP, handshake and authentication (default 10).
    #[arg(short = 't', value_name = "SECS")]
    pub(crate) connect_timeout: Option<f64>,
    /// Private key file (repeatable). Default: the ssh config's IdentityFile, else the
    /// ssh-agent at $SSH_AUTH_SOCK, else ~/.ssh/id_*.
    #[arg(long = "identity", value_name = "FILE")]
    pub(crate) identities: Vec<PathBuf>,
    /// Use the ssh-agent at $SSH_AUTH_SOCK.
    #[arg(long)]
    pub(crate) agent: bool,
    /// known_hosts file to check host keys against, strictly (repeatable; default: the ssh
    /// config's, else ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts).
    #[arg(long, value_name = "FILE")]
    pub(crate) known_hosts: Vec<PathBuf>,
    /// Record the keys of hosts never seen before in the (first) known_hosts file, as
    /// OpenSSH's StrictHostKeyChecking=accept-new; a changed key is still refused.
    #[arg(long)]
    pub(crate) accept_new: bool,
}

/// Rollout.
#[derive(Debug, Args)]
#[command(next_help_heading = "Rollout")]
pub(crate) struct RolloutArgs {
    /// How many hosts run at once.
    #[arg(short = 'f', long, value_name = "N", default_value_t = 64)]
    pub(crate) fanout: usize,
    /// Deadline per host in seconds: connecting, the command and killing it (clush -u).
    #[arg(short = 'u', long = "timeout", value_name = "SECS")]
    pub(crate) timeout: Option<f64>,
    /// Rolling batches, as Ansible's serial: a count, a percentage or a list whose last size
    /// repeats (`1,10%,50%`). A batch starts when the one before it is done.
    #[arg(long, value_name = "SIZES")]
    pub(crate) batch: Option<Batches>,
    /// After a batch, stop when more than P% of its hosts failed (unreachable and refused
    /// host keys count); later hosts are reported as skipped.
    #[arg(long, value_name = "P")]
    pub(crate) max_fail_percentage: Option<u8>,
    /// Stop starting hosts at the first failure (pdsh -k, Ansible's any_errors_fatal).
    #[arg(short = 'k', long)]
    pub(crate) fail_fast: bool,
    /// Try unreachable hosts (nothing was sent) up to N more times with backoff; a host
    /// whose command may have run is never retried.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) retries: u32,
    /// The first retry's wait in seconds, doubled each time (at most 30 s).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub(crate) retry_backoff: f64,
}

/// Output.
#[derive(Debug, Args)]
#[command(next_help_heading = "Output")]
pub(crate) struct OutputArgs {
    /// Gather the output at the end: hosts with identical output and status fold into one
    /// block headed by their node set (clush -b, dshbak -c; not Ansible's -b, which is
    /// --become here).
    #[arg(short = 'b', long = "fold", conflicts_with = "json")]
    pub(crate) fold: bool,
    /// One JSON record per host on standard output, as each host finishes (schema_version
    /// 1, documented in the library's fleet::record).
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the names of the hosts that did not succeed to FILE (read it back with
    /// --hosts-file).
    #[arg(long, value_name = "FILE")]
    pub(crate) failed_hosts: Option<PathBuf>,
    /// Exit with the largest exit code of the remote commands (clush -S, pdsh -S).
    #[arg(short = 'S')]
    pub(crate) max_exit_code: bool,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    pub(crate) no_progress: bool,
    /// Print the hosts the selection flags pick (after -w, -x, -i/-g, --hosts-file and
    /// --shard), one a line as `NAME USER@ADDRESS:PORT` (or JSON records with --json), and
    /// exit without connecting (Ansible's --list-hosts).
    #[arg(long)]
    pub(crate) list_hosts: bool,
}

/// Privilege escalation, Ansible's "become": everything the subcommand does on a host (the
/// command, the files pushed or pulled, the jobs) runs as another account there. The flags
/// and their variables are the library's `flags::BecomeArgs`, shared with the MCP server;
/// `-K` is this program's own, since only it has a terminal to ask on.
///
/// `--become` has no short flag: `-b` is `--fold`, as in clush (Ansible's `-b` is become).
#[derive(Debug, Args)]
#[command(next_help_heading = "Privilege escalation (Ansible's become)")]
pub(crate) struct Escalation {
    #[command(flatten)]
    shared: flags::BecomeArgs,
    /// Ask for the escalation password before the run, on the terminal (/dev/tty, not
    /// standard input; nothing is echoed; an empty answer gives none). Needs --become (or
    /// a --become-* flag that implies it).
    #[arg(
        short = 'K',
        long,
        conflicts_with_all = ["become_password_file", "become_password_env"]
    )]
    ask_become_pass: bool,
}

impl Escalation {
    /// Whether these flags (or their variables) turn escalation on: `--become`, or a flag
    /// that says how.
    pub(crate) fn wanted(&self) -> bool {
        self.shared.wanted()
    }

    /// The escalation these flags describe, or `None`. Reads the password (asking for it on
    /// the terminal with -K), so call it once, right before the run.
    pub(crate) fn escalation(&self) -> Result<Option<Become>, Usage> {
        // -b is the usual slip of an Ansible hand: say what it is here.
        let hint = |message: String| {
            if self.wanted() {
                Usage(message)
            } else {
                Usage(format!("{message}; -b is --fold here, as in clush"))
            }
        };
        if self.ask_become_pass && !self.wanted() {
            return Err(hint(
                "-K/--ask-become-pass needs --become (or --become-user, --become-method, \
                 --become-flags)"
                    .to_owned(),
            ));
        }
        if self.ask_become_pass {
            self.shared.escalation_asking(ask_password).map_err(hint)
        } else {
            self.shared.escalation().map_err(hint)
        }
    }
}

/// -K: the password typed on the controlling terminal, without echo (none when the answer
/// is empty). rpassword (rather than reading standard input) opens /dev/tty for both the
/// prompt and the answer and turns echo off there, so a password never lands on a pipe or
/// in a captured stdout/stderr, and standard input stays free; without a terminal (cron,
/// CI, `setsid`) opening /dev/tty fails and this is a usage error, never a read of
/// whatever stdin holds.
fn ask_password() -> Result<Option<Secret>, String> {
    let _echo_off = EchoOff::on_the_terminal();
    let password = rpassword::prompt_password("BECOME password: ").map_err(|error| {
        format!(
            "-K/--ask-become-pass needs a terminal to read the password from (/dev/tty: \
             {error}); without one use --become-password-file FILE, --become-password-env \
             VAR or ${BECOME_PASSWORD_VARIABLE}"
        )
    })?;
    Ok((!password.is_empty()).then(|| Secret::new(password)))
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
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) count: usize,
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
pub(crate) struct Usage(pub(crate) String);

impl<E: std::fmt::Display> From<E> for Usage {
    fn from(error: E) -> Self {
        Usage(error.to_string())
    }
}

/// `--owner USER[:GROUP]`: the user and the group, either may be absent (`:GROUP`, `USER`).
pub(crate) fn owner_and_group(text: &str) -> Result<(Option<&str>, Option<&str>), Usage> {
    let (user, group) = match text.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (text, None),
    };
    if group == Some("") || (user.is_empty() && group.is_none()) {
        return Err(Usage(format!(
            "--owner {text:?}: give USER, USER:GROUP or :GROUP"
        )));
    }
    Ok(((!user.is_empty()).then_some(user), group))
}

/// `--mode`: octal permission bits (`0640`, `640`, `0o640`), at most 7777.
fn octal_mode(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.starts_with('+') => Ok(mode),
        _ => Err(format!(
            "{text:?} is not an octal mode such as 0640 (at most 7777)"
        )),
    }
}

pub(crate) fn seconds(flag: &str, secs: f64) -> Result<Duration, Usage> {
    Duration::try_from_secs_f64(secs).map_err(|_| Usage(format!("{flag} {secs}: not a duration")))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use swiftide_ssh_executor::BecomeMethod;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
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
}
