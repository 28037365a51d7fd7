//! `swiftide-ssh forward`: port forwards through every host, held until a signal or the
//! end of --for.

use std::time::Duration;

use swiftide_ssh_executor::{FleetEvent, ForwardSpec};

use crate::{
    args::{FleetArgs, Usage},
    printer::{Printer, Streamed, finish},
};

/// `swiftide-ssh forward`: opens the forwards on every host, keeps them until interrupted
/// (or for `duration`), then closes them and prints their counts.
pub(crate) async fn forward(
    args: &FleetArgs,
    specs: &[ForwardSpec],
    duration: Option<Duration>,
) -> Result<u8, Usage> {
    if args.list_hosts()? {
        return Ok(0);
    }
    if specs.is_empty() {
        return Err(Usage("forward needs at least one -L, -R or -D".into()));
    }
    if args.escalation.wanted() {
        return Err(Usage(
            "forward does not escalate: forwards are the login user's (drop --become and \
             the --become-* flags, and unset the SWIFTIDE_SSH_BECOME* variables that turn it \
             on)"
            .into(),
        ));
    }
    let (fleet, trail) = args.audited_fleet(|builder| builder).await?;
    // Watched from before the first forward opens: a signal while the hosts connect stops
    // the forwards as soon as they are all open (rather than killing the process).
    let stop = Stop::watch(duration)?;
    let mut printer = Printer::new(&args.output, Streamed::AtTheEnd, fleet.members().len());
    let opened = fleet
        .forward(specs, |event: FleetEvent<'_>| printer.event(event))
        .await;
    let code = finish(printer, &args.output, &opened.report)?;
    if opened.forwards.is_empty() {
        if let Some(trail) = trail {
            trail.flush().await?;
        }
        return Ok(code);
    }
    eprintln!(
        "swiftide-ssh: {} forwards open; {}",
        opened.forwards.len(),
        match duration {
            Some(duration) => format!("closing them in {duration:?}"),
            None => "Ctrl-C closes them".to_owned(),
        }
    );
    stop.wait().await;
    for open in &opened.forwards {
        let stats = open.forward.stats();
        eprintln!(
            "{}: {}: {} streams ({} failed), {} bytes to the host, {} from it",
            open.host,
            open.forward,
            stats.streams,
            stats.failed_streams,
            stats.bytes_to_host,
            stats.bytes_from_host
        );
    }
    opened.close().await;
    if let Some(trail) = trail {
        trail.flush().await?;
    }
    Ok(code)
}

/// What ends `forward`: Ctrl-C, SIGTERM or the end of a duration.
struct Stop {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    deadline: Option<tokio::time::Instant>,
}

impl Stop {
    /// Starts watching for the signals (from now on they no longer kill the process).
    fn watch(duration: Option<Duration>) -> Result<Self, Usage> {
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|error| Usage(format!("cannot watch for {name}: {error}")))
        };
        Ok(Stop {
            interrupt: watch(SignalKind::interrupt(), "SIGINT")?,
            terminate: watch(SignalKind::terminate(), "SIGTERM")?,
            deadline: duration.map(|duration| tokio::time::Instant::now() + duration),
        })
    }

    async fn wait(mut self) {
        let elapsed = async {
            match self.deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            () = elapsed => {}
        }
    }
}
