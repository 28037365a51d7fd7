//! Talking to an escalation tool (sudo, doas, su) between the exec request and the moment
//! the bootstrap, now running as the target, prints its marker.
//!
//! Before the marker nothing of the caller's runs: whatever arrives on stderr is the tool's
//! (a lecture, a prompt, "Sorry, try again", "is not in the sudoers file"). So the driver
//! keeps it apart from the command's output and
//!
//! * answers a **prompt** with the password, once: sudo's is a random text given with `-p`
//!   (output that merely looks like a prompt is never answered, and sudo prints nothing the
//!   command printed before the marker); su's is PAM's, in the host's language, recognised
//!   as a last line ending in a colon (nothing else speaks before the marker). A second
//!   prompt means the password was wrong: it is not answered, stdin is closed, and the tool
//!   gives up;
//! * turns an exit **without a marker** into [`Error::BecomeFailed`], its reason read from
//!   the tool's words ([`classify`]);
//! * gives up after [`Become::timeout`](crate::Become::timeout).
//!
//! The command's payload goes out before the marker only when the tool cannot read stdin
//! (`sudo -n`, `doas -n`); otherwise it waits for the marker, so that no tool ever reads it
//! as a password.

use std::sync::Arc;

use crate::{
    config::{Become, Config, PasswordRequest, Secret},
    error::{BecomeFailure, BecomeMethod, Error, Result},
    pool::SparePlan,
};

/// An escalated handle's escalation: the setting, and how its spares are pre-escalated
/// (made once per handle: the request is a couple of KiB of text).
#[derive(Debug)]
pub(crate) struct Escalated {
    pub(crate) settings: Arc<Become>,
    /// `None` for tools that may prompt (see [`escalated_prestart_request`]).
    ///
    /// [`escalated_prestart_request`]: crate::command::wrapper::escalated_prestart_request
    pub(crate) spares: Option<SparePlan>,
}

impl Escalated {
    /// `settings` for a handle of an executor whose commands stop as `supervision` says.
    pub(crate) fn new(settings: Become, supervision: crate::command::Supervision) -> Self {
        let settings = Arc::new(settings);
        let text = crate::command::wrapper::Escalation {
            settings: &settings,
            prompt: None,
        };
        let spares = crate::command::wrapper::escalated_prestart_request(&text, supervision).map(
            |request| SparePlan {
                identity: Arc::from(settings.identity()),
                request: Arc::from(request),
            },
        );
        Escalated { settings, spares }
    }
}

/// What the driver needs to escalate one exec request.
#[derive(Clone)]
pub(crate) struct Exchange {
    pub(crate) settings: Arc<Become>,
    /// sudo's random `-p` prompt, when a password may be asked for.
    pub(crate) prompt: Option<String>,
    /// How spares are pre-escalated for this escalation, if they are.
    pub(crate) spares: Option<SparePlan>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// An exchange for one request: sudo with a password gets a fresh random prompt.
    pub(crate) fn new(escalated: &Escalated) -> Self {
        let settings = escalated.settings.clone();
        let prompt = (settings.method == BecomeMethod::Sudo && settings.password.is_some())
            .then(random_prompt);
        Exchange {
            settings,
            prompt,
            spares: escalated.spares.clone(),
        }
    }

    /// The same exchange for another request: a fresh prompt.
    pub(crate) fn fresh(&self) -> Self {
        let mut fresh = self.clone();
        if fresh.prompt.is_some() {
            fresh.prompt = Some(random_prompt());
        }
        fresh
    }

