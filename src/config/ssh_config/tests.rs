//! Splitting lines, times and token expansion; matching, `Include` and resolving whole
//! files are exercised from real files (and real sshd testbeds) in tests/ssh_config.rs.

use std::path::{Path, PathBuf};

use super::lex::split_line;
use super::setting::parse_time;
use super::tokens::{Tokens, expand, expand_path};

#[test]
fn lines_split_like_argv_split() {
    let split = |line: &str| split_line(line).unwrap_or_default();
    assert_eq!(
        split("Port=2200"),
        Some(("Port".into(), vec!["2200".into()]))
    );
    assert_eq!(
        split("  Port = 2200 "),
        Some(("Port".into(), vec!["2200".into()]))
    );
    assert_eq!(
        split("Port\t2200"),
        Some(("Port".into(), vec!["2200".into()]))
    );
    assert_eq!(
        split(r#"IdentityFile "/a b/key" # comment"#),
        Some(("IdentityFile".into(), vec!["/a b/key".into()]))
    );
    assert_eq!(
        split(r"Host a\ b 'c d' e#f"),
        Some((
            "Host".into(),
            vec!["a b".into(), "c d".into(), "e#f".into()]
        ))
    );
    assert_eq!(split("  # comment"), None);
    assert_eq!(split(""), None);
    assert!(split_line("User \"open").is_err());
}

#[test]
fn times_parse_like_convtime() {
    let t = |s: &str| parse_time(s).map(|d| d.as_secs());
    assert_eq!(t("90"), Ok(90));
    assert_eq!(t("30s"), Ok(30));
    assert_eq!(t("5M"), Ok(300));
    assert_eq!(t("1h30m"), Ok(5400));
    assert_eq!(t("1w"), Ok(604_800));
    for bad in ["", "x", "1x", "m", "-1"] {
        assert!(parse_time(bad).is_err(), "{bad:?}");
    }
    // convtime's limit, INT_MAX seconds, checked against `ssh -G` (9.2p1): one more
    // second, in any spelling, is "invalid time value" there.
    assert_eq!(t("2147483647"), Ok(2_147_483_647));
    assert_eq!(t("3550w5d3h14m7s"), Ok(2_147_483_647));
    for long in [
        "2147483648",
        "30500568904943w",
        "18446744073709551615",
        "99999999999999999999999",
        "3550w5d3h14m8s",
    ] {
        let error = parse_time(long).unwrap_err();
        assert!(
            error.contains("longer than 2147483647 seconds"),
            "{long}: {error}"
        );
    }
}

#[test]
fn tokens_and_env_expand() {
    let tokens = Tokens {
        alias: "b1",
        host_name: "build-1.internal",
        port: 2200,
        remote_user: Some("ci"),
        local_user: Some("me"),
        home: Some(Path::new("/home/me")),
    };
    let path = expand_path("~/.ssh/%r@%h:%p-%n-%u-%%-%d", &tokens);
    assert_eq!(
        path,
        Ok(PathBuf::from(
            "/home/me/.ssh/ci@build-1.internal:2200-b1-me-%-/home/me"
        ))
    );
    assert!(expand_path("%C", &tokens).is_err());
    assert!(expand_path("%", &tokens).is_err());
    assert!(expand_path("~other/x", &tokens).is_err());
    assert!(expand_path("${SWIFTIDE_SSH_SURELY_UNSET_VAR}", &tokens).is_err());
    assert!(expand_path("${UNTERMINATED", &tokens).is_err());
    assert_eq!(
        expand_path("$HOME/plain", &tokens),
        Ok(PathBuf::from("$HOME/plain"))
    );
    assert!(
        expand("%p", "h", &tokens, false).is_err(),
        "HostName takes %h only"
    );
}
