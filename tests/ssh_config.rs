//! OpenSSH client configuration (`~/.ssh/config`) and jump hosts (`ProxyJump`), parsed from
//! real files and exercised against real sshd testbeds, including two-hop chains.

mod common;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use swiftide_ssh_executor::{
    Error, HostConfig, HostKeyPolicy, JumpHost, SshConfig, SshExecutor, StrictHostKeyChecking,
};
use swiftide_ssh_testbed::Testbed;
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Writes `text` to `dir/name` (creating parents) with mode 0600, as ssh wants it.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Loads `text` as a config file in a fresh home directory (also returned: `~` is it).
fn load(text: &str) -> (SshConfig, TempDir) {
    let home = TempDir::new().unwrap();
    let path = write(home.path(), "config", text);
    let config = SshConfig::load_with_home(&path, home.path())
        .unwrap_or_else(|e| panic!("cannot load {text:?}: {e}"));
    (config, home)
}

fn resolve(config: &SshConfig, alias: &str) -> HostConfig {
    config
        .resolve(alias)
        .unwrap_or_else(|e| panic!("cannot resolve {alias}: {e}"))
}

fn load_error(text: &str) -> Error {
    let home = TempDir::new().unwrap();
    let path = write(home.path(), "config", text);
    SshConfig::load_with_home(&path, home.path()).expect_err(&format!("{text:?} must be refused"))
}

/// A started testbed; `debug` logs at DEBUG1, where sshd reports `direct-tcpip` requests.
fn start(debug: bool) -> Testbed {
    let mut builder = Testbed::builder();
    if debug {
        builder = builder.sshd_config_line("LogLevel DEBUG1");
    }
    builder
        .start()
        .unwrap_or_else(|e| panic!("cannot start the sshd testbed: {e}"))
}

/// A `Host` block reaching `tb` with its own key and known_hosts.
fn host_block(alias: &str, tb: &Testbed, extra: &str) -> String {
    format!(
        "Host {alias}\n  HostName {}\n  Port {}\n  User {}\n  IdentityFile {}\n  \
         IdentitiesOnly yes\n  UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n{extra}",
        tb.host(),
        tb.port(),
        tb.user(),
        tb.private_key_path().display(),
        tb.known_hosts_path().display(),
    )
}

/// A jump host reaching `tb` with its own key and known_hosts.
fn hop(tb: &Testbed) -> JumpHost {
    JumpHost::new(tb.host())
        .port(tb.port())
        .user(tb.user())
        .private_key_file(tb.private_key_path())
        .known_hosts_file(tb.known_hosts_path())
}

/// The log line sshd (LogLevel DEBUG1) writes when asked to forward to `port`.
fn forward_line(port: u16) -> String {
    format!("target 127.0.0.1 port {port}\n")
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Parsing: one keyword family per test, from real files
// ---------------------------------------------------------------------------------------

#[test]
fn host_patterns_negation_and_the_first_value_wins() {
    let (config, _home) = load(
        "# global lines apply to every host\n\
         ConnectTimeout 7\n\
         Host build-* !build-secret\n\
         \x20 User ci\n\
         \x20 Port=2200\n\
         \x20 Port 2300\n\
         Host build-1 BUILD-2 web-?\n\
         \x20 User other\n\
         \x20 HostName %h.internal\n\
         Host only-negated !x\n\
         Host !nothing\n\
         \x20 User never\n\
         Host *\n\
         \x20 User fallback\n\
         \x20 Port = 22\n",
    );
    let b1 = resolve(&config, "build-1");
    assert_eq!(b1.user.as_deref(), Some("ci"), "first obtained value wins");
    assert_eq!(
        b1.port, 2200,
        "Port=2200, and the first Port of a block wins"
    );
    assert_eq!(b1.host_name, "build-1.internal", "%h is the alias");
    assert_eq!(b1.connect_timeout, Some(Duration::from_secs(7)));

    let b2 = resolve(&config, "Build-2");
    assert_eq!(
        b2.user.as_deref(),
        Some("ci"),
        "patterns match case-insensitively"
    );
    assert_eq!(b2.host_name, "Build-2.internal");

    let secret = resolve(&config, "build-secret");
    assert_eq!(
        secret.user.as_deref(),
        Some("fallback"),
        "!build-secret excludes"
    );
    assert_eq!(secret.port, 22);
    assert_eq!(secret.host_name, "build-secret", "no HostName: the alias");

    assert_eq!(resolve(&config, "web-1").user.as_deref(), Some("other"));
    assert_eq!(
        resolve(&config, "web-10").user.as_deref(),
        Some("fallback"),
        "? is exactly one character"
    );
    assert_eq!(
        resolve(&config, "nothing").user.as_deref(),
        Some("fallback"),
        "a Host line with only negated patterns matches nothing"
    );
}

#[test]
fn identity_files_accumulate_with_tilde_tokens_and_env() {
    let (config, home) = load(
        "Host b1\n\
         \x20 HostName build-1.example.com\n\
         \x20 User ci\n\
         \x20 Port 2200\n\
         \x20 IdentityFile ~/.ssh/%r@%h\n\
         \x20 IdentityFile \"%d/my keys/%n-%p-%k\"\n\
         \x20 IdentityFile ${CARGO_MANIFEST_DIR}/k%%1\n\
         \x20 IdentitiesOnly yes\n\
         Host *\n\
         \x20 IdentityFile ~/.ssh/%r@%h\n\
         \x20 IdentityFile /keys/last\n\
         \x20 User fallback\n",
    );
    let h = home.path().display();
    let b1 = resolve(&config, "b1");
    assert_eq!(
        b1.identity_files,
        [
            PathBuf::from(format!("{h}/.ssh/ci@build-1.example.com")),
            PathBuf::from(format!("{h}/my keys/b1-2200-b1")),
            // cargo sets CARGO_MANIFEST_DIR for the test process too.
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/k%1")),
            PathBuf::from("/keys/last"),
        ],
        "IdentityFile accumulates across blocks, duplicates dropped"
    );
    assert!(b1.identities_only);

    let other = resolve(&config, "other");
    assert!(!other.identities_only, "IdentitiesOnly defaults to no");
    assert_eq!(
        other.identity_files,
        [
            PathBuf::from(format!("{h}/.ssh/fallback@other")),
            PathBuf::from("/keys/last")
        ]
    );
    let (empty, home) = load("");
    let defaults = resolve(&empty, "x").identity_files;
    let ssh = home.path().join(".ssh");
    assert_eq!(
        defaults,
        [
            ssh.join("id_rsa"),
            ssh.join("id_ecdsa"),
            ssh.join("id_ed25519")
        ]
    );
}

#[test]
fn unsupported_tokens_are_errors_naming_the_line() {
    let (config, _home) = load("Host a\n  IdentityFile ~/.ssh/%C\nHost b\n  HostName %p\n");
    match config.resolve("a") {
        Err(Error::SshConfig { line, reason, .. }) => {
            assert_eq!(line, Some(2));
            assert!(reason.contains("%C"), "{reason}");
        }
        other => panic!("expected an SshConfig error, got {other:?}"),
    }
    assert!(
        matches!(
            config.resolve("b"),
            Err(Error::SshConfig { line: Some(4), .. })
        ),
        "HostName takes %h and %% only"
    );
}

#[test]
fn include_globs_relative_to_dot_ssh_in_sorted_order_and_conditionally() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    write(
        h,
        ".ssh/conf.d/20-b.conf",
        "Host b1\n  Port 2202\n  HostName from-b\n",
    );
    write(
        h,
        ".ssh/conf.d/10-a.conf",
        "Host b1\n  User from-a\n  Port 2201\n",
    );
    write(
        h,
        ".ssh/conf.d/.hidden.conf",
        "Host *\n  ConnectTimeout 99\n",
    );
    write(h, ".ssh/conf.d/notes.txt", "Host *\n  ConnectTimeout 98\n");
    write(
        h,
        "web.conf",
        "User web-user\nHost *\n  ServerAliveInterval 5\n",
    );
    let path = write(
        h,
        "elsewhere/main.conf",
        "Include conf.d/*.conf nothing-matches-*\n\
         Host b1\n\
         \x20 User from-main\n\
         Host web\n\
         \x20 Include ~/web.conf\n\
         \x20 ConnectTimeout 3\n",
    );
    let config = SshConfig::load_with_home(&path, h).unwrap();
    let b1 = resolve(&config, "b1");
    assert_eq!(
        b1.user.as_deref(),
        Some("from-a"),
        "10-a.conf is read first"
    );
    assert_eq!(b1.port, 2201);
    assert_eq!(b1.host_name, "from-b");
    assert_eq!(
        b1.connect_timeout, None,
        "hidden and non-matching files are not read"
    );
    assert_eq!(
        b1.server_alive_interval, None,
        "web.conf applies only to web"
    );

    let web = resolve(&config, "web");
    assert_eq!(web.user.as_deref(), Some("web-user"));
    assert_eq!(web.server_alive_interval, Some(Duration::from_secs(5)));
    assert_eq!(
        web.connect_timeout,
        Some(Duration::from_secs(3)),
        "the Host block goes on after its Include"
    );
}

