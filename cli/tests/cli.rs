//! The `swiftide-ssh` binary end to end, against several real sshd testbeds named by a
//! generated ssh config (`web1`, `web2`, ... and `dead`, a port nobody listens on): node
//! sets and exclusions, live and folded output, JSON records, failed-hosts files read back,
//! batches with a threshold that trips on an unreachable host, shards merged by `fold`,
//! push and pull of a tree with odd names and modes, and jobs started and collected by id
//! (and pruned past their retention by the start itself, before the program exits), and
//! privilege escalation (`--become`, `--become-user`, `--become-flags`, passwords from a
//! file, the environment and the terminal) against testbeds whose login accounts have real
//! sudo rules.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant, SystemTime},
};

use serde_json::Value;
use swiftide_ssh_testbed::{BECOME_PASSWORD, BECOME_TARGET_USER, Escalation, Testbed};

const BINARY: &str = env!("CARGO_BIN_EXE_swiftide-ssh");

fn testbed() -> Testbed {
    Testbed::start().unwrap_or_else(|e| panic!("cannot start the sshd testbed: {e}"))
}

fn unprivileged_testbed() -> Testbed {
    Testbed::builder()
        .unprivileged_user()
        .start()
        .unwrap_or_else(|e| panic!("cannot start the unprivileged sshd testbed: {e}"))
}

/// A port nobody listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Hosts named in an ssh config of their own.
struct Hosts {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Hosts {
    /// `names[i]` is testbed `beds[i]`; `dead` (when asked) is an address that refuses.
    fn new(named: &[(&str, &Testbed)], dead: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for (name, bed) in named {
            text.push_str(&format!(
                "Host {name}\n  HostName {}\n  Port {}\n  User {}\n  IdentityFile {}\n  \
                 IdentitiesOnly yes\n  UserKnownHostsFile {}\n",
                bed.host(),
                bed.port(),
                bed.user(),
                bed.private_key_path().display(),
                bed.known_hosts_path().display()
            ));
        }
        if dead {
            let (_, bed) = named[0];
            text.push_str(&format!(
                "Host dead\n  HostName 127.0.0.1\n  Port {}\n  User nobody\n  IdentityFile {}\n  \
                 IdentitiesOnly yes\n  UserKnownHostsFile {}\n",
                dead_port(),
                bed.private_key_path().display(),
                bed.known_hosts_path().display()
            ));
        }
        let config = dir.path().join("ssh_config");
        std::fs::write(&config, text).unwrap();
        Hosts { dir, config }
    }

    /// Runs the binary with `args` after the subcommand's words and `-F config`.
    fn run(&self, words: &[&str], args: &[&str]) -> Output {
        self.run_env(words, args, &[])
    }

