//! The same forwards on every host of a fleet: each host's metrics port on a local port of
//! its own (`-L 9100:localhost:9100` on three hosts listens on 9100, 9101 and 9102), a
//! package mirror every host reaches through its own `-R`, a SOCKS proxy per host.

use std::sync::{Mutex, PoisonError};

use super::{Fleet, FleetEvent, FleetReport, each::summary_execution};
use crate::{
    command::ExitStatus,
    error::Result,
    forwards::{Forward, ForwardSpec},
};

/// One forward open on one host of a fleet.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostForward {
    /// The host's position in [`Fleet::members`].
    pub member: usize,
    /// The host's [name](Fleet::names).
    pub host: String,
    /// The forward (its [`Display`](std::fmt::Display) says where it listens and where it
    /// goes).
    pub forward: Forward,
}

/// The forwards [`Fleet::forward`] opened, kept open while this lives, and how each host
/// fared. Dropping it drops every forward (see [`LocalForward`](crate::LocalForward) and
/// [`RemoteForward`](crate::RemoteForward) for what that does); [`close`](Self::close)
/// closes them and waits.
#[derive(Debug)]
#[non_exhaustive]
pub struct FleetForwards {
    /// Every host's outcome: a host succeeded when all of its forwards opened, and its
    /// summary lists them, one line each.
    pub report: FleetReport,
    /// The forwards open, by host in member order, each host's in the order asked.
    pub forwards: Vec<HostForward>,
}

impl FleetForwards {
    /// Closes every forward, all hosts at once.
    pub async fn close(self) {
        futures::future::join_all(self.forwards.into_iter().map(|open| open.forward.close())).await;
    }
}

impl Fleet {
    /// Opens `specs` on every host, in the fleet's batches and with its concurrency,
    /// retries and per-host deadline. A local listener's port is moved up by the host's
    /// position ([`ForwardSpec::for_host`]), so that every host gets its own; port 0 lets
    /// the system pick one per host. A host whose forwards do not all open fails (those
    /// that did are closed) and is reported with the error; the others' stay open in the
    /// returned [`FleetForwards`].
    pub async fn forward(
        &self,
        specs: &[ForwardSpec],
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetForwards {
        let opened = Mutex::new(Vec::new());
        let report = self
            .run_each(
                |member, executor| {
                    let opened = &opened;
                    let host = self.name(member).to_owned();
                    async move {
                        let mut forwards = Vec::with_capacity(specs.len());
                        let mut summary = String::new();
                        for spec in specs {
                            match open(executor, spec, member).await {
                                Ok(forward) => {
                                    summary.push_str(&format!("{forward}\n"));
                                    forwards.push(forward);
                                }
                                Err(error) => {
                                    for forward in forwards {
                                        forward.close().await;
                                    }
                                    return Err(error);
                                }
                            }
                        }
                        opened
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .extend(forwards.into_iter().map(|forward| HostForward {
                                member,
                                host: host.clone(),
                                forward,
                            }));
                        Ok(summary_execution(
                            executor.host(),
                            ExitStatus::Code(0),
                            summary,
                        ))
                    }
                },
                on_event,
            )
            .await;
        let mut forwards = opened.into_inner().unwrap_or_else(PoisonError::into_inner);
        // Stable: each host's forwards stay in the order asked.
        forwards.sort_by_key(|open| open.member);
        FleetForwards { report, forwards }
    }
}

async fn open(
    executor: &crate::executor::SshExecutor,
    spec: &ForwardSpec,
    member: usize,
) -> Result<Forward> {
    executor.forward(&spec.for_host(member)?).await
}
