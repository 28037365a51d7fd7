//! swiftide tools for terminals (`open_terminal`, `terminal_send`, `terminal_screen`,
//! `close_terminal`, `list_terminals`), built as the job tools are: the `Tool` trait with a
//! `ToolSpec` whose parameters schema is schemars', arguments parsed from the call's JSON.
//! The arguments, operations and texts are the ones every door shares
//! (`terminals::tools`).

use std::{borrow::Cow, sync::Arc};

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use swiftide_core::{
    AgentContext, CommandError,
    chat_completion::{Tool, ToolBox, ToolCall, ToolOutput, ToolSpec, errors::ToolError},
};

use crate::{
    executor::SshExecutor,
    terminals::tools::{
        CLOSE_TERMINAL_ABOUT, CloseTerminalArgs, LIST_TERMINALS_ABOUT, ListTerminalsArgs,
        OPEN_TERMINAL_ABOUT, OpenTerminalArgs, TERMINAL_SCREEN_ABOUT, TERMINAL_SEND_ABOUT,
        TerminalScreenArgs, TerminalSendArgs, TerminalSet, ToolFailure,
    },
};

/// The five terminal tools for a swiftide agent, on one executor's host: `open_terminal`
/// (a program, by default the login shell, in a pseudo-terminal; returns its id and first
/// screen), `terminal_send` (text, then named keys such as `Enter` or `Ctrl-C`, then a wait
/// for a regex on the screen or for quiet, and the screen after), `terminal_screen` (the
/// screen, optionally after a wait, with scrollback rows), `close_terminal` (kills the whole
/// session) and `list_terminals`.
///
/// The tools made by one `TerminalTools` (and its clones) share its terminals: ids
/// `term-1`, `term-2`, ..., at most 8 open at once. They live as long as the
/// `TerminalTools` and the tools made from it: dropping the last of them kills every
/// terminal still open, so nothing is left running on the host. A terminal is bound to its
/// connection and is not a job: it does not survive the agent.
///
/// Results are text for the model: a status line (matched, quiet, timed out, the program
/// ended), then the screen ([`Screen::render`](crate::Screen::render): a header line, then
/// the rows verbatim). Problems the model can act on (an unknown id, a bad key name or
/// regex, too many terminals) are failed tool outputs; a terminal that cannot be opened on
/// the connection is a [`ToolError`], for the agent loop to decide.
///
/// ```no_run
/// # async fn demo(executor: swiftide_ssh_executor::SshExecutor) {
/// use swiftide_ssh_executor::TerminalTools;
///
/// let tools = TerminalTools::new(executor).tools();
/// // Agent::builder().tools(tools)...
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TerminalTools {
    terminals: Arc<TerminalSet>,
}

impl TerminalTools {
    /// Terminal tools on `executor`'s host, with no terminal open yet.
    pub fn new(executor: SshExecutor) -> Self {
        Self {
            terminals: Arc::new(TerminalSet::new(executor)),
        }
    }

    /// The five tools, boxed as swiftide agents take them, sharing this value's terminals.
    pub fn tools(&self) -> Vec<Box<dyn Tool>> {
        Kind::ALL
            .into_iter()
            .map(|kind| {
                Box::new(TerminalTool {
                    terminals: self.terminals.clone(),
                    kind,
                }) as Box<dyn Tool>
            })
            .collect()
    }
}

#[async_trait]
impl ToolBox for TerminalTools {
    async fn available_tools(&self) -> anyhow::Result<Vec<Box<dyn Tool>>> {
        Ok(self.tools())
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed("ssh-terminals")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Send,
    Screen,
    Close,
    List,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Open,
        Kind::Send,
        Kind::Screen,
        Kind::Close,
        Kind::List,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Open => "open_terminal",
            Kind::Send => "terminal_send",
            Kind::Screen => "terminal_screen",
            Kind::Close => "close_terminal",
            Kind::List => "list_terminals",
        }
    }

    fn spec(self) -> ToolSpec {
        let (description, schema) = match self {
            Kind::Open => (OPEN_TERMINAL_ABOUT, schemars::schema_for!(OpenTerminalArgs)),
            Kind::Send => (TERMINAL_SEND_ABOUT, schemars::schema_for!(TerminalSendArgs)),
            Kind::Screen => (
                TERMINAL_SCREEN_ABOUT,
                schemars::schema_for!(TerminalScreenArgs),
            ),
            Kind::Close => (
                CLOSE_TERMINAL_ABOUT,
                schemars::schema_for!(CloseTerminalArgs),
            ),
            Kind::List => (
                LIST_TERMINALS_ABOUT,
                schemars::schema_for!(ListTerminalsArgs),
            ),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description: description.to_owned(),
            parameters_schema: Some(schema),
        }
    }
}

/// One of the terminal tools.
#[derive(Debug, Clone)]
struct TerminalTool {
    terminals: Arc<TerminalSet>,
    kind: Kind,
}

/// A terminal or port tool's result as swiftide takes it.
pub(super) fn shared_output(result: Result<String, ToolFailure>) -> Result<ToolOutput, ToolError> {
    match result {
        Ok(text) => Ok(ToolOutput::text(text)),
        // The model can act on it (another id, another key name, close one first).
        Err(ToolFailure::Model(text)) => Ok(ToolOutput::fail(text)),
        // The host could not give a terminal or a forward: the agent loop decides.
        Err(ToolFailure::Host(text)) => Err(ToolError::execution_failed(
            CommandError::ExecutorError(anyhow::anyhow!(text)),
        )),
    }
}

/// A call's JSON arguments as `T` (the port tools parse theirs alike).
pub(super) fn parse<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolError> {
    // A tool without arguments may be called with none at all.
    let raw = call.args().map(str::trim).filter(|raw| !raw.is_empty());
    serde_json::from_str(raw.unwrap_or("{}")).map_err(ToolError::wrong_arguments)
}

impl TerminalTool {
    async fn run(&self, call: &ToolCall) -> Result<Result<String, ToolFailure>, ToolError> {
        let terminals = &self.terminals;
        Ok(match self.kind {
            Kind::Open => {
                let args: OpenTerminalArgs = parse(call)?;
                match args.into_options() {
                    Ok((command, options)) => {
                        terminals.open(command, options).await.map(|(_, text)| text)
                    }
                    Err(error) => Err(error),
                }
            }
            Kind::Send => terminals.send(parse(call)?).await,
            Kind::Screen => terminals.screen(parse(call)?).await,
            Kind::Close => terminals.close(parse(call)?).await,
            Kind::List => {
                let ListTerminalsArgs {} = parse(call)?;
                Ok(terminals.list())
            }
        })
    }
}

#[async_trait]
impl Tool for TerminalTool {
    async fn invoke(
        &self,
        _context: &dyn AgentContext,
        call: &ToolCall,
    ) -> Result<ToolOutput, ToolError> {
        shared_output(self.run(call).await?)
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
        let send = Kind::Send.spec().strict_parameters_schema().unwrap();
        for field in ["id", "text", "keys", "wait_for", "quiet_ms", "timeout_secs"] {
            assert!(
                send.as_json()["properties"][field].is_object(),
                "{field}: {}",
                send.as_json()
            );
        }
        let screen = Kind::Screen.spec().strict_parameters_schema().unwrap();
        assert!(screen.as_json()["properties"]["scrollback_lines"].is_object());
    }
}
