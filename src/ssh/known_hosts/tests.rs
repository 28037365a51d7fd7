//! The lookup against OpenSSH's own answers (`ssh-keygen -F`, `-l`), parsing edge cases,
//! the name index against matching every line, the cache, and appends.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)] // Tests may fail loudly.

use std::fs::OpenOptions;
use std::io::Write;
use std::process::Command;

use data_encoding::BASE64;
use hmac::{Hmac, KeyInit, Mac};
use russh::keys::{Algorithm, PrivateKey};
use sha1::Sha1;

use super::index::{Cached, Stamp, stamp};
use super::parse::{Marker, hash_host};
use super::*;

const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";

thread_local! {
    /// How many times this thread parsed a cached file list from the start.
    pub(super) static FULL_PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// How many times this thread read a grown file's start to compare it.
    pub(super) static GROWTH_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn growth_reads() -> usize {
    GROWTH_READS.with(std::cell::Cell::get)
}

fn full_parses() -> usize {
    FULL_PARSES.with(std::cell::Cell::get)
}

/// Fixed keys generated once with `ssh-keygen -t ecdsa` / `-t rsa -b 2048`, so tests
/// need not generate slow RSA keys.
const ECDSA_LINE: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBu/N3efYo5Qp9p4UKP3tM0EdSFxjrlnRTipU/0tKWB9Q5TG3DkjOlxTCn+w0zmp6uyKyZWwUABLjIYKeSF/0dc= root@vm";
const RSA_LINE: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCWDcAokmqTFuvhCpocPKqQfesQ+Yvf115KBv92R6BbGkVmMYJzHK54mvs0HC52MAyXoO8cefAibN3nVdw2Pu4vqYstcJ58QA5Oc2j4b9q1llVp4SO6RYLwurccbBWTlLgQaf4o29UNqh7RBdvmbMEe3SUQO5hgGFP6ycXFSdPwQPKFnOp24LzcvA10+16nr40i/yuhvAWQ+7euurlMrSCca0GgPDNN6y2qaSiGsC5V1e/IyJNHNgosdPNKYg95COBgu0z0b9gP2EulcLZaAnoW+fgN6fKUQTdSQlo9RYHrTUcQXgbAE6++/D8XWz9jkmM7Xhvv4FfYXnrqI37QnF+/ root@vm";

fn ed25519() -> PublicKey {
    let mut rng = russh::keys::key::safe_rng();
    PrivateKey::random(&mut rng, Algorithm::Ed25519)
        .unwrap()
        .public_key()
        .clone()
}

fn ecdsa() -> PublicKey {
    PublicKey::from_openssh(ECDSA_LINE).unwrap()
}

fn rsa() -> PublicKey {
    PublicKey::from_openssh(RSA_LINE).unwrap()
}

/// `keytype base64` of a key, without comment.
fn key_text(key: &PublicKey) -> String {
    format!(
        "{} {}",
        key.algorithm().as_str(),
        BASE64.encode(&key.to_bytes().unwrap())
    )
}

/// The key type and the base64 of a key, apart.
fn type_and_base64(key: &PublicKey) -> (String, String) {
    let text = key_text(key);
    let (kind, b64) = text.split_once(' ').unwrap();
    (kind.to_owned(), b64.to_owned())
}

fn line(hosts: &str, key: &PublicKey) -> String {
    format!("{hosts} {}\n", key_text(key))
}

fn check(text: &str, host: &str, port: u16, key: &PublicKey) -> Verdict {
    KnownHosts::parse(text).check(host, port, key)
}

/// The OpenSSH cross-checks are part of the suite: a missing ssh-keygen fails them
/// instead of skipping them silently.
fn have_ssh_keygen() -> bool {
    assert!(
        Path::new(SSH_KEYGEN).exists(),
        "{SSH_KEYGEN} is required (apt-get install -y openssh-client)"
    );
    true
}

/// Whether `ssh-keygen -F name -f file` finds the name (exit status 0).
fn openssh_finds(file: &Path, name: &str) -> bool {
    let out = Command::new(SSH_KEYGEN)
        .arg("-F")
        .arg(name)
        .arg("-f")
        .arg(file)
        .output()
        .unwrap();
    out.status.success()
}

/// Number of lines `ssh-keygen -l -f file` accepts as keys.
fn openssh_valid_lines(file: &Path) -> usize {
    let out = Command::new(SSH_KEYGEN)
        .arg("-l")
        .arg("-f")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().lines().count()
}

/// Assert that for every (host, port), our verdict says "some line matches" exactly
/// when OpenSSH finds the lookup name in the file. Only valid for files without
/// marker lines.
fn cross_check(text: &str, probes: &[(&str, u16)], key: &PublicKey) {
    if !have_ssh_keygen() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("known_hosts");
    std::fs::write(&file, text).unwrap();
    let hosts = KnownHosts::load(&file).unwrap();
    for &(host, port) in probes {
        let ours = hosts.check(host, port, key) != Verdict::Unknown;
        // `ssh` lowercases before looking up; `ssh-keygen -F` does not.
        let name = lookup_name(host, port).to_ascii_lowercase();
        assert_eq!(
            ours,
            openssh_finds(&file, &name),
            "disagreement with ssh-keygen -F {name} on:\n{text}"
        );
    }
}

#[test]
fn exact_name() {
    let key = ed25519();
    let text = line("example.com", &key);
    assert_eq!(check(&text, "example.com", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "example.org", 22, &key), Verdict::Unknown);
    assert_eq!(check(&text, "www.example.com", 22, &key), Verdict::Unknown);
    assert_eq!(check(&text, "example.co", 22, &key), Verdict::Unknown);
    cross_check(
        &text,
        &[("example.com", 22), ("example.org", 22), ("example.co", 22)],
        &key,
    );
}

#[test]
fn lookup_name_brackets_non_default_ports() {
    assert_eq!(lookup_name("h", 22), "h");
    assert_eq!(lookup_name("h", 0), "h");
    assert_eq!(lookup_name("h", 2222), "[h]:2222");
    assert_eq!(lookup_name("::1", 2222), "[::1]:2222");
}

#[test]
fn ports() {
    let key = ed25519();
    let plain = line("example.com", &key);
    assert_eq!(check(&plain, "example.com", 22, &key), Verdict::Trusted);
    assert_eq!(check(&plain, "example.com", 2222, &key), Verdict::Unknown);

    let bracketed = line("[example.com]:2222", &key);
    assert_eq!(
        check(&bracketed, "example.com", 2222, &key),
        Verdict::Trusted
    );
    assert_eq!(check(&bracketed, "example.com", 22, &key), Verdict::Unknown);
    assert_eq!(
        check(&bracketed, "example.com", 2223, &key),
        Verdict::Unknown
    );

    // `[host]:22` is never looked up: port 22 uses the bare name.
    let bracketed_22 = line("[example.com]:22", &key);
    assert_eq!(
        check(&bracketed_22, "example.com", 22, &key),
        Verdict::Unknown
    );

    let wild = line("[127.0.0.*]:2222", &key);
    assert_eq!(check(&wild, "127.0.0.5", 2222, &key), Verdict::Trusted);
    assert_eq!(check(&wild, "127.0.0.5", 22, &key), Verdict::Unknown);
    assert_eq!(check(&wild, "127.0.1.5", 2222, &key), Verdict::Unknown);

    for text in [&plain, &bracketed, &bracketed_22, &wild] {
        cross_check(
            text,
            &[
                ("example.com", 22),
                ("example.com", 2222),
                ("127.0.0.5", 2222),
                ("127.0.0.5", 22),
            ],
            &key,
        );
    }
}

#[test]
fn wildcards() {
    let key = ed25519();
    let text = line("*.example.com,host?", &key);
    assert_eq!(check(&text, "a.example.com", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "a.b.example.com", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "example.com", 22, &key), Verdict::Unknown);
    assert_eq!(check(&text, "host1", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "host", 22, &key), Verdict::Unknown);
    assert_eq!(check(&text, "host12", 22, &key), Verdict::Unknown);
    // `*` at the top level also matches bracketed names.
    let star = line("*", &key);
    assert_eq!(check(&star, "anything", 2222, &key), Verdict::Trusted);
    cross_check(
        &text,
        &[
            ("a.example.com", 22),
            ("a.b.example.com", 22),
            ("example.com", 22),
            ("host1", 22),
            ("host", 22),
            ("host12", 22),
            ("host1", 2222),
        ],
        &key,
    );
}

#[test]
fn negation() {
    let key = ed25519();
    let text = line("*.example.com,!bad.example.com", &key);
    assert_eq!(check(&text, "good.example.com", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "bad.example.com", 22, &key), Verdict::Unknown);
    // Order does not matter.
    let text2 = line("!bad.example.com,*.example.com", &key);
    assert_eq!(check(&text2, "bad.example.com", 22, &key), Verdict::Unknown);
    assert_eq!(
        check(&text2, "good.example.com", 22, &key),
        Verdict::Trusted
    );
    // Only negated patterns never match anything.
    let only_neg = line("!bad.example.com", &key);
    assert_eq!(
        check(&only_neg, "good.example.com", 22, &key),
        Verdict::Unknown
    );
    // A negated line does not hide other lines for the host.
    let both = format!("{text}{}", line("bad.example.com", &key));
    assert_eq!(check(&both, "bad.example.com", 22, &key), Verdict::Trusted);
    for t in [&text, &text2, &only_neg] {
        cross_check(
            t,
            &[("good.example.com", 22), ("bad.example.com", 22)],
            &key,
        );
    }
}

#[test]
fn case_insensitive() {
    let key = ed25519();
    let text = line("Example.COM,[Other.Example.com]:2222", &key);
    assert_eq!(check(&text, "example.com", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "EXAMPLE.com", 22, &key), Verdict::Trusted);
    assert_eq!(
        check(&text, "other.EXAMPLE.com", 2222, &key),
        Verdict::Trusted
    );
    cross_check(
        &text,
        &[("EXAMPLE.com", 22), ("other.example.com", 2222)],
        &key,
    );
}

#[test]
fn comma_lists() {
    let key = ed25519();
    let text = line("alpha,beta,[gamma]:2200,10.0.0.1", &key);
    for (host, port) in [
        ("alpha", 22),
        ("beta", 22),
        ("gamma", 2200),
        ("10.0.0.1", 22),
    ] {
        assert_eq!(check(&text, host, port, &key), Verdict::Trusted, "{host}");
    }
    for (host, port) in [("gamma", 22), ("alph", 22), ("delta", 22), ("", 22)] {
        assert_eq!(check(&text, host, port, &key), Verdict::Unknown, "{host}");
    }
    cross_check(
        &text,
        &[("alpha", 22), ("beta", 22), ("gamma", 2200), ("gamma", 22)],
        &key,
    );
}

#[test]
fn hashed_computed_in_test() {
    let key = ed25519();
    let salt = [7u8; 20];
    let hashed = |name: &str| {
        let mut mac = Hmac::<Sha1>::new_from_slice(&salt).unwrap();
        mac.update(name.as_bytes());
        format!(
            "|1|{}|{}",
            BASE64.encode(&salt),
            BASE64.encode(&mac.finalize().into_bytes())
        )
    };
    let text = format!(
        "{}{}",
        line(&hashed("example.com"), &key),
        line(&hashed("[example.com]:2222"), &key)
    );
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), 0);
    assert_eq!(hosts.check("example.com", 22, &key), Verdict::Trusted);
    // The lookup name is lowercased before hashing.
    assert_eq!(hosts.check("Example.Com", 22, &key), Verdict::Trusted);
    assert_eq!(hosts.check("example.com", 2222, &key), Verdict::Trusted);
    assert_eq!(hosts.check("example.com", 2200, &key), Verdict::Unknown);
    assert_eq!(hosts.check("example.org", 22, &key), Verdict::Unknown);
    assert_eq!(
        hosts.check("example.com", 22, &ed25519()),
        Verdict::Changed { line: 1 }
    );
    cross_check(
        &text,
        &[
            ("example.com", 22),
            ("example.com", 2222),
            ("example.com", 2200),
            ("example.org", 22),
        ],
        &key,
    );
}

