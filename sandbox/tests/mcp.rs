//! `sandbox mcp`, driven as an MCP client drives it: the built binary spawned with the
//! host's policy as flags, JSON-RPC lines on its stdin and stdout (`initialize`,
//! `notifications/initialized`, `tools/list`, `tools/call`), and every effect checked from
//! here: files on the host, processes in `/proc`.
//!
//! Every case runs once per compiled-in backend that confines (its capability's
//! `confine_writes`); one whose preflight fails here is skipped with its reason printed, unless
//! `SANDBOX_TEST_REQUIRE` names it (a comma-separated list, or `all`), as CI does.

// Helpers of a test target panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::{available, backend_flags, workspace, BIN};

/// How long any one answer may take on a loaded 2-core machine.
const ANSWER: Duration = Duration::from_secs(60);

/// A client connected to one `sandbox mcp`.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    messages: mpsc::Receiver<Value>,
    /// Notifications received while waiting for responses, in order.
    notifications: Vec<Value>,
    next_id: u64,
}

impl Client {
    /// `sandbox mcp` for `backend` in `ws` with `extra` policy flags, initialized.
    fn start(backend: &str, ws: &Path, extra: &[&str]) -> Self {
        let mut args = vec!["--workspace".to_string(), ws.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_in(backend, ws, &args)
    }

    /// `sandbox mcp` for `backend`, run in `dir` with `args`, initialized.
    fn start_in(backend: &str, dir: &Path, args: &[String]) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.arg("mcp")
            .args(backend_flags(backend))
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("sandbox mcp starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the server wrote a non-JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut client = Self {
            stdin: child.stdin.take(),
            child,
            messages,
            notifications: Vec::new(),
            next_id: 1,
        };
        let init = client.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "sandbox-test", "version": "0"}
            }),
        );
        assert_eq!(
            init["result"]["serverInfo"]["name"], "sandbox",
            "initialize: {init}"
        );
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        // Structured results and `outputSchema` came with 2025-06-18.
        let version = init["result"]["protocolVersion"].as_str().unwrap_or("");
        assert!(version >= "2025-06-18", "negotiated {version}: {init}");
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, v: &Value) {
        self.send_line(&v.to_string());
    }

    /// The next message from the server.
    fn recv(&mut self) -> Value {
        self.messages
            .recv_timeout(ANSWER)
            .unwrap_or_else(|e| panic!("no message from the server within {ANSWER:?}: {e}"))
    }

    /// The response to the request with `id`; notifications on the way are kept.
    fn response(&mut self, id: u64) -> Value {
        loop {
            let m = self.recv();
            if m.get("id") == Some(&json!(id)) {
                return m;
            }
            assert!(
                m.get("method").is_some(),
                "a response to another request while waiting for {id}: {m}"
            );
            self.notifications.push(m);
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(id)
    }

    /// `tools/call` of `tool` with `arguments`; the call's result.
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {tool} {arguments} failed: {r}"))
    }

    /// Close our end (the client disconnects) and wait for the server to exit.
    fn disconnect(mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + ANSWER;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "sandbox mcp did not exit after its client disconnected"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A failed test must not leave the server behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn structured(result: &Value) -> &Value {
    &result["structuredContent"]
}

fn content_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {result}"))
        .to_string()
}

/// `run_command`'s declared `outputSchema`, as `tools/list` gives it.
fn output_schema(c: &mut Client) -> Value {
    let list = c.request("tools/list", json!({}));
    let tool = list["result"]["tools"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "run_command"))
        .unwrap_or_else(|| panic!("no run_command: {list}"))
        .clone();
    tool["outputSchema"].clone()
}

/// Panics unless `value` conforms to `schema`, naming where it does not.
fn validate(schema: &Value, value: &Value, at: &str) {
    if let Err(e) = conforms(schema, value, at) {
        panic!("{e}");
    }
}

