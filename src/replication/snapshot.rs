//! Snapshots of a partition's store in the JetStream object store
//! `<PREFIX>_SNAPSHOTS` (`bus.replicas` copies), and trimming the log
//! below the oldest one kept: a node with an empty data directory, or a
//! standby the trimmed log has left behind, loads the newest snapshot and
//! follows the log from the message it names.
//!
//! An object is named `store.<partition>.<position, 20 digits>` and its
//! metadata say the log position it follows (`position`) and the stream
//! sequence to read the log after (`after_seq`): the last message of the
//! partition when the snapshot began, every record in a later message is
//! after `position`; and `until`, the store's position once it had been
//! read (a store made from it is exact from there on). The snapshot is read while the leader goes on
//! writing (see `store::snapshot`), and is stored only once the log holds
//! everything it read, so a store made from it and the log after
//! `after_seq` is the leader's.

use std::collections::HashMap;
use std::path::Path;

use async_nats::jetstream::object_store::{self, ObjectMetadata, ObjectStore};
use futures::StreamExt;

use super::ReplicationError;
use crate::bus::Bus;
use crate::store::{SnapshotSize, Store, StoreSettings};

/// A snapshot kept in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Its object's name.
    pub name: String,
    /// The log position it follows.
    pub position: u64,
    /// The stream sequence to read the log after.
    pub after_seq: u64,
    /// The store's position when it had been read: a store made from it
    /// is the log's view from this position on.
    pub until: u64,
    /// Its length in bytes.
    pub bytes: u64,
}

fn bucket_error(bus: &Bus, source: impl Into<crate::bus::Cause>) -> ReplicationError {
    ReplicationError::Snapshots {
        bucket: bus.names().snapshots_bucket(),
        source: source.into(),
    }
}

/// The snapshots' bucket, made when it is missing.
async fn bucket(bus: &Bus) -> Result<ObjectStore, ReplicationError> {
    let config = object_store::Config {
        bucket: bus.names().snapshots_bucket(),
        description: Some("snapshots of the orchestrator's store".into()),
        num_replicas: bus.settings().replicas,
        ..Default::default()
    };
    bus.jetstream()
        .create_object_store(config)
        .await
        .map_err(|e| bucket_error(bus, e))
}

/// Partition `partition`'s snapshots, oldest first.
pub async fn snapshots(bus: &Bus, partition: u32) -> Result<Vec<Snapshot>, ReplicationError> {
    listed(bus, &bucket(bus).await?, partition).await
}

/// Partition `partition`'s snapshots in `bucket`, oldest first.
async fn listed(
    bus: &Bus,
    bucket: &ObjectStore,
    partition: u32,
) -> Result<Vec<Snapshot>, ReplicationError> {
    let prefix = format!("store.{partition}.");
    let mut list = bucket.list().await.map_err(|e| bucket_error(bus, e))?;
    let mut out = Vec::new();
    while let Some(info) = list.next().await {
        let info = info.map_err(|e| bucket_error(bus, e))?;
        if info.deleted || !info.name.starts_with(&prefix) {
            continue;
        }
        let number = |key: &str| info.metadata.get(key).and_then(|v| v.parse::<u64>().ok());
        let (Some(position), Some(after_seq)) = (number("position"), number("after_seq")) else {
            tracing::warn!(name = %info.name, "a snapshot without its position: left alone");
            continue;
        };
        out.push(Snapshot {
            name: info.name.clone(),
            position,
            after_seq,
            until: number("until").unwrap_or(u64::MAX),
            bytes: info.size as u64,
        });
    }
    out.sort_by_key(|s| s.position);
    Ok(out)
}

/// Writes a snapshot of `store` (the leader's, partition `partition`) to
/// the bucket, once the log holds everything it read; keeps the newest
/// `keep` and trims the log below the oldest of them. `scratch` is a
/// directory for the file it is written to first. `None` when the log
/// holds no commit yet or the newest snapshot is at its position already.
pub async fn take(
    bus: &Bus,
    partition: u32,
    store: &Store,
    scratch: &Path,
    keep: usize,
) -> Result<Option<Snapshot>, ReplicationError> {
    let end = super::follow::last(bus, partition).await?;
    let bucket = bucket(bus).await?;
    let kept = listed(bus, &bucket, partition).await?;
    if end.position == 0 || kept.last().is_some_and(|s| s.position >= end.position) {
        return Ok(None);
    }
    let made = write(bus, &bucket, partition, store, scratch, end).await?;
    trim(bus, partition, &bucket, kept, &made, keep).await?;
    Ok(Some(made))
}

/// Moves `store`, written before replication was turned on, into
/// partition `partition`'s log, which must hold no commit: the store is
/// the snapshot at position 0, which a store that is empty loads before
/// it applies the log's first commit. For the node about to lead, before
/// it seals the log.
pub async fn move_in(
    bus: &Bus,
    partition: u32,
    store: &Store,
    scratch: &Path,
) -> Result<Snapshot, ReplicationError> {
    let end = super::follow::last(bus, partition).await?;
    let at = store
        .log_position()
        .map_err(|source| ReplicationError::Apply { seq: 0, source })?;
    if end.position != 0 || at != 0 {
        return Err(ReplicationError::NotAtEnd {
            store: at,
            log: end.position,
        });
    }
    let bucket = bucket(bus).await?;
    write(bus, &bucket, partition, store, scratch, end).await
}

