//! The audit trail (guide, "Audit trail"), through a real sshd: every kind of operation
//! recorded once with what it did and how it ended, the file's chain verified and continued
//! across executors, a tampered file refused, no become password anywhere in it; and a
//! terminal's asciicast recording, replayed to the screen the terminal showed.

mod common;

use std::{path::PathBuf, time::Duration};

use common::{builder, testbed, token};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use swiftide_core::ToolExecutor;
use swiftide_ssh_executor::{
    Become, Error, ExecOptions, JobOptions, Secret, SshExecutor, TerminalOptions, Until,
    audit::{AuditRecord, AuditTrail, Exit, verify},
};
use swiftide_ssh_testbed::{BECOME_PASSWORD, Escalation, Testbed};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swiftide-audit-{name}-{}", token()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The trail's records, after checking its chain.
fn records(path: &std::path::Path) -> Vec<AuditRecord> {
    let text = std::fs::read(path).unwrap();
    let head = verify(text.as_slice()).unwrap_or_else(|broken| panic!("{broken}"));
    let records: Vec<AuditRecord> = text
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).unwrap())
        .collect();
    assert_eq!(head.records, records.len() as u64);
    records
}

fn only<'a>(records: &'a [AuditRecord], op: &str) -> &'a AuditRecord {
    let found: Vec<_> = records.iter().filter(|record| record.op == op).collect();
    assert_eq!(found.len(), 1, "{op}: {records:#?}");
    found[0]
}

#[tokio::test]
async fn every_operation_is_recorded_once_in_a_chain_that_verifies() {
    let tb = testbed();
    let dir = scratch("ops");
    let trail_path = dir.join("trail.jsonl");
    let trail = AuditTrail::to_file(&trail_path).await.unwrap();
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let ex = builder(&tb)
        .workdir(&work)
        .audit(trail.clone())
        .build()
        .await
        .unwrap();

    let run = ex.run("printf out; printf err >&2; exit 3").await.unwrap();
    assert_eq!(run.stdout(), b"out");
    ex.write_file_bytes("a file.txt".as_ref(), b"content\n")
        .await
        .unwrap();
    assert_eq!(
        ex.read_file_bytes("a file.txt".as_ref()).await.unwrap(),
        b"content\n"
    );
    ex.rename("a file.txt".as_ref(), "b.txt".as_ref())
        .await
        .unwrap();
    let missing = ex.remove_file("missing".as_ref()).await;
    assert!(missing.is_err());
    // Through swiftide's trait: the same records.
    let shell = swiftide_core::Command::shell("echo via-trait");
    ex.exec_cmd(&shell).await.unwrap();
    let files: Vec<_> = ex.stream_files(&work, None).await.unwrap().collect().await;
    assert_eq!(files.len(), 1);
    let mut process = ex
        .spawn("cat", ExecOptions::default().stdin("typed"))
        .await
        .unwrap();
    process.close_stdin().await;
    process.wait().await.unwrap();
    let job = ex.spawn_job("sleep 30", JobOptions::new()).await.unwrap();
    job.kill(Duration::from_millis(100)).await.unwrap();
    // Cancelled: the caller drops the future (its group is killed).
    let dropped = tokio::time::timeout(Duration::from_millis(300), ex.run("sleep 30")).await;
    assert!(dropped.is_err());
    ex.close().await;

    let records = records(&trail_path);
    let seqs: Vec<u64> = records.iter().map(|record| record.seq).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>());
    for record in &records {
        assert_eq!(record.host, tb.host());
        assert_eq!(record.port, tb.port());
        assert_eq!(record.login, tb.user());
        assert_eq!(record.user, tb.user());
        assert!(
            record.time.ends_with('Z') && record.time.len() == 24,
            "{}",
            record.time
        );
    }

    let command = records
        .iter()
        .find(|record| record.command.as_deref() == Some("printf out; printf err >&2; exit 3"))
        .unwrap();
    assert_eq!(command.op, "command");
    assert_eq!(command.exit, Exit::Code(3));
    assert_eq!(command.dir.as_deref(), Some(work.to_str().unwrap()));
    let stdout = command.stdout.as_ref().unwrap();
    assert_eq!(
        (stdout.bytes, stdout.sha256.as_str()),
        (3, sha256(b"out").as_str())
    );
    assert_eq!(command.stderr.as_ref().unwrap().sha256, sha256(b"err"));

    let write = only(&records, "write_file");
    assert_eq!(
        write.path.as_deref(),
        Some(work.join("a file.txt").to_str().unwrap())
    );
    assert_eq!(write.content.as_ref().unwrap().sha256, sha256(b"content\n"));
    assert_eq!(write.exit, Exit::Ok);
    let read = only(&records, "read_file");
    assert_eq!(read.content.as_ref().unwrap().bytes, 8);
    let rename = only(&records, "rename");
    assert_eq!(
        rename.to.as_deref(),
        Some(work.join("b.txt").to_str().unwrap())
    );
    let remove = only(&records, "remove_file");
    assert!(
        matches!(&remove.exit, Exit::Error(text) if text.contains("missing")),
        "{remove:?}"
    );
    assert!(
        records
            .iter()
            .any(|record| record.command.as_deref() == Some("echo via-trait"))
    );
    let walk = only(&records, "stream_files");
    assert_eq!(
        (walk.path.as_deref(), &walk.exit),
        (work.to_str(), &Exit::Ok)
    );
    let process = only(&records, "process");
    assert_eq!(process.command.as_deref(), Some("cat"));
    assert_eq!(process.stdout.as_ref().unwrap().sha256, sha256(b"typed"));
    let start = only(&records, "job_start");
    assert_eq!(start.job.as_deref(), Some(job.id()));
    assert_eq!(start.exit, Exit::Ok);
    assert_eq!(only(&records, "job_kill").job.as_deref(), Some(job.id()));
    let cancelled = records
        .iter()
        .find(|record| record.command.as_deref() == Some("sleep 30") && record.op == "command")
        .unwrap();
    assert_eq!(cancelled.exit, Exit::Cancelled);
}