#[test]
fn include_loops_and_unsafe_permissions_are_refused() {
    let home = TempDir::new().unwrap();
    let h = home.path();
    write(h, ".ssh/a", "Include b\n");
    write(h, ".ssh/b", "Include a\n");
    let path = write(h, "main", "Include a\n");
    let err = SshConfig::load_with_home(&path, h).unwrap_err();
    assert!(
        matches!(&err, Error::SshConfig { reason, .. } if reason.contains("too deeply")),
        "{err}"
    );

    use std::os::unix::fs::PermissionsExt;
    let shared = write(h, ".ssh/shared", "User x\n");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o666)).unwrap();
    let path = write(h, "main2", "Include shared\n");
    let err = SshConfig::load_with_home(&path, h).unwrap_err();
    assert!(
        matches!(&err, Error::SshConfig { path, reason, .. }
            if path == &shared && reason.contains("permissions")),
        "{err}"
    );
}

#[test]
fn match_blocks_and_unknown_keywords_are_ignored_and_reported() {
    let (config, _home) = load(
        "Host b1\n\
         \x20 User alice\n\
         Match host b1\n\
         \x20 User mallory\n\
         \x20 HostName evil.example.com\n\
         Host b1\n\
         \x20 Port 2200\n\
         \x20 ForwardAgent yes\n\
         Host other\n\
         \x20 Ciphers aes128-ctr\n",
    );
    let b1 = resolve(&config, "b1");
    assert_eq!(b1.user.as_deref(), Some("alice"));
    assert_eq!(b1.host_name, "b1", "nothing from the Match block applies");
    assert_eq!(b1.port, 2200, "the Host block after Match applies again");
    assert_eq!(b1.ignored.len(), 2, "{:?}", b1.ignored);
    assert!(b1.ignored[0].starts_with("Match (") && b1.ignored[0].ends_with(":3)"));
    assert!(b1.ignored[1].starts_with("ForwardAgent ("));
}

#[test]
fn proxy_jump_forms_hops_resolved_through_the_file() {
    let (config, home) = load(
        "Host target\n\
         \x20 ProxyJump jump@bastion1:2222,bastion2,ssh://u@[::1]:2200\n\
         Host bastion1\n\
         \x20 HostName b1.example.com\n\
         \x20 User b1user\n\
         \x20 IdentityFile ~/.ssh/b1key\n\
         \x20 ProxyJump outer\n\
         Host bastion2\n\
         \x20 HostName b2.example.com\n\
         \x20 UserKnownHostsFile ~/.ssh/b2_known_hosts\n\
         \x20 StrictHostKeyChecking accept-new\n\
         \x20 ProxyJump not-used\n\
         Host outer\n\
         \x20 User o\n\
         \x20 Port 2022\n\
         Host direct\n\
         \x20 ProxyJump none\n\
         Host direct\n\
         \x20 ProxyJump bastion1\n\
         Host loop1\n\
         \x20 ProxyJump loop2\n\
         Host loop2\n\
         \x20 ProxyJump loop1\n",
    );
    let target = resolve(&config, "target");
    let hops: Vec<(Option<&str>, &str, u16)> = target
        .proxy_jump
        .iter()
        .map(|h| (h.user.as_deref(), h.host_name.as_str(), h.port))
        .collect();
    assert_eq!(
        hops,
        [
            (Some("o"), "outer", 2022),
            (Some("jump"), "b1.example.com", 2222),
            (None, "b2.example.com", 22),
            (Some("u"), "::1", 2200),
        ],
        "the first hop's own ProxyJump comes first; later hops' are ignored; \
         user@ and :port win over the hop's block"
    );
    let b1 = &target.proxy_jump[1];
    assert_eq!(b1.identity_files, [home.path().join(".ssh/b1key")]);
    let b2 = &target.proxy_jump[2];
    assert_eq!(
        b2.strict_host_key_checking,
        StrictHostKeyChecking::AcceptNew
    );
    assert_eq!(
        b2.user_known_hosts_files,
        [home.path().join(".ssh/b2_known_hosts")]
    );
    assert!(target.proxy_jump.iter().all(|h| h.proxy_jump.is_empty()));

    assert!(
        resolve(&config, "direct").proxy_jump.is_empty(),
        "none came first"
    );
    assert!(matches!(
        config.resolve("loop1"),
        Err(Error::Config { reason }) if reason.contains("nest")
    ));
    for bad in ["ProxyJump a,,b", "ProxyJump u@", "ProxyJump h:99999"] {
        assert!(
            matches!(load_error(bad), Error::SshConfig { line: Some(1), .. }),
            "{bad}"
        );
    }
}

