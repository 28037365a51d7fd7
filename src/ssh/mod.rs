//! One authenticated SSH connection: dialing (directly or through jump hosts), the host-key
//! check against known_hosts, and user authentication.
//!
//! Nothing here knows about pooling or commands; [`crate::pool`] keeps the connections this
//! module dials.

mod auth;
mod connect;
mod forwarded;
mod host_key;
mod jump;
mod known_hosts;
mod quick_ack;

pub(crate) use connect::dial;
pub(crate) use forwarded::{ForwardedStream, Listener, SharedRoutes};
pub(crate) use host_key::ClientHandler;
pub(crate) use jump::{HopCache, HopChain, describe_open_failure};
