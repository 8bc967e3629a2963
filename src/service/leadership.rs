//! One of several orchestrators sharing the store's log
//! (`replication.enabled`): a standby until it holds the partition's
//! lease, its store following the log meanwhile; then the leader, its
//! store's commits going to the log, until it stops or loses the lease.

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{ServiceError, ServiceSettings};
use crate::bus::Bus;
use crate::envelope::Timestamp;
use crate::replication::{self, Appender, Caught, Holder, Lease, Leases, ReplicationError, Taken};
use crate::store::{CommitSink, Store, StoreError, StoreSettings};
use crate::telemetry::quiet::warn_quietly;

/// Who leads, as a standby last read it from the lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Leader {
    /// Its `replication.name`.
    pub name: String,
    /// Where its API answers (`replication.advertise_url`).
    pub url: Option<String>,
}

/// Fills in this node's name (host name and process id) and the URL
/// others forward to (`http://<http_addr>`, the host's name for an
/// unspecified address) where the settings leave them out.
pub fn name_node(config: &mut ServiceSettings, http_addr: std::net::SocketAddr) {
    let r = &mut config.replication;
    if r.name.is_none() {
        r.name = Some(default_name());
    }
    if r.advertise_url.is_none() {
        let host = match http_addr.ip().is_unspecified() {
            true => host_name(),
            false => http_addr.ip().to_string(),
        };
        let host = match http_addr.ip() {
            std::net::IpAddr::V6(ip) if !ip.is_unspecified() => format!("[{host}]"),
            _ => host,
        };
        r.advertise_url = Some(format!("http://{host}:{}", http_addr.port()));
    }
}

/// What a standby answers reads from: a read-only orchestrator over its
/// copy of the store (every write refused, nothing in the background).
#[derive(Clone)]
pub struct Replica {
    /// Serves the reads.
    pub orchestrator: super::Orchestrator,
    /// Every commit the log held at this time is in the copy: when this
    /// node last started reading the log and read it to its end.
    pub current_at: Timestamp,
    /// Another number each time the copy was opened anew (a snapshot
    /// loaded, a store set aside): what was built on an older one goes.
    pub generation: u64,
}

/// What a standby needs to answer reads from its copy of the store, and
/// where it offers them (`None` while it has none to offer). The default
/// offers them to no one, with no agents and no triggers.
#[derive(Default)]
pub struct Reads {
    /// The agents, as the leader has them.
    catalog: crate::agent::Catalog,
    /// The triggers, as the leader has them.
    triggers: crate::trigger::Triggers,
    /// The reads offered now.
    pub replica: tokio::sync::watch::Sender<Option<Replica>>,
    /// Copies offered so far: the next one's generation.
    offered: std::sync::atomic::AtomicU64,
}

impl Reads {
    /// Reads of the agents and triggers as the leader has them, offered
    /// on `replica`.
    pub fn new(
        catalog: crate::agent::Catalog,
        triggers: crate::trigger::Triggers,
        replica: tokio::sync::watch::Sender<Option<Replica>>,
    ) -> Reads {
        Reads {
            catalog,
            triggers,
            replica,
            offered: Default::default(),
        }
    }
}