    /// The text-level view for the wrapper.
    pub(crate) fn escalation(&self) -> crate::command::wrapper::Escalation<'_> {
        crate::command::wrapper::Escalation {
            settings: &self.settings,
            prompt: self.prompt.as_deref(),
        }
    }

    /// Whether the payload must wait for the marker (see the module docs).
    pub(crate) fn payload_waits(&self) -> bool {
        self.settings.may_prompt()
    }

    /// A watcher for this exchange's prompts; `None` for a tool that cannot prompt here
    /// (`sudo -n`, `doas -n`): whatever it prints is a message, never a prompt.
    pub(crate) fn watcher(&self) -> Option<PromptWatcher> {
        self.payload_waits().then(|| PromptWatcher {
            exact: self.prompt.clone().map(String::into_bytes),
            tool: self.settings.method.name(),
            seen: 0,
            answered_at: None,
            answered: false,
        })
    }

    /// The password for a prompt on `config`'s host, if the caller has one. The result holds
    /// the line to send (password and newline), which never leaves this process otherwise.
    pub(crate) async fn password_line(&self, config: &Config) -> Option<Vec<u8>> {
        let source = self.settings.password.as_ref()?;
        let request = PasswordRequest {
            host: config.host.clone(),
            port: config.port,
            login_user: config.user.clone(),
            method: self.settings.method,
            target_user: self.settings.user.clone(),
        };
        let secret: Secret = source.get(&request).await?;
        let password = secret.expose();
        // A line break would end sudo's read early and leave the rest for the shell.
        if password.contains(['\n', '\r', '\0']) {
            return None;
        }
        let mut line = Vec::with_capacity(password.len() + 1);
        line.extend_from_slice(password.as_bytes());
        line.push(b'\n');
        Some(line)
    }

    /// Answers what the tool has said so far (`said`: everything it printed before the
    /// marker, stdout and stderr in arrival order: BusyBox's su prompts on stdout) if it is
    /// a prompt: the password once, stdin closed at a second prompt or when there is no
    /// password to give. Returns the failure that decides, if any.
    pub(crate) async fn answer(
        &self,
        watcher: &mut PromptWatcher,
        said: &[u8],
        channel: &russh::Channel<russh::client::Msg>,
        config: &Config,
    ) -> Option<BecomeFailure> {
        match watcher.check(said) {
            PromptAction::Wait => None,
            PromptAction::Answer => {
                let line = tokio::time::timeout(self.settings.timeout, self.password_line(config))
                    .await
                    .ok()
                    .flatten();
                match line {
                    Some(line) => {
                        tracing::debug!("answering the escalation's prompt");
                        let _ = channel.data(&line[..]).await;
                        None
                    }
                    None => {
                        let _ = channel.eof().await;
                        Some(BecomeFailure::PasswordRequired)
                    }
                }
            }
            PromptAction::Refuse => {
                // A second prompt: the password was wrong. It is not sent again.
                let _ = channel.eof().await;
                Some(BecomeFailure::IncorrectPassword)
            }
        }
    }

    /// The error for an escalation that ended (or gave up) without handing over.
    pub(crate) fn failed(&self, config: &Config, reason: BecomeFailure, said: &[u8]) -> Error {
        Error::BecomeFailed {
            host: config.host.clone(),
            port: config.port,
            method: self.settings.method,
            user: self.settings.user.clone(),
            reason,
            message: self.message(said),
        }
    }

    /// What the tool said, its prompts cut out: the last few non-empty lines, bounded.
    fn message(&self, said: &[u8]) -> String {
        let mut text = String::from_utf8_lossy(said).into_owned();
        if let Some(prompt) = &self.prompt {
            text = text.replace(prompt.as_str(), "\n");
        }
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !looks_like_prompt(line))
            .collect();
        let start = lines.len().saturating_sub(4);
        let mut message = lines.get(start..).unwrap_or_default().join("; ");
        if message.len() > 512 {
            let mut end = 512;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str("...");
        }
        message
    }

    /// The reason an escalation failed, from what the tool said and how it ended.
    pub(crate) fn classify(&self, said: &[u8], exit_status: Option<u32>) -> BecomeFailure {
        classify(self.settings.method, &self.message(said), exit_status)
    }
}

/// sudo's `-p` prompt for one request: random, so that nothing else prints it.
fn random_prompt() -> String {
    format!(
        "swiftide-ssh-become-{:016x}-password",
        rand::random::<u64>()
    )
}

/// Whether a line is a password prompt of PAM's or a tool's: it ends in a colon (ASCII or
/// full width), as in every language PAM and su speak.
fn looks_like_prompt(line: &str) -> bool {
    let line = line.trim_end();
    line.ends_with(':') || line.ends_with('：')
}