#[test]
fn hashed_by_ssh_keygen() {
    if !have_ssh_keygen() {
        return;
    }
    let key = ed25519();
    let other = ed25519();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("known_hosts");
    let text = format!(
        "{}{}{}",
        line("Example.com", &key),
        line("[alt.example.com]:2222", &key),
        line("plain.example.com", &other)
    );
    std::fs::write(&file, &text).unwrap();
    let status = Command::new(SSH_KEYGEN)
        .arg("-H")
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    let hashed_text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        hashed_text.lines().filter(|l| l.starts_with("|1|")).count(),
        3,
        "{hashed_text}"
    );
    let hosts = KnownHosts::load(&file).unwrap();
    assert_eq!(hosts.skipped_lines(), 0);
    assert_eq!(hosts.check("example.com", 22, &key), Verdict::Trusted);
    assert_eq!(hosts.check("EXAMPLE.COM", 22, &key), Verdict::Trusted);
    assert_eq!(hosts.check("alt.example.com", 2222, &key), Verdict::Trusted);
    assert_eq!(hosts.check("alt.example.com", 22, &key), Verdict::Unknown);
    assert_eq!(
        hosts.check("plain.example.com", 22, &other),
        Verdict::Trusted
    );
    assert_eq!(
        hosts.check("plain.example.com", 22, &key),
        Verdict::Changed { line: 3 }
    );
    assert_eq!(hosts.check("example.org", 22, &key), Verdict::Unknown);
    cross_check(
        &hashed_text,
        &[
            ("example.com", 22),
            ("alt.example.com", 2222),
            ("alt.example.com", 22),
            ("plain.example.com", 22),
            ("example.org", 22),
        ],
        &key,
    );
}

