//! Pseudo-terminals against real servers: commands in a terminal (`ExecOptions::pty`,
//! `SshExecutor::spawn`), and terminals for agents (`open_terminal`: screen, keys, waits),
//! on OpenSSH and Dropbear, with bash and BusyBox ash as login shells.

mod common;

use std::time::{Duration, Instant};

use common::{token, wait_until_gone};
use swiftide_ssh_executor::{
    ExecOptions, ExitStatus, Key, Pty, SshExecutor, Terminal, TerminalOptions, Until,
};
use swiftide_ssh_testbed::{LoginShell, Testbed};

/// The servers and login shells every terminal test runs on.
fn rows() -> Vec<(&'static str, Testbed)> {
    let start = |name: &'static str, builder: swiftide_ssh_testbed::TestbedBuilder| {
        let testbed = builder
            .start()
            .unwrap_or_else(|e| panic!("cannot start the {name} testbed: {e}"));
        (name, testbed)
    };
    vec![
        start(
            "openssh bash",
            Testbed::builder().login_shell(LoginShell::Bash),
        ),
        start(
            "openssh busybox ash",
            Testbed::builder().login_shell(LoginShell::BusyboxAsh),
        ),
        start(
            "dropbear bash",
            Testbed::builder().dropbear().login_shell(LoginShell::Bash),
        ),
    ]
}

/// The test shells' prompt, `$ ` (the screen's rows come without trailing spaces).
const PROMPT: &str = r"(?m)^\$$";

fn regex(pattern: &str) -> Until {
    Until::Screen(regex::Regex::new(pattern).unwrap())
}

/// Waits for `pattern` on the screen, failing with the screen if it does not come.
async fn expect(terminal: &Terminal, pattern: &str, what: &str) -> swiftide_ssh_executor::Screen {
    let waited = terminal
        .wait_for(&regex(pattern), Duration::from_secs(15))
        .await;
    assert!(
        waited.reached,
        "{what}: {pattern:?} never showed (the program: {:?}):\n{}",
        terminal.exit_status(),
        waited.screen.render()
    );
    waited.screen
}

/// Types Ctrl-D (end of input) until `until` is reached: up to 3 times, 10 s apart. A
/// Ctrl-D that reaches the terminal while its program switches it between canonical and raw
/// mode (BusyBox's line editor does around every line it reads) can be lost in the line
/// discipline, as a key a person typed at that instant would be; the tests check what the
/// program does with its end of input, not that race, which shows under load. Each retry
/// is typed only when `until` was not reached, so it cannot end more than one program.
async fn end_of_input(terminal: &Terminal, until: &Until) -> bool {
    for _ in 0..3 {
        terminal.send_keys(&[Key::Ctrl('D')]).await.unwrap();
        if terminal
            .wait_for(until, Duration::from_secs(10))
            .await
            .reached
        {
            return true;
        }
    }
    false
}

/// An interactive `sh` (whatever the login shell) with a known prompt.
async fn shell(executor: &SshExecutor) -> Terminal {
    let terminal = executor
        .open_terminal(TerminalOptions::default().command("PS1='$ ' exec /bin/sh -i"))
        .unwrap();
    expect(&terminal, PROMPT, "the shell's prompt").await;
    terminal
}

#[tokio::test]
async fn commands_in_a_terminal_see_a_terminal_and_keep_exit_codes() {
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        for _ in 0..2 {
            let run = executor
                .execute(
                    "tty; echo \"$TERM\"; stty size; echo err >&2; exit 3",
                    ExecOptions::default().pty(Pty::new(100, 30).term("vt100")),
                    &mut |_| {},
                )
                .await
                .unwrap();
            assert_eq!(run.status, ExitStatus::Code(3), "{name}");
            let out = String::from_utf8_lossy(&run.stdout()).into_owned();
            let lines: Vec<&str> = out.split("\r\n").collect();
            assert!(lines[0].starts_with("/dev/pts/"), "{name}: {out:?}");
            assert_eq!(
                &lines[1..],
                ["vt100", "30 100", "err", ""],
                "{name}: {out:?}"
            );
            assert!(run.stderr().is_empty(), "{name}: stderr comes merged");
        }
        // A command killed by a signal in a terminal.
        let run = executor
            .execute(
                "kill -TERM $$",
                ExecOptions::default().pty(Pty::default()),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert!(
            matches!(
                run.status,
                ExitStatus::Signal { .. } | ExitStatus::Code(143)
            ),
            "{name}: {:?}",
            run.status
        );
    }
}

