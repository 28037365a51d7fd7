//! Network namespaces for testbeds that can be cut off the network.
//!
//! Each [`Network`] is one namespace `swiftide-tb-<n>` with a veth pair: `swtb<n>h` in
//! the root namespace (`10.213.<n>.1/30`) and `swtb<n>p` inside (`10.213.<n>.2/30`),
//! `n` in 1..=254. A slot is claimed atomically by creating the namespace (its file in
//! `/run/netns` is created exclusively), so concurrent testbeds, in one process or
//! several, never share one.
//!
//! Cutting the network sets the *inner* end down. The root end then loses its carrier
//! but stays administratively up, so its `/30` route stays (flagged `linkdown`) and every
//! packet to the host is dropped on the veth: a silent peer in both directions, and a new
//! connection attempt hangs instead of failing. (Setting the root end down would remove
//! that route and send the host's packets along the default route, off the machine.)
//! Permanent neighbour entries on both ends keep ARP out of the picture: with ARP, a
//! connection attempt would fail with "no route to host" after ~3 s instead of hanging.

use std::fs;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::TestbedError;
use crate::process;
use crate::system;

/// The range every testbed network lives in. The root namespace gets the route
/// `unreachable 10.213.0.0/16` (installed once, left in place): the `/30` of a live
/// testbed is more specific, and packets to a removed testbed's address (a socket still
/// open when the testbed was dropped) are refused locally instead of following the
/// default route.
pub(crate) const GUARD_ROUTE: &str = "10.213.0.0/16";

/// Prefix of the namespace names (`swiftide-tb-<n>`).
pub(crate) const NAMESPACE_PREFIX: &str = "swiftide-tb-";

/// How long a cut or restore may take to show on the links.
const LINK_TIMEOUT: Duration = Duration::from_secs(5);

/// Serialises slot claims within this process (across processes, `ip netns add` is
/// atomic); keeps the scan short when many testbeds start at once.
static CLAIM: Mutex<()> = Mutex::new(());

/// Spreads start slots over the range.
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);

/// Deletes the veth pair (`$1`, root end) and the namespace (`$2`) once its standard
/// input closes, i.e. when the test process is gone without dropping the testbed. Keyboard
/// interrupts and termination requests sent to the whole process group are ignored, so
/// that the cleanup still happens after Ctrl-C.
const WATCHDOG_SCRIPT: &str = r#"
trap '' INT HUP TERM
while read -r _line; do :; done
"$3" link del "$1" 2>/dev/null
"$3" netns del "$2" 2>/dev/null
exit 0
"#;

/// A network namespace with a veth pair to the root namespace. Dropping it deletes both.
#[derive(Debug)]
pub(crate) struct Network {
    namespace: String,
    host_if: String,
    inner_if: String,
    host_addr: Ipv4Addr,
    inner_addr: Ipv4Addr,
    host_mac: String,
    inner_mac: String,
    cut: AtomicBool,
    watchdog: Option<Child>,
    /// Set once the watchdog has removed everything (tests only).
    removed: bool,
}

/// The `ip` binary.
fn ip_path() -> PathBuf {
    system::sbin_tool("ip")
}