/// Whether `line` is only a tool's message prefix (`su: `), which tools write apart from the
/// message (`su: ` then `Authentication failure`): not a prompt.
fn is_message_prefix(line: &str, tool: &str) -> bool {
    line.trim().strip_suffix(':') == Some(tool)
}

/// What to do about the tool's stderr so far.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PromptAction {
    /// Nothing to answer (yet).
    Wait,
    /// A prompt: send the password line.
    Answer,
    /// A second prompt: the password was wrong. Close stdin so the tool gives up.
    Refuse,
}

/// Finds prompts in the stderr a tool printed before the marker.
#[derive(Debug)]
pub(crate) struct PromptWatcher {
    /// sudo's own prompt; `None`: su's (a last line ending in a colon).
    exact: Option<Vec<u8>>,
    /// The tool's name, whose message prefix (`su: `) is not a prompt.
    tool: &'static str,
    /// Exact prompts counted so far.
    seen: usize,
    /// Where in the text the answered prompt ended (su).
    answered_at: Option<usize>,
    answered: bool,
}

impl PromptWatcher {
    /// Looks at everything the tool printed so far (`said`, growing between calls).
    pub(crate) fn check(&mut self, said: &[u8]) -> PromptAction {
        let prompts = match &self.exact {
            Some(prompt) => {
                let count = count(said, prompt);
                let new = count > self.seen;
                self.seen = count;
                new
            }
            None => {
                // The text after the last line break, if it ends in a colon, and only once
                // past the prompt already answered.
                let start = said
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |at| at + 1);
                let last =
                    String::from_utf8_lossy(said.get(start..).unwrap_or_default()).into_owned();
                let fresh = self.answered_at.is_none_or(|at| said.len() > at);
                let prompt = fresh
                    && !last.trim().is_empty()
                    && looks_like_prompt(&last)
                    && !is_message_prefix(&last, self.tool);
                if prompt {
                    self.answered_at = Some(said.len());
                }
                prompt
            }
        };
        match (prompts, self.answered) {
            (false, _) => PromptAction::Wait,
            (true, false) => {
                self.answered = true;
                PromptAction::Answer
            }
            (true, true) => PromptAction::Refuse,
        }
    }
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() || haystack.len() < needle.len() {
        return 0;
    }
    haystack
        .windows(needle.len())
        .filter(|w| w == &needle)
        .count()
}

/// The reason an escalation failed, from the tool's message (prompts removed) and its exit
/// status. The words are the tools' own in the C locale (sudo 1.9, opendoas 6.8, util-linux
/// and BusyBox su); a translated message falls back to the exit status or `Other`.
pub(crate) fn classify(
    method: BecomeMethod,
    message: &str,
    exit_status: Option<u32>,
) -> BecomeFailure {
    let lower = message.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|word| lower.contains(word));
    if has(&[
        "must have a tty",
        "a terminal is required",
        "no tty present",
        "a tty is required",
    ]) {
        BecomeFailure::TerminalRequired
    } else if has(&[
        "incorrect password",
        "sorry, try again",
        "authentication failure",
        "authentication failed",
        "incorrect password attempt",
    ]) {
        BecomeFailure::IncorrectPassword
    } else if has(&[
        "a password is required",
        "no password was provided",
        "authentication required",
    ]) {
        BecomeFailure::PasswordRequired
    } else if has(&[
        "not in the sudoers file",
        "is not allowed to",
        "not allowed to run sudo",
        "operation not permitted",
        "permission denied",
        "not permitted",
        // opendoas without a configuration file: nobody may use it.
        "doas is not enabled",
    ]) {
        BecomeFailure::NotAllowed
    } else if has(&[
        "unknown user",
        "does not exist",
        "unknown login",
        "user not found",
        "no passwd entry",
    ]) {
        BecomeFailure::UnknownUser
    } else if exit_status == Some(127) || (has(&["not found"]) && has(&[method.name()])) {
        BecomeFailure::NotInstalled
    } else {
        BecomeFailure::Other
    }
}

