//! The per-exec route: a command on a channel of its own, in phases.
//!
//! 1. [`open_on_slot`]: a channel from the pool (maybe a spare that runs a shell already);
//! 2. [`ExecRequest::payload`]: the form for that channel, chosen once, and only it built;
//! 3. [`send`]: the terminal's request, then the exec request (none on a spare);
//! 4. [`Watch`]: the channel's messages until it closes: the escalation's prompts and
//!    hand-over, the marker with the process group, output, the status, the kill;
//! 5. [`Watch::conclude`]: what the attempt comes to (a result, a typed escalation failure,
//!    or "nothing ran, start again" when the direct form was not run).

use std::sync::Arc;

use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{
    Attempt, StartGate,
    kill::spawn_kill,
    queue::{Event, HeldOutput, emit, forward, release},
    request::{ExecRequest, Payload},
    stdin::{Control, Forward, Input, PayloadWriter, next_control, start_stdin},
};
use crate::{
    command::{
        escalation::{Exchange, PromptWatcher},
        marker::MarkerParser,
        output::{ExitStatus, OutputChunk},
        resident,
    },
    config::{Config, limit},
    error::{BecomeFailure, Error, Phase},
    pool::{self, ChannelCount, Pool, PooledSlot, Running, Session, SpareKind, SparePlan},
};

type Channel = russh::Channel<russh::client::Msg>;

/// Runs `request` on a channel of its own on `slot`'s connection.
#[allow(clippy::too_many_arguments)]
pub(super) async fn drive(
    inner: &Arc<Pool>,
    slot: PooledSlot,
    request: &ExecRequest,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    kill: &mut oneshot::Receiver<()>,
    gate: &StartGate,
    input: &mut Option<Input>,
) -> Attempt {
    let config = &inner.config;
    let pty = request.pty.as_ref();
    let wanted = request
        .escalation
        .as_ref()
        .and_then(|exchange| exchange.spares.as_ref());
    // A terminal is requested before the exec: no pre-started spare will do.
    let (mut slot, mut channel, _open, _running, running) =
        match open_on_slot(slot, wanted, pty.is_some()).await {
            Acquired::Channel(slot, channel, count, guard, running) => {
                (slot, channel, count, guard, running)
            }
            Acquired::Retry(error) => return Attempt::NotSent(error),
        };
    tracing::trace!(session = slot.session.id, ?running, "channel open");
    let direct_learned = slot.session.direct_bootstrap() == Some(true);
    let payload = match request.payload(config, &running, direct_learned) {
        Ok(payload) => payload,
        Err(error) => {
            pool::give_back(channel, running.prestarted(), config.connect_timeout).await;
            return Attempt::Done(Err(error));
        }
    };
    if !matches!(kill.try_recv(), Err(oneshot::error::TryRecvError::Empty)) || !gate.claim() {
        // Timed out or cancelled while the channel was opening: nothing has run.
        pool::give_back(channel, running.prestarted(), config.connect_timeout).await;
        return Attempt::Done(Ok(ExitStatus::Unknown));
    }
    if let Err(error) = send(&channel, pty, &payload).await {
        // russh queues messages for its session task; an error means the connection is gone
        // and the request was never queued, let alone sent.
        slot.mark_broken();
        return Attempt::NotSent(Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Exec,
            source: error,
        });
    }
    if payload.direct {
        inner
            .registry
            .counters
            .direct_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // From here on the command may be running: it is never sent again.
    tracing::trace!("exec request sent");
    let mut watch = Watch::new(
        inner,
        request,
        &payload,
        slot.session.clone(),
        events,
        budget,
    );
    watch.start_stdin(&channel, input).await;
    if let Some(refused) = watch.run(&mut channel, kill, input).await {
        return refused;
    }
    watch.conclude(&mut slot).await
}

/// Sends what starts the command: a terminal's request, then the exec request (a spare's
/// shell runs already: nothing).
async fn send(
    channel: &Channel,
    pty: Option<&crate::command::Pty>,
    payload: &Payload,
) -> Result<(), russh::Error> {
    if let Some(pty) = pty {
        // The universal form's payload travels on the terminal: its modes are set for it.
        let modes = pty.request_modes(!payload.direct);
        channel
            .request_pty(true, &pty.term, pty.cols, pty.rows, 0, 0, &modes)
            .await?;
    }
    match &payload.exec {
        Some(text) => channel.exec(true, text.clone()).await,
        None => Ok(()),
    }
}

