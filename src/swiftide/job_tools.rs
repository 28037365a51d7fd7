//! swiftide tools for jobs (`start_job`, `job_output`, `job_status`, `kill_job`,
//! `list_jobs`), built the way swiftide-agents builds its own tools: the `Tool` trait with a
//! `ToolSpec` whose parameters schema is schemars', arguments parsed from the call's JSON.
//! The arguments, operations and texts are the ones every door shares (`jobs::tools`).

use std::borrow::Cow;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use swiftide_core::{
    AgentContext,
    chat_completion::{Tool, ToolBox, ToolCall, ToolOutput, ToolSpec, errors::ToolError},
};

use super::executor_error;
use crate::{
    error::Result,
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
        Kind::ALL
            .into_iter()
            .map(|kind| {
                Box::new(JobTool {
                    executor: self.executor.clone(),
                    kind,
                }) as Box<dyn Tool>
            })
            .collect()
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
enum Kind {
    Start,
    Output,
    Status,
    Kill,
    List,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Start,
        Kind::Output,
        Kind::Status,
        Kind::Kill,
        Kind::List,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Start => "start_job",
            Kind::Output => "job_output",
            Kind::Status => "job_status",
            Kind::Kill => "kill_job",
            Kind::List => "list_jobs",
        }
    }

    fn spec(self) -> ToolSpec {
        let (description, schema) = match self {
            Kind::Start => (START_JOB_ABOUT, schemars::schema_for!(StartJobArgs)),
            Kind::Output => (JOB_OUTPUT_ABOUT, schemars::schema_for!(JobOutputArgs)),
            Kind::Status => (JOB_STATUS_ABOUT, schemars::schema_for!(JobStatusArgs)),
            Kind::Kill => (KILL_JOB_ABOUT, schemars::schema_for!(KillJobArgs)),
            Kind::List => (LIST_JOBS_ABOUT, schemars::schema_for!(ListJobsArgs)),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description: description.to_owned(),
            parameters_schema: Some(schema),
        }
    }
}

/// One of the job tools.
#[derive(Debug, Clone)]
struct JobTool {
    executor: SshExecutor,
    kind: Kind,
}

fn parse<T: DeserializeOwned>(call: &ToolCall) -> std::result::Result<T, ToolError> {
    // A tool without arguments may be called with none at all.
    let raw = call.args().map(str::trim).filter(|raw| !raw.is_empty());
    serde_json::from_str(raw.unwrap_or("{}")).map_err(ToolError::wrong_arguments)
}

impl JobTool {
    async fn run(&self, call: &ToolCall) -> std::result::Result<Result<String>, ToolError> {
        let executor = &self.executor;
        Ok(match self.kind {
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

#[async_trait]
impl Tool for JobTool {
    async fn invoke(
        &self,
        _context: &dyn AgentContext,
        call: &ToolCall,
    ) -> std::result::Result<ToolOutput, ToolError> {
        match self.run(call).await? {
            Ok(text) => Ok(ToolOutput::text(text)),
            Err(error) => match model_facing(&error) {
                // The model can act on it (another id, another cursor, start it first).
                Some(text) => Ok(ToolOutput::fail(text)),
                // The host could not be asked: the agent loop decides.
                None => Err(ToolError::execution_failed(executor_error(error))),
            },
        }
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.kind.name())
    }

    fn tool_spec(&self) -> ToolSpec {
        self.kind.spec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_is_a_valid_strict_schema() {
        for kind in Kind::ALL {
            let spec = kind.spec();
            let strict = spec.strict_parameters_schema().unwrap();
            let json = strict.as_json();
            assert_eq!(json["type"], "object", "{}: {json}", spec.name);
            assert_eq!(json["additionalProperties"], false, "{}: {json}", spec.name);
        }
        let start = Kind::Start.spec().strict_parameters_schema().unwrap();
        assert!(start.as_json()["properties"]["command"].is_object());
        let output = Kind::Output.spec().strict_parameters_schema().unwrap();
        assert!(output.as_json()["properties"]["cursor"].is_object());
    }
}