/// Whether `value` conforms to `schema`: a validator of the JSON Schema keywords the
/// server's schemas use. Any other keyword is an error, so a schema cannot grow a rule
/// this check would silently pass.
fn conforms(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    macro_rules! ensure {
        ($cond:expr, $($msg:tt)*) => {
            if !$cond {
                return Err(format!($($msg)*));
            }
        };
    }
    let s = schema
        .as_object()
        .ok_or_else(|| format!("{at}: the schema is not an object: {schema}"))?;
    const CHECKED: [&str; 9] = [
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "oneOf",
        "minimum",
        "description",
    ];
    for key in s.keys() {
        ensure!(
            CHECKED.contains(&key.as_str()),
            "{at}: schema keyword `{key}` is not checked here"
        );
    }
    if let Some(ty) = s.get("type") {
        let types: Vec<&str> = match ty {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => return Err(format!("{at}: bad type {other}")),
        };
        let mut fits = false;
        for t in types {
            fits |= match t {
                "object" => value.is_object(),
                "array" => value.is_array(),
                "string" => value.is_string(),
                "boolean" => value.is_boolean(),
                "null" => value.is_null(),
                "number" => value.is_number(),
                "integer" => value.is_i64() || value.is_u64(),
                other => return Err(format!("{at}: unknown type {other}")),
            };
        }
        ensure!(fits, "{at}: {value} is not of type {ty}");
    }
    if let Some(allowed) = s.get("enum").and_then(Value::as_array) {
        ensure!(
            allowed.contains(value),
            "{at}: {value} is not one of {allowed:?}"
        );
    }
    if let (Some(min), Some(v)) = (s.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if v < min {
            return Err(format!("{at}: {value} < {min}"));
        }
    }
    if let (Some(items), Some(values)) = (s.get("items"), value.as_array()) {
        for (i, v) in values.iter().enumerate() {
            conforms(items, v, &format!("{at}[{i}]"))?;
        }
    }
    if let Value::Object(obj) = value {
        let props = s.get("properties").and_then(Value::as_object);
        for req in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let req = req.as_str().unwrap_or_default();
            ensure!(
                obj.contains_key(req),
                "{at}: `{req}` is missing from {value}"
            );
        }
        for (k, v) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(sub) => conforms(sub, v, &format!("{at}.{k}"))?,
                None => ensure!(
                    s.get("additionalProperties") != Some(&json!(false)),
                    "{at}: `{k}` is not in the schema"
                ),
            }
        }
    }
    if let Some(alternatives) = s.get("oneOf").and_then(Value::as_array) {
        let results: Vec<Result<(), String>> = alternatives
            .iter()
            .enumerate()
            .map(|(i, alt)| conforms(alt, value, &format!("{at}(oneOf {i})")))
            .collect();
        let fits = results.iter().filter(|r| r.is_ok()).count();
        ensure!(
            fits == 1,
            "{at}: {value} fits {fits} alternatives of oneOf: {results:?}"
        );
    }
    Ok(())
}

/// Pids of live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        // A zombie has an empty command line: it is gone but for its parent's wait.
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// A number no other process on this machine has in its command line.
fn unique_seconds() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("3000.{}{:09}", std::process::id(), nanos)
}

// ---------------------------------------------------------------------------------------

fn tools_are_listed_with_a_closed_schema(backend: &str) {
    let ws = workspace();
    let mut c = Client::start(backend, ws.path(), &[]);
    let list = c.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["run_command", "explain_policy"], "{list}");
    let schema = &tools[0]["inputSchema"];
    assert_eq!(schema["additionalProperties"], false, "{schema}");
    let mut props: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    props.sort();
    assert_eq!(
        props,
        [
            "argv",
            "command",
            "cwd",
            "secrets",
            "stdin",
            "timeout_seconds",
            "toolchains"
        ],
        "the only inputs: {schema}"
    );
    // The result's shape is declared: an object, whatever ran or did not.
    let out = &tools[0]["outputSchema"];
    assert_eq!(
        out["type"], "object",
        "run_command declares its output: {out}"
    );
    let ran = &out["oneOf"][0];
    for key in ["status", "exit_code", "stdout", "denials", "connections"] {
        assert!(
            ran["required"].as_array().unwrap().contains(&json!(key)),
            "{key}: {out}"
        );
    }
    let explained = c.call("explain_policy", json!({}));
    let text = content_text(&explained);
    assert!(text.contains(&format!("`{backend}` backend")), "{text}");
    assert!(
        text.contains(&ws.path().display().to_string()),
        "names the workspace: {text}"
    );
    assert!(text.contains("Network: none at all"), "{text}");
    assert!(c.disconnect().success());
}

