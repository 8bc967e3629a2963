//! Artifacts a handler produces, as they travel on the bus and are kept:
//! A2A's `Artifact` and `Part`, in the bus's snake_case spelling.
//!
//! Schema: `$defs/artifact` and `$defs/part` in
//! `docs/schema/worker-event.schema.json`.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::DecodeError;

/// The longest artifact id.
pub const MAX_ARTIFACT_ID_LEN: usize = 128;

/// One piece of an artifact's content: exactly one of `text`, `data`,
/// `url` and `raw`, with an optional media type and file name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Part {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Any JSON value but `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// A file by reference: its URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file by value: its bytes, base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The content's media type (`text/plain`, `application/pdf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// A file name for the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }

    /// A data part.
    pub fn data(data: Value) -> Self {
        Part {
            data: Some(data),
            ..Part::default()
        }
    }

    /// The bytes of a `raw` part, decoded.
    pub fn raw_bytes(&self) -> Option<Vec<u8>> {
        self.raw.as_deref().and_then(|r| BASE64.decode(r).ok())
    }

    fn validate(&self, field: &str) -> Result<(), DecodeError> {
        let set = [
            self.text.is_some(),
            self.data.is_some(),
            self.url.is_some(),
            self.raw.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err(DecodeError::invalid(
                field,
                "a part has exactly one of `text`, `data`, `url` and `raw`",
            ));
        }
        if let Some(raw) = &self.raw
            && BASE64.decode(raw).is_err()
        {
            return Err(DecodeError::invalid(
                format!("{field}.raw"),
                "not base64 (standard alphabet, padded)",
            ));
        }
        Ok(())
    }
}

/// Standard padded base64; trailing bits are not checked, as the schema's
/// pattern does not check them.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// An output of a task: a document, a file, a data set, in parts. A
/// progress report may send it in chunks: `append` adds the parts to the
/// artifact of the same id sent before, `last_chunk` says it is whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Unique within the task: 1 to 128 bytes.
    pub artifact_id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its content; at least one part.
    #[serde(deserialize_with = "crate::codec::objects")]
    pub parts: Vec<Part>,
    /// These parts continue the artifact of the same id sent before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// This is the artifact's last chunk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
}

impl Artifact {
    /// A whole artifact of one part.
    pub fn new(id: impl Into<String>, part: Part) -> Self {
        Artifact {
            artifact_id: id.into(),
            name: None,
            description: None,
            parts: vec![part],
            append: false,
            last_chunk: false,
        }
    }

    /// Checks the rules serde cannot: the id's length, at least one part,
    /// each part's one content. `field` is the artifact's path, for errors.
    pub fn validate(&self, field: &str) -> Result<(), DecodeError> {
        if self.artifact_id.is_empty() || self.artifact_id.len() > MAX_ARTIFACT_ID_LEN {
            return Err(DecodeError::invalid(
                format!("{field}.artifact_id"),
                format!("must be 1 to {MAX_ARTIFACT_ID_LEN} bytes"),
            ));
        }
        if self.parts.is_empty() {
            return Err(DecodeError::invalid(
                format!("{field}.parts"),
                "an artifact has at least one part",
            ));
        }
        for (i, part) in self.parts.iter().enumerate() {
            part.validate(&format!("{field}.parts[{i}]"))?;
        }
        Ok(())
    }
}

/// Artifacts as they stand after a sequence of chunks: a chunk with
/// `append` extends the artifact of its id, any other replaces it (or adds
/// it, in the order first seen).
pub fn assemble<'a>(chunks: impl IntoIterator<Item = &'a Artifact>) -> Vec<Artifact> {
    let mut out: Vec<Artifact> = Vec::new();
    for chunk in chunks {
        match out.iter_mut().find(|a| a.artifact_id == chunk.artifact_id) {
            Some(existing) if chunk.append => {
                existing.parts.extend(chunk.parts.iter().cloned());
                existing.last_chunk = chunk.last_chunk;
            }
            Some(existing) => *existing = chunk.clone(),
            None => out.push(chunk.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_has_exactly_one_content() {
        assert!(Part::text("a").validate("p").is_ok());
        assert!(Part::default().validate("p").is_err());
        let two = Part {
            url: Some("https://example.com/a".into()),
            ..Part::text("a")
        };
        assert_eq!(two.validate("p").unwrap_err().field(), Some("p"));
        let raw = |r: &str| Part {
            raw: Some(r.into()),
            ..Part::default()
        };
        assert!(raw("aGVsbG8=").validate("p").is_ok());
        assert_eq!(
            raw("not base64!").validate("p").unwrap_err().field(),
            Some("p.raw")
        );
        assert_eq!(raw("aGVsbG8=").raw_bytes().unwrap(), b"hello");
    }

    #[test]
    fn an_artifact_needs_an_id_and_a_part() {
        let ok = Artifact::new("a", Part::text("x"));
        assert!(ok.validate("artifact").is_ok());
        let empty_id = Artifact::new("", Part::text("x"));
        assert_eq!(
            empty_id.validate("artifact").unwrap_err().field(),
            Some("artifact.artifact_id")
        );
        let no_parts = Artifact {
            parts: Vec::new(),
            ..ok.clone()
        };
        assert_eq!(
            no_parts.validate("artifact").unwrap_err().field(),
            Some("artifact.parts")
        );
    }

    #[test]
    fn chunks_with_append_extend_their_artifact_and_others_replace_it() {
        let first = Artifact::new("doc", Part::text("chunk-1 "));
        let second = Artifact {
            append: true,
            last_chunk: true,
            ..Artifact::new("doc", Part::text("chunk-2"))
        };
        let other = Artifact::new("other", Part::text("o"));
        let whole = assemble([&first, &other, &second]);
        assert_eq!(whole.len(), 2);
        assert_eq!(
            whole[0].parts,
            vec![Part::text("chunk-1 "), Part::text("chunk-2")]
        );
        assert!(whole[0].last_chunk);
        let replaced = assemble([&first, &Artifact::new("doc", Part::text("new"))]);
        assert_eq!(replaced[0].parts, vec![Part::text("new")]);
    }
}
