//! Kills from a second channel: for a command whose own channel cannot carry its kill (a
//! terminal, one of the crate's scripts, a command whose runner was lost).

use std::sync::Arc;

use super::{execute, request::ExecRequest};
use crate::{
    command::{escalation::Exchange, supervisor},
    config::{Config, limit},
    error::{Error, Phase, Result},
    pool::{self, Counters, Pool, Session},
};

/// Kills process group `pgid` from a new channel on `session`, in the background. A group
/// started through an escalation belongs to the target account, which the login user may
/// not signal: the kill then goes through the same escalation, as one of the executor's own
/// scripts (on any connection to the host).
///
/// With `session` (a terminal) the group's whole session is killed too.
pub(super) fn spawn_kill(
    inner: Arc<Pool>,
    session: Arc<Session>,
    escalation: Option<Exchange>,
    pgid: u32,
    whole_session: bool,
) {
    inner
        .registry
        .counters
        .kills
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(async move {
        let config = &inner.config;
        let killed = match escalation {
            None => {
                kill_group(
                    &session,
                    config,
                    &inner.registry.counters,
                    pgid,
                    whole_session,
                )
                .await
            }
            Some(exchange) => kill_escalated(&inner, exchange, pgid, whole_session).await,
        };
        if let Err(error) = killed {
            tracing::warn!(host = %config.host, pgid, %error, "killing the remote process group failed");
        }
    });
}

/// [`kill_group`] through an escalation: the kill script as one of the executor's own
/// scripts, escalated like the command was (its own prompt and password exchange).
async fn kill_escalated(
    inner: &Arc<Pool>,
    exchange: Exchange,
    pgid: u32,
    whole_session: bool,
) -> Result<()> {
    let script = supervisor::kill_script(pgid, inner.config.kill_grace, whole_session);
    let request = ExecRequest::script(script.as_bytes(), b"", Some(exchange.fresh()))?;
    let within = limit::sum(&[inner.config.kill_grace, inner.config.connect_timeout]);
    execute(inner, request, Some(within), &mut |_| {}).await?;
    Ok(())
}

async fn kill_group(
    session: &Arc<Session>,
    config: &Config,
    counters: &Counters,
    pgid: u32,
    whole_session: bool,
) -> Result<()> {
    tracing::debug!(host = %config.host, pgid, grace = ?config.kill_grace, "killing remote process group");
    let (mut channel, _open) = pool::open_channel(session, config, counters, &mut || true).await?;
    channel
        .exec(
            true,
            supervisor::kill_request(pgid, config.kill_grace, whole_session),
        )
        .await
        .map_err(|source| Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Kill,
            source,
        })?;
    let _ = channel.eof().await;
    // Drain to the server's close so the channel is released properly.
    let within = limit::sum(&[config.kill_grace, config.connect_timeout]);
    let drained = tokio::time::timeout(within, pool::wait_for_close(&mut channel)).await;
    if drained.is_err() {
        let _ = channel.close().await;
        return Err(Error::Timeout {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Kill,
            after: within,
        });
    }
    Ok(())
}