/// What the loop does after a message.
enum Step {
    Go,
    Stop,
    /// The attempt is over: the server refused the request (nothing ran).
    Return(Attempt),
}

/// One command's channel, from the exec request to its close.
struct Watch<'a> {
    inner: &'a Arc<Pool>,
    config: &'a Config,
    payload: &'a Payload,
    session: Arc<Session>,
    events: &'a mpsc::UnboundedSender<Event>,
    budget: &'a tokio::sync::Semaphore,
    /// A spare's shell ran the payload (no exec request was sent).
    prestarted: bool,
    terminal: bool,

    // stdin
    /// Started: the payload (an escalation that may read a password gets nothing before it
    /// hands over).
    stdin_started: bool,
    /// What goes on stdin once started.
    held_stdin: bytes::Bytes,
    /// stdin stays open after the payload: the supervisor's control line, a terminal, the
    /// caller's input.
    keep_open: bool,
    writer: Option<PayloadWriter>,
    caller_input: Option<Forward>,
    /// Tells the writer that the command runs: the caller's input may follow.
    go: Option<oneshot::Sender<()>>,

    // the escalation
    escalation: Option<&'a Exchange>,
    watcher: Option<PromptWatcher>,
    become_deadline: Option<Instant>,
    /// A failure decided here (a timeout, a password refused or missing), not read from the
    /// tool's words.
    become_outcome: Option<BecomeFailure>,
    /// What the tool printed before the marker, both streams in arrival order.
    said: Vec<u8>,

    // the channel
    marker: MarkerParser,
    /// Output held back until the marker shows the command runs (see [`HeldOutput`]).
    held: Option<HeldOutput>,
    pgid: Option<u32>,
    status: Option<ExitStatus>,
    replied: bool,
    /// When the server accepted the exec request (it had forked the login shell by then):
    /// from there to the marker is the login shell's start-up (`pool::startup`).
    replied_at: Option<std::time::Instant>,
    /// Any output (the marker included) means the request was processed.
    heard: bool,
    eof: bool,
    closed: bool,
    /// The reply to the `pty-req` comes before the exec's.
    pty_pending: bool,
    refused_pty: bool,

    // the kill
    kill_wanted: bool,
    kill_sent: bool,
    give_up_at: Option<Instant>,
}

impl<'a> Watch<'a> {
    fn new(
        inner: &'a Arc<Pool>,
        request: &'a ExecRequest,
        payload: &'a Payload,
        session: Arc<Session>,
        events: &'a mpsc::UnboundedSender<Event>,
        budget: &'a tokio::sync::Semaphore,
    ) -> Self {
        let config = &inner.config;
        let escalation = request.escalation.as_ref();
        let prestarted = payload.exec.is_none();
        let terminal = request.pty.is_some();
        Watch {
            inner,
            config,
            payload,
            session,
            events,
            budget,
            prestarted,
            terminal,
            stdin_started: !escalation.is_some_and(Exchange::payload_waits),
            held_stdin: payload.stdin.clone(),
            keep_open: payload.controlled || terminal,
            writer: None,
            caller_input: None,
            go: None,
            escalation,
            watcher: escalation.and_then(Exchange::watcher),
            become_deadline: escalation
                .and_then(|exchange| limit::deadline(Instant::now(), exchange.settings.timeout)),
            become_outcome: None,
            said: Vec::new(),
            marker: match escalation {
                Some(_) => MarkerParser::escalated(&request.marker),
                None => MarkerParser::new(&request.marker),
            },
            // The direct form and a spare's shell hold their output back until the marker
            // shows that the shell ran the bootstrap: if it did not, the command runs again in
            // the universal form and this attempt's output (the shell's complaint) must not
            // reach the caller. So does an escalated one: the command's first stdout may come
            // before its marker.
            held: (payload.direct || prestarted || escalation.is_some()).then(HeldOutput::default),
            pgid: None,
            status: None,
            replied: false,
            replied_at: None,
            heard: false,
            eof: false,
            closed: false,
            pty_pending: terminal,
            refused_pty: false,
            kill_wanted: false,
            kill_sent: false,
            give_up_at: None,
        }
    }

