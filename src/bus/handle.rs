//! The bus handle every part of the orchestrator and worker shares: the
//! client, its JetStream context and the names, and what is looked up once.

use std::sync::Arc;

use async_nats::jetstream::{self, kv};

use super::{BusSettings, Names};

/// A cheap, cloneable handle to the bus.
#[derive(Clone)]
pub struct Bus {
    /// Shared by every clone.
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The core NATS client.
    pub(super) client: async_nats::Client,
    /// The JetStream context over it.
    pub(super) js: jetstream::Context,
    /// Every name on the bus.
    pub(super) names: Names,
    /// Layout and delivery settings.
    pub(super) config: BusSettings,
    /// The live registry bucket, looked up once.
    pub(super) agents: tokio::sync::OnceCell<kv::Store>,
    /// The delivery-claim bucket, looked up once.
    pub(super) deliveries: tokio::sync::OnceCell<kv::Store>,
}

impl Bus {
    pub(super) fn from_client(client: async_nats::Client, config: BusSettings) -> Bus {
        let js = jetstream::new(client.clone());
        Bus {
            inner: Arc::new(Inner {
                names: Names::new(&config.prefix),
                client,
                js,
                config,
                agents: tokio::sync::OnceCell::new(),
                deliveries: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// The names in use.
    pub fn names(&self) -> &Names {
        &self.inner.names
    }

    /// The bus settings.
    pub fn settings(&self) -> &BusSettings {
        &self.inner.config
    }

    /// The core NATS client.
    pub fn client(&self) -> &async_nats::Client {
        &self.inner.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.inner.js
    }

    /// Whether the client is connected right now.
    pub fn is_connected(&self) -> bool {
        self.inner.client.connection_state() == async_nats::connection::State::Connected
    }

    /// The largest message the broker carries, in bytes (payload and
    /// headers), as it advertised when this client connected.
    pub fn max_payload(&self) -> usize {
        self.inner.client.max_payload()
    }
}
