//! What is waiting on the bus, for the metrics: task messages not yet
//! delivered per agent and priority, and the dead-letter stream's size.

use futures::StreamExt;

use super::{Bus, BusError};

/// Task messages waiting for one agent and priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDepth {
    /// The agent.
    pub agent: String,
    /// `high`, `normal` or `low`.
    pub priority: String,
    /// Messages its consumer has not delivered yet.
    pub pending: u64,
}

impl Bus {
    /// The waiting messages of every agent consumer of the task stream.
    pub async fn queue_depths(&self) -> Result<Vec<QueueDepth>, BusError> {
        let n = &self.inner.names;
        let error = |e: crate::bus::Cause| BusError::Read {
            what: format!("the consumers of {}", n.tasks_stream()),
            source: e,
        };
        let stream = self
            .inner
            .js
            .get_stream_no_info(n.tasks_stream())
            .await
            .map_err(|e| error(e.into()))?;
        let mut consumers = stream.consumers();
        let mut depths = Vec::new();
        while let Some(info) = consumers.next().await {
            let info = info.map_err(|e| error(e.into()))?;
            if let Some((agent, priority)) = n.task_agent_priority(&info.config.filter_subject) {
                depths.push(QueueDepth {
                    agent: agent.to_string(),
                    priority: priority.to_string(),
                    pending: info.num_pending,
                });
            }
        }
        Ok(depths)
    }

    /// Messages in the dead-letter stream.
    pub async fn dlq_size(&self) -> Result<u64, BusError> {
        self.stream_size(self.inner.names.dlq_stream()).await
    }

    /// Task messages on the broker not yet acknowledged (the task stream
    /// is a work queue: a message leaves it once its task is settled),
    /// whether or not an agent's consumer exists yet.
    pub async fn tasks_waiting(&self) -> Result<u64, BusError> {
        self.stream_size(self.inner.names.tasks_stream()).await
    }

    async fn stream_size(&self, name: String) -> Result<u64, BusError> {
        // `get_stream` reads the stream's info: its state is current.
        let stream = self
            .inner
            .js
            .get_stream(&name)
            .await
            .map_err(|e| BusError::Read {
                what: format!("stream {name}"),
                source: e.into(),
            })?;
        Ok(stream.cached_info().state.messages)
    }
}
