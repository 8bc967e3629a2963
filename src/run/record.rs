//! A run as the store keeps it: what only the run knows (its definition,
//! input, who started it, decisions made at its gates, routing choices, a
//! cancel, its own state). What its steps' tasks did is owned by the tasks;
//! which task a step is, by the store's step links.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Grants;
use crate::envelope::{AgentName, CorrelationId, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::telemetry::context::{self, StoredTrace};
use crate::telemetry::spans::{self, RunMark};

/// A run id: a UUIDv7, so runs sort by start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(TaskId);

impl RunId {
    /// A fresh id for a run starting now.
    pub fn new() -> Self {
        RunId(TaskId::new())
    }

    /// The id a conversation's turns and tool calls are linked under (as
    /// steps): its task's (`docs/llm.md`).
    pub fn of_conversation(task: TaskId) -> Self {
        RunId(task)
    }

    /// The task of a conversation's id.
    pub fn task(self) -> TaskId {
        self.0
    }

    /// The 16 bytes of the id, in time order.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// Rebuilds an id from its 16 bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        RunId(TaskId::from_bytes(bytes))
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A run's stored definition that no longer reads as a trigger (written
/// by another version).
#[derive(Debug, thiserror::Error)]
#[error("the run's stored definition cannot be read: {0}")]
pub struct UnreadableDefinition(#[source] pub serde_json::Error);

impl FromStr for RunId {
    type Err = crate::envelope::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(RunId)
    }
}

/// Where a run stands (A2A's task names, as a run is a task of tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Steps are running or about to.
    Working,
    /// Waiting at an approval gate.
    InputRequired,
    /// Every step ended as it should.
    Completed,
    /// A step failed (and was not allowed to), or the deadline passed.
    Failed,
    /// Someone canceled it.
    Canceled,
    /// A person rejected it at a gate.
    Rejected,
}

impl RunState {
    /// Every state.
    pub const ALL: [RunState; 6] = [
        RunState::Working,
        RunState::InputRequired,
        RunState::Completed,
        RunState::Failed,
        RunState::Canceled,
        RunState::Rejected,
    ];

    /// Nothing leaves a terminal state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed | RunState::Canceled | RunState::Rejected
        )
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Working => "working",
            RunState::InputRequired => "input_required",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Canceled => "canceled",
            RunState::Rejected => "rejected",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = crate::envelope::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| crate::envelope::ParseError::NotOneOf {
                value: s.into(),
                what: "a run state",
                names: RunState::ALL.map(RunState::as_str).join(", "),
            })
    }
}

/// How a run was started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// An API call (or the CLI).
    Request,
    /// The trigger's schedule, for this time.
    Schedule {
        /// The scheduled time.
        at: Timestamp,
    },
    /// A message on the trigger's subject.
    Event {
        /// The subject it came on.
        subject: String,
        /// Its id (its `Nats-Msg-Id`, or its stream sequence).
        message_id: String,
    },
}

/// A person's answer at an approval gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Whether the run goes on.
    pub approved: bool,
    /// Who answered.
    pub by: String,
    /// Why (free text, may be empty).
    #[serde(default)]
    pub reason: String,
    /// Input supplied with the answer (`runs input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The answer's idempotency key (an A2A message's), so the same
    /// answer sent again is known as answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When.
    pub at: Timestamp,
}

/// A time the run began to wait at a gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// The approval step.
    pub step: String,
    /// Since when.
    pub since: Timestamp,
}

/// A router's choice, with why it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteChoice {
    /// The agent chosen.
    pub agent: AgentName,
    /// Its skill chosen.
    pub skill: String,
    /// How well it matched (higher is better).
    pub score: u32,
    /// What matched: the skill's trigger phrases, the agent's signals.
    pub matched: Vec<String>,
    /// The text routed (its first part, when the request was split).
    pub text: String,
    /// The choices for the request's further parts, when a registry's
    /// multi-agent trigger phrase (`and also`, `then`) split it: each
    /// part runs on the agent chosen for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<RouteChoice>,
}

/// A cancel asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Who asked.
    pub by: String,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// When.
    pub at: Timestamp,
}

