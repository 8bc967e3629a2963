//! The library's layers point one way (the table in `src/lib.rs`): every
//! module uses only modules of its own layer or below, and no two use each
//! other. So a face (`http`, and those to come) reaches the store and
//! the bus only through the service, and inherits its checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers of `src/lib.rs`, top first.
const LAYERS: [&[&str]; 8] = [
    &["server"],
    &["http", "worker"],
    &["service"],
    &["replication"],
    &["store", "bus", "broker"],
    &["run", "llm", "trigger", "access", "agent", "task", "audit"],
    &["claim", "task_token", "telemetry"],
    &[
        "event", "artifact", "envelope", "codec", "redact", "backoff", "target", "source", "files",
    ],
];

/// Below its layer, but never to be used by it: the HTTP API reaches the
/// store, the bus and the task tokens only through the service.
const FORBIDDEN: [(&str, &[&str]); 1] =
    [("http", &["store", "bus", "broker", "claim", "task_token"])];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The `crate::<module>` paths in the code of `path` (a file, or a
/// directory's `.rs` files), outside comments and test modules.
fn uses(path: &Path, out: &mut BTreeSet<String>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            uses(&entry.unwrap().path(), out);
        }
        return;
    }
    if path.extension().is_none_or(|e| e != "rs") {
        return;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let name: String = line[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
}

#[test]
fn every_module_uses_only_its_layer_and_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for module in LAYERS.iter().flat_map(|l| l.iter()) {
        let dir = src.join(module);
        let mut found = BTreeSet::new();
        if dir.is_dir() {
            uses(&dir, &mut found);
        } else {
            uses(&src.join(format!("{module}.rs")), &mut found);
        }
        found.remove(*module);
        graph.insert(module, found);
    }
    let mut wrong = Vec::new();
    for (module, used) in &graph {
        let here = layer(module).unwrap();
        for other in used {
            let forbidden = FORBIDDEN
                .iter()
                .any(|(m, never)| m == module && never.contains(&other.as_str()));
            if forbidden {
                wrong.push(format!(
                    "{module} uses {other}, which it must reach through the service"
                ));
            }
            match layer(other) {
                Some(there) if there < here => wrong.push(format!(
                    "{module} (layer {here}) uses {other} (layer {there})"
                )),
                Some(_) if graph[other.as_str()].contains(*module) => {
                    wrong.push(format!("{module} and {other} use each other"))
                }
                Some(_) => {}
                None => wrong.push(format!("{module} uses {other}, which no layer holds")),
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every module of the library is in a layer.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(name) = line
            .strip_prefix("pub mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            assert!(layer(name).is_some(), "`{name}` is in no layer");
        }
    }
}

/// The service's rooms point one way too (`src/service/mod.rs`): the
/// background `loops` may start the `engine` and call the acts; the
/// `engine` submits and cancels through the acts but knows nothing of the
/// loops; the acts the faces call (every file directly in `service/`)
/// name neither, reaching a loop or the engine only through the handles
/// the orchestrator holds. `mod.rs` and `orchestrator.rs` (the
/// orchestrator, which holds those handles), which compose them, are
/// exempt.
#[test]
fn the_service_rooms_use_one_another_one_way() {
    let service = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/service");
    let rooms: [(&str, &[&str]); 2] = [("engine", &["loops"]), ("", &["loops", "engine"])];
    let mut wrong = Vec::new();
    for (room, never) in rooms {
        let dir = service.join(room);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir()
                || (room.is_empty() && file == "orchestrator.rs")
                || file == "mod.rs"
                || !file.ends_with(".rs")
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for other in never {
                    // As a path segment: `super::loops`, `loops::x`.
                    let named = line.match_indices(other).any(|(i, _)| {
                        let (before, after) = (&line[..i], &line[i + other.len()..]);
                        let word = |c: char| c.is_alphanumeric() || c == '_';
                        !before.ends_with(word)
                            && !after.starts_with(word)
                            && (before.ends_with("::") || after.starts_with("::"))
                    });
                    if named {
                        let at = if room.is_empty() {
                            file.clone()
                        } else {
                            format!("{room}/{file}")
                        };
                        wrong.push(format!("service/{at} names `{other}`: {}", line.trim()));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The worker's pipeline and its handlers are two rooms: a handler
/// (`worker/handlers/`) uses only what `worker` exports (`Handler`,
/// `Task`, `Outcome`, a `Reporter`, its `Notes`), never a step of the
/// pipeline; the pipeline names no kind of handler, only `Handler`.
#[test]
fn the_worker_pipeline_and_its_handlers_stay_apart() {
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker");
    let code = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap();
        let code = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .to_string();
        code.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut wrong = Vec::new();
    let mut pipeline = Vec::new();
    for entry in std::fs::read_dir(&worker).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "rs") {
            pipeline.push(name.clone());
            if name != "mod" && code(&path).contains("handlers::") {
                wrong.push(format!("worker/{name}.rs names a kind of handler"));
            }
        }
    }
    for entry in std::fs::read_dir(worker.join("handlers")).unwrap() {
        let path = entry.unwrap().path();
        let code = code(&path);
        for step in pipeline.iter().filter(|s| *s != "mod") {
            let reached = [format!("worker::{step}::"), format!("super::super::{step}")];
            if reached.iter().any(|r| code.contains(r.as_str())) {
                let file = path.file_name().unwrap().to_string_lossy();
                wrong.push(format!(
                    "worker/handlers/{file} reaches into worker::{step}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