#[test]
fn proxy_command_is_refused_rather_than_bypassed() {
    let (config, _home) = load(
        "Host pc\n  ProxyCommand ssh -W %h:%p gateway\n  ProxyJump ignored\n\
         Host none\n  ProxyCommand none\nHost *\n  User u\n",
    );
    let pc = resolve(&config, "pc");
    assert_eq!(pc.proxy_command.as_deref(), Some("ssh -W %h:%p gateway"));
    assert!(pc.proxy_jump.is_empty(), "ProxyCommand came first");
    let err = pc.to_builder().unwrap_err();
    assert!(
        matches!(&err, Error::Config { reason } if reason.contains("ProxyCommand")),
        "{err}"
    );
    assert!(resolve(&config, "none").to_builder().is_ok());
}

#[test]
fn known_hosts_files_and_strict_host_key_checking() {
    let (config, home) = load(
        "Host strict\n  StrictHostKeyChecking yes\n\
         Host new\n  StrictHostKeyChecking accept-new\n\
         \x20 UserKnownHostsFile ~/kh1 \"/tmp/k h2\" %d/kh-%h-%p\n\
         \x20 GlobalKnownHostsFile none\n\
         Host off\n  StrictHostKeyChecking off\n\
         Host no\n  StrictHostKeyChecking no\n  UserKnownHostsFile none\n\
         Host true\n  StrictHostKeyChecking true\n\
         Host ask\n  StrictHostKeyChecking ask\n",
    );
    let h = home.path();
    let strict = resolve(&config, "strict");
    assert_eq!(strict.strict_host_key_checking, StrictHostKeyChecking::Yes);
    assert_eq!(
        strict.user_known_hosts_files,
        [h.join(".ssh/known_hosts"), h.join(".ssh/known_hosts2")]
    );
    assert_eq!(
        strict.global_known_hosts_files,
        [
            PathBuf::from("/etc/ssh/ssh_known_hosts"),
            PathBuf::from("/etc/ssh/ssh_known_hosts2")
        ]
    );
    let new = resolve(&config, "new");
    assert_eq!(
        new.strict_host_key_checking,
        StrictHostKeyChecking::AcceptNew
    );
    assert_eq!(
        new.user_known_hosts_files,
        [
            h.join("kh1"),
            PathBuf::from("/tmp/k h2"),
            h.join("kh-new-22")
        ]
    );
    assert!(new.global_known_hosts_files.is_empty());
    for (alias, expected) in [
        ("off", StrictHostKeyChecking::No),
        ("no", StrictHostKeyChecking::No),
        ("true", StrictHostKeyChecking::Yes),
        ("ask", StrictHostKeyChecking::Ask),
        ("unset", StrictHostKeyChecking::Ask),
    ] {
        assert_eq!(
            resolve(&config, alias).strict_host_key_checking,
            expected,
            "{alias}"
        );
    }
    assert!(resolve(&config, "no").user_known_hosts_files.is_empty());
    assert!(matches!(
        load_error("StrictHostKeyChecking maybe"),
        Error::SshConfig { line: Some(1), .. }
    ));
}

#[test]
fn keepalive_and_connect_timeout() {
    let (config, _home) = load(
        "Host a\n  ServerAliveInterval 30\n  ServerAliveCountMax 5\n  ConnectTimeout 1m\n\
         Host b\n  ServerAliveInterval=0\n  ConnectTimeout 1h30m\n",
    );
    let a = resolve(&config, "a");
    assert_eq!(a.server_alive_interval, Some(Duration::from_secs(30)));
    assert_eq!(a.server_alive_count_max, Some(5));
    assert_eq!(a.connect_timeout, Some(Duration::from_secs(60)));
    let b = resolve(&config, "b");
    assert_eq!(b.server_alive_interval, Some(Duration::ZERO));
    assert_eq!(b.server_alive_count_max, None);
    assert_eq!(b.connect_timeout, Some(Duration::from_secs(5400)));
    let c = resolve(&config, "c");
    assert_eq!((c.server_alive_interval, c.connect_timeout), (None, None));
}

#[test]
fn invalid_values_are_refused_in_any_block_with_file_and_line() {
    for (text, line) in [
        ("Host x\n  Port 0\n", 2),
        ("Host never-matches\n\n  Port abc\n", 3),
        ("Port 22 23\n", 1),
        ("User\n", 1),
        ("IdentitiesOnly maybe\n", 1),
        ("ServerAliveCountMax many\n", 1),
        ("ConnectTimeout 5x\n", 1),
        ("User \"unterminated\n", 1),
        ("Host\n", 1),
        ("Include\n", 1),
    ] {
        match load_error(text) {
            Error::SshConfig {
                line: Some(l),
                path,
                ..
            } => {
                assert_eq!(l, line, "{text:?}");
                assert!(path.ends_with("config"));
            }
            other => panic!("{text:?}: expected an SshConfig error, got {other:?}"),
        }
    }
    let missing = SshConfig::load("/nonexistent/ssh_config").unwrap_err();
    assert!(matches!(missing, Error::SshConfig { line: None, .. }));
    assert!(SshExecutor::from_ssh_config_file("/nonexistent/ssh_config", "x").is_err());
}

// ---------------------------------------------------------------------------------------
// Against real sshd
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn from_ssh_config_file_connects_with_the_file_settings() {
    let tb = start(false);
    let dir = TempDir::new().unwrap();
    let path = write(dir.path(), "config", &host_block("build-1", &tb, ""));
    let ex = SshExecutor::from_ssh_config_file(&path, "build-1")
        .unwrap()
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", tb.sshd_log()));
    let run = ex
        .run("echo ok; echo $SWIFTIDE_SSH_TESTBED_ID")
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout()),
        format!("ok\n{}\n", tb.id())
    );
}

