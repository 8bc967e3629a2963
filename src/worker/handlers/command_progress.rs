//! A command's progress channel: file descriptor 3 of the process
//! ([`PROGRESS_FD`], also in `ORCH_PROGRESS_FD`), a pipe on which it writes
//! one JSON object per line: `{"message": "..."}`, `{"artifact": {...}}`
//! or both (`docs/operations.md`, "Progress from a command"). Each line is
//! one progress report of the task. A line `{"input_required": "..."}` or
//! `{"reply": "..."}` says how the run ends instead of its stdout, once
//! the command exits 0: waiting for input, or answering with that message
//! alone. A line that is none of these is skipped with a warning in the
//! worker's log; the task goes on.

use std::os::fd::OwnedFd;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tracing::warn;

use crate::artifact::Artifact;
use crate::codec::{DecodeError, Strictness, Validate};
use crate::envelope::TaskId;
use crate::worker::{Reporter, Update};

/// The descriptor the channel is on, in the command's process.
pub const PROGRESS_FD: i32 = 3;

/// The longest line: one report travels in one event, which the broker's
/// default `max_payload` (1 MiB) bounds.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// One line of the channel.
#[derive(Debug, Deserialize)]
struct Line {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, deserialize_with = "crate::codec::optional_object")]
    artifact: Option<Artifact>,
    #[serde(default)]
    input_required: Option<String>,
    #[serde(default)]
    reply: Option<String>,
}

/// How a command's run ends, when a line said so (instead of its stdout).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ending {
    /// It waits for input; what it needs.
    InputRequired(String),
    /// It answers with this message alone.
    Reply(String),
}

impl Validate for Line {
    fn validate(&self) -> Result<(), DecodeError> {
        let ending = self.input_required.is_some() || self.reply.is_some();
        let report = self.message.is_some() || self.artifact.is_some();
        if ending && (report || (self.input_required.is_some() && self.reply.is_some())) {
            return Err(DecodeError::invalid(
                "input_required",
                "a line with `input_required` or `reply` has nothing else",
            ));
        }
        if !ending && !report {
            return Err(DecodeError::invalid(
                "message",
                "a line has a `message`, an `artifact` or both (or `input_required`, or `reply`)",
            ));
        }
        match &self.artifact {
            Some(artifact) => artifact.validate("artifact"),
            None => Ok(()),
        }
    }
}

/// A pipe for the channel: the end the command writes (to map to
/// [`PROGRESS_FD`]) and the end read here.
pub(super) fn pipe() -> std::io::Result<(OwnedFd, tokio::net::unix::pipe::Receiver)> {
    let (reader, writer) = std::io::pipe()?;
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
    Ok((OwnedFd::from(writer), reader))
}

/// Reads the channel to its end, each line reported as it comes; the last
/// ending a line gave, if any.
pub(super) async fn forward(
    pipe: tokio::net::unix::pipe::Receiver,
    progress: &Reporter,
    task_id: TaskId,
) -> Option<Ending> {
    let mut ending = None;
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        // One byte past the limit tells a whole line from a longer one.
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return ending,
            Ok(_) => {}
        }
        number += 1;
        if line.len() > MAX_LINE_BYTES && line.last() != Some(&b'\n') {
            warn!(%task_id, line = number, "progress line longer than {MAX_LINE_BYTES} bytes: skipped");
            if !skip_line(&mut reader).await {
                return ending;
            }
            continue;
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match crate::codec::decode::<Line>(text, Strictness::Strict, MAX_LINE_BYTES) {
            Ok(Line {
                input_required: Some(m),
                ..
            }) => ending = Some(Ending::InputRequired(m)),
            Ok(Line { reply: Some(m), .. }) => ending = Some(Ending::Reply(m)),
            Ok(Line {
                message, artifact, ..
            }) => {
                progress.report(Update { message, artifact });
            }
            Err(e) => {
                warn!(%task_id, line = number, error = %e, "progress line skipped");
            }
        }
    }
}

/// Skips the rest of a line, up to its newline, without keeping it; false
/// at the channel's end.
async fn skip_line(reader: &mut (impl AsyncBufReadExt + Unpin)) -> bool {
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => return false,
        };
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return true;
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}