#[tokio::test]
async fn a_prompt_is_answered_and_a_resize_is_seen() {
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        let mut process = executor
            .spawn(
                "printf 'Name? '; read n; echo \"hello $n\"; read x; stty size",
                ExecOptions::default().pty(Pty::default()),
            )
            .await
            .unwrap();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("Name? ") {
            let chunk = tokio::time::timeout(Duration::from_secs(10), process.next())
                .await
                .unwrap_or_else(|_| panic!("{name}: no prompt"))
                .unwrap_or_else(|| panic!("{name}: ended before its prompt"));
            seen.extend_from_slice(chunk.bytes());
        }
        process.write("world\r").await.unwrap();
        process.resize(120, 40);
        // The resize must reach the program before it asks for its size.
        tokio::time::sleep(Duration::from_millis(300)).await;
        process.write("\r").await.unwrap();
        let run = process.wait().await.unwrap();
        let out = String::from_utf8_lossy(&run.stdout()).into_owned();
        assert!(out.contains("hello world\r\n"), "{name}: {out:?}");
        assert!(out.ends_with("40 120\r\n"), "{name}: {out:?}");
        assert_eq!(run.status, ExitStatus::Code(0), "{name}");
    }
}

#[tokio::test]
async fn a_repl_is_driven_to_an_answer_and_a_curses_program_is_read_and_quit() {
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        // python3 where the host has it, BusyBox's bc otherwise (the same on every row here:
        // bc is what BusyBox-only hosts have).
        let repl = executor
            .open_terminal(TerminalOptions::default().command("exec busybox bc"))
            .unwrap();
        repl.send_text("6*7\r").await.unwrap();
        expect(&repl, r"(?m)^42$", &format!("{name}: bc")).await;
        assert!(
            end_of_input(&repl, &Until::Exit).await,
            "{name}: bc did not end on Ctrl-D"
        );
        let python = executor
            .open_terminal(TerminalOptions::default().command("exec python3 -q"))
            .unwrap();
        expect(&python, r"(?m)^>>>$", &format!("{name}: python's prompt")).await;
        python.send_text("print(sum(range(10)))\r").await.unwrap();
        expect(&python, r"(?m)^45$", &format!("{name}: python")).await;
        drop(python.close().await);

        // A full-screen program: BusyBox's less on a long file, its screen read, then quit.
        let terminal = shell(&executor).await;
        terminal
            .send_text("seq 1 500 > /tmp/swiftide-less-$$; busybox less /tmp/swiftide-less-$$\r")
            .await
            .unwrap();
        let screen = expect(
            &terminal,
            r"(?m)^23$",
            &format!("{name}: less's first page"),
        )
        .await;
        assert!(screen.lines[0] == "1", "{name}:\n{}", screen.render());
        terminal.send_keys(&[Key::Space]).await.unwrap();
        expect(
            &terminal,
            r"(?m)^46$",
            &format!("{name}: less's second page"),
        )
        .await;
        terminal.send_text("q").await.unwrap();
        let screen = expect(&terminal, PROMPT, &format!("{name}: the prompt after less")).await;
        assert!(
            !screen.alternate_screen || screen.text().contains("$ "),
            "{name}"
        );
        // vi: type, see it, quit without saving.
        terminal
            .send_text("busybox vi /tmp/swiftide-vi-$$\r")
            .await
            .unwrap();
        expect(&terminal, r"~", &format!("{name}: vi's empty buffer")).await;
        terminal.send_text("iswiftide was here").await.unwrap();
        terminal.send_keys(&[Key::Escape]).await.unwrap();
        expect(
            &terminal,
            r"swiftide was here",
            &format!("{name}: vi's text"),
        )
        .await;
        // The text shows before vi has read the Escape; BusyBox vi takes an Escape followed
        // at once by `:` for the start of an escape sequence and drops both (seen once in a
        // loaded CI run): give it time to take the Escape alone.
        tokio::time::sleep(Duration::from_millis(500)).await;
        terminal.send_text(":q!\r").await.unwrap();
        expect(&terminal, PROMPT, &format!("{name}: the prompt after vi")).await;
        terminal
            .send_text("rm -f /tmp/swiftide-less-$$; exit\r")
            .await
            .unwrap();
        let waited = terminal
            .wait_for(&Until::Exit, Duration::from_secs(10))
            .await;
        assert_eq!(waited.exited, Some(ExitStatus::Code(0)), "{name}");
    }
}