#[tokio::test]
async fn builder_settings_after_from_ssh_config_win() {
    let tb = start(false);
    let other = start(false);
    let dir = TempDir::new().unwrap();
    let path = write(dir.path(), "config", &host_block("build-1", &tb, ""));
    // The port of another sshd: its host key is not in the file's known_hosts.
    let err = SshExecutor::from_ssh_config_file(&path, "build-1")
        .unwrap()
        .port(other.port())
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownHostKey { port, .. } if *port == other.port()),
        "{err}"
    );
    // An explicit key replaces the file's identities (the unauthorized key is refused).
    let err = SshExecutor::from_ssh_config_file(&path, "build-1")
        .unwrap()
        .private_key_file(tb.unauthorized_private_key_path())
        .build()
        .await
        .unwrap_err();
    let only_explicit = format!(
        "publickey ({})",
        tb.unauthorized_private_key_path().display()
    );
    assert!(
        matches!(&err, Error::AuthRejected { tried, .. } if *tried == only_explicit),
        "{err}"
    );
}

#[tokio::test]
async fn strict_host_key_checking_from_the_file_is_enforced() {
    let tb = start(false);
    let dir = TempDir::new().unwrap();
    let empty = write(dir.path(), "empty_known_hosts", "");
    let block = |alias: &str, mode: &str| {
        host_block(alias, &tb, "")
            .replace(
                &tb.known_hosts_path().display().to_string(),
                &empty.display().to_string(),
            )
            .replace(
                "StrictHostKeyChecking yes",
                &format!("StrictHostKeyChecking {mode}"),
            )
    };
    let text = [
        block("strict", "yes"),
        block("ask", "ask"),
        block("new", "accept-new"),
        block("off", "no"),
    ]
    .concat();
    let path = write(dir.path(), "config", &text);
    for alias in ["strict", "ask"] {
        let err = SshExecutor::from_ssh_config_file(&path, alias)
            .unwrap()
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::UnknownHostKey { .. }),
            "{alias}: {err}"
        );
    }
    let ex = SshExecutor::from_ssh_config_file(&path, "off")
        .unwrap()
        .build()
        .await
        .unwrap();
    assert!(ex.run("true").await.is_ok());
    assert_eq!(
        std::fs::read_to_string(&empty).unwrap(),
        "",
        "no only accepts"
    );

    let ex = SshExecutor::from_ssh_config_file(&path, "new")
        .unwrap()
        .build()
        .await
        .unwrap();
    assert!(ex.run("true").await.is_ok());
    let recorded = std::fs::read_to_string(&empty).unwrap();
    assert!(
        recorded.contains(tb.host_public_key()),
        "accept-new records the key: {recorded:?}"
    );
}

#[tokio::test]
async fn connect_timeout_from_the_file_bounds_a_silent_server() {
    let tb = start(false);
    let dir = TempDir::new().unwrap();
    let path = write(
        dir.path(),
        "config",
        &host_block("slow", &tb, "  ConnectTimeout 1\n"),
    );
    tb.freeze().unwrap();
    let started = Instant::now();
    let err = SshExecutor::from_ssh_config_file(&path, "slow")
        .unwrap()
        .build()
        .await
        .unwrap_err();
    let took = started.elapsed();
    tb.thaw().unwrap();
    assert!(
        matches!(err, Error::Timeout { after, .. } if after == Duration::from_secs(1)),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

const CHILD_ENV: &str = "SWIFTIDE_SSH_CONFIG_CHILD";

/// `from_ssh_config` reads `$HOME/.ssh/config`: run in a child process of this test binary
/// with `HOME` pointing at a temporary directory (changing `HOME` in this process would
/// race with the other tests).
#[tokio::test]
async fn from_ssh_config_reads_the_users_ssh_config() {
    if let Ok(alias) = std::env::var(CHILD_ENV) {
        let ex = SshExecutor::from_ssh_config(&alias)
            .unwrap()
            .build()
            .await
            .unwrap();
        let run = ex.run("echo ok").await.unwrap();
        print!("child said {}", String::from_utf8_lossy(&run.stdout()));
        return;
    }
    let tb = start(false);
    let home = TempDir::new().unwrap();
    // Relative IdentityFile names and UserKnownHostsFile through `~`: copy the files in.
    let ssh = home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::copy(tb.private_key_path(), ssh.join("id_testbed")).unwrap();
    std::fs::copy(tb.known_hosts_path(), ssh.join("known_hosts")).unwrap();
    write(
        home.path(),
        ".ssh/config",
        &format!(
            "Host build-1\n  HostName {}\n  Port {}\n  User {}\n  \
             IdentityFile ~/.ssh/id_testbed\n  IdentitiesOnly yes\n",
            tb.host(),
            tb.port(),
            tb.user()
        ),
    );
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "from_ssh_config_reads_the_users_ssh_config",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "build-1")
        .env("HOME", home.path())
        .env_remove("SSH_AUTH_SOCK")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child said ok\n"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// Jump hosts
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn two_hop_chain_from_ssh_config() {
    let (b1, b2, target) = (start(true), start(true), start(false));
    let dir = TempDir::new().unwrap();
    let text = [
        host_block("target", &target, "  ProxyJump bastion1,bastion2\n"),
        host_block("bastion1", &b1, ""),
        host_block("bastion2", &b2, ""),
    ]
    .concat();
    let path = write(dir.path(), "config", &text);
    let ex = SshExecutor::from_ssh_config_file(&path, "target")
        .unwrap()
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", b1.sshd_log(), b2.sshd_log()));
    let run = ex
        .run("echo ok; echo $SWIFTIDE_SSH_TESTBED_ID")
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout()),
        format!("ok\n{}\n", target.id())
    );
    // Each bastion was asked to forward to the next host of the chain.
    assert!(
        b1.sshd_log().contains(&forward_line(b2.port())),
        "{}",
        b1.sshd_log()
    );
    assert!(
        b2.sshd_log().contains(&forward_line(target.port())),
        "{}",
        b2.sshd_log()
    );
    assert!(!b1.connection_pids().is_empty() && !b2.connection_pids().is_empty());
}

