//! The swiftide job tools (`JobTools`) against a real sshd, called as an agent loop calls
//! them: a `ToolCall` with JSON arguments in, a `ToolOutput` (or `ToolError`) out. The
//! cursor goes out in one call's text and back in the next one's arguments.

mod common;

use std::time::Duration;

use common::{job_cursor, job_section, testbed, token};
use serde_json::json;
use swiftide_agents::DefaultContext;
use swiftide_core::chat_completion::{Tool, ToolCall, ToolOutput, errors::ToolError};
use swiftide_ssh_executor::{JobOptions, JobStatus, JobTools, SshExecutor};

struct Agent {
    tools: Vec<Box<dyn Tool>>,
    context: DefaultContext,
}

impl Agent {
    fn new(executor: &SshExecutor) -> Self {
        Agent {
            tools: JobTools::new(executor.clone()).tools(),
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

#[tokio::test]
async fn specs_are_strict_and_named_as_the_other_doors() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let tools = JobTools::new(executor).tools();
    let names: Vec<_> = tools.iter().map(|t| t.name().into_owned()).collect();
    assert_eq!(
        names,
        [
            "start_job",
            "job_output",
            "job_status",
            "kill_job",
            "list_jobs"
        ]
    );
    for tool in &tools {
        let spec = tool.tool_spec();
        assert_eq!(spec.name, tool.name());
        assert!(!spec.description.is_empty());
        // What an LLM provider is sent: valid under swiftide's strict contract.
        let strict = spec.strict_parameters_schema().unwrap().into_json();
        assert_eq!(strict["type"], "object", "{strict}");
    }
    let start = tools[0]
        .tool_spec()
        .strict_parameters_schema()
        .unwrap()
        .into_json();
    for field in [
        "command",
        "id",
        "working_directory",
        "deadline_secs",
        "labels",
    ] {
        assert!(start["properties"][field].is_object(), "{field}: {start}");
    }
}

#[tokio::test]
async fn an_agent_starts_polls_by_cursor_waits_kills_and_lists() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);
    let t = token();
    let (build_id, short_id, server_id) = (
        format!("tools-build-{t}"),
        format!("tools-short-{t}"),
        format!("tools-server-{t}"),
    );

    let started = agent
        .call(
            "start_job",
            json!({"command": "echo one; echo warn >&2; sleep 0.3; echo two; exit 3",
                   "id": build_id, "labels": [{"key": "kind", "value": "build"}]}),
        )
        .await;
    assert!(
        started.starts_with(&format!("job {build_id}: started, ")),
        "{started}"
    );
    assert_eq!(job_cursor(&started), "stdout=0,stderr=0");