/// A run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Its id.
    pub run_id: RunId,
    /// The trigger it runs.
    pub trigger_id: String,
    /// The trigger's definition when the run started (a changed file does
    /// not change a running run).
    pub definition: Value,
    /// The digest of `definition`.
    pub definition_hash: String,
    /// The input it was started with.
    pub input: Value,
    /// How it was started.
    pub origin: Origin,
    /// Who started it: the actor of its steps' tasks.
    pub started_by: String,
    /// The starter's scopes: its steps' tokens never exceed them.
    pub grants: Grants,
    /// Shared by every task of the run.
    pub correlation_id: CorrelationId,
    /// Where it stands.
    pub state: RunState,
    /// The result, once completed: the last step's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Answers at its approval gates, by step id.
    #[serde(default)]
    pub decisions: BTreeMap<String, Decision>,
    /// Each wait at a gate, in order (append-only): with `decisions`, the
    /// run's history of states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<Wait>,
    /// Its routers' choices, by step id.
    #[serde(default)]
    pub routes: BTreeMap<String, RouteChoice>,
    /// Steps whose task could not be created (a refused request): they
    /// failed without a task.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub step_errors: BTreeMap<String, ErrorInfo>,
    /// A cancel asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
    /// When it must have ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The run's span: every step's task is in its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<StoredTrace>,
    /// Where its view is POSTed when it waits for its caller and when it
    /// ends (`docs/a2a.md`, "Callbacks").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// When it started.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A change to a run, checked against it in the store's transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum RunChange {
    /// The engine moves the run (a terminal state with its result or error).
    Settle {
        /// The state the engine decided from: a run that moved since
        /// (a person answered, someone canceled) is not settled.
        from: RunState,
        /// The new state.
        state: RunState,
        /// The result (completed).
        result: Option<Value>,
        /// The error (failed).
        error: Option<ErrorInfo>,
        /// The gate it waits at, when `state` is `input_required`.
        gate: Option<String>,
    },
    /// A person answers the gate `step`, which must be the one waiting.
    Decide {
        /// The approval step.
        step: String,
        /// The answer.
        decision: Decision,
    },
    /// The engine records a router's choice, once.
    Route {
        /// The route step.
        step: String,
        /// The choice.
        choice: RouteChoice,
    },
    /// The engine records that a step's task could not be created.
    StepFailed {
        /// The step.
        step: String,
        /// Why.
        error: ErrorInfo,
    },
    /// Someone cancels the run.
    Cancel(CancelRequest),
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRefused {
    /// The run has ended.
    #[error("run {run} is {state}")]
    Ended {
        /// The run.
        run: RunId,
        /// Its terminal state.
        state: RunState,
    },
    /// The run changed since the engine read it: it decides again.
    #[error("run {run} changed meanwhile")]
    Stale {
        /// The run.
        run: RunId,
    },
    /// The gate is not the one waiting, or was answered.
    #[error("run {run} is not waiting at an approval{}", step.as_deref().map(|s| format!(" (step `{s}`)")).unwrap_or_default())]
    NotWaiting {
        /// The run.
        run: RunId,
        /// The step named.
        step: Option<String>,
    },
}

impl RunRecord {
    /// A span marking `what` in this run's trace: a child of the run's
    /// span, also after a restart.
    pub fn span(&self, what: RunMark<'_>) -> tracing::Span {
        let span = spans::run(&self.trigger_id, &self.run_id.to_string(), what);
        if let Some(stored) = &self.trace {
            context::follow_stored(&span, stored);
        }
        span
    }