#[tokio::test]
async fn two_hop_chain_from_the_builder_shares_hops_and_closes_with_its_connections() {
    let (b1, b2, target) = (start(true), start(true), start(false));
    let ex = common::builder(&target)
        .jump_host(hop(&b1))
        .jump_host(hop(&b2))
        .max_connections(2)
        .channels_per_connection(1)
        .build()
        .await
        .unwrap();
    // Two concurrent commands with one channel per connection: two target connections. The
    // pool dials the second one only for a caller still waiting after two dial times, so the
    // commands outlast any dial on a loaded machine (0.5 s did not: 2 dials through two hops
    // under a load of 10 took longer).
    let (one, two) = tokio::join!(ex.run("sleep 3; echo one"), ex.run("sleep 3; echo two"));
    assert_eq!(one.unwrap().stdout(), b"one\n");
    assert_eq!(two.unwrap().stdout(), b"two\n");
    assert_eq!(ex.pool_stats().dials, 2, "{:?}", ex.pool_stats());
    let count = |tb: &Testbed, port: u16| tb.sshd_log().matches(&forward_line(port)).count();
    assert_eq!(
        count(&b2, target.port()),
        2,
        "one forward per target connection"
    );
    assert_eq!(
        count(&b1, b2.port()),
        1,
        "both target connections share one chain of hop connections"
    );

    // The hop connections live exactly as long as the target connections through them.
    drop(ex);
    for (name, tb) in [("target", &target), ("bastion2", &b2), ("bastion1", &b1)] {
        wait_for(
            &format!("{name}'s connections to close"),
            Duration::from_secs(10),
            || tb.connection_pids().is_empty(),
        )
        .await;
    }
}

#[tokio::test]
async fn a_hop_inherits_the_targets_user_keys_and_host_key_policy() {
    let (b1, target) = (start(false), start(false));
    let ex = SshExecutor::builder()
        .host(target.host())
        .port(target.port())
        .user(target.user())
        // The bastion's key is refused by the target, then the target's key works.
        .private_key_file(b1.private_key_path())
        .private_key_file(target.private_key_path())
        .host_key_policy(HostKeyPolicy::Strict {
            known_hosts: vec![
                b1.known_hosts_path().to_owned(),
                target.known_hosts_path().to_owned(),
            ],
        })
        .jump_host(JumpHost::new(b1.host()).port(b1.port()))
        .build()
        .await
        .unwrap();
    assert_eq!(ex.run("echo ok").await.unwrap().stdout(), b"ok\n");
    assert!(
        !b1.connection_pids().is_empty(),
        "the bastion carries the connection"
    );
}

#[tokio::test]
async fn a_wrong_host_key_on_the_middle_hop_is_a_typed_error_naming_it() {
    let (b1, b2, target) = (start(false), start(false), start(false));
    let dir = TempDir::new().unwrap();
    // Bastion2's entry carries the target's key: a man in the middle, as far as we know.
    let forged = write(
        dir.path(),
        "known_hosts",
        &format!(
            "[{}]:{} {}\n",
            b2.host(),
            b2.port(),
            target.host_public_key()
        ),
    );
    let err = common::builder(&target)
        .jump_host(hop(&b1))
        .jump_host(hop(&b2).known_hosts_file(&forged))
        .build()
        .await
        .unwrap_err();
    match &err {
        Error::HostKeyMismatch {
            host, port, file, ..
        } => {
            assert_eq!((host.as_str(), *port), ("127.0.0.1", b2.port()), "{err}");
            assert_eq!(Path::new(file), forged);
        }
        other => panic!("expected HostKeyMismatch for bastion2, got {other}"),
    }
    assert!(
        b1.sshd_log().contains("Accepted publickey"),
        "the first hop was used"
    );
    for tb in [&b2, &target] {
        assert!(
            !tb.sshd_log().contains("Accepted publickey"),
            "nothing authenticated past the forged hop"
        );
    }
}

#[tokio::test]
async fn forwarding_failures_are_typed_and_name_the_jump_host() {
    // Nothing listens on this port once the listener is dropped.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let b1 = start(false);
    let err = SshExecutor::builder()
        .host("127.0.0.1")
        .port(closed_port)
        .user(b1.user())
        .insecure_accept_any_host_key()
        .private_key_file(b1.private_key_path())
        .jump_host(hop(&b1))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::JumpForward { jump_port, port, reason, .. }
            if *jump_port == b1.port() && *port == closed_port && reason.contains("connect failed")),
        "{err}"
    );

    let no_forwarding = Testbed::builder()
        .sshd_config_line("AllowTcpForwarding no")
        .start()
        .unwrap();
    let target = start(false);
    let err = common::builder(&target)
        .jump_host(hop(&no_forwarding))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::JumpForward { jump_port, reason, .. }
            if *jump_port == no_forwarding.port() && reason.contains("prohibited")),
        "{err}"
    );
}

/// Like `ssh`, an `IdentityFile` with a `<file>-cert.pub` next to it, or with a matching
/// `CertificateFile`, is offered as that certificate (here the only way in: the key itself is
/// not authorized), and a certificate for another key is skipped instead of failing the
/// login.
#[tokio::test]
async fn identity_files_pick_up_their_certificates_like_ssh() {
    let home = TempDir::new().unwrap();
    let ca = common::user_ca(home.path());
    let tb = Testbed::builder()
        .sshd_config_line(format!("TrustedUserCAKeys {}.pub", ca.display()))
        .start()
        .unwrap();
    let ssh_dir = home.path().join(".ssh");
    std::fs::create_dir_all(&ssh_dir).unwrap();
    let copy_key = |from: &Path, name: &str| {
        let to = ssh_dir.join(name);
        std::fs::copy(from, &to).unwrap();
        to
    };
    let certified = copy_key(tb.unauthorized_private_key_path(), "id_certified");
    let issued = common::certify(&ca, &certified, tb.user(), "certified");
    std::fs::rename(&issued, ssh_dir.join("id_certified-cert.pub")).unwrap();
    let stale = copy_key(tb.private_key_path(), "id_stale");
    let other = common::certify(&ca, &certified, tb.user(), "other");
    std::fs::rename(&other, ssh_dir.join("id_stale-cert.pub")).unwrap();
    // `CertificateFile` names a certificate kept elsewhere; it is paired with the identity it
    // certifies, and one for another key (`other`) is skipped.
    let explicit = copy_key(tb.unauthorized_private_key_path(), "id_explicit");
    let issued = common::certify(&ca, &explicit, tb.user(), "explicit");
    let kept_elsewhere = home.path().join("issued/explicit.cert");
    std::fs::create_dir_all(kept_elsewhere.parent().unwrap()).unwrap();
    std::fs::rename(&issued, &kept_elsewhere).unwrap();
    let unrelated = common::certify(&ca, tb.private_key_path(), tb.user(), "unrelated");
    let certificate_lines = format!(
        "  CertificateFile {}\n  CertificateFile {}\n",
        unrelated.display(),
        kept_elsewhere.display()
    );

    for (alias, identity, extra) in [
        ("certified", &certified, String::new()),
        ("stale", &stale, String::new()),
        ("explicit", &explicit, certificate_lines),
    ] {
        let block = format!(
            "Host {alias}\n  HostName {}\n  Port {}\n  User {}\n  IdentityFile {}\n  \
             IdentitiesOnly yes\n  UserKnownHostsFile {}\n{extra}",
            tb.host(),
            tb.port(),
            tb.user(),
            identity.display(),
            tb.known_hosts_path().display(),
        );
        let config = write(home.path(), &format!("config-{alias}"), &block);
        let ex = SshExecutor::from_ssh_config_file(&config, alias)
            .unwrap()
            .build()
            .await
            .unwrap_or_else(|e| panic!("{alias}: {e}\n{}", tb.sshd_log()));
        assert_eq!(
            ex.run("echo ok").await.unwrap().stdout(),
            b"ok\n",
            "{alias}"
        );
    }
    let log = tb.sshd_log();
    assert_eq!(log.matches("ED25519-CERT").count(), 2, "{log}");
}

