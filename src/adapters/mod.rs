//! Adapters that expose the executor to other agent ecosystems, each behind its own cargo
//! feature.

#[cfg(feature = "mcp")]
pub mod mcp;
