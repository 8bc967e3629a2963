//! A2A 0.3's wire spellings, for clients that send no `A2A-Version`:
//! the same operations with `kind` discriminators, lower-case states and
//! roles, `file` parts, a `blocking` flag and the bare result objects.
//! Requests are rewritten into 1.0 before they are read, answers from
//! 1.0 after they are made, so one implementation serves both.

use serde_json::{Map, Value, json};

/// A 1.0 state name (`TASK_STATE_INPUT_REQUIRED`) in 0.3's words
/// (`input-required`).
fn state03(v1: &str) -> String {
    let s = v1.strip_prefix("TASK_STATE_").unwrap_or(v1);
    match s {
        "UNSPECIFIED" => "unknown".into(),
        other => other.to_ascii_lowercase().replace('_', "-"),
    }
}

/// A 0.3 state name in 1.0's words.
pub(super) fn state_v1(s03: &str) -> String {
    if s03.starts_with("TASK_STATE_") {
        return s03.to_string();
    }
    format!("TASK_STATE_{}", s03.to_ascii_uppercase().replace('-', "_"))
}

fn role03(v1: &str) -> &str {
    match v1 {
        "ROLE_USER" => "user",
        "ROLE_AGENT" => "agent",
        other => other,
    }
}

fn role_v1(r: &str) -> String {
    match r {
        "user" => "ROLE_USER".into(),
        "agent" => "ROLE_AGENT".into(),
        other => other.into(),
    }
}

fn part03(p: &Value) -> Value {
    let mut out = Map::new();
    if let Some(t) = p.get("text") {
        out.insert("kind".into(), "text".into());
        out.insert("text".into(), t.clone());
    } else if let Some(d) = p.get("data") {
        out.insert("kind".into(), "data".into());
        out.insert("data".into(), d.clone());
    } else {
        let mut file = Map::new();
        if let Some(u) = p.get("url") {
            file.insert("uri".into(), u.clone());
        }
        if let Some(b) = p.get("raw") {
            file.insert("bytes".into(), b.clone());
        }
        if let Some(m) = p.get("mediaType") {
            file.insert("mimeType".into(), m.clone());
        }
        if let Some(n) = p.get("filename") {
            file.insert("name".into(), n.clone());
        }
        out.insert("kind".into(), "file".into());
        out.insert("file".into(), Value::Object(file));
    }
    if let Some(m) = p.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    Value::Object(out)
}