// ---------------------------------------------------------------------------------------
// Hostile and generated files: durations, fan-out, nesting (issue 19, part 5)
// ---------------------------------------------------------------------------------------

/// How long resolving one hostile file may take: the fixed resolver needs milliseconds; the
/// old one took seconds for each case below (debug build). Generous for a loaded machine.
const HOSTILE_FILE_BOUND: Duration = Duration::from_secs(2);

/// Loads `text` and resolves `alias`, returning the outcome and how long both took.
fn load_and_resolve(text: &str, alias: &str) -> (Result<HostConfig, Error>, Duration) {
    let home = TempDir::new().unwrap();
    let path = write(home.path(), "config", text);
    let started = Instant::now();
    let outcome = SshConfig::load_with_home(&path, home.path()).and_then(|c| c.resolve(alias));
    (outcome, started.elapsed())
}

#[test]
fn time_values_longer_than_openssh_accepts_are_refused_with_the_line() {
    // `ssh -G` says "invalid time value" for each (convtime's limit is INT_MAX seconds);
    // these used to be accepted and panicked later (Instant + Duration overflow, in the
    // pool's dial, the jump chain's timeout times the hop count, and russh's keepalive).
    for line in [
        "ConnectTimeout 30500568904943w",
        "ConnectTimeout 2147483648",
        "ServerAliveInterval 18446744073709551615",
        "ServerAliveInterval 3550w5d3h14m8s",
    ] {
        let error = load_error(&format!("Host a\n  ProxyJump b,c\nHost *\n  {line}\n"));
        match &error {
            Error::SshConfig {
                line: Some(4),
                reason,
                ..
            } => assert!(
                reason.contains("longer than 2147483647 seconds"),
                "{line}: {reason}"
            ),
            other => panic!("{line}: {other:?}"),
        }
    }
    // The longest accepted value resolves and builds (no panic anywhere on the way).
    let (config, _home) = load(
        "Host a\n  ProxyJump b,c\n  ConnectTimeout 2147483647\n  ServerAliveInterval 3550w5d3h14m7s\n",
    );
    let host = resolve(&config, "a");
    assert_eq!(
        host.connect_timeout,
        Some(Duration::from_secs(i32::MAX as u64))
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    assert!(host.to_builder().unwrap().user("u").build_lazy().is_ok());
}

#[test]
fn builder_durations_too_long_for_the_clock_are_typed_errors_naming_the_setting() {
    let base = || SshExecutor::builder().host("127.0.0.1").user("u");
    let max = Duration::from_secs(i32::MAX as u64);
    let over = max + Duration::from_nanos(1);
    type Set = fn(
        swiftide_ssh_executor::SshExecutorBuilder,
        Duration,
    ) -> swiftide_ssh_executor::SshExecutorBuilder;
    let setters: [(&str, Set); 7] = [
        ("connect_timeout", |b, d| b.connect_timeout(d)),
        ("pool_wait_timeout", |b, d| b.pool_wait_timeout(d)),
        ("idle_timeout", |b, d| b.idle_timeout(Some(d))),
        ("max_connection_lifetime", |b, d| {
            b.max_connection_lifetime(Some(d))
        }),
        ("keepalive_interval", |b, d| b.keepalive_interval(Some(d))),
        ("kill_grace", |b, d| b.kill_grace(d)),
        ("default_timeout", |b, d| b.default_timeout(Some(d))),
    ];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    for (name, set) in setters {
        for value in [over, Duration::MAX] {
            match set(base(), value).build_lazy() {
                Err(Error::DurationTooLong {
                    setting,
                    value: v,
                    max: m,
                }) => {
                    assert_eq!((setting, v, m), (name, value, max));
                    assert!(
                        Error::DurationTooLong {
                            setting,
                            value: v,
                            max: m
                        }
                        .to_string()
                        .starts_with(name)
                    );
                }
                other => panic!("{name} = {value:?}: {other:?}"),
            }
        }
        assert!(set(base(), max).build_lazy().is_ok(), "{name} = max");
    }
}

/// Every duration at the longest accepted value, through two jump hops: connecting and
/// running a command must neither panic nor wait on any of them; a per-command timeout
/// too long for the clock (`Duration::MAX`) means no timeout.
#[tokio::test]
async fn the_longest_durations_connect_and_run_through_two_hops() {
    let (bastion, target) = (start(false), start(false));
    let max = Duration::from_secs(i32::MAX as u64);
    let executor = common::builder(&target)
        .jump_host(hop(&bastion))
        .jump_host(hop(&bastion))
        .connect_timeout(max)
        .pool_wait_timeout(max)
        .idle_timeout(Some(max))
        .max_connection_lifetime(Some(max))
        .keepalive_interval(Some(max))
        .kill_grace(max)
        .default_timeout(Some(max))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", target.sshd_log()));
    let run = executor.run("echo ok").await.unwrap();
    assert_eq!(run.stdout(), b"ok\n");
    let options = swiftide_ssh_executor::ExecOptions::default().timeout(Duration::MAX);
    let run = executor
        .execute("echo unbounded", options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(run.stdout(), b"unbounded\n");
    assert!(
        matches!(run.status, swiftide_ssh_executor::ExitStatus::Code(0)),
        "{:?}",
        run.status
    );
    // The command drive's timeout arithmetic with the longest per-command timeout the
    // clock can still hold, and a kill on a short one, with the longest settings around.
    let options = swiftide_ssh_executor::ExecOptions::default().timeout(Duration::from_millis(300));
    let run = executor
        .execute("sleep 30", options, &mut |_| {})
        .await
        .unwrap();
    assert!(
        matches!(
            run.status,
            swiftide_ssh_executor::ExitStatus::TimedOut { .. }
        ),
        "{:?}",
        run.status
    );
    // The same through swiftide: a `Command` timeout of `Duration::MAX` is no timeout.
    {
        use swiftide_core::ToolExecutor;
        let cmd = swiftide_core::Command::shell("echo swiftide").with_timeout(Duration::MAX);
        let output = executor.exec_cmd(&cmd).await.unwrap();
        assert_eq!(output.to_string().trim(), "swiftide");
    }
    // A fleet deadline too far for the clock (its `began + limit` used to panic) is none.
    let report = swiftide_ssh_executor::Fleet::new([executor])
        .per_host_timeout(Duration::MAX)
        .run("echo fleet", |_| {})
        .await;
    assert_eq!(report.summary().succeeded, 1, "{report:?}");
    let output = report.results[0].outcome.as_ref().unwrap().stdout();
    assert_eq!(output, b"fleet\n");
}

#[test]
fn proxy_jump_fan_out_resolves_only_the_first_hops_chain() {
    // Level i jumps through level i+1, listed 8 times: 7 levels, 333 bytes. Only the first
    // hop's own ProxyJump counts (the rest are thrown away by ssh too), so resolving every
    // hop's chain grew as 8^7 (7.6 s in a debug build).
    let mut text = String::new();
    for level in 0..7 {
        let next = format!("l{}", level + 1);
        text += &format!("Host l{level}\n ProxyJump {}\n", vec![next; 8].join(","));
    }
    let (outcome, took) = load_and_resolve(&text, "l0");
    let host = outcome.unwrap();
    // l7 is reached directly; every level adds its 8 hops after its first hop's chain.
    assert_eq!(host.proxy_jump.len(), 7 * 8);
    assert_eq!(host.proxy_jump[0].alias, "l7");
    assert_eq!(host.proxy_jump.last().unwrap().alias, "l1");
    assert!(host.proxy_jump.iter().all(|h| h.proxy_jump.is_empty()));
    eprintln!("fan-out 8, depth 7: {took:?}");
    assert!(took < HOSTILE_FILE_BOUND, "took {took:?}");

    // A chain longer than 64 hops is refused, however it is spelled.
    let long = vec!["h"; 65].join(",");
    let (outcome, _) = load_and_resolve(&format!("Host a\n ProxyJump {long}\n"), "a");
    assert!(
        matches!(&outcome, Err(Error::Config { reason }) if reason.contains("more than 64 hops")),
        "{outcome:?}"
    );
    let (outcome, _) = load_and_resolve(
        "Host a\n ProxyJump b,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x\n\
         Host b\n ProxyJump c,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y\n",
        "a",
    );
    assert!(
        matches!(&outcome, Err(Error::Config { reason }) if reason.contains("more than 64 hops")),
        "{outcome:?}"
    );
}

#[test]
fn nested_include_scopes_with_huge_pattern_lists_stay_fast() {
    // 120 hosts, then one Host with 5,000 patterns that includes its own file: OpenSSH
    // refuses it (16 levels); copying every enclosing pattern list at every level took 4 s.
    let home = TempDir::new().unwrap();
    let config = home.path().join("config");
    let mut text = String::new();
    for i in 0..120 {
        text += &format!("Host h{i}\n User u{i}\n");
    }
    let patterns: Vec<String> = (0..5000).map(|i| format!("p{i}")).collect();
    text += &format!(
        "Host {} h7\n Include {}\n",
        patterns.join(" "),
        config.display()
    );
    write(home.path(), "config", &text);
    let started = Instant::now();
    let error = SshConfig::load_with_home(&config, home.path()).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&error, Error::SshConfig { line: Some(242), reason, .. }
            if reason.contains("nested too deeply")),
        "{error:?}"
    );
    eprintln!("self-include under 5,000 patterns, 120 hosts: {took:?}");
    assert!(took < HOSTILE_FILE_BOUND, "took {took:?}");

    // The same without the loop: 15 nested files, each a 5,000-pattern Host block around
    // the next include; resolving walks each scope once per host.
    let home = TempDir::new().unwrap();
    for level in 0..15 {
        let mut text = String::new();
        for i in 0..60 {
            text += &format!("Host h{i}\n User u{level}-{i}\n");
        }
        text += &format!(
            "Host {} h1\n Include level{}\n",
            patterns.join(" "),
            level + 1
        );
        write(home.path(), &format!(".ssh/level{level}"), &text);
    }
    write(home.path(), ".ssh/level15", "Port 2222\n");
    let started = Instant::now();
    let config = SshConfig::load_with_home(home.path().join(".ssh/level0"), home.path()).unwrap();
    let host = resolve(&config, "h1");
    let took = started.elapsed();
    assert_eq!((host.user.as_deref(), host.port), (Some("u0-1"), 2222));
    assert_eq!(resolve(&config, "p4999").port, 2222);
    assert_eq!(resolve(&config, "h2").port, 22);
    eprintln!("15 nested 5,000-pattern scopes: {took:?}");
    assert!(took < HOSTILE_FILE_BOUND, "took {took:?}");
}

