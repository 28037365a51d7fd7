//! known_hosts files as `ssh` reads them, differential against the real OpenSSH client on a
//! testbed sshd: `@revoked` lines whose key field `ssh` still reads, unreadable revocations,
//! NUL bytes, and a seeded sample of mutated files for which we must never accept a key
//! that `ssh` refuses.

mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use swiftide_ssh_executor::Error;
use swiftide_ssh_testbed::Testbed;
use tempfile::TempDir;

/// Whether the real `ssh` connects to `tb` trusting only `known_hosts` (strict, batch).
fn ssh_accepts(tb: &Testbed, known_hosts: &Path) -> bool {
    let testbed_args: Vec<_> = tb
        .ssh_command("true")
        .get_args()
        .map(|a| a.to_owned())
        .collect();
    let status = Command::new("ssh")
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(testbed_args)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    status.success()
}

/// Our verdict: building an executor for `tb` that trusts only `known_hosts`.
async fn ours(tb: &Testbed, known_hosts: &Path) -> Result<(), Error> {
    common::builder(tb)
        .known_hosts_file(known_hosts)
        .build()
        .await
        .map(drop)
}

/// The name `tb` is looked up as, and its key (`type base64`).
fn name_and_key(tb: &Testbed) -> (String, String, String) {
    let (kind, blob) = tb.host_public_key().split_once(' ').unwrap();
    let blob = blob.split(' ').next().unwrap();
    (
        format!("[{}]:{}", tb.host(), tb.port()),
        kind.to_owned(),
        blob.to_owned(),
    )
}

#[tokio::test]
async fn revoked_keys_ssh_reads_are_refused_and_unreadable_revocations_fail_closed() {
    let tb = common::testbed();
    let (name, kind, blob) = name_and_key(&tb);
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("known_hosts");
    let plain = format!("{name} {kind} {blob}\n");
    let (head, tail) = blob.split_at(12);

    // Key fields `ssh` reads (its base64 decoder skips whitespace; a NUL ends the line):
    // the revocation holds, where we used to skip the line and let the plain one trust it.
    for field in [
        format!("{head}\x0b{tail}"),
        format!("{head}\x0c{tail}"),
        format!("{blob}\r\r"),
        format!("{blob}\0trailing"),
    ] {
        std::fs::write(&file, format!("@revoked {name} {kind} {field}\n{plain}")).unwrap();
        assert!(!ssh_accepts(&tb, &file), "ssh refuses {field:?}");
        match ours(&tb, &file).await {
            Err(Error::HostKeyRevoked { line: 1, .. }) => {}
            other => panic!("{field:?}: {other:?}"),
        }
    }

    // A revocation no one can read (truncated key): ssh skips it and connects; we refuse
    // the host it names, with an error naming the line, rather than ignore a revocation.
    let truncated = &blob[..blob.len() - 8];
    std::fs::write(
        &file,
        format!("@revoked {name} {kind} {truncated}\n{plain}"),
    )
    .unwrap();
    match ours(&tb, &file).await {
        Err(error @ Error::UnreadableRevocation { line: 1, .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("known_hosts:1 is a @revoked line"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // ...and only that host: a revocation for another name leaves this one trusted.
    std::fs::write(
        &file,
        format!("@revoked other.example {kind} {truncated}\n{plain}"),
    )
    .unwrap();
    assert!(ours(&tb, &file).await.is_ok());
    assert!(ssh_accepts(&tb, &file));

    // A NUL in the host field ends the field and the line for ssh: the host is unknown.
    std::fs::write(&file, format!("{name}\0x {kind} {blob}\n")).unwrap();
    assert!(!ssh_accepts(&tb, &file));
    assert!(
        matches!(ours(&tb, &file).await, Err(Error::UnknownHostKey { .. })),
        "a NUL in the host field must not match"
    );
    // The same file without the NUL: both accept (the check above is not vacuous).
    std::fs::write(&file, &plain).unwrap();
    assert!(ssh_accepts(&tb, &file));
    assert!(ours(&tb, &file).await.is_ok());
}

/// Bytes a mutation inserts: field separators, every whitespace `b64_pton` skips, NUL,
/// base64 and pattern characters, markers, comment starts.
const INSERTS: &[&str] = &[
    " ",
    "\t",
    "\r",
    "\x0b",
    "\x0c",
    "\0",
    "=",
    "==",
    "#",
    "@",
    ",",
    "*",
    "?",
    "!",
    "|",
    "A",
    "/",
    "+",
    "@revoked ",
    "@cert-authority ",
    "\r\r",
    "x",
];

fn mutate(rng: &mut StdRng, line: &str) -> String {
    let mut bytes = line.as_bytes().to_vec();
    for _ in 0..rng.random_range(1..=3) {
        let at = rng.random_range(0..=bytes.len());
        match rng.random_range(0..4) {
            0 | 1 => {
                let insert = INSERTS[rng.random_range(0..INSERTS.len())].as_bytes();
                bytes.splice(at..at, insert.iter().copied());
            }
            2 if at < bytes.len() => {
                bytes.remove(at);
            }
            _ if at < bytes.len() => {
                bytes[at] = bytes[at].to_ascii_uppercase() ^ (rng.random_range(0..2) * 0x20);
            }
            _ => {}
        }
    }
    // Keys and names are ASCII; a mutation stays within it.
    String::from_utf8(bytes).unwrap()
}

/// 150 seeded mutations of a `@revoked` line (and sometimes of the plain line after it):
/// whenever `ssh` refuses the key, so do we. Agreements are counted to show the sample
/// exercises both answers.
#[tokio::test]
async fn mutated_known_hosts_never_accept_what_ssh_refuses() {
    let tb = common::testbed();
    let (name, kind, blob) = name_and_key(&tb);
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("known_hosts");
    let revoked = format!("@revoked {name} {kind} {blob}");
    let plain = format!("{name} {kind} {blob}");
    let mut rng = StdRng::seed_from_u64(0x5eed_0019);
    let (mut both_refuse, mut both_accept, mut only_we_refuse) = (0, 0, 0);
    for case in 0..150 {
        let first = mutate(&mut rng, &revoked);
        let second = if rng.random_bool(0.2) {
            mutate(&mut rng, &plain)
        } else {
            plain.clone()
        };
        let text = format!("{first}\n{second}\n");
        std::fs::write(&file, &text).unwrap();
        let started = Instant::now();
        let ours = ours(&tb, &file).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "case {case}: {text:?}"
        );
        let theirs = ssh_accepts(&tb, &file);
        match (theirs, &ours) {
            (false, Ok(())) => panic!("case {case}: ssh refuses, we accept: {text:?}"),
            (false, Err(_)) => both_refuse += 1,
            (true, Ok(())) => both_accept += 1,
            (true, Err(error)) => {
                // Stricter than ssh only by design: an unreadable revocation, or a
                // revocation whose host field does not match (ours applies it anyway).
                assert!(
                    matches!(
                        error,
                        Error::UnreadableRevocation { .. } | Error::HostKeyRevoked { .. }
                    ),
                    "case {case}: ssh accepts, we refuse with {error:?}: {text:?}"
                );
                only_we_refuse += 1;
            }
        }
    }
    eprintln!(
        "both refuse {both_refuse}, both accept {both_accept}, only we refuse {only_we_refuse}"
    );
    assert!(both_refuse > 20 && (both_accept + only_we_refuse) > 20);
}