/// Runs `ip args...`; `Err` carries the command's stderr.
fn ip(args: &[&str]) -> Result<(), TestbedError> {
    let what = format!("`ip {}`", args.join(" "));
    let output = Command::new(ip_path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| TestbedError::io(format!("running {what} (is iproute2 installed?)"), e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Command {
            what,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

fn already_exists(err: &TestbedError) -> bool {
    matches!(err, TestbedError::Command { stderr, .. } if stderr.contains("File exists"))
}

impl Network {
    /// Claims a free slot and sets up the namespace, the veth pair, addresses, routes and
    /// neighbour entries. Requires root (checked by the caller).
    pub(crate) fn create() -> Result<Network, TestbedError> {
        let _claim = CLAIM
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = std::process::id()
            .wrapping_mul(37)
            .wrapping_add(NEXT_SLOT.fetch_add(1, Ordering::Relaxed))
            % 254;
        let mut last_error = None;
        for offset in 0..254u32 {
            let n = u8::try_from((start + offset) % 254 + 1).unwrap_or(1);
            let namespace = format!("{NAMESPACE_PREFIX}{n}");
            match ip(&["netns", "add", &namespace]) {
                Ok(()) => {}
                Err(e) if already_exists(&e) => continue,
                Err(e) => return Err(e),
            }
            let host_if = format!("swtb{n}h");
            let inner_if = format!("swtb{n}p");
            let host_mac = format!("02:53:57:54:{n:02x}:01");
            let inner_mac = format!("02:53:57:54:{n:02x}:02");
            if let Err(e) = ip(&[
                "link", "add", &host_if, "address", &host_mac, "type", "veth", "peer", "name",
                &inner_if, "address", &inner_mac, "netns", &namespace,
            ]) {
                let _ = ip(&["netns", "del", &namespace]);
                if already_exists(&e) {
                    // A leftover link of a testbed that was not cleaned up: skip the slot.
                    last_error = Some(e);
                    continue;
                }
                return Err(e);
            }
            let watchdog = spawn_watchdog(&host_if, &namespace);
            let network = Network {
                namespace,
                host_if,
                inner_if,
                host_addr: Ipv4Addr::new(10, 213, n, 1),
                inner_addr: Ipv4Addr::new(10, 213, n, 2),
                host_mac,
                inner_mac,
                cut: AtomicBool::new(false),
                watchdog,
                removed: false,
            };
            // On error, dropping `network` removes what was created.
            network.configure()?;
            return Ok(network);
        }
        Err(last_error.unwrap_or_else(|| {
            TestbedError::io(
                "claiming a network namespace",
                std::io::Error::other(format!(
                    "all 254 namespaces {NAMESPACE_PREFIX}1..254 exist; remove leftovers \
                     with `ip netns del {NAMESPACE_PREFIX}<n>` and `ip link del swtb<n>h`"
                )),
            )
        }))
    }

    fn configure(&self) -> Result<(), TestbedError> {
        let ns = self.namespace.as_str();
        let host_cidr = format!("{}/30", self.host_addr);
        let inner_cidr = format!("{}/30", self.inner_addr);
        // No IPv6 link-local addresses: keeps router solicitations and the like off the
        // link (best effort; older iproute2 lacks `addrgenmode`).
        let _ = ip(&["link", "set", "dev", &self.host_if, "addrgenmode", "none"]);
        let _ = ip(&[
            "-n",
            ns,
            "link",
            "set",
            "dev",
            &self.inner_if,
            "addrgenmode",
            "none",
        ]);
        ip(&["addr", "add", &host_cidr, "dev", &self.host_if])?;
        ip(&["link", "set", "dev", &self.host_if, "up"])?;
        ip(&["-n", ns, "addr", "add", &inner_cidr, "dev", &self.inner_if])?;
        ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
        ip(&["-n", ns, "link", "set", "dev", &self.inner_if, "up"])?;
        self.set_neighbours()?;
        match ip(&["route", "add", "unreachable", GUARD_ROUTE]) {
            Ok(()) => {}
            Err(e) if already_exists(&e) => {}
            Err(e) => return Err(e),
        }
        self.wait_for_carrier(true)
    }

    /// Permanent neighbour entries on both ends (the inner one is flushed whenever the
    /// inner link goes down).
    fn set_neighbours(&self) -> Result<(), TestbedError> {
        ip(&[
            "neigh",
            "replace",
            &self.inner_addr.to_string(),
            "lladdr",
            &self.inner_mac,
            "dev",
            &self.host_if,
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            &self.namespace,
            "neigh",
            "replace",
            &self.host_addr.to_string(),
            "lladdr",
            &self.host_mac,
            "dev",
            &self.inner_if,
            "nud",
            "permanent",
        ])
    }

    /// Waits until the root end's operational state shows the link up (or down).
    fn wait_for_carrier(&self, up: bool) -> Result<(), TestbedError> {
        let path = format!("/sys/class/net/{}/operstate", self.host_if);
        let deadline = Instant::now() + LINK_TIMEOUT;
        loop {
            let state = fs::read_to_string(&path).unwrap_or_default();
            if (state.trim() == "up") == up {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestbedError::io(
                    format!("waiting for {} to go {}", self.host_if, updown(up)),
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("operstate is still {:?}", state.trim()),
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The namespace's name.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The root end's interface name.
    pub(crate) fn host_interface(&self) -> &str {
        &self.host_if
    }

    /// The root end's address (`10.213.<n>.1`).
    pub(crate) fn host_side_address(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The address inside the namespace (`10.213.<n>.2`).
    pub(crate) fn inner_address(&self) -> Ipv4Addr {
        self.inner_addr
    }

    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// `ip netns exec <namespace> <program>`: `ip` enters the namespace and then executes
    /// `program` in place, so the child's pid is the program's.
    pub(crate) fn exec_command(&self, program: &std::path::Path) -> Command {
        let mut command = Command::new(ip_path());
        command
            .args(["netns", "exec", &self.namespace])
            .arg(program);
        command
    }

    /// Silently drops all traffic between the namespace and the rest of the machine.
    pub(crate) fn cut(&self) -> Result<(), TestbedError> {
        ip(&[
            "-n",
            &self.namespace,
            "link",
            "set",
            "dev",
            &self.inner_if,
            "down",
        ])?;
        self.cut.store(true, Ordering::Release);
        self.wait_for_carrier(false)
    }

    /// Undoes [`Network::cut`] and waits until the link is up again.
    pub(crate) fn restore(&self) -> Result<(), TestbedError> {
        ip(&[
            "-n",
            &self.namespace,
            "link",
            "set",
            "dev",
            &self.inner_if,
            "up",
        ])?;
        self.set_neighbours()?;
        self.wait_for_carrier(true)?;
        self.cut.store(false, Ordering::Release);
        Ok(())
    }
}

fn updown(up: bool) -> &'static str {
    if up { "up" } else { "down" }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            process::stop_watchdog(watchdog);
        }
        if self.removed {
            return;
        }
        // Deleting one end deletes the pair, wherever the other end lives.
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.namespace]);
    }
}

/// Starts the network's watchdog (see [`WATCHDOG_SCRIPT`]); `None` if `sh` cannot run.
fn spawn_watchdog(host_if: &str, namespace: &str) -> Option<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("swiftide-ssh-testbed-netns-watchdog")
        .arg(host_if)
        .arg(namespace)
        .arg(ip_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Makes a network's watchdog act now, as if the test process had exited.
#[cfg(test)]
pub(crate) fn trigger_watchdog(network: &mut Network) {
    if let Some(watchdog) = network.watchdog.take() {
        process::trigger_watchdog(watchdog);
        network.removed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(namespace: &str) -> bool {
        std::path::Path::new("/run/netns").join(namespace).exists()
    }

    fn link_exists(name: &str) -> bool {
        std::path::Path::new("/sys/class/net").join(name).exists()
    }

    fn is_root() -> bool {
        system::effective_uid().is_ok_and(|uid| uid == 0)
    }

    #[test]
    fn networks_get_distinct_slots_and_clean_up_on_drop() {
        if !is_root() {
            crate::skip_unless_ci("network namespaces need root", "run the tests as root");
            return;
        }
        let a = Network::create().unwrap();
        let b = Network::create().unwrap();
        assert_ne!(a.namespace(), b.namespace());
        assert_ne!(a.inner_address(), b.inner_address());
        let (ns, link) = (a.namespace().to_owned(), a.host_interface().to_owned());
        assert!(exists(&ns) && link_exists(&link));
        drop(a);
        assert!(!exists(&ns) && !link_exists(&link));
        drop(b);
    }

    #[test]
    fn the_watchdog_removes_the_namespace_when_the_process_is_gone() {
        if !is_root() {
            crate::skip_unless_ci("network namespaces need root", "run the tests as root");
            return;
        }
        let mut network = Network::create().unwrap();
        let (ns, link) = (
            network.namespace().to_owned(),
            network.host_interface().to_owned(),
        );
        trigger_watchdog(&mut network);
        assert!(!exists(&ns), "{ns} left behind");
        assert!(!link_exists(&link), "{link} left behind");
        // The slot may already belong to another testbed: dropping must not touch it.
        drop(network);
    }
}
