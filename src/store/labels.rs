//! The `by_label` index: each task under its agent, its owner (who asked
//! for it) and the trigger that started it, so that a listing filtered by
//! any of them walks only the tasks it shows (`listing.rs`).
//!
//! A key is a kind byte (`a` agent, `o` owner, `t` trigger), the value,
//! a 0 byte, and the task's 16-byte id (time order). Written with the task
//! in the transaction that creates it: none of the three ever changes.

use crate::envelope::{Envelope, TaskId};

/// What a label names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    Agent,
    Owner,
    Trigger,
}

impl Label {
    fn byte(self) -> u8 {
        match self {
            Label::Agent => b'a',
            Label::Owner => b'o',
            Label::Trigger => b't',
        }
    }
}

/// Every key of label `label` with `value` starts with this.
pub(crate) fn prefix(label: Label, value: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(value.len() + 18);
    key.push(label.byte());
    key.extend_from_slice(value.as_bytes());
    key.push(0);
    key
}

/// The key of task `id` under `label` `value`.
pub(crate) fn key(label: Label, value: &str, id: TaskId) -> Vec<u8> {
    let mut key = prefix(label, value);
    key.extend_from_slice(id.as_bytes());
    key
}

/// A task's keys: its agent's, its owner's (when it has one) and its
/// trigger's (when one started it).
pub(crate) fn of(envelope: &Envelope, owner: Option<&str>) -> Vec<Vec<u8>> {
    let id = envelope.header.task_id;
    let mut keys = vec![key(Label::Agent, envelope.header.to.as_str(), id)];
    if let Some(owner) = owner {
        keys.push(key(Label::Owner, owner, id));
    }
    if let Some(trigger) = &envelope.payload.meta.trigger_id {
        keys.push(key(Label::Trigger, trigger, id));
    }
    keys
}
