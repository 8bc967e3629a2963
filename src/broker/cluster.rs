//! A local NATS JetStream cluster: `nodes` `nats-server` processes on one
//! machine, routed to each other, each with its own store. For
//! `orchestrator bench --cluster` and the cluster tests: nodes can be
//! killed (SIGKILL) and restarted on the same ports and store, and the
//! node leading a stream can be found. Node `nI` carries the server tag
//! `node:nI`, so a stream can be placed on it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::process::Child;

use super::BrokerError;
use super::{server_bin, spawn_server};

/// One node of a [`LocalCluster`].
struct Node {
    /// The server's name (`n0`, `n1`, …): what stream info calls a leader.
    name: String,
    /// Its client port.
    port: u16,
    /// Its configuration file.
    conf: PathBuf,
    /// Its log.
    log: PathBuf,
    /// The process, while it runs.
    child: Option<Child>,
}

/// Several `nats-server` processes forming one JetStream cluster; every
/// process is killed when this is dropped.
pub struct LocalCluster {
    /// The nodes, in the order of their names.
    nodes: Vec<Node>,
    /// The address clients connect to.
    host: String,
}

/// A port nothing listens on right now, on `host`, held (so the next one
/// differs) until `held` is dropped.
fn free_port(host: &str, held: &mut Vec<std::net::TcpListener>) -> Result<u16, BrokerError> {
    let none = |source| BrokerError::NoPort {
        host: host.into(),
        source,
    };
    let listener = std::net::TcpListener::bind((host, 0)).map_err(none)?;
    let port = listener.local_addr().map_err(none)?.port();
    held.push(listener);
    Ok(port)
}

impl LocalCluster {
    /// Starts `nodes` servers with their stores under `dir`, clients on
    /// `host` (routes always on 127.0.0.1), each configured with `extra`
    /// too; returns once JetStream has a meta leader.
    pub async fn start(
        dir: &Path,
        nodes: usize,
        host: &str,
        extra: &str,
    ) -> Result<LocalCluster, BrokerError> {
        let mut ports = Vec::new();
        let mut held = Vec::new();
        for _ in 0..nodes {
            ports.push((
                free_port(host, &mut held)?,
                free_port("127.0.0.1", &mut held)?,
            ));
        }
        drop(held);
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, route)| format!("\"nats-route://127.0.0.1:{route}\""))
            .collect();
        let mut cluster = LocalCluster {
            nodes: Vec::new(),
            host: host.to_string(),
        };
        for (i, (port, route)) in ports.iter().enumerate() {
            let name = format!("n{i}");
            let home = dir.join(&name);
            crate::files::private_dir(&home).map_err(BrokerError::io(&home))?;
            let store =
                serde_json::to_string(&home.join("js").to_string_lossy()).unwrap_or_default();
            let text = format!(
                "server_name: \"{name}\"\nserver_tags: [\"node:{name}\"]\nlisten: \"{host}:{port}\"\n\
                 jetstream {{ store_dir: {store} }}\n\
                 cluster {{\n  name: \"orch-local\"\n  listen: \"127.0.0.1:{route}\"\n  routes: [{}]\n}}\n{extra}\n",
                routes.join(", ")
            );
            let conf = home.join("nats-server.conf");
            crate::files::write_file(&conf, text.as_bytes(), crate::files::PRIVATE)
                .map_err(BrokerError::io(&conf))?;
            cluster.nodes.push(Node {
                name,
                port: *port,
                conf,
                log: home.join("nats-server.log"),
                child: None,
            });
        }
        for i in 0..nodes {
            cluster.spawn(i)?;
        }
        for i in 0..nodes {
            cluster.wait_listening(i).await?;
        }
        cluster.wait_meta_leader().await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), BrokerError> {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(BrokerError::io(&node.log))?;
        let bin = server_bin();
        let child = spawn_server(&bin, &node.conf, log)?;
        node.child = Some(child);
        Ok(())
    }

    async fn wait_listening(&self, i: usize) -> Result<(), BrokerError> {
        let node = &self.nodes[i];
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect((self.host.as_str(), node.port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(BrokerError::NotListening {
                    server: node.name.clone(),
                    port: node.port,
                    log: node.log.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Waits until JetStream answers account info through some node: the
    /// cluster has elected its meta leader.
    pub async fn wait_meta_leader(&self) -> Result<(), BrokerError> {
        let within = Duration::from_secs(60);
        let deadline = Instant::now() + within;
        loop {
            if let Some(client) = self.client().await {
                let ask = client.request("$JS.API.INFO", bytes::Bytes::new());
                let info = tokio::time::timeout(Duration::from_secs(1), ask)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .and_then(|m| serde_json::from_slice::<serde_json::Value>(&m.payload).ok());
                if info.is_some_and(|v| v.get("error").is_none()) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(BrokerError::NoMetaLeader { within });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A plain client connected to any running node.
    async fn client(&self) -> Option<async_nats::Client> {
        let urls: Vec<async_nats::ServerAddr> = self
            .running()
            .filter_map(|i| self.url(i).parse().ok())
            .collect();
        async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(1))
            .ignore_discovered_servers()
            .connect(urls)
            .await
            .ok()
    }

    /// The nodes running now.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|i| self.nodes[*i].child.is_some())
    }

    /// Node `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        format!("nats://{}:{}", self.host, self.nodes[i].port)
    }

    /// Node `i`'s client port.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Every node's client URL, comma-separated (what `NATS_URL` takes).
    pub fn urls(&self) -> String {
        (0..self.nodes.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The process ids of the nodes running now.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.child.as_ref()?.id())
            .collect()
    }

    /// Node `i`'s name (`n0`, `n1`, …).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Node `i`'s log file.
    pub fn log(&self, i: usize) -> &Path {
        &self.nodes[i].log
    }

    /// Kills node `i` (SIGKILL) and waits for it to exit.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts node `i` again, on its ports and store, and waits until it
    /// accepts connections.
    pub async fn restart(&mut self, i: usize) -> Result<(), BrokerError> {
        self.kill(i).await;
        self.spawn(i)?;
        self.wait_listening(i).await
    }

    /// The node leading stream `stream` (a key-value bucket's stream is
    /// `KV_<bucket>`), as the stream's info says; `None` when no node
    /// answers or the stream has no leader now.
    pub async fn leader_of(&self, stream: &str) -> Option<usize> {
        let client = self.client().await?;
        let reply = tokio::time::timeout(
            Duration::from_secs(3),
            client.request(format!("$JS.API.STREAM.INFO.{stream}"), bytes::Bytes::new()),
        )
        .await
        .ok()?
        .ok()?;
        let info: serde_json::Value = serde_json::from_slice(&reply.payload).ok()?;
        let leader = info.pointer("/cluster/leader")?.as_str()?;
        self.nodes.iter().position(|n| n.name == leader)
    }

    /// The node leading stream `stream` once one does, asked every 50 ms
    /// for up to `within`.
    pub async fn wait_leader_of(
        &self,
        stream: &str,
        within: Duration,
    ) -> Result<usize, BrokerError> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.leader_of(stream).await {
                return Ok(i);
            }
            if Instant::now() > deadline {
                return Err(BrokerError::NoLeader {
                    stream: stream.into(),
                    within,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops every node.
    pub async fn stop(mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i).await;
        }
    }
}