fn a_call_runs_and_its_result_is_exact(backend: &str) {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let mut c = Client::start(backend, ws.path(), &[]);

    let r = c.call(
        "run_command",
        json!({"argv": ["sh", "-c", "printf out; printf err >&2; exit 3"]}),
    );
    let s = structured(&r);
    assert_eq!(s["status"], "exited", "{r}");
    assert_eq!(s["exit_code"], 3, "{r}");
    assert_eq!(s["exit_status"], 3, "{r}");
    assert_eq!(s["stdout"], "out", "{r}");
    assert_eq!(s["stderr"], "err", "{r}");
    assert_eq!(s["stdout_truncated"], false, "{r}");
    assert_eq!(
        r["isError"], false,
        "a command that ran is a result, not a broken tool: {r}"
    );
    let schema = output_schema(&mut c);
    validate(&schema, s, "structuredContent");
    assert_eq!(s["denials"]["entries"], json!([]), "{r}");
    assert_eq!(s["connections"]["entries"], json!([]), "{r}");
    let policy = s["policy"].as_str().unwrap();
    assert!(
        policy.starts_with(&format!("backend={backend} ")) && policy.contains("network=none"),
        "{policy}"
    );
    assert!(!policy.contains('\n'), "one line: {policy}");
    // What was enforced: the rendered lines, and beside them the same record as data.
    let notes = s["notes"].as_array().unwrap();
    let enforced = s["enforced"].as_array().unwrap();
    assert!(
        !enforced.is_empty(),
        "a confining backend records what it enforced: {r}"
    );
    assert_eq!(notes.len(), enforced.len(), "{r}");
    for e in enforced {
        assert!(e["mechanism"].is_string() && e["fact"].is_string(), "{e}");
    }
    let text = content_text(&r);
    assert!(
        text.starts_with("exit status 3\n") && text.contains(policy),
        "{text}"
    );

    // `command` runs in a shell inside; `cwd` is relative to the workspace; stdin is fed.
    let r = c.call(
        "run_command",
        json!({"command": "read line; echo \"got $line\"; pwd", "cwd": "sub", "stdin": "hello\n"}),
    );
    let s = structured(&r);
    assert_eq!(s["exit_code"], 0, "{r}");
    assert_eq!(r["isError"], false, "{r}");
    validate(&schema, s, "structuredContent");
    let out = s["stdout"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert_eq!(lines[0], "got hello");
    assert!(lines[1].ends_with("/sub"), "{out:?}");

    // Output over the host's cap is cut, and says so.
    drop(c);
    let mut c = Client::start(backend, ws.path(), &["--max-output", "1000"]);
    let r = c.call(
        "run_command",
        json!({"command": "yes abcdefgh | head -c 100000"}),
    );
    let s = structured(&r);
    assert_eq!(s["stdout_truncated"], true, "{r}");
    validate(&output_schema(&mut c), s, "structuredContent");
    assert_eq!(s["stdout_bytes"], 100_000, "{r}");
    assert!(s["stdout"].as_str().unwrap().len() < 2000, "{r}");
    assert!(content_text(&r).contains("truncated"), "{r}");
    assert!(c.disconnect().success());
}

fn a_write_outside_the_workspace_fails_and_the_file_is_absent(backend: &str) {
    let ws = workspace();
    // World-writable, so that only the sandbox stands between an unprivileged test run
    // and the file.
    let outside = tempfile::tempdir().unwrap();
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = outside.path().join("escaped");
    let mut c = Client::start(backend, ws.path(), &[]);
    let r = c.call(
        "run_command",
        json!({"command": format!("echo x > {}", target.display())}),
    );
    let s = structured(&r);
    assert_eq!(s["status"], "exited", "{r}");
    assert_ne!(s["exit_code"], 0, "{r}");
    assert_eq!(r["isError"], false, "the command ran: {r}");
    assert!(!target.exists(), "the command wrote outside the workspace");
    // The same command inside the workspace works: the refusal above was the sandbox's.
    let r = c.call("run_command", json!({"command": "echo x > inside"}));
    assert_eq!(structured(&r)["exit_code"], 0, "{r}");
    assert_eq!(std::fs::read(ws.path().join("inside")).unwrap(), b"x\n");
    assert!(c.disconnect().success());
}

fn an_attempt_to_widen_the_policy_is_refused(backend: &str) {
    let ws = workspace();
    let mut c = Client::start(backend, ws.path(), &["--timeout", "2"]);
    let schema = output_schema(&mut c);
    let marker = ws.path().join("marker");
    let touch = json!(["touch", marker.to_str().unwrap()]);
    for (key, value) in [
        ("network", json!("full")),
        ("read", json!(["/root"])),
        ("write", json!(["/"])),
        ("paths", json!(["/"])),
        ("workspace", json!("/")),
        ("lane", json!("trusted")),
        // The model never picks the backend, whichever it names.
        ("backend", json!(sandbox::registry::names().next().unwrap())),
        ("env", json!({"SECRET": "x"})),
        ("memory_mb", json!(100_000)),
    ] {
        let r = c.call("run_command", json!({"argv": touch, key: value}));
        assert_eq!(r["isError"], true, "{key}: {r}");
        let s = structured(&r);
        assert_eq!(s["status"], "refused", "{key}: {r}");
        assert_eq!(s["error"], "policy_refused", "{key}: {r}");
        validate(&schema, s, "structuredContent");
        let text = content_text(&r);
        assert!(
            text.contains(&format!("`{key}`")) && text.contains("explain_policy"),
            "{key}: {text}"
        );
        assert!(!marker.exists(), "{key}: the command ran");
    }
    // A cwd that leads out of the workspace, or an absolute one, runs nothing.
    for cwd in ["..", "/", "../.."] {
        let r = c.call("run_command", json!({"argv": touch, "cwd": cwd}));
        assert_eq!(structured(&r)["status"], "refused", "cwd {cwd}: {r}");
        assert_eq!(structured(&r)["error"], "invalid_input", "cwd {cwd}: {r}");
        assert!(content_text(&r).contains("`cwd`"), "cwd {cwd}: {r}");
        assert!(!marker.exists(), "cwd {cwd}: the command ran");
    }
    // A longer timeout than the host's does not lengthen it.
    let started = Instant::now();
    let r = c.call(
        "run_command",
        json!({"argv": ["sleep", "30"], "timeout_seconds": 1000}),
    );
    assert_eq!(structured(&r)["status"], "timed_out", "{r}");
    assert_eq!(r["isError"], false, "it ran until the timeout: {r}");
    validate(&schema, structured(&r), "structuredContent");
    assert!(started.elapsed() < Duration::from_secs(25), "{r}");
    // A shorter one applies.
    let r = c.call(
        "run_command",
        json!({"argv": ["sleep", "30"], "timeout_seconds": 0.5}),
    );
    assert_eq!(structured(&r)["status"], "timed_out", "{r}");
    for bad in [json!(0), json!(-1), json!("soon")] {
        let r = c.call(
            "run_command",
            json!({"argv": touch, "timeout_seconds": bad}),
        );
        assert_eq!(structured(&r)["error"], "invalid_input", "{bad}: {r}");
        assert!(!marker.exists());
    }
    // The control: the same call without the widening key runs.
    let r = c.call("run_command", json!({"argv": touch}));
    assert_eq!(structured(&r)["exit_code"], 0, "{r}");
    assert!(marker.exists());
    assert!(c.disconnect().success());
}

/// A call may choose among the host's toolchains and secrets, never add one: a toolchain
/// left out is unreadable for that call, one the host did not grant (or a secret it did
/// not configure) is refused and nothing runs.
fn a_call_chooses_among_the_hosts_toolchains_and_secrets(backend: &str) {
    let ws = workspace();
    let homes = tempfile::tempdir().unwrap();
    std::fs::set_permissions(homes.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = |n: &str| {
        let d = homes.path().join(n);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(d.join("f"), format!("{n}\n")).unwrap();
        d.display().to_string()
    };
    let (a, b, c) = (dir("a"), dir("b"), dir("c"));
    let mut client = Client::start(backend, ws.path(), &["--toolchain", &a, "--toolchain", &b]);
    let listed = client.request("tools/list", json!({}));
    let text = content_text(&client.call("explain_policy", json!({})));
    assert!(
        text.contains("Toolchains") && text.contains(&a),
        "{text} {listed}"
    );
    let read_both = format!("cat {a}/f; cat {b}/f; true");
    let r = client.call("run_command", json!({"command": read_both}));
    assert_eq!(structured(&r)["stdout"], "a\nb\n", "both by default: {r}");
    let r = client.call(
        "run_command",
        json!({"command": read_both, "toolchains": [a]}),
    );
    assert_eq!(structured(&r)["stdout"], "a\n", "only the chosen one: {r}");
    let marker = ws.path().join("marker");
    let touch = format!("touch {}", marker.display());
    for (key, value, named) in [
        ("toolchains", json!([c]), c.as_str()),
        ("secrets", json!(["NOT_CONFIGURED"]), "NOT_CONFIGURED"),
    ] {
        let r = client.call("run_command", json!({"command": touch, key: value}));
        assert_eq!(structured(&r)["status"], "refused", "{key}: {r}");
        assert_eq!(structured(&r)["error"], "policy_refused", "{key}: {r}");
        assert!(content_text(&r).contains(named), "{key}: {r}");
        assert!(!marker.exists(), "{key}: the command ran");
    }
    // A value is not an input: a secret is a name.
    let r = client.call(
        "run_command",
        json!({"command": touch, "secrets": [{"name": "X", "value": "hunter2"}]}),
    );
    assert_eq!(structured(&r)["error"], "invalid_input", "{r}");
    assert!(!marker.exists());
    assert!(client.disconnect().success());
}

fn the_policy_comes_from_the_config_file_and_the_flags(backend: &str) {
    let project = workspace();
    std::fs::create_dir(project.path().join("ws")).unwrap();
    let data = project.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("file"), "from data\n").unwrap();
    let config = project.path().join("sandbox.toml");
    std::fs::write(
        &config,
        "workspace = \"ws\"\nread = [\"data\"]\ntimeout = 1\nnetwork = \"loopback\"\n",
    )
    .unwrap();
    let elsewhere = workspace();
    let mut c = Client::start_in(
        backend,
        elsewhere.path(),
        &[
            "--config".to_string(),
            config.display().to_string(),
            "--network".to_string(),
            "none".to_string(),
        ],
    );
    let text = content_text(&c.call("explain_policy", json!({})));
    // The file's relative paths are taken against its directory; the flag overrides it.
    assert!(
        text.contains(&format!("{}", project.path().join("ws").display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("Also readable: {}", data.display())),
        "{text}"
    );
    assert!(text.contains("Timeout: 1 s"), "{text}");
    assert!(text.contains("Network: none at all"), "{text}");
    let r = c.call(
        "run_command",
        json!({"argv": ["cat", data.join("file").to_str().unwrap()]}),
    );
    assert_eq!(structured(&r)["stdout"], "from data\n", "{r}");
    let r = c.call("run_command", json!({"command": "touch made; sleep 30"}));
    assert_eq!(structured(&r)["status"], "timed_out", "{r}");
    assert!(
        project.path().join("ws/made").exists(),
        "ran in the file's workspace"
    );
    assert!(c.disconnect().success());
}

fn calls_past_max_concurrent_wait_for_a_slot(backend: &str) {
    let ws = workspace();
    let mut c = Client::start(backend, ws.path(), &["--max-concurrent", "1"]);
    let first = c.next_id;
    let second = first + 1;
    c.next_id += 2;
    // The first holds the slot until the host makes `go`; it says it started with a file,
    // which the host sees whatever kind of process runs it (a gVisor sandbox's are not in
    // the host's /proc).
    let first_command = "touch started; while [ ! -e go ]; do sleep 0.05; done; echo go";
    for (id, command) in [(first, first_command), (second, "touch second")] {
        c.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"command": command}}
        }));
        // The first holds the slot before the second is even sent.
        let deadline = Instant::now() + ANSWER;
        while id == first && !ws.path().join("started").exists() {
            assert!(Instant::now() < deadline, "the first command did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // The first waits for `go`; the second waits for its slot meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !ws.path().join("second").exists(),
        "the second call ran while the first held the only slot"
    );
    std::fs::write(ws.path().join("go"), "").unwrap();
    let r = c.response(first);
    assert_eq!(r["result"]["structuredContent"]["stdout"], "go\n", "{r}");
    let r = c.response(second);
    assert_eq!(r["result"]["structuredContent"]["exit_code"], 0, "{r}");
    assert!(ws.path().join("second").exists());
    assert!(c.disconnect().success());
}

