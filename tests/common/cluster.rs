//! A real three-node NATS JetStream cluster per test, beside the
//! single-server [`super::nats::NatsServer`]: nodes on loopback with
//! dynamic ports, each with a temporary store; killed on drop, each node
//! killable and restartable on its ports and store.

use std::ops::{Deref, DerefMut};

use orchestrator::broker::LocalCluster;

/// A running cluster and the directory of its stores.
pub struct NatsCluster {
    cluster: LocalCluster,
    _dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Three nodes, clients on 127.0.0.1; returns once JetStream has a
    /// meta leader.
    pub async fn start() -> NatsCluster {
        NatsCluster::start_on("127.0.0.1").await
    }

    /// Three nodes with clients on `host` (`0.0.0.0` to reach them from
    /// another network namespace).
    pub async fn start_on(host: &str) -> NatsCluster {
        let dir = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(dir.path(), 3, host, "")
            .await
            .unwrap_or_else(|e| panic!("cannot start a NATS cluster: {e}"));
        NatsCluster { cluster, _dir: dir }
    }

    /// The node leading `stream`, waiting (up to 30 s) until it has one.
    pub async fn wait_leader_of(&self, stream: &str) -> usize {
        self.cluster
            .wait_leader_of(stream, std::time::Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Deref for NatsCluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.cluster
    }
}

impl DerefMut for NatsCluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.cluster
    }
}
