//! One message id, one message: a face that takes messages with ids (the
//! A2A face) claims each id for its message before acting on it, so the
//! same id with other content, another target or another decision is
//! refused as a conflict, whichever of a task, a run, an answer or a gate
//! decision it first named.

use serde::Serialize;

use super::{Caller, Orchestrator, ServiceError};
use crate::store::{Fingerprint, MessageClaim};

impl Orchestrator {
    /// Acts on `message` under its id `key`, by `act`: the id is claimed
    /// for the message first (a conflict is
    /// [`crate::store::StoreError::MessageConflict`], audited), and given
    /// back if `act` refuses a message that claimed it new, so a corrected
    /// message may use the id.
    pub async fn once_per_message<T, E: From<ServiceError>>(
        &self,
        key: &str,
        message: &impl Serialize,
        caller: &Caller,
        act: impl AsyncFnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let store = &self.inner.store;
        let fingerprint = Fingerprint::of(message);
        let claim = store
            .claim_message(&caller.principal, key, fingerprint.clone())
            .await
            .map_err(|e| E::from(e.into()))?;
        let acted = act().await;
        if acted.is_err() && claim == MessageClaim::New {
            store
                .release_message(&caller.principal, key, fingerprint)
                .await
                .map_err(|e| E::from(e.into()))?;
        }
        acted
    }
}
