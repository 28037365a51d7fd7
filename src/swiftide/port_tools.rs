//! swiftide tools for forwards (`expose_port`, `list_ports`), a [`Family`] of tools over
//! one set of forwards; the arguments, operations and texts are the ones every door shares
//! (`forwards::tools`).

use std::{borrow::Cow, sync::Arc};

use async_trait::async_trait;
use swiftide_core::chat_completion::{Tool, ToolBox, ToolCall, ToolOutput, errors::ToolError};

use super::{
    family::{self, Family, parse},
    terminal_tools::shared_output,
};
use crate::{
    executor::SshExecutor,
    forwards::tools::{
        EXPOSE_PORT_ABOUT, ExposePortArgs, LIST_PORTS_ABOUT, ListPortsArgs, PortSet,
    },
};

/// The port tools for a swiftide agent, on one executor's host: `expose_port` (a port on
/// the host → a local address the agent's other tools open, through a local forward) and
/// `list_ports`.
///
/// The tools made by one `PortTools` (and its clones) share its forwards, at most 16. They
/// live as long as the `PortTools` and the tools made from it: dropping the last of them
/// closes every forward, so nothing listens after the agent.
///
/// ```no_run
/// # async fn demo(executor: swiftide_ssh_executor::SshExecutor) {
/// use swiftide_ssh_executor::PortTools;
///
/// let tools = PortTools::new(executor).tools();
/// // Agent::builder().tools(tools)...
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PortTools {
    ports: Arc<PortSet>,
}

impl PortTools {
    /// Port tools on `executor`'s host, with no port exposed yet.
    pub fn new(executor: SshExecutor) -> Self {
        Self {
            ports: Arc::new(PortSet::new(executor)),
        }
    }

    /// The two tools, boxed as swiftide agents take them, sharing this value's forwards.
    pub fn tools(&self) -> Vec<Box<dyn Tool>> {
        family::tools(self)
    }
}

#[async_trait]
impl ToolBox for PortTools {
    async fn available_tools(&self) -> anyhow::Result<Vec<Box<dyn Tool>>> {
        Ok(self.tools())
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed("ssh-ports")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Expose,
    List,
}

#[async_trait]
impl Family for PortTools {
    type Kind = Kind;

    const KINDS: &'static [Kind] = &[Kind::Expose, Kind::List];

    fn name(kind: Kind) -> &'static str {
        match kind {
            Kind::Expose => "expose_port",
            Kind::List => "list_ports",
        }
    }

    fn about(kind: Kind) -> (&'static str, schemars::Schema) {
        match kind {
            Kind::Expose => (EXPOSE_PORT_ABOUT, schemars::schema_for!(ExposePortArgs)),
            Kind::List => (LIST_PORTS_ABOUT, schemars::schema_for!(ListPortsArgs)),
        }
    }

    async fn invoke(&self, kind: Kind, call: &ToolCall) -> Result<ToolOutput, ToolError> {
        let result = match kind {
            Kind::Expose => self.ports.expose(parse(call)?).await.map(|(_, text)| text),
            Kind::List => {
                let ListPortsArgs {} = parse(call)?;
                Ok(self.ports.list().await)
            }
        };
        shared_output(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_is_a_valid_strict_schema() {
        let schemas = family::strict_schemas::<PortTools>();
        assert_eq!(schemas.len(), 2);
        assert!(schemas["expose_port"]["properties"]["port"].is_object());
    }
}
