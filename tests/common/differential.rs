//! The differential table: one list of commands run through swiftide's `LocalExecutor` and
//! through `SshExecutor` on this machine (the testbed's server runs here, so both see the same
//! files), compared per stream. Used by `conformance.rs` (root, bash) and `compat.rs` (every
//! login shell and server).

use std::{collections::HashMap, path::Path, time::Duration};

use swiftide_agents::tools::local_executor::LocalExecutor;
use swiftide_core::{Command, CommandError, CommandOutput, ToolExecutor};
use swiftide_ssh_executor::SshExecutorBuilder;

pub fn stdout(out: &CommandOutput) -> Vec<u8> {
    out.stdout().flat_map(|b| b.iter().copied()).collect()
}

pub fn stderr(out: &CommandOutput) -> Vec<u8> {
    out.stderr().flat_map(|b| b.iter().copied()).collect()
}

#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub variant: &'static str,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub timeout: Option<Duration>,
}

pub fn outcome(result: Result<CommandOutput, CommandError>) -> Outcome {
    let (variant, output, timeout) = match result {
        Ok(out) => ("Ok", out, None),
        Err(CommandError::NonZeroExit(out)) => ("NonZeroExit", out, None),
        Err(CommandError::TimedOut { timeout, output }) => ("TimedOut", output, Some(timeout)),
        Err(CommandError::ExecutorError(e)) => ("ExecutorError", e.to_string().into(), None),
    };
    Outcome {
        variant,
        stdout: stdout(&output),
        stderr: stderr(&output),
        timeout,
    }
}

/// What must agree between the two executors.
#[derive(Clone, Copy, Debug)]
pub enum Compare {
    /// Variant, stdout and stderr bytes, timeout.
    Exact,
    /// Variant and non-emptiness only: the message text is an expected difference (spawn
    /// errors, `cd` errors, sftp wording).
    VariantOnly,
}