/// How many heartbeat files (`beat-*`) the commands have made in `ws` so far.
fn beats(ws: &Path) -> usize {
    std::fs::read_dir(ws)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("beat-"))
        .count()
}

fn a_disconnect_mid_command_leaves_no_process_behind(backend: &str) {
    let ws = workspace();
    let marker = unique_seconds();
    let mut c = Client::start(backend, ws.path(), &["--max-concurrent", "2"]);
    // Two calls at once, each a shell with a child and a double-forked grandchild in the
    // background. Each of those makes a new file every tenth of a second: the host judges
    // from the workspace that they are gone, which holds for processes the host's /proc
    // cannot see (a gVisor sandbox's); where it can, /proc is checked too.
    for call in 0..2 {
        let id = c.next_id;
        c.next_id += 1;
        let beat = |who: &str| {
            format!("i=0; while :; do i=$((i+1)); : > beat-{call}{who}-$i; sleep 0.1; done")
        };
        c.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "run_command", "arguments": {
                "command": format!(
                    "(sh -c '{}' &) ; sh -c '{}' & sleep {marker}; wait",
                    beat("a"),
                    beat("b")
                )
            }}
        }));
    }
    let deadline = Instant::now() + ANSWER;
    let started = |ws: &Path| {
        (0..2).all(|call| {
            ["a", "b"]
                .iter()
                .all(|who| ws.join(format!("beat-{call}{who}-3")).exists())
        })
    };
    while !started(ws.path()) {
        assert!(
            Instant::now() < deadline,
            "the commands did not start: {} beats",
            beats(ws.path())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The measure moves while they live (so its standing still below means something).
    let alive = beats(ws.path());
    while beats(ws.path()) <= alive {
        assert!(
            Instant::now() < deadline,
            "the heartbeats stopped by themselves"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = c.disconnect();
    assert!(status.success(), "{status:?}");
    let after = beats(ws.path());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        beats(ws.path()),
        after,
        "something of the commands still runs after the client's disconnect"
    );
    let left = processes_with(&marker);
    assert!(
        left.is_empty(),
        "processes outlived the client's disconnect: {left:?}"
    );
}

fn malformed_json_rpc_gets_an_error_not_a_crash(backend: &str) {
    let ws = workspace();
    let mut c = Client::start(backend, ws.path(), &[]);
    // Well-formed JSON that is not a JSON-RPC message: Invalid Request.
    c.send_line(r#"{"jsonrpc":"2.0","id":41,"method":42}"#);
    let m = c.recv();
    assert_eq!(m["error"]["code"], -32600, "{m}");
    // Bytes that are not JSON at all are dropped (rmcp does as the other official SDKs
    // do: there is no id to answer); the server lives on.
    c.send_line("{this is not json");
    let m = c.request("tools/list", json!({}));
    assert!(m["result"]["tools"].is_array(), "{m}");
    // An unknown method, an unknown tool.
    let m = c.request("no/such/method", json!({}));
    assert_eq!(m["error"]["code"], -32601, "{m}");
    let m = c.request(
        "tools/call",
        json!({"name": "rm_rf", "arguments": {"argv": ["true"]}}),
    );
    assert_eq!(m["error"]["code"], -32602, "{m}");
    // Arguments of the wrong shape: a tool error the model can read.
    for args in [
        json!({"argv": "true"}),
        json!({"argv": []}),
        json!({}),
        json!({"argv": ["true"], "command": "true"}),
    ] {
        let r = c.call("run_command", args.clone());
        assert_eq!(r["isError"], true, "{args}: {r}");
        assert_eq!(structured(&r)["error"], "invalid_input", "{args}: {r}");
    }
    let r = c.call("run_command", json!({"argv": ["true"]}));
    assert_eq!(structured(&r)["exit_code"], 0, "still serving: {r}");
    assert!(c.disconnect().success());
}

fn output_streams_as_progress_where_a_token_was_sent(backend: &str) {
    let ws = workspace();
    let mut c = Client::start(backend, ws.path(), &[]);
    let id = c.next_id;
    c.next_id += 1;
    c.send(&json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "run_command",
            "arguments": {"command": "echo first; sleep 0.3; echo second >&2"},
            "_meta": {"progressToken": "tok-1"}
        }
    }));
    let r = c.response(id);
    assert_eq!(r["result"]["structuredContent"]["exit_code"], 0, "{r}");
    let progress: Vec<&Value> = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(
        progress
            .iter()
            .all(|n| n["params"]["progressToken"] == "tok-1"),
        "{progress:?}"
    );
    let streamed: String = progress
        .iter()
        .filter_map(|n| n["params"]["message"].as_str())
        .collect();
    assert!(
        streamed.contains("[stdout] first") && streamed.contains("[stderr] second"),
        "before the result: {streamed:?}"
    );
    // Without a token, nothing is streamed.
    c.notifications.clear();
    let r = c.call("run_command", json!({"command": "echo quiet"}));
    assert_eq!(structured(&r)["stdout"], "quiet\n");
    assert!(c.notifications.is_empty(), "{:?}", c.notifications);
    assert!(c.disconnect().success());
}