/// Escalates a channel the caller keeps for itself (the SFTP channel of an escalated handle),
/// after `request` was sent on it: sends `stdin` (the bootstrap's payload) when the tool
/// cannot read it as a password, answers the tool's prompt, and returns once the marker
/// `marker` says the target's shell runs the bootstrap, the payload sent by then. Messages
/// after the marker stay in the channel for the caller; the stdout that came before it is
/// returned (the tool's words, or the start of what the bootstrap ran: a `sudo -n` tool gets
/// its payload at once, and the two streams are not ordered).
///
/// # Errors
/// [`Error::BecomeFailed`] when the tool ends or gives up first, or within
/// [`Become::timeout`](crate::Become::timeout) does not hand over; a transport error when
/// the connection goes.
pub(crate) async fn hand_over(
    channel: &mut russh::Channel<russh::client::Msg>,
    exchange: &Exchange,
    config: &Config,
    marker: &str,
    stdin: &[u8],
) -> Result<Vec<u8>> {
    let waits = exchange.payload_waits();
    if !waits {
        send(channel, stdin, config).await?;
    }
    let mut parser = crate::command::marker::MarkerParser::escalated(marker);
    let mut watcher = exchange.watcher();
    let mut said = Vec::new();
    let mut stdout = Vec::new();
    let mut decided: Option<BecomeFailure> = None;
    let mut exit: Option<u32> = None;
    let deadline = tokio::time::Instant::now() + exchange.settings.timeout;
    loop {
        let message = match tokio::time::timeout_at(deadline, channel.wait()).await {
            Ok(message) => message,
            Err(_) => {
                let _ = channel.close().await;
                return Err(exchange.failed(config, BecomeFailure::Timeout, &said));
            }
        };
        match message {
            Some(russh::ChannelMsg::ExtendedData { data, .. }) => {
                said.extend_from_slice(&data);
                let (found, _) = parser.feed(data);
                if found.is_some() {
                    if waits {
                        send(channel, stdin, config).await?;
                    }
                    return Ok(stdout);
                }
            }
            // Before the marker, stdout is the tool's too (BusyBox's su prompts there).
            Some(russh::ChannelMsg::Data { data }) => {
                said.extend_from_slice(&data);
                stdout.extend_from_slice(&data);
            }
            Some(russh::ChannelMsg::ExitStatus { exit_status }) => {
                exit = Some(exit_status);
                continue;
            }
            Some(russh::ChannelMsg::Close) | None => {
                if message.is_none() {
                    return Err(Error::ConnectionLost {
                        host: config.host.clone(),
                        port: config.port,
                    });
                }
                let reason = decided.unwrap_or_else(|| exchange.classify(&said, exit));
                return Err(exchange.failed(config, reason, &said));
            }
            // The server's replies: not the caller's.
            Some(_) => continue,
        }
        if decided.is_none()
            && let Some(watcher) = watcher.as_mut()
        {
            decided = exchange.answer(watcher, &said, channel, config).await;
        }
    }
}

