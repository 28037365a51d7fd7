//! Starts a testbed and keeps it running, for poking at it by hand:
//!
//! ```sh
//! cargo run -p swiftide-ssh-testbed --example serve -- [--unprivileged] [--password] [--netns] \
//!     [--dropbear] [--no-sftp] [--shell bash|dash|zsh|mksh|ash|fish|tcsh|/path] ['sshd_config line' ...]
//! ```
//!
//! Prints the testbed's directory, a ready-to-use `ssh` command line and the matching
//! `swiftide-ssh-mcp` flags (the MCP server, crate `mcp/` of the workspace), then waits
//! `TESTBED_SECS` seconds (default 600) or until interrupted.

use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use swiftide_ssh_testbed::LoginShell;

    let mut builder = swiftide_ssh_testbed::Testbed::builder();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        builder = match arg.as_str() {
            "--unprivileged" => builder.unprivileged_user(),
            "--password" => builder.password_auth(true),
            "--netns" => builder.network_namespace(true),
            "--dropbear" => builder.dropbear(),
            "--no-sftp" => builder.sftp(false),
            "--shell" => {
                let name = args.next().ok_or("--shell needs a shell name or path")?;
                let shell = LoginShell::ALL
                    .into_iter()
                    .find(|shell| shell.name() == name)
                    .unwrap_or_else(|| LoginShell::Custom(name.into()));
                builder.login_shell(shell)
            }
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
    println!(
        "mcp --host {} --port {} --user {} --identity {} --known-hosts {}",
        testbed.host(),
        testbed.port(),
        testbed.user(),
        testbed.private_key_path().display(),
        testbed.known_hosts_path().display()
    );
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