#[test]
fn malformed_hashes_are_skipped() {
    let key = ed25519();
    let good_salt = BASE64.encode(&[1u8; 20]);
    let text = [
        line("|1|abc|def", &key),                    // salt not base64 of 20 bytes
        line(&format!("|2|{good_salt}|AAAA"), &key), // unknown hash version
        line(&format!("|1|{good_salt}"), &key),      // no hash part
        line(&format!("|1|{}|AAAA", BASE64.encode(&[1u8; 19])), &key), // short salt
    ]
    .concat();
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), 4);
    assert!(hosts.is_empty());
    // Well-formed salt with a wrong hash: valid, simply matches nothing.
    let text = line(&format!("|1|{good_salt}|AAAA"), &key);
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), 0);
    assert_eq!(hosts.check("AAAA", 22, &key), Verdict::Unknown);
}

#[test]
fn tabs_and_whitespace() {
    let key = ed25519();
    let (kt, b64) = type_and_base64(&key);
    let text = format!(
        "host1\t{kt}\t{b64}\tcomment\n  \t host2 \t {kt}  {b64}   some comment words\n@revoked\t*\t{kt}\t{b64}\n"
    );
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), 0);
    // The third line revokes the key, which proves it parsed.
    assert_eq!(hosts.check("host1", 22, &key), Verdict::Revoked { line: 3 });
    let text = text.lines().take(2).collect::<Vec<_>>().join("\n");
    assert_eq!(check(&text, "host1", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "host2", 22, &key), Verdict::Trusted);
    cross_check(&text, &[("host1", 22), ("host2", 22), ("host3", 22)], &key);
}

#[test]
fn comments_blank_lines_crlf() {
    let key = ed25519();
    let text = format!(
        "# a comment\r\n\r\n   \r\n\t# indented comment\r\n{}\r\n\n",
        line("host", &key).trim_end()
    );
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), 0);
    assert!(!hosts.is_empty());
    assert_eq!(hosts.check("host", 22, &key), Verdict::Trusted);
    assert_eq!(
        hosts.check("host", 22, &ed25519()),
        Verdict::Changed { line: 5 }
    );
    // Empty text and comment-only text are empty.
    assert!(KnownHosts::parse("").is_empty());
    assert!(KnownHosts::parse("# nothing\n").is_empty());
    assert_eq!(KnownHosts::parse("# nothing\n").skipped_lines(), 0);
}

