//! `orchestrator bench --llm`: what the orchestration of LLM agents costs
//! (`docs/llm.md`), in the same run as the plain task path. The deployed
//! path again, with an agent that is a prompt for a model (its worker a
//! process of its own) calling the echo agent as its tool, against a model
//! server in the bench that answers at once (not streamed). Three runs of
//! conversations: one model call each; one tool call each (a model call,
//! the echo task, a second model call); two tool calls at once each (the
//! same with two echo tasks). Measured: conversations per second, and each
//! process's CPU per conversation, each run in three parts, the runs taking
//! turns; from them, the orchestrator's CPU for a conversation of one
//! model call, for a tool call (the two-call run less the one-call run:
//! one more tool task and its planning, the same model calls) and for the
//! model call that reads tool results (the one-call run less the first
//! run, less a tool call), beside a plain task's.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::cpu::{CpuPerTask, CpuSnapshot, Processes, print_cpu};
use super::procs::Site;
use super::{BenchArgs, Figures};
use crate::cli::output::outln;

/// The model: a tool call to `echo` when the user asks for one (`call`),
/// two at once (`call2`), and no tool answered yet, else a short text.
async fn model() -> Result<String, String> {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|axum::Json(r): axum::Json<Value>| async move {
            let messages = r["messages"].as_array().cloned().unwrap_or_default();
            let last = messages.last().cloned().unwrap_or_default();
            let calls = match (last["role"].as_str(), last["content"].as_str()) {
                (Some("user"), Some("call")) => 1,
                (Some("user"), Some("call2")) => 2,
                _ => 0,
            };
            let message = if calls == 0 {
                json!({"role": "assistant", "content": "done"})
            } else {
                let tool_calls: Vec<Value> = (1..=calls)
                    .map(|n| {
                        json!({"id": format!("call_{n}"), "type": "function",
                            "function": {"name": "echo", "arguments": format!("{{\"n\":{n}}}")}})
                    })
                    .collect();
                json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
            };
            axum::Json(json!({
                "id": "bench", "object": "chat.completion", "model": "bench",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
            }))
        }),
    );
    let url = super::serve_loopback(app, "/v1").await?;
    Ok(url)
}

/// How many parts each kind of conversation runs in, the kinds taking
/// turns.
const ROUNDS: usize = 3;

/// One kind of conversation, measured.
pub(super) struct Run {
    figures: Figures,
    cpu: CpuPerTask,
}

/// What the LLM runs measured.
pub(super) struct Measured {
    /// One model call per conversation.
    answer: Run,
    /// One tool call per conversation.
    tool: Run,
    /// Two tool calls at once per conversation.
    two: Run,
}

/// Starts the deployed path with an LLM agent under `dir/llm` and
/// measures both kinds of conversation.
pub(super) async fn measure(site: &Site<'_>, args: &BenchArgs) -> Result<Measured, String> {
    let llm_args = BenchArgs {
        llm_model: Some(model().await?),
        ..args.clone()
    };
    let deployed = site.deploy("llm", &llm_args).await?;
    let processes = Processes {
        // The LLM agent's worker: the echo worker's CPU is the plain
        // path's, and the tool calls' share of it is not counted here.
        worker: deployed.llm_worker_pid(),
        ..deployed.processes(site.brokers)
    };
    let deployed = Arc::new(deployed);
    let kinds = [
        ("llm, a model call", "answer"),
        ("llm, a tool call", "call"),
        ("llm, two tool calls", "call2"),
    ];
    // Each kind runs in ROUNDS parts, the kinds taking turns: the store
    // grows as they run, and a kind measured last would carry its growth.
    let mut spent: [_; 3] =
        std::array::from_fn(|_| (Vec::new(), Duration::ZERO, CpuSnapshot::zero()));
    for round in 0..ROUNDS {
        let count = args.tasks / ROUNDS + usize::from(round < args.tasks % ROUNDS);
        for (&(label, text), (latencies, elapsed, cpu)) in kinds.iter().zip(spent.iter_mut()) {
            let d = Arc::clone(&deployed);
            let one = move |i: usize| {
                let d = Arc::clone(&d);
                async move {
                    let ended = d.conversation(i, text).await?;
                    if ended.state != "completed" {
                        return Err(format!("a conversation ended {}", ended.state));
                    }
                    Ok(ended.latency)
                }
            };
            let before = processes.cpu();
            let (some, took) = super::latencies(label, count, args.concurrency, one).await?;
            *cpu = cpu.plus(before, processes.cpu());
            latencies.extend(some);
            *elapsed += took;
        }
    }
    let mut runs = spent.into_iter().map(|(latencies, elapsed, cpu)| {
        let figures = super::figures(latencies, elapsed);
        let cpu = CpuPerTask::between(CpuSnapshot::zero(), cpu, figures.count);
        Run { figures, cpu }
    });
    let (Some(answer), Some(tool), Some(two)) = (runs.next(), runs.next(), runs.next()) else {
        return Err("a kind of conversation was not run".into());
    };
    Ok(Measured { answer, tool, two })
}

