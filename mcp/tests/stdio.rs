//! The `swiftide-ssh-mcp` binary against a real sshd: its generated command line (`--help`,
//! `--version`, usage errors, settings from `SWIFTIDE_SSH_*` variables), rmcp's client over
//! its stdio (rmcp's child-process transport), and the Python `mcp` SDK as an independent
//! client, and privilege escalation set by the operator's flags (`--become`, a password from
//! a file or a variable) on testbeds whose login accounts have real sudo rules. The server's
//! tools are tested in-process in the library's tests/mcp.rs.

#[path = "../../tests/common/mcp_client.rs"]
mod mcp_client;
#[path = "../../tests/common/processes.rs"]
mod processes;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use rmcp::{ServiceExt, model::CallToolRequestParams, transport::TokioChildProcess};
use serde_json::{Value, json};
use swiftide_ssh_testbed::{BECOME_PASSWORD, Escalation, Testbed};

use mcp_client::{Recorder, args, call, is_error, text};
use processes::{remote_processes, token, wait_until_gone};

const BINARY: &str = env!("CARGO_BIN_EXE_swiftide-ssh-mcp");

fn testbed() -> Testbed {
    Testbed::start().unwrap_or_else(|e| panic!("cannot start the sshd testbed: {e}"))
}

/// Runs the binary with `args` and `envs` (stdin closed) and returns its output.
fn run(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(BINARY)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn help_and_version_are_generated_and_name_every_flag_and_variable() {
    let help = run(&["--help"], &[]);
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    for (flag, variable) in [
        ("--host <HOST>", "SWIFTIDE_SSH_HOST"),
        ("--ssh-config-alias <ALIAS>", "SWIFTIDE_SSH_CONFIG_ALIAS"),
        ("--ssh-config <FILE>", "SWIFTIDE_SSH_CONFIG"),
        ("--port <PORT>", "SWIFTIDE_SSH_PORT"),
        ("--user <USER>", "SWIFTIDE_SSH_USER"),
        ("-i, --identity <FILE>", "SWIFTIDE_SSH_IDENTITY"),
        ("--agent", "SWIFTIDE_SSH_AGENT"),
        ("--password-env <VAR>", "SWIFTIDE_SSH_PASSWORD_ENV"),
        ("--known-hosts <FILE>", "SWIFTIDE_SSH_KNOWN_HOSTS"),
        (
            "--accept-new-host-keys",
            "SWIFTIDE_SSH_ACCEPT_NEW_HOST_KEYS",
        ),
        (
            "--insecure-accept-any-host-key",
            "SWIFTIDE_SSH_INSECURE_ACCEPT_ANY_HOST_KEY",
        ),
        ("--workdir <DIR>", "SWIFTIDE_SSH_WORKDIR"),
        ("--root <DIR>", "SWIFTIDE_SSH_ROOT"),
        ("--timeout <SECS>", "SWIFTIDE_SSH_TIMEOUT"),
        ("--max-output-bytes <N>", "SWIFTIDE_SSH_MAX_OUTPUT_BYTES"),
        ("--connect-timeout <SECS>", "SWIFTIDE_SSH_CONNECT_TIMEOUT"),
        (
            "--job-retention-days <DAYS>",
            "SWIFTIDE_SSH_JOB_RETENTION_DAYS",
        ),
        ("--log-level <LEVEL>", "SWIFTIDE_SSH_LOG_LEVEL"),
        ("--become", "SWIFTIDE_SSH_BECOME"),
        ("--become-user <USER>", "SWIFTIDE_SSH_BECOME_USER"),
        ("--become-method <METHOD>", "SWIFTIDE_SSH_BECOME_METHOD"),
        ("--become-flags <FLAGS>", "SWIFTIDE_SSH_BECOME_FLAGS"),
        (
            "--become-password-file <FILE>",
            "SWIFTIDE_SSH_BECOME_PASSWORD_FILE",
        ),
        (
            "--become-password-env <VAR>",
            "SWIFTIDE_SSH_BECOME_PASSWORD_ENV",
        ),
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
        assert!(
            help.contains(&format!("[env: {variable}=")),
            "--help lacks {variable}:\n{help}"
        );
    }
    assert!(help.contains("[default: 600]") && help.contains("[default: 1048576]"));
    assert!(help.contains("[ALIAS]"), "{help}");

    let version = run(&["--version"], &[]);
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8(version.stdout).unwrap(),
        format!("swiftide-ssh-mcp {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bad_command_lines_exit_2_with_a_message() {
    for (args, envs, says) in [
        (&[][..], &[][..], "--host"),
        (&["--host", "a", "--port", "x"], &[], "--port"),
        (&["--host", "a", "--frobnicate"], &[], "--frobnicate"),
        (&["alias", "--host", "a"], &[], "--host"),
        (
            &["--host", "a", "--ssh-config", "/c"],
            &[],
            "--ssh-config needs an alias",
        ),
        (
            &["--host", "a", "--insecure-accept-any-host-key"],
            &[("SWIFTIDE_SSH_KNOWN_HOSTS", "/k")],
            "ignores --known-hosts",
        ),
        (
            &["--accept-new-host-keys"],
            &[
                ("SWIFTIDE_SSH_HOST", "a"),
                ("SWIFTIDE_SSH_INSECURE_ACCEPT_ANY_HOST_KEY", "yes"),
            ],
            "exclude each other",
        ),
        (
            &["--host", "a"],
            &[("SWIFTIDE_SSH_TIMEOUT", "soon")],
            "--timeout",
        ),
        (
            &["--host", "a", "--become-method", "pkexec"],
            &[],
            "--become-method",
        ),
        (
            &["--host", "a", "--become-password-file", "/p"],
            &[],
            "needs --become",
        ),
        (
            &["--host", "a"],
            &[("SWIFTIDE_SSH_BECOME_PASSWORD_ENV", "P")],
            "needs --become",
        ),
        (
            &["--host", "a", "--become-user", "postgres"],
            &[("SWIFTIDE_SSH_BECOME", "false")],
            "SWIFTIDE_SSH_BECOME is false",
        ),
        (
            &[
                "--host",
                "a",
                "--become",
                "--become-password-file",
                "/p",
                "--become-password-env",
                "P",
            ],
            &[],
            "--become-password-env",
        ),
    ] {
        let out = run(args, envs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {envs:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} {envs:?}: {stderr}");
        assert!(out.stdout.is_empty(), "stdout carries the protocol only");
    }
}

/// A boolean variable set to a false value is not the flag: `..._INSECURE_...=false` next to
/// `--accept-new-host-keys` is no conflict. The server then starts, finds stdin closed and
/// exits 1 (the handshake fails), not 2.
#[test]
fn a_false_boolean_variable_is_no_flag() {
    let out = run(
        &[
            "--host",
            "127.0.0.1",
            "--user",
            "nobody",
            "--accept-new-host-keys",
        ],
        &[
            ("SWIFTIDE_SSH_INSECURE_ACCEPT_ANY_HOST_KEY", "false"),
            ("SWIFTIDE_SSH_AGENT", "0"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("exclude each other"), "{stderr}");
}

/// The flags that point `swiftide-ssh-mcp` at `tb`.
fn binary_args(tb: &Testbed, root: &Path) -> Vec<String> {
    vec![
        "--host".into(),
        tb.host(),
        "--port".into(),
        tb.port().to_string(),
        "--user".into(),
        tb.user().to_owned(),
        "--identity".into(),
        tb.private_key_path().display().to_string(),
        "--known-hosts".into(),
        tb.known_hosts_path().display().to_string(),
        "--root".into(),
        root.display().to_string(),
    ]
}

/// Every setting from `SWIFTIDE_SSH_*` variables (the Python test below passes flags); the
/// root holding proves `SWIFTIDE_SSH_ROOT` reached the server.
#[tokio::test]
async fn the_binary_serves_rmcp_over_stdio() {
    let tb = testbed();
    let dir = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let binary = || {
        let mut command = tokio::process::Command::new(BINARY);
        command
            .envs([
                ("SWIFTIDE_SSH_HOST", tb.host()),
                ("SWIFTIDE_SSH_PORT", tb.port().to_string()),
                ("SWIFTIDE_SSH_USER", tb.user().to_owned()),
                (
                    "SWIFTIDE_SSH_IDENTITY",
                    tb.private_key_path().display().to_string(),
                ),
                (
                    "SWIFTIDE_SSH_KNOWN_HOSTS",
                    tb.known_hosts_path().display().to_string(),
                ),
                ("SWIFTIDE_SSH_ROOT", root.display().to_string()),
            ])
            .stderr(Stdio::inherit());
        command
    };
    let started = Instant::now();
    let client = Recorder::default()
        .serve(TokioChildProcess::new(binary()).unwrap())
        .await
        .expect("handshake with the binary");
    assert_eq!(
        client
            .peer_info()
            .unwrap()
            .server_info
            .as_ref()
            .unwrap()
            .name,
        "swiftide-ssh-mcp"
    );
    assert_eq!(client.list_all_tools().await.unwrap().len(), 22);
    let wrote = call(
        &client,
        "write_file",
        json!({"path": "f.txt", "content": "abc"}),
    )
    .await;
    assert!(!is_error(&wrote), "{wrote:?}");
    let ran = call(&client, "run_command", json!({"command": "cat f.txt"})).await;
    assert_eq!(text(&ran), "abc\n[exit code 0]");
    let outside = call(&client, "read_file", json!({"path": "/etc/passwd"})).await;
    assert!(is_error(&outside) && text(&outside).contains("outside the root"));
    eprintln!("binary over stdio: {:.2?}", started.elapsed());

    // Dropping the call future sends notifications/cancelled; the group dies.
    let t = token();
    let pattern = format!("sleep 300.{t}");
    let call_future = client.call_tool(
        CallToolRequestParams::new("run_command")
            .with_arguments(args(json!({"command": format!("{pattern}; true")}))),
    );
    let outcome = tokio::time::timeout(Duration::from_millis(1500), call_future).await;
    assert!(outcome.is_err(), "the command should still be running");
    assert_eq!(remote_processes(&format!("^{pattern}")).len(), 1);
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "survivors after cancellation: {left:?}");

    // A job is not a call: it outlives the server process.
    let job = format!("stdio-job-{t}");
    let started_job = call(
        &client,
        "start_job",
        json!({"command": "sleep 1; echo survived", "id": job}),
    )
    .await;
    assert!(!is_error(&started_job), "{started_job:?}");

    // Closing the client ends the server process, and a command still running with it.
    let pattern = format!("sleep 301.{t}");
    let call_future = client.call_tool(
        CallToolRequestParams::new("run_command")
            .with_arguments(args(json!({"command": format!("{pattern}; true")}))),
    );
    let _ = tokio::time::timeout(Duration::from_millis(1500), call_future).await;
    client.cancel().await.unwrap();
    let left = wait_until_gone(&pattern, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "survivors after the client left: {left:?}");

    // A new server process finds the job by id, waits for it and reads its output.
    let client = Recorder::default()
        .serve(TokioChildProcess::new(binary()).unwrap())
        .await
        .expect("handshake with the second binary");
    let status = call(&client, "job_status", json!({"id": job, "wait_secs": 10})).await;
    assert!(
        text(&status).starts_with(&format!("job {job}: exited with code 0")),
        "{status:?}"
    );
    let output = text(&call(&client, "job_output", json!({"id": job})).await);
    assert!(output.contains("--- stdout ---\nsurvived\n"), "{output}");
    assert!(output.ends_with("cursor: stdout=9,stderr=0"), "{output}");
    client.cancel().await.unwrap();
    remove_job(&tb, &job).await;
}

/// Starts the binary for `tb` with `flags` and `envs` (stderr captured, every log line on)
/// and returns the client and the server's stderr.
async fn serve_binary(
    tb: &Testbed,
    root: &Path,
    flags: &[&str],
    envs: &[(&str, &str)],
) -> (mcp_client::Client, tokio::process::ChildStderr) {
    let mut command = tokio::process::Command::new(BINARY);
    command
        .args(binary_args(tb, root))
        .args(["--log-level", "trace"])
        .args(flags)
        .envs(envs.iter().copied());
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Recorder::default()
        .serve(transport)
        .await
        .expect("handshake with the binary");
    (client, stderr.unwrap())
}

/// Closes the client and returns what the server wrote on stderr.
async fn close(client: mcp_client::Client, mut stderr: tokio::process::ChildStderr) -> String {
    client.cancel().await.unwrap();
    let mut text = String::new();
    let read = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text);
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the server did not exit")
        .unwrap();
    text
}

/// A directory only root may enter, for the server's --root.
fn root_only_dir(tb: &Testbed) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

/// `--become`, chosen by the operator: every tool (commands, the file tools under a --root
/// that only root may enter) runs as root, and no tool's schema offers a say in it.
#[tokio::test]
async fn become_runs_every_tool_as_root_on_a_nopasswd_host() {
    let tb = Testbed::builder()
        .escalation(Escalation::SudoNoPassword)
        .start()
        .unwrap_or_else(|e| panic!("cannot start the sudo testbed: {e}"));
    let (_dir, root) = root_only_dir(&tb);
    let (client, stderr) = serve_binary(&tb, &root, &["--become"], &[]).await;
    let tools = client.list_all_tools().await.unwrap();
    for tool in &tools {
        let schema = serde_json::to_string(&tool.input_schema).unwrap();
        for word in ["become", "sudo", "password"] {
            assert!(!schema.contains(word), "{}: {schema}", tool.name);
        }
    }
    let ran = call(&client, "run_command", json!({"command": "id -u"})).await;
    assert_eq!(text(&ran), "0\n[exit code 0]", "{ran:?}");
    let wrote = call(
        &client,
        "write_file",
        json!({"path": "owned.txt", "content": "root's"}),
    )
    .await;
    assert!(!is_error(&wrote), "{wrote:?}");
    let owner = call(
        &client,
        "run_command",
        json!({"command": "stat -c %u owned.txt"}),
    )
    .await;
    assert_eq!(text(&owner), "0\n[exit code 0]", "{owner:?}");
    let read = call(&client, "read_file", json!({"path": "owned.txt"})).await;
    assert_eq!(text(&read), "root's", "{read:?}");
    let log = close(client, stderr).await;
    assert!(log.contains("privilege escalation"), "{log}");

    // Without --become the same login account may not even enter the root.
    let (client, stderr) = serve_binary(&tb, &root, &[], &[]).await;
    let ran = call(&client, "run_command", json!({"command": "id -u"})).await;
    assert_ne!(text(&ran), "0\n[exit code 0]", "{ran:?}");
    let read = call(&client, "read_file", json!({"path": "owned.txt"})).await;
    assert!(is_error(&read), "{read:?}");
    close(client, stderr).await;
}

/// Passwords from `--become-password-env` and `--become-password-file` (settings from
/// variables, as MCP hosts pass them): root; a wrong one is a tool error saying so. The
/// password shows in no result and no log line, even at `trace`.
#[tokio::test]
async fn become_passwords_from_a_variable_or_a_file_and_a_wrong_one() {
    use std::os::unix::fs::PermissionsExt;
    let tb = Testbed::builder()
        .escalation(Escalation::SudoPassword)
        .start()
        .unwrap_or_else(|e| panic!("cannot start the sudo testbed: {e}"));
    let (_dir, root) = root_only_dir(&tb);
    let wrong = "not-the-password-0417";
    let (client, stderr) = serve_binary(
        &tb,
        &root,
        &[],
        &[
            ("SWIFTIDE_SSH_BECOME", "true"),
            ("SWIFTIDE_SSH_BECOME_PASSWORD_ENV", "OPS_BECOME_PASSWORD"),
            ("OPS_BECOME_PASSWORD", BECOME_PASSWORD),
        ],
    )
    .await;
    let ran = call(&client, "run_command", json!({"command": "id -u"})).await;
    assert_eq!(text(&ran), "0\n[exit code 0]", "{ran:?}");
    let log = close(client, stderr).await;
    assert!(!log.contains(BECOME_PASSWORD), "{log}");

    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("become");
    std::fs::write(&file, format!("{wrong}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file_arg = file.to_str().unwrap();
    let (client, stderr) = serve_binary(
        &tb,
        &root,
        &["--become-user", "root", "--become-password-file", file_arg],
        &[],
    )
    .await;
    let ran = call(&client, "run_command", json!({"command": "id -u"})).await;
    assert!(is_error(&ran), "{ran:?}");
    assert!(text(&ran).contains("incorrect password"), "{ran:?}");
    assert!(!text(&ran).contains(wrong), "{ran:?}");
    let log = close(client, stderr).await;
    assert!(!log.contains(wrong), "{log}");

    std::fs::write(&file, format!("{BECOME_PASSWORD}\n")).unwrap();
    let (client, stderr) = serve_binary(
        &tb,
        &root,
        &["--become", "--become-password-file", file_arg],
        &[],
    )
    .await;
    let ran = call(&client, "run_command", json!({"command": "id -u"})).await;
    assert_eq!(text(&ran), "0\n[exit code 0]", "{ran:?}");
    let log = close(client, stderr).await;
    assert!(!log.contains(BECOME_PASSWORD), "{log}");

    // A file others may read is refused at the start (exit 1, as a failure to serve).
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args: Vec<String> = binary_args(&tb, &root);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(
        &[&args[..], &["--become", "--become-password-file", file_arg]].concat(),
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("too open"), "{stderr}");
    assert!(!stderr.contains(BECOME_PASSWORD), "{stderr}");
}

/// Removes a finished job the test started (jobs live in the account's state directory).
async fn remove_job(tb: &Testbed, id: &str) {
    let executor = swiftide_ssh_executor::SshExecutor::builder()
        .host(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file(tb.private_key_path())
        .known_hosts_file(tb.known_hosts_path())
        .build()
        .await
        .unwrap();
    executor.job(id).await.unwrap().remove().await.unwrap();
}

const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

def flag(result, snake, camel):
    return getattr(result, snake, None) if hasattr(result, snake) else getattr(result, camel, None)

def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out = {"server": init.server_info.name if hasattr(init, "server_info") else init.serverInfo.name}
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            progress = []
            async def on_progress(value, total, message):
                progress.append(message)
            r = await session.call_tool("run_command", {"command": "echo one; sleep 0.3; echo two"},
                                        progress_callback=on_progress)
            out["run"] = [text(r), flag(r, "is_error", "isError")]
            out["progress"] = progress
            r = await session.call_tool("write_file", {"path": "py.txt", "content": "from python\n"})
            out["write"] = [text(r), flag(r, "is_error", "isError")]
            r = await session.call_tool("read_file", {"path": "py.txt"})
            out["read"] = [text(r), flag(r, "is_error", "isError")]
            r = await session.call_tool("run_command", {"command": "exit 7"})
            out["fail"] = [text(r), flag(r, "is_error", "isError")]
            print(json.dumps(out))

asyncio.run(main())
"#;

/// A venv with the Python `mcp` SDK under `target/`, created once; `Err` says why not.
fn python_mcp_venv() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-python-venv");
    swiftide_ssh_testbed::python_venv(&venv, &["mcp"], "import mcp")
}

#[tokio::test]
async fn the_python_mcp_sdk_drives_the_binary() {
    let setup = Instant::now();
    let python = match python_mcp_venv() {
        Ok(python) => python,
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("cannot set up the Python mcp SDK (CI is set, so this fails): {reason}")
        }
        Err(reason) => {
            eprintln!("SKIPPED the Python MCP client test: {reason}");
            return;
        }
    };
    let version = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output()
        .unwrap();
    eprintln!(
        "python mcp {} ready in {:.2?}",
        String::from_utf8_lossy(&version.stdout).trim(),
        setup.elapsed()
    );
    let tb = testbed();
    let dir = tempfile::tempdir_in(tb.scratch_dir()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let script = dir.path().join("client.py");
    std::fs::write(&script, PYTHON_CLIENT).unwrap();
    let started = Instant::now();
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(BINARY)
        .args(binary_args(&tb, &root))
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the Python client hung")
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(result["server"], "swiftide-ssh-mcp");
    assert_eq!(result["tools"].as_array().unwrap().len(), 22, "{result}");
    assert_eq!(result["run"], json!(["one\ntwo\n[exit code 0]", false]));
    assert_eq!(result["progress"], json!(["one\n", "two\n"]));
    assert_eq!(result["write"][1], false);
    assert_eq!(result["read"], json!(["from python\n", false]));
    assert_eq!(result["fail"], json!(["[exit code 7]", true]));
    assert_eq!(
        std::fs::read_to_string(root.join("py.txt")).unwrap(),
        "from python\n"
    );
    eprintln!("python client session: {:.2?}", started.elapsed());
}
