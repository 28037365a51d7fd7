//! swiftide tools for jobs (`start_job`, `job_output`, `job_status`, `kill_job`,
//! `list_jobs`), a [`Family`] of tools on one executor. The arguments, operations and
//! texts are the ones every door shares (`jobs::tools`).

use std::borrow::Cow;

use async_trait::async_trait;
use swiftide_core::chat_completion::{Tool, ToolBox, ToolCall, ToolOutput, errors::ToolError};

use super::{
    executor_error,
    family::{self, Family, parse},
};
use crate::{
    executor::SshExecutor,
    jobs::tools::{
        JOB_OUTPUT_ABOUT, JOB_STATUS_ABOUT, JobOutputArgs, JobStatusArgs, KILL_JOB_ABOUT,
        KillJobArgs, LIST_JOBS_ABOUT, ListJobsArgs, START_JOB_ABOUT, StartJobArgs, job_output,
        job_status, kill_job, list_jobs, model_facing, start_job,
    },
};

/// The five job tools for a swiftide agent, acting on one executor's host: `start_job`
/// (a command that outlives the call, the connection and the agent), `job_output` (stdout
/// and stderr since a cursor, cursor in and cursor out, consuming nothing), `job_status`
/// (with an optional wait for the end), `kill_job` (the whole process group) and
/// `list_jobs`.
///
/// The tools act on the executor given here, not on the agent context's (a context holds
/// its executor as a `dyn ToolExecutor`). Results are text for the model: the job's state
/// (exit code or signal), new output per stream, bytes the host dropped, and the cursor to
/// pass next (`stdout=N,stderr=M`). Problems the model can act on (an unknown id, a bad
/// cursor, an id taken by another command) are failed tool outputs; a lost connection is a
/// [`ToolError`], for the agent loop to decide.
///
/// ```no_run
/// # async fn demo(executor: swiftide_ssh_executor::SshExecutor) {
/// use swiftide_ssh_executor::JobTools;
///
/// let tools = JobTools::new(executor).tools();
/// // Agent::builder().tools(tools)...
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct JobTools {
    executor: SshExecutor,
}

impl JobTools {
    /// Job tools on `executor`'s host.
    pub fn new(executor: SshExecutor) -> Self {
        Self { executor }
    }

    /// The five tools, boxed as swiftide agents take them.
    pub fn tools(&self) -> Vec<Box<dyn Tool>> {
        family::tools(self)
    }
}

#[async_trait]
impl ToolBox for JobTools {
    async fn available_tools(&self) -> anyhow::Result<Vec<Box<dyn Tool>>> {
        Ok(self.tools())
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed("ssh-jobs")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Start,
    Output,
    Status,
    Kill,
    List,
}

#[async_trait]
impl Family for JobTools {
    type Kind = Kind;

    const KINDS: &'static [Kind] = &[
        Kind::Start,
        Kind::Output,
        Kind::Status,
        Kind::Kill,
        Kind::List,
    ];

    fn name(kind: Kind) -> &'static str {
        match kind {
            Kind::Start => "start_job",
            Kind::Output => "job_output",
            Kind::Status => "job_status",
            Kind::Kill => "kill_job",
            Kind::List => "list_jobs",
        }
    }

    fn about(kind: Kind) -> (&'static str, schemars::Schema) {
        match kind {
            Kind::Start => (START_JOB_ABOUT, schemars::schema_for!(StartJobArgs)),
            Kind::Output => (JOB_OUTPUT_ABOUT, schemars::schema_for!(JobOutputArgs)),
            Kind::Status => (JOB_STATUS_ABOUT, schemars::schema_for!(JobStatusArgs)),
            Kind::Kill => (KILL_JOB_ABOUT, schemars::schema_for!(KillJobArgs)),
            Kind::List => (LIST_JOBS_ABOUT, schemars::schema_for!(ListJobsArgs)),
        }
    }

    async fn invoke(&self, kind: Kind, call: &ToolCall) -> Result<ToolOutput, ToolError> {
        match self.run(kind, call).await? {
            Ok(text) => Ok(ToolOutput::text(text)),
            Err(error) => match model_facing(&error) {
                // The model can act on it (another id, another cursor, start it first).
                Some(text) => Ok(ToolOutput::fail(text)),
                // The host could not be asked: the agent loop decides.
                None => Err(ToolError::execution_failed(executor_error(error))),
            },
        }
    }
}

impl JobTools {
    async fn run(&self, kind: Kind, call: &ToolCall) -> Result<crate::Result<String>, ToolError> {
        let executor = &self.executor;
        Ok(match kind {
            Kind::Start => {
                let args: StartJobArgs = parse(call)?;
                match args.into_options() {
                    Ok((command, options)) => start_job(executor, &command, options)
                        .await
                        .map(|(_, text)| text),
                    Err(error) => Err(error),
                }
            }
            Kind::Output => {
                let args: JobOutputArgs = parse(call)?;
                match args.cursor_and_limit() {
                    Ok((cursor, max)) => job_output(executor, &args.id, cursor, max)
                        .await
                        .map(|(_, text)| text),
                    Err(error) => Err(error),
                }
            }
            Kind::Status => {
                let args: JobStatusArgs = parse(call)?;
                match args.wait() {
                    Ok(wait) => job_status(executor, &args.id, wait).await,
                    Err(error) => Err(error),
                }
            }
            Kind::Kill => {
                let args: KillJobArgs = parse(call)?;
                match args.grace() {
                    Ok(grace) => kill_job(executor, &args.id, grace).await,
                    Err(error) => Err(error),
                }
            }
            Kind::List => {
                let ListJobsArgs {} = parse(call)?;
                list_jobs(executor).await
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_is_a_valid_strict_schema() {
        let schemas = family::strict_schemas::<JobTools>();
        assert_eq!(schemas.len(), 5);
        assert!(schemas["start_job"]["properties"]["command"].is_object());
        assert!(schemas["job_output"]["properties"]["cursor"].is_object());
    }
}
