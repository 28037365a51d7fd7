//! `swiftide-ssh-mcp`: an MCP server on stdio whose tools run commands and file operations on
//! one remote host over pooled SSH connections (build with `--features mcp`; the logic is in
//! `swiftide_ssh_executor::adapters::mcp`). `--help` lists the flags.
//!
//! Against the testbed: start a throwaway sshd in one terminal,
//!
//! ```sh
//! cargo run --ignore-rust-version -p swiftide-ssh-testbed --example serve
//! ```
//!
//! which prints the `swiftide-ssh-mcp` flags for it (`mcp --host 127.0.0.1 --port ... --user
//! ... --identity .../id_ed25519 --known-hosts .../known_hosts`), then run the server with
//! them, e.g. under the MCP inspector or any MCP client:
//!
//! ```sh
//! cargo run --ignore-rust-version --features mcp --bin swiftide-ssh-mcp -- \
//!     --host 127.0.0.1 --port 40123 --user root \
//!     --identity /tmp/.tmpXXXX/id_ed25519 --known-hosts /tmp/.tmpXXXX/known_hosts --root /tmp
//! ```

use std::process::ExitCode;

use swiftide_ssh_executor::adapters::mcp::{self, Cli, Parsed};

fn main() -> ExitCode {
    let cli = match Cli::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(cli)) => cli,
        Ok(Parsed::Help) => {
            print!("{}", mcp::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("swiftide-ssh-mcp {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("swiftide-ssh-mcp: {message}");
            return ExitCode::from(2);
        }
    };
    if let Err(message) = mcp::init_logging(cli.log_level.as_deref()) {
        eprintln!("swiftide-ssh-mcp: {message}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("swiftide-ssh-mcp: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(mcp::serve_stdio(&cli));
    // Background kills of cancelled commands get a moment; a command still running when the
    // process exits is killed by its supervisor when the connection closes.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("swiftide-ssh-mcp: {error}");
            ExitCode::FAILURE
        }
    }
}
