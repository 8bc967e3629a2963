//! Names on the bus: subjects, streams, consumers and buckets, all derived
//! from one configurable prefix (default `orch`). Pure functions.

use crate::envelope::{AgentName, Priority, TaskId};

/// Every name the system uses on NATS, for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The subject prefix, lowercase (`orch`).
    prefix: String,
    /// The stream/bucket prefix, uppercase (`ORCH`).
    upper: String,
}

impl Names {
    /// Names for `prefix` (a single subject token, such as `orch`).
    pub fn new(prefix: &str) -> Self {
        Names {
            prefix: prefix.to_string(),
            upper: prefix.to_ascii_uppercase().replace('-', "_"),
        }
    }

    /// The work-queue stream of task envelopes.
    pub fn tasks_stream(&self) -> String {
        format!("{}_TASKS", self.upper)
    }

    /// The stream of worker status and result events.
    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.upper)
    }

    /// The dead-letter stream.
    pub fn dlq_stream(&self) -> String {
        format!("{}_DLQ", self.upper)
    }

    /// The stream that keeps JetStream's max-deliveries advisories for the
    /// task stream, so none is lost while the orchestrator is down.
    pub fn advisories_stream(&self) -> String {
        format!("{}_ADVISORIES", self.upper)
    }

    /// The stream that keeps the messages of event triggers' subjects.
    pub fn trigger_events_stream(&self) -> String {
        format!("{}_TRIGGER_EVENTS", self.upper)
    }

    /// The orchestrator's durable consumer of trigger `trigger`'s subject.
    pub fn trigger_consumer(&self, trigger: &str) -> String {
        format!("trigger_{trigger}")
    }

    /// The replicated log of the store's commits (one subject per
    /// partition).
    pub fn store_stream(&self) -> String {
        format!("{}_STORE", self.upper)
    }

    /// Partition `partition`'s subject in the store's log.
    pub fn store_subject(&self, partition: u32) -> String {
        format!("{}.store.{partition}", self.prefix)
    }

    /// The bucket of the store's leases (who leads each partition).
    pub fn leases_bucket(&self) -> String {
        format!("{}_LEASES", self.upper)
    }

    /// The object store of the store's snapshots.
    pub fn snapshots_bucket(&self) -> String {
        format!("{}_SNAPSHOTS", self.upper)
    }

    /// Every partition's subject in the store's log.
    pub fn all_store(&self) -> String {
        format!("{}.store.>", self.prefix)
    }

    /// The live agent registry bucket.
    pub fn agents_bucket(&self) -> String {
        format!("{}_AGENTS", self.upper)
    }

    /// The shared delivery-claim bucket.
    pub fn deliveries_bucket(&self) -> String {
        format!("{}_DELIVERIES", self.upper)
    }

    /// Where envelopes for `agent` at `priority` are published.
    pub fn task_subject(&self, agent: &AgentName, priority: Priority) -> String {
        format!("{}.tasks.{}.{}", self.prefix, agent, priority.as_str())
    }

    /// Every task subject.
    pub fn all_tasks(&self) -> String {
        format!("{}.tasks.>", self.prefix)
    }

    /// Where `agent` publishes events about `task`.
    pub fn event_subject(&self, agent: &AgentName, task: TaskId) -> String {
        format!("{}.events.{}.{}", self.prefix, agent, task)
    }

    /// Where `agent` notes a run of `task` it abandoned: beside the task's
    /// events, never the last of them.
    pub fn abandoned_subject(&self, agent: &AgentName, task: TaskId) -> String {
        format!("{}.events.{}.{}.abandoned", self.prefix, agent, task)
    }

    /// Whether an event subject is a run-abandoned note's.
    pub fn is_abandoned_subject(subject: &str) -> bool {
        subject.ends_with(".abandoned")
    }

    /// Every event subject.
    pub fn all_events(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    /// Where dead letters of `agent` go.
    pub fn dlq_subject(&self, agent: &str) -> String {
        format!("{}.dlq.{}", self.prefix, agent)
    }

    /// Every dead-letter subject.
    pub fn all_dlq(&self) -> String {
        format!("{}.dlq.>", self.prefix)
    }

    /// The core-NATS subject a cancel request for `task` is broadcast on.
    pub fn cancel_subject(&self, task: TaskId) -> String {
        format!("{}.control.cancel.{}", self.prefix, task)
    }

    /// The agent an event subject (`<prefix>.events.<agent>.<task>`)
    /// names, if it is one.
    pub fn event_agent<'s>(&self, subject: &'s str) -> Option<&'s str> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(".events.")?;
        rest.split('.').next().filter(|a| !a.is_empty())
    }

    /// The agent and priority a task subject (`<prefix>.tasks.<agent>.<priority>`)
    /// names.
    pub fn task_agent_priority<'s>(&self, subject: &'s str) -> Option<(&'s str, &'s str)> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(".tasks.")?;
        let (agent, priority) = rest.split_once('.')?;
        (!agent.is_empty() && !priority.is_empty() && !priority.contains('.'))
            .then_some((agent, priority))
    }

    /// Every event subject of one agent.
    pub fn agent_events(&self, agent: &AgentName) -> String {
        format!("{}.events.{}.>", self.prefix, agent)
    }

    /// Every cancel subject.
    pub fn all_cancels(&self) -> String {
        format!("{}.control.cancel.*", self.prefix)
    }

    /// The durable consumer the workers of `agent` share for `priority`.
    pub fn agent_consumer(&self, agent: &AgentName, priority: Priority) -> String {
        format!("agent_{}_{}", agent, priority.as_str())
    }

    /// The orchestrator's durable consumer of advisories.
    pub fn advisories_consumer(&self) -> String {
        "orchestrator_advisories".to_string()
    }

    /// The orchestrator's durable consumer of worker events.
    pub fn events_consumer(&self) -> String {
        "orchestrator_events".to_string()
    }

    /// The advisory subject JetStream publishes when a task message has been
    /// delivered `max_deliver` times.
    pub fn max_deliveries_advisory(&self) -> String {
        format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.*",
            self.tasks_stream()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design_for_the_default_prefix() {
        let n = Names::new("orch");
        let agent: AgentName = "knowledge-agent".parse().unwrap();
        let task = TaskId::new();
        assert_eq!(n.tasks_stream(), "ORCH_TASKS");
        assert_eq!(n.events_stream(), "ORCH_EVENTS");
        assert_eq!(n.dlq_stream(), "ORCH_DLQ");
        assert_eq!(n.agents_bucket(), "ORCH_AGENTS");
        assert_eq!(n.deliveries_bucket(), "ORCH_DELIVERIES");
        assert_eq!(
            n.task_subject(&agent, Priority::High),
            "orch.tasks.knowledge-agent.high"
        );
        assert_eq!(
            n.event_subject(&agent, task),
            format!("orch.events.knowledge-agent.{task}")
        );
        let subject = n.event_subject(&agent, task);
        assert_eq!(n.event_agent(&subject), Some("knowledge-agent"));
        assert_eq!(n.event_agent("orch.tasks.knowledge-agent.high"), None);
        assert_eq!(n.event_agent("orchestra.events.x.y"), None);
        assert_eq!(
            n.cancel_subject(task),
            format!("orch.control.cancel.{task}")
        );
        assert_eq!(
            n.agent_consumer(&agent, Priority::Low),
            "agent_knowledge-agent_low"
        );
        assert_eq!(
            n.max_deliveries_advisory(),
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORCH_TASKS.*"
        );
    }

    #[test]
    fn another_prefix_keeps_deployments_apart() {
        let n = Names::new("staging");
        assert_eq!(n.tasks_stream(), "STAGING_TASKS");
        assert_eq!(n.all_tasks(), "staging.tasks.>");
    }

    #[test]
    fn task_subjects_name_their_agent_and_priority() {
        let n = Names::new("orch");
        assert_eq!(
            n.task_agent_priority("orch.tasks.echo.high"),
            Some(("echo", "high"))
        );
        for not in [
            "orch.events.echo.x",
            "orch.tasks.echo",
            "other.tasks.a.b",
            "orch.tasks.a.b.c",
        ] {
            assert_eq!(n.task_agent_priority(not), None, "{not}");
        }
    }
}