#[test]
fn invalid_lines_are_skipped_and_counted() {
    let key = ed25519();
    let text_key = key_text(&key);
    let (_, b64) = text_key.split_once(' ').unwrap();
    let blob = BASE64.decode(b64.as_bytes()).unwrap();
    let ecdsa_b64 = ECDSA_LINE.split(' ').nth(1).unwrap();
    let invalid = [
        "bad1 ssh-ed25519 not*base64!".to_owned(),
        format!("bad2 ssh-foo {b64}"),
        "bad3 ssh-ed25519".to_owned(),
        "bad4".to_owned(),
        format!("@bogus bad5 {text_key}"),
        format!("@cert-authority @cert-authority bad6 {text_key}"),
        format!("@cert-authority bad7 ssh-ed25519 {b64}=="),
        format!("bad8 ssh-rsa {b64}"), // type does not match blob
        format!(
            "bad9 ssh-ed25519 {}",
            BASE64.encode(&[blob.as_slice(), &[0, 0, 0, 0]].concat())
        ), // trailing bytes
        format!("bad10 ecdsa-sha2-nistp384 {ecdsa_b64}"), // wrong curve
        format!(
            "bad11 ecdsa-sha2-nistp256 {}",
            ecdsa_b64.replace("dc=", "dd=")
        ), // non-zero trailing bits
        format!(
            "bad12 ecdsa-sha2-nistp256 {}",
            ecdsa_b64.trim_end_matches('=')
        ), // missing padding
        format!("bad13 ssh-ed25519 {b64}#comment"),
        format!("bad14 #ssh-ed25519 {b64}"),
        "@cert-authority".to_owned(),
        format!("bad16 ssh-ed25519 {}", &b64[..b64.len() - 4]), // truncated key
    ];
    let valid = [
        format!("good1 {text_key}"),
        format!("good2 {}", ECDSA_LINE),
        format!("good3 rsa-sha2-256 {}", RSA_LINE.split(' ').nth(1).unwrap()),
    ];
    let mut lines: Vec<String> = invalid.to_vec();
    lines.extend(valid.iter().cloned());
    let text = lines.join("\n") + "\n";
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), invalid.len());
    assert_eq!(hosts.files[0].entries.len(), valid.len());
    assert_eq!(hosts.check("good1", 22, &key), Verdict::Trusted);
    assert_eq!(hosts.check("good2", 22, &ecdsa()), Verdict::Trusted);
    assert_eq!(hosts.check("good3", 22, &rsa()), Verdict::Trusted);
    for i in 1..=16 {
        assert_eq!(
            hosts.check(&format!("bad{i}"), 22, &key),
            Verdict::Unknown,
            "bad{i}"
        );
    }

    // OpenSSH agrees on which unmarked lines hold keys.
    if have_ssh_keygen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        let unmarked: Vec<&String> = lines.iter().filter(|l| !l.starts_with('@')).collect();
        let unmarked_text = unmarked
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&file, &unmarked_text).unwrap();
        assert_eq!(openssh_valid_lines(&file), valid.len());
        assert_eq!(
            KnownHosts::parse(&unmarked_text).files[0].entries.len(),
            valid.len()
        );
    }
}

/// What matching every plain line finds, the way `check` did before the index: the
/// reference the index must agree with.
fn check_by_matching_every_line(
    hosts: &KnownHosts,
    host: &str,
    port: u16,
    key: &PublicKey,
) -> Verdict {
    let name = lookup_name(host, port).to_ascii_lowercase();
    let mut first_mismatch = None;
    let plain = hosts.files.iter().flat_map(|f| &f.entries);
    for entry in plain.filter(|e| e.marker == Marker::None) {
        if !hosts_match(&entry.hosts, &name) {
            continue;
        }
        if same_key(&entry.key, key) {
            return Verdict::Trusted;
        }
        first_mismatch.get_or_insert(entry.line);
    }
    first_mismatch.map_or(Verdict::Unknown, |line| Verdict::Changed { line })
}

