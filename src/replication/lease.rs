//! Who leads a partition of the store: a lease in the JetStream bucket
//! `<PREFIX>_LEASES` (key `store.<partition>`), whose entries expire
//! `ttl` after they were last written. Taking it creates the key (only
//! when there is none); renewing it rewrites the key stating the revision
//! it holds, so a lease that expired and was taken by another cannot be
//! renewed. The revision it was taken at is the leader's epoch. The lease
//! says who should lead; the log's fence (`appender`) is what keeps a
//! leader that lost it from writing.

use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use async_nats::jetstream::stream::StorageType;
use serde::{Deserialize, Serialize};

use super::ReplicationError;
use crate::bus::Bus;
use crate::envelope::Timestamp;

/// What a lease says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The process holding it (its instance name).
    pub holder: String,
    /// The HTTP address its API answers on, for others to forward to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// When it took the lease.
    pub since: Timestamp,
    /// The data directory it runs on (its `node-id` file): a process
    /// started again on the directory whose process held the lease takes
    /// the lease at once, the one that held it being gone (a directory is
    /// run by one process at a time), instead of waiting for it to lapse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A lease this process holds.
pub struct Lease {
    kv: kv::Store,
    key: String,
    value: bytes::Bytes,
    /// The revision it was taken at: the leader's epoch.
    epoch: u64,
    /// The revision of its last write.
    revision: u64,
}

/// Whether taking the lease succeeded.
pub enum Taken {
    /// This process holds it.
    Held(Box<Lease>),
    /// Another does (`None` when the holder's entry could not be read).
    Elsewhere(Option<Holder>),
}

/// The leases' bucket, opened once (a standby tries the lease every
/// second: one request each, not two).
#[derive(Clone)]
pub struct Leases {
    kv: kv::Store,
}

/// The lease bucket, made when missing, its entries expiring after `ttl`.
async fn bucket(bus: &Bus, ttl: Duration) -> Result<kv::Store, ReplicationError> {
    let name = format!(
        "{}_LEASES",
        bus.names().store_stream().trim_end_matches("_STORE")
    );
    let config = kv::Config {
        bucket: name.clone(),
        history: 1,
        max_age: ttl,
        storage: StorageType::File,
        num_replicas: bus.settings().replicas,
        ..Default::default()
    };
    bus.jetstream()
        .create_or_update_key_value(config)
        .await
        .map_err(|e| ReplicationError::Stream {
            stream: format!("KV_{name}"),
            source: e.into(),
        })
}

impl Leases {
    /// The bucket of leases held `ttl` past each renewal, made or updated.
    pub async fn open(bus: &Bus, ttl: Duration) -> Result<Leases, ReplicationError> {
        Ok(Leases {
            kv: bucket(bus, ttl).await?,
        })
    }

    /// Tries to take partition `partition`'s lease for `holder`: free, or
    /// held by an earlier process on `holder`'s data directory.
    pub async fn take(&self, partition: u32, holder: &Holder) -> Result<Taken, ReplicationError> {
        let kv = self.kv.clone();
        let key = format!("store.{partition}");
        let value = bytes::Bytes::from(serde_json::to_vec(holder).unwrap_or_default());
        let failed = |e: async_nats::Error| ReplicationError::Stream {
            stream: format!("KV_{}", kv.name),
            source: e,
        };
        let held = |revision| {
            Taken::Held(Box::new(Lease {
                kv: kv.clone(),
                key: key.clone(),
                value: value.clone(),
                epoch: revision,
                revision,
            }))
        };
        match kv.create(&key, value.clone()).await {
            Ok(revision) => return Ok(held(revision)),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(failed(e.into())),
        }
        let entry = kv.entry(&key).await.ok().flatten();
        let by = entry
            .as_ref()
            .and_then(|e| serde_json::from_slice::<Holder>(&e.value).ok());
        if let (Some(entry), Some(by)) = (&entry, &by)
            && by.node.is_some()
            && by.node == holder.node
        {
            // Its own directory's: taken over where it stands, unless
            // another took it meanwhile.
            match kv.update(&key, value.clone(), entry.revision).await {
                Ok(revision) => return Ok(held(revision)),
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {}
                Err(e) => return Err(failed(e.into())),
            }
        }
        Ok(Taken::Elsewhere(by))
    }
}

impl Lease {
    /// The leader's epoch: the revision the lease was taken at.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Renews the lease; `false` once it is lost (it expired and another
    /// took it).
    pub async fn renew(&mut self) -> Result<bool, ReplicationError> {
        match self
            .kv
            .update(&self.key, self.value.clone(), self.revision)
            .await
        {
            Ok(revision) => {
                self.revision = revision;
                Ok(true)
            }
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(false),
            Err(e) => Err(ReplicationError::Stream {
                stream: format!("KV_{}", self.kv.name),
                source: e.into(),
            }),
        }
    }

    /// Gives the lease up, so another may take it at once.
    pub async fn release(self) -> Result<(), ReplicationError> {
        self.kv
            .delete_expect_revision(&self.key, Some(self.revision))
            .await
            .map_err(|e| ReplicationError::Stream {
                stream: format!("KV_{}", self.kv.name),
                source: e.into(),
            })
    }
}
