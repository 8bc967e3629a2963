//! The bus against a real nats-server: provisioning and publishing.

use crate::common;

use common::envelope;
use common::nats::NatsServer;
use orchestrator::bus::{Bus, BusSettings};
use orchestrator::telemetry::context::StoredTrace;
use serde_json::json;

/// Provisioning twice is harmless, and a republished envelope (same task,
/// same attempt) is stored once: JetStream drops it by `Nats-Msg-Id`.
#[tokio::test]
async fn provisioning_is_idempotent_and_republishing_is_deduplicated() {
    let nats = NatsServer::start();
    let bus = Bus::connect_now(&nats.url(), BusSettings::default())
        .await
        .unwrap();
    bus.provision().await.unwrap();
    bus.provision().await.unwrap();
    let env = envelope("echo", "echo", json!({"x": 1}), "k");
    common::traced();
    let trace = tracing::info_span!("test");
    bus.publish_envelope(&env, &trace, false).await.unwrap();
    bus.publish_envelope(&env, &trace, false).await.unwrap();
    let mut next = env.clone();
    next.control.attempt = std::num::NonZeroU32::new(2).unwrap();
    bus.publish_envelope(&next, &tracing::Span::none(), false)
        .await
        .unwrap();
    let mut stream = bus.jetstream().get_stream("ORCH_TASKS").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 2);
    // Headers: the ids, and the caller's trace (as a child span).
    let first = stream.get_raw_message(1).await.unwrap();
    let header = |name: &str| first.headers.get(name).map(|v| v.to_string());
    assert_eq!(
        header("Nats-Msg-Id"),
        Some(format!("{}.1", env.header.task_id))
    );
    assert_eq!(header("Orch-Task-Id"), Some(env.header.task_id.to_string()));
    assert_eq!(
        header("Orch-Correlation-Id"),
        Some(env.header.correlation_id.to_string())
    );
    let sent = header("traceparent").unwrap();
    assert_eq!(
        sent.split('-').nth(1).map(str::to_string),
        StoredTrace::of(&trace).trace_id()
    );
    assert!(bus.agents().await.is_ok());
    assert!(bus.deliveries().await.is_ok());
}

/// With nothing listening at the URL, connecting fails with a clear error.
#[tokio::test]
async fn connecting_to_nothing_fails_clearly() {
    let err = Bus::connect_now("nats://127.0.0.1:1", BusSettings::default())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("nats://127.0.0.1:1"), "{err}");
}

/// A broker that requires a login refuses an unauthenticated client; the
/// credentials in `bus.auth` (here a user and password, and separately a
/// token) are passed through and the bus works.
#[tokio::test]
async fn credentials_from_the_settings_are_passed_through() {
    use orchestrator::bus::NatsAuth;
    use orchestrator::redact::Secret;
    for (server, auth) in [
        (
            "authorization { user: orch, password: \"s3cret-pw\" }",
            NatsAuth {
                user: Some("orch".into()),
                password: Some(Secret::new("s3cret-pw")),
                ..NatsAuth::default()
            },
        ),
        (
            "authorization { token: \"t0ken-xyz\" }",
            NatsAuth {
                token: Some(Secret::new("t0ken-xyz")),
                ..NatsAuth::default()
            },
        ),
    ] {
        let nats = NatsServer::start_with(server);
        let anonymous = Bus::connect_now(&nats.url(), BusSettings::default()).await;
        let err = anonymous
            .err()
            .expect("an unauthenticated client was let in");
        assert!(err.to_string().to_lowercase().contains("auth"), "{err}");
        let wrong = BusSettings {
            auth: NatsAuth {
                token: Some(Secret::new("wrong")),
                ..NatsAuth::default()
            },
            ..BusSettings::default()
        };
        assert!(Bus::connect_now(&nats.url(), wrong).await.is_err());
        let config = BusSettings {
            auth,
            ..BusSettings::default()
        };
        let bus = Bus::connect_now(&nats.url(), config).await.unwrap();
        bus.provision().await.unwrap();
        let env = envelope("echo", "echo", json!({}), "k");
        bus.publish_envelope(&env, &tracing::Span::none(), false)
            .await
            .unwrap();
    }
}
