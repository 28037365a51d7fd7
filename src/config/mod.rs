//! Settings: [`Config`], frozen by the builder and shared by every layer, and the setting
//! types it holds (authentication methods, host-key policy, jump hosts, environment plan,
//! privilege escalation), and the OpenSSH client configuration file ([`SshConfig`]) that
//! settings can come from.
//!
//! This is the bottom of the crate: it imports nothing of ours but errors. What the
//! settings *do* lives with the code that acts on them (`ssh`, `pool`, `command`).

mod auth_method;
mod env;
mod escalation;
mod guard;
mod host_key_policy;
mod jump_host;
pub(crate) mod limit;
pub(crate) mod pattern;
mod runner;
pub(crate) mod ssh_config;

use std::{fmt, path::PathBuf, time::Duration};

pub(crate) use auth_method::expand_home;
pub use auth_method::{AuthMethod, Secret};
pub(crate) use env::{EnvPlan, reject_nul};
pub use escalation::{Become, PasswordProvider, PasswordRequest};
pub(crate) use guard::Guard;
pub use guard::{Confinement, Limit, Limits, Network};
pub use host_key_policy::HostKeyPolicy;
pub use jump_host::JumpHost;
pub(crate) use jump_host::{Hop, JumpTarget, resolve_hops};
pub use runner::Runner;
pub(crate) use runner::RunnerHelper;
pub(crate) use ssh_config::local_user;
pub use ssh_config::{HostConfig, SshConfig, StrictHostKeyChecking};

/// Frozen settings shared by every clone of an executor.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) auth: Vec<AuthMethod>,
    pub(crate) host_key_policy: HostKeyPolicy,
    pub(crate) workdir: Option<PathBuf>,
    pub(crate) default_timeout: Option<Duration>,
    pub(crate) env: EnvPlan,
    pub(crate) max_connections: u32,
    pub(crate) channels_per_connection: u32,
    /// Opened-but-unused session channels kept per connection (see `pool::session`).
    pub(crate) spare_channels: u32,
    /// The exec request a spare runs ahead of demand on connections that take the direct
    /// form (`command::prestart_request`); empty: spares are not pre-started.
    pub(crate) prestart_request: Vec<u8>,
    pub(crate) connect_timeout: Duration,
    pub(crate) pool_wait_timeout: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) max_connection_lifetime: Option<Duration>,
    pub(crate) keepalive_interval: Option<Duration>,
    pub(crate) keepalive_max: usize,
    pub(crate) kill_grace: Duration,
    pub(crate) kill_on_disconnect: bool,
    pub(crate) max_output_bytes: Option<usize>,
    /// Jobs that ended at least this long ago are pruned after a start (`jobs`).
    pub(crate) job_retention: Option<Duration>,
    pub(crate) drain_timeout: Duration,
    /// Jump hosts, client side first, with every setting decided.
    pub(crate) jump_hosts: Vec<Hop>,
    /// The escalation every command, file operation and job gets unless a handle says
    /// otherwise (`SshExecutor::with_become`).
    pub(crate) escalation: Option<Become>,
    /// Whether commands go through a resident runner (`command::resident`).
    pub(crate) runner: Runner,
    /// A native runner to install and try first (`command::resident`).
    pub(crate) runner_helper: Option<std::sync::Arc<RunnerHelper>>,
    /// The limits and confinement every command gets unless its options say otherwise.
    pub(crate) guard: Guard,
    /// Run a guarded command unguarded where its guard cannot be enforced (loudly named on
    /// the builder); otherwise it is refused.
    pub(crate) unguarded_where_unenforceable: bool,
    /// Where every operation is recorded, when anywhere.
    pub(crate) audit: Option<crate::audit::AuditTrail>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Env values may hold tokens: show names only. Auth methods redact themselves.
        f.debug_struct("Config")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("auth", &self.auth)
            .field("host_key_policy", &self.host_key_policy)
            .field("workdir", &self.workdir)
            .field("default_timeout", &self.default_timeout)
            .field("env_clear", &self.env.clear)
            .field("env_remove", &self.env.remove)
            .field(
                "envs",
                &self.env.set.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("max_connections", &self.max_connections)
            .field("channels_per_connection", &self.channels_per_connection)
            .field("spare_channels", &self.spare_channels)
            .field("connect_timeout", &self.connect_timeout)
            .field("pool_wait_timeout", &self.pool_wait_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_connection_lifetime", &self.max_connection_lifetime)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("keepalive_max", &self.keepalive_max)
            .field("kill_grace", &self.kill_grace)
            .field("kill_on_disconnect", &self.kill_on_disconnect)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("job_retention", &self.job_retention)
            .field("jump_hosts", &self.jump_hosts)
            .field("escalation", &self.escalation)
            .field("runner", &self.runner)
            .field("runner_helper", &self.runner_helper)
            .field("audit", &self.audit)
            .finish()
    }
}
