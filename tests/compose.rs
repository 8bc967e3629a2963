//! docker-compose.yml agrees with the CLI: every service runs a command the
//! binary has, with flags it accepts, variables it reads, and ports it
//! listens on. (No Docker engine runs here, so the file is checked, not run.)

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn compose() -> Value {
    let text = std::fs::read_to_string(root().join("docker-compose.yml")).unwrap();
    serde_norway::from_str(&text).unwrap()
}

fn help(subcommand: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args([subcommand, "--help"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`orchestrator {subcommand}` does not exist"
    );
    String::from_utf8(out.stdout).unwrap()
}

fn command(service: &Value) -> Vec<String> {
    service["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The services the design names are all there.
#[test]
fn every_process_of_the_design_is_a_service() {
    let c = compose();
    let services: BTreeSet<&str> = c["services"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for name in [
        "nats",
        "jaeger",
        "orchestrator",
        "knowledge-agent",
        "outlook-agent",
    ] {
        assert!(services.contains(name), "missing service {name}");
    }
    let nats = command(&c["services"]["nats"]);
    assert!(
        nats.contains(&"-js".to_string()),
        "the broker must run JetStream"
    );
    assert!(
        c["services"]["nats"]["volumes"]
            .as_array()
            .is_some_and(|v| !v.is_empty()),
        "JetStream needs a volume"
    );
    assert_eq!(
        c["services"]["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"],
        "true"
    );
}

/// The orchestrator and agent services run real subcommands with flags the
/// binary accepts and paths that exist; variables are ones the CLI reads.
#[test]
fn service_commands_flags_and_variables_match_the_cli() {
    let c = compose();
    // ORCH_OUTBOX is read by the outlook agent's script.
    let known_vars = [
        "NATS_URL",
        "ORCH_HTTP_ADDR",
        "ORCH_DATA_DIR",
        "ORCH_OUTBOX",
        "ORCH_SIGNING_KEY",
        "ORCH_VERIFY_KEY",
        "NATS_NKEY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "ORCH_JAEGER_URL",
        "ORCH_METRICS_ADDR",
    ];
    for name in ["orchestrator", "knowledge-agent", "outlook-agent"] {
        let service = &c["services"][name];
        assert_eq!(
            service["build"], ".",
            "{name} is built from the repository's Dockerfile"
        );
        let cmd = command(service);
        assert_eq!(cmd[0], "orchestrator", "{name}");
        let help = help(&cmd[1]);
        for (i, arg) in cmd.iter().enumerate().skip(2) {
            if let Some(flag) = arg.strip_prefix("--") {
                assert!(
                    help.contains(&format!("--{flag}")),
                    "{name}: `{}` has no --{flag}",
                    cmd[1]
                );
                let value = &cmd[i + 1];
                if flag == "agent" {
                    assert!(
                        root().join(value).join("agent.json").is_file(),
                        "{name}: {value} has no agent.json"
                    );
                }
                if flag == "triggers" || flag == "agents" {
                    assert!(
                        root().join(value).is_dir(),
                        "{name}: {value} is not a directory"
                    );
                }
            }
        }
        for var in service["environment"].as_object().unwrap().keys() {
            assert!(
                known_vars.contains(&var.as_str()),
                "{name}: nothing reads {var}"
            );
        }
        assert_eq!(
            service["environment"]["NATS_URL"], "nats://nats:4222",
            "{name}"
        );
    }
    // The variables the compose file sets for the orchestrator are the ones
    // its `run` command documents.
    let run_help = help("run");
    for var in ["NATS_URL", "ORCH_HTTP_ADDR", "ORCH_DATA_DIR"] {
        assert!(
            run_help.contains(var),
            "`orchestrator run --help` does not mention {var}"
        );
    }
}

/// Every service exports its spans to the compose file's Jaeger over
/// OTLP/HTTP, trace links point at the UI's published port, and each worker
/// serves `/metrics` on a published port.
#[test]
fn every_service_traces_to_jaeger_and_workers_serve_metrics() {
    let c = compose();
    let jaeger_ports: Vec<&str> = c["services"]["jaeger"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(jaeger_ports.contains(&"4318:4318") && jaeger_ports.contains(&"16686:16686"));
    for name in ["orchestrator", "knowledge-agent", "outlook-agent"] {
        let s = &c["services"][name];
        assert_eq!(
            s["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://jaeger:4318",
            "{name}"
        );
        assert!(s["depends_on"]["jaeger"].is_object(), "{name}");
    }
    assert_eq!(
        c["services"]["orchestrator"]["environment"]["ORCH_JAEGER_URL"],
        "http://localhost:16686"
    );
    assert!(help("trace").contains("ORCH_JAEGER_URL"));
    let worker_help = help("worker");
    assert!(worker_help.contains("ORCH_METRICS_ADDR"));
    for name in ["knowledge-agent", "outlook-agent"] {
        let s = &c["services"][name];
        let addr = s["environment"]["ORCH_METRICS_ADDR"].as_str().unwrap();
        let port = addr.rsplit(':').next().unwrap();
        assert!(
            s["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_str().unwrap().ends_with(&format!(":{port}"))),
            "{name}: the metrics port is not published"
        );
    }
}

/// Security is on in the compose file too: the orchestrator signs with a
/// key only it mounts, every worker verifies with the public key, and the
/// variables are ones `run` and `worker` read.
#[test]
fn the_orchestrator_signs_and_every_worker_verifies() {
    let c = compose();
    let keys = c["services"]["keys"]["command"].to_string();
    assert!(
        keys.contains("orchestrator keys generate --dir /secret"),
        "{keys}"
    );
    assert!(help("keys").contains("generate"));
    let o = &c["services"]["orchestrator"];
    assert_eq!(o["environment"]["ORCH_SIGNING_KEY"], "/secret/signing.pem");
    assert!(help("run").contains("ORCH_SIGNING_KEY"));
    assert!(help("worker").contains("ORCH_VERIFY_KEY"));
    for name in ["knowledge-agent", "outlook-agent"] {
        let w = &c["services"][name];
        assert_eq!(
            w["environment"]["ORCH_VERIFY_KEY"], "/keys/verify.pem",
            "{name}"
        );
        let volumes = w["volumes"].to_string();
        assert!(volumes.contains("verify-key:/keys:ro"), "{name}: {volumes}");
        assert!(
            !volumes.contains("signing-key"),
            "{name} can read the private key"
        );
    }
}

/// The bus is least-privilege in the compose file too: the broker reads
/// the users `nats config` writes, and each process logs in with a seed
/// only it mounts.
#[test]
fn every_process_logs_in_to_the_bus_as_its_own_user() {
    let c = compose();
    let keys = c["services"]["keys"]["command"].to_string();
    assert!(
        keys.contains("orchestrator nats config --agents agents"),
        "{keys}"
    );
    assert!(help("nats").contains("config"));
    let nats = command(&c["services"]["nats"]);
    assert!(
        nats.join(" ").contains("-c /natsauth/server.conf"),
        "{nats:?}"
    );
    let seeds = [
        ("orchestrator", "orchestrator"),
        ("knowledge-agent", "agent-knowledge-agent"),
        ("outlook-agent", "agent-outlook-agent"),
    ];
    for (service, user) in seeds {
        let s = &c["services"][service];
        let seed = format!("/nats/{user}.nk");
        assert_eq!(s["environment"]["NATS_NKEY"], seed.as_str(), "{service}");
        assert!(
            keys.contains(&format!("{user}.nk")),
            "{service}: no seed copied"
        );
        let volumes = s["volumes"].to_string();
        assert!(
            !volumes.contains("nats-seeds"),
            "{service} can read every seed"
        );
    }
    assert!(help("run").contains("NATS_NKEY"));
    assert!(help("worker").contains("NATS_NKEY"));
}

/// The published port is the one the orchestrator listens on.
#[test]
fn the_published_port_is_the_http_port() {
    let c = compose();
    let o = &c["services"]["orchestrator"];
    let addr = o["environment"]["ORCH_HTTP_ADDR"].as_str().unwrap();
    let port = addr.rsplit(':').next().unwrap();
    let published: Vec<&str> = o["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        published.iter().any(|p| p.ends_with(&format!(":{port}"))),
        "{published:?} does not publish {port}"
    );
    assert!(
        addr.starts_with("0.0.0.0:"),
        "inside a container the API must listen on all interfaces"
    );
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("EXPOSE {port}")));
    assert!(
        dockerfile.contains("python3"),
        "the example agents need python3 in the image"
    );
}

/// docker-compose.cluster.yml: three NATS nodes routed to each other with
/// JetStream fsyncing every write, every process given all three URLs (a
/// list `NATS_URL` takes), and the orchestrator's settings asking for three
/// replicas (a file `run --config` accepts).
#[test]
fn the_cluster_file_runs_the_same_services_on_three_replicated_nodes() {
    let text = std::fs::read_to_string(root().join("docker-compose.cluster.yml")).unwrap();
    let c: Value = serde_norway::from_str(&text).unwrap();
    let base = compose();
    let keys = command(&base["services"]["keys"]).join(" ");
    assert!(keys.contains("sync_interval: always") && keys.contains("/natsauth/cluster.conf"));
    let routes = "nats://nats:6222,nats://nats-b:6222,nats://nats-c:6222";
    for node in ["nats", "nats-b", "nats-c"] {
        let cmd = command(&c["services"][node]);
        assert!(
            cmd.contains(&"/natsauth/cluster.conf".to_string()),
            "{node}: {cmd:?}"
        );
        assert!(cmd.contains(&routes.to_string()), "{node}: {cmd:?}");
    }
    let urls = "nats://nats:4222,nats://nats-b:4222,nats://nats-c:4222";
    let parsed: orchestrator::bus::Servers = urls.parse().unwrap();
    assert_eq!(parsed.to_string(), urls);
    for service in ["orchestrator", "knowledge-agent", "outlook-agent"] {
        assert!(
            base["services"][service].is_object(),
            "{service} is not a base service"
        );
        assert_eq!(
            c["services"][service]["environment"]["NATS_URL"], urls,
            "{service}"
        );
    }
    let run = command(&c["services"]["orchestrator"]);
    let run_help = help("run");
    for flag in run.iter().filter(|a| a.starts_with("--")) {
        assert!(run_help.contains(flag.as_str()), "`run` has no {flag}");
    }
    let settings = std::fs::read(root().join("deploy/cluster.json")).unwrap();
    let config = orchestrator::server::Settings::decode(&settings).unwrap();
    assert_eq!(config.service.bus.replicas, 3);
}

/// docker-compose.cluster.yml runs two orchestrators sharing the store's
/// log: the second is the first with its own data volume, port and
/// advertised URL; both mount the keys `shared-keys` makes, whose command,
/// run here against the real CLI, writes an administrator API key and an
/// Ed25519 key for push deliveries (and keeps them when run again).
#[test]
fn the_cluster_file_runs_two_orchestrators_sharing_the_log_and_keys() {
    let text = std::fs::read_to_string(root().join("docker-compose.cluster.yml")).unwrap();
    let c: Value = serde_norway::from_str(&text).unwrap();
    let base = compose();
    let settings = std::fs::read(root().join("deploy/cluster.json")).unwrap();
    let config = orchestrator::server::Settings::decode(&settings).unwrap();
    assert!(config.service.replication.enabled);
    let (a, b) = (
        &c["services"]["orchestrator"],
        &c["services"]["orchestrator-b"],
    );
    assert_eq!(command(a), command(b));
    assert!(help("run").contains("ORCH_ADVERTISE_URL"));
    assert_eq!(
        a["environment"]["ORCH_ADVERTISE_URL"],
        "http://orchestrator:8080"
    );
    assert_eq!(
        b["environment"]["ORCH_ADVERTISE_URL"],
        "http://orchestrator-b:8080"
    );
    // The second has every variable of the first (base and cluster file).
    let first = &base["services"]["orchestrator"]["environment"];
    for (name, value) in first.as_object().unwrap() {
        let value = a["environment"].get(name).unwrap_or(value);
        assert_eq!(&b["environment"][name], value, "{name}");
    }
    assert_eq!(b["ports"][0], "8081:8080");
    let volumes = |s: &Value| -> Vec<String> {
        s["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    for s in [a, b] {
        assert!(volumes(s).contains(&"orchestrator-keys:/data/keys".to_string()));
    }
    assert!(volumes(b).contains(&"orchestrator-b-data:/data".to_string()));
    // The keys' command, run here.
    let script = command(&c["services"]["shared-keys"])[2].clone();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let script = script
        .replace("/keys/", &format!("{}/", keys.display()))
        .replace("/tmp/made", &dir.path().join("made").display().to_string());
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_orchestrator"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for _ in 0..2 {
        let out = Command::new("sh")
            .args(["-c", &script])
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let admin = std::fs::read_to_string(keys.join("admin.api-key")).unwrap();
    assert!(
        admin.trim().starts_with("orch_") && !admin.contains('"'),
        "{admin}"
    );
    let (_, made) = orchestrator::task_token::push_key::PushKey::open_or_create(
        &keys.join("delivery-signing.pem"),
    )
    .unwrap();
    assert!(!made, "the push deliveries' key was not written");
}