    /// A run of `trigger` starting now, `working`, nothing decided yet;
    /// its correlation id is its id, its deadline the trigger's.
    pub fn new(
        run_id: RunId,
        trigger: &crate::trigger::Trigger,
        input: Value,
        origin: Origin,
        started_by: String,
        grants: Grants,
    ) -> RunRecord {
        let now = Timestamp::now();
        RunRecord {
            run_id,
            trigger_id: trigger.id.clone(),
            definition: serde_json::to_value(trigger).unwrap_or_default(),
            definition_hash: trigger.hash(),
            input,
            origin,
            started_by,
            grants,
            correlation_id: run_id
                .to_string()
                .parse()
                .expect("a UUID is a valid correlation id"),
            state: RunState::Working,
            result: None,
            error: None,
            decisions: BTreeMap::new(),
            waits: Vec::new(),
            routes: BTreeMap::new(),
            step_errors: BTreeMap::new(),
            cancel: None,
            deadline: trigger.deadline.map(|d| now.after(d)),
            trace: None,
            callback_url: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// The definition the run started with. A stored definition a newer
    /// format cannot read fails this run only, not the record.
    pub fn trigger(&self) -> Result<crate::trigger::Trigger, UnreadableDefinition> {
        serde::Deserialize::deserialize(&self.definition).map_err(UnreadableDefinition)
    }

    /// Applies `change` (a pure function); returns the audit kind and
    /// detail for it, or why it was refused. Settling an ended run, or
    /// canceling one, is refused; a repeated route choice keeps the first.
    pub fn apply(
        &mut self,
        change: &RunChange,
        now: Timestamp,
    ) -> Result<(&'static str, Value), RunRefused> {
        if self.state.is_terminal() {
            return Err(RunRefused::Ended {
                run: self.run_id,
                state: self.state,
            });
        }
        let audit = match change {
            RunChange::Settle {
                from,
                state,
                result,
                error,
                gate,
            } => {
                if self.state != *from || self.cancel.is_some() && *state != RunState::Canceled {
                    return Err(RunRefused::Stale { run: self.run_id });
                }
                if let (RunState::InputRequired, Some(step)) = (state, gate) {
                    let again = self
                        .waits
                        .last()
                        .is_some_and(|w| &w.step == step && !self.decisions.contains_key(step));
                    if !again {
                        self.waits.push(Wait {
                            step: step.clone(),
                            since: now,
                        });
                    }
                }
                self.state = *state;
                if result.is_some() {
                    self.result.clone_from(result);
                }
                if error.is_some() {
                    self.error.clone_from(error);
                }
                (
                    "run.transition",
                    serde_json::json!({ "from": from, "to": state, "error": error }),
                )
            }
            RunChange::Decide { step, decision } => {
                if self.state != RunState::InputRequired || self.decisions.contains_key(step) {
                    return Err(RunRefused::NotWaiting {
                        run: self.run_id,
                        step: Some(step.clone()),
                    });
                }
                self.decisions.insert(step.clone(), decision.clone());
                self.state = RunState::Working;
                (
                    if decision.approved {
                        "run.approved"
                    } else {
                        "run.rejected"
                    },
                    serde_json::json!({
                        "step": step, "reason": decision.reason,
                        "input": decision.input.is_some(),
                    }),
                )
            }
            RunChange::Route { step, choice } => {
                self.routes
                    .entry(step.clone())
                    .or_insert_with(|| choice.clone());
                (
                    "run.routed",
                    serde_json::json!({ "step": step, "choice": self.routes[step] }),
                )
            }
            RunChange::StepFailed { step, error } => {
                self.step_errors
                    .entry(step.clone())
                    .or_insert_with(|| error.clone());
                (
                    "run.step_failed",
                    serde_json::json!({ "step": step, "error": error }),
                )
            }
            RunChange::Cancel(request) => {
                if self.cancel.is_none() {
                    self.cancel = Some(request.clone());
                }
                (
                    "run.cancel_requested",
                    serde_json::json!({ "reason": request.reason }),
                )
            }
        };
        self.updated_at = now;
        Ok(audit)
    }
}

/// What starting a run did: created it, or found the one its idempotency
/// key started before.
#[derive(Debug, Clone, PartialEq)]
pub enum RunStarted {
    /// A new run.
    Created(RunRecord),
    /// The key's run, started before.
    Existing(RunRecord),
}

impl RunStarted {
    /// The run, new or existing.
    pub fn record(&self) -> &RunRecord {
        match self {
            RunStarted::Created(r) | RunStarted::Existing(r) => r,
        }
    }
}