#[test]
fn an_include_of_thousands_of_files_and_itself_fails_fast() {
    // One Include line naming 5,000 (missing) files and its own file: globbed at each of
    // 16 levels before, 2 s.
    let home = TempDir::new().unwrap();
    let config = home.path().join(".ssh/config");
    let names: Vec<String> = (0..5000).map(|i| format!("missing{i}")).collect();
    write(
        home.path(),
        ".ssh/config",
        &format!("Host a\n User u\nInclude {} config\n", names.join(" ")),
    );
    let started = Instant::now();
    let error = SshConfig::load_with_home(&config, home.path()).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&error, Error::SshConfig { line: Some(3), reason, .. }
            if reason.contains("nested too deeply")),
        "{error:?}"
    );
    eprintln!("Include of 5,000 files and itself: {took:?}");
    assert!(took < HOSTILE_FILE_BOUND, "took {took:?}");

    // Fan-out without a loop (each of 12 levels includes the next twice: 4,095 reads) is
    // bounded by the total number of included files.
    let home = TempDir::new().unwrap();
    for level in 0..12 {
        write(
            home.path(),
            &format!(".ssh/f{level}"),
            &format!("Include f{next} f{next}\n", next = level + 1),
        );
    }
    write(home.path(), ".ssh/f12", "User u\n");
    let started = Instant::now();
    let error = SshConfig::load_with_home(home.path().join(".ssh/f0"), home.path()).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&error, Error::SshConfig { reason, .. } if reason.contains("more than 1024 files")),
        "{error:?}"
    );
    assert!(took < HOSTILE_FILE_BOUND, "took {took:?}");
}