/// Sends `data` on the channel's stdin.
async fn send(
    channel: &russh::Channel<russh::client::Msg>,
    data: &[u8],
    config: &Config,
) -> Result<()> {
    channel.data(data).await.map_err(|source| Error::Ssh {
        host: config.host.clone(),
        port: config.port,
        phase: crate::error::Phase::Exec,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(settings: Become) -> Exchange {
        Exchange::new(&Escalated::new(
            settings,
            crate::command::Supervision {
                kill_on_disconnect: true,
                grace: std::time::Duration::from_secs(1),
                terminal: false,
                caller_stdin: false,
            },
        ))
    }

    #[test]
    fn sudo_prompts_are_answered_once_and_only_its_own() {
        let exchange = exchange(Become::sudo().password("pw"));
        let prompt = exchange.prompt.clone().unwrap();
        let mut watcher = exchange.watcher().unwrap();
        assert_eq!(watcher.check(b"Password: "), PromptAction::Wait);
        let mut said = b"We trust you have received the usual lecture\n\n".to_vec();
        assert_eq!(watcher.check(&said), PromptAction::Wait);
        said.extend_from_slice(&prompt.as_bytes()[..5]);
        assert_eq!(watcher.check(&said), PromptAction::Wait);
        said.extend_from_slice(&prompt.as_bytes()[5..]);
        assert_eq!(watcher.check(&said), PromptAction::Answer);
        assert_eq!(watcher.check(&said), PromptAction::Wait);
        said.extend_from_slice(b"Sorry, try again.\n");
        said.extend_from_slice(prompt.as_bytes());
        assert_eq!(watcher.check(&said), PromptAction::Refuse);
        // The message leaves the prompts and the lecture's blank lines out.
        let message = exchange.message(&said);
        assert!(!message.contains(&prompt), "{message}");
        assert_eq!(
            exchange.classify(&said, Some(1)),
            BecomeFailure::IncorrectPassword
        );
    }

    #[test]
    fn su_prompts_are_any_last_line_ending_in_a_colon() {
        let exchange = exchange(Become::su().password("pw"));
        let mut watcher = exchange.watcher().unwrap();
        assert_eq!(watcher.check(b"su: warn\n"), PromptAction::Wait);
        // The tool's message prefix, written apart from its message, is not a prompt.
        assert_eq!(watcher.check(b"su: warn\nsu: "), PromptAction::Wait);
        assert_eq!(
            watcher.check(b"su: warn\nMot de passe : "),
            PromptAction::Answer
        );
        assert_eq!(
            watcher.check(b"su: warn\nMot de passe : "),
            PromptAction::Wait
        );
        assert_eq!(
            watcher.check(b"su: warn\nMot de passe : \nPassword: "),
            PromptAction::Refuse
        );
    }

    #[test]
    fn tools_that_cannot_prompt_are_not_watched() {
        assert!(exchange(Become::sudo()).watcher().is_none());
        assert!(exchange(Become::doas().password("x")).watcher().is_none());
        assert!(exchange(Become::su()).watcher().is_some());
    }

    #[test]
    fn reasons_come_from_the_tools_own_words() {
        let cases: &[(BecomeMethod, &str, Option<u32>, BecomeFailure)] = &[
            (
                BecomeMethod::Sudo,
                "sudo: a password is required",
                Some(1),
                BecomeFailure::PasswordRequired,
            ),
            (
                BecomeMethod::Sudo,
                "sudo: no password was provided; sudo: 1 incorrect password attempt",
                Some(1),
                BecomeFailure::IncorrectPassword,
            ),
            (
                BecomeMethod::Sudo,
                "sudo: sorry, you must have a tty to run sudo",
                Some(1),
                BecomeFailure::TerminalRequired,
            ),
            (
                BecomeMethod::Sudo,
                "nouser is not in the sudoers file.",
                Some(1),
                BecomeFailure::NotAllowed,
            ),
            (
                BecomeMethod::Sudo,
                "Sorry, user u is not allowed to execute '/bin/sh -c x' as root on h.",
                Some(1),
                BecomeFailure::NotAllowed,
            ),
            (
                BecomeMethod::Sudo,
                "sudo: unknown user nosuch; sudo: error initializing audit plugin sudoers_audit",
                Some(1),
                BecomeFailure::UnknownUser,
            ),
            (
                BecomeMethod::Sudo,
                "sh: 1: exec: sudo: not found",
                Some(127),
                BecomeFailure::NotInstalled,
            ),
            (
                BecomeMethod::Doas,
                "doas: Authentication required",
                Some(1),
                BecomeFailure::PasswordRequired,
            ),
            (
                BecomeMethod::Doas,
                "doas: Operation not permitted",
                Some(1),
                BecomeFailure::NotAllowed,
            ),
            (
                BecomeMethod::Doas,
                "doas: doas is not enabled, /etc/doas.conf: No such file or directory",
                Some(1),
                BecomeFailure::NotAllowed,
            ),
            (
                BecomeMethod::Su,
                "su: Authentication failure",
                Some(1),
                BecomeFailure::IncorrectPassword,
            ),
            (
                BecomeMethod::Su,
                "su: user nosuch does not exist or the user entry does not contain all the required fields",
                Some(1),
                BecomeFailure::UnknownUser,
            ),
            (
                BecomeMethod::Su,
                "something else",
                Some(1),
                BecomeFailure::Other,
            ),
        ];
        for (method, message, status, reason) in cases {
            assert_eq!(classify(*method, message, *status), *reason, "{message}");
        }
    }
}