#[test]
fn the_name_index_finds_what_matching_every_line_finds() {
    let keys = [ed25519(), ecdsa(), rsa()];
    let salt = [7u8; 20];
    let hashed = hash_host(&salt, "h.example").unwrap();
    let hashed_port = hash_host(&salt, "[h.example]:2222").unwrap();
    let fields = [
        "a.example",
        "A.Example,b.example",
        "c.example,",
        "*.wild",
        "!d.example,*.example",
        "e.example,,f.example",
        "[g.example]:2222",
        hashed.as_str(),
        hashed_port.as_str(),
        "a.example,a.example",
        "x?y",
        "b.example,!b.example",
        "[g.example]:*",
        "ünï.example",
    ];
    let mut text = String::new();
    // Two rounds with the keys shifted: a name listed on several lines, some of them
    // with another key, over two files.
    for (round, shift) in [(0, 0), (1, 1)] {
        for (i, field) in fields.iter().enumerate() {
            text.push_str(&line(field, &keys[(i + shift) % keys.len()]));
        }
        if round == 0 {
            text.push_str("garbage line\n# comment\n");
        }
    }
    let middle = text[..text.len() / 2].rfind('\n').unwrap() + 1;
    let (first, second) = text.split_at(middle);
    let mut merged = KnownHosts::parse(first);
    merged.extend(KnownHosts::parse(second));
    let whole = KnownHosts::parse(&text);
    let probes = [
        ("a.example", 22),
        ("A.EXAMPLE", 22),
        ("b.example", 22),
        ("c.example", 22),
        ("z.wild", 22),
        ("d.example", 22),
        ("q.example", 22),
        ("e.example", 22),
        ("f.example", 22),
        ("", 22),
        ("g.example", 2222),
        ("g.example", 22),
        ("h.example", 22),
        ("h.example", 2222),
        ("x1y", 22),
        ("xy", 22),
        ("ünï.example", 22),
        ("nowhere", 22),
    ];
    let mut verdicts = std::collections::HashSet::new();
    for hosts in [&merged, &whole] {
        for (host, port) in probes {
            for key in &keys {
                let expected = check_by_matching_every_line(hosts, host, port, key);
                assert_eq!(hosts.check(host, port, key), expected, "{host}:{port}");
                verdicts.insert(format!("{expected:?}").split(' ').next().map(str::to_owned));
            }
        }
    }
    // The probes reach every kind of answer.
    assert_eq!(verdicts.len(), 3, "{verdicts:?}");
}

#[test]
fn key_rotation() {
    let old = ed25519();
    let new = ed25519();
    let text = format!("{}{}", line("host", &old), line("host", &new));
    assert_eq!(check(&text, "host", 22, &old), Verdict::Trusted);
    assert_eq!(check(&text, "host", 22, &new), Verdict::Trusted);
    assert_eq!(
        check(&text, "host", 22, &ed25519()),
        Verdict::Changed { line: 1 }
    );
}

#[test]
fn changed_reports_first_matching_line() {
    let key = ed25519();
    let text = format!(
        "# header\n{}{}\n{}{}",
        line("other", &key),
        line("*.example.com", &ed25519()),
        line("host.example.com", &ed25519()),
        line("unrelated", &ed25519()),
    );
    assert_eq!(
        check(&text, "host.example.com", 22, &key),
        Verdict::Changed { line: 3 }
    );
    assert_eq!(check(&text, "other", 22, &key), Verdict::Trusted);
    assert_eq!(check(&text, "nobody", 22, &key), Verdict::Unknown);
}

#[test]
fn revoked_beats_trusted() {
    let key = ed25519();
    let text = format!("{}@revoked * {}\n", line("host", &key), key_text(&key));
    assert_eq!(check(&text, "host", 22, &key), Verdict::Revoked { line: 2 });
    // The revoked line's host field does not matter: the key is refused everywhere.
    let text = format!(
        "{}@revoked unrelated.example {}\n",
        line("host", &key),
        key_text(&key)
    );
    assert_eq!(check(&text, "host", 22, &key), Verdict::Revoked { line: 2 });
    assert_eq!(
        check(&text, "elsewhere", 2222, &key),
        Verdict::Revoked { line: 2 }
    );
    // Another key for the host is unaffected.
    let other = ed25519();
    let text = format!("{}{}", text, line("host", &other));
    assert_eq!(check(&text, "host", 22, &other), Verdict::Trusted);
    // A revoked line alone does not make the host known.
    let text = format!("@revoked host {}\n", key_text(&key));
    assert_eq!(check(&text, "host", 22, &other), Verdict::Unknown);
}

#[test]
fn key_fields_skip_whitespace_like_b64_pton() {
    let key = ed25519();
    let (kt, b64) = type_and_base64(&key);
    let (head, tail) = b64.split_at(10);
    // Each of these is a key `ssh` reads (checked with ssh-keygen -l below): a vertical
    // tab or form feed inside the base64, two trailing `\r`s, a NUL after the key.
    let fields = [
        format!("{head}\x0b{tail}"),
        format!("{head}\x0c{tail}"),
        format!("{b64}\r\r"),
        format!("{b64}\r\x0b\r"),
        format!("{b64}\0garbage"),
        format!("{b64}\0 more"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for field in &fields {
        let text = format!("host {kt} {field}\n");
        assert_eq!(
            check(&text, "host", 22, &key),
            Verdict::Trusted,
            "{field:?}"
        );
        let revoked = format!("@revoked host {kt} {field}\n{}", line("host", &key));
        assert_eq!(
            check(&revoked, "host", 22, &key),
            Verdict::Revoked { line: 1 },
            "{field:?}"
        );
        if have_ssh_keygen() {
            let file = dir.path().join("kh");
            std::fs::write(&file, &text).unwrap();
            assert_eq!(openssh_valid_lines(&file), 1, "ssh-keygen reads {field:?}");
        }
    }
}

#[test]
fn a_nul_ends_the_line_as_in_openssh() {
    let key = ed25519();
    // A NUL inside the host field leaves a line without a key: dropped, not `host`.
    let text = format!("host\0evil {}\n", key_text(&key));
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.check("host", 22, &key), Verdict::Unknown);
    assert_eq!(hosts.check("host\0evil", 22, &key), Verdict::Unknown);
    assert_eq!(hosts.skipped_lines(), 1);
    if have_ssh_keygen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kh");
        std::fs::write(&file, &text).unwrap();
        assert_eq!(openssh_valid_lines(&file), 0);
        assert!(!openssh_finds(&file, "host"));
    }
}

