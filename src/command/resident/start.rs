//! Starting a runner on a connection (see the parent module's "Starting it"): the
//! interpreters tried in turn, the loaders and the helper's install, the escalated start
//! through the tool, and the wait for the hello.

use std::sync::{Arc, Mutex, atomic::AtomicU32};

use bytes::{Buf, Bytes, BytesMut};
use swiftide_ssh_runner as protocol;

use super::{Resident, Routes, read_frames};
use crate::{
    command::escalation::{Exchange, hand_over},
    config::{Config, limit},
    error::Error,
    pool::{self, Counters, Session},
};

/// What can run the runner on a host, tried in this order on each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpreter {
    /// `runner.py` on Python 3.8 or later, which starts commands with `posix_spawn` (vfork
    /// and exec): the cheapest start of the three, about 60 % of Perl's server CPU per
    /// command (BENCHMARKS.md, round 17). It exits at once on an older Python.
    PythonSpawn,
    /// `runner.pl`: Perl 5 with Debian's Essential `perl-base` modules; `fork` and `exec`.
    Perl,
    /// `runner.py` on any Python 3.5 or later, with `fork` and `exec`: for hosts with an old
    /// Python and no Perl.
    PythonFork,
    /// The crate's `swiftide-ssh-runner` binary, where the executor was given one
    /// ([`SshExecutorBuilder::runner_helper`](crate::SshExecutorBuilder::runner_helper)):
    /// installed in `~/.cache/swiftide-ssh/` and checked by SHA-256 before each start (see
    /// [`helper_request`]). Tried first.
    Helper,
}

impl Interpreter {
    const ALL: [Interpreter; 3] = [
        Interpreter::PythonSpawn,
        Interpreter::Perl,
        Interpreter::PythonFork,
    ];

    /// The runner's script. Sent on stdin at each start: nothing is left on the host. (The
    /// helper is sent only when its copy on the host is missing or altered.)
    fn script(self) -> &'static str {
        match self {
            Interpreter::Helper => "",
            Interpreter::PythonSpawn | Interpreter::PythonFork => protocol::PYTHON,
            Interpreter::Perl => protocol::PERL,
        }
    }

    /// The program that starts the runner: it reads `len` bytes of script from stdin and
    /// runs them (with the arguments after it). Login-shell neutral (no `'`, `\`, `!` or
    /// newline), so that every login shell passes it through single quotes unchanged.
    fn loader(self, len: usize) -> String {
        match self {
            Interpreter::Helper => String::new(),
            Interpreter::Perl => format!(
                "$n={len};$s=\"\";while($n>0){{$r=sysread(STDIN,$s,$n,length $s);\
                 $r>0 or exit 125;$n-=$r}}eval $s;print STDERR $@;exit 125"
            ),
            // A short read at EOF leaves the script cut: it fails to compile, and says so.
            Interpreter::PythonSpawn | Interpreter::PythonFork => format!(
                "import os;n={len};b=bytearray();\
                 r=lambda:os.read(0,n-len(b)) if len(b)<n else b\"\";\
                 [b.extend(c) for c in iter(r,b\"\")];exec(bytes(b))"
            ),
        }
    }

    /// The exec request: the loader, then the script's arguments (see PROTOCOL.md,
    /// "Starting").
    fn request(self, len: usize, nonce: &str) -> String {
        let program = self.loader(len);
        debug_assert!(crate::command::wrapper::is_neutral(&program));
        match self {
            Interpreter::Helper => String::new(),
            Interpreter::Perl => format!("exec perl -e '{program}' {nonce}"),
            Interpreter::PythonSpawn => format!("exec python3 -c '{program}' {nonce} spawn"),
            Interpreter::PythonFork => format!("exec python3 -c '{program}' {nonce} fork"),
        }
    }
}

/// The helper's start (see [`Interpreter::Helper`]): `/bin/sh` runs the copy in
/// `~/.cache/swiftide-ssh/` if it is a file of the login's whose SHA-256 is `sha256`, and
/// otherwise prints the `need` marker (never the hello's nonce, which the hello is found
/// by), reads `len` bytes from stdin into a private temporary file (umask 077), renames it
/// into place, checks it again and runs it. Login-shell neutral (see `wrapper::is_neutral`). Nothing else is on the channel while it reads: the client
/// sends the bytes only after the marker, and frames only after the hello.
fn helper_request(sha256: &str, len: usize, nonce: &str, need: &str) -> String {
    let program = format!(
        "h=\"$HOME/.cache/swiftide-ssh/runner-{sha256}\"; \
         ok() {{ [ -f \"$h\" ] && [ -O \"$h\" ] && s=$(sha256sum <\"$h\" 2>/dev/null) && [ \"${{s%% *}}\" = {sha256} ]; }}; \
         if ok; then exec \"$h\" {nonce}; fi; echo {need}; umask 077; \
         mkdir -p \"${{h%/*}}\" && chmod 700 \"${{h%/*}}\" && t=\"$h.$$\" && head -c {len} >\"$t\" && \
         chmod 700 \"$t\" && mv -f \"$t\" \"$h\" && ok && exec \"$h\" {nonce}; rm -f \"$t\"; \
         echo \"the runner helper could not be installed or failed its checksum\" >&2; exit 127"
    );
    debug_assert!(crate::command::wrapper::is_neutral(&program));
    format!("exec /bin/sh -c '{program}'")
}

