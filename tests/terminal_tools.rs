//! The swiftide terminal tools (`TerminalTools`) against a real sshd, called as an agent loop
//! calls them: a `ToolCall` with JSON arguments in, a `ToolOutput` (or `ToolError`) out. The
//! model reads a status line, then the screen (`[screen ...]` and the rows verbatim).

mod common;

use std::time::{Duration, Instant};

use common::{remote_processes, testbed, token, wait_until_gone};
use serde_json::json;
use swiftide_agents::DefaultContext;
use swiftide_core::chat_completion::{Tool, ToolCall, ToolOutput, errors::ToolError};
use swiftide_ssh_executor::{SshExecutor, TerminalTools};

/// An interactive `sh` with a known prompt, `$ ` (shown as the row `$`).
const SHELL: &str = "PS1='$ ' exec /bin/sh -i";

struct Agent {
    tools: Vec<Box<dyn Tool>>,
    context: DefaultContext,
}

impl Agent {
    fn new(executor: &SshExecutor) -> Self {
        Agent {
            tools: TerminalTools::new(executor.clone()).tools(),
            context: DefaultContext::from_executor(executor.clone()),
        }
    }

    async fn try_call(&self, name: &str, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let call = ToolCall::builder()
            .id("call-1")
            .name(name)
            .args(args.to_string())
            .build()
            .unwrap();
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        tool.invoke(&self.context, &call).await
    }

    /// A successful call's text.
    async fn call(&self, name: &str, args: serde_json::Value) -> String {
        match self.try_call(name, args.clone()).await {
            Ok(ToolOutput::Text(text)) => text,
            other => panic!("{name} {args}: {other:?}"),
        }
    }

    /// A failed call's text.
    async fn fail(&self, name: &str, args: serde_json::Value) -> String {
        match self.try_call(name, args.clone()).await {
            Ok(ToolOutput::Fail(text)) => text,
            other => panic!("{name} {args} should fail: {other:?}"),
        }
    }
}

/// The rows of the screen in a terminal tool's text: every line after the `[screen ...]`
/// header (which is the first line starting with `[screen `: ours come before it).
fn rows(text: &str) -> Vec<&str> {
    let mut lines = text.lines();
    assert!(
        lines.by_ref().any(|line| line.starts_with("[screen ")),
        "no screen in {text:?}"
    );
    lines.collect()
}

