//! What the job, terminal and port tools share as swiftide tools: a family of kinds over
//! one shared state (an executor, a set of terminals, a set of forwards), each kind a
//! swiftide `Tool` whose spec is its name, its description and schemars' schema of its
//! arguments, and whose calls the family runs. Built the way swiftide-agents builds its own
//! tools; the arguments, operations and texts are the ones every door shares.

use std::{borrow::Cow, fmt};

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use swiftide_core::{
    AgentContext,
    chat_completion::{Tool, ToolCall, ToolOutput, ToolSpec, errors::ToolError},
};

/// A family of tools over one shared state (the family's value, cloned into each tool).
#[async_trait]
pub(super) trait Family: fmt::Debug + Clone + Send + Sync + 'static {
    /// Which tool of the family.
    type Kind: fmt::Debug + Copy + Send + Sync + 'static;

    /// Every kind, in the order the tools are listed.
    const KINDS: &'static [Self::Kind];

    /// A kind's tool name.
    fn name(kind: Self::Kind) -> &'static str;

    /// A kind's description for the model and the schema of its arguments.
    fn about(kind: Self::Kind) -> (&'static str, schemars::Schema);

    /// Runs one call of `kind`.
    async fn invoke(&self, kind: Self::Kind, call: &ToolCall) -> Result<ToolOutput, ToolError>;
}

/// The family's tools, boxed as swiftide agents take them, each sharing `family`'s state.
pub(super) fn tools<F: Family>(family: &F) -> Vec<Box<dyn Tool>> {
    F::KINDS
        .iter()
        .map(|kind| {
            Box::new(FamilyTool {
                family: family.clone(),
                kind: *kind,
            }) as Box<dyn Tool>
        })
        .collect()
}

/// A kind's swiftide spec.
pub(super) fn spec<F: Family>(kind: F::Kind) -> ToolSpec {
    let (description, schema) = F::about(kind);
    ToolSpec {
        name: F::name(kind).to_owned(),
        description: description.to_owned(),
        parameters_schema: Some(schema),
    }
}

/// A call's JSON arguments as `T`.
pub(super) fn parse<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolError> {
    // A tool without arguments may be called with none at all.
    let raw = call.args().map(str::trim).filter(|raw| !raw.is_empty());
    serde_json::from_str(raw.unwrap_or("{}")).map_err(ToolError::wrong_arguments)
}

/// One tool of a family.
#[derive(Debug, Clone)]
struct FamilyTool<F: Family> {
    family: F,
    kind: F::Kind,
}

#[async_trait]
impl<F: Family> Tool for FamilyTool<F> {
    async fn invoke(
        &self,
        _context: &dyn AgentContext,
        call: &ToolCall,
    ) -> Result<ToolOutput, ToolError> {
        self.family.invoke(self.kind, call).await
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(F::name(self.kind))
    }

    fn tool_spec(&self) -> ToolSpec {
        spec::<F>(self.kind)
    }
}

/// Test support: every kind's spec is a strict schema an LLM API takes (an object without
/// additional properties); returns the specs' schemas as JSON, by tool name.
#[cfg(test)]
pub(super) fn strict_schemas<F: Family>() -> std::collections::HashMap<String, serde_json::Value> {
    F::KINDS
        .iter()
        .map(|kind| {
            let spec = spec::<F>(*kind);
            let strict = spec
                .strict_parameters_schema()
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let json = strict.as_json().clone();
            assert_eq!(json["type"], "object", "{}: {json}", spec.name);
            assert_eq!(json["additionalProperties"], false, "{}: {json}", spec.name);
            (spec.name, json)
        })
        .collect()
}
