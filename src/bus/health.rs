//! Whether the streams and buckets a process needs can serve it now: each
//! must have a leader (on a cluster, a node that died takes the leadership
//! of what it led with it until the others elect a new one), and the task
//! queue must move. What readiness (`/readyz`) is made of.
//!
//! The orchestrator asks each stream for its info (answered by the
//! stream's leader). A worker, whose least-privilege user may not read a
//! stream's info, asks its own consumers for theirs and makes a write that
//! the leader must refuse (an expected last subject sequence no subject
//! has): the refusal proves a leader takes writes, and nothing is stored.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE;
use async_nats::jetstream::context::PublishErrorKind;
use futures::StreamExt;
use serde::Serialize;

use super::Bus;
use crate::envelope::{AgentName, Priority};

/// How long one probe waits for its answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A stream or bucket that cannot serve now, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unserved {
    /// The stream (a bucket's stream is `KV_<bucket>`), or
    /// `<stream>/<consumer>`.
    pub name: String,
    /// What the probe found.
    pub why: String,
}

/// What moves when the task queue moves: a message published, delivered
/// or acknowledged, an event stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flow {
    /// Task messages not yet delivered to any worker.
    pub undelivered: u64,
    /// A sum that changes whenever anything is published, delivered,
    /// acknowledged or reported.
    pub mark: u64,
}

impl Bus {
    /// What the orchestrator needs that cannot serve now (each stream and
    /// bucket asked once for its info), and the task queue's flow (`None`
    /// when the task or event stream, or a consumer, did not answer).
    pub async fn orchestrator_health(&self) -> (Vec<Unserved>, Option<Flow>) {
        let n = &self.inner.names;
        let names = [
            n.tasks_stream(),
            n.events_stream(),
            n.advisories_stream(),
            n.dlq_stream(),
            format!("KV_{}", n.deliveries_bucket()),
            format!("KV_{}", n.agents_bucket()),
        ];
        let infos = futures::future::join_all(names.iter().map(|name| async move {
            tokio::time::timeout(PROBE_TIMEOUT, self.inner.js.get_stream(name))
                .await
                .map_err(|_| format!("no answer in {}s", PROBE_TIMEOUT.as_secs()))?
                .map_err(|e| e.to_string())
        }))
        .await;
        let mut unserved = Vec::new();
        for (name, info) in names.iter().zip(&infos) {
            let why = match info {
                Err(e) => Some(e.clone()),
                Ok(s) => s
                    .cached_info()
                    .cluster
                    .as_ref()
                    .filter(|c| leaderless(c))
                    .map(|_| "no leader".to_string()),
            };
            unserved.extend(why.map(|why| Unserved {
                name: name.clone(),
                why,
            }));
        }
        let flow = match (&infos[0], &infos[1]) {
            (Ok(tasks), Ok(events)) => tokio::time::timeout(PROBE_TIMEOUT, flow(tasks, events))
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        (unserved, flow)
    }

    /// What agent `agent`'s workers need that cannot serve now (their
    /// consumers' leaders, a leader taking writes in the claims bucket and
    /// in the events stream), and the flow of their consumers (`None` when
    /// one did not answer).
    pub async fn worker_health(&self, agent: &AgentName) -> (Vec<Unserved>, Option<Flow>) {
        let n = &self.inner.names;
        let tasks = n.tasks_stream();
        let mut out = Vec::new();
        let mut flow = Some(Flow::default());
        for priority in Priority::ALL {
            let consumer = n.agent_consumer(agent, priority);
            let info = async {
                let stream = self
                    .inner
                    .js
                    .get_stream_no_info(&tasks)
                    .await
                    .map_err(|e| e.to_string())?;
                stream
                    .consumer_info(&consumer)
                    .await
                    .map_err(|e| e.to_string())
            };
            let why = match tokio::time::timeout(PROBE_TIMEOUT, info).await {
                Err(_) => Some(format!("no answer in {}s", PROBE_TIMEOUT.as_secs())),
                Ok(Err(e)) => Some(e),
                Ok(Ok(info)) => {
                    if let Some(f) = flow.as_mut() {
                        f.undelivered += info.num_pending;
                        f.mark += info.delivered.stream_sequence + info.ack_floor.stream_sequence;
                    }
                    info.cluster
                        .as_ref()
                        .filter(|c| leaderless(c))
                        .map(|_| "no leader".into())
                }
            };
            if let Some(why) = why {
                flow = None;
                out.push(Unserved {
                    name: format!("{tasks}/{consumer}"),
                    why,
                });
            }
        }
        let probes = [
            (
                format!("KV_{}", n.deliveries_bucket()),
                format!("$KV.{}.{agent}.readiness-probe", n.deliveries_bucket()),
            ),
            (
                n.events_stream(),
                format!(
                    "{}.readiness-probe",
                    n.agent_events(agent).trim_end_matches(".>")
                ),
            ),
        ];
        for (name, subject) in probes {
            if let Err(why) = self.refused_write(subject).await {
                out.push(Unserved { name, why });
            }
        }
        (out, flow)
    }

    /// Publishes to `subject` expecting a last subject sequence no subject
    /// has: `Ok` when the stream's leader refuses it, as it must.
    async fn refused_write(&self, subject: String) -> Result<(), String> {
        let mut headers = HeaderMap::new();
        headers.insert(
            NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            u64::MAX.to_string().as_str(),
        );
        let write = async {
            let ack = self
                .inner
                .js
                .publish_with_headers(subject, headers, bytes::Bytes::new())
                .await
                .map_err(|e| e.to_string())?;
            match ack.await {
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(()),
                Err(e) => Err(e.to_string()),
                Ok(_) => Err("a write that should be refused was stored".to_string()),
            }
        };
        tokio::time::timeout(PROBE_TIMEOUT, write)
            .await
            .map_err(|_| format!("no answer in {}s", PROBE_TIMEOUT.as_secs()))?
    }
}

/// Whether a clustered stream's or consumer's info names no leader.
fn leaderless(c: &async_nats::jetstream::stream::ClusterInfo) -> bool {
    c.name.is_some() && c.leader.as_deref().unwrap_or("").is_empty()
}

/// The task queue's flow: the task and event streams' sequences and the
/// agents' consumers' (`None` when a consumer did not answer).
async fn flow(
    tasks: &async_nats::jetstream::stream::Stream,
    events: &async_nats::jetstream::stream::Stream,
) -> Option<Flow> {
    let (t, e) = (&tasks.cached_info().state, &events.cached_info().state);
    let mut flow = Flow {
        undelivered: 0,
        mark: t.first_sequence + t.last_sequence + e.last_sequence,
    };
    let mut consumers = tasks.consumers();
    while let Some(info) = consumers.next().await {
        let info = info.ok()?;
        flow.undelivered += info.num_pending;
        flow.mark += info.delivered.stream_sequence + info.ack_floor.stream_sequence;
    }
    Some(flow)
}