/// Waits until a process matching `pattern` runs on the host.
async fn running(pattern: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while remote_processes(pattern).is_empty() {
        assert!(Instant::now() < deadline, "{pattern} never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn specs_are_strict_and_named_as_the_other_doors() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let tools = TerminalTools::new(executor).tools();
    let names: Vec<_> = tools.iter().map(|t| t.name().into_owned()).collect();
    assert_eq!(
        names,
        [
            "open_terminal",
            "terminal_send",
            "terminal_screen",
            "close_terminal",
            "list_terminals"
        ]
    );
    for tool in &tools {
        let spec = tool.tool_spec();
        assert_eq!(spec.name, tool.name());
        assert!(!spec.description.is_empty());
        let strict = spec.strict_parameters_schema().unwrap().into_json();
        assert_eq!(strict["type"], "object", "{strict}");
    }
    let send = tools[1]
        .tool_spec()
        .strict_parameters_schema()
        .unwrap()
        .into_json();
    for field in ["id", "text", "keys", "wait_for", "quiet_ms", "timeout_secs"] {
        assert!(send["properties"][field].is_object(), "{field}: {send}");
    }
    assert!(tools[1].tool_spec().description.contains("Ctrl-C"));
}

#[tokio::test]
async fn a_model_computes_in_a_repl_answers_a_prompt_interrupts_and_closes() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);

    // A REPL: its prompt on the first screen, an answer after Enter, its end on Ctrl-D.
    let opened = agent
        .call("open_terminal", json!({"command": "python3 -q"}))
        .await;
    let mut lines = opened.lines();
    assert_eq!(
        lines.next(),
        Some(r#"terminal term-1 opened (80x24): command "python3 -q""#),
        "{opened}"
    );
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("terminal term-1: the screen is quiet (no change for 300 ms) after "),
        "{opened}"
    );
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("[screen 24 rows x 80 cols, cursor at row 0 col 4"),
        "{opened}"
    );
    assert_eq!(rows(&opened), [">>>"], "{opened}");
    let answered = agent
        .call(
            "terminal_send",
            json!({"id": "term-1", "text": "6*7", "keys": ["Enter"], "wait_for": "^42$"}),
        )
        .await;
    assert!(
        answered.starts_with(r#"terminal term-1: wait_for "^42$" matched after "#),
        "{answered}"
    );
    assert_eq!(rows(&answered)[..2], [">>> 6*7", "42"], "{answered}");
    let ended = agent
        .call("terminal_send", json!({"id": "term-1", "keys": ["Ctrl-D"]}))
        .await;
    assert!(
        ended.starts_with("terminal term-1: the program has ended: exited with code 0\n"),
        "{ended}"
    );
    let listed = agent.call("list_terminals", json!({})).await;
    assert_eq!(
        listed,
        "1 of at most 8 terminals open:\nterm-1: the program has ended: exited with code 0, \
         80x24, command \"python3 -q\""
    );
    let refused = agent
        .fail("terminal_send", json!({"id": "term-1", "text": "1"}))
        .await;
    assert!(refused.contains("nothing was sent"), "{refused}");
    let closed = agent.call("close_terminal", json!({"id": "term-1"})).await;
    assert_eq!(
        closed,
        "terminal term-1 closed; the program had already ended: exited with code 0"
    );

    // A shell: a question answered, a command interrupted, then closed with a command
    // running, which dies with the session.
    let opened = agent
        .call(
            "open_terminal",
            json!({"command": SHELL, "cols": 100, "rows": 30}),
        )
        .await;
    assert!(
        opened.starts_with("terminal term-2 opened (100x30): "),
        "{opened}"
    );
    assert_eq!(rows(&opened), ["$"], "{opened}");
    let asked = agent
        .call(
            "terminal_send",
            json!({"id": "term-2", "text": "read -p 'Continue? [y/N] ' a; echo \"answer=$a\"",
                   "keys": ["Enter"], "wait_for": r"Continue\? \[y/N\]$"}),
        )
        .await;
    assert!(asked.contains("matched"), "{asked}");
    let answered = agent
        .call(
            "terminal_send",
            json!({"id": "term-2", "text": "y", "keys": ["Enter"], "wait_for": "^\\$$"}),
        )
        .await;
    assert!(answered.contains("matched"), "{answered}");
    let screen = rows(&answered);
    assert_eq!(
        screen[1..],
        ["Continue? [y/N] y", "answer=y", "$"],
        "{answered}"
    );

    let t = token();
    let interrupted = format!("sleep 300{t}");
    agent
        .call(
            "terminal_send",
            json!({"id": "term-2", "text": interrupted, "keys": ["Enter"]}),
        )
        .await;
    running(&interrupted).await;
    let after = agent
        .call(
            "terminal_send",
            json!({"id": "term-2", "keys": ["Ctrl-C"], "wait_for": "^\\$$"}),
        )
        .await;
    assert!(after.contains("matched"), "{after}");
    let left = wait_until_gone(&interrupted, Duration::from_secs(10)).await;
    assert!(left.is_empty(), "Ctrl-C did not stop it: {left:?}");

    // The screen on its own, with the rows that scrolled off the top.
    agent
        .call(
            "terminal_send",
            json!({"id": "term-2", "text": "seq 1 100", "keys": ["Enter"], "wait_for": "^100\\n\\$$"}),
        )
        .await;
    let read = agent
        .call(
            "terminal_screen",
            json!({"id": "term-2", "scrollback_lines": 3}),
        )
        .await;
    let mut lines = read.lines();
    assert_eq!(
        lines.next(),
        Some("terminal term-2: the program is running")
    );
    let heading = lines.next().unwrap();
    assert!(
        heading.starts_with("[scrollback: the last 3 of ")
            && heading.ends_with("the screen follows]"),
        "{read}"
    );
    let scrolled: Vec<_> = lines.by_ref().take(3).collect();
    assert_eq!(scrolled, ["69", "70", "71"], "{read}");
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("[screen 30 rows x 100 cols")
    );
    assert_eq!(rows(&read)[0], "72", "{read}");
    // A wait on the screen alone, which times out and says so.
    let waited = agent
        .call(
            "terminal_screen",
            json!({"id": "term-2", "wait_for": "never-shown", "timeout_secs": 0.3}),
        )
        .await;
    let status = waited.lines().next().unwrap();
    assert!(
        status.starts_with("terminal term-2: timed out after 3")
            && status.ends_with(
                " ms: wait_for \"never-shown\" did not match; the program is still running"
            ),
        "{waited}"
    );

    let killed = format!("sleep 301{t}");
    agent
        .call(
            "terminal_send",
            json!({"id": "term-2", "text": killed, "keys": ["Enter"]}),
        )
        .await;
    running(&killed).await;
    let closed = agent.call("close_terminal", json!({"id": "term-2"})).await;
    assert!(
        closed.starts_with("terminal term-2 closed: its session was killed; "),
        "{closed}"
    );
    let left = wait_until_gone(&killed, Duration::from_secs(10)).await;
    assert!(left.is_empty(), "survived close_terminal: {left:?}");
    assert_eq!(
        agent.call("list_terminals", json!({})).await,
        "no terminals open (at most 8 at once; open one with open_terminal)"
    );
}

