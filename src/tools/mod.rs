//! The catalog of agent tools: each operation implemented once, with the text a model reads
//! about it, for every door to map onto (the adapters today: agent-sdk's `Environment`,
//! bamboo's `ToolExecutor`, the MCP server). A door only converts its framework's arguments
//! and formats the result the way its framework expects; what an operation does is decided
//! here.
//!
//! So far: file search, [`search`] (glob and grep), which only the adapters use, and the
//! checkpoint tools, [`checkpoints`] (the MCP server maps them).

#[cfg(feature = "mcp")]
pub(crate) mod checkpoints;
#[cfg(any(feature = "agent-sdk", feature = "bamboo", feature = "mcp"))]
pub(crate) mod search;
