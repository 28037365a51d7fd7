//! What a command sends: its request in the form of the route an attempt takes.
//!
//! A command reaches the host by one of two routes: a request to the connection's resident
//! runner (see `command::resident`), or a channel of its own (per exec). Per exec, what goes
//! out depends on the channel the pool hands over, so the form is chosen once that channel is
//! open, and only that form is built ([`ExecRequest::payload`]):
//!
//! * **universal**: the bootstrap in the exec request, the payload on stdin (see
//!   [`wrapper`](fn@crate::command::wrapper)); every login shell runs it, so it is what a
//!   connection starts with and falls back to;
//! * **direct**: the login shell runs the bootstrap itself, one `/bin/sh` exec fewer (see
//!   [`direct_wrapper`](fn@crate::command::direct_wrapper)), once the connection has shown
//!   that its login shell is POSIX;
//! * **on a spare**: a shell pre-started by the pool (the login shell, or one already
//!   escalated) waits for a frame on stdin: no exec request at all (see
//!   [`prestart_payload`](fn@crate::command::prestart_payload)).
//!
//! The universal form is built when the request is made: building it checks the command
//! (NUL bytes, a `#!` script that cannot take the caller's stdin, ...), so bad input fails
//! before anything is dialed, and a spare's frame carries it.

use std::path::PathBuf;

use crate::{
    command::{
        Program, Pty, Supervision,
        escalation::Exchange,
        resident::RunnerRequest,
        wrapper::{
            PrestartPayload, Wrapped, direct_text, direct_wrapper, prestart_payload,
            script_request, wrapper,
        },
    },
    config::{Config, Guard},
    error::Result,
    pool::SpareKind,
};

/// A fully prepared command.
#[derive(Debug)]
pub(crate) struct ExecRequest {
    /// What the per-exec forms are built from.
    recipe: Recipe,
    /// The universal form (built at once: see the module docs).
    universal: Wrapped,
    /// The stderr marker prefix the bootstrap prints with its pgid.
    pub(crate) marker: String,
    /// The request runs an escalation tool first (see `command::escalation`): its words
    /// before the marker are not the command's, and its prompt may want the password.
    pub(crate) escalation: Option<Exchange>,
    /// Run in a pseudo-terminal (on a channel of its own, never a spare).
    pub(crate) pty: Option<Pty>,
    /// What the command sends a resident runner (see `command::resident`); `None`: it takes
    /// the per-exec route (a terminal, the caller's stdin, a form only the universal
    /// bootstrap runs exactly).
    pub(crate) resident: Option<RunnerRequest>,
    /// The command has limits or confinement, which only a runner applies: it takes no
    /// per-exec route (see `drive_once`).
    pub(crate) guarded: bool,
}

/// What a command's per-exec forms are made of.
#[derive(Debug)]
enum Recipe {
    /// A caller's command.
    Command {
        program: Program,
        dir: Option<PathBuf>,
        supervision: Supervision,
        /// What the universal payload runs first (see [`ExecRequest::command`]).
        prefix: Vec<u8>,
        /// The caller feeds stdin: the universal form opens it, so no other form will do.
        caller_stdin: bool,
    },
    /// One of the executor's own scripts, `script` with `data` on its stdin.
    Script { script: Vec<u8>, data: Vec<u8> },
}

/// What an attempt sends on the channel it got.
#[derive(Debug)]
pub(crate) struct Payload {
    /// The exec request; `None` on a pre-started spare, whose shell waits for stdin.
    pub(crate) exec: Option<Vec<u8>>,
    /// Bytes for the channel's stdin right after: the payload line, and for uncontrolled
    /// requests their data, followed by EOF.
    pub(crate) stdin: bytes::Bytes,
    /// The rest of stdin is the supervisor's control line: the kill is `K\n` on this
    /// channel. Otherwise it is sent from a second channel once the pgid is known.
    pub(crate) controlled: bool,
    /// How many bytes of `stdin` go before an escalation tool that may read a password has
    /// handed over: a spare's frame, which starts the tool. (The rest would be taken for a
    /// password.)
    pub(crate) head: usize,
    /// The direct form's text (in the exec request or a spare's frame).
    pub(crate) direct: bool,
}

impl From<&Wrapped> for Payload {
    fn from(wrapped: &Wrapped) -> Self {
        Payload {
            exec: Some(wrapped.request.clone()),
            stdin: wrapped.stdin.clone().into(),
            controlled: wrapped.controlled,
            head: 0,
            direct: false,
        }
    }
}

impl From<PrestartPayload> for Payload {
    fn from(spare: PrestartPayload) -> Self {
        Payload {
            exec: None,
            stdin: spare.stdin,
            controlled: spare.controlled,
            head: spare.head,
            direct: spare.direct,
        }
    }
}