#[tokio::test]
async fn mistakes_are_failed_outputs_the_model_can_act_on() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);

    let unknown = agent
        .fail("terminal_send", json!({"id": "term-9", "text": "x"}))
        .await;
    assert_eq!(
        unknown,
        "no terminal \"term-9\"; no terminal is open (open one with open_terminal)"
    );
    agent.call("open_terminal", json!({"command": SHELL})).await;

    // A bad key: the accepted forms, and nothing typed (not even the text before it).
    let bad_key = agent
        .fail(
            "terminal_send",
            json!({"id": "term-1", "text": "echo typed-anyway", "keys": ["Enter", "Enterr"]}),
        )
        .await;
    assert!(bad_key.contains("\"Enterr\""), "{bad_key}");
    assert!(bad_key.contains("Ctrl-<letter>"), "{bad_key}");
    assert!(bad_key.contains("Nothing was sent"), "{bad_key}");
    let bad_regex = agent
        .fail(
            "terminal_send",
            json!({"id": "term-1", "text": "echo typed-anyway", "wait_for": "(unclosed"}),
        )
        .await;
    assert!(
        bad_regex.contains("is not a valid regular expression"),
        "{bad_regex}"
    );
    let screen = agent.call("terminal_screen", json!({"id": "term-1"})).await;
    assert!(!screen.contains("typed-anyway"), "{screen}");
    let bad_size = agent.fail("open_terminal", json!({"cols": 1000})).await;
    assert_eq!(bad_size, "cols must be from 20 to 400, not 1000");
    // Arguments that do not match the schema are the agent loop's WrongArguments.
    assert!(matches!(
        agent
            .try_call("terminal_send", json!({"terminal": "term-1"}))
            .await,
        Err(ToolError::WrongArguments(_))
    ));

    // At most 8 open: the ninth is refused with the list to choose from.
    for n in 2..=8 {
        let opened = agent
            .call("open_terminal", json!({"command": "echo ready; exec cat"}))
            .await;
        assert!(
            opened.starts_with(&format!("terminal term-{n} opened")),
            "{opened}"
        );
        assert_eq!(rows(&opened)[0], "ready", "{opened}");
    }
    let refused = agent
        .fail("open_terminal", json!({"command": "echo ready; exec cat"}))
        .await;
    assert!(
        refused.starts_with(
            "8 terminals are open, the most at once: close one you no longer need with \
             close_terminal first (open: term-1 (command "
        ),
        "{refused}"
    );
    agent.call("close_terminal", json!({"id": "term-3"})).await;
    let gone = agent.fail("terminal_screen", json!({"id": "term-3"})).await;
    assert!(
        gone.starts_with("terminal term-3 was closed (ids are not reused); open terminals: term-1, term-2, term-4"),
        "{gone}"
    );
    let opened = agent
        .call("open_terminal", json!({"command": "echo ready; exec cat"}))
        .await;
    assert!(opened.starts_with("terminal term-9 opened"), "{opened}");
}

