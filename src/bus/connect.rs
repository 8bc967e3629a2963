//! Connecting to the broker: one NATS server or several (the nodes of a
//! cluster, comma-separated). A process starts as soon as any of them
//! answers, and once connected the client reconnects by itself, across
//! the servers given and those the cluster tells it of, with backoff and
//! jitter, for as long as the process runs.

use std::time::{Duration, Instant};

use async_nats::{ConnectErrorKind, Event};
use tracing::{info, warn};

use super::{Bus, BusError, BusSettings, Cause, Servers};
use crate::backoff::Backoff;
use crate::telemetry::quiet::warn_quietly;

/// How long one connection attempt to one server may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a process waiting for its first connection says so.
const WAITING_NOTICE: Duration = Duration::from_secs(5);

impl Bus {
    /// Connects to any of `servers` (one URL, or several comma-separated),
    /// trying them all again and again, with backoff, until one answers or
    /// `bus.connect_wait` has passed; says every few seconds that it
    /// waits. A refused login is final at once.
    pub async fn connect(servers: &str, config: BusSettings) -> Result<Bus, BusError> {
        let list = parse(servers)?;
        let started = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut said = Instant::now();
        loop {
            match try_once(&list, &config).await {
                Ok(client) => {
                    if backoff.failures() > 0 {
                        info!(servers = %list, waited_s = started.elapsed().as_secs(), "connected to NATS");
                    }
                    return Ok(Bus::from_client(client, config));
                }
                Err(Failed::Final(e)) => return Err(e),
                Err(Failed::Retry(e)) => {
                    if started.elapsed() >= config.connect_wait {
                        return Err(e);
                    }
                    if said.elapsed() >= WAITING_NOTICE || backoff.failures() == 0 {
                        warn!(servers = %list, error = %e, "no NATS server answers yet; still trying");
                        said = Instant::now();
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Tries each of `servers` once; fails at once when none answers.
    pub async fn connect_now(servers: &str, config: BusSettings) -> Result<Bus, BusError> {
        let list = parse(servers)?;
        match try_once(&list, &config).await {
            Ok(client) => Ok(Bus::from_client(client, config)),
            Err(Failed::Final(e) | Failed::Retry(e)) => Err(e),
        }
    }
}

fn parse(servers: &str) -> Result<Servers, BusError> {
    servers
        .parse()
        .map_err(|e: crate::envelope::ParseError| BusError::Connect {
            url: servers.to_string(),
            source: e.into(),
        })
}

/// Why a connection attempt failed.
enum Failed {
    /// Nothing answered: trying again may help.
    Retry(BusError),
    /// A server refused the login or the settings: it will not help.
    Final(BusError),
}

/// One try of every server, in random order.
async fn try_once(servers: &Servers, config: &BusSettings) -> Result<async_nats::Client, Failed> {
    let failed = |source: Cause| BusError::Connect {
        url: servers.to_string(),
        source,
    };
    let options = config
        .auth
        .options()
        .await
        .map_err(|e| Failed::Final(failed(e.into())))?
        .name("orchestrator")
        .max_reconnects(None)
        .connection_timeout(ATTEMPT_TIMEOUT)
        .reconnect_delay_callback(reconnect_delay)
        .event_callback(|event| async move { say(event) });
    let options = match &config.inbox_prefix {
        Some(prefix) => options.custom_inbox_prefix(prefix),
        None => options,
    };
    options.connect(servers.addrs()).await.map_err(|e| {
        let refused = matches!(
            e.kind(),
            ConnectErrorKind::AuthorizationViolation
                | ConnectErrorKind::Authentication
                | ConnectErrorKind::Tls
        );
        let error = failed(e.into());
        if refused {
            Failed::Final(error)
        } else {
            Failed::Retry(error)
        }
    })
}

/// The delay before reconnection attempt `attempts` (the client counts
/// one per server tried): none for the first, so a client fails over to
/// another node at once; then the backoff from 20 ms to 2 s.
fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let failures = u32::try_from(attempts - 2).unwrap_or(u32::MAX);
    Backoff::new(Duration::from_millis(20), Duration::from_secs(2)).delay_after(failures)
}

/// Logs what happens to the connection; repeats are quiet.
fn say(event: Event) {
    match event {
        Event::Connected => info!("connected to NATS"),
        Event::Disconnected => {
            warn_quietly!("bus.disconnected", "disconnected from NATS; reconnecting")
        }
        Event::LameDuckMode => {
            info!("the NATS server is entering lame duck mode (shutting down)")
        }
        Event::ServerError(e) => warn_quietly!("bus.server_error", error = %e, "NATS server error"),
        Event::ClientError(e) => warn_quietly!("bus.client_error", error = %e, "NATS client error"),
        Event::SlowConsumer(_) | Event::Draining | Event::Closed => {
            tracing::debug!(%event, "NATS connection event")
        }
    }
}
