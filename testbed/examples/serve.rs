//! Starts a testbed and keeps it running, for poking at it by hand:
//!
//! ```sh
//! cargo run -p swiftide-ssh-testbed --example serve -- [--unprivileged] [--password] [--netns] ['sshd_config line' ...]
//! ```
//!
//! Prints the testbed's directory and a ready-to-use `ssh` command line, then waits
//! `TESTBED_SECS` seconds (default 600) or until interrupted.

use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = swiftide_ssh_testbed::Testbed::builder();
    for arg in std::env::args().skip(1) {
        builder = match arg.as_str() {
            "--unprivileged" => builder.unprivileged_user(),
            "--password" => builder.password_auth(true),
            "--netns" => builder.network_namespace(true),
            line => builder.sshd_config_line(line),
        };
    }
    let testbed = builder.start()?;
    let ssh: Vec<String> = testbed
        .ssh_command("")
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    println!("dir {}", testbed.dir().display());
    println!("ssh {}", ssh.join(" "));
    if let Some(namespace) = testbed.network_namespace() {
        // To cut the host off by hand, set the link inside the namespace (swtb<n>p) down.
        println!("netns {namespace}");
    }
    let secs = std::env::var("TESTBED_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    std::thread::sleep(Duration::from_secs(secs));
    Ok(())
}