/// Makes `store`, the store of the node about to lead, whose position is
/// past the end of partition `partition`'s log, the snapshot at its own
/// position, for the log to go on from there (the leader then seals the
/// log at that position). That is sound only when no one appended after
/// this store's last leader, whose appender (`appender`, kept beside the
/// store) must have written the log's last message: the commits the log
/// lacks are then ones it never took (the leader died before their
/// append: never reported) or lost (brokers that lost their last writes
/// to a power cut: reported, and kept only here). Refused with
/// [`ReplicationError::NotAtEnd`] otherwise.
pub async fn carry_over(
    bus: &Bus,
    partition: u32,
    store: &Store,
    scratch: &Path,
    appender: Option<&str>,
) -> Result<Snapshot, ReplicationError> {
    let end = super::follow::last(bus, partition).await?;
    let at = store
        .log_position()
        .map_err(|source| ReplicationError::Apply { seq: 0, source })?;
    if at <= end.position || appender.is_none() || end.appender.as_deref() != appender {
        return Err(ReplicationError::NotAtEnd {
            store: at,
            log: end.position,
        });
    }
    let bucket = bucket(bus).await?;
    let ahead = super::follow::End {
        position: at,
        ..end
    };
    write(bus, &bucket, partition, store, scratch, ahead).await
}

/// Writes a snapshot of `store`, whose log ends at `end`, to `bucket`.
async fn write(
    bus: &Bus,
    bucket: &ObjectStore,
    partition: u32,
    store: &Store,
    scratch: &Path,
    end: super::follow::End,
) -> Result<Snapshot, ReplicationError> {
    let (after_seq, position) = (end.after, end.position);
    let name = format!("store.{partition}.{position:020}");
    let failed = |source| ReplicationError::Snapshot {
        name: name.clone(),
        source,
    };
    let io = |e: std::io::Error| failed(crate::store::StoreError::Io(e.to_string()));
    let file = tempfile::NamedTempFile::new_in(scratch).map_err(io)?;
    let (into, reader) = (file.reopen().map_err(io)?, store.clone());
    let size = tokio::task::spawn_blocking(move || reader.write_snapshot(position, into))
        .await
        .map_err(|e| failed(crate::store::StoreError::Io(e.to_string())))?
        .map_err(failed)?;
    let until = store.log_position().map_err(failed)?;
    // Everything it read is in the log before anyone may load it.
    store.settled().await.map_err(failed)?;
    let mut from = tokio::fs::File::open(file.path()).await.map_err(io)?;
    let meta = ObjectMetadata {
        name: name.clone(),
        description: Some(format!(
            "partition {partition}'s store after log position {position}"
        )),
        metadata: HashMap::from([
            ("position".to_string(), position.to_string()),
            ("after_seq".to_string(), after_seq.to_string()),
            ("until".to_string(), until.to_string()),
            ("entries".to_string(), size.entries.to_string()),
        ]),
        ..Default::default()
    };
    bucket
        .put(meta, &mut from)
        .await
        .map_err(|e| bucket_error(bus, e))?;
    Ok(Snapshot {
        name,
        position,
        after_seq,
        until,
        bytes: size.bytes,
    })
}

/// Keeps the newest `keep` snapshots (`made` and the newest of `older`),
/// deletes the rest, and purges the partition's log below the oldest one
/// kept (its own message stays: the log's last position is never lost).
async fn trim(
    bus: &Bus,
    partition: u32,
    bucket: &ObjectStore,
    mut older: Vec<Snapshot>,
    made: &Snapshot,
    keep: usize,
) -> Result<(), ReplicationError> {
    older.push(made.clone());
    let cut = older.len().saturating_sub(keep.max(1));
    for gone in &older[..cut] {
        bucket
            .delete(&gone.name)
            .await
            .map_err(|e| bucket_error(bus, e))?;
    }
    let oldest = &older[cut];
    let stream = bus
        .jetstream()
        .get_stream_no_info(bus.names().store_stream())
        .await
        .map_err(|e| ReplicationError::Stream {
            stream: bus.names().store_stream(),
            source: e.into(),
        })?;
    stream
        .purge()
        .filter(bus.names().store_subject(partition))
        .sequence(oldest.after_seq.max(1))
        .await
        .map_err(|e| ReplicationError::Stream {
            stream: bus.names().store_stream(),
            source: e.into(),
        })?;
    Ok(())
}

/// How many snapshots [`restore_or_newer`] tries before it gives up.
const RESTORE_TRIES: u32 = 5;