#[tokio::test]
async fn dropping_the_tools_kills_every_terminal() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);
    let t = token();
    let patterns = [format!("sleep 302{t}"), format!("sleep 303{t}")];
    for pattern in &patterns {
        agent
            .call(
                "open_terminal",
                json!({"command": format!("echo started; {pattern}; echo never")}),
            )
            .await;
        running(pattern).await;
    }
    drop(agent);
    for pattern in &patterns {
        let left = wait_until_gone(pattern, Duration::from_secs(10)).await;
        assert!(left.is_empty(), "survived the tools: {left:?}");
    }
}

#[tokio::test]
async fn a_program_that_ends_at_once_is_shown_and_closed() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);
    let opened = agent
        .call(
            "open_terminal",
            json!({"command": "echo one; echo two; exit 3", "working_directory": "/"}),
        )
        .await;
    let mut lines = opened.lines();
    lines.next();
    assert_eq!(
        lines.next(),
        Some(
            "terminal term-1: the program has ended: exited with code 3; it is closed now (its \
             id is gone), and this is its last screen"
        ),
        "{opened}"
    );
    assert_eq!(rows(&opened), ["one", "two"], "{opened}");
    assert_eq!(
        agent.call("list_terminals", json!({})).await,
        "no terminals open (at most 8 at once; open one with open_terminal)"
    );
}

#[tokio::test]
async fn an_unreachable_host_is_an_execution_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let executor = SshExecutor::builder()
        .host("127.0.0.1")
        .port(port)
        .user("nobody")
        .insecure_accept_any_host_key()
        .build_lazy()
        .unwrap();
    let agent = Agent::new(&executor);
    match agent.try_call("open_terminal", json!({})).await {
        Err(ToolError::ExecutionFailed(error)) => {
            let message = error.to_string();
            assert!(
                message.contains(&format!("could not connect to 127.0.0.1:{port}")),
                "{message}"
            );
        }
        other => panic!("open_terminal on a dead host: {other:?}"),
    }
    // Nothing is left counted against the limit.
    assert_eq!(
        agent.call("list_terminals", json!({})).await,
        "no terminals open (at most 8 at once; open one with open_terminal)"
    );
}

#[tokio::test]
async fn a_silent_program_opens_in_seconds_even_as_the_first_call() {
    let tb = testbed();
    // Not connected yet: the terminal's connection is the executor's first.
    let executor = common::builder(&tb).build_lazy().unwrap();
    let agent = Agent::new(&executor);
    let started = Instant::now();
    let opened = agent
        .call("open_terminal", json!({"command": "exec cat"}))
        .await;
    assert!(started.elapsed() < Duration::from_secs(15), "{opened}");
    let mut lines = opened.lines();
    lines.next();
    let status = lines.next().unwrap();
    assert!(
        status.starts_with("terminal term-1: nothing drawn yet after ")
            && status.ends_with("; the program is running"),
        "{opened}"
    );
    // It was running all along: what is typed comes back.
    let echoed = agent
        .call(
            "terminal_send",
            json!({"id": "term-1", "text": "hello", "keys": ["Enter"], "wait_for": "^hello\\nhello$"}),
        )
        .await;
    assert!(echoed.contains("matched"), "{echoed}");
}
