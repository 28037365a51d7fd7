//! Forwards as tools an agent calls, shared by every door (the swiftide tools, the bamboo
//! adapter, the MCP server): `expose_port` makes a port on the host reachable at a local
//! address the agent's other tools can open (a browser, an HTTP client, a database driver),
//! and `list_ports` says which are. The arguments with their JSON schemas, the operations on
//! one door's forwards ([`PortSet`]) and the text a model reads live here; a door only maps
//! its own call and result types.
//!
//! Forwards are bound to the door that made them: dropping the [`PortSet`] (the door)
//! closes every one, so nothing listens after the agent.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, SocketAddr},
};

use schemars::JsonSchema;
use serde::Deserialize;

use super::LocalForward;
use crate::{executor::SshExecutor, terminals::tools::ToolFailure};

/// The most ports one door exposes at once.
pub(crate) const MAX_EXPOSED_PORTS: usize = 16;

/// Arguments of `expose_port`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExposePortArgs {
    /// The TCP port on the remote host, e.g. 8080 for a dev server started there.
    pub(crate) port: u16,
    /// The address the remote host connects to (default `localhost`): another name or
    /// address only for a service the host reaches on another machine.
    #[serde(default)]
    pub(crate) host: Option<String>,
}

/// Arguments of `list_ports` (none).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListPortsArgs {}

/// The descriptions of the two tools, the same behind every door.
pub(crate) const EXPOSE_PORT_ABOUT: &str = "Make a TCP port on the remote host reachable \
    from here: returns a local address (and an http:// URL for it) that your other tools \
    (a browser, an HTTP client, a database client) can open; each connection to it is \
    carried to that port as the remote host sees it (default host localhost). Start the \
    service on the remote host first (e.g. as a background job); exposing a port nothing \
    listens on yet is fine, connections are refused until it does. Exposing the same port \
    again returns the same address. Ports stay exposed until this session ends; at most 16.";
/// See [`EXPOSE_PORT_ABOUT`].
pub(crate) const LIST_PORTS_ABOUT: &str = "List the remote ports exposed with expose_port: \
    the local address of each, and how many connections it has carried.";

/// One door's exposed ports, by `host:port` on the remote side.
#[derive(Debug)]
pub(crate) struct PortSet {
    executor: SshExecutor,
    exposed: tokio::sync::Mutex<BTreeMap<(String, u16), LocalForward>>,
}

impl PortSet {
    pub(crate) fn new(executor: SshExecutor) -> Self {
        Self {
            executor,
            exposed: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// `expose_port`: a local forward on loopback (a free port) to `host:port` on the
    /// remote side, or the one made before for the same target. Returns its local address
    /// and the text for the model.
    pub(crate) async fn expose(
        &self,
        args: ExposePortArgs,
    ) -> Result<(SocketAddr, String), ToolFailure> {
        if args.port == 0 {
            return Err(ToolFailure::Model(
                "port must be from 1 to 65535: the port the service listens on on the remote \
                 host"
                    .to_owned(),
            ));
        }
        let host = args
            .host
            .map(|host| host.trim().to_owned())
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        let key = (host.clone(), args.port);
        let mut exposed = self.exposed.lock().await;
        if let Some(forward) = exposed.get(&key) {
            return Ok((
                forward.local_addr(),
                exposed_text(&key, forward, "already exposed"),
            ));
        }
        if exposed.len() >= MAX_EXPOSED_PORTS {
            return Err(ToolFailure::Model(format!(
                "{MAX_EXPOSED_PORTS} ports are exposed already (list_ports shows them); \
                 reuse one of those"
            )));
        }
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let forward = self
            .executor
            .forward_local(loopback, host, args.port)
            .await
            .map_err(|error| ToolFailure::Host(error.with_causes()))?;
        let text = exposed_text(&key, &forward, "exposed");
        let local = forward.local_addr();
        exposed.insert(key, forward);
        Ok((local, text))
    }

    /// `list_ports`.
    pub(crate) async fn list(&self) -> String {
        let exposed = self.exposed.lock().await;
        if exposed.is_empty() {
            return "no ports are exposed (expose_port makes one reachable)".to_owned();
        }
        let mut text = format!(
            "{} of at most {MAX_EXPOSED_PORTS} ports exposed:",
            exposed.len()
        );
        for (key, forward) in exposed.iter() {
            let stats = forward.stats();
            text.push_str(&format!(
                "\n{} -> {}:{} on the remote host: connections {} ({} open, {} failed)",
                forward.local_addr(),
                key.0,
                key.1,
                stats.streams,
                stats.open_streams,
                stats.failed_streams,
            ));
        }
        text
    }
}

fn exposed_text((host, port): &(String, u16), forward: &LocalForward, what: &str) -> String {
    let local = forward.local_addr();
    let remote = if host == "localhost" {
        format!("remote port {port}")
    } else {
        format!("{host}:{port} (as the remote host reaches it)")
    };
    format!(
        "{remote} is {what} at {local} (as a URL: http://{local}/). Open that address with \
         your other tools; each connection to it is carried to {host}:{port} on the remote \
         host."
    )
}
