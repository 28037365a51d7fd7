//! Guards in the helper (PROTOCOL.md, "Guards"). The runner checks a guard before it starts
//! anything ([`check`]); the command's leader is the helper itself, run again as
//! `swiftide-ssh-runner --guarded GUARD SHELL TEXT` ([`run_guarded`]), which applies the
//! limits and the Landlock ruleset to itself and then becomes `sh -c TEXT`. That keeps the
//! helper free of unsafe code: std's `pre_exec` hook is the only other place to do it.

use std::{
    ffi::OsStr,
    os::unix::{ffi::OsStrExt, process::CommandExt},
    path::{Path, PathBuf},
    process::Command,
};

use swiftide_ssh_runner::Guard;

/// The first argument of the guarded leader.
pub const GUARDED_ARG: &str = "--guarded";

/// The environment variable that makes the helper act as on a kernel without Landlock (for
/// tests of the refusal; documented in PROTOCOL.md).
const NO_LANDLOCK: &str = "SWIFTIDE_SSH_RUNNER_NO_LANDLOCK";

/// Devices every confined command may write: output thrown away or read back.
const ALWAYS_WRITABLE: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Whether this kernel enforces what `guard` asks, whole (else the `guard:` fault's text).
pub fn check(guard: &Guard) -> Result<(), String> {
    if !guard.confines() {
        return Ok(());
    }
    if std::env::var_os(NO_LANDLOCK).is_some() {
        return Err(format!(
            "guard: Landlock is not available here: the kernel answered ENOSYS (as {NO_LANDLOCK} asks)"
        ));
    }
    landlock::ruleset(guard)
        .map(drop)
        .map_err(|error| format!("guard: Landlock cannot enforce it here: {error}"))
}

/// The guarded leader's arguments: the guard (hex), the shell, the text.
pub fn leader_args<'a>(guard: &Guard, shell: &'a str, text: &'a [u8]) -> [std::ffi::OsString; 4] {
    [
        GUARDED_ARG.into(),
        hex(&guard.encode()).into(),
        shell.into(),
        OsStr::from_bytes(text).to_os_string(),
    ]
}

/// In the guarded leader (`args`: what follows [`GUARDED_ARG`]): applies the guard, then
/// runs the shell. Returns (with the reason) only when either fails; the leader then exits
/// 126 with the reason on stderr, and nothing ran.
pub fn run_guarded(args: &[std::ffi::OsString]) -> String {
    let [guard, shell, text] = args else {
        return format!("{GUARDED_ARG} wants GUARD SHELL TEXT");
    };
    let guard = match unhex(guard.as_bytes()).map(|data| Guard::decode(&data)) {
        Some(Ok(guard)) => guard,
        Some(Err(why)) => return why,
        None => return "guard: not hex".to_owned(),
    };
    if let Err(why) = apply_limits(&guard) {
        return why;
    }
    if guard.confines()
        && let Err(why) = landlock::restrict(&guard)
    {
        return why;
    }
    let error = Command::new(shell).arg0("sh").arg("-c").arg(text).exec();
    format!("cannot start the command: {error}")
}

/// `setrlimit` for each limit asked: soft and hard (so the command cannot raise them); a
/// hard limit already lower stays, which is stricter. CPU time gets a hard limit a second
/// past the soft one, so the command hears `SIGXCPU` first.
fn apply_limits(guard: &Guard) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let asked = [
        (Resource::Cpu, guard.cpu_seconds, "cpu"),
        (Resource::As, guard.memory_bytes, "memory"),
        (Resource::Nproc, guard.processes, "processes"),
        (Resource::Fsize, guard.file_size_bytes, "file_size"),
        (Resource::Nofile, guard.open_files, "open_files"),
    ];
    for (resource, limit, name) in asked {
        let Some(limit) = limit else { continue };
        let hard_wanted = match resource {
            Resource::Cpu => limit.saturating_add(1),
            _ => limit,
        };
        let current = getrlimit(resource);
        let cap = |value: u64| current.maximum.map_or(value, |hard| value.min(hard));
        setrlimit(
            resource,
            Rlimit {
                current: Some(cap(limit)),
                maximum: Some(cap(hard_wanted)),
            },
        )
        .map_err(|error| format!("guard: cannot set the {name} limit: {error}"))?;
    }
    Ok(())
}

/// The paths a write-confined command may write beneath.
fn writable(guard: &Guard) -> Vec<PathBuf> {
    guard
        .writable
        .iter()
        .map(|path| PathBuf::from(OsStr::from_bytes(path)))
        .chain(
            ALWAYS_WRITABLE
                .iter()
                .map(|path| Path::new(path).to_path_buf()),
        )
        .collect()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    text.chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect()
}

#[cfg(target_os = "linux")]
mod landlock {
    use landlock::{
        ABI, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
        RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, path_beneath_rules,
    };

    use super::{Guard, writable};

    /// The write rights handled: ABI 3's. Before it `truncate(2)` is not checked, so a
    /// confined command could still empty files outside its paths: older kernels refuse.
    const WRITE_ABI: ABI = ABI::V3;

    /// The ruleset `guard` asks for, created (nothing is restricted until
    /// [`restrict`]); any part this kernel lacks is an error.
    pub(super) fn ruleset(guard: &Guard) -> Result<RulesetCreated, RulesetError> {
        let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        if guard.confine_writes {
            ruleset = ruleset.handle_access(AccessFs::from_write(WRITE_ABI))?;
        }
        if guard.confine_network {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        ruleset.create()
    }

    /// Restricts this process (and what it runs) to `guard`'s paths and ports.
    pub(super) fn restrict(guard: &Guard) -> Result<(), String> {
        let fail = |error: RulesetError| format!("guard: Landlock: {error}");
        let mut created = ruleset(guard).map_err(fail)?;
        if guard.confine_writes {
            created = created
                .add_rules(path_beneath_rules(
                    writable(guard),
                    AccessFs::from_write(WRITE_ABI),
                ))
                .map_err(fail)?;
        }
        if guard.confine_network {
            for port in &guard.ports {
                created = created
                    .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                    .map_err(fail)?;
            }
        }
        let status = created.restrict_self().map_err(fail)?;
        if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
            return Err(format!(
                "guard: Landlock enforced only {:?}",
                status.ruleset
            ));
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod landlock {
    use super::Guard;

    pub(super) fn ruleset(_: &Guard) -> Result<(), &'static str> {
        Err("Landlock is Linux's")
    }

    pub(super) fn restrict(_: &Guard) -> Result<(), String> {
        Err("guard: Landlock is Linux's".to_owned())
    }
}
