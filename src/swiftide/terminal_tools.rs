//! swiftide tools for terminals (`open_terminal`, `terminal_send`, `terminal_screen`,
//! `close_terminal`, `list_terminals`), a [`Family`] of tools over one set of terminals.
//! The arguments, operations and texts are the ones every door shares
//! (`terminals::tools`).

use std::{borrow::Cow, sync::Arc};

use async_trait::async_trait;
use swiftide_core::{
    CommandError,
    chat_completion::{Tool, ToolBox, ToolCall, ToolOutput, errors::ToolError},
};

use super::family::{self, Family, parse};
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
        family::tools(self)
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
pub(super) enum Kind {
    Open,
    Send,
    Screen,
    Close,
    List,
}

#[async_trait]
impl Family for TerminalTools {
    type Kind = Kind;

    const KINDS: &'static [Kind] = &[
        Kind::Open,
        Kind::Send,
        Kind::Screen,
        Kind::Close,
        Kind::List,
    ];

    fn name(kind: Kind) -> &'static str {
        match kind {
            Kind::Open => "open_terminal",
            Kind::Send => "terminal_send",
            Kind::Screen => "terminal_screen",
            Kind::Close => "close_terminal",
            Kind::List => "list_terminals",
        }
    }

    fn about(kind: Kind) -> (&'static str, schemars::Schema) {
        match kind {
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
        }
    }

    async fn invoke(&self, kind: Kind, call: &ToolCall) -> Result<ToolOutput, ToolError> {
        let terminals = &self.terminals;
        let result = match kind {
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
        };
        shared_output(result)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_is_a_valid_strict_schema() {
        let schemas = family::strict_schemas::<TerminalTools>();
        assert_eq!(schemas.len(), 5);
        let send = &schemas["terminal_send"];
        for field in ["id", "text", "keys", "wait_for", "quiet_ms", "timeout_secs"] {
            assert!(send["properties"][field].is_object(), "{field}: {send}");
        }
        assert!(schemas["terminal_screen"]["properties"]["scrollback_lines"].is_object());
    }
}