/// What the sandbox refused and the proxy's connection record are in the structured
/// result, as the declared schema says: a system call the shared table denies (`unshare
/// -U`), on a backend that reports those, and through `--allow-host`, one connection the
/// proxy allowed and one it denied, on a backend that runs the proxy and has curl (the
/// host's programs).
fn the_result_carries_denials_and_connections(backend: &str) {
    let report = support::report(backend);
    let cap = &report["capability"];
    let ws = workspace();
    let mut c = Client::start(backend, ws.path(), &[]);
    let schema = output_schema(&mut c);
    let r = c.call(
        "run_command",
        json!({"command": "unshare -U true 2>/dev/null; echo rc=$?"}),
    );
    let s = structured(&r);
    validate(&schema, s, "structuredContent");
    assert_eq!(r["isError"], false, "{r}");
    let entries = s["denials"]["entries"].as_array().unwrap();
    if cap["reports_denials"]["syscall"] == true {
        assert_eq!(s["stdout"], "rc=1\n", "{r}");
        assert_eq!(
            entries,
            &[json!({"kind": "syscall", "target": "unshare", "mechanism": "seccomp", "count": 1})],
            "{r}"
        );
        assert!(
            content_text(&r).contains("denied 1 operation: unshare (seccomp)"),
            "{r}"
        );
    } else {
        assert!(
            entries.is_empty(),
            "a backend that does not claim it reports none: {r}"
        );
    }
    assert!(c.disconnect().success());

    if cap["network_proxy"]["kind"] != "exact" || report["needs_image"] == true {
        eprintln!(
            "SKIPPED (connections): backend {backend} does not run the proxy exactly, or runs \
             an image without curl"
        );
        return;
    }
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in server.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nhello-mcp",
            );
        }
    });
    let allow = format!("127.0.0.0/8:{port}");
    let mut c = Client::start(backend, ws.path(), &["--allow-host", &allow]);
    // `--noproxy ''`: the sandbox's NO_PROXY keeps 127.0.0.1 direct; here the loopback
    // address stands in for a remote host.
    let r = c.call(
        "run_command",
        json!({"command": format!(
            "curl -sS --noproxy '' http://127.0.0.1:{port}/; \
             curl -sS --noproxy '' http://127.0.0.1:1/ >/dev/null 2>&1; exit 0"
        )}),
    );
    let s = structured(&r);
    validate(&schema, s, "structuredContent");
    assert_eq!(s["stdout"], "hello-mcp", "{r}");
    let conns = s["connections"]["entries"].as_array().unwrap();
    assert_eq!(conns.len(), 2, "{r}");
    assert_eq!(conns[0]["decision"], "allowed", "{r}");
    assert_eq!(conns[0]["rule"], allow.as_str(), "{r}");
    assert_eq!(conns[1]["decision"], "denied", "{r}");
    assert_eq!(conns[1]["port"], 1, "{r}");
    assert!(
        content_text(&r).contains("denied connect to 127.0.0.1:1 (not in the allowlist)"),
        "{r}"
    );
    assert!(c.disconnect().success());
}