    /// Starts the payload on stdin (by a task of its own, so that the read loop notices a
    /// connection that dies meanwhile: russh waits for window space without end when the
    /// peer is gone), unless an escalation tool that may read a password must hand over
    /// first: it would take the payload for a password. A spare's shell needs its frame
    /// first, though: that starts the tool.
    async fn start_stdin(&mut self, channel: &Channel, input: &Option<Input>) {
        let (go, ready) = oneshot::channel::<()>();
        self.go = Some(go);
        // The caller's input follows the payload once the marker shows the command runs
        // (`go`: before it, an attempt may still be dropped).
        self.caller_input = input.as_ref().map(|input| Forward {
            stdin: input.stdin.clone(),
            go: ready,
        });
        self.keep_open |= input.is_some();
        if self.stdin_started {
            self.send_payload(channel).await;
        } else {
            let head = self.payload.head.min(self.held_stdin.len());
            if head > 0 {
                let _ = channel.data(&self.held_stdin[..head]).await;
                self.held_stdin = self.held_stdin.slice(head..);
            }
        }
    }

    /// The channel's messages until it closes, the escalation's deadline passes, or the
    /// kill's drain gives up. `Some`: the attempt is over already.
    async fn run(
        &mut self,
        channel: &mut Channel,
        kill: &mut oneshot::Receiver<()>,
        input: &mut Option<Input>,
    ) -> Option<Attempt> {
        loop {
            let give_up = limit::until(self.give_up_at);
            let become_timer = limit::until(self.become_deadline);
            tokio::select! {
                biased;
                // The escalation did not hand over in time: nothing ran.
                _ = become_timer => {
                    self.become_outcome = Some(BecomeFailure::Timeout);
                    let _ = channel.eof().await;
                    let _ = channel.close().await;
                    return None;
                }
                // Fires on an explicit kill (timeout) and when the caller's future is dropped.
                _ = &mut *kill, if !self.kill_wanted => self.want_kill(),
                message = channel.wait() => match self.on_message(channel, message).await {
                    Step::Go => {}
                    Step::Stop => return None,
                    Step::Return(attempt) => return Some(attempt),
                },
                control = next_control(input), if self.pgid.is_some() && !self.kill_wanted => {
                    if let Some(Control::Resize { cols, rows }) = control {
                        let _ = channel.window_change(cols, rows, 0, 0).await;
                    }
                }
                _ = give_up => {
                    tracing::warn!(host = %self.config.host, pgid = ?self.pgid,
                        "channel still open after the kill; closing it (a process may have left the group)");
                    let _ = channel.close().await;
                    return None;
                }
            }
            self.send_kill(channel).await;
        }
    }

