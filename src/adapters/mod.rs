//! Adapters that plug the executor into other agent frameworks, each behind an
//! off-by-default cargo feature: agent-sdk's `Environment`, bamboo's `ToolExecutor`, and an MCP
//! server for any MCP client. See the guide's [Adapters](crate::guide::adapters) for what
//! each one maps.

#[cfg(feature = "agent-sdk")]
#[cfg_attr(docsrs, doc(cfg(feature = "agent-sdk")))]
pub mod agent_sdk;
#[cfg(feature = "bamboo")]
#[cfg_attr(docsrs, doc(cfg(feature = "bamboo")))]
pub mod bamboo;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