#[test]
fn an_unreadable_revocation_refuses_the_hosts_it_names() {
    let key = ed25519();
    let trusted = line("host", &key);
    let (kt, b64) = type_and_base64(&key);
    // Keys no reader can take: refusing the host is the only safe reading.
    for broken in [
        format!("@revoked host {kt} {}", &b64[..b64.len() - 4]),
        format!("@revoked host {kt} not*base64"),
        format!("@revoked host ssh-unknown {b64}"),
        format!("@revoked host {kt}"),
        format!("@revoked @revoked host {kt} {b64}"),
        format!("@cert-authority @revoked host {kt} {b64}"),
    ] {
        let text = format!("{broken}\n{trusted}");
        let hosts = KnownHosts::parse(&text);
        assert_eq!(
            hosts.check("host", 22, &key),
            Verdict::UnreadableRevocation { line: 1 },
            "{broken:?}"
        );
        // Other hosts are unaffected.
        let elsewhere = format!("{text}{}", line("other", &key));
        assert_eq!(
            check(&elsewhere, "other", 22, &key),
            Verdict::Trusted,
            "{broken:?}"
        );
    }
    // Without a readable host field there is no telling which hosts: all of them.
    for broken in [
        "@revoked",
        "@revoked   ",
        "@revoked |1|bad|salt ssh-ed25519 x",
    ] {
        let text = format!("{broken}\n{trusted}{}", line("other", &key));
        for host in ["host", "other"] {
            assert_eq!(
                check(&text, host, 22, &key),
                Verdict::UnreadableRevocation { line: 1 },
                "{broken:?}"
            );
        }
    }
    // An unknown marker is no revocation (OpenSSH skips the line too).
    let text = format!("@revoke host {kt} x\n{trusted}");
    assert_eq!(check(&text, "host", 22, &key), Verdict::Trusted);
}

#[test]
fn cert_authority_lines_are_ignored() {
    let key = ed25519();
    let text = format!("@cert-authority *.example.com {}\n", key_text(&key));
    let hosts = KnownHosts::parse(&text);
    assert_eq!(hosts.skipped_lines(), 0);
    assert!(!hosts.is_empty());
    assert_eq!(hosts.check("a.example.com", 22, &key), Verdict::Unknown);
}

#[test]
fn comments_do_not_affect_key_equality() {
    let key = PublicKey::from_openssh(ECDSA_LINE).unwrap();
    assert_eq!(key.comment().as_str_lossy(), "root@vm");
    let bare = ECDSA_LINE.rsplit_once(' ').unwrap().0;
    let text = format!("host {bare}\n");
    assert_eq!(check(&text, "host", 22, &key), Verdict::Trusted);
    // And the other way round: a commented line, a comment-less key.
    let bare_key = PublicKey::from_openssh(bare).unwrap();
    let text = format!("host {ECDSA_LINE} and more\n");
    assert_eq!(check(&text, "host", 22, &bare_key), Verdict::Trusted);
}

#[test]
fn different_key_type_is_changed() {
    let key = ed25519();
    let text = format!("{}{}", line("host", &ecdsa()), line("host", &rsa()));
    assert_eq!(check(&text, "host", 22, &key), Verdict::Changed { line: 1 });
    assert_eq!(check(&text, "host", 22, &rsa()), Verdict::Trusted);
}

#[test]
fn cached_loads_are_reused_until_a_file_changes() {
    let dir = tempfile::tempdir().unwrap();
    let key = ed25519();
    let file = dir.path().join("known_hosts");
    let missing = dir.path().join("absent");
    std::fs::write(&file, line("a.example", &key)).unwrap();
    let paths = vec![file.clone(), missing.clone()];
    let parses = full_parses();
    let first = KnownHosts::load_all_cached(&paths).unwrap();
    KnownHosts::load_all_cached(&paths).unwrap();
    assert_eq!(full_parses(), parses + 1, "unchanged files are parsed once");
    assert_eq!(first.check("a.example", 22, &key), Verdict::Trusted);
    assert_eq!(first.check("b.example", 22, &key), Verdict::Unknown);

    // An appended key (what accept-new does) is seen at once.
    append(&file, "b.example", 22, &key).unwrap();
    let changed = KnownHosts::load_all_cached(&paths).unwrap();
    assert_eq!(
        full_parses(),
        parses + 1,
        "an appended line is parsed alone"
    );
    assert_eq!(changed.check("b.example", 22, &key), Verdict::Trusted);
    // So is a file that appears.
    std::fs::write(&missing, line("c.example", &key)).unwrap();
    let appeared = KnownHosts::load_all_cached(&paths).unwrap();
    assert_eq!(appeared.check("c.example", 22, &key), Verdict::Trusted);
    // A directory where a file should be stays an error.
    assert!(KnownHosts::load_all_cached(&[dir.path().to_path_buf()]).is_err());
}

/// The merged entries of a fresh, full load: what an incremental load must equal.
fn full(paths: &[PathBuf]) -> String {
    let mut all = KnownHosts::default();
    for path in paths {
        all.extend(KnownHosts::load(path).unwrap());
    }
    lines_of(&all)
}

/// Every file's lines, revocations and skipped count (not the index: its maps' order
/// differs between two equal ones), as text to compare.
fn lines_of(hosts: &KnownHosts) -> String {
    let files: Vec<_> = hosts
        .files
        .iter()
        .map(|f| (&f.entries, &f.unreadable_revocations, f.skipped))
        .collect();
    format!("{files:?}")
}