fn part_v1(p: &Value) -> Value {
    let Some(obj) = p.as_object() else {
        return p.clone();
    };
    let mut out = Map::new();
    // A part without `kind` is told by its member (some 0.3 clients leave
    // it out): a `file` one keeps its file.
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .or_else(|| obj.contains_key("file").then_some("file"));
    match kind {
        Some("file") => {
            let file = obj.get("file").cloned().unwrap_or_default();
            if let Some(u) = file.get("uri") {
                out.insert("url".into(), u.clone());
            }
            if let Some(b) = file.get("bytes") {
                out.insert("raw".into(), b.clone());
            }
            if let Some(m) = file.get("mimeType") {
                out.insert("mediaType".into(), m.clone());
            }
            if let Some(n) = file.get("name") {
                out.insert("filename".into(), n.clone());
            }
        }
        _ => {
            for k in ["text", "data"] {
                if let Some(v) = obj.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
        }
    }
    if let Some(m) = obj.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    Value::Object(out)
}

fn map_parts(v: &mut Value, f: fn(&Value) -> Value) {
    if let Some(parts) = v.get_mut("parts").and_then(Value::as_array_mut) {
        for p in parts.iter_mut() {
            *p = f(p);
        }
    }
}

/// A 1.0 message in 0.3's words.
pub(super) fn message03(mut m: Value) -> Value {
    if let Some(r) = m.get("role").and_then(Value::as_str) {
        m["role"] = role03(r).into();
    }
    map_parts(&mut m, part03);
    m["kind"] = "message".into();
    m
}

fn status03(mut s: Value) -> Value {
    if let Some(st) = s.get("state").and_then(Value::as_str) {
        s["state"] = state03(st).into();
    }
    if let Some(m) = s.get_mut("message") {
        *m = message03(m.take());
    }
    s
}

fn artifact03(mut a: Value) -> Value {
    map_parts(&mut a, part03);
    a
}

/// A 1.0 task in 0.3's words.
pub(super) fn task03(mut t: Value) -> Value {
    if let Some(s) = t.get_mut("status") {
        *s = status03(s.take());
    }
    if let Some(list) = t.get_mut("artifacts").and_then(Value::as_array_mut) {
        for a in list.iter_mut() {
            *a = artifact03(a.take());
        }
    }
    if let Some(list) = t.get_mut("history").and_then(Value::as_array_mut) {
        for m in list.iter_mut() {
            *m = message03(m.take());
        }
    }
    t["kind"] = "task".into();
    t
}

/// A 1.0 `SendMessageResponse` (`{"task": ...}` or `{"message": ...}`)
/// as 0.3's bare result.
pub(super) fn send_result03(v: Value) -> Value {
    match v {
        Value::Object(mut o) => {
            if let Some(t) = o.remove("task") {
                task03(t)
            } else if let Some(m) = o.remove("message") {
                message03(m)
            } else {
                Value::Object(o)
            }
        }
        other => other,
    }
}

/// A 1.0 `StreamResponse` as 0.3's event (with `final` on status
/// updates that end the stream).
pub(super) fn stream03(v: Value, closes: bool) -> Value {
    let Value::Object(mut o) = v else { return v };
    if let Some(mut s) = o.remove("statusUpdate") {
        if let Some(st) = s.get_mut("status") {
            *st = status03(st.take());
        }
        s["kind"] = "status-update".into();
        s["final"] = closes.into();
        return s;
    }
    if let Some(mut a) = o.remove("artifactUpdate") {
        if let Some(art) = a.get_mut("artifact") {
            *art = artifact03(art.take());
        }
        a["kind"] = "artifact-update".into();
        return a;
    }
    send_result03(Value::Object(o))
}

/// A 1.0 `ListTasksResponse` in 0.3's words.
pub(super) fn list03(mut v: Value) -> Value {
    if let Some(list) = v.get_mut("tasks").and_then(Value::as_array_mut) {
        for t in list.iter_mut() {
            *t = task03(t.take());
        }
    }
    v
}

/// 0.3 `MessageSendParams` as a 1.0 `SendMessageRequest`.
pub(super) fn send_params_v1(mut p: Value) -> Value {
    if let Some(m) = p.get_mut("message") {
        if let Some(r) = m.get("role").and_then(Value::as_str) {
            m["role"] = role_v1(r).into();
        }
        map_parts(m, part_v1);
        if let Some(o) = m.as_object_mut() {
            o.remove("kind");
        }
    }
    if let Some(c) = p.get_mut("configuration").and_then(Value::as_object_mut) {
        if let Some(blocking) = c.remove("blocking") {
            let blocking = blocking.as_bool().unwrap_or(true);
            c.insert("returnImmediately".into(), json!(!blocking));
        }
        if let Some(push) = c.remove("pushNotificationConfig") {
            c.insert("taskPushNotificationConfig".into(), push_config_v1(push));
        }
    }
    p
}

/// A 0.3 `PushNotificationConfig` as 1.0's (`authentication.schemes`
/// becomes one `scheme`: the first).
fn push_config_v1(mut c: Value) -> Value {
    if let Some(auth) = c.get_mut("authentication").and_then(Value::as_object_mut)
        && let Some(schemes) = auth.remove("schemes")
    {
        let first = schemes.get(0).cloned().unwrap_or_else(|| json!(""));
        auth.insert("scheme".into(), first);
    }
    c
}

/// 0.3 `tasks/pushNotificationConfig/set` params (a
/// `TaskPushNotificationConfig`: `taskId` and `pushNotificationConfig`)
/// as 1.0's flat config.
pub(super) fn push_set_v1(p: Value) -> Value {
    let mut config = push_config_v1(
        p.get("pushNotificationConfig")
            .cloned()
            .unwrap_or(json!({})),
    );
    if let (Some(c), Some(task)) = (config.as_object_mut(), p.get("taskId")) {
        c.insert("taskId".into(), task.clone());
    }
    config
}

/// 0.3 get, list and delete params (`id` is the task's,
/// `pushNotificationConfigId` the config's) as 1.0's (`taskId`, `id`).
pub(super) fn push_ids_v1(p: Value) -> Value {
    let mut out = Map::new();
    if let Some(task) = p.get("id") {
        out.insert("taskId".into(), task.clone());
        // 0.3's get may leave the config out: the task's default one.
        let config = p.get("pushNotificationConfigId").unwrap_or(task);
        out.insert("id".into(), config.clone());
    }
    Value::Object(out)
}

/// A 1.0 `ListTaskPushNotificationConfigsResponse` as 0.3's answer: the
/// configs alone, each in 0.3's words.
pub(super) fn push_list03(v1: Value) -> Value {
    let configs = v1.get("configs").and_then(Value::as_array).cloned();
    Value::Array(
        configs
            .unwrap_or_default()
            .into_iter()
            .map(push03)
            .collect(),
    )
}

/// A 1.0 push config as 0.3's `TaskPushNotificationConfig`.
pub(super) fn push03(v1: Value) -> Value {
    let Value::Object(mut c) = v1 else { return v1 };
    let task = c.remove("taskId").unwrap_or(Value::Null);
    if let Some(auth) = c.get_mut("authentication").and_then(Value::as_object_mut)
        && let Some(scheme) = auth.remove("scheme")
    {
        auth.insert("schemes".into(), json!([scheme]));
    }
    json!({ "taskId": task, "pushNotificationConfig": c })
}

/// 0.3 list params as 1.0's (`status` in 1.0's words).
pub(super) fn list_params_v1(mut p: Value) -> Value {
    if let Some(s) = p.get("status").and_then(Value::as_str) {
        p["status"] = state_v1(s).into();
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_and_a_message_read_as_0_3_and_back() {
        let t = json!({"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "why"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"data": {"x": 1}}, {"url": "https://x/y", "mediaType": "text/plain", "filename": "y"}]}]});
        let old = task03(t);
        assert_eq!(old["kind"], "task");
        assert_eq!(old["status"]["state"], "input-required");
        assert_eq!(old["status"]["message"]["role"], "agent");
        assert_eq!(
            old["status"]["message"]["parts"][0],
            json!({"kind": "text", "text": "why"})
        );
        assert_eq!(
            old["artifacts"][0]["parts"][0],
            json!({"kind": "data", "data": {"x": 1}})
        );
        assert_eq!(
            old["artifacts"][0]["parts"][1],
            json!({"kind": "file", "file": {"uri": "https://x/y", "mimeType": "text/plain", "name": "y"}})
        );
        let sent = send_params_v1(
            json!({"message": {"kind": "message", "messageId": "m", "role": "user",
            "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "https://x", "mimeType": "image/png"}}]},
            "configuration": {"blocking": false}}),
        );
        assert_eq!(sent["message"]["role"], "ROLE_USER");
        assert_eq!(sent["message"]["parts"][0], json!({"text": "hi"}));
        assert_eq!(
            sent["message"]["parts"][1],
            json!({"url": "https://x", "mediaType": "image/png"})
        );
        assert_eq!(sent["configuration"], json!({"returnImmediately": true}));
        // Without `kind`, a file part keeps its file.
        let bare = send_params_v1(json!({"message": {"messageId": "m", "role": "user",
            "parts": [{"file": {"bytes": "aGk=", "mimeType": "text/plain", "name": "a.txt"}}]}}));
        assert_eq!(
            bare["message"]["parts"][0],
            json!({"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt"})
        );
        assert_eq!(state_v1("auth-required"), "TASK_STATE_AUTH_REQUIRED");
        let ev = stream03(
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}),
            true,
        );
        assert_eq!(
            ev,
            json!({"kind": "status-update", "taskId": "t", "contextId": "c", "status": {"state": "completed"}, "final": true})
        );
    }
}
