//! Starts a testbed and keeps it running for manual inspection.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = swiftide_ssh_testbed::Testbed::builder();
    for arg in std::env::args().skip(1) {
        builder = match arg.as_str() {
            "--unprivileged" => builder.unprivileged_user(),
            "--password" => builder.password_auth(true),
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
    std::thread::sleep(std::time::Duration::from_secs(
        std::env::var("HOLD_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    ));
    Ok(())
}