    async fn on_message(&mut self, channel: &Channel, message: Option<russh::ChannelMsg>) -> Step {
        use russh::ChannelMsg;
        // In a terminal, stdout and stderr are one stream, which carries the marker: it is
        // read as stderr is without one (and its parts passed on as stdout).
        match merge_terminal(message, self.terminal) {
            // Before the hand-over of a tool that may read stdin, nothing of the command has
            // been sent: stdout is the tool's (BusyBox's su prompts there), not output.
            Some(ChannelMsg::Data { data }) if !self.stdin_started => {
                self.heard = true;
                self.said.extend_from_slice(&data);
                self.answer_prompt(channel).await;
            }
            Some(ChannelMsg::Data { data }) => {
                self.heard = true;
                emit(
                    &mut self.held,
                    self.events,
                    self.budget,
                    OutputChunk::Stdout(data),
                )
                .await;
            }
            Some(ChannelMsg::ExtendedData { data, .. }) => {
                self.heard = true;
                self.on_marker_stream(channel, data).await;
            }
            Some(ChannelMsg::ExitStatus { exit_status }) => {
                self.status = Some(ExitStatus::Code(exit_status));
            }
            Some(ChannelMsg::ExitSignal {
                signal_name,
                core_dumped,
                ..
            }) => {
                self.status = Some(ExitStatus::Signal {
                    name: signal_text(&signal_name),
                    core_dumped,
                });
            }
            Some(ChannelMsg::Success) if self.pty_pending => self.pty_pending = false,
            Some(ChannelMsg::Failure) if self.pty_pending => {
                // No terminal (`PermitTTY no`, a forced command): the exec must not run
                // without one. It may have started already: it is killed like any other.
                self.pty_pending = false;
                self.refused_pty = true;
                self.want_kill();
            }
            Some(ChannelMsg::Success) => {
                self.replied = true;
                // Under an escalation the time to the marker is the tool's, not the login
                // shell's start-up.
                if !self.prestarted && self.escalation.is_none() {
                    self.replied_at = Some(std::time::Instant::now());
                }
            }
            Some(ChannelMsg::Eof) => self.eof = true,
            Some(ChannelMsg::Failure) if !self.replied => {
                // The server refused the request: nothing ran.
                let _ = channel.close().await;
                return Step::Return(Attempt::NotSent(Error::ExecRefused {
                    host: self.config.host.clone(),
                    port: self.config.port,
                }));
            }
            Some(ChannelMsg::Close) => {
                self.closed = true;
                return Step::Stop;
            }
            // The connection is gone.
            None => return Step::Stop,
            Some(_) => {}
        }
        Step::Go
    }

    /// Answers the escalation tool's prompt, if what it said so far is one.
    async fn answer_prompt(&mut self, channel: &Channel) {
        if self.become_outcome.is_none()
            && let (Some(watcher), Some(exchange)) = (self.watcher.as_mut(), self.escalation)
        {
            self.become_outcome = exchange
                .answer(watcher, &self.said, channel, self.config)
                .await;
        }
    }

    /// The stream that carries the marker (stderr; a terminal's one stream).
    async fn on_marker_stream(&mut self, channel: &Channel, data: bytes::Bytes) {
        if self.escalation.is_some() && self.pgid.is_none() {
            self.said.extend_from_slice(&data);
        }
        let (found, parts) = self.marker.feed(data);
        if found.is_none() {
            self.answer_prompt(channel).await;
        }
        if let Some(pgid) = found {
            self.pgid = Some(pgid);
            match self.escalation {
                Some(exchange) => self.handed_over(channel, exchange).await,
                None => self.started(),
            }
        }
        for part in parts {
            let chunk = if self.terminal {
                OutputChunk::Stdout(part)
            } else {
                OutputChunk::Stderr(part)
            };
            emit(&mut self.held, self.events, self.budget, chunk).await;
        }
        if found.is_some() {
            // The command runs: the caller's input may follow its payload.
            if let Some(go) = self.go.take() {
                let _ = go.send(());
            }
            release(&mut self.held, self.events, self.budget).await;
        }
    }

    /// The escalation handed over: the target's shell runs the bootstrap now, and gets its
    /// payload.
    async fn handed_over(&mut self, channel: &Channel, exchange: &Exchange) {
        self.become_deadline = None;
        self.watcher = None;
        resident::note_escalated(self.inner, &self.session, exchange);
        // `S <shell>`: the tool had replaced a login shell that led its own group (see
        // `wrapper::bootstrap`), which tells what it tells unescalated.
        if !self.prestarted
            && let Some(shell) = self
                .marker
                .traits()
                .and_then(|traits| traits.strip_prefix("S "))
        {
            self.session
                .learn_direct_bootstrap(crate::command::direct_capable(&format!("L {shell}")));
        }
        if !self.stdin_started {
            self.stdin_started = true;
            self.send_payload(channel).await;
        }
    }

    /// Sends the payload (what of it waited), and after it the caller's input.
    async fn send_payload(&mut self, channel: &Channel) {
        self.writer = start_stdin(
            channel,
            &self.held_stdin,
            self.keep_open,
            self.caller_input.take(),
        )
        .await;
    }

