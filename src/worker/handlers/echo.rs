//! The built-in `echo` handler: answers with the task's own params.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::worker::{Handler, Outcome, Task};

/// Answers every task with its own params: `{"echo": params}`. For tests
/// and benchmarks.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoHandler;

impl Handler for EchoHandler {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let params = Value::Object(task.envelope.payload.params);
        Box::pin(async move { Outcome::completed(serde_json::json!({ "echo": params })) })
    }
}