/// Lines a generated config is made of: every supported keyword with good, huge and broken
/// values, fan-out, self and sibling includes, patterns.
fn random_line(rng: &mut rand::rngs::StdRng, hosts: &[&str]) -> String {
    use rand::Rng;
    let host = |rng: &mut rand::rngs::StdRng| hosts[rng.random_range(0..hosts.len())];
    let time = |rng: &mut rand::rngs::StdRng| {
        [
            "0",
            "5",
            "1h30m",
            "2147483647",
            "2147483648",
            "30500568904943w",
            "18446744073709551615",
            "3550w5d3h14m7s",
            "x",
            "",
        ][rng.random_range(0..10)]
    };
    match rng.random_range(0..14) {
        0 | 1 => {
            let n = rng.random_range(1..40);
            let patterns: Vec<String> = (0..n)
                .map(|_| {
                    let h = host(rng);
                    match rng.random_range(0..4) {
                        0 => format!("!{h}"),
                        1 => format!("{h}*"),
                        2 => "*".to_owned(),
                        _ => h.to_owned(),
                    }
                })
                .collect();
            format!("Host {}", patterns.join(" "))
        }
        2 | 3 => {
            let n = rng.random_range(1..10);
            let hops: Vec<String> = (0..n).map(|_| host(rng).to_owned()).collect();
            format!("ProxyJump {}", hops.join(","))
        }
        4 => {
            let n = rng.random_range(1..50);
            let files: Vec<String> = (0..n)
                .map(|_| {
                    ["config", "a", "b", "missing", "*", "a*"][rng.random_range(0..6)].to_owned()
                })
                .collect();
            format!("Include {}", files.join(" "))
        }
        5 => format!("ConnectTimeout {}", time(rng)),
        6 => format!("ServerAliveInterval {}", time(rng)),
        7 => format!(
            "ServerAliveCountMax {}",
            ["3", "0", "18446744073709551615", "x"][rng.random_range(0..4)]
        ),
        8 => format!(
            "Port {}",
            ["22", "2222", "0", "65536"][rng.random_range(0..4)]
        ),
        9 => format!("HostName %h.{}", host(rng)),
        10 => format!("User u{}", rng.random_range(0..5)),
        11 => "Match all".to_owned(),
        12 => format!(
            "ProxyCommand {}",
            ["none", "nc %h %p"][rng.random_range(0..2)]
        ),
        _ => format!("IdentityFile ~/.ssh/id_{}", host(rng)),
    }
}

/// One of the hostile shapes above: ProxyJump fan-out, a self-include under many
/// patterns, an include of many names and itself.
fn hostile_seed(rng: &mut rand::rngs::StdRng) -> String {
    use rand::Rng;
    let mut text = String::new();
    match rng.random_range(0..3) {
        0 => {
            for level in 0..7 {
                let next = format!("l{}", level + 1);
                text += &format!("Host l{level} a\n ProxyJump {}\n", vec![next; 8].join(","));
            }
        }
        1 => {
            let patterns: Vec<String> = (0..500).map(|i| format!("p{i}")).collect();
            text += &format!(
                "Host {} a b\n Include config a b\n User u\n",
                patterns.join(" ")
            );
        }
        _ => {
            let names: Vec<String> = (0..500).map(|i| format!("missing{i}")).collect();
            text += &format!(
                "Host a\n ConnectTimeout 9\nInclude {} config a\n",
                names.join(" ")
            );
        }
    }
    text
}

/// A few byte-level edits: separators, digits, `*`, `,`, newlines, deletions.
fn mutate_config(rng: &mut rand::rngs::StdRng, text: &str) -> String {
    use rand::Rng;
    const INSERTS: &[&str] = &[
        " ",
        "\n",
        ",",
        "*",
        "=",
        "9",
        "\"",
        "#",
        "!",
        "%",
        "w",
        "\n Include config\n",
    ];
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..rng.random_range(1..6) {
        let at = rng.random_range(0..=bytes.len());
        if rng.random_bool(0.7) {
            let insert = INSERTS[rng.random_range(0..INSERTS.len())].as_bytes();
            bytes.splice(at..at, insert.iter().copied());
        } else if at < bytes.len() {
            bytes.remove(at);
        }
    }
    String::from_utf8(bytes).unwrap()
}

/// 300 seeded configurations, random lines or mutated hostile seeds (with includes of each
/// other and of themselves):
/// loading and resolving every alias never panics and answers within the bound, and a
/// resolved host builds or fails with a typed error, never a panic.
#[test]
fn random_configs_never_panic_and_answer_in_bounded_time() {
    use rand::{Rng, SeedableRng};
    let hosts = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_5c0f);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    let (mut loaded, mut resolved, mut built) = (0, 0, 0);
    let mut slowest = Duration::ZERO;
    for case in 0..300 {
        let home = TempDir::new().unwrap();
        for name in ["config", "a", "b"] {
            let lines: Vec<String> = (0..rng.random_range(1..30))
                .map(|_| random_line(&mut rng, &hosts))
                .collect();
            let mut text = lines.join("\n") + "\n";
            // Every other case: a hostile seed (fan-out, self-include), mutated.
            if case % 2 == 1 {
                let seed = hostile_seed(&mut rng);
                text = mutate_config(&mut rng, &seed);
            }
            write(home.path(), &format!(".ssh/{name}"), &text);
        }
        let started = Instant::now();
        let config = SshConfig::load_with_home(home.path().join(".ssh/config"), home.path());
        if let Ok(config) = config {
            loaded += 1;
            for alias in hosts {
                if let Ok(host) = config.resolve(alias) {
                    resolved += 1;
                    if let Ok(builder) = host.to_builder()
                        && builder.user("u").build_lazy().is_ok()
                    {
                        built += 1;
                    }
                }
            }
        }
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert!(took < HOSTILE_FILE_BOUND, "case {case} took {took:?}");
    }
    eprintln!("loaded {loaded}, resolved {resolved}, built {built}; slowest {slowest:?}");
    assert!(
        loaded > 20 && resolved > 50 && built > 20,
        "the sample must reach every stage"
    );
}