/// How long a standby waits for the reads in progress on its copy to end
/// before it replaces the copy or takes over (a read takes milliseconds).
const WITHDRAW_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Reads {
    /// Offers reads from `store`, every commit the log held at `at` in
    /// it: the same orchestrator, newer, when one is offered; else a new
    /// one (one that cannot be made leaves the reads forwarded).
    async fn offer(&self, config: &ServiceSettings, bus: &Bus, store: &Store, at: Timestamp) {
        // Not a change a face rebuilds for (receivers are not woken): the
        // time is read when a read is answered.
        let mut offered = false;
        self.replica.send_if_modified(|r| {
            if let Some(r) = r {
                r.current_at = at;
                offered = true;
            }
            false
        });
        if offered {
            return;
        }
        let made = super::Orchestrator::replica(
            config.clone(),
            bus.clone(),
            self.catalog.clone(),
            self.triggers.clone(),
            store,
        )
        .await;
        match made {
            Ok(orchestrator) => {
                // Never one a face saw before, though a withdrawal came
                // between.
                let generation = self
                    .offered
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                self.replica.send_replace(Some(Replica {
                    orchestrator,
                    current_at: at,
                    generation,
                }));
            }
            // Tried again at each read of the log: said once in a while.
            Err(e) => warn_quietly!(
                "orchestrator.replica_reads_failed",
                error = %e,
                "this standby cannot serve reads from its copy of the store; they are forwarded to the leader"
            ),
        }
    }

    /// Stops offering reads from `store` and waits (at most
    /// [`WITHDRAW_WAIT`]) until `store` is its only handle: the reads in
    /// progress ended and whatever held the copy let it go. Dropping
    /// `store` then closes the store at once, on this thread (its last
    /// flush and commit mark written), before it is replaced or led with:
    /// a copy closing late on another thread would write its old mark over
    /// the new store's.
    async fn withdraw(&self, store: &Store) {
        self.replica.send_if_modified(|r| r.take().is_some());
        let until = Instant::now() + WITHDRAW_WAIT;
        while store.handles() > 1 && Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// What the leader holds: the lease, and the appender its store's
/// commits go through.
pub struct Leading {
    lease: Lease,
    /// Where to take the lease again when it lapsed with no one taking
    /// it: the bucket, what this node writes in it, the partition.
    again: (Leases, Holder, u32),
    appender: Appender,
    /// The sink to open the store with.
    pub commits: CommitSink,
}

/// Waits as a standby until this process holds the lease (its store
/// following the log), then seals the log; `None` when `stop` fires
/// first. Meanwhile `leader` says who leads, as last read, and `reads`
/// offers the store's copy to readers.
pub async fn lead(
    config: &ServiceSettings,
    bus: &Bus,
    stop: &CancellationToken,
    leader: &tokio::sync::watch::Sender<Option<Leader>>,
    reads: &Reads,
) -> Result<Option<Leading>, ServiceError> {
    let r = &config.replication;
    let holder = Holder {
        holder: r.name.clone().unwrap_or_else(default_name),
        address: r.advertise_url.clone(),
        since: Timestamp::now(),
        node: Some(node_id(&config.data_dir)?),
    };
    // Made once: each try below is then one request to the broker.
    replication::provision(bus).await?;
    let leases = Leases::open(bus, r.lease_ttl).await?;
    let mut standby = config.store_settings();
    standby.collect_keys = false;
    let mut seq = 0;
    let mut said_standby = false;
    // Open while it follows: the leader's is opened again, with the log,
    // by the orchestrator.
    let mut store = Store::open(&standby)?;
    // Written before replication was turned on: it is moved into the log
    // once this node leads, if the log holds nothing yet.
    let unlogged = store.log_position()? == 0 && store.holds_data();
    if unlogged {
        refuse_unless_log_empty(bus, r.partition, &standby).await?;
    }
    loop {
        if !unlogged {
            let at = Timestamp::now();
            let caught;
            (store, caught) = follow(bus, r.partition, store, &standby, seq, reads).await?;
            seq = caught.seq;
            reads.offer(config, bus, &store, at).await;
        }
        let lease = match leases.take(r.partition, &holder).await? {
            Taken::Held(lease) => Some(*lease),
            Taken::Elsewhere(by) => {
                let now = by.map(|h| Leader {
                    name: h.holder,
                    url: h.address,
                });
                if !said_standby {
                    let name = now.as_ref().map(|l| l.name.clone()).unwrap_or_default();
                    tracing::info!(partition = r.partition, leader = %name, "standing by: another orchestrator leads the store; following its log");
                    said_standby = true;
                }
                leader.send_if_modified(|was| {
                    let changed = *was != now;
                    *was = now;
                    changed
                });
                None
            }
        };
        if let Some(lease) = lease {
            reads.withdraw(&store).await;
            let taken = Won {
                lease,
                again: (leases.clone(), holder.clone(), r.partition),
                unlogged,
                settings: &standby,
            };
            return take_over(config, bus, taken, store, seq, reads)
                .await
                .map(Some);
        }
        tokio::select! {
            () = tokio::time::sleep(r.renew_every) => {}
            () = stop.cancelled() => return Ok(None),
        }
    }
}

/// The lease this node took, and the store it takes over with.
struct Won<'a> {
    lease: Lease,
    again: (Leases, Holder, u32),
    /// The store was written before replication.
    unlogged: bool,
    settings: &'a StoreSettings,
}

/// Makes `store` the log's end (a store written before replication moved
/// into the log first, as its snapshot at position 0), then seals the
/// log: this node leads.
async fn take_over(
    config: &ServiceSettings,
    bus: &Bus,
    taken: Won<'_>,
    mut store: Store,
    mut seq: u64,
    reads: &Reads,
) -> Result<Leading, ServiceError> {
    let partition = config.replication.partition;
    let (appender, commits) = loop {
        if taken.unlogged {
            refuse_unless_log_empty(bus, partition, taken.settings).await?;
            let snapshot = replication::move_in(bus, partition, &store, &config.data_dir).await?;
            tracing::info!(
                partition,
                snapshot = %snapshot.name,
                bytes = snapshot.bytes,
                "moved the store written before replication into the log as its first snapshot"
            );
            let started = Appender::start(bus, partition, 0).await?;
            keep_appender(taken.settings, started.0.id())?;
            break started;
        }
        // Everything the last leader wrote, then the seal.
        let caught;
        (store, caught) = follow(bus, partition, store, taken.settings, seq, reads).await?;
        seq = caught.seq;
        let at = store.log_position()?;
        if at > caught.log_position {
            // The log lacks this store's last commits.
            let appender = last_appender(taken.settings);
            match replication::carry_over(
                bus,
                partition,
                &store,
                &config.data_dir,
                appender.as_deref(),
            )
            .await
            {
                Ok(snapshot) => tracing::warn!(
                    partition,
                    position = at,
                    snapshot = %snapshot.name,
                    "the log lacks this store's last commits (its leader died before their append, or the brokers lost them) and no one appended since: the store is the snapshot at its position, and the log goes on from there"
                ),
                Err(ReplicationError::NotAtEnd { log, .. }) => {
                    let found = format!(
                        "the store is at position {at}, the log at {log}, and another appended to it last"
                    );
                    store = set_aside(store, taken.settings, &found)?;
                    seq = 0;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        match Appender::start(bus, partition, at).await {
            Ok(started) => {
                keep_appender(taken.settings, started.0.id())?;
                break started;
            }
            // The last leader appended meanwhile: read that too.
            Err(ReplicationError::Overtaken { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let position = store.log_position()?;
    store.flush().await?;
    drop(store);
    tracing::info!(
        partition,
        epoch = taken.lease.epoch(),
        position,
        "leading the store: its log is sealed at this position"
    );
    Ok(Leading {
        lease: taken.lease,
        again: taken.again,
        appender,
        commits,
    })
}

/// Refuses a store written before replication when the log holds another
/// store's commits already: the two cannot be one.
async fn refuse_unless_log_empty(
    bus: &Bus,
    partition: u32,
    settings: &StoreSettings,
) -> Result<(), ServiceError> {
    let log = replication::log_position(bus, partition).await?;
    if log == 0 {
        return Ok(());
    }
    Err(ServiceError::Store(StoreError::Open {
        path: settings.path.clone(),
        message: format!(
            "it holds tasks written before replication was turned on, and the log already holds another store's commits (to position {log}); it cannot join that log: move it aside and start this node on an empty data directory to follow the log, or start it against a log of its own"
        ),
    }))
}

/// Applies the log after stream sequence `seq` to `store`; the store and
/// how far it read (the sequence of the last message, the log's position
/// there). A store that cannot follow is
/// made again: one that left the log (it led and committed what the log
/// then refused) is set aside and read from the log's start; one the
/// trimmed log has left behind (an empty one joining, or a standby far
/// behind) is loaded from the newest snapshot and follows the log from
/// there.
async fn follow(
    bus: &Bus,
    partition: u32,
    mut store: Store,
    settings: &StoreSettings,
    mut seq: u64,
    reads: &Reads,
) -> Result<(Store, Caught), ServiceError> {
    // An empty store starts from the newest snapshot once the log holds
    // commits: the log may start after a snapshot (trimmed, or a store
    // moved into the log as its first snapshot).
    if seq == 0
        && store.log_position()? == 0
        && !store.holds_data()
        && replication::log_position(bus, partition).await? > 0
        && let Some(snapshot) = replication::snapshots(bus, partition).await?.pop()
    {
        reads.withdraw(&store).await;
        (store, seq) = load(bus, partition, store, settings, &snapshot).await?;
    }
    loop {
        match replication::catch_up(bus, partition, &store, seq).await {
            Ok(caught) if caught.log_position > store.log_position()? => {
                // The log went on from a snapshot past this store (a
                // leader's store that was ahead of the log).
                let newest = replication::snapshots(bus, partition).await?.pop();
                let at = store.log_position()?;
                let Some(snapshot) = newest.filter(|s| s.position > at) else {
                    return Err(ReplicationError::NoSnapshot { position: at }.into());
                };
                reads.withdraw(&store).await;
                (store, seq) = load(bus, partition, store, settings, &snapshot).await?;
            }
            Ok(caught) => return Ok((store, caught)),
            Err(ReplicationError::Apply {
                source: StoreError::Diverged { position },
                ..
            }) => {
                let found = format!("the log holds another record at position {position}");
                reads.withdraw(&store).await;
                store = set_aside(store, settings, &found)?;
                seq = 0;
            }
            Err(ReplicationError::Apply {
                source: StoreError::Behind { applied, .. },
                ..
            }) => {
                let Some(snapshot) = replication::snapshots(bus, partition).await?.pop() else {
                    return Err(ReplicationError::NoSnapshot { position: applied }.into());
                };
                reads.withdraw(&store).await;
                (store, seq) = load(bus, partition, store, settings, &snapshot).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sets `store` aside (`<store>.diverged-<unix seconds>`), it having left
/// the log (it led and committed what the log refused; `found` says where
/// that showed), and opens an empty one in its place, to read the log
/// from the start.
fn set_aside(store: Store, settings: &StoreSettings, found: &str) -> Result<Store, ServiceError> {
    let aside = settings
        .path
        .with_extension(format!("diverged-{}", Timestamp::now().unix_seconds()));
    tracing::warn!(found, aside = %aside.display(), "this store left the log (it led and committed what the log refused): setting it aside and reading the log from the start");
    drop(store);
    std::fs::rename(&settings.path, &aside)
        .map_err(|e| StoreError::Io(format!("{}: {e}", settings.path.display())))?;
    Ok(Store::open(settings)?)
}

/// Where the id of the appender of a store's last leadership is kept:
/// beside the store, `<store>.appender`.
fn appender_file(settings: &StoreSettings) -> std::path::PathBuf {
    settings.path.with_extension("appender")
}

/// Keeps `id`, the appender this store's commits go through from now on,
/// beside the store (written before any commit, synced).
fn keep_appender(settings: &StoreSettings, id: &str) -> Result<(), ServiceError> {
    let path = appender_file(settings);
    write_whole(&path, id).map_err(|e| StoreError::Io(format!("{}: {e}", path.display())).into())
}

/// The appender of this store's last leadership, if it led.
fn last_appender(settings: &StoreSettings) -> Option<String> {
    std::fs::read_to_string(appender_file(settings))
        .ok()
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// Makes `store` (replaced) from `snapshot`; the store and the sequence to
/// read the log after.
async fn load(
    bus: &Bus,
    partition: u32,
    store: Store,
    settings: &StoreSettings,
    snapshot: &replication::Snapshot,
) -> Result<(Store, u64), ServiceError> {
    tracing::info!(
        partition,
        store_position = store.log_position()?,
        snapshot = %snapshot.name,
        bytes = snapshot.bytes,
        "loading the newest snapshot: the log does not hold everything this store lacks"
    );
    drop(store);
    let loaded = replication::restore_or_newer(bus, partition, snapshot, settings).await?;
    Ok((Store::open(settings)?, loaded.after_seq))
}

/// A lease being kept; [`Kept::release`] gives it up when the leader
/// stops.
pub struct Kept {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Kept {
    /// Gives the lease up (after the orchestrator stopped and its store
    /// is flushed), so a standby takes over at once instead of after the
    /// lease lapses.
    pub async fn release(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

impl Leading {
    /// Keeps the lease while the orchestrator runs: renewed every
    /// `renew_every` (taken again when it lapsed with no one taking it);
    /// `lost` fires once it is lost (another took it, or it could be
    /// neither renewed nor taken again for [`step_down_after`]), and the
    /// appender stops then, so the store writes nothing more.
    pub fn keep(self, config: &ServiceSettings, lost: CancellationToken) -> Kept {
        let (every, ttl) = (config.replication.renew_every, config.replication.lease_ttl);
        let Leading {
            mut lease,
            again: (leases, holder, partition),
            appender,
            ..
        } = self;
        let bound = step_down_after(ttl);
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            let mut renewed = Instant::now();
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = lost.cancelled() => break,
                    () = stopping.cancelled() => {
                        drop(appender);
                        match lease.release().await {
                            Ok(()) => tracing::info!("gave the store's lease up"),
                            Err(e) => tracing::warn!(error = %e, "could not give the store's lease up: a standby takes it once it lapses"),
                        }
                        return;
                    }
                }
                // Another led since (its seal refused this one's append):
                // holding the lease would only keep a standby from leading.
                if appender.acked().refused.is_some() {
                    tracing::error!(
                        "the store's log refused an append (another orchestrator led since): stepping down"
                    );
                    break;
                }
                let failed = match lease.renew().await {
                    Ok(true) => None,
                    // Lapsed (renewals failed for its lifetime, a broker
                    // election say), or taken: taken again when no one
                    // holds it, which is safe because the log's fence,
                    // not the lease, keeps a deposed leader from writing.
                    Ok(false) => match leases.take(partition, &holder).await {
                        Ok(Taken::Held(again)) => {
                            tracing::warn!(
                                epoch = again.epoch(),
                                "the store's lease lapsed and no one took it: taken again"
                            );
                            lease = *again;
                            None
                        }
                        Ok(Taken::Elsewhere(by)) => {
                            let by = by.map(|h| h.holder).unwrap_or_default();
                            tracing::error!(%by, "the store's lease was taken by another orchestrator: stepping down");
                            break;
                        }
                        Err(e) => Some(e),
                    },
                    Err(e) => Some(e),
                };
                match failed {
                    None => renewed = Instant::now(),
                    Some(e) if renewed.elapsed() >= bound => {
                        tracing::error!(error = %e, unrenewed_s = renewed.elapsed().as_secs(), "the store's lease could not be renewed or taken again: stepping down");
                        break;
                    }
                    Some(e) => {
                        tracing::warn!(error = %e, "renewing the store's lease failed; trying again")
                    }
                }
            }
            drop(appender);
            lost.cancel();
        });
        Kept { stop, task }
    }
}

/// How long a leader goes on when it can neither renew nor take its lease
/// again (the brokers unreachable) before it steps down: three lease
/// lifetimes, at least 15 s. Longer than a stream's election under load
/// (5–10 s measured), so a lone leader rides one out; a standby takes
/// over after one lifetime anyway, its seal refusing this leader's
/// appends, and this bound is how long a leader cut off from every
/// broker keeps its waiting callers before it answers them `not_leader`.
fn step_down_after(ttl: std::time::Duration) -> std::time::Duration {
    (ttl * 3).max(std::time::Duration::from_secs(15))
}

/// The id of the data directory `dir`, kept in its `node-id` file (made
/// once, a random UUID): the lease names it, so a process started again
/// on the directory takes its predecessor's lease at once.
fn node_id(dir: &std::path::Path) -> Result<String, ServiceError> {
    let path = dir.join("node-id");
    let io =
        |e: std::io::Error| ServiceError::Store(StoreError::Io(format!("{}: {e}", path.display())));
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    let id = uuid::Uuid::new_v4().to_string();
    write_whole(&path, &id).map_err(io)?;
    Ok(id)
}

/// Writes `text` to `path` whole or not at all (a synced file renamed
/// into place), the owner's alone.
fn write_whole(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut fresh = path.as_os_str().to_owned();
    fresh.push(".new");
    let fresh = std::path::PathBuf::from(fresh);
    crate::files::write_file(
        &fresh,
        format!("{text}\n").as_bytes(),
        crate::files::PRIVATE,
    )?;
    std::fs::rename(&fresh, path)
}

/// The host's name and this process's id.
fn default_name() -> String {
    format!("{}-{}", host_name(), std::process::id())
}

/// The host's name (`orchestrator` when it cannot be read).
fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "orchestrator".into())
}