/// [`restore`] from `snapshot`, or, when it went while it was read (the
/// leader keeps only the newest `snapshots_kept` and writes more), from
/// the newest one then, as long as one at least as far along is there;
/// the snapshot the store was made from.
pub async fn restore_or_newer(
    bus: &Bus,
    partition: u32,
    snapshot: &Snapshot,
    settings: &StoreSettings,
) -> Result<Snapshot, ReplicationError> {
    let mut snapshot = snapshot.clone();
    for tried in 1.. {
        match restore(bus, &snapshot, settings).await {
            Ok(_) => break,
            Err(e @ ReplicationError::Snapshots { .. }) if tried < RESTORE_TRIES => {
                let newest = snapshots(bus, partition).await?.pop();
                let Some(newer) = newest.filter(|s| s.position >= snapshot.position) else {
                    return Err(e);
                };
                tracing::info!(partition, gone = %snapshot.name, snapshot = %newer.name, error = %e, "the snapshot went while it was read: loading the newest");
                snapshot = newer;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(snapshot)
}

/// Makes the store at `settings.path` from `snapshot` (replacing what is
/// there); the store then follows the log after `snapshot.after_seq`.
pub async fn restore(
    bus: &Bus,
    snapshot: &Snapshot,
    settings: &StoreSettings,
) -> Result<SnapshotSize, ReplicationError> {
    let failed = |source| ReplicationError::Snapshot {
        name: snapshot.name.clone(),
        source,
    };
    let io = |e: std::io::Error| failed(crate::store::StoreError::Io(e.to_string()));
    let bucket = bucket(bus).await?;
    let mut object = bucket
        .get(&snapshot.name)
        .await
        .map_err(|e| bucket_error(bus, e))?;
    let scratch = settings.path.parent().unwrap_or(Path::new("."));
    crate::files::private_dir(scratch).map_err(io)?;
    let file = tempfile::NamedTempFile::new_in(scratch).map_err(io)?;
    let mut into = tokio::fs::File::from_std(file.reopen().map_err(io)?);
    // The object's digest is checked as it is read to its end.
    tokio::io::copy(&mut object, &mut into)
        .await
        .map_err(|e| bucket_error(bus, e))?;
    into.sync_all().await.map_err(io)?;
    let (settings, from) = (settings.clone(), file.reopen().map_err(io)?);
    let size = tokio::task::spawn_blocking(move || Store::restore_snapshot(&settings, from))
        .await
        .map_err(|e| failed(crate::store::StoreError::Io(e.to_string())))?
        .map_err(failed)?;
    if size.position != snapshot.position {
        return Err(failed(crate::store::StoreError::Snapshot(format!(
            "it holds position {} where its name says {}",
            size.position, snapshot.position
        ))));
    }
    Ok(size)
}

/// What [`verify`] found comparing a store with the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogCheck {
    /// The store's position in the log.
    pub position: u64,
    /// The snapshot the log's view was made from (none: the log from its
    /// start).
    pub snapshot: Option<String>,
    /// Records of the log applied on top of it.
    pub records: u64,
    /// How many entries differ.
    pub differing: u64,
    /// The first of them (or why the store cannot be the log's view).
    pub differences: Vec<String>,
}

impl LogCheck {
    /// Whether the store is the log's view at its position.
    pub fn ok(&self) -> bool {
        self.differing == 0
    }
}

/// Checks `replica` (a stopped node's store) against partition
/// `partition`'s log: makes the log's view at the store's position in a
/// directory under `scratch` (from the newest snapshot that is exact by
/// then, and the records after it) and compares them entry by entry.
pub async fn verify(
    bus: &Bus,
    partition: u32,
    replica: &Store,
    scratch: &Path,
) -> Result<LogCheck, ReplicationError> {
    let store_error = |source| ReplicationError::Apply { seq: 0, source };
    let position = replica.log_position().map_err(store_error)?;
    let dir = tempfile::tempdir_in(scratch)
        .map_err(|e| store_error(crate::store::StoreError::Io(e.to_string())))?;
    let settings = StoreSettings {
        collect_keys: false,
        ..StoreSettings::new(dir.path().join("store"))
    };
    let base = snapshots(bus, partition)
        .await?
        .into_iter()
        .rev()
        .find(|s| s.until <= position);
    let mut seq = 0;
    if let Some(s) = &base {
        restore(bus, s, &settings).await?;
        seq = s.after_seq;
    }
    let view = Store::open(&settings).map_err(store_error)?;
    let mut records = 0;
    let mut reading = super::Reading::after(bus, partition, seq).await?;
    'read: while let Some(entry) = reading.next().await? {
        for commit in &entry.commits {
            if commit.position > position {
                break 'read;
            }
            let applied = view.apply_commit(commit).map_err(|source| match source {
                crate::store::StoreError::Behind { .. } => {
                    ReplicationError::NoSnapshot { position }
                }
                source => ReplicationError::Apply {
                    seq: entry.seq,
                    source,
                },
            })?;
            records += u64::from(applied);
        }
    }
    reading.close().await;
    let reached = view.log_position().map_err(store_error)?;
    let (differing, differences) = if reached < position {
        (
            1,
            vec![format!(
                "the log ends at position {reached} and this store is at {position}: it holds commits the log does not (it led and committed what the log refused)"
            )],
        )
    } else {
        replica.differences(&view, 20).map_err(store_error)?
    };
    Ok(LogCheck {
        position,
        snapshot: base.map(|s| s.name),
        records,
        differing,
        differences,
    })
}