    /// The marker of an unescalated command: what it tells about the login shell.
    fn started(&mut self) {
        let config = self.config;
        if let Some(at) = self.replied_at {
            // `L bash` from the universal form; the direct form says `L direct`.
            let shell = self
                .marker
                .traits()
                .and_then(|traits| traits.split(' ').nth(1))
                .filter(|name| *name != "direct");
            self.session
                .login_shell_startup
                .record(at.elapsed(), &config.host, config.port, shell);
        }
        // Nothing of ours prints before the marker, in any form: stderr before it is the
        // login shell talking (rc files, warnings). It would talk in every pre-started spare
        // too, before its command, and each would be thrown away. (Not stdout: sshd may
        // forward the command's first stdout before the marker, which is on another pipe.)
        if self.marker.noise_before() {
            self.session.note_noisy_login();
        }
        if !self.payload.direct
            && !self.prestarted
            && let Some(traits) = self.marker.traits()
        {
            self.session
                .learn_direct_bootstrap(crate::command::direct_capable(traits));
        }
    }

    /// The caller's kill (a timeout, a dropped future) or a refused terminal: the kill goes
    /// out after this turn of the loop, and the drain is bounded.
    fn want_kill(&mut self) {
        self.kill_wanted = true;
        let config = self.config;
        self.give_up_at = limit::deadline(
            Instant::now(),
            limit::sum(&[
                config.kill_grace,
                config.drain_timeout,
                config.connect_timeout,
            ]),
        );
    }

    /// Sends a wanted kill, once, the way this channel allows.
    async fn send_kill(&mut self, channel: &Channel) {
        if !self.kill_wanted || self.kill_sent {
            return;
        }
        // A controlled request's stdin is its supervisor's control line (a terminal's stdin
        // is the terminal: its kill comes from a second channel, below).
        if self.payload.controlled
            && let Some(writer) = &self.writer
        {
            self.kill_sent = true;
            self.inner
                .registry
                .counters
                .kills
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if writer.is_written() {
                tracing::debug!(grace = ?self.config.kill_grace, "killing remote process group");
                // One packet on the command's own channel: no extra channel, no round trip.
                let _ =
                    tokio::time::timeout(self.config.connect_timeout, channel.data(&b"K\n"[..]))
                        .await;
            } else {
                // The remote side runs nothing before it has the whole line: closing stdin
                // now makes the bootstrap exit with 125, and nothing ran.
                writer.abort();
            }
            let _ = channel.eof().await;
            return;
        }
        if !self.stdin_started {
            // Still escalating: nothing of the command was sent, so nothing runs once stdin
            // closes (the tool's password read and the bootstrap's payload read both fail).
            self.kill_sent = true;
            let _ = channel.eof().await;
            return;
        }
        if let Some(pgid) = self.pgid {
            self.kill_sent = true;
            spawn_kill(
                self.inner.clone(),
                self.session.clone(),
                self.escalation.cloned(),
                pgid,
                self.terminal,
            );
        } else if self.status.is_some() {
            self.kill_sent = true;
        }
    }

    /// What the attempt comes to once the channel is closed (or given up on).
    async fn conclude(mut self, slot: &mut PooledSlot) -> Attempt {
        let config = self.config;
        if let Some(writer) = &self.writer {
            writer.abort();
        }
        if self.refused_pty {
            return Attempt::Done(Err(Error::TerminalRefused {
                host: config.host.clone(),
                port: config.port,
            }));
        }
        if let Some(failed) = self.escalation_failed() {
            return Attempt::Done(Err(failed));
        }
        if self.held.is_some()
            && self.pgid.is_none()
            && !self.kill_wanted
            && self.closed
            && !self.session.is_dead()
        {
            // The login shell did not run the direct bootstrap (it prints the marker before
            // it runs anything; so does a pre-started one, in either form), so nothing ran:
            // the universal form from now on.
            tracing::warn!(host = %config.host, "the login shell did not run the direct exec request; \
                using the universal form on this connection");
            self.session.refuse_direct_bootstrap();
            self.inner
                .registry
                .counters
                .direct_fallbacks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Attempt::NotSent(Error::ExecRefused {
                host: config.host.clone(),
                port: config.port,
            });
        }
        release(&mut self.held, self.events, self.budget).await;
        for part in self.marker.give_up() {
            forward(self.events, self.budget, OutputChunk::Stderr(part)).await;
        }
        if self.kill_wanted && !self.kill_sent {
            tracing::warn!(host = %config.host, "command ended before its process group was known");
        }
        // OpenSSH may send the exit status before the last output: a status is the result
        // only once the server has also said "no more output" (EOF or close). A connection
        // lost in between leaves the output incomplete, which must not pass for a clean
        // result.
        let output_complete = self.eof || self.closed;
        if self.closed && !self.replied && !self.heard && self.status.is_none() && !self.kill_wanted
        {
            // Closed without a word about the request (Dropbear does this to a request it
            // never processed when many channels start at once): nothing ran, so it may be
            // retried.
            return Attempt::NotSent(Error::ExecRefused {
                host: config.host.clone(),
                port: config.port,
            });
        }
        Attempt::Done(match self.status {
            Some(status) if output_complete => Ok(status),
            None if self.closed && !self.session.is_dead() => Ok(ExitStatus::Unknown),
            _ => {
                slot.mark_broken();
                Err(Error::ConnectionLost {
                    host: config.host.clone(),
                    port: config.port,
                })
            }
        })
    }

