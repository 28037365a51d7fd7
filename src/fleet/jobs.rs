//! One job on every host ([`Fleet::start_job`]), under one id, so that its states, output
//! and kill can be asked for later by that id from any process ([`Fleet::job_states`],
//! [`Fleet::job_output`], [`Fleet::kill_job`]).
//!
//! Each call is a rollout like a command's ([`FleetReport`]: batches, thresholds, retries,
//! records, folding, the exit-code policy). A host's output is its job's state in words
//! (`running`, `exited 0`, ...), the same on hosts in the same state, so that folding
//! gathers them (`web[01-18] (18) ok / running`); a job that ended is reported with its
//! exit status as the host's status (`exit 2`, `signal KILL`), so a failed job counts as a
//! failure for thresholds and exit codes.

use std::time::Duration;

use super::{Fleet, FleetEvent, FleetReport, each::summary_execution};
use crate::{
    command::{Execution, ExitStatus, OutputChunk},
    error::Result,
    executor::SshExecutor,
    jobs::{JobOptions, JobStatus, JobStream},
};

/// The jobs started by [`Fleet::start_job`].
#[derive(Debug)]
#[non_exhaustive]
pub struct FleetJobs {
    /// The jobs' id, the same on every host.
    pub id: String,
    /// One result per host; a host's output is `started job <id>`.
    pub report: FleetReport,
}

/// The jobs' states, from [`Fleet::job_states`] or [`Fleet::kill_job`].
#[derive(Debug)]
#[non_exhaustive]
pub struct FleetJobStates {
    /// One result per host (see the [module docs](self) for what the statuses mean).
    pub report: FleetReport,
    /// Each member's job state, by member position; `None` where it could not be known
    /// (the host's result says why) or the host was skipped.
    pub states: Vec<Option<JobStatus>>,
}

/// A job state in words, without what differs between hosts (pids, times).
fn state_words(status: &JobStatus) -> String {
    match status {
        JobStatus::Starting => "starting".to_owned(),
        JobStatus::Running { .. } => "running".to_owned(),
        JobStatus::Exited(ExitStatus::Code(code)) => format!("exited {code}"),
        JobStatus::Exited(ExitStatus::Signal { name, .. }) => format!("killed by signal {name}"),
        JobStatus::Exited(ExitStatus::TimedOut { .. }) => "timed out".to_owned(),
        JobStatus::Exited(_) => "ended without a status".to_owned(),
        JobStatus::Lost => {
            "lost: gone without a recorded status (host rebooted or runner killed)".to_owned()
        }
    }
}

/// The host's status for a job state: an ended job's own status; `0` for one that starts or
/// runs; no status (`error`) for a lost one.
fn state_exit(status: &JobStatus) -> ExitStatus {
    match status {
        JobStatus::Exited(exit) => exit.clone(),
        JobStatus::Lost => ExitStatus::Unknown,
        _ => ExitStatus::Code(0),
    }
}

fn state_execution(executor: &SshExecutor, status: &JobStatus) -> Execution {
    summary_execution(
        executor.host(),
        state_exit(status),
        format!("{}\n", state_words(status)),
    )
}

