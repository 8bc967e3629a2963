//! The one place where a consumer tells JetStream what became of a message:
//! every `Ack`, `Nak`, in-progress ack and `Term` in the worker and in the
//! orchestrator's consumers goes through [`settle`].

use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use tracing::debug;

/// What to tell JetStream about one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Done with it: remove it from a work queue, move a consumer past it.
    Ack,
    /// Deliver it again after this delay (counts as a delivery).
    Nak(Duration),
    /// Still working on it: restart its ack wait.
    Progress,
    /// Never deliver it again, and say so in an advisory.
    Term,
}

impl Settlement {
    fn kind(self) -> AckKind {
        match self {
            Settlement::Ack => AckKind::Ack,
            Settlement::Nak(delay) => AckKind::Nak(Some(delay)),
            Settlement::Progress => AckKind::Progress,
            Settlement::Term => AckKind::Term,
        }
    }
}

/// Settles `msg`. A settlement that cannot be sent (the connection is
/// down) is logged and otherwise dropped: JetStream then redelivers the
/// message after its ack wait, which every consumer here handles.
pub async fn settle(msg: &Message, how: Settlement) {
    if let Err(e) = msg.ack_with(how.kind()).await {
        debug!(subject = %msg.subject, settlement = ?how, error = %e, "settlement not sent");
    }
}

/// Settles `msg` and waits for JetStream to confirm it: for a caller that
/// must know the message is gone before it goes on (one that deletes its
/// consumer next).
pub async fn settle_confirmed(msg: &Message, how: Settlement) -> bool {
    match msg.double_ack_with(how.kind()).await {
        Ok(()) => true,
        Err(e) => {
            debug!(subject = %msg.subject, settlement = ?how, error = %e, "settlement not confirmed");
            false
        }
    }
}