pub(super) enum Start {
    Ready(Arc<Resident>),
    /// This interpreter did not answer; the next may.
    Refused(String),
    /// The runner's channel could not be opened (the connection died, or the server refused
    /// one more session): nothing was sent.
    Retry(Error),
    /// The escalation failed ([`Error::BecomeFailed`]): the command's per-exec escalation
    /// would fail alike, and asking again would cost the password another try.
    Fail(Error),
}

/// One start of a runner on a connection.
pub(super) struct Starter<'a> {
    pub(super) session: &'a Arc<Session>,
    pub(super) config: &'a Config,
    pub(super) counters: &'a Counters,
    /// Start it through this escalation, as its target.
    pub(super) escalation: Option<&'a Exchange>,
    /// A command waits for this start: a refused channel open is tried again (as a
    /// command's own is). A start in the background tries once, so that it never adds to
    /// the refusals a server with few sessions hands out.
    pub(super) patient: bool,
}

impl Starter<'_> {
    /// Starts a runner: the helper where one was given, then Python with `posix_spawn`,
    /// Perl, any Python; refused when none answers.
    pub(super) async fn start(&self) -> Start {
        let mut reasons = Vec::new();
        let helper = self
            .config
            .runner_helper
            .is_some()
            .then_some(Interpreter::Helper);
        for interpreter in helper.into_iter().chain(Interpreter::ALL) {
            match self.start_with(interpreter).await {
                Start::Refused(reason) => reasons.push(format!("{interpreter:?}: {reason}")),
                started => return started,
            }
        }
        Start::Refused(reasons.join("; "))
    }

    async fn start_with(&self, interpreter: Interpreter) -> Start {
        let Starter {
            session,
            config,
            counters,
            escalation,
            patient,
        } = *self;
        let mut keep_trying = move || patient;
        let (mut channel, count) =
            match pool::open_channel(session, config, counters, &mut keep_trying).await {
                Ok(opened) => opened,
                Err(error) => return Start::Retry(error),
            };
        let nonce = format!("swiftide-runner-{:016x}", rand::random::<u64>());
        let script = interpreter.script();
        let helper = config
            .runner_helper
            .as_ref()
            .filter(|_| interpreter == Interpreter::Helper);
        let need = format!("swiftide-need-{:016x}", rand::random::<u64>());
        let request = match helper {
            Some(helper) => helper_request(&helper.sha256, helper.binary.len(), &nonce, &need),
            None => interpreter.request(script.len(), &nonce),
        };
        let said = match escalation {
            None => launch(&channel, request, config).await,
            Some(exchange) => launch_escalated(&mut channel, request, exchange, config).await,
        };
        let said = match said {
            Ok(said) => said,
            Err(failed) => {
                let _ = channel.close().await;
                return failed;
            }
        };
        // The script goes out while the hello is awaited: a login shell that exits at once
        // must not leave this write waiting for window space. The helper goes out only when
        // the host asks for it (`need`).
        fn send(
            mut writer: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
            bytes: Bytes,
        ) -> tokio::task::JoinHandle<()> {
            tokio::spawn(async move {
                let _ = tokio::io::AsyncWriteExt::write_all(&mut writer, &bytes).await;
            })
        }
        let mut script_out = send(channel.make_writer(), Bytes::from_static(script.as_bytes()));
        let mut helper_out = helper.map(|helper| (channel.make_writer(), helper));
        let mut stdout = BytesMut::from(&said[..]);
        let mut stderr = Vec::new();
        let mut exit: Option<String> = None;
        let hello = limit::within(
            limit::deadline(tokio::time::Instant::now(), config.connect_timeout),
            async {
                loop {
                    // What came so far (an escalated start's stdout before its hand-over too).
                    if let Some((end, hello)) = protocol::find_hello(&stdout, &nonce) {
                        stdout.advance(end);
                        return Some(hello.name());
                    }
                    if helper_out.is_some()
                        && stdout
                            .windows(need.len())
                            .any(|window| window == need.as_bytes())
                        && let Some((writer, helper)) = helper_out.take()
                    {
                        tracing::debug!(host = %config.host, sha256 = %helper.sha256,
                        "installing the runner helper");
                        script_out = send(writer, helper.binary.clone());
                    }
                    // Keep what may be the start of the hello, not the login's chatter.
                    if stdout.len() > 64 * 1024 {
                        let keep = stdout.len() - 1024;
                        stdout.advance(keep);
                    }
                    match channel.wait().await {
                        Some(russh::ChannelMsg::Data { data }) => stdout.extend_from_slice(&data),
                        Some(russh::ChannelMsg::ExtendedData { data, .. }) => {
                            if stderr.len() < 4096 {
                                stderr.extend_from_slice(&data);
                            }
                        }
                        Some(russh::ChannelMsg::ExitStatus { exit_status }) => {
                            exit = Some(format!("exit status {exit_status}"));
                        }
                        Some(russh::ChannelMsg::Failure) => {
                            exit = Some("the server refused the exec request".to_owned());
                            return None;
                        }
                        Some(russh::ChannelMsg::Close) | None => return None,
                        Some(_) => {}
                    }
                }
            },
        )
        .await
        .flatten();
        let Some(name) = hello else {
            script_out.abort();
            let _ = channel.close().await;
            if session.is_dead() {
                return Start::Retry(Error::ConnectionLost {
                    host: config.host.clone(),
                    port: config.port,
                });
            }
            let said = String::from_utf8_lossy(&stderr).trim().to_owned();
            let reason = match (exit, said.is_empty()) {
                (Some(exit), true) => exit,
                (Some(exit), false) => format!("{exit}: {said}"),
                (None, true) => format!("no answer within {:?}", config.connect_timeout),
                (None, false) => said,
            };
            return Start::Refused(reason);
        };
        let (read, write) = channel.split();
        let routes = Arc::new(Mutex::new(Routes::default()));
        tokio::spawn(read_frames(read, stdout, routes.clone()));
        Start::Ready(Arc::new(Resident {
            writer: tokio::sync::Mutex::new(write),
            routes,
            next_id: AtomicU32::new(1),
            name,
            _count: count,
        }))
    }
}

