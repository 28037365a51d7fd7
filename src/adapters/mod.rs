//! Adapters that plug the executor into other agent frameworks, each behind an
//! off-by-default cargo feature. See the README for what each one maps.

#[cfg(feature = "agent-sdk")]
pub mod agent_sdk;
#[cfg(feature = "bamboo")]
pub mod bamboo;
#[cfg(any(feature = "agent-sdk", feature = "bamboo"))]
mod search;
