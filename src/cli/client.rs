//! The client commands: they talk to a running orchestrator's HTTP API.
//!
//! Exit codes: 0 success; 1 the task ended other than completed (`--wait`)
//! or the audit chain is broken; 2 the request was refused (4xx); 3 the
//! orchestrator is unreachable or failed (5xx); 4 a `--wait` ran out (the
//! task goes on).

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

pub(super) use super::output::Failure;
use super::output::{ago, encode, list_table, outln, print_task, s, summary};

/// Where the orchestrator is, and how to print. Each of the address and
/// the credentials comes from its flag, else its variable, else the
/// chosen profile of the client file ([`super::profile`]), else the
/// default: `http://127.0.0.1:8080`, and the administrator key `run`
/// made in `./data/keys/`.
#[derive(Args, Clone)]
pub struct ClientArgs {
    /// The orchestrator's HTTP address [default: http://127.0.0.1:8080].
    #[arg(long, env = "ORCH_SERVER", global = true)]
    server: Option<String>,
    /// The API key to call with (`orch_…`; `orchestrator run` writes one to
    /// <data_dir>/keys/admin.api-key when none is configured).
    #[arg(long, env = "ORCH_API_KEY", hide_env_values = true, global = true)]
    api_key: Option<String>,
    /// A bearer JWT from the configured issuer, instead of an API key.
    #[arg(
        long,
        env = "ORCH_BEARER_TOKEN",
        hide_env_values = true,
        global = true,
        conflicts_with = "api_key"
    )]
    bearer_token: Option<String>,
    /// The profile of the client file to call with [default: `default`].
    #[arg(long, env = "ORCH_PROFILE", global = true)]
    profile: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum TasksCommand {
    /// Submit one task.
    #[command(after_help = "Examples:
  orchestrator tasks submit --to greeter --action greet --params '{\"name\": \"Ada\"}' --wait
  orchestrator tasks submit --to outlook-agent --action compose:draft --params '{\"subject\": \"Hi\", \"body\": \"...\"}' --idempotency-key draft-1")]
    Submit {
        /// The target agent.
        #[arg(long)]
        to: String,
        /// The skill to run.
        #[arg(long)]
        action: String,
        /// Parameters, as a JSON object.
        #[arg(long, default_value = "{}")]
        params: String,
        /// Makes a retried submission the same submission.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// high, normal or low.
        #[arg(long)]
        priority: Option<String>,
        /// Wait for the task to finish, showing progress.
        #[arg(long)]
        wait: bool,
        /// Longest wait with --wait.
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Show one task with its history and its whole result.
    #[command(after_help = "Examples:
  orchestrator tasks get 01a21c14-0704-74c1-b2b5-54c6f9530ba1
  orchestrator tasks get 01a21c14-0704-74c1-b2b5-54c6f9530ba1 --wait --timeout 1m")]
    Get {
        /// The task id.
        id: String,
        /// Wait for the task to end, showing its state as it moves.
        #[arg(long)]
        wait: bool,
        /// Longest wait with --wait.
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// List tasks, newest first.
    #[command(after_help = "Examples:
  orchestrator tasks list
  orchestrator tasks list --agent greeter --since 15m
  orchestrator tasks list --state failed --action greet
  orchestrator tasks list --run 01a21c14-0704-74c1-b2b5-54c6f9530ba1")]
    List {
        /// Only this agent's tasks.
        #[arg(long)]
        agent: Option<String>,
        /// Only tasks of this skill.
        #[arg(long)]
        action: Option<String>,
        /// Only the tasks of this workflow run's steps.
        #[arg(long)]
        run: Option<String>,
        /// Only tasks this trigger started.
        #[arg(long)]
        trigger_id: Option<String>,
        /// Only this request's tasks.
        #[arg(long)]
        correlation_id: Option<String>,
        /// Only tasks in this state.
        #[arg(long)]
        state: Option<String>,
        /// Only tasks created since: a duration back (`15m`, `2h`) or an
        /// RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Oldest first (then only --state and --correlation-id filter).
        #[arg(long, conflicts_with_all = ["agent", "action", "run", "trigger_id", "since"])]
        oldest: bool,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue after this task id (the `more:` line of a page).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Cancel a task (idempotent).
    #[command(after_help = "Examples:
  orchestrator tasks cancel 01a21c14-0704-74c1-b2b5-54c6f9530ba1")]
    Cancel {
        /// The task id.
        id: String,
    },
}

#[derive(Subcommand)]
pub enum AuditCommand {
    /// List audit records.
    #[command(after_help = "Examples:
  orchestrator audit list --task-id 01a21c14-0704-74c1-b2b5-54c6f9530ba1
  orchestrator audit list --limit 20")]
    List {
        /// Only this task's records.
        #[arg(long)]
        task_id: Option<String>,
        /// Only this request's records.
        #[arg(long)]
        correlation_id: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this sequence number.
        #[arg(long)]
        cursor: Option<u64>,
    },
    /// Check the hash chain.
    #[command(after_help = "Examples:
  orchestrator audit verify")]
    Verify,
}

#[derive(Subcommand)]
pub enum DlqCommand {
    /// List dead letters.
    #[command(after_help = "Examples:
  orchestrator dlq list")]
    List {
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this DLQ sequence.
        #[arg(long)]
        cursor: Option<u64>,
    },
    /// Run a dead-lettered task again, as a new task.
    #[command(after_help = "Examples:
  orchestrator dlq replay 01a21c14-0704-74c1-b2b5-54c6f9530ba1")]
    Replay {
        /// The dead-lettered task's id.
        task_id: String,
    },
}

pub(super) struct Api {
    base: String,
    http: reqwest::Client,
    credential: Option<String>,
    warned: std::sync::atomic::AtomicBool,
}

impl Api {
    pub(super) fn new(args: &ClientArgs) -> Result<Api, Failure> {
        let chosen = super::profile::resolve(
            args.server.clone(),
            args.api_key.clone().or(args.bearer_token.clone()),
            args.profile.as_deref(),
        )
        .map_err(|e| Failure::new(2, "invalid_profile", e))?;
        Ok(Api {
            base: server_url(&chosen.server)?,
            http: reqwest::Client::new(),
            credential: chosen.credential,
            warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// GETs `path`; a success is exit code 0.
    pub(super) async fn get(&self, path: &str) -> Result<(Value, u8), Failure> {
        self.call(reqwest::Method::GET, path, None)
            .await
            .map(|v| (v, 0))
    }

    pub(super) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(credential) = &self.credential {
            req = req.bearer_auth(credential);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.map_err(|e| {
            Failure::new(
                3,
                "unreachable",
                format!("cannot reach the orchestrator at {}: {e}", self.base),
            )
        })?;
        let open = resp.headers().get(orchestrator::http::AUTH_HEADER);
        if open.is_some_and(|v| v == "none")
            && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            eprintln!(
                "warning: {} runs without authentication (api_auth.mode = none)",
                self.base
            );
        }
        let status = resp.status();
        let value: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(value);
        }
        let mut error = match value.get("error") {
            Some(Value::Object(e)) => Value::Object(e.clone()),
            _ => {
                json!({"code": "http_error", "message": format!("the orchestrator answered {status}")})
            }
        };
        if status == reqwest::StatusCode::UNAUTHORIZED {
            error["hint"] =
                "pass --api-key (ORCH_API_KEY) or --bearer-token (ORCH_BEARER_TOKEN)".into();
        }
        Err(Failure {
            exit: if status.is_client_error() { 2 } else { 3 },
            error,
        })
    }
}

/// The orchestrator's base URL from `--server`: `http://` is assumed when
/// no scheme is given (`127.0.0.1:8080`).
fn server_url(server: &str) -> Result<String, Failure> {
    let server = server.trim().trim_end_matches('/');
    let url = if server.contains("://") {
        server.to_string()
    } else {
        format!("http://{server}")
    };
    match reqwest::Url::parse(&url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {
            Ok(url)
        }
        _ => Err(Failure::new(
            2,
            "invalid_server",
            format!(
                "--server `{server}` is not an http:// or https:// address (such as http://127.0.0.1:8080)"
            ),
        )),
    }
}

/// `base?limit=N&name=value…` for the parameters that are set.
pub(super) fn list_path(base: &str, limit: usize, params: &[(&str, Option<String>)]) -> String {
    let mut query = vec![format!("limit={limit}")];
    for (name, value) in params {
        if let Some(v) = value {
            query.push(format!("{name}={}", encode(v)));
        }
    }
    format!("{base}?{}", query.join("&"))
}

pub(super) fn finish(
    args: &ClientArgs,
    result: Result<(Value, u8), Failure>,
    human: impl FnOnce(&Value),
) -> ExitCode {
    match result {
        Ok((value, code)) => {
            if args.json {
                outln!("{value}");
            } else {
                human(&value);
            }
            ExitCode::from(code)
        }
        Err(f) => f.report(args.json),
    }
}

pub async fn tasks(args: &ClientArgs, command: TasksCommand) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    match command {
        TasksCommand::Submit {
            to,
            action,
            params,
            idempotency_key,
            priority,
            wait,
            timeout,
        } => {
            let result = submit(
                &api,
                args,
                to,
                action,
                &params,
                idempotency_key,
                priority,
                wait,
                timeout,
            )
            .await;
            finish(args, result, print_task)
        }
        TasksCommand::Get { id, wait, timeout } => {
            let result = if wait {
                wait_for(&api, args, &id, timeout).await
            } else {
                api.get(&format!("/v1/tasks/{}", encode(&id))).await
            };
            finish(args, result, print_task)
        }
        TasksCommand::List {
            agent,
            action,
            run,
            trigger_id,
            correlation_id,
            state,
            since,
            oldest,
            limit,
            cursor,
        } => {
            let order = (!oldest).then(|| "newest".to_string());
            let path = list_path(
                "/v1/tasks",
                limit,
                &[
                    ("order", order),
                    ("agent", agent),
                    ("action", action),
                    ("run_id", run),
                    ("trigger_id", trigger_id),
                    ("correlation_id", correlation_id),
                    ("state", state),
                    ("since", since),
                    ("cursor", cursor),
                ],
            );
            let result = api.get(&path).await;
            finish(args, result, |page| {
                list_table(
                    page,
                    "tasks",
                    &[
                        "TASK", "AGENT", "ACTION", "STATE", "ATTEMPT", "CREATED", "UPDATED",
                    ],
                    |t| {
                        vec![
                            s(&t["task_id"]),
                            s(&t["agent"]),
                            s(&t["action"]),
                            s(&t["state"]),
                            s(&t["attempt"]),
                            ago(&t["created_at"]),
                            ago(&t["updated_at"]),
                        ]
                    },
                )
            })
        }
        TasksCommand::Cancel { id } => {
            let result = api
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/tasks/{id}/cancel"),
                    None,
                )
                .await
                .map(|v| (v, 0));
            finish(args, result, print_task)
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn submit(
    api: &Api,
    args: &ClientArgs,
    to: String,
    action: String,
    params: &str,
    idempotency_key: Option<String>,
    priority: Option<String>,
    wait: bool,
    timeout: Duration,
) -> Result<(Value, u8), Failure> {
    let params: Value = serde_json::from_str(params)
        .map_err(|e| Failure::new(2, "invalid_json", format!("--params is not JSON: {e}")))?;
    let mut body = json!({"to": to, "action": action, "params": params});
    if let Some(k) = idempotency_key {
        body["idempotency_key"] = k.into();
    }
    if let Some(p) = priority {
        body["priority"] = p.into();
    }
    let task = api
        .call(reqwest::Method::POST, "/v1/tasks", Some(body))
        .await?;
    if !wait {
        return Ok((task, 0));
    }
    let id = s(&task["task_id"]);
    wait_for(api, args, &id, timeout).await
}

/// Follows a task until it ends with long polls (half a second each, so
/// the spinner on a terminal moves), showing its state on stderr as it
/// goes; a pipe gets one line per state change.
pub(super) async fn wait_for(
    api: &Api,
    args: &ClientArgs,
    id: &str,
    timeout: Duration,
) -> Result<(Value, u8), Failure> {
    let started = Instant::now();
    let spinner = ['|', '/', '-', '\\'];
    let mut last_state = String::new();
    let spin = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    for tick in 0usize.. {
        let task = api
            .call(
                reqwest::Method::GET,
                &format!("/v1/tasks/{id}?wait=500ms"),
                None,
            )
            .await?;
        let state = s(&task["state"]);
        if matches!(
            state.as_str(),
            "completed" | "failed" | "canceled" | "rejected"
        ) {
            if spin {
                eprint!("\r\x1b[2K");
            }
            let code = if state == "completed" { 0 } else { 1 };
            return Ok((task, code));
        }
        if started.elapsed() > timeout {
            if spin {
                eprint!("\r\x1b[2K");
            }
            return Err(Failure::new(
                4,
                "wait_timeout",
                format!(
                    "task {id} is still {state} after {}; it goes on (orchestrator tasks get {id} --wait)",
                    humantime::format_duration(timeout)
                ),
            ));
        }
        if spin {
            eprint!(
                "\r\x1b[2K{} task {id}: {state} ({:.0?})",
                spinner[tick % 4],
                started.elapsed()
            );
            let _ = std::io::stderr().flush();
        } else if state != last_state {
            eprintln!("task {id}: {state}");
        }
        last_state = state;
    }
    unreachable!("the loop returns")
}

pub async fn audit(args: &ClientArgs, command: AuditCommand) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    match command {
        AuditCommand::List {
            task_id,
            correlation_id,
            limit,
            cursor,
        } => {
            let path = list_path(
                "/v1/audit",
                limit,
                &[
                    ("task_id", task_id),
                    ("correlation_id", correlation_id),
                    ("cursor", cursor.map(|c| c.to_string())),
                ],
            );
            let result = api.get(&path).await;
            finish(args, result, |page| {
                list_table(
                    page,
                    "records",
                    &["SEQ", "AT", "ACTOR", "KIND", "TASK", "DETAIL", "TRACE"],
                    |r| {
                        vec![
                            s(&r["seq"]),
                            ago(&r["at"]),
                            s(&r["actor"]),
                            s(&r["kind"]),
                            s(&r["task_id"]),
                            summary(&r["detail"]),
                            s(&r["trace_url"]),
                        ]
                    },
                )
            })
        }
        AuditCommand::Verify => {
            let result = api
                .call(reqwest::Method::GET, "/v1/audit/verify", None)
                .await
                .map(|v| {
                    let code = if v["ok"] == true { 0 } else { 1 };
                    (v, code)
                });
            finish(args, result, |v| {
                if v["ok"] == true {
                    outln!("audit chain ok: {} records", s(&v["records"]));
                } else {
                    outln!(
                        "audit chain BROKEN at record {}: {}",
                        s(&v["first_bad_seq"]),
                        s(&v["problem"])
                    );
                }
            })
        }
    }
}

pub async fn dlq(args: &ClientArgs, command: DlqCommand) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    match command {
        DlqCommand::List { limit, cursor } => {
            let path = list_path(
                "/v1/dlq",
                limit,
                &[("cursor", cursor.map(|c| c.to_string()))],
            );
            let result = api.get(&path).await;
            finish(args, result, |v| {
                list_table(
                    v,
                    "dead_letters",
                    &["SEQ", "AGENT", "TASK", "CODE", "REASON"],
                    |d| {
                        vec![
                            s(&d["seq"]),
                            s(&d["agent"]),
                            s(&d["task_id"]),
                            s(&d["code"]),
                            s(&d["reason"]),
                        ]
                    },
                )
            })
        }
        DlqCommand::Replay { task_id } => {
            let path = format!("/v1/dlq/{}/replay", encode(&task_id));
            let result = api
                .call(reqwest::Method::POST, &path, None)
                .await
                .map(|v| (v, 0));
            finish(args, result, print_task)
        }
    }
}