#[tokio::test]
async fn ctrl_c_reaches_the_foreground_program_only() {
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        let terminal = shell(&executor).await;
        let marker = format!("{}.3", token());
        terminal
            .send_text(&format!("sleep {marker}\r"))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while common::remote_processes(&format!("sleep {marker}")).is_empty() {
            assert!(Instant::now() < deadline, "{name}: sleep did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        terminal.send_keys(&[Key::Ctrl('C')]).await.unwrap();
        let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
        assert!(left.is_empty(), "{name}: {left:?}");
        // The shell is still there and answers.
        terminal.send_text("echo still-here\r").await.unwrap();
        expect(
            &terminal,
            r"(?m)^still-here$",
            &format!("{name}: the shell"),
        )
        .await;
        assert!(terminal.exit_status().is_none(), "{name}");
        drop(terminal.close().await);
    }
}

#[tokio::test]
async fn timeouts_close_and_lost_clients_kill_children_that_ignore_sighup() {
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        // A timeout: the group dies although every member ignores SIGHUP and SIGTERM.
        let marker = format!("{}.5", token());
        let run = executor
            .execute(
                &format!("trap '' HUP TERM; (trap '' HUP TERM; sleep {marker}) & sleep {marker}"),
                ExecOptions::default()
                    .pty(Pty::default())
                    .timeout(Duration::from_millis(800)),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert!(matches!(run.status, ExitStatus::TimedOut { .. }), "{name}");
        let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
        assert!(left.is_empty(), "{name}: survived the timeout: {left:?}");

        // close: a job-control shell's background job, in a group of its own, goes too.
        let terminal = shell(&executor).await;
        let marker = format!("{}.6", token());
        terminal
            .send_text(&format!(
                "set -m; nohup sh -c 'trap \"\" HUP TERM; sleep {marker}' >/dev/null 2>&1 &\r"
            ))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while common::remote_processes(&format!("sleep {marker}")).is_empty() {
            assert!(Instant::now() < deadline, "{name}: the job did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ended = terminal.close().await;
        assert!(ended.is_ok(), "{name}: {ended:?}");
        let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
        assert!(left.is_empty(), "{name}: survived close: {left:?}");

        // The connection goes: the server hangs up the terminal, the supervisor kills the rest.
        let other = common::executor(&tb).await;
        let terminal = shell(&other).await;
        let marker = format!("{}.7", token());
        terminal
            .send_text(&format!(
                "trap '' HUP; (trap '' HUP TERM; sleep {marker}) &\r"
            ))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while common::remote_processes(&format!("sleep {marker}")).is_empty() {
            assert!(Instant::now() < deadline, "{name}: the child did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::mem::forget(terminal); // no close, no drop: the connection's end does it
        for pid in tb.connection_pids() {
            let _ = std::process::Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status();
        }
        let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(15)).await;
        assert!(
            left.is_empty(),
            "{name}: survived the lost connection: {left:?}"
        );
    }
}

#[tokio::test]
async fn hostile_input_and_output_neither_crash_nor_hang() {
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        let terminal = shell(&executor).await;
        // The program prints escapes that try to resize, retitle and query the terminal, a
        // huge title, invalid UTF-8 and a flood.
        terminal
            .send_text(
                "printf '\\033[8;5;5t\\033]0;%s\\007\\033[c\\033[6n\\377\\376 bad\\n' \
                 \"$(head -c 100000 /dev/zero | tr '\\0' x)\"; seq 1 20000; echo done-$((40 + 2))\r",
            )
            .await
            .unwrap();
        // (Patterns the typed command line cannot match: the shell echoes it.)
        let screen = expect(&terminal, r"(?m)^done-42$", &format!("{name}: the flood")).await;
        assert_eq!(
            (screen.rows, screen.cols),
            (24, 80),
            "{name}: resized by the program"
        );
        assert!(screen.title.chars().count() <= 256, "{name}");
        // Input: invalid UTF-8 and a lot of it in one send, into a program that reads it all.
        // With echo off (a password prompt), OpenSSH's sshd answers every write to the
        // terminal with an SSH_MSG_IGNORE as large as the write ("simulated echo",
        // channels.c), and a write above 256 KiB makes that message larger than any SSH
        // client accepts (russh and OpenSSH's own `ssh` both drop the connection): so 128 KiB
        // with echo off, 1 MiB with echo on.
        for (stty, size) in [("-echo", 128 << 10), ("echo", 1 << 20)] {
            terminal
                .send_text(&format!(
                    "stty {stty}; echo ready-$((1 + {size})); wc -c; stty echo\r"
                ))
                .await
                .unwrap();
            expect(
                &terminal,
                &format!(r"(?m)^ready-{}$", size + 1),
                &format!("{name}: stty {stty}"),
            )
            .await;
            let mut input = vec![b'y'; size];
            for line in input.chunks_mut(1000) {
                if let Some(last) = line.last_mut() {
                    *last = b'\n';
                }
            }
            // In canonical mode a line holds 4 KiB at most: lines of 1000 bytes pass whole.
            terminal
                .send_text(std::str::from_utf8(&input).unwrap())
                .await
                .unwrap();
            terminal
                .send_bytes(b"\xff\xfe\xc3\n".to_vec())
                .await
                .unwrap();
            // The count, then the prompt (after `stty echo`: what is typed next is echoed).
            let counted = format!(r"(?m)^\s*{}\n\$$", size + 4);
            end_of_input(&terminal, &regex(&counted)).await;
            expect(
                &terminal,
                &counted,
                &format!("{name}: wc after {size} bytes with stty {stty}"),
            )
            .await;
        }
        drop(terminal.close().await);
    }
}

/// FIFO directories the stdin feeder left on the host (`mktemp -d` ones holding `in`).
fn leftover_fifos() -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("in").exists())
        .filter(|path| {
            std::fs::metadata(path.join("in"))
                .is_ok_and(|meta| std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()))
        })
        .collect()
}