    // Poll until it ends, always passing back the cursor the last call returned: every byte
    // arrives once, in order.
    let mut cursor = job_cursor(&started);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let last = loop {
        let polled = agent
            .call("job_output", json!({"id": build_id, "cursor": cursor}))
            .await;
        stdout.push_str(&job_section(&polled, "stdout"));
        stderr.push_str(&job_section(&polled, "stderr"));
        cursor = job_cursor(&polled);
        if polled.contains("[end of output]") {
            break polled;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stdout, "one\ntwo\n");
    assert_eq!(stderr, "warn\n");
    assert_eq!(cursor, "stdout=8,stderr=5");
    assert!(
        last.starts_with(&format!("job {build_id}: exited with code 3")),
        "{last}"
    );

    // Nothing was consumed: the start cursor (or none) reads it all again; the end cursor
    // reads nothing new.
    let again = agent.call("job_output", json!({"id": build_id})).await;
    assert_eq!(job_section(&again, "stdout"), "one\ntwo\n");
    assert_eq!(job_cursor(&again), "stdout=8,stderr=5");
    let idle = agent
        .call("job_output", json!({"id": build_id, "cursor": cursor}))
        .await;
    assert!(idle.contains("(no new output)"), "{idle}");

    let status = agent
        .call("job_status", json!({"id": build_id, "wait_secs": 1}))
        .await;
    assert!(
        status.starts_with(&format!("job {build_id}: exited with code 3")),
        "{status}"
    );
    assert!(status.contains(r#"labels: "kind"="build""#), "{status}");

    // job_status waits for the end; kill_job takes the group.
    agent
        .call("start_job", json!({"command": "sleep 0.4", "id": short_id}))
        .await;
    let waited = agent
        .call("job_status", json!({"id": short_id, "wait_secs": 10}))
        .await;
    assert!(
        waited.starts_with(&format!("job {short_id}: exited with code 0")),
        "{waited}"
    );
    agent
        .call("start_job", json!({"command": "sleep 60", "id": server_id}))
        .await;
    let running = agent.call("job_status", json!({"id": server_id})).await;
    assert!(
        running.starts_with(&format!("job {server_id}: running (pid ")),
        "{running}"
    );
    let killed = agent
        .call("kill_job", json!({"id": server_id, "grace_secs": 1}))
        .await;
    assert_eq!(killed, format!("job {server_id}: killed by signal TERM"));
    let status = agent.call("job_status", json!({"id": server_id})).await;
    assert!(status.contains("(ended by a kill)"), "{status}");
    let again = agent.call("kill_job", json!({"id": server_id})).await;
    assert!(
        again.contains("already killed by signal TERM; nothing was signalled"),
        "{again}"
    );

    // The account's other jobs (other tests) are listed too: look at this test's own.
    let listed = agent.call("list_jobs", json!({})).await;
    let lines: Vec<_> = listed
        .lines()
        .filter(|line| {
            let id = line.split(':').next().unwrap_or_default();
            id.ends_with(&format!("-{t}"))
        })
        .collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines[0].starts_with(&format!(
            "{build_id}: exited with code 3, command \"echo one;"
        )),
        "{listed}"
    );
    assert!(lines[0].ends_with(r#"labels "kind"="build""#), "{listed}");
    assert!(
        lines[1].starts_with(&format!("{server_id}: killed by signal TERM")),
        "{listed}"
    );
    assert!(
        lines[2].starts_with(&format!("{short_id}: exited with code 0")),
        "{listed}"
    );

    // A new agent on a new connection (a restarted agent) reattaches by id.
    let other = common::executor(&tb).await;
    let reattached = Agent::new(&other)
        .call("job_output", json!({"id": build_id}))
        .await;
    assert_eq!(job_section(&reattached, "stdout"), "one\ntwo\n");
    for id in [&build_id, &short_id, &server_id] {
        executor.job(id).await.unwrap().remove().await.unwrap();
    }
}

#[tokio::test]
async fn small_reads_never_split_a_utf8_sequence() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);
    let utf8_id = format!("tools-utf8-{}", token());
    // 40 two-byte characters and a four-byte one, no newline: reads of 5 bytes cut sequences.
    let expected = format!("{}😀", "é".repeat(40));
    agent
        .call(
            "start_job",
            json!({"command": format!("printf '%s' '{expected}'"), "id": utf8_id}),
        )
        .await;
    let job = executor.job(&utf8_id).await.unwrap();
    assert!(matches!(
        job.wait(Duration::from_secs(10)).await.unwrap(),
        JobStatus::Exited(_)
    ));
    let mut cursor = "stdout=0,stderr=0".to_owned();
    let mut text = String::new();
    let mut steps = Vec::new();
    loop {
        let polled = agent
            .call(
                "job_output",
                json!({"id": utf8_id, "cursor": cursor, "max_bytes": 5}),
            )
            .await;
        let piece = job_section(&polled, "stdout");
        // The renderer ends a piece without a newline with one; the content has none.
        text.push_str(piece.strip_suffix('\n').unwrap_or(&piece));
        let next = job_cursor(&polled);
        steps.push(next.clone());
        cursor = next;
        if polled.contains("[end of output]") {
            break;
        }
        assert!(polled.contains("[more output is waiting"), "{polled}");
    }
    assert_eq!(text, expected, "no U+FFFD, nothing lost or doubled");
    assert_eq!(cursor, format!("stdout={},stderr=0", expected.len()));
    // Each 5-byte read held back the cut half of the third é.
    assert_eq!(steps[0], "stdout=4,stderr=0");
    assert_eq!(steps[1], "stdout=8,stderr=0");
    job.remove().await.unwrap();
}

#[tokio::test]
async fn mistakes_are_failed_outputs_the_model_can_act_on() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);
    let bad_cursor_id = format!("tools-bad-cursor-{}", token());
    let missing = agent.fail("job_output", json!({"id": "no-such-job"})).await;
    assert!(missing.contains("no-such-job"), "{missing}");
    let bad_id = agent
        .fail("start_job", json!({"command": "true", "id": "../x"}))
        .await;
    assert!(bad_id.contains("../x"), "{bad_id}");
    let bad_deadline = agent
        .fail("start_job", json!({"command": "true", "deadline_secs": -1}))
        .await;
    assert!(bad_deadline.contains("deadline_secs"), "{bad_deadline}");
    agent
        .call("start_job", json!({"command": "true", "id": bad_cursor_id}))
        .await;
    let bad_cursor = agent
        .fail("job_output", json!({"id": bad_cursor_id, "cursor": "12"}))
        .await;
    assert!(bad_cursor.contains("stdout=N,stderr=M"), "{bad_cursor}");
    let taken = agent
        .fail(
            "start_job",
            json!({"command": "false", "id": bad_cursor_id}),
        )
        .await;
    assert!(taken.contains(&bad_cursor_id), "{taken}");
    // Arguments that do not match the schema are the agent loop's WrongArguments.
    assert!(matches!(
        agent.try_call("job_status", json!({"job": "x"})).await,
        Err(ToolError::WrongArguments(_))
    ));
    let job = executor.job(&bad_cursor_id).await.unwrap();
    job.wait(Duration::from_secs(10)).await.unwrap();
    job.remove().await.unwrap();
}

#[tokio::test]
async fn dropped_bytes_are_told_to_the_model() {
    let tb = testbed();
    let executor = common::executor(&tb).await;
    let agent = Agent::new(&executor);
    let id = format!("tools-capped-{}", token());
    // Any job is visible to the tools, also one started with the library's options.
    let job = executor
        .spawn_job(
            "head -c 3000 /dev/zero | tr '\\0' a",
            JobOptions::new().id(&id).spool_cap(1000),
        )
        .await
        .unwrap();
    job.wait(Duration::from_secs(10)).await.unwrap();
    let polled = agent
        .call("job_output", json!({"id": id, "max_bytes": 4096}))
        .await;
    assert_eq!(
        job_section(&polled, "stdout"),
        format!("{}\n", "a".repeat(1000))
    );
    let dropped = "[stdout: 2000 bytes dropped on the host: spool cap of 1000 bytes reached]";
    assert!(polled.contains(dropped), "{polled}");
    assert!(polled.contains("[end of output]"), "{polled}");
    assert_eq!(job_cursor(&polled), "stdout=1000,stderr=0");
    let status = agent.call("job_status", json!({"id": id})).await;
    assert!(status.contains(dropped), "{status}");
    job.remove().await.unwrap();
}