#[tokio::test]
async fn a_trail_is_continued_by_the_next_executor_and_refused_once_tampered() {
    let tb = testbed();
    let dir = scratch("continue");
    let path = dir.join("trail.jsonl");
    for round in 0..2 {
        let trail = AuditTrail::to_file(&path).await.unwrap();
        let ex = builder(&tb).audit(trail.clone()).build().await.unwrap();
        ex.run(&format!("echo round {round}")).await.unwrap();
        ex.run("true").await.unwrap();
        let head = trail.flush().await.unwrap();
        assert_eq!(head.records, 2 * (round + 1));
    }
    assert_eq!(records(&path).len(), 4);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    // An edited line: the trail is not continued, and nothing runs on it.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("echo round 0", "echo round 9", 1)).unwrap();
    let refused = AuditTrail::to_file(&path).await.unwrap_err();
    assert!(
        matches!(&refused, Error::Audit { reason } if reason.contains("line 2")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_become_password_never_reaches_the_trail() {
    let tb = Testbed::builder()
        .escalation(Escalation::SudoPassword)
        .start()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = lines.clone();
    let trail =
        AuditTrail::to_callback(move |line| seen.lock().unwrap().push(line.to_owned())).unwrap();
    let ex: SshExecutor = builder(&tb)
        .audit(trail.clone())
        .with_become(Become::sudo().password(Secret::new(BECOME_PASSWORD)))
        .build()
        .await
        .unwrap();
    let run = ex.run("id -u").await.unwrap();
    assert_eq!(run.stdout(), b"0\n");
    ex.write_file_bytes(
        std::env::temp_dir()
            .join(format!("swiftide-audit-root-{}", token()))
            .as_path(),
        b"x",
    )
    .await
    .unwrap();
    trail.flush().await.unwrap();
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for line in &lines {
        assert!(!line.contains(BECOME_PASSWORD), "{line}");
        let record: AuditRecord = serde_json::from_str(line).unwrap();
        assert_eq!(
            (record.user.as_str(), record.r#become.as_deref()),
            ("root", Some("sudo"))
        );
    }
}

/// The screen a recording replays to: its `o` events through a terminal emulator of the
/// header's size, resized at each `r` event.
fn replay(lines: &[serde_json::Value]) -> Vec<String> {
    let size = |cols: u64, rows: u64| {
        (
            std::num::NonZeroU16::new(rows as u16).unwrap(),
            std::num::NonZeroU16::new(cols as u16).unwrap(),
        )
    };
    let term = &lines[0]["term"];
    let (rows, cols) = size(
        term["cols"].as_u64().unwrap(),
        term["rows"].as_u64().unwrap(),
    );
    let mut parser = vt100::Parser::new(rows, cols, 0);
    for event in &lines[1..] {
        let data = event[2].as_str().unwrap();
        match event[1].as_str().unwrap() {
            "o" => parser.process(data.as_bytes()),
            "r" => {
                let (c, r) = data.split_once('x').unwrap();
                let (rows, cols) = size(c.parse().unwrap(), r.parse().unwrap());
                parser.set_size(rows, cols);
            }
            _ => {}
        }
    }
    let screen = parser.screen();
    let (_, width) = screen.size();
    screen
        .rows(0, width.get())
        .map(|row| row.trim_end().to_owned())
        .collect()
}

async fn wait(terminal: &swiftide_ssh_executor::Terminal, pattern: &str) {
    let until = Until::Screen(regex::Regex::new(pattern).unwrap());
    let waited = terminal.wait_for(&until, Duration::from_secs(10)).await;
    assert!(waited.reached, "{pattern}: {}", waited.screen.text());
}

#[tokio::test]
async fn a_recorded_terminal_replays_to_its_screen_and_keeps_no_password() {
    let tb = testbed();
    let dir = scratch("cast");
    let cast = dir.join("session.cast");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = lines.clone();
    let trail =
        AuditTrail::to_callback(move |line| seen.lock().unwrap().push(line.to_owned())).unwrap();
    let ex = builder(&tb).audit(trail.clone()).build().await.unwrap();
    let terminal = ex
        .open_terminal(
            TerminalOptions::default()
                .command("PS1='$ ' exec /bin/sh -i")
                .record(&cast)
                .record_input(true),
        )
        .unwrap();
    wait(&terminal, r"(?m)^\$$").await;
    terminal
        .send_text("printf '\\033[1;31mred\\033[0m n\\303\\251\\342\\202\\254 %s\\n' plain\r")
        .await
        .unwrap();
    wait(&terminal, "red né€ plain").await;
    terminal
        .send_text(
            "stty -echo; printf 'password: '; read answer; stty echo; echo; echo got-${#answer}\r",
        )
        .await
        .unwrap();
    wait(&terminal, "password:$").await;
    terminal.send_text("hunter2-secret\r").await.unwrap();
    wait(&terminal, "got-14").await;
    terminal.resize(100, 30);
    terminal.send_text("seq 1 40; exit 3\r").await.unwrap();
    let ended = terminal
        .wait_for(&Until::Exit, Duration::from_secs(10))
        .await;
    assert_eq!(
        ended.exited,
        Some(swiftide_ssh_executor::ExitStatus::Code(3))
    );
    let screen = terminal.screen();
    terminal.close().await.unwrap();
    trail.flush().await.unwrap();

    // Written as it happened: give the writer a moment to flush its last events.
    let mut recorded = Vec::new();
    for _ in 0..50 {
        let text = std::fs::read_to_string(&cast).unwrap();
        recorded = text
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .collect();
        if recorded.last().is_some_and(|event| event[1] == "x") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(recorded[0]["version"], 3);
    assert_eq!(
        (
            recorded[0]["term"]["cols"].as_u64(),
            recorded[0]["term"]["rows"].as_u64()
        ),
        (Some(80), Some(24))
    );
    let last = recorded.last().unwrap();
    assert_eq!((last[1].as_str(), last[2].as_str()), (Some("x"), Some("3")));
    assert!(
        recorded[1..]
            .iter()
            .all(|event| event[0].as_f64().unwrap() >= 0.0)
    );
    assert!(
        recorded
            .iter()
            .any(|event| event[1] == "r" && event[2] == "100x30")
    );
    let typed: String = recorded
        .iter()
        .filter(|event| event[1] == "i")
        .map(|event| event[2].as_str().unwrap().to_owned())
        .collect();
    assert!(typed.contains("seq 1 40"), "{typed:?}");
    let whole = std::fs::read_to_string(&cast).unwrap();
    assert!(
        !whole.contains("hunter2"),
        "the answer at a password prompt was recorded"
    );
    assert_eq!(replay(&recorded), screen.lines);

    let lines = lines.lock().unwrap().clone();
    let record: AuditRecord = lines
        .iter()
        .map(|line| serde_json::from_str::<AuditRecord>(line).unwrap())
        .find(|record| record.op == "terminal")
        .unwrap();
    assert_eq!(record.path.as_deref(), cast.to_str());
    assert_eq!(record.exit, Exit::Code(3));
}
