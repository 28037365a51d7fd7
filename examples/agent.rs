//! Gives a swiftide agent tools that act on a remote host through the SSH executor (a shell,
//! files, jobs: commands that outlive the call, terminals: a REPL or a prompt driven with
//! text and keys and read as a screen, and ports: a server on the host opened from here),
//! and calls them as a model would, so no LLM key is needed.
//!
//! Run this example with:
//!
//! ```sh
//! cargo run --ignore-rust-version --example agent
//! ```
//!
//! With no arguments it starts a throwaway local sshd (the native testbed; needs
//! `openssh-server`; the host needs `python3` for the REPL and the web server, and `curl`).
//! To use a real host, name it as in `~/.ssh/config` (user, port, keys and
//! known_hosts come from there). The example works in `agent-demo/` below the login
//! directory (and refuses to start if it exists), and removes it and its three jobs
//! (`agent-demo-build`, `agent-demo-server`, `agent-demo-web`: a web server whose port
//! `expose_port` makes reachable here) at the end; its terminals (`python3 -q`, a
//! `read -p` prompt) are closed by the calls themselves, or killed when the tools drop:
//!
//! ```sh
//! cargo run --ignore-rust-version --example agent -- build-1
//! ```

use std::{borrow::Cow, path::Path, time::Duration};

use async_trait::async_trait;
use serde_json::{Value, json};
use swiftide_agents::DefaultContext;
use swiftide_core::{
    AgentContext, Command, CommandError,
    chat_completion::{Tool, ToolCall, ToolOutput, ToolSpec, errors::ToolError},
};
use swiftide_ssh_executor::{JobTools, PortTools, SshExecutor, TerminalTools};
use swiftide_ssh_testbed::Testbed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A tool that turns the model's JSON arguments (all strings) into one swiftide `Command` and
/// runs it on the agent context's executor, whichever executor that is.
#[derive(Clone)]
struct ExecutorTool {
    spec: ToolSpec,
    command: fn(&Value) -> Option<Command>,
}

type Error = Box<dyn std::error::Error>;

fn tool(
    name: &str,
    about: &str,
    args: &[&str],
    command: fn(&Value) -> Option<Command>,
) -> Result<Box<dyn Tool>, Error> {
    let properties: serde_json::Map<_, _> = args
        .iter()
        .map(|a| (a.to_string(), json!({ "type": "string" })))
        .collect();
    let spec: ToolSpec = serde_json::from_value(json!({ "name": name, "description": about,
        "parameters_schema": { "type": "object", "properties": properties, "required": args,
                               "additionalProperties": false } }))?;
    spec.strict_parameters_schema()?; // the schema an LLM provider will be sent is valid
    Ok(Box::new(ExecutorTool { spec, command }))
}

#[async_trait]
impl Tool for ExecutorTool {
    async fn invoke(
        &self,
        context: &dyn AgentContext,
        call: &ToolCall,
    ) -> Result<ToolOutput, ToolError> {
        let args: Value = serde_json::from_str(call.args().unwrap_or("{}"))?;
        let command = (self.command)(&args)
            .ok_or_else(|| ToolError::missing_arguments(self.spec.name.clone()))?;
        match context.executor().exec_cmd(&command).await {
            Ok(output) if output.is_empty() => Ok(ToolOutput::text("(done, no output)")),
            // stdout and stderr interleaved as they were produced.
            Ok(output) => Ok(ToolOutput::text(output.into_string_lossy())),
            // The command ran and failed: the model reads why and may try something else.
            Err(error @ (CommandError::NonZeroExit(_) | CommandError::TimedOut { .. })) => {
                Ok(ToolOutput::fail(error.to_string()))
            }
            // The executor could not run it (e.g. connection lost): the agent loop decides.
            Err(error) => Err(ToolError::execution_failed(error)),
        }
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.spec.name)
    }

    fn tool_spec(&self) -> ToolSpec {
        self.spec.clone()
    }
}

/// What an agent's browser or HTTP client does with a URL, on this machine: an HTTP/1.0
/// `GET` of an `http://host:port/path` URL, answered with the response (status line,
/// headers, body). It is how the agent opens what `expose_port` made reachable.
#[derive(Clone)]
struct FetchUrl {
    spec: ToolSpec,
}

impl FetchUrl {
    fn boxed() -> Result<Box<dyn Tool>, Error> {
        let spec: ToolSpec = serde_json::from_value(json!({ "name": "fetch_url",
            "description": "Fetch an http:// URL from this machine (as a browser would)",
            "parameters_schema": { "type": "object",
                "properties": { "url": { "type": "string" } }, "required": ["url"],
                "additionalProperties": false } }))?;
        Ok(Box::new(FetchUrl { spec }))
    }
}