/// The validator above can fail: a wrong type, a missing key, an unknown key, a value
/// outside an enum, and a value that fits two alternatives are each refused.
#[test]
fn the_schema_check_refuses_what_does_not_conform() {
    let schema = json!({
        "type": "object",
        "oneOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"enum": ["x"]}},
                "required": ["a"],
                "additionalProperties": false
            },
            {"type": "object", "properties": {"c": {"type": "string"}}, "required": ["c"]}
        ]
    });
    assert!(conforms(&schema, &json!({"a": 1, "b": "x"}), "").is_ok());
    for bad in [
        json!({"a": "1"}),
        json!({"a": -1}),
        json!({"b": "x"}),
        json!({"a": 1, "z": 0}),
        json!({"a": 1, "b": "y"}),
        json!([1]),
    ] {
        assert!(conforms(&schema, &bad, "").is_err(), "{bad}");
    }
    let ambiguous = json!({"oneOf": [{"type": "integer"}, {"type": "number"}]});
    assert!(conforms(&ambiguous, &json!(1.5), "").is_ok());
    assert!(conforms(&ambiguous, &json!(1), "").is_err(), "fits both");
    assert!(conforms(&json!({"const": 1}), &json!(1), "").is_err());
}

#[test]
fn a_policy_nothing_enforces_is_refused_before_serving() {
    let ws = workspace();
    let o = Command::new(BIN)
        .args(["mcp", "--workspace"])
        .arg(ws.path().join("missing"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = support::text(&o.stderr);
    assert!(err.contains("--workspace"), "{err}");
    assert!(o.stdout.is_empty(), "nothing served: {o:?}");
    let o = Command::new(BIN)
        .args(["mcp", "--max-concurrent", "0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{o:?}");
}

macro_rules! backend_cases {
    ($module:ident, $feature:literal) => {
        #[cfg(feature = $feature)]
        mod $module {
            macro_rules! case {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        if super::available($feature) && super::support::confines($feature) {
                            super::$name($feature);
                        }
                    }
                };
            }
            case!(tools_are_listed_with_a_closed_schema);
            case!(a_call_runs_and_its_result_is_exact);
            case!(a_write_outside_the_workspace_fails_and_the_file_is_absent);
            case!(a_call_chooses_among_the_hosts_toolchains_and_secrets);
            case!(an_attempt_to_widen_the_policy_is_refused);
            case!(a_disconnect_mid_command_leaves_no_process_behind);
            case!(the_policy_comes_from_the_config_file_and_the_flags);
            case!(calls_past_max_concurrent_wait_for_a_slot);
            case!(malformed_json_rpc_gets_an_error_not_a_crash);
            case!(output_streams_as_progress_where_a_token_was_sent);
            case!(the_result_carries_denials_and_connections);
        }
    };
}

// Every backend; one that confines nothing (its capability says so) is skipped with that
// reason.
sandbox::with_backend_list!(every_backend);
