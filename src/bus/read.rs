//! Reading single messages back: whether a task's message is still
//! queued, and the last event about a task (what a worker checks before
//! running a redelivered attempt).

use async_nats::jetstream::{self, stream};

use super::{Bus, BusError, Cause};
use crate::envelope::AgentName;
use crate::event::WorkerEvent;

impl Bus {
    /// Whether the task stream still holds message `seq` (not yet acked).
    pub async fn task_message_exists(&self, seq: u64) -> Result<bool, BusError> {
        let stream = self.inner.names.tasks_stream();
        let found = self
            .read_message(
                stream,
                || format!("task message {seq}"),
                |m| m.sequence(seq),
            )
            .await?;
        Ok(found.is_some())
    }

    /// The last event published about `task`, if any: the record a worker
    /// checks before running a redelivered attempt.
    pub async fn last_event(
        &self,
        agent: &AgentName,
        task: crate::envelope::TaskId,
    ) -> Result<Option<WorkerEvent>, BusError> {
        let n = &self.inner.names;
        let subject = n.event_subject(agent, task);
        // A direct get names the subject in the request's own subject, so a
        // least-privilege bus can let an agent read only its own events.
        let read = async {
            let stream = self
                .inner
                .js
                .get_stream_no_info(n.events_stream())
                .await
                .map_err(Cause::from)?;
            match stream.direct_get_last_for_subject(subject).await {
                Ok(msg) => Ok(Some(msg)),
                Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
                Err(e) => Err(Cause::from(e)),
            }
        };
        let found = read.await.map_err(|source| BusError::Read {
            what: format!("the last event of task {task}"),
            source,
        })?;
        Ok(found.and_then(|msg| WorkerEvent::from_wire(&msg.payload, usize::MAX).ok()))
    }

    /// One message of `stream`, as `pick` chooses it; `None` when there is
    /// no such message. `what` names it in errors.
    async fn read_message(
        &self,
        stream: String,
        what: impl FnOnce() -> String,
        pick: impl FnOnce(stream::RawMessageBuilder) -> stream::RawMessageBuilder,
    ) -> Result<Option<jetstream::message::StreamMessage>, BusError> {
        let read = async {
            let stream = self
                .inner
                .js
                .get_stream_no_info(stream)
                .await
                .map_err(Cause::from)?;
            match pick(stream.raw_message_builder()).send().await {
                Ok(msg) => Ok(Some(msg)),
                Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => Ok(None),
                Err(e) => Err(Cause::from(e)),
            }
        };
        read.await.map_err(|source| BusError::Read {
            what: what(),
            source,
        })
    }
}