/// Sends the runner's start as the login's exec request. Returns what it said so far
/// (nothing).
async fn launch(
    channel: &russh::Channel<russh::client::Msg>,
    request: String,
    config: &Config,
) -> std::result::Result<Vec<u8>, Start> {
    match channel.exec(true, request.into_bytes()).await {
        Ok(()) => Ok(Vec::new()),
        Err(source) => Err(Start::Retry(Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: crate::error::Phase::Exec,
            source,
        })),
    }
}

/// Sends the runner's start through `exchange`'s escalation, as one of the executor's own
/// scripts (the escalated SFTP server's way: `script_request`, then [`hand_over`], which
/// answers the tool's password prompt with a fresh random prompt). Returns the stdout that
/// came before the hand-over, where a quick runner's hello may begin.
async fn launch_escalated(
    channel: &mut russh::Channel<russh::client::Msg>,
    request: String,
    exchange: &Exchange,
    config: &Config,
) -> std::result::Result<Vec<u8>, Start> {
    let exchange = exchange.fresh();
    let marker = crate::command::marker_prefix(rand::random());
    let wrapped = crate::command::script_request(
        &marker,
        request.as_bytes(),
        b"",
        Some(&exchange.escalation()),
    )
    .map_err(Start::Fail)?;
    if let Err(source) = channel.exec(true, wrapped.request).await {
        return Err(Start::Retry(Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: crate::error::Phase::Exec,
            source,
        }));
    }
    match hand_over(channel, &exchange, config, &marker, &wrapped.stdin).await {
        Ok(said) => Ok(said),
        Err(error @ Error::BecomeFailed { .. }) => Err(Start::Fail(error)),
        Err(error) => Err(Start::Retry(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaders_are_login_shell_neutral() {
        for interpreter in Interpreter::ALL {
            assert!(crate::command::wrapper::is_neutral(
                &interpreter.loader(12345)
            ));
        }
    }

    #[test]
    fn the_helper_start_is_login_shell_neutral() {
        let request = helper_request(
            &"ab".repeat(32),
            123,
            "swiftide-runner-1",
            "swiftide-need-2",
        );
        let program = request
            .strip_prefix("exec /bin/sh -c '")
            .and_then(|rest| rest.strip_suffix('\''))
            .expect("one quoted word");
        assert!(crate::command::wrapper::is_neutral(program));
    }
}