    /// [`run`](Self::run) with environment variables.
    fn run_env(&self, words: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Output {
        run_env(&self.args(words, args), self.dir.path(), envs)
    }

    /// The subcommand's words, `-F config -t 5`, then `args`.
    fn args(&self, words: &[&str], args: &[&str]) -> Vec<String> {
        let config = self.config.to_str().unwrap();
        let mut all: Vec<&str> = words.to_vec();
        all.extend(["-F", config, "-t", "5"]);
        all.extend(args);
        all.into_iter().map(str::to_owned).collect()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Runs the binary (stdin closed, HOME and the agent out of the way) and returns its output.
fn run(args: &[&str], home: &Path) -> Output {
    run_env(args, home, &[])
}

/// [`run`] with environment variables (and without an inherited become password).
fn run_env<S: AsRef<std::ffi::OsStr>>(args: &[S], home: &Path, envs: &[(&str, &str)]) -> Output {
    Command::new(BINARY)
        .args(args)
        .env("HOME", home)
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("SWIFTIDE_SSH_BECOME_PASSWORD")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn records(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn status_of<'a>(records: &'a [Value], host: &str) -> &'a str {
    records
        .iter()
        .find(|r| r["host"] == host)
        .and_then(|r| r["status"].as_str())
        .unwrap_or_else(|| panic!("no record for {host}: {records:?}"))
}

#[test]
fn usage_errors_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let help = run(&["--help"], home.path());
    assert!(help.status.success());
    let help = text(&help.stdout);
    for word in [
        "run",
        "push",
        "pull",
        "job",
        "forward",
        "fold",
        "Exit codes",
    ] {
        assert!(help.contains(word), "{help}");
    }
    let run_help = text(&run(&["run", "--help"], home.path()).stdout);
    for flag in [
        "-w <NODESET>",
        "-x <NODESET>",
        "--inventory <SOURCE>",
        "--limit <PATTERN>",
        "--list-hosts",
        "--group <PATTERN>",
        "--hosts-file <FILE>",
        "--shard <K/N>",
        "--fanout <N>",
        "--batch <SIZES>",
        "--max-fail-percentage <P>",
        "--fail-fast",
        "--retries <N>",
        "--fold",
        "--json",
        "--failed-hosts <FILE>",
        "--accept-new",
        "--become ",
        "--become-user <USER>",
        "--become-method <METHOD>",
        "--become-flags <FLAGS>",
        "-K, --ask-become-pass",
        "--become-password-file <FILE>",
        "SWIFTIDE_SSH_BECOME_PASSWORD",
    ] {
        assert!(
            run_help.contains(flag),
            "run --help lacks {flag}:\n{run_help}"
        );
    }
    // Every subcommand that runs on hosts escalates; fold does not.
    for words in [
        &["push"][..],
        &["pull"],
        &["job", "start"],
        &["job", "status"],
        &["job", "output"],
        &["job", "kill"],
    ] {
        let help = text(&run(&[words, &["--help"]].concat(), home.path()).stdout);
        for flag in ["--become ", "--become-user <USER>", "-K, --ask-become-pass"] {
            assert!(
                help.contains(flag),
                "{words:?} --help lacks {flag}:\n{help}"
            );
        }
    }
    let fold_help = text(&run(&["fold", "--help"], home.path()).stdout);
    assert!(!fold_help.contains("--become"), "{fold_help}");

    // No hosts, a bad node set, a bad shard, -g without an inventory, a become method or
    // user that does not exist, a password without --become.
    for args in [
        &["run", "true"][..],
        &["run", "-w", "web[1-", "true"],
        &["run", "-w", "a", "--shard", "2/2", "true"],
        &["run", "-g", "web", "true"],
        &["run", "-w", "a", "--become-method", "pkexec", "true"],
        &["run", "-w", "a", "--become-user", "a;b", "true"],
        &["run", "-w", "a", "-l", "u", "-K", "true"],
    ] {
        let out = run(args, home.path());
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn run_live_folded_json_failed_hosts_batches_and_shards() {
    let beds = [testbed(), testbed(), testbed()];
    let hosts = Hosts::new(
        &[("web1", &beds[0]), ("web2", &beds[1]), ("web3", &beds[2])],
        true,
    );
    let echo = ["echo", "hi", "$SWIFTIDE_SSH_TESTBED_ID"];

    // Live, pdsh style: every line prefixed with its host; the dead host on stderr; exit 4.
    let out = hosts.run(
        &["run"],
        &[&["-w", "web[1-3],dead"][..], &echo[..]].concat(),
    );
    let stdout = text(&out.stdout);
    for (name, bed) in ["web1", "web2", "web3"].iter().zip(&beds) {
        assert!(
            stdout.contains(&format!("{name}: hi {}\n", bed.id())),
            "{stdout}"
        );
    }
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("dead: unreachable"), "{stderr}");
    assert_eq!(out.status.code(), Some(4), "{stderr}");

    // Exclusions, in the node set and with -x.
    let out = hosts.run(
        &["run"],
        &["-w", "web[1-3]!web2", "-x", "web3", "echo", "x"],
    );
    assert_eq!(text(&out.stdout), "web1: x\n");
    assert_eq!(out.status.code(), Some(0));

    // Folded, clush -b style: identical output and status under one node set.
    let out = hosts.run(
        &["run"],
        &["-w", "web[1-3]", "-b", "echo", "same;", "exit", "0"],
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\nweb[1-3] (3) ok\n"), "{stdout}");
    assert!(stdout.contains("\nsame\n"), "{stdout}");
    assert_eq!(out.status.code(), Some(0));
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web[1-3]",
            "-b",
            "[ \"$SWIFTIDE_SSH_TESTBED_ID\" = ",
            beds[1].id(),
            " ] && exit 3; echo fine",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\nweb[1,3] (2) ok\n"), "{stdout}");
    assert!(stdout.contains("\nweb2 (1) exit 3\n"), "{stdout}");
    assert_eq!(out.status.code(), Some(1));
    // -S: the largest remote exit code.
    let out = hosts.run(&["run"], &["-w", "web[1-2]", "-S", "-b", "exit", "7"]);
    assert_eq!(out.status.code(), Some(7));

    // JSON records and the failed-hosts file; the file read back selects the failed host.
    let failed = hosts.path("failed");
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web[1-3],dead",
            "--json",
            "--failed-hosts",
            failed.to_str().unwrap(),
            "echo",
            "j",
        ],
    );
    let all = records(&out);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.iter().all(|r| r["schema_version"] == 1));
    assert_eq!(status_of(&all, "web2"), "ok");
    assert_eq!(status_of(&all, "dead"), "unreachable");
    let web1 = all.iter().find(|r| r["host"] == "web1").unwrap();
    assert_eq!(web1["stdout"], "j\n");
    assert_eq!(web1["exit_code"], 0);
    let listed = std::fs::read_to_string(&failed).unwrap();
    assert!(
        listed.lines().any(|l| l == "dead") && !listed.contains("web"),
        "{listed}"
    );
    let out = hosts.run(
        &["run"],
        &[
            "--hosts-file",
            failed.to_str().unwrap(),
            "--json",
            "--retries",
            "1",
            "--retry-backoff",
            "0.1",
            "true",
        ],
    );
    let again = records(&out);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(
        (again[0]["host"].as_str(), again[0]["attempts"].as_u64()),
        (Some("dead"), Some(2))
    );
    assert_eq!(out.status.code(), Some(4));
    // pdsh's `-w ^FILE` reads the same file.
    let caret = format!("^{}", failed.display());
    let out = hosts.run(&["run"], &["-w", &caret, "--json", "true"]);
    assert_eq!(records(&out).len(), 1);
    assert_eq!(status_of(&records(&out), "dead"), "unreachable");

    // Batches with a threshold: the unreachable host of the first batch stops the rollout,
    // the others are reported as skipped, not missing; exit 6.
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "dead,web[1-3]",
            "--batch",
            "1,50%",
            "--max-fail-percentage",
            "0",
            "--json",
            "true",
        ],
    );
    let rolled = records(&out);
    assert_eq!(rolled.len(), 4, "{rolled:?}");
    assert_eq!(status_of(&rolled, "dead"), "unreachable");
    for name in ["web1", "web2", "web3"] {
        assert_eq!(status_of(&rolled, name), "skipped");
    }
    assert_eq!(out.status.code(), Some(6));
    // Fail-fast with a fanout of 1: the first failure keeps later hosts from starting.
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web1,dead,web[2-3]",
            "-f",
            "1",
            "-k",
            "--json",
            "true",
        ],
    );
    let fast = records(&out);
    assert_eq!(status_of(&fast, "web1"), "ok");
    assert_eq!(status_of(&fast, "web3"), "skipped");

    // Two shards cover every host once; fold merges their records into one report.
    let mut shard_files = Vec::new();
    let mut covered = Vec::new();
    for k in 0..2 {
        let shard = format!("{k}/2");
        let out = hosts.run(
            &["run"],
            &["-w", "web[1-3]", "--shard", &shard, "--json", "echo", "s"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        covered.extend(
            records(&out)
                .iter()
                .map(|r| r["host"].as_str().unwrap().to_owned()),
        );
        let file = hosts.path(&format!("shard-{k}.jsonl"));
        std::fs::write(&file, &out.stdout).unwrap();
        shard_files.push(file);
    }
    covered.sort();
    assert_eq!(covered, ["web1", "web2", "web3"]);

    // Ansible inventories, INI and YAML: groups, children, patterns, connection variables;
    // the known_hosts files from the command line (the inventory's addresses have no ssh
    // config block).
    let var = |bed: &Testbed| {
        format!(
            "ansible_host={} ansible_port={} ansible_user={} ansible_ssh_private_key_file={}",
            bed.host(),
            bed.port(),
            bed.user(),
            bed.private_key_path().display()
        )
    };
    let ini = hosts.path("inventory.ini");
    std::fs::write(
        &ini,
        format!(
            "[web]\nw1 {}\nw2 {}\n[db]\nd1 ansible_host=127.0.0.1 ansible_port={} ansible_user=nobody\n\
             [prod:children]\nweb\ndb\n",
            var(&beds[0]),
            var(&beds[1]),
            dead_port()
        ),
    )
    .unwrap();
    let known: Vec<String> = beds
        .iter()
        .flat_map(|b| {
            [
                "--known-hosts".to_owned(),
                b.known_hosts_path().display().to_string(),
            ]
        })
        .collect();
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    let ini_arg = ini.to_str().unwrap();
    let out = hosts.run(
        &["run"],
        &[
            &["-i", ini_arg, "-g", "prod:!db", "-b"][..],
            &known[..],
            &["echo", "inv"],
        ]
        .concat(),
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("\nw[1-2] (2) ok\n"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    let out = hosts.run(
        &["run"],
        &[&["-i", ini_arg, "--json"][..], &known[..], &["true"]].concat(),
    );
    let all = records(&out);
    assert_eq!(all.len(), 3, "{all:?} {}", text(&out.stderr));
    assert_eq!(status_of(&all, "w2"), "ok");
    assert_eq!(status_of(&all, "d1"), "unreachable");
    assert_eq!(out.status.code(), Some(4));
    let yaml = hosts.path("inventory.yml");
    std::fs::write(
        &yaml,
        format!(
            "all:\n  children:\n    web:\n      hosts:\n        y1:\n          ansible_host: {}\n          \
             ansible_port: {}\n          ansible_user: {}\n          ansible_ssh_private_key_file: {}\n",
            beds[2].host(),
            beds[2].port(),
            beds[2].user(),
            beds[2].private_key_path().display()
        ),
    )
    .unwrap();
    let out = hosts.run(
        &["run"],
        &[
            &["-i", yaml.to_str().unwrap(), "-g", "web"][..],
            &known[..],
            &["echo", "$SWIFTIDE_SSH_TESTBED_ID"],
        ]
        .concat(),
    );
    assert_eq!(
        text(&out.stdout),
        format!("y1: {}\n", beds[2].id()),
        "{}",
        text(&out.stderr)
    );
    let files: Vec<&str> = shard_files.iter().map(|f| f.to_str().unwrap()).collect();
    let out = run(&[&["fold"][..], &files[..]].concat(), hosts.dir.path());
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\nweb[1-3] (3) ok\n"), "{stdout}");
    assert_eq!(out.status.code(), Some(0));
}

/// A tree with odd names (spaces, quotes, a newline), modes, an empty directory, a symlink.
#[test]
fn audit_records_every_host_and_verify_names_the_broken_line() {
    let beds = [testbed(), testbed()];
    let hosts = Hosts::new(&[("web1", &beds[0]), ("web2", &beds[1])], false);
    let trail = hosts.path("audit.jsonl");
    let trail_arg = trail.to_str().unwrap();
    for command in ["echo one", "echo two"] {
        let out = hosts.run(
            &["run"],
            &["-w", "web[1-2]", "--audit", trail_arg, "sh", "-c", command],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let lines: Vec<Value> = std::fs::read_to_string(&trail)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // Two runs (the second continues the chain) on two hosts.
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let mut seen: Vec<(String, String)> = lines
        .iter()
        .map(|line| {
            assert_eq!(line["op"], "command");
            assert_eq!(line["exit"], serde_json::json!({"code": 0}));
            (
                line["host"].as_str().unwrap().to_owned(),
                line["command"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    let host = |i: usize| beds[i].host();
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter().all(|(h, _)| *h == host(0) || *h == host(1)),
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|(_, c)| c.contains("echo two")).count(),
        2
    );

    let verify = |extra: &[&str]| {
        let mut args = vec!["audit", "verify", trail_arg];
        args.extend(extra);
        run(&args, hosts.dir.path())
    };
    let out = verify(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("4 records, chain intact"), "{said}");
    let head = said.trim().rsplit(' ').next().unwrap().to_owned();
    assert_eq!(verify(&["--head", &head]).status.code(), Some(0));

    // The last line cut off: only the kept head tells.
    let text_before = std::fs::read_to_string(&trail).unwrap();
    let kept: Vec<&str> = text_before.lines().collect();
    std::fs::write(&trail, format!("{}\n", kept[..3].join("\n"))).unwrap();
    assert_eq!(verify(&[]).status.code(), Some(0));
    let out = verify(&["--head", &head]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("line 4"),
        "{}",
        text(&out.stdout)
    );

    // The second line edited: named by the break it makes at line 3.
    let edited = text_before.replacen("echo one", "echo 0ne", 2);
    std::fs::write(&trail, &edited).unwrap();
    let out = verify(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("breaks at line"),
        "{}",
        text(&out.stdout)
    );
    // And a broken trail is not continued: the run refuses before it starts.
    let out = hosts.run(&["run"], &["-w", "web1", "--audit", trail_arg, "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot be continued"),
        "{}",
        text(&out.stderr)
    );
}

fn make_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let files: Vec<(PathBuf, Vec<u8>, u32)> = vec![
        ("plain.txt".into(), b"plain\n".to_vec(), 0o644),
        ("with space.conf".into(), b"a = 1\n".to_vec(), 0o600),
        ("q'uo\"te".into(), b"quotes".to_vec(), 0o640),
        ("new\nline".into(), b"two\nlines\n".to_vec(), 0o644),
        (
            "bin/run.sh".into(),
            b"#!/bin/sh\necho run\n".to_vec(),
            0o755,
        ),
        (
            "deep/er/est/data.bin".into(),
            (0..=255u8).cycle().take(300_000).collect(),
            0o444,
        ),
    ];
    for (path, content, mode) in &files {
        let full = root.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(&full, content).unwrap();
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::os::unix::fs::symlink("plain.txt", root.join("link")).unwrap();
    let mut with_link = files;
    with_link.push(("link".into(), b"plain\n".to_vec(), 0o644));
    with_link
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn push_and_pull_a_tree_with_odd_names_and_a_failing_host() {
    let beds = [testbed(), testbed()];
    let denied = unprivileged_testbed();
    let hosts = Hosts::new(
        &[("web1", &beds[0]), ("web2", &beds[1]), ("nopriv", &denied)],
        true,
    );
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("tree");
    let files = make_tree(&source);
    // A root-owned directory the unprivileged host cannot write to, nor look into: were it
    // readable, the host could find the files web1 just wrote already as pushed (unchanged)
    // or not yet, as the hosts' timing goes.
    let remote = tempfile::tempdir().unwrap();
    std::fs::set_permissions(remote.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // DEST ends in `/`: the tree lands in DEST/tree (all testbeds share one file system, so
    // without it the second host could find the directory the first one just made).
    let deployed = remote.path().join("deployed");
    let dest_arg = format!("{}/", deployed.display());
    let dest = deployed.join("tree");
    let out = hosts.run(
        &["push"],
        &[
            "-w",
            "web[1-2],nopriv,dead",
            "--json",
            source.to_str().unwrap(),
            &dest_arg,
        ],
    );
    let pushed = records(&out);
    assert_eq!(pushed.len(), 4, "{pushed:?} {}", text(&out.stderr));
    for name in ["web1", "web2"] {
        let record = pushed.iter().find(|r| r["host"] == name).unwrap();
        assert_eq!(record["status"], "ok", "{record}");
        let summary = record["stdout"].as_str().unwrap();
        assert!(summary.starts_with("pushed 7 files"), "{summary}");
        // The hosts share this file system: the second may find files the first wrote.
        assert!(
            summary.contains("sha256 verified on the host")
                || summary.contains(": 7 unchanged; nothing written"),
            "{summary}"
        );
        assert_eq!(
            record["files"].as_array().map(Vec::len),
            Some(7),
            "{record}"
        );
    }
    assert_eq!(status_of(&pushed, "dead"), "unreachable");
    let nopriv = pushed.iter().find(|r| r["host"] == "nopriv").unwrap();
    assert_eq!(nopriv["status"], "error", "{nopriv}");
    assert!(
        nopriv["error"]
            .as_str()
            .unwrap()
            .contains("ermission denied"),
        "{nopriv}"
    );
    assert_eq!(out.status.code(), Some(4));
    for (path, content, want) in &files {
        let copy = dest.join(path);
        assert_eq!(&std::fs::read(&copy).unwrap(), content, "{path:?}");
        assert_eq!(mode(&copy), *want, "{path:?}");
    }
    assert!(dest.join("empty").is_dir());
    // No temporary files left behind.
    let leftovers = Command::new("find")
        .arg(&dest)
        .args(["-name", "*.swiftide-*"])
        .output()
        .unwrap();
    assert!(leftovers.stdout.is_empty(), "{}", text(&leftovers.stdout));

    // A push into an existing directory lands in it, under the source's name; a file keeps
    // its mode, and is replaced atomically on the second push. One host after the other
    // (-f 1): web2 finds the file web1 wrote, already as pushed.
    let single = local.path().join("tool");
    std::fs::write(&single, "v1").unwrap();
    std::fs::set_permissions(&single, std::fs::Permissions::from_mode(0o750)).unwrap();
    for (version, change) in [("v1", "created"), ("v2", "changed")] {
        std::fs::write(&single, version).unwrap();
        let out = hosts.run(
            &["push"],
            &[
                "-w",
                "web[1-2]",
                "-f",
                "1",
                "-b",
                single.to_str().unwrap(),
                remote.path().to_str().unwrap(),
            ],
        );
        let stdout = text(&out.stdout);
        let tool = remote.path().join("tool");
        for (name, change) in [("web1", change), ("web2", "unchanged")] {
            assert!(
                stdout.contains(&format!(
                    "\n{name} (1) ok\n-----------\npushed 1 file, 2 bytes to {}: {change};",
                    tool.display()
                )),
                "{stdout}{}",
                text(&out.stderr)
            );
        }
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            std::fs::read_to_string(remote.path().join("tool")).unwrap(),
            version
        );
        assert_eq!(mode(&remote.path().join("tool")), 0o750);
    }
    // A file that exists keeps its mode (a secret pushed over a 0640 file is not made
    // world-readable by a 0644 local copy); --preserve applies the local mode.
    std::fs::set_permissions(
        remote.path().join("tool"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::set_permissions(&single, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (flags, version, want) in [(&[][..], "v3", 0o640), (&["--preserve"][..], "v4", 0o644)] {
        std::fs::write(&single, version).unwrap();
        let mut args = flags.to_vec();
        args.extend([
            "-w",
            "web[1-2]",
            "-b",
            single.to_str().unwrap(),
            remote.path().to_str().unwrap(),
        ]);
        let out = hosts.run(&["push"], &args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(
            std::fs::read_to_string(remote.path().join("tool")).unwrap(),
            version
        );
        assert_eq!(mode(&remote.path().join("tool")), want, "{flags:?}");
    }

    // Pull the tree back from every host into one directory per host.
    let gathered = local.path().join("gathered");
    let out = hosts.run(
        &["pull"],
        &[
            "-w",
            "web[1-2],dead",
            "-b",
            dest.to_str().unwrap(),
            gathered.to_str().unwrap(),
        ],
    );
    let stdout = text(&out.stdout);
    // Both copies are identical: one block; the dead host apart.
    assert!(stdout.contains("web[1-2] (2) ok"), "{stdout}");
    assert!(stdout.contains("pulled 7 files"), "{stdout}");
    assert!(stdout.contains("dead (1) unreachable"), "{stdout}");
    assert_eq!(out.status.code(), Some(4));
    for name in ["web1", "web2"] {
        for (path, content, want) in &files {
            let copy = gathered.join(name).join("tree").join(path);
            assert_eq!(&std::fs::read(&copy).unwrap(), content, "{copy:?}");
            // The symlink was followed on push: a file of the link's mode on the host.
            if path != Path::new("link") {
                assert_eq!(mode(&copy), *want, "{copy:?}");
            }
        }
        assert!(gathered.join(name).join("tree/empty").is_dir());
    }
    assert!(!gathered.join("dead").exists());

    // A file only root can read: the unprivileged host fails, the others do not stop.
    let secret = remote.path().join("secret");
    std::fs::write(&secret, "s").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = hosts.run(
        &["pull"],
        &[
            "-w",
            "web1,nopriv",
            "--json",
            secret.to_str().unwrap(),
            gathered.to_str().unwrap(),
        ],
    );
    let pulled = records(&out);
    assert_eq!(status_of(&pulled, "web1"), "ok");
    assert_eq!(status_of(&pulled, "nopriv"), "error");
    assert_eq!(
        std::fs::read_to_string(gathered.join("web1/secret")).unwrap(),
        "s"
    );
    assert_eq!(mode(&gathered.join("web1/secret")), 0o600);
}

/// The inode and modification time of a file: what a rewrite changes.
fn identity(path: &Path) -> (u64, SystemTime) {
    let metadata = std::fs::metadata(path).unwrap();
    (
        std::os::unix::fs::MetadataExt::ino(&metadata),
        metadata.modified().unwrap(),
    )
}

#[test]
fn a_second_push_reports_unchanged_live_folded_and_in_json() {
    let beds = [testbed(), testbed()];
    let hosts = Hosts::new(&[("web1", &beds[0]), ("web2", &beds[1])], false);
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("app.conf");
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o644)).unwrap();
    let remote = tempfile::tempdir().unwrap();
    let dest = remote.path().join("app.conf");
    let push = |nodes: &str, flags: &[&str]| {
        let args = [
            &["-w", nodes][..],
            flags,
            &[source.to_str().unwrap(), dest.to_str().unwrap()],
        ]
        .concat();
        hosts.run(&["push"], &args)
    };
    // The first push on one host (the testbeds share this file system).
    let out = push("web1", &[]);
    assert_eq!(
        text(&out.stdout),
        format!(
            "web1: pushed 1 file, 10 bytes to {}: created; sha256 verified on the host\n",
            dest.display()
        ),
        "{}",
        text(&out.stderr)
    );
    let written = identity(&dest);
    // Then on both, a second later (a rewrite would show in the seconds of the mtime):
    // live, folded and JSON, every host unchanged and nothing rewritten.
    std::thread::sleep(Duration::from_millis(1100));
    let unchanged = format!(
        "pushed 1 file, 10 bytes to {}: unchanged; nothing written\n",
        dest.display()
    );
    let out = push("web[1-2]", &[]);
    let stdout = text(&out.stdout);
    for name in ["web1", "web2"] {
        assert!(
            stdout.contains(&format!("{name}: {unchanged}")),
            "{stdout}{}",
            text(&out.stderr)
        );
    }
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert_eq!(out.status.code(), Some(0));
    let out = push("web[1-2]", &["-b"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("\nweb[1-2] (2) ok\n---------------\n{unchanged}")),
        "{stdout}"
    );
    let out = push("web[1-2]", &["--json"]);
    let pushed = records(&out);
    for record in &pushed {
        assert_eq!(record["status"], "ok", "{record}");
        assert_eq!(record["changed"], false, "{record}");
        assert_eq!(record["stdout"], unchanged.as_str(), "{record}");
        assert_eq!(
            record["files"],
            serde_json::json!([{"path": dest.to_str().unwrap(), "change": "unchanged"}]),
            "{record}"
        );
    }
    assert_eq!(identity(&dest), written, "the file was rewritten");
    // The records folded afterwards say the same.
    let saved = hosts.path("records.json");
    std::fs::write(&saved, &out.stdout).unwrap();
    let folded = run(&["fold", saved.to_str().unwrap()], hosts.dir.path());
    assert!(
        text(&folded.stdout).contains(&format!("web[1-2] (2) ok\n---------------\n{unchanged}")),
        "{}",
        text(&folded.stdout)
    );

    // --mode applies to a file that exists (written once, then unchanged).
    let out = push("web1", &["--json", "--mode", "0640"]);
    let moded = records(&out);
    assert_eq!(moded[0]["files"][0]["change"], "changed", "{moded:?}");
    assert_eq!(moded[0]["changed"], true);
    assert_eq!(mode(&dest), 0o640);
    let out = push("web[1-2]", &["-b", "--mode", "640"]);
    assert!(
        text(&out.stdout).contains("web[1-2] (2) ok"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stdout).contains(": unchanged; nothing written"));
    // A mode that is not one, or with --preserve: usage errors.
    for flags in [&["--mode", "0999"][..], &["--mode", "600", "--preserve"]] {
        let out = push("web1", flags);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flags:?} {}",
            text(&out.stderr)
        );
    }

    // An owner no host has: a typed failure per host, the old file as it was.
    let before = identity(&dest);
    std::fs::write(&source, "listen 81\n").unwrap();
    let out = push("web1", &["--json", "--owner", "no-such-user-swiftide"]);
    let failed = records(&out);
    assert_eq!(status_of(&failed, "web1"), "error");
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no user named \"no-such-user-swiftide\"")),
        "{failed:?}"
    );
    assert_eq!(failed[0]["files"], Value::Null);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "listen 80\n");
    assert_eq!(identity(&dest), before);
    let out = push("web1", &["--owner", ":no-such-group-swiftide"]);
    assert!(
        text(&out.stderr).contains("no group named \"no-such-group-swiftide\""),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(identity(&dest), before);
}

#[test]
fn jobs_start_on_every_host_and_are_collected_by_id() {
    // The testbeds share one file system: each gets a state directory of its own, as
    // separate machines have, or both would find the same job by its id.
    let states: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let beds: Vec<Testbed> = states
        .iter()
        .map(|state| {
            Testbed::builder()
                .sshd_config_line(format!("SetEnv XDG_STATE_HOME={}", state.path().display()))
                .start()
                .unwrap_or_else(|e| panic!("cannot start the sshd testbed: {e}"))
        })
        .collect();
    let hosts = Hosts::new(&[("web1", &beds[0]), ("web2", &beds[1])], false);
    let id = format!("cli-test-{}", std::process::id());
    let command = format!(
        "echo out-$SWIFTIDE_SSH_TESTBED_ID; sleep 2; [ $SWIFTIDE_SSH_TESTBED_ID = {} ] && exit 5; echo done",
        beds[1].id()
    );
    let out = hosts.run(
        &["job", "start"],
        &["-w", "web[1-2]", "--id", &id, "--", &command],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("job {id}")));
    assert!(text(&out.stdout).contains(&format!("web1: started job {id}")));
    // Starting the same id again starts nothing twice.
    let again = hosts.run(
        &["job", "start"],
        &["-w", "web[1-2]", "--id", &id, "--", &command],
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));

    let out = hosts.run(&["job", "status"], &["-w", "web[1-2]", "-b", &id]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("web[1-2] (2) ok") && stdout.contains("running"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(0));

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = hosts.run(&["job", "status"], &["-w", "web[1-2]", "--json", &id]);
        let states = records(&out);
        if states.iter().all(|r| r["stdout"] != "running\n") {
            let of = |name: &str| states.iter().find(|r| r["host"] == name).unwrap();
            assert_eq!(
                (&of("web1")["status"], &of("web1")["stdout"]),
                (&Value::from("ok"), &Value::from("exited 0\n"))
            );
            assert_eq!(
                (&of("web2")["status"], &of("web2")["exit_code"]),
                (&Value::from("failed"), &Value::from(5))
            );
            assert_eq!(out.status.code(), Some(1));
            break;
        }
        assert!(Instant::now() < deadline, "{states:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = hosts.run(&["job", "output"], &["-w", "web[1-2]", &id]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("web1: out-{}\nweb1: done\n", beds[0].id())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("web2: out-{}\n", beds[1].id())),
        "{stdout}"
    );
    assert!(!stdout.contains("web2: done"), "{stdout}");

    // Kill: a long job on both hosts ends by signal.
    let long = format!("{id}-long");
    let out = hosts.run(
        &["job", "start"],
        &["-w", "web[1-2]", "--id", &long, "sleep", "60"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = hosts.run(
        &["job", "kill"],
        &["-w", "web[1-2]", "--grace", "1", "-b", &long],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("web[1-2] (2) signal"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1));
    // An unknown id is an error on every host.
    let out = hosts.run(
        &["job", "status"],
        &["-w", "web[1-2]", "--json", "no-such-job"],
    );
    assert!(records(&out).iter().all(|r| r["status"] == "error"));
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn job_start_prunes_the_jobs_past_their_retention_before_it_exits() {
    // The library prunes in the background after a start; a program that exits right after
    // the start (this one) must not drop that pruning, so jobs would pile up forever.
    let state = tempfile::tempdir().unwrap();
    let bed = Testbed::builder()
        .sshd_config_line(format!("SetEnv XDG_STATE_HOME={}", state.path().display()))
        .start()
        .unwrap_or_else(|e| panic!("cannot start the sshd testbed: {e}"));
    let hosts = Hosts::new(&[("web1", &bed)], false);
    let jobs = state.path().join("swiftide-ssh/jobs");
    let start = |id: &str, retention: &[&str]| {
        let mut args = vec!["-w", "web1", "--id", id];
        args.extend(retention);
        args.extend(["--", "true"]);
        let out = hosts.run(&["job", "start"], &args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    };
    start("old", &[]);
    let exit = jobs.join("old/exit");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exit.exists() {
        assert!(Instant::now() < deadline, "job old never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    // As if it had ended ten days ago (the record's time: seconds since the epoch).
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    std::fs::write(&exit, format!("0 {}\n", now.as_secs() - 10 * 24 * 3600)).unwrap();

    // 0 days: kept, however old.
    start("keeping", &["--job-retention-days", "0"]);
    assert!(exit.exists(), "pruned with --job-retention-days 0");
    // 30 days: not old enough.
    start("thirty", &["--job-retention-days", "30"]);
    assert!(
        exit.exists(),
        "pruned a job 10 days old with a retention of 30"
    );
    // The default (7 days): gone when the start returns, the new jobs kept.
    start("default", &[]);
    assert!(
        !jobs.join("old").exists(),
        "a job 10 days old outlived the default retention"
    );
    for id in ["keeping", "thirty", "default"] {
        assert!(jobs.join(id).exists(), "{id} was pruned");
    }
}

fn escalation_testbed(escalation: Escalation) -> Testbed {
    Testbed::builder()
        .escalation(escalation)
        .start()
        .unwrap_or_else(|e| panic!("cannot start a testbed with {escalation:?}: {e}"))
}

/// The escalation password (right or wrong) shows in none of the program's output.
fn assert_secret_kept(out: &Output, secrets: &[&str]) {
    for secret in secrets {
        for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(
                !text(bytes).contains(secret),
                "the password is in {stream}: {}",
                text(bytes)
            );
        }
    }
}

/// A password file only its owner may read, holding `password` and a newline.
fn password_file(hosts: &Hosts, name: &str, password: &str) -> PathBuf {
    let path = hosts.path(name);
    std::fs::write(&path, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
fn become_runs_commands_and_pushes_files_as_root_on_a_nopasswd_host() {
    let bed = escalation_testbed(Escalation::SudoNoPassword);
    let hosts = Hosts::new(&[("web1", &bed)], false);
    // The login account is not root; --become is.
    let out = hosts.run(&["run"], &["-w", "web1", "id", "-u"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_ne!(text(&out.stdout), "web1: 0\n");
    let out = hosts.run(&["run"], &["-w", "web1", "--become", "id", "-u"]);
    assert_eq!(text(&out.stdout), "web1: 0\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    // --become-user implies --become; --become-flags is split into the tool's arguments
    // (`sudo -g <group>`: root with the target's group).
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web1",
            "--become-user",
            BECOME_TARGET_USER,
            "id",
            "-un",
        ],
    );
    assert_eq!(
        text(&out.stdout),
        format!("web1: {BECOME_TARGET_USER}\n"),
        "{}",
        text(&out.stderr)
    );
    let group_flags = format!("-g {BECOME_TARGET_USER}");
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web1",
            "--become-flags",
            &group_flags,
            "echo $(id -un):$(id -gn)",
        ],
    );
    assert_eq!(
        text(&out.stdout),
        format!("web1: root:{BECOME_TARGET_USER}\n"),
        "{}",
        text(&out.stderr)
    );

    // A directory only root may enter (the testbed shares this file system): the login
    // account cannot push into it, --become can, and the copy is root's.
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("app.conf");
    std::fs::write(&source, "listen 80\n").unwrap();
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o640)).unwrap();
    let remote = tempfile::tempdir().unwrap();
    std::fs::set_permissions(remote.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let dest = remote.path().join("etc/app.conf");
    let push = |extra: &[&str]| {
        let args = [
            &["-w", "web1", "--json"][..],
            extra,
            &[source.to_str().unwrap(), dest.to_str().unwrap()],
        ]
        .concat();
        hosts.run(&["push"], &args)
    };
    let out = push(&[]);
    assert_eq!(
        status_of(&records(&out), "web1"),
        "error",
        "{}",
        text(&out.stderr)
    );
    assert!(!dest.exists());
    let out = push(&["--become"]);
    let pushed = records(&out);
    assert_eq!(
        status_of(&pushed, "web1"),
        "ok",
        "{pushed:?} {}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "listen 80\n");
    let metadata = std::fs::metadata(&dest).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&metadata),
        0,
        "the copy is not root's"
    );
    assert_eq!(mode(&dest), 0o640);
    // And pulled back the same way (the login account cannot read it).
    let gathered = local.path().join("gathered");
    let out = hosts.run(
        &["pull"],
        &[
            "-w",
            "web1",
            "--become",
            dest.to_str().unwrap(),
            gathered.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(gathered.join("web1/app.conf")).unwrap(),
        "listen 80\n"
    );

    // --owner: names looked up on the host, the change made by the account the push runs
    // as. The login account may not give a file away (the host fails, nothing is left
    // behind); --become may, and a second push finds the file as pushed.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let owned = open.path().join("owned.conf");
    let owner = format!("{BECOME_TARGET_USER}:adm");
    let push_owned = |extra: &[&str]| {
        let args = [
            &["-w", "web1", "--json", "--owner", &owner, "--mode", "0600"][..],
            extra,
            &[source.to_str().unwrap(), owned.to_str().unwrap()],
        ]
        .concat();
        hosts.run(&["push"], &args)
    };
    let out = push_owned(&[]);
    let refused = records(&out);
    assert_eq!(status_of(&refused, "web1"), "error", "{refused:?}");
    let error = refused[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("sftp chown"), "{error}");
    assert_eq!(out.status.code(), Some(4));
    let left: Vec<_> = std::fs::read_dir(open.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    let target_uid = Command::new("id")
        .args(["-u", BECOME_TARGET_USER])
        .output()
        .unwrap();
    let target_uid: u32 = text(&target_uid.stdout).trim().parse().unwrap();
    for change in ["created", "unchanged"] {
        let out = push_owned(&["--become"]);
        let pushed = records(&out);
        assert_eq!(
            status_of(&pushed, "web1"),
            "ok",
            "{pushed:?} {}",
            text(&out.stderr)
        );
        assert_eq!(pushed[0]["files"][0]["change"], change, "{pushed:?}");
        assert_eq!(pushed[0]["changed"], change != "unchanged");
        let metadata = std::fs::metadata(&owned).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (metadata.uid(), metadata.gid(), mode(&owned)),
            (target_uid, 4, 0o600)
        );
    }

    // A job started with --become runs as root, and is found with the same escalation.
    let id = format!("cli-become-{}", std::process::id());
    let out = hosts.run(
        &["job", "start"],
        &["-w", "web1", "--become", "--id", &id, "--", "id", "-u"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = hosts.run(
            &["job", "status"],
            &["-w", "web1", "--become", "--json", &id],
        );
        let states = records(&out);
        if states.iter().all(|r| r["stdout"] != "running\n") {
            assert_eq!(states[0]["stdout"], "exited 0\n", "{states:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{states:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = hosts.run(&["job", "output"], &["-w", "web1", "--become", &id]);
    assert_eq!(text(&out.stdout), "web1: 0\n", "{}", text(&out.stderr));
    // Root's jobs are kept in root's home on this machine: remove this one.
    let out = hosts.run(&["run"], &["-w", "web1", "--become", "echo $HOME"]);
    if let Some(home) = text(&out.stdout).strip_prefix("web1: ") {
        let job = Path::new(home.trim())
            .join(".local/state/swiftide-ssh/jobs")
            .join(&id);
        let _ = std::fs::remove_dir_all(job);
    }
}

#[test]
fn become_passwords_from_a_file_or_the_environment_and_a_wrong_one() {
    let bed = escalation_testbed(Escalation::SudoPassword);
    let hosts = Hosts::new(&[("web1", &bed)], false);
    let wrong = "not-the-password-0417";
    let secrets = [BECOME_PASSWORD, wrong];

    // The right password from a file (first line, newline stripped): root.
    let right_file = password_file(&hosts, "right", BECOME_PASSWORD);
    let right_arg = right_file.to_str().unwrap();
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web1",
            "--become",
            "--become-password-file",
            right_arg,
            "id",
            "-u",
        ],
    );
    assert_eq!(text(&out.stdout), "web1: 0\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    assert_secret_kept(&out, &secrets);
    // From the environment, for bots.
    let out = hosts.run_env(
        &["run"],
        &["-w", "web1", "--become", "id", "-u"],
        &[("SWIFTIDE_SSH_BECOME_PASSWORD", BECOME_PASSWORD)],
    );
    assert_eq!(text(&out.stdout), "web1: 0\n", "{}", text(&out.stderr));
    assert_secret_kept(&out, &secrets);
    // The file wins over the variable.
    let wrong_file = password_file(&hosts, "wrong", wrong);
    let wrong_arg = wrong_file.to_str().unwrap();
    let out = hosts.run_env(
        &["run"],
        &[
            "-w",
            "web1",
            "--become",
            "--become-password-file",
            right_arg,
            "id",
            "-u",
        ],
        &[("SWIFTIDE_SSH_BECOME_PASSWORD", wrong)],
    );
    assert_eq!(text(&out.stdout), "web1: 0\n", "{}", text(&out.stderr));
    assert_secret_kept(&out, &secrets);

    // A wrong password: `become failed (incorrect password)`, nothing ran, exit 4; live,
    // folded and as a JSON record.
    let wrong_run = |extra: &[&str]| {
        let args = [
            &[
                "-w",
                "web1",
                "--become",
                "--become-password-file",
                wrong_arg,
            ][..],
            extra,
            &["touch", "/ran-anyway"],
        ]
        .concat();
        let out = hosts.run(&["run"], &args);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        assert_secret_kept(&out, &secrets);
        out
    };
    let out = wrong_run(&[]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("web1: become failed (incorrect password)"),
        "{stderr}"
    );
    assert!(stderr.contains("1 become failed of 1 hosts"), "{stderr}");
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    let out = wrong_run(&["-b"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("\nweb1 (1) become failed (incorrect password)\n"),
        "{stdout}"
    );
    let out = wrong_run(&["--json"]);
    let all = records(&out);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["status"], "become_failed", "{all:?}");
    assert_eq!(all[0]["become_failure"], "incorrect_password", "{all:?}");
    assert!(!Path::new("/ran-anyway").exists());

    // No password at all where sudo wants one.
    let out = hosts.run(&["run"], &["-w", "web1", "--become", "--json", "true"]);
    let all = records(&out);
    assert_eq!(all[0]["become_failure"], "password_required", "{all:?}");
    assert_eq!(out.status.code(), Some(4));

    // A password file others may read is refused before anything connects (exit 2).
    std::fs::set_permissions(&right_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = hosts.run(
        &["run"],
        &[
            "-w",
            "web1",
            "--become",
            "--become-password-file",
            right_arg,
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("too open"),
        "{}",
        text(&out.stderr)
    );
    assert_secret_kept(&out, &secrets);
}

#[test]
fn ask_become_pass_reads_the_terminal_without_echo_and_needs_one() {
    let bed = escalation_testbed(Escalation::SudoPassword);
    let hosts = Hosts::new(&[("web1", &bed)], false);

    // No controlling terminal (setsid): a usage error, standard input is never read.
    let args = hosts.args(&["run"], &["-w", "web1", "--become", "-K", "id", "-u"]);
    let out = Command::new("setsid")
        .arg("-w")
        .arg(BINARY)
        .args(&args)
        .env("HOME", hosts.dir.path())
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs a terminal"), "{stderr}");

    // On a terminal (script(1) gives the program a pseudo-terminal): the password typed
    // after the prompt is not echoed, and the command runs as root.
    let quoted: Vec<String> = std::iter::once(BINARY.to_owned())
        .chain(args)
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect();
    let mut child = Command::new("script")
        .args(["-q", "-f", "-e", "-c", &quoted.join(" "), "/dev/null"])
        .env("HOME", hosts.dir.path())
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("SWIFTIDE_SSH_BECOME_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut stdout, &mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sender.send(buffer[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text(&seen).contains("BECOME password: ") {
        let left = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok(bytes) => seen.extend(bytes),
            Err(_) => panic!("no prompt on the terminal: {}", text(&seen)),
        }
    }
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, format!("{BECOME_PASSWORD}\n").as_bytes()).unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not end: {}",
            text(&seen)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    reader.join().unwrap();
    seen.extend(receiver.try_iter().flatten());
    let screen = text(&seen);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(screen.contains("web1: 0\r\n"), "{screen}{stderr}");
    assert_eq!(status.code(), Some(0), "{screen}{stderr}");
    assert!(
        !screen.contains(BECOME_PASSWORD),
        "the password was echoed: {screen}"
    );
    assert!(!stderr.contains(BECOME_PASSWORD), "{stderr}");
}

/// An echo server on this machine (threads): each connection gets back what it sent, and
/// its EOF after the sender's.
fn echo_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = stream.try_clone().unwrap();
                std::io::copy(&mut reader, &mut stream).ok();
                stream.shutdown(std::net::Shutdown::Write).ok();
            });
        }
    });
    port
}

#[test]
fn forward_holds_the_same_forward_on_every_host_until_terminated() {
    let (one, two) = (testbed(), testbed());
    let hosts = Hosts::new(&[("web1", &one), ("web2", &two)], true);
    let echo = echo_server();

    // Usage: no forward, a malformed one, an escalation.
    let out = hosts.run(&["forward"], &["-w", "web1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("-L, -R or -D"));
    let out = hosts.run(&["forward"], &["-w", "web1", "-L", "8080:localhost"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("-L \"8080:localhost\""),
        "{}",
        text(&out.stderr)
    );
    let out = hosts.run(&["forward"], &["-w", "web1", "-D", "0", "--become"]);
    assert_eq!(out.status.code(), Some(2));

    // --for: a SOCKS proxy on each host for a moment, then exit 0.
    let out = hosts.run(&["forward"], &["-w", "web[1-2]", "-D", "0", "--for", "0.2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for host in ["web1", "web2"] {
        assert!(stdout.contains(&format!("{host}: 127.0.0.1:")), "{stdout}");
    }
    assert!(stdout.contains("SOCKS5 through"), "{stdout}");

    // Until SIGTERM: -L on two hosts and a dead one, used through each host's port.
    let mut child = Command::new(BINARY)
        .args(hosts.args(
            &["forward"],
            &["-w", "web[1-2],dead", "-L", &format!("0:127.0.0.1:{echo}")],
        ))
        .env("HOME", hosts.dir.path())
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            if sender.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let mut ports = Vec::new();
    while ports.len() < 2 {
        let line = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("no forward was printed");
        // `web1: 127.0.0.1:PORT -> 127.0.0.1:ECHO on HOST`
        let (host, rest) = line.split_once(": ").unwrap();
        let address = rest.split_once(" -> ").unwrap().0;
        assert!(rest.contains(&format!("-> 127.0.0.1:{echo} on ")), "{line}");
        ports.push((
            host.to_owned(),
            address.parse::<std::net::SocketAddr>().unwrap(),
        ));
    }
    ports.sort();
    assert_eq!(ports[0].0, "web1");
    assert_eq!(ports[1].0, "web2");
    for (host, address) in &ports {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        std::io::Write::write_all(&mut stream, host.as_bytes()).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = String::new();
        std::io::Read::read_to_string(&mut stream, &mut back).unwrap();
        assert_eq!(&back, host);
    }
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    // The dead host failed (4); the others forwarded until the signal.
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("dead: unreachable"), "{stderr}");
    assert!(stderr.contains("2 forwards open"), "{stderr}");
    for (host, address) in &ports {
        assert!(
            stderr.contains(&format!("{host}: {address} -> 127.0.0.1:{echo} on ")),
            "{stderr}"
        );
        assert!(
            std::net::TcpStream::connect(address).is_err(),
            "{address} still listens"
        );
    }
    assert_eq!(
        stderr
            .matches(": 1 streams (0 failed), 4 bytes to the host, 4 from it")
            .count(),
        2,
        "{stderr}"
    );
}

/// The running uid's login name from the passwd database, as ssh takes it.
fn login_name() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    text(&out.stdout).trim().to_owned()
}

#[test]
fn the_login_name_comes_from_passwd_without_user_and_list_hosts_connects_to_nothing() {
    let bed = testbed();
    assert_eq!(
        bed.user(),
        login_name(),
        "this test needs the testbed's login to be the running account"
    );
    let hosts = Hosts::new(&[("web1", &bed)], true);
    // A config entry without `User`: the login name must come from passwd, with USER and
    // LOGNAME gone from the environment.
    let config = hosts.path("no_user_config");
    std::fs::write(
        &config,
        format!(
            "Host web1\n  HostName {}\n  Port {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {}\n",
            bed.host(),
            bed.port(),
            bed.private_key_path().display(),
            bed.known_hosts_path().display()
        ),
    )
    .unwrap();
    let out = Command::new(BINARY)
        .args([
            "run",
            "-F",
            config.to_str().unwrap(),
            "-t",
            "5",
            "-w",
            "web1",
            "id",
            "-un",
        ])
        .env("HOME", hosts.dir.path())
        .env_remove("USER")
        .env_remove("LOGNAME")
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("web1: {}\n", login_name()));

    // --list-hosts: the selection after every flag, and nothing contacted (the dead host is
    // listed, not reported unreachable).
    let dead_port = {
        let listed = hosts.run(&["run"], &["-w", "dead", "--list-hosts", "true"]);
        assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
        let line = text(&listed.stdout);
        assert!(line.starts_with("dead nobody@127.0.0.1:"), "{line}");
        assert!(text(&listed.stderr).is_empty(), "{}", text(&listed.stderr));
        line.trim()
            .rsplit(':')
            .next()
            .unwrap()
            .parse::<u16>()
            .unwrap()
    };
    let out = hosts.run(
        &["push"],
        &[
            "-w",
            "web1,dead",
            "-x",
            "dead",
            "--list-hosts",
            "/etc/hostname",
            "/tmp/",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("web1 {}@{}:{}\n", bed.user(), bed.host(), bed.port())
    );
    let out = hosts.run(
        &["job", "start"],
        &["-w", "web1,dead", "--list-hosts", "--json", "sleep", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["name"], "dead");
    assert_eq!(listed[1]["user"], "nobody");
    assert_eq!(listed[1]["port"], dead_port);
    assert_eq!(listed[0]["address"], bed.host());
    // Shards narrow the listing too: the two shards of two hosts cover both, once.
    let mut names = Vec::new();
    for shard in ["0/2", "1/2"] {
        let out = hosts.run(
            &["run"],
            &["-w", "web1,dead", "--shard", shard, "--list-hosts", "true"],
        );
        assert_eq!(out.status.code(), Some(0));
        names.extend(
            text(&out.stdout)
                .lines()
                .map(|l| l.split(' ').next().unwrap().to_owned()),
        );
    }
    names.sort();
    assert_eq!(names, ["dead", "web1"]);
}

#[test]
fn a_refused_host_is_unreachable_at_once_in_one_attempt() {
    let bed = testbed();
    let hosts = Hosts::new(&[("web1", &bed)], true);
    let started = Instant::now();
    // -t 30: a refused connect retried within the connect timeout would take seconds.
    let config = hosts.config.to_str().unwrap();
    let out = run(
        &[
            "run",
            "-F",
            config,
            "-t",
            "30",
            "-w",
            "web1,dead",
            "--json",
            "true",
        ],
        hosts.dir.path(),
    );
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let records = records(&out);
    assert_eq!(status_of(&records, "dead"), "unreachable");
    let dead = records.iter().find(|r| r["host"] == "dead").unwrap();
    assert_eq!(dead["attempts"], 1, "{dead}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn inventory_directories_group_vars_ssh_args_patterns_and_limits() {
    // The bastion logs each forward it makes (LogLevel DEBUG1): the proof of the jump.
    let bastion = Testbed::builder()
        .sshd_config_line("LogLevel DEBUG1")
        .start()
        .unwrap();
    let (one, two) = (testbed(), testbed());
    let hosts = Hosts::new(&[("bastion", &bastion)], true);
    let inventory = hosts.path("inventories/prod");
    std::fs::create_dir_all(inventory.join("group_vars")).unwrap();
    std::fs::create_dir_all(inventory.join("host_vars")).unwrap();
    // An inline group var that group_vars/ overrides, and hosts whose addresses come from
    // host_vars/.
    std::fs::write(
        inventory.join("hosts"),
        format!(
            "[web]\nt1 ansible_host={} ansible_port={}\nt2\n[web:vars]\nansible_user=nobody\n",
            one.host(),
            one.port()
        ),
    )
    .unwrap();
    std::fs::write(inventory.join("hosts.retry"), "not an inventory [\n").unwrap();
    std::fs::write(
        inventory.join("group_vars/web.yml"),
        format!(
            "ansible_user: {}\nansible_ssh_private_key_file: {}\n",
            one.user(),
            one.private_key_path().display()
        ),
    )
    .unwrap();
    std::fs::write(
        inventory.join("group_vars/all.yml"),
        "ansible_ssh_common_args: '-o ProxyJump=bastion -o StrictHostKeyChecking=no -C'\n",
    )
    .unwrap();
    std::fs::write(
        inventory.join("host_vars/t2.yml"),
        format!(
            "ansible_host: {}\nansible_port: {}\n",
            two.host(),
            two.port()
        ),
    )
    .unwrap();
    // A second source: -i is repeatable.
    let extra = hosts.path("extra.yml");
    let dead = dead_port();
    std::fs::write(
        &extra,
        format!(
            "all:\n  children:\n    db:\n      hosts:\n        d1:\n          ansible_host: 127.0.0.1\n          \
             ansible_port: {dead}\n          ansible_user: nobody\n"
        ),
    )
    .unwrap();
    let (inventory_arg, extra_arg) = (inventory.to_str().unwrap(), extra.to_str().unwrap());

    let listed = hosts.run(
        &["run"],
        &["-i", inventory_arg, "-i", extra_arg, "--list-hosts", "true"],
    );
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let user = one.user();
    assert_eq!(
        text(&listed.stdout),
        format!(
            "t1 {user}@{}:{}\nt2 {user}@{}:{}\nd1 nobody@127.0.0.1:{dead}\n",
            one.host(),
            one.port(),
            two.host(),
            two.port()
        ),
    );
    // Subscripts, regexes and limits narrowing each other.
    for (selection, expected) in [
        (&["-g", "web[1]"][..], "t2"),
        (&["-g", "web[-1]"][..], "t2"),
        (&["-g", "web[0:1]"][..], "t1\nt2"),
        (&["-g", "~t[12]", "--limit", "!t2"][..], "t1"),
        (&["-g", "all", "-g", "db"][..], "d1"),
        (&["--limit", "web:!t1"][..], "t2"),
    ] {
        let out = hosts.run(
            &["run"],
            &[
                &["-i", inventory_arg, "-i", extra_arg, "--list-hosts"][..],
                selection,
                &["true"],
            ]
            .concat(),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{selection:?}: {}",
            text(&out.stderr)
        );
        let listing = text(&out.stdout);
        let names: Vec<&str> = listing
            .lines()
            .filter_map(|line| line.split(' ').next())
            .collect();
        assert_eq!(names.join("\n"), expected, "{selection:?}");
    }
    let out = hosts.run(&["run"], &["-i", inventory_arg, "-g", "web[5]", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // Run through the bastion named in the inventory's ssh args; the ignored -C and the
    // StrictHostKeyChecking=no (taken as accept-new) are said on stderr.
    let out = hosts.run(
        &["run"],
        &[
            "-i",
            inventory_arg,
            "-g",
            "web",
            "-b",
            "echo",
            "$SWIFTIDE_SSH_TESTBED_ID",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        text(&out.stdout).contains(one.id()),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains(two.id()),
        "{}",
        text(&out.stdout)
    );
    assert!(
        stderr.contains("ignoring ssh options") && stderr.contains("-C"),
        "{stderr}"
    );
    assert!(stderr.contains("taken as accept-new"), "{stderr}");
    for bed in [&one, &two] {
        assert!(
            bastion
                .sshd_log()
                .contains(&format!("target {} port {}\n", bed.host(), bed.port())),
            "{}",
            bastion.sshd_log()
        );
    }
}