    /// The escalation's typed failure, when it never handed over (and nothing ran).
    fn escalation_failed(&mut self) -> Option<Error> {
        let exchange = self.escalation?;
        if self.pgid.is_some() || self.kill_wanted {
            return None;
        }
        let _ = self.marker.give_up();
        // A pre-started shell that ended before it ran anything (124, 125) said nothing: that
        // is the spare's failure (see `conclude`), not the tool's.
        let spare_failed = self.prestarted
            && self.said.is_empty()
            && matches!(self.status, Some(ExitStatus::Code(124 | 125)));
        if spare_failed
            || !(self.become_outcome.is_some() || (self.closed && !self.session.is_dead()))
        {
            return None;
        }
        let exit = match self.status {
            Some(ExitStatus::Code(code)) => Some(code),
            _ => None,
        };
        let reason = self
            .become_outcome
            .take()
            .unwrap_or_else(|| exchange.classify(&self.said, exit));
        tracing::debug!(%reason, "the escalation failed; nothing ran");
        Some(exchange.failed(self.config, reason, &self.said))
    }
}

/// A terminal's output: stdout and stderr are one stream there, which carries the marker, so
/// it is handled as the marker's stream (stderr) is without a terminal.
fn merge_terminal(message: Option<russh::ChannelMsg>, terminal: bool) -> Option<russh::ChannelMsg> {
    match message {
        Some(russh::ChannelMsg::Data { data }) if terminal => {
            Some(russh::ChannelMsg::ExtendedData { data, ext: 1 })
        }
        other => other,
    }
}

/// What a command attempt ended with before its exec request could reach the server.
enum Acquired {
    /// A slot and an open channel (with its count), the command running on its connection.
    /// The last field: what the channel already runs (a pre-started spare: see
    /// `SpareKind`).
    Channel(
        PooledSlot,
        russh::Channel<russh::client::Msg>,
        ChannelCount,
        Running,
        SpareKind,
    ),
    /// The channel could not be opened on the slot's connection (it died, or refused one
    /// too many): another slot may do, and nothing has been sent.
    Retry(Error),
}

/// Opens a channel on `slot`.
///
/// The open runs to completion (it is bounded by the connect timeout and the retries):
/// dropping `channel_open_session` halfway leaves a channel the server has opened and nobody
/// closes, which holds one of its `MaxSessions` slots and russh memory for good. Only the
/// wait for the slot, before this, is abortable.
///
/// The command counts as running on its connection from the moment it holds the slot (the
/// returned guard), so that retiring the connection does not close it under the open.
async fn open_on_slot(mut slot: PooledSlot, wanted: Option<&SparePlan>, fresh: bool) -> Acquired {
    let running = Running::new(slot.session.clone());
    match slot.open_channel(wanted, fresh).await {
        Ok((channel, count, kind)) => Acquired::Channel(slot, channel, count, running, kind),
        Err(error) => Acquired::Retry(error),
    }
}

fn signal_text(signal: &russh::Sig) -> String {
    match signal {
        russh::Sig::Custom(name) => name.clone(),
        other => format!("{other:?}"),
    }
}