#[async_trait]
impl Tool for FetchUrl {
    async fn invoke(&self, _: &dyn AgentContext, call: &ToolCall) -> Result<ToolOutput, ToolError> {
        let args: Value = serde_json::from_str(call.args().unwrap_or("{}"))?;
        let url = args["url"].as_str().unwrap_or_default();
        let Some(rest) = url.strip_prefix("http://") else {
            return Ok(ToolOutput::fail(format!("not an http:// URL: {url}")));
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        let fetch = async {
            let mut stream = tokio::net::TcpStream::connect(authority).await?;
            let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
            stream.write_all(request.as_bytes()).await?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
        };
        Ok(
            match tokio::time::timeout(Duration::from_secs(10), fetch).await {
                Ok(Ok(response)) => ToolOutput::text(response),
                Ok(Err(error)) => ToolOutput::fail(format!("{url}: {error}")),
                Err(_) => ToolOutput::fail(format!("{url}: no response within 10 s")),
            },
        )
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.spec.name)
    }

    fn tool_spec(&self) -> ToolSpec {
        self.spec.clone()
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Keep the testbed alive for the whole run: dropping it stops sshd.
    let (builder, _testbed) = match std::env::args().nth(1) {
        Some(alias) => (SshExecutor::from_ssh_config(&alias)?, None),
        None => {
            let testbed = Testbed::start()?;
            let builder = SshExecutor::builder()
                .host(testbed.host())
                .port(testbed.port())
                .user(testbed.user())
                .private_key_file(testbed.private_key_path())
                .known_hosts_file(testbed.known_hosts_path())
                .workdir(testbed.scratch_dir());
            (builder, Some(testbed))
        }
    };
    let executor = builder
        .default_timeout(Some(Duration::from_secs(3)))
        .build()
        .await?;
    if executor.exists(Path::new("agent-demo")).await? {
        return Err("agent-demo/ already exists on the remote host".into());
    }
    let context = DefaultContext::from_executor(executor.clone());

    let mut tools = vec![
        tool("run_shell", "Run a shell command", &["command"], |a| {
            Some(Command::shell(a["command"].as_str()?))
        })?,
        tool("write_file", "Write a file", &["path", "content"], |a| {
            Some(Command::write_file(
                a["path"].as_str()?,
                a["content"].as_str()?,
            ))
        })?,
        tool("read_file", "Read a file", &["path"], |a| {
            Some(Command::read_file(a["path"].as_str()?))
        })?,
    ];
    // start_job, job_output, job_status, kill_job, list_jobs: the crate's own tools.
    tools.extend(JobTools::new(executor.clone()).tools());
    // open_terminal, terminal_send, terminal_screen, close_terminal, list_terminals: the
    // crate's own too. The terminals they open live as long as these tools.
    tools.extend(TerminalTools::new(executor.clone()).tools());
    // expose_port and list_ports: a service on the host, reachable here for fetch_url.
    tools.extend(PortTools::new(executor.clone()).tools());
    tools.push(FetchUrl::boxed()?);
    // The port the demo's web server takes on the host (free here, where the testbed runs).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();

    // Tool calls as a model emits them: a tool name, then its arguments as a JSON string.
    let calls = [
        r#"write_file {"path": "agent-demo/todo.md", "content": "- ship it\n"}"#,
        r#"run_shell {"command": "ls -la agent-demo"}"#,
        r#"run_shell {"command": "echo build; sleep .1; echo warn >&2; sleep .1; echo ok"}"#,
        r#"run_shell {"command": "echo test; echo 'test failed' >&2; exit 101"}"#,
        r#"run_shell {"command": "echo waiting; sleep 60"}"#,
        r#"read_file {"path": "agent-demo/todo.md"}"#,
        r#"read_file {"path": "agent-demo/missing.md"}"#,
        r#"read_file {"file": "agent-demo/todo.md"}"#,
        // A build that outlives the call: start it, look at it, wait for it, then ask for
        // only what is new since the cursor the last output ended with ($CURSOR below).
        r#"start_job {"command": "for i in 1 2 3; do echo step $i; sleep .3; done; echo built", "id": "agent-demo-build", "working_directory": "agent-demo", "labels": [{"key": "kind", "value": "build"}]}"#,
        r#"job_output {"id": "agent-demo-build"}"#,
        r#"job_status {"id": "agent-demo-build", "wait_secs": 5}"#,
        r#"job_output {"id": "agent-demo-build", "cursor": "$CURSOR"}"#,
        r#"start_job {"command": "echo serving; sleep 600", "id": "agent-demo-server"}"#,
        r#"kill_job {"id": "agent-demo-server"}"#,
        r#"list_jobs {}"#,
        // A REPL in a terminal: type, press Enter, wait for the answer on the screen.
        r#"open_terminal {"command": "python3 -q"}"#,
        r#"terminal_send {"id": "term-1", "text": "6*7", "keys": ["Enter"], "wait_for": "^42$"}"#,
        r#"terminal_send {"id": "term-1", "text": "for i in range(3): print('row', i)", "keys": ["Enter", "Enter"], "wait_for": "^row 2$"}"#,
        // Something slow: the wait ends when the screen goes quiet; Ctrl-C interrupts it.
        r#"terminal_send {"id": "term-1", "text": "import time; time.sleep(60)", "keys": ["Enter"], "quiet_ms": 500}"#,
        r#"terminal_send {"id": "term-1", "keys": ["Ctrl-C"], "wait_for": "^KeyboardInterrupt$"}"#,
        r#"terminal_send {"id": "term-1", "keys": ["Hyper-Q"]}"#,
        r#"list_terminals {}"#,
        r#"close_terminal {"id": "term-1"}"#,
        // A command that asks before it acts, answered as a person would.
        r#"open_terminal {"command": "read -p 'Deploy to production? [y/N] ' answer; echo \"answer: $answer\"; sleep 30", "cols": 60, "rows": 6}"#,
        r#"terminal_send {"id": "term-2", "text": "y", "keys": ["Enter"], "wait_for": "^answer: y$"}"#,
        r#"terminal_screen {"id": "term-2", "wait_for": "never shown", "timeout_secs": 0.5}"#,
        r#"close_terminal {"id": "term-2"}"#,
        r#"terminal_screen {"id": "term-2"}"#,
        // A dev server on the host, opened from here: start it, expose its port, fetch the
        // URL expose_port returned ($URL below).
        r#"start_job {"command": "exec python3 -m http.server $PORT --bind 127.0.0.1", "id": "agent-demo-web", "working_directory": "agent-demo"}"#,
        r#"run_shell {"command": "curl -s --retry 20 --retry-connrefused --retry-delay 0 --retry-max-time 2 -o /dev/null http://127.0.0.1:$PORT/ && echo serving"}"#,
        r#"expose_port {"port": $PORT}"#,
        r#"fetch_url {"url": "$URLtodo.md"}"#,
        r#"list_ports {}"#,
        r#"kill_job {"id": "agent-demo-web"}"#,
    ];
    // The cursor the last job_output returned, and the URL the last expose_port gave,
    // passed back as a model would.
    let mut cursor = String::new();
    let mut url = String::new();
    for (id, line) in calls.into_iter().enumerate() {
        let line = line
            .replace("$CURSOR", &cursor)
            .replace("$PORT", &port.to_string())
            .replace("$URL", &url);
        let line = line.as_str();
        let (name, args) = line.split_once(' ').ok_or(line)?;
        let call = ToolCall::builder()
            .id(format!("call_{id}"))
            .name(name)
            .args(args)
            .build()?;
        let tool = tools.iter().find(|t| t.name() == name).ok_or(name)?;
        // As in the agent loop, an `Err` reaches the model as a failed tool output.
        let output = match tool.invoke(&context, &call).await {
            Ok(output) => output,
            Err(error) => ToolOutput::fail(error.to_string()),
        };
        let text = output.to_string();
        if let Some(next) = text.lines().find_map(|l| l.strip_prefix("cursor: ")) {
            cursor = next.to_owned();
        }
        if let Some((_, after)) = text.split_once("(as a URL: ") {
            url = after.split(')').next().unwrap_or_default().to_owned();
        }
        println!("> {line}\n{}\n", text.trim_end());
    }

    for id in ["agent-demo-build", "agent-demo-server", "agent-demo-web"] {
        executor.job(id).await?.remove().await?;
    }
    executor.remove_dir_all(Path::new("agent-demo")).await?;
    println!(
        "To let a model make these calls, hand the same context and tools to an agent:\n  \
         Agent::builder().context(context).tools(tools).llm(&llm).build()?.query(\"..\").await?\n\
         where `llm` is any swiftide ChatCompletion, e.g. OpenAI from swiftide-integrations."
    );
    Ok(())
}
