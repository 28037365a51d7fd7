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

/// A Python virtual environment at `venv` in which `probe` (Python code, e.g.
/// `import mcp`) runs without error: the one there when it does already, else a new one
/// made with `python3 -m venv` and `pip install` of `requirements` (needs PyPI). Returns its
/// `python`; `Err` says why not (for [`skip_unless_ci`]).
pub fn python_venv(
    venv: &std::path::Path,
    requirements: &[&str],
    probe: &str,
) -> Result<std::path::PathBuf, String> {
    let python = venv.join("bin/python");
    let probe_passes = |python: &std::path::Path| {
        std::process::Command::new(python)
            .args(["-c", probe])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if probe_passes(&python) {
        return Ok(python);
    }
    let run = |program: &std::path::Path, arguments: &[&str]| -> Result<(), String> {
        let out = std::process::Command::new(program)
            .args(arguments)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {arguments:?} failed: {}",
                program.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    let _ = std::fs::remove_dir_all(venv);
    run(
        std::path::Path::new("python3"),
        &["-m", "venv", &venv.to_string_lossy()],
    )?;
    let mut install = vec![
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ];
    install.extend_from_slice(requirements);
    run(&python, &install)?;
    if probe_passes(&python) {
        Ok(python)
    } else {
        Err(format!(
            "`{probe}` fails after pip install {}",
            requirements.join(" ")
        ))
    }
}