impl Fleet {
    /// Starts `command` as a job ([`SshExecutor::spawn_job`]) on every host, with one id:
    /// `options`' id, or a new random `fleet-<16 hex digits>`. The id makes the start
    /// idempotent per host, so a host retried after it was unreachable (or a whole call
    /// repeated with the same id) never starts the job twice. A host's result waits for the
    /// pruning of its jobs past their [retention](crate::SshExecutorBuilder::job_retention)
    /// that the start set off (one exec, at most once an hour per executor).
    ///
    /// # Cancel safety
    /// As for `spawn_job`: a dropped start may have started the job on some hosts; ask again
    /// with the same id.
    pub async fn start_job(
        &self,
        command: &str,
        options: JobOptions,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetJobs {
        let id = options
            .id
            .clone()
            .unwrap_or_else(|| format!("fleet-{:016x}", rand::random::<u64>()));
        let options = options.id(id.clone());
        let report = self
            .run_each(
                |_, executor| {
                    let options = options.clone();
                    let id = &id;
                    async move {
                        executor.spawn_job(command, options).await?;
                        // The start's pruning (job_retention) runs now, on this connection,
                        // before the fleet lets it go and the program exits.
                        executor.finish_housekeeping().await;
                        Ok(summary_execution(
                            executor.host(),
                            ExitStatus::Code(0),
                            format!("started job {id}\n"),
                        ))
                    }
                },
                on_event,
            )
            .await;
        FleetJobs { id, report }
    }

    /// Every host's state of job `id` ([`Job::status`](crate::Job::status)), folded like
    /// command output. A host without the job fails with
    /// [`Error::JobNotFound`](crate::Error::JobNotFound).
    pub async fn job_states(
        &self,
        id: &str,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetJobStates {
        self.job_call(id, on_event, |executor, id| async move {
            executor.job(&id).await?.status().await
        })
        .await
    }

    /// Kills job `id` on every host ([`Job::kill`](crate::Job::kill): TERM to its group,
    /// KILL after `grace`) and reports the states after it.
    pub async fn kill_job(
        &self,
        id: &str,
        grace: Duration,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetJobStates {
        self.job_call(id, on_event, move |executor, id| async move {
            executor.job(&id).await?.kill(grace).await
        })
        .await
    }

    async fn job_call<'s, F, Fut>(
        &'s self,
        id: &str,
        on_event: impl FnMut(FleetEvent<'_>),
        call: F,
    ) -> FleetJobStates
    where
        F: Fn(&'s SshExecutor, String) -> Fut,
        Fut: std::future::Future<Output = Result<JobStatus>>,
    {
        let slots: Vec<std::sync::Mutex<Option<JobStatus>>> = (0..self.members.len())
            .map(|_| std::sync::Mutex::new(None))
            .collect();
        let report = self
            .run_each(
                |member, executor| {
                    let state = call(executor, id.to_owned());
                    let slot = slots.get(member);
                    async move {
                        let status = state.await?;
                        let execution = state_execution(executor, &status);
                        if let Some(mut slot) = slot.and_then(|s| s.lock().ok()) {
                            *slot = Some(status);
                        }
                        Ok(execution)
                    }
                },
                on_event,
            )
            .await;
        let states = slots
            .into_iter()
            .map(|slot| slot.into_inner().ok().flatten())
            .collect();
        FleetJobStates { report, states }
    }

    /// Every host's output of job `id` so far, up to `max_bytes` per stream from its start
    /// ([`Job::read`](crate::Job::read)), as a command's output: folded, recorded and
    /// printed the same way. A host's status is its job's (see the [module docs](self)).
    pub async fn job_output(
        &self,
        id: &str,
        max_bytes: u64,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetReport {
        self.run_each(
            |_, executor| async move {
                let job = executor.job(id).await?;
                let (stdout, stderr) = tokio::join!(
                    job.read(JobStream::Stdout, 0, max_bytes),
                    job.read(JobStream::Stderr, 0, max_bytes)
                );
                let status = job.status().await?;
                let mut execution =
                    summary_execution(executor.host(), state_exit(&status), String::new());
                execution.chunks = vec![
                    OutputChunk::Stdout(stdout?.bytes),
                    OutputChunk::Stderr(stderr?.bytes),
                ];
                Ok(execution)
            },
            on_event,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::{state_exit, state_words};
    use crate::{command::ExitStatus, jobs::JobStatus};

    #[test]
    fn states_read_the_same_on_every_host() {
        let running = |pid| JobStatus::Running {
            pid,
            started_at: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(state_words(&running(1)), state_words(&running(2)));
        assert_eq!(state_exit(&running(1)), ExitStatus::Code(0));
        let failed = JobStatus::Exited(ExitStatus::Code(3));
        assert_eq!(
            (state_words(&failed).as_str(), state_exit(&failed)),
            ("exited 3", ExitStatus::Code(3))
        );
        assert_eq!(state_exit(&JobStatus::Lost), ExitStatus::Unknown);
    }
}
