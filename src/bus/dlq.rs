//! Moving a message to the dead-letter stream (`orch.dlq.<agent>`): one
//! sequence for every process that does it (a worker with an unreadable
//! envelope, the orchestrator with a poison event, an envelope for an
//! unknown agent, or a task JetStream gave up on). The copy is stored
//! first, with why in its headers; only then is the original removed, so a
//! failure on the way loses nothing.

use async_nats::HeaderMap;
use async_nats::jetstream::Message;

use super::{Bus, BusError, Settlement, TASK_ID_HEADER, settle, settle_confirmed};

/// Dead-letter header: why, in words (one line).
pub const DLQ_REASON_HEADER: &str = "Orch-Dlq-Reason";
/// Dead-letter header: why, as a code.
pub const DLQ_CODE_HEADER: &str = "Orch-Dlq-Code";
/// Dead-letter header: the subject the message was on.
pub const DLQ_SUBJECT_HEADER: &str = "Orch-Original-Subject";
/// Dead-letter header: its sequence in the stream it was in.
pub const DLQ_SEQ_HEADER: &str = "Orch-Stream-Seq";

/// A message to dead-letter, with why.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetterCopy<'a> {
    /// The agent it was for (its DLQ subject).
    pub agent: &'a str,
    /// The message as it was.
    pub payload: &'a [u8],
    /// Why, as a code.
    pub code: &'a str,
    /// Why, in words.
    pub reason: &'a str,
    /// The subject it was on.
    pub original_subject: &'a str,
    /// The stream it was in (the task stream, or the events stream for a
    /// poison event).
    pub stream: &'a str,
    /// Its sequence in that stream.
    pub stream_seq: u64,
    /// Its task, when the envelope could be read.
    pub task_id: Option<crate::envelope::TaskId>,
}

/// How the original of a dead letter is removed once the copy is stored.
#[derive(Clone, Copy)]
pub enum Original<'m> {
    /// Delivered to this process: settled as said, and confirmed by
    /// JetStream. Were the copy not stored, it is NAKed after the retry
    /// delay instead, to come back.
    Delivered(&'m Message, Settlement),
    /// Read from its stream by sequence (the letter's `stream` and
    /// `stream_seq`): deleted there. Were the copy not stored, it stays.
    Stored,
}

impl Bus {
    /// Moves a message to the dead-letter stream: stores its copy (see the
    /// module), then removes the original as `original` says. An error
    /// means the copy was not stored (the original is kept, to be tried
    /// again), or, for a stored original, that it could not be deleted.
    pub async fn move_to_dlq(
        &self,
        letter: DeadLetterCopy<'_>,
        original: Original<'_>,
    ) -> Result<(), BusError> {
        if let Err(e) = self.dead_letter(letter).await {
            if let Original::Delivered(msg, _) = original {
                settle(msg, Settlement::Nak(self.settings().retry_delay)).await;
            }
            return Err(e);
        }
        match original {
            Original::Delivered(msg, how) => {
                settle_confirmed(msg, how).await;
                Ok(())
            }
            Original::Stored => {
                let what = || format!("message {} of {}", letter.stream_seq, letter.stream);
                let stream = self
                    .jetstream()
                    .get_stream_no_info(letter.stream)
                    .await
                    .map_err(|e| BusError::Read {
                        what: what(),
                        source: e.into(),
                    })?;
                stream
                    .delete_message(letter.stream_seq)
                    .await
                    .map(|_| ())
                    .map_err(|e| BusError::Read {
                        what: what(),
                        source: format!("copied to the dead-letter stream, not deleted: {e}")
                            .into(),
                    })
            }
        }
    }

    /// Stores a copy of a message that cannot be run in `orch.dlq.<agent>`,
    /// with why in its headers. Its `Nats-Msg-Id`
    /// (`dlq.<stream>.<sequence>`) makes a repeated copy harmless.
    async fn dead_letter(&self, letter: DeadLetterCopy<'_>) -> Result<(), BusError> {
        let mut headers = HeaderMap::new();
        // A header value is one line.
        let one_line = |text: &str| text.replace(['\r', '\n'], " ");
        headers.insert(DLQ_REASON_HEADER, one_line(letter.reason).as_str());
        headers.insert(DLQ_CODE_HEADER, one_line(letter.code).as_str());
        headers.insert(DLQ_SUBJECT_HEADER, letter.original_subject);
        headers.insert(DLQ_SEQ_HEADER, letter.stream_seq.to_string().as_str());
        if let Some(id) = letter.task_id {
            headers.insert(TASK_ID_HEADER, id.to_string().as_str());
        }
        let subject = self.names().dlq_subject(letter.agent);
        let msg_id = format!("dlq.{}.{}", letter.stream, letter.stream_seq);
        self.publish(subject, msg_id, headers, letter.payload.to_vec())
            .await
    }
}