pub fn cases(dir: &Path) -> Vec<(&'static str, Command, Compare)> {
    use Compare::*;
    let d = dir.display();
    vec![
        ("echo", Command::shell("echo hello"), Exact),
        (
            "printf without newline",
            Command::shell("printf abc"),
            Exact,
        ),
        (
            "stderr-only failure",
            Command::shell("printf boom >&2; exit 1"),
            Exact,
        ),
        ("exit code 42", Command::shell("echo out; exit 42"), Exact),
        (
            "success with stderr",
            Command::shell("echo warn >&2"),
            Exact,
        ),
        (
            "death by SIGKILL keeps output",
            Command::shell("echo a; kill -KILL $$"),
            Exact,
        ),
        ("death by SIGTERM", Command::shell("kill -TERM $$"), Exact),
        (
            "single and double quotes",
            Command::shell(r#"echo "it's" 'a "b"'"#),
            Exact,
        ),
        (
            "command substitution",
            Command::shell("echo $(echo sub) `echo tick`"),
            Exact,
        ),
        ("unicode", Command::shell("printf 'ünïcødé ✓ 日本'"), Exact),
        (
            "binary bytes",
            Command::shell(r"printf '\377\376\000\001'"),
            Exact,
        ),
        (
            "300 KB of output",
            Command::shell("head -c 300000 /dev/zero | tr '\\0' a"),
            Exact,
        ),
        (
            "100 KB of stderr",
            Command::shell("head -c 100000 /dev/zero >&2"),
            Exact,
        ),
        (
            "newlines and CR",
            Command::shell(r"printf 'a\n\nb\r\n'"),
            Exact,
        ),
        (
            "multi-line script",
            Command::shell("if true; then\n  echo yes\nfi\nfor i in 1 2; do echo $i; done"),
            Exact,
        ),
        ("stdin is at EOF", Command::shell("cat"), Exact),
        ("read gets EOF", Command::shell("read x"), Exact),
        ("dollar zero is sh", Command::shell("echo $0"), Exact),
        ("no errexit", Command::shell("false; echo after"), Exact),
        ("no pipefail", Command::shell("false | true"), Exact),
        ("bashism fails on sh", Command::shell("[[ 1 == 1 ]]"), Exact),
        (
            "shebang sh -e",
            Command::shell("#!/bin/sh -e\nprintf before\nfalse\nprintf after"),
            Exact,
        ),
        (
            "shebang python",
            Command::shell("#!/usr/bin/env python3\nprint('py', 40 + 2)"),
            Exact,
        ),
        (
            "shebang env -S",
            Command::shell("#!/usr/bin/env -S sh -e\necho s; false; echo t"),
            Exact,
        ),
        (
            "shebang bash",
            Command::shell("#!/bin/bash\necho $((6*7)) ${BASH_VERSION:+bash}"),
            Exact,
        ),
        (
            "leading space is not a shebang",
            Command::shell(" #!/bin/bash\necho plain"),
            Exact,
        ),
        (
            "missing interpreter",
            Command::shell("#!/missing/interpreter\necho"),
            VariantOnly,
        ),
        ("env set", Command::shell("printenv DIFF_SET"), Exact),
        (
            "env removed",
            Command::shell("printenv DIFF_REMOVED; echo $?"),
            Exact,
        ),
        (
            "env value with quotes",
            Command::shell("printf %s \"$DIFF_QUOTED\""),
            Exact,
        ),
        (
            "relative current_dir",
            Command::shell("pwd").with_current_dir("nested"),
            Exact,
        ),
        (
            "absolute current_dir",
            Command::shell("pwd").with_current_dir(dir.join("nested")),
            Exact,
        ),
        (
            "current_dir through a symbolic link",
            Command::shell("pwd; echo \"$PWD\"; sh -c 'echo \"$PWD\"'").with_current_dir("linked"),
            Exact,
        ),
        (
            "absolute current_dir through a symbolic link",
            Command::shell("pwd; echo \"$PWD\"").with_current_dir(dir.join("linked")),
            Exact,
        ),
        (
            "dot-dot after a symbolic link",
            Command::shell("pwd").with_current_dir("linked/.."),
            Exact,
        ),
        (
            "script in a directory through a symbolic link",
            Command::shell("#!/bin/sh\npwd; echo \"$PWD\"").with_current_dir("linked"),
            Exact,
        ),
        (
            "the shell leads its process group",
            Command::shell(LEADS_ITS_GROUP),
            Exact,
        ),
        (
            "a script leads its process group",
            Command::shell(format!("#!/bin/sh\n{LEADS_ITS_GROUP}")),
            Exact,
        ),
        (
            "a bash script leads its process group",
            Command::shell(format!("#!/bin/bash\n{LEADS_ITS_GROUP}")),
            Exact,
        ),
        (
            "trap kills its own group on exit",
            Command::shell("trap 'kill -- -$$' EXIT; sleep 5 & echo started")
                .with_timeout(Duration::from_secs(4)),
            Exact,
        ),
        (
            "missing current_dir",
            Command::shell("pwd").with_current_dir("missing-dir"),
            VariantOnly,
        ),
        (
            "timeout keeps partial output",
            Command::shell("printf one; printf two >&2; sleep 2")
                .with_timeout(Duration::from_millis(300)),
            Exact,
        ),
        (
            "timeout with no output",
            Command::shell("sleep 2").with_timeout(Duration::from_millis(200)),
            Exact,
        ),
        (
            "redirected background job",
            Command::shell("sleep 3 >/dev/null 2>&1 &").with_timeout(Duration::from_secs(2)),
            Exact,
        ),
        (
            "background job holding stdout",
            Command::shell("sleep 0.5 & echo started"),
            Exact,
        ),
        (
            "read existing file",
            Command::read_file(dir.join("seed.txt")),
            Exact,
        ),
        ("read relative file", Command::read_file("seed.txt"), Exact),
        (
            "read invalid utf8",
            Command::read_file(dir.join("bytes.bin")),
            Exact,
        ),
        (
            "read missing file",
            Command::read_file("missing.txt"),
            VariantOnly,
        ),
        (
            "read a directory",
            Command::read_file("nested"),
            VariantOnly,
        ),
        (
            "background writer after the leader exits",
            Command::shell("(sleep 0.3; echo late) & echo early"),
            Exact,
        ),
        (
            "background writer on stderr",
            Command::shell("(sleep 0.3; echo late >&2) & echo early"),
            Exact,
        ),
        (
            "backslash pairs and quotes",
            Command::shell(r#"printf '%s|' 'a\\b' "c\\d" 'it'\''s' "\"" '\'; echo"#),
            Exact,
        ),
        (
            "quoted heredoc keeps $HOME",
            Command::shell("cat <<'EOF'\n$HOME `id` \\n !! \\\\\nEOF"),
            Exact,
        ),
        (
            "history characters",
            Command::shell("echo '!!' \"!x\" !; echo a!b"),
            Exact,
        ),
        (
            "92 KB heredoc full of single quotes",
            Command::shell(format!(
                "wc -c <<'EOF'\n{}\nEOF",
                "it's 'quoted' ".repeat(92 * 1024 / 14)
            )),
            Exact,
        ),
        (
            "cat what the shell wrote",
            Command::shell(format!("printf 'x y' > {d}/w.txt; cat {d}/w.txt")),
            Exact,
        ),
    ]
}

/// Prints `leader` when the shell's `$$` is its process group's id, as when LocalExecutor
/// starts it.
/// (The fifth field of `/proc/<pid>/stat` is the group; `ps -p` is missing from BusyBox.)
pub const LEADS_ITS_GROUP: &str = "read -r _ _ _ _ g _ </proc/$$/stat; \
     [ \"$$\" = \"$g\" ] && echo leader || echo \"not the leader: $$ in $g\"";

pub fn seed(dir: &Path) {
    std::fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    // `linked` -> `nested/deeper`: its `..` is `nested` physically, the seed dir logically.
    let link = dir.join("linked");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("nested/deeper", &link).unwrap();
    }
    std::fs::write(dir.join("seed.txt"), "seed content\n").unwrap();
    std::fs::write(dir.join("bytes.bin"), b"ok\xff\xfe").unwrap();
}

/// The environment settings both executors get in [`compare`].
pub const ENVS: [(&str, &str); 2] = [("DIFF_SET", "set"), ("DIFF_QUOTED", "it's \"q\"\n$HOME")];

/// [`ENVS`] without a newline in a value. A newline keeps every command in the universal
/// exec form; with these, warm commands on a POSIX login shell take the direct form.
pub const ONE_LINE_ENVS: [(&str, &str); 2] = [
    ("DIFF_SET", "set"),
    ("DIFF_QUOTED", "it's \"q\" \\ $HOME !x"),
];

/// A LocalExecutor and an SSH builder for `dir`, with the same environment plan.
pub fn executors(dir: &Path, remote: SshExecutorBuilder) -> (LocalExecutor, SshExecutorBuilder) {
    executors_with(dir, remote, &ENVS)
}

/// [`executors`] with the environment `envs` (set on both, plus `DIFF_REMOVED` removed).
pub fn executors_with(
    dir: &Path,
    remote: SshExecutorBuilder,
    envs: &[(&str, &str)],
) -> (LocalExecutor, SshExecutorBuilder) {
    let local = LocalExecutor::builder()
        .workdir(dir)
        .env_remove(vec!["DIFF_REMOVED".to_owned()])
        .envs(
            envs.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
        )
        .build()
        .unwrap();
    let remote = remote
        .workdir(dir)
        .env_remove(["DIFF_REMOVED"])
        .envs(envs.iter().copied());
    (local, remote)
}

/// Runs every case through both executors (the remote one first, so that files it creates
/// as a non-root account stay writable for the local root one) and returns the mismatches.
pub async fn compare(
    local: &dyn ToolExecutor,
    remote: &dyn ToolExecutor,
    cases: &[(&'static str, Command, Compare)],
) -> Vec<String> {
    let mut mismatches = Vec::new();
    for (name, cmd, compare) in cases {
        let r = outcome(remote.exec_cmd(cmd).await);
        let l = outcome(local.exec_cmd(cmd).await);
        let same = match compare {
            Compare::Exact => l == r,
            Compare::VariantOnly => {
                l.variant == r.variant
                    && (l.stdout.is_empty() && l.stderr.is_empty())
                        == (r.stdout.is_empty() && r.stderr.is_empty())
            }
        };
        if !same {
            mismatches.push(format!("{name}:\n  local  {l:?}\n  remote {r:?}"));
        }
    }
    mismatches
}

/// A case whose result is known to differ on a particular host (e.g. a BusyBox-only one
/// without python or bash), with why and what the remote side must give instead. Such a
/// case is still run and checked: the remote outcome must satisfy `remote`, and the local
/// one must not (an expected difference that disappears is reported too).
pub struct ExpectedDifference {
    pub case: &'static str,
    pub why: &'static str,
    pub remote: fn(&Outcome) -> bool,
}

/// Like [`compare`], but cases listed in `expected` must differ as described there.
/// Returns the mismatches and, for the log, one line per expected difference seen.
pub async fn compare_expecting(
    local: &dyn ToolExecutor,
    remote: &dyn ToolExecutor,
    cases: &[(&'static str, Command, Compare)],
    expected: &[ExpectedDifference],
) -> (Vec<String>, Vec<String>) {
    let mut mismatches = Vec::new();
    let mut seen = Vec::new();
    for name in expected.iter().map(|e| e.case) {
        if !cases.iter().any(|(case, ..)| *case == name) {
            mismatches.push(format!(
                "{name}: an expected difference for a case that does not exist"
            ));
        }
    }
    for (name, cmd, compare) in cases {
        let r = outcome(remote.exec_cmd(cmd).await);
        let l = outcome(local.exec_cmd(cmd).await);
        if let Some(expected) = expected.iter().find(|e| e.case == *name) {
            if (expected.remote)(&r) && !(expected.remote)(&l) {
                let text =
                    String::from_utf8_lossy(&[r.stdout.as_slice(), r.stderr.as_slice()].concat())
                        .into_owned();
                // The end of it: a shell's error message may start with a long `$0`.
                let tail: String = text
                    .chars()
                    .rev()
                    .take(80)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                seen.push(format!(
                    "{name}: expected difference ({}): remote {} ...{tail:?}",
                    expected.why, r.variant,
                ));
            } else {
                mismatches.push(format!(
                    "{name} (expected to differ: {}):\n  local  {l:?}\n  remote {r:?}",
                    expected.why
                ));
            }
            continue;
        }
        let same = match compare {
            Compare::Exact => l == r,
            Compare::VariantOnly => {
                l.variant == r.variant
                    && (l.stdout.is_empty() && l.stderr.is_empty())
                        == (r.stdout.is_empty() && r.stderr.is_empty())
            }
        };
        if !same {
            mismatches.push(format!("{name}:\n  local  {l:?}\n  remote {r:?}"));
        }
    }
    (mismatches, seen)
}
