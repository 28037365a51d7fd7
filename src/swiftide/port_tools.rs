//! swiftide tools for forwards (`expose_port`, `list_ports`), built as the job and terminal
//! tools are; the arguments, operations and texts are the ones every door shares
//! (`forwards::tools`).

use std::{borrow::Cow, sync::Arc};

use async_trait::async_trait;
use swiftide_core::{
    AgentContext,
    chat_completion::{Tool, ToolBox, ToolCall, ToolOutput, ToolSpec, errors::ToolError},
};

use super::terminal_tools::{parse, shared_output};
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
        [Kind::Expose, Kind::List]
            .into_iter()
            .map(|kind| {
                Box::new(PortTool {
                    ports: self.ports.clone(),
                    kind,
                }) as Box<dyn Tool>
            })
            .collect()
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
enum Kind {
    Expose,
    List,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Expose => "expose_port",
            Kind::List => "list_ports",
        }
    }

    fn spec(self) -> ToolSpec {
        let (description, schema) = match self {
            Kind::Expose => (EXPOSE_PORT_ABOUT, schemars::schema_for!(ExposePortArgs)),
            Kind::List => (LIST_PORTS_ABOUT, schemars::schema_for!(ListPortsArgs)),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description: description.to_owned(),
            parameters_schema: Some(schema),
        }
    }
}

/// One of the port tools.
#[derive(Debug, Clone)]
struct PortTool {
    ports: Arc<PortSet>,
    kind: Kind,
}

#[async_trait]
impl Tool for PortTool {
    async fn invoke(
        &self,
        _context: &dyn AgentContext,
        call: &ToolCall,
    ) -> Result<ToolOutput, ToolError> {
        let result = match self.kind {
            Kind::Expose => self.ports.expose(parse(call)?).await.map(|(_, text)| text),
            Kind::List => {
                let ListPortsArgs {} = parse(call)?;
                Ok(self.ports.list().await)
            }
        };
        shared_output(result)
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
        for kind in [Kind::Expose, Kind::List] {
            let spec = kind.spec();
            let strict = spec.strict_parameters_schema().unwrap();
            let json = strict.as_json();
            assert_eq!(json["type"], "object", "{}: {json}", spec.name);
            assert_eq!(json["additionalProperties"], false, "{}: {json}", spec.name);
        }
        let expose = Kind::Expose.spec().strict_parameters_schema().unwrap();
        assert!(expose.as_json()["properties"]["port"].is_object());
    }
}