#[tokio::test]
async fn stdin_of_50_mib_reaches_sha256sum_exactly_and_leaves_nothing_behind() {
    use sha2::{Digest, Sha256};
    let data: Vec<u8> = {
        // Not compressible, not text: every byte value, in a pseudo-random order.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        (0..50 * 1024 * 1024)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    };
    let expected = data_encoding::HEXLOWER.encode(&Sha256::digest(&data));
    let before = leftover_fifos();
    for (name, tb) in rows() {
        let executor = common::executor(&tb).await;
        // Bytes given up front.
        let run = executor
            .execute(
                "sha256sum | cut -d' ' -f1",
                ExecOptions::default().stdin(data.clone()),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(
            run.status,
            ExitStatus::Code(0),
            "{name}: {:?}",
            String::from_utf8_lossy(&run.stderr())
        );
        assert_eq!(
            String::from_utf8_lossy(&run.stdout()),
            format!("{expected}\n"),
            "{name}"
        );
        // Written in pieces through a process, then closed.
        let mut process = executor
            .spawn("wc -c; sha256sum", ExecOptions::default())
            .await
            .unwrap();
        for piece in data.chunks(3 * 1024 * 1024 + 17).take(4) {
            process.write(piece.to_vec()).await.unwrap();
        }
        process.close_stdin().await;
        let run = process.wait().await.unwrap();
        let out = String::from_utf8_lossy(&run.stdout()).into_owned();
        let written: usize = data
            .chunks(3 * 1024 * 1024 + 17)
            .take(4)
            .map(<[u8]>::len)
            .sum();
        assert!(out.starts_with(&format!("{written}\n")), "{name}: {out:?}");
        // A command that never reads its stdin ends, and a timeout still kills the group.
        let run = executor
            .execute(
                "echo ignored",
                ExecOptions::default().stdin(vec![b'x'; 1 << 20]),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(run.stdout(), b"ignored\n", "{name}");
        let marker = format!("{}.8", token());
        let run = executor
            .execute(
                &format!("cat >/dev/null; sleep {marker}"),
                ExecOptions::default()
                    .stdin(b"some input".to_vec())
                    .timeout(Duration::from_millis(800)),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert!(
            matches!(run.status, ExitStatus::TimedOut { .. }),
            "{name}: {run:?}"
        );
        let left = wait_until_gone(&format!("sleep {marker}"), Duration::from_secs(10)).await;
        assert!(left.is_empty(), "{name}: {left:?}");
        // A `#!` script reads its body on stdin: it cannot take the caller's.
        let refused = executor
            .execute(
                "#!/bin/sh\necho x",
                ExecOptions::default().stdin(b"x".to_vec()),
                &mut |_| {},
            )
            .await;
        assert!(
            matches!(
                refused,
                Err(swiftide_ssh_executor::Error::InvalidInput { .. })
            ),
            "{name}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left: Vec<_> = Vec::new();
    while Instant::now() < deadline {
        left = leftover_fifos()
            .into_iter()
            .filter(|dir| !before.contains(dir))
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "FIFO directories left behind: {left:?}");
}
