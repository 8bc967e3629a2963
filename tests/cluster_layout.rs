//! The bus on a real three-node NATS cluster: several broker URLs, and
//! `bus.replicas` for every stream and bucket.

use crate::common;

use std::time::Duration;

use common::cluster::NatsCluster;
use common::nats::NatsServer;
use orchestrator::bus::{Bus, BusSettings, DeliverySettings};
use orchestrator::envelope::{AgentName, Priority};

fn replicated(replicas: usize) -> BusSettings {
    BusSettings {
        replicas,
        ..BusSettings::default()
    }
}

async fn replicas_of(bus: &Bus, stream: &str) -> usize {
    let mut s = bus.jetstream().get_stream(stream).await.unwrap();
    s.info().await.unwrap().config.num_replicas
}

/// Provisioned with `bus.replicas: 3`, every stream and bucket has three
/// copies; an existing one-copy layout is brought to three at the next
/// start, and an agent's consumer follows its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_and_bucket_gets_the_replicas_asked_for() {
    let cluster = NatsCluster::start().await;
    let one = Bus::connect_now(&cluster.urls(), replicated(1))
        .await
        .unwrap();
    one.provision().await.unwrap();
    let agent: AgentName = "a".parse().unwrap();
    let settings = DeliverySettings::from(one.settings());
    one.agent_consumer(&agent, Priority::Normal, &settings)
        .await
        .unwrap();
    let names = one.names().clone();
    let streams = [
        names.tasks_stream(),
        names.events_stream(),
        names.dlq_stream(),
        names.advisories_stream(),
        format!("KV_{}", names.agents_bucket()),
        format!("KV_{}", names.deliveries_bucket()),
    ];
    for s in &streams {
        assert_eq!(replicas_of(&one, s).await, 1, "{s}");
    }
    // More copies than the cluster has servers: refused, naming the
    // setting.
    let five = Bus::connect_now(&cluster.urls(), replicated(5))
        .await
        .unwrap();
    let e = five.provision().await.unwrap_err();
    assert!(
        matches!(e, orchestrator::bus::BusError::Replicas { replicas: 5, .. }),
        "{e:?}"
    );
    // JetStream's own refusal is kept behind it.
    let refusal = std::error::Error::source(&e).expect("a source");
    assert!(
        refusal
            .downcast_ref::<async_nats::jetstream::context::CreateStreamError>()
            .is_some()
            || refusal
                .downcast_ref::<async_nats::jetstream::context::CreateKeyValueError>()
                .is_some(),
        "{refusal:?}"
    );
    assert!(e.to_string().contains("bus.replicas is 5"), "{e}");
    let three = Bus::connect_now(&cluster.urls(), replicated(3))
        .await
        .unwrap();
    three.provision().await.unwrap();
    for s in &streams {
        assert_eq!(replicas_of(&three, s).await, 3, "{s}");
    }
    let consumer = names.agent_consumer(&agent, Priority::Normal);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let stream = three
            .jetstream()
            .get_stream(names.tasks_stream())
            .await
            .unwrap();
        let info = stream.consumer_info(&consumer).await.unwrap();
        let copies = info
            .cluster
            .as_ref()
            .map(|c| c.replicas.len() + 1)
            .unwrap_or(1);
        if copies == 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the consumer has {copies} copies"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A single server cannot keep three copies: provisioning says which
/// setting to change, and how.
#[tokio::test]
async fn replicas_on_a_single_server_are_refused_plainly() {
    let nats = NatsServer::start();
    let bus = Bus::connect_now(&nats.url(), replicated(3)).await.unwrap();
    let e = bus.provision().await.unwrap_err().to_string();
    assert!(e.contains("bus.replicas is 3"), "{e}");
    assert!(e.contains("not part of a cluster"), "{e}");
    assert!(e.contains("set bus.replicas to 1"), "{e}");
}
