//! What a rollout prints: live `host: line` output, JSON records or folded groups, the
//! progress bar, the summary line and the exit code at the end.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use swiftide_ssh_executor::{
    FleetEvent, FleetReport, HostRecord,
    fleet::{LiveLines, fold_records, max_exit_code, write_failed_hosts, write_records},
};

use crate::args::{OutputArgs, Usage};

/// What a subcommand reports as each host finishes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Streamed {
    /// A command: its output arrives as `Output` events.
    Output,
    /// Everything else: a host's summary (or output) comes with its result.
    AtTheEnd,
}

/// Prints a fleet's events: live `host: line` output, JSON records or nothing (folded at
/// the end), with a progress bar on a terminal.
pub(crate) struct Printer {
    fold: bool,
    json: bool,
    streamed: Streamed,
    live: LiveLines,
    progress: ProgressBar,
}

impl Printer {
    pub(crate) fn new(output: &OutputArgs, streamed: Streamed, hosts: usize) -> Self {
        let progress = if !output.no_progress && std::io::stderr().is_terminal() {
            let bar =
                ProgressBar::with_draw_target(Some(hosts as u64), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {pos}/{len} hosts  {msg}  [{elapsed}]")
            {
                bar.set_style(style);
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Printer {
            fold: output.fold,
            json: output.json,
            streamed,
            live: LiveLines::new(),
            progress,
        }
    }

    fn live(&self) -> bool {
        !self.fold && !self.json
    }

    /// Prints `host: text` lines to stdout or stderr, above the progress bar.
    fn lines(&self, host: &str, stderr: bool, lines: impl IntoIterator<Item = String>) {
        let lines: Vec<String> = lines.into_iter().collect();
        if lines.is_empty() {
            return;
        }
        self.progress.suspend(|| {
            let mut text = String::new();
            for line in lines {
                text.push_str(host);
                text.push_str(": ");
                text.push_str(&line);
                text.push('\n');
            }
            // A closed pipe (`| head`) is not worth a panic: the rest is dropped.
            let _ = if stderr {
                std::io::stderr().lock().write_all(text.as_bytes())
            } else {
                std::io::stdout().lock().write_all(text.as_bytes())
            };
        });
    }

    fn record(&self, record: &HostRecord) {
        self.progress.suspend(|| {
            let mut stdout = std::io::stdout().lock();
            let _ = write_records([record], &mut stdout);
            let _ = stdout.flush();
        });
    }

    pub(crate) fn event(&mut self, event: FleetEvent<'_>) {
        match event {
            FleetEvent::Output {
                host,
                member,
                chunk,
                ..
            } if self.live() => {
                for line in self.live.push(member, chunk) {
                    self.lines(host, line.stderr, [line.text]);
                }
            }
            FleetEvent::Retrying {
                host,
                attempt,
                error,
                delay,
                ..
            } => {
                self.progress.set_message(format!("retrying {host}"));
                if !self.json {
                    self.lines(
                        host,
                        true,
                        [format!(
                            "attempt {attempt} failed ({error}); again in {delay:?}"
                        )],
                    );
                }
            }
            FleetEvent::Finished { result, member, .. } => {
                self.progress.inc(1);
                if self.json {
                    self.record(&HostRecord::from_result(result, false));
                    return;
                }
                if self.live() {
                    for line in self.live.finish(member) {
                        self.lines(&result.name, line.stderr, [line.text]);
                    }
                    if self.streamed == Streamed::AtTheEnd
                        && let Ok(execution) = &result.outcome
                    {
                        let text = |bytes: Vec<u8>| {
                            String::from_utf8_lossy(&bytes)
                                .lines()
                                .map(str::to_owned)
                                .collect::<Vec<_>>()
                        };
                        self.lines(&result.name, false, text(execution.stdout()));
                        self.lines(&result.name, true, text(execution.stderr()));
                    }
                }
                let status = result.status();
                if !status.is_ok() {
                    let why = match &result.outcome {
                        Err(error) => format!("{status}: {}", error_chain(error)),
                        Ok(_) => status.to_string(),
                    };
                    self.lines(&result.name, true, [why]);
                }
            }
            FleetEvent::Skipped { skipped, .. } => {
                self.progress.inc(1);
                if self.json {
                    self.record(&HostRecord::from_skipped(skipped));
                } else {
                    self.lines(
                        &skipped.name,
                        true,
                        [format!("skipped: {}", skipped.reason)],
                    );
                }
            }
            _ => {}
        }
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Prints folded groups to stdout.
pub(crate) fn print_folded(records: &[HostRecord]) {
    let mut stdout = std::io::stdout().lock();
    for group in fold_records(records) {
        let _ = write!(stdout, "{group}");
    }
    let _ = stdout.flush();
}

/// One line of counts on stderr when not every host succeeded.
pub(crate) fn print_summary(records: &[HostRecord], stopped: Option<&str>) {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for record in records {
        match counts
            .iter_mut()
            .find(|(status, _)| *status == record.status)
        {
            Some((_, n)) => *n += 1,
            None => counts.push((record.status.clone(), 1)),
        }
    }
    if counts.iter().all(|(status, _)| status == "ok") {
        return;
    }
    let text: Vec<String> = counts
        .iter()
        .map(|(status, n)| format!("{n} {}", status.replace('_', " ")))
        .collect();
    eprintln!(
        "swiftide-ssh: {} of {} hosts",
        text.join(", "),
        records.len()
    );
    if let Some(reason) = stopped {
        eprintln!("swiftide-ssh: rollout stopped: {reason}");
    }
}

/// After a rollout: the folded report, the failed-hosts file, the counts, the exit code.
pub(crate) fn finish(
    printer: Printer,
    output: &OutputArgs,
    report: &FleetReport,
) -> Result<u8, Usage> {
    printer.progress.finish_and_clear();
    let records = report.records(false);
    if output.fold {
        print_folded(&records);
    }
    if let Some(path) = &output.failed_hosts {
        write_failed_hosts(path, &records)?;
    }
    print_summary(&records, report.stopped.as_deref());
    let statuses: Vec<_> = records.iter().map(HostRecord::host_status).collect();
    Ok(if output.max_exit_code {
        u8::try_from(max_exit_code(&statuses)).unwrap_or(u8::MAX)
    } else {
        report.exit_code()
    })
}