fn cached(paths: &[PathBuf]) -> String {
    lines_of(&KnownHosts::load_all_cached(paths).unwrap())
}

#[test]
fn a_grown_file_is_parsed_from_where_it_was_read_and_equals_a_full_load() {
    let dir = tempfile::tempdir().unwrap();
    let key = ed25519();
    let (user, global) = (dir.path().join("user"), dir.path().join("global"));
    std::fs::write(&user, format!("# comment\n{}", line("a.example", &key))).unwrap();
    std::fs::write(
        &global,
        format!("{}@revoked x.example AAAA\n", line("g.example", &rsa())),
    )
    .unwrap();
    let paths = vec![user.clone(), global.clone()];
    assert_eq!(cached(&paths), full(&paths));
    let parses = full_parses();
    // Appends (accept-new), one line at a time and with junk lines among them: the new
    // entries land before the global file's, with their own line numbers.
    for i in 0..30 {
        append(&user, &format!("h{i}.example"), 2200, &key).unwrap();
        if i % 7 == 0 {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&user)
                .unwrap()
                .write_all(b"not a valid line\n\n")
                .unwrap();
        }
        assert_eq!(cached(&paths), full(&paths), "after append {i}");
    }
    assert_eq!(full_parses(), parses, "appends are parsed alone");
    let hosts = KnownHosts::load_all_cached(&paths).unwrap();
    assert_eq!(hosts.check("h29.example", 2200, &key), Verdict::Trusted);
    assert_eq!(
        hosts.check("h29.example", 2200, &rsa()),
        Verdict::Changed { line: 42 }
    );
    // The global file grows too.
    append(&global, "g2.example", 22, &key).unwrap();
    assert_eq!(cached(&paths), full(&paths));
    // Rewritten in place, longer, with other lines: parsed again from the start.
    std::fs::write(
        &user,
        format!(
            "{}{}",
            line("z.example", &key),
            line("y.example", &rsa()).repeat(40)
        ),
    )
    .unwrap();
    assert_eq!(cached(&paths), full(&paths));
    let hosts = KnownHosts::load_all_cached(&paths).unwrap();
    assert_eq!(hosts.check("a.example", 22, &key), Verdict::Unknown);
    // A line being written (no line break yet) is read as it is, then read again whole.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&user)
        .unwrap()
        .write_all(b"w.example ")
        .unwrap();
    assert_eq!(cached(&paths), full(&paths));
    std::fs::OpenOptions::new()
        .append(true)
        .open(&user)
        .unwrap()
        .write_all(line("", &key).trim_start().as_bytes())
        .unwrap();
    assert_eq!(cached(&paths), full(&paths));
    let hosts = KnownHosts::load_all_cached(&paths).unwrap();
    assert_eq!(hosts.check("w.example", 22, &key), Verdict::Trusted);
}

/// Another connection appends between the stamp and the read: what was read is parsed
/// (no parse from the start), and the next look catches up with the stamp.
#[test]
fn this_process_appends_are_taken_without_reading_the_file_again() {
    let dir = tempfile::tempdir().unwrap();
    let key = ed25519();
    let file = dir.path().join("known_hosts");
    std::fs::write(&file, line("a.example", &key)).unwrap();
    let paths = vec![file.clone()];
    let trusted = |host: &str| KnownHosts::check_cached(&paths, host, 22, &key).unwrap().0;
    assert_eq!(trusted("a.example"), Verdict::Trusted);
    let (parses, reads) = (full_parses(), growth_reads());
    for host in ["b.example", "c.example", "d.example"] {
        assert_eq!(trusted(host), Verdict::Unknown);
        append(&file, host, 22, &key).unwrap();
        assert_eq!(trusted(host), Verdict::Trusted, "{host}");
    }
    assert_eq!(
        (full_parses(), growth_reads()),
        (parses, reads),
        "own appends are taken as they were written"
    );
    assert_eq!(
        lines_of(&KnownHosts::load_all_cached(&paths).unwrap()),
        full(&paths)
    );
    // Another writer's line is read (and compared) as before.
    let mut other = OpenOptions::new().append(true).open(&file).unwrap();
    other.write_all(line("e.example", &key).as_bytes()).unwrap();
    drop(other);
    assert_eq!(trusted("e.example"), Verdict::Trusted);
    assert_eq!(growth_reads(), reads + 1);
    assert_eq!(
        lines_of(&KnownHosts::load_all_cached(&paths).unwrap()),
        full(&paths)
    );
}

#[test]
fn a_file_that_grew_past_its_stamp_is_parsed_as_read() {
    let dir = tempfile::tempdir().unwrap();
    let key = ed25519();
    let file = dir.path().join("known_hosts");
    std::fs::write(&file, line("a.example", &key)).unwrap();
    let paths = vec![file.clone()];
    let stamps = |paths: &[PathBuf]| -> Vec<(PathBuf, Stamp)> {
        paths
            .iter()
            .map(|p| (p.clone(), stamp(p).unwrap()))
            .collect()
    };
    let mut cached = Cached::load(stamps(&paths), &paths).unwrap();
    append(&file, "b.example", 22, &key).unwrap();
    let stamped = stamps(&paths);
    append(&file, "c.example", 22, &key).unwrap();
    assert!(cached.grow(&stamped));
    for host in ["a.example", "b.example", "c.example"] {
        assert_eq!(
            cached.hosts.check(host, 22, &key),
            Verdict::Trusted,
            "{host}"
        );
    }
    assert!(cached.grow(&stamps(&paths)), "nothing new: still current");
    assert_eq!(lines_of(&cached.hosts), full(&paths));
    // A rewrite of the same length is not taken for growth.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("a.example", "z.example");
    std::fs::write(&file, text).unwrap();
    append(&file, "d.example", 22, &key).unwrap();
    assert!(!cached.grow(&stamps(&paths)));
}

