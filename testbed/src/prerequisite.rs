//! What a test does when something it needs on this machine is missing.

use std::io::Write;

/// Skips a test whose prerequisite is missing, loudly, or fails it under CI.
///
/// The test is named by its thread's name, which libtest sets to the test's path. With the environment variable `CI` set this panics: in CI a missing prerequisite is a
/// broken set-up, never a pass. Otherwise it prints one `SKIPPED` line naming the test, what
/// is missing and the command that installs it, straight to the process's stderr, which
/// `cargo test` shows even for passing tests (output of `eprintln!` in a passing test is
/// captured and never shown), and returns so the caller can `return` from the test.
///
/// ```
/// if let Err(reason) = swiftide_ssh_testbed::DockerTestbed::available() {
///     swiftide_ssh_testbed::skip_unless_ci(&reason, "bash testbed/docker/prepare.sh");
///     return;
/// }
/// ```
///
/// # Panics
///
/// When `CI` is set.
pub fn skip_unless_ci(missing: &str, remedy: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    if std::env::var_os("CI").is_some() {
        panic!("{test}: required in CI (CI is set), but {missing}; set it up with: {remedy}");
    }
    // Written directly to the stderr handle: libtest captures only the print macros.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (not run, counted as passed by cargo): {test}: {missing}; to run it: {remedy}"
    );
}
