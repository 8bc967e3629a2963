//! The outbox's sender: delivers what each push-notification config and
//! callback is owed (`service::push` keeps the records), one delivery at a
//! time per target and task, in event order, at least once. What a body
//! holds is the face's to say ([`PushBodies`]: an A2A event, a task as the
//! REST API shows it).
//!
//! Each delivery has a loop: it follows its task or run, POSTs the next
//! event after its cursor, and records the outcome before it moves on (a
//! 2xx moves the cursor; a failure counts an attempt and sets when to try
//! again, with backoff; too many give the event up, audited). Every step
//! is stored, so after a restart each loop resumes where it was, its
//! backoff included. The events are derived from the subject's stored
//! history, so a redelivery carries the same event, with the same id.
//!
//! Each POST carries the delivery's id (`Orchestrator-Delivery`), and a
//! detached JWS over the body (`Orchestrator-Signature`, key in the JWKS
//! at `/.well-known/jwks.json`) whose header names that id, when it was
//! signed and the URL it was sent to: `docs/a2a.md` shows the check.

mod bodies;
mod outbound;
mod owed;
mod sender;

pub use bodies::PushBodies;
pub(in crate::service) use sender::sender;
