//! What task tokens and API credentials cost per task, printed as figures
//! (not a pass/fail test): `cargo bench --bench tokens`.
//!
//! Measures, for a typical envelope, each step the orchestrator and the
//! worker add per published attempt: the envelope hash (RFC 8785 + SHA-256),
//! minting (hash + sign), and verifying (signature, claims, wire hash); and
//! what authenticating one API call costs, with an API key and with an
//! issuer's JWT.

use std::time::{Duration, Instant};

use orchestrator::envelope::{Action, AgentName, Envelope, Sender};
use orchestrator::task_token::keys::{self, KeyKind};
use orchestrator::task_token::{Minter, SigningKey, Verifier, VerifyKey, envelope_hash, wire_hash};
use serde_json::json;

const N: u32 = 20_000;

fn per_op(what: &str, mut f: impl FnMut(u32)) {
    for i in 0..N / 10 {
        f(i);
    }
    let start = Instant::now();
    for i in 0..N {
        f(i);
    }
    let each: Duration = start.elapsed() / N;
    println!("{what:<40} {:>8.1} µs", each.as_secs_f64() * 1e6);
}

fn main() {
    let mut params = serde_json::Map::new();
    params.insert(
        "query".into(),
        json!("what did we decide about the architecture"),
    );
    params.insert("limit".into(), json!(5));
    let mut env = Envelope::new(
        "orchestrator".parse::<Sender>().unwrap(),
        "knowledge-agent".parse::<AgentName>().unwrap(),
        "search:kb".parse::<Action>().unwrap(),
        params,
    );
    env.payload.meta.system_prompt = Some("You are a careful librarian. Cite sources.".into());
    env.control.required_scopes = vec!["Files.Read".parse().unwrap()];
    for kind in [KeyKind::EdDsa, KeyKind::Hs256] {
        let dir = tempfile::tempdir().unwrap();
        let files = keys::generate(dir.path(), kind, false).unwrap();
        let minter = Minter::new(
            SigningKey::load(files.signing.to_str().unwrap()).unwrap(),
            "orchestrator",
            Duration::from_secs(900),
        );
        let verifier = Verifier::new(
            VerifyKey::load(files.verify.to_str().unwrap()).unwrap(),
            "orchestrator",
            "knowledge-agent",
            Duration::from_secs(30),
        );
        println!("{kind:?}:");
        per_op("  envelope hash (typed, orchestrator)", |_| {
            envelope_hash(&env).unwrap();
        });
        let bytes = env.to_vec();
        per_op("  envelope hash (wire, worker)", |_| {
            wire_hash(&bytes).unwrap();
        });
        per_op("  mint (hash + sign)", |_| {
            minter.mint(&env, "alice").unwrap();
        });
        let mut sent = env.clone();
        sent.header.token = Some(minter.mint(&env, "alice").unwrap());
        let wire = sent.to_vec();
        let needed = ["Files.Read".parse().unwrap()];
        per_op("  verify (signature, claims, wire hash)", |_| {
            verifier.verify(&wire, &sent, &needed).unwrap();
        });
    }
    api_calls();
}

/// One API call's authentication: an API key (a SHA-256 and a lookup) and
/// an issuer's EdDSA JWT (a signature check and claims).
fn api_calls() {
    use orchestrator::access::{
        ApiAuthSettings, ApiKeyEntry, Authenticator, Grants, IssuerSettings,
    };
    let dir = tempfile::tempdir().unwrap();
    let idp = keys::generate(&dir.path().join("idp"), KeyKind::EdDsa, false).unwrap();
    let key = orchestrator::access::api_keys::generate();
    let settings = ApiAuthSettings {
        api_keys: vec![ApiKeyEntry {
            principal: "alice".into(),
            scopes: Grants::new(["Files.Read"]),
            sha256: orchestrator::access::api_keys::hash(&key),
        }],
        jwt: Some(IssuerSettings {
            issuer: "https://idp".into(),
            audience: "api".into(),
            public_key: Some(idp.verify.clone()),
            jwks_file: None,
            leeway: Duration::from_secs(30),
        }),
        ..ApiAuthSettings::default()
    };
    let access = Authenticator::open(&settings, dir.path()).unwrap();
    let signing =
        jsonwebtoken::EncodingKey::from_ed_pem(&std::fs::read(&idp.signing).unwrap()).unwrap();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let jwt = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA),
        &json!({"iss": "https://idp", "aud": "api", "sub": "dave", "exp": exp, "scope": "Files.Read"}),
        &signing,
    )
    .unwrap();
    println!("API call:");
    let with_key = format!("Bearer {key}");
    per_op("  authenticate (API key)", |_| {
        access.authenticate(Some(&with_key)).unwrap();
    });
    let with_jwt = format!("Bearer {jwt}");
    per_op("  authenticate (issuer JWT, EdDSA)", |_| {
        access.authenticate(Some(&with_jwt)).unwrap();
    });
}