#[test]
fn load_missing_and_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = KnownHosts::load(&dir.path().join("nope")).unwrap();
    assert!(missing.is_empty());
    assert_eq!(missing.skipped_lines(), 0);
    assert!(KnownHosts::load(dir.path()).is_err());
}

#[test]
fn extend_keeps_origins() {
    let key = ed25519();
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user");
    let global = dir.path().join("global");
    std::fs::write(&user, format!("junk\n{}", line("a", &ed25519()))).unwrap();
    std::fs::write(
        &global,
        format!(
            "{}{}@revoked * {}\n",
            line("b", &key),
            line("c", &ed25519()),
            key_text(&rsa())
        ),
    )
    .unwrap();
    let mut all = KnownHosts::load(&user).unwrap();
    all.extend(KnownHosts::load(&global).unwrap());
    assert_eq!(all.skipped_lines(), 1);
    assert_eq!(
        all.check_detailed("a", 22, &key),
        (Verdict::Changed { line: 2 }, Some(user.clone()))
    );
    assert_eq!(
        all.check_detailed("b", 22, &key),
        (Verdict::Trusted, Some(global.clone()))
    );
    assert_eq!(
        all.check_detailed("c", 22, &key),
        (Verdict::Changed { line: 2 }, Some(global.clone()))
    );
    assert_eq!(
        all.check_detailed("a", 22, &rsa()),
        (Verdict::Revoked { line: 3 }, Some(global.clone()))
    );
    assert_eq!(all.check_detailed("z", 22, &key), (Verdict::Unknown, None));
    // Parsed text has no origin.
    let parsed = KnownHosts::parse(&line("a", &key));
    assert_eq!(
        parsed.check_detailed("a", 22, &key),
        (Verdict::Trusted, None)
    );
}

#[cfg(unix)]
#[test]
fn append_creates_file_and_dirs() {
    use std::os::unix::fs::PermissionsExt;
    let key = ed25519();
    let dir = tempfile::tempdir().unwrap();
    let ssh_dir = dir.path().join("home").join(".ssh");
    let file = ssh_dir.join("known_hosts");
    append(&file, "Example.com", 22, &key).unwrap();
    append(&file, "example.com", 2222, &ecdsa()).unwrap();

    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&ssh_dir), 0o700);

    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        text,
        format!(
            "example.com {}\n[example.com]:2222 {}\n",
            key_text(&key),
            key_text(&ecdsa())
        )
    );
    let hosts = KnownHosts::load(&file).unwrap();
    assert_eq!(hosts.skipped_lines(), 0);
    assert_eq!(hosts.check("example.com", 22, &key), Verdict::Trusted);
    assert_eq!(hosts.check("example.com", 2222, &ecdsa()), Verdict::Trusted);
    assert_eq!(
        hosts.check("example.com", 2222, &key),
        Verdict::Changed { line: 2 }
    );
    cross_check(
        &text,
        &[("example.com", 22), ("example.com", 2222), ("x", 22)],
        &key,
    );
}

#[test]
fn append_adds_missing_newline() {
    let key = ed25519();
    let first = ed25519();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("known_hosts");
    std::fs::write(&file, line("first", &first).trim_end()).unwrap();
    append(&file, "second", 22, &key).unwrap();
    let hosts = KnownHosts::load(&file).unwrap();
    assert_eq!(hosts.skipped_lines(), 0);
    assert_eq!(hosts.check("first", 22, &first), Verdict::Trusted);
    assert_eq!(hosts.check("second", 22, &key), Verdict::Trusted);
    assert!(std::fs::read_to_string(&file).unwrap().ends_with('\n'));
    // An existing empty file gets no leading blank line.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    append(&empty, "h", 22, &key).unwrap();
    assert_eq!(std::fs::read_to_string(&empty).unwrap(), line("h", &key));
}

#[test]
fn append_refuses_pattern_hosts() {
    let key = ed25519();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("known_hosts");
    for host in [
        "", "evil,*", "*", "a?", "!a", "|1|x|y", "@revoked", "#x", "a b", "a\nb",
    ] {
        let err = append(&file, host, 22, &key).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{host:?}");
    }
    assert!(!file.exists());
    append(&file, "::1", 2222, &key).unwrap();
    assert_eq!(
        KnownHosts::load(&file).unwrap().check("::1", 2222, &key),
        Verdict::Trusted
    );
}

#[test]
fn fingerprint_matches_openssh() {
    let key = ecdsa();
    let fp = fingerprint(&key);
    assert!(fp.starts_with("SHA256:"), "{fp}");
    assert!(!fp.ends_with('='), "{fp}");
    if !have_ssh_keygen() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key.pub");
    std::fs::write(&file, format!("{ECDSA_LINE}\n")).unwrap();
    let out = Command::new(SSH_KEYGEN)
        .arg("-l")
        .arg("-E")
        .arg("sha256")
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.split_whitespace().nth(1), Some(fp.as_str()), "{out}");
}