impl Measured {
    /// The orchestrator's CPU, in µs: for a conversation of one model call
    /// (its task and one turn), for a tool call (one more tool task and its
    /// planning: two calls at once less one), and for the model call that
    /// reads tool results (one call less a conversation of one model call,
    /// less a tool call).
    fn overheads(&self) -> Overheads {
        let one = self.answer.cpu.orchestrator_us;
        let tool = self.tool.cpu.orchestrator_us;
        let two = self.two.cpu.orchestrator_us;
        let tool_call = two.zip(tool).map(|(t, o)| t - o);
        Overheads {
            model_call: one,
            tool_call,
            next_turn: tool.zip(one).zip(tool_call).map(|((t, o), c)| t - o - c),
        }
    }

    pub(super) fn json(&self, rest: &CpuPerTask) -> Value {
        let o = self.overheads();
        json!({
            "model_call": {"throughput": self.answer.figures, "cpu_per_conversation": self.answer.cpu},
            "tool_call": {"throughput": self.tool.figures, "cpu_per_conversation": self.tool.cpu},
            "two_tool_calls": {"throughput": self.two.figures, "cpu_per_conversation": self.two.cpu},
            "orchestrator_us": {
                "plain_task": rest.orchestrator_us,
                "model_call": o.model_call,
                "tool_call": o.tool_call,
                "turn_after_tools": o.next_turn,
            },
        })
    }

    pub(super) fn print(&self, args: &BenchArgs, rest: &CpuPerTask) {
        outln!(
            "LLM agents, as deployed (HTTP client → `run` → model-call task → `worker` (llm) → model in the bench → `run`):"
        );
        for (what, run) in [
            ("one model call", &self.answer),
            ("one tool call", &self.tool),
            ("two tool calls at once", &self.two),
        ] {
            outln!(
                "  conversations of {what}: {} at {} in flight, {:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
                run.figures.count,
                args.concurrency,
                run.figures.per_second,
                run.figures.p50_ms,
                run.figures.p99_ms
            );
            print_cpu(&format!("  CPU per conversation of {what}"), &run.cpu);
        }
        let o = self.overheads();
        if let (Some(plain), Some(m), Some(t), Some(n)) =
            (rest.orchestrator_us, o.model_call, o.tool_call, o.next_turn)
        {
            outln!(
                "  orchestrator CPU: a plain task {plain:.0} µs; a conversation of one model call {m:.0} µs ({:.0} % of a plain task); a tool call {t:.0} µs ({:.0} % of a plain task); the model call that reads the tools' results {n:.0} µs ({:.0} %)",
                m / plain * 100.0,
                t / plain * 100.0,
                n / plain * 100.0
            );
        }
    }
}

/// The orchestrator's CPU for each part of a conversation, in µs.
struct Overheads {
    model_call: Option<f64>,
    tool_call: Option<f64>,
    next_turn: Option<f64>,
}