impl ExecRequest {
    /// The request for a caller's `program`, run in `dir`, in a terminal with `pty`, and with
    /// the caller's stdin opened by `stdin_prefix` (see `command::feeder`), escalated by
    /// `exchange`.
    pub(crate) fn command(
        config: &Config,
        program: Program,
        dir: Option<PathBuf>,
        pty: Option<Pty>,
        stdin_prefix: Option<Vec<u8>>,
        exchange: Option<Exchange>,
        guard: Guard,
    ) -> Result<Self> {
        let marker = crate::command::marker_prefix(rand::random());
        let supervision = match (&pty, &stdin_prefix) {
            (Some(_), _) => Supervision::of(config).terminal(),
            (None, Some(_)) => Supervision::of(config).caller_stdin(),
            (None, None) => Supervision::of(config),
        };
        // What the universal payload runs first: undoing a terminal's payload modes (see
        // `command::pty`), or opening the caller's stdin.
        let prefix = match (&pty, &stdin_prefix) {
            (Some(pty), _) => pty.restore_prefix(),
            (None, Some(prefix)) => prefix.clone(),
            (None, None) => Vec::new(),
        };
        let escalation = exchange.as_ref().map(Exchange::escalation);
        let universal = prefixed(
            &prefix,
            wrapper(
                &program,
                dir.as_deref(),
                &config.env,
                &marker,
                supervision,
                escalation.as_ref(),
            )?,
        );
        // A resident runner runs the direct form's text with `sh -c` itself, whatever the
        // login shell: as the login, or as the escalation's target through the runner
        // started through it, with stdin at /dev/null and no terminal.
        let resident = (stdin_prefix.is_none() && pty.is_none())
            .then(|| direct_text(&program, dir.as_deref(), &config.env))
            .flatten()
            .map(RunnerRequest::command)
            .map(|mut request| {
                if !guard.is_empty() {
                    request.guard = Some(guard.to_protocol(dir.as_deref()).encode());
                }
                request
            });
        Ok(ExecRequest {
            recipe: Recipe::Command {
                program,
                dir,
                supervision,
                prefix,
                caller_stdin: stdin_prefix.is_some(),
            },
            universal,
            marker,
            escalation: exchange,
            pty,
            resident,
            guarded: !guard.is_empty(),
        })
    }

    /// The request for one of the executor's own scripts (file fallbacks, `stream_files`'
    /// `find`, the jobs' scripts, an escalated kill): `script` with `data` on stdin, escalated
    /// by `exchange` (see [`script_request`]).
    pub(crate) fn script(script: &[u8], data: &[u8], exchange: Option<Exchange>) -> Result<Self> {
        let marker = crate::command::marker_prefix(rand::random());
        let escalation = exchange.as_ref().map(Exchange::escalation);
        let universal = script_request(&marker, script, data, escalation.as_ref())?;
        Ok(ExecRequest {
            recipe: Recipe::Script {
                script: script.to_vec(),
                data: data.to_vec(),
            },
            universal,
            marker,
            escalation: exchange,
            pty: None,
            // Scripts take the connection's runner for their identity (the login's, or the
            // one started through the escalation), where one starts.
            resident: RunnerRequest::script(script, data),
            guarded: false,
        })
    }

    /// What to send on a channel that already runs `running` (see [`SpareKind`]), on a
    /// connection whose login shell runs the direct form (`direct`, learned).
    pub(crate) fn payload(
        &self,
        config: &Config,
        running: &SpareKind,
        direct: bool,
    ) -> Result<Payload> {
        match running {
            SpareKind::Plain => Ok(self
                .direct_payload(config)
                .filter(|_| direct)
                .unwrap_or_else(|| Payload::from(&self.universal))),
            SpareKind::Login => Ok(self.spare_payload(config, &self.universal, false)),
            // A pre-escalated shell runs as the target already: it gets the payload of the
            // unescalated request.
            SpareKind::Escalated(_) => {
                let plain = self.unescalated(config)?;
                Ok(self.spare_payload(config, &plain, true))
            }
        }
    }

    /// The direct form, for a command that can take it: not escalated (whose commands take
    /// the universal form through the tool), not with the caller's stdin (which the
    /// universal payload opens), not one of the crate's scripts (their stdin carries data,
    /// which the direct form's line reading would not leave alone).
    fn direct_payload(&self, config: &Config) -> Option<Payload> {
        let Recipe::Command {
            program,
            dir,
            supervision,
            caller_stdin: false,
            ..
        } = &self.recipe
        else {
            return None;
        };
        if self.escalation.is_some() {
            return None;
        }
        let direct = direct_wrapper(
            program,
            dir.as_deref(),
            &config.env,
            &self.marker,
            *supervision,
        )?;
        Some(Payload {
            direct: true,
            ..Payload::from(&direct)
        })
    }

    /// A pre-started spare's frame for `wrapped` (the universal form as that shell runs it):
    /// the direct form's text where the command takes it. On a login shell's spare an
    /// escalated command sends its whole request (the tool runs then); on one
    /// `pre_escalated`, the shell runs as the target, so the direct form will do.
    fn spare_payload(&self, config: &Config, wrapped: &Wrapped, pre_escalated: bool) -> Payload {
        let (program, dir, supervision) = match &self.recipe {
            Recipe::Command {
                program,
                dir,
                supervision,
                caller_stdin,
                ..
            } => {
                let direct = !caller_stdin && (pre_escalated || self.escalation.is_none());
                (direct.then_some(program), dir.as_deref(), *supervision)
            }
            Recipe::Script { .. } => (None, None, Supervision::of(config)),
        };
        prestart_payload(
            program,
            dir,
            &config.env,
            &self.marker,
            supervision,
            wrapped,
        )
        .into()
    }

    /// The universal form without the escalation.
    fn unescalated(&self, config: &Config) -> Result<Wrapped> {
        Ok(match &self.recipe {
            Recipe::Command {
                program,
                dir,
                supervision,
                prefix,
                ..
            } => prefixed(
                prefix,
                wrapper(
                    program,
                    dir.as_deref(),
                    &config.env,
                    &self.marker,
                    *supervision,
                    None,
                )?,
            ),
            Recipe::Script { script, data } => script_request(&self.marker, script, data, None)?,
        })
    }
}

/// `wrapped` with `prefix` run first.
fn prefixed(prefix: &[u8], mut wrapped: Wrapped) -> Wrapped {
    if !prefix.is_empty() {
        let mut stdin = prefix.to_vec();
        stdin.extend_from_slice(&wrapped.stdin);
        wrapped.stdin = stdin;
    }
    wrapped
}
