//! Decoding JSON messages with typed errors that name the offending field.
//!
//! Every boundary of the system decodes through [`decode`]: user input with
//! [`Strictness::Strict`] (an unknown field is an error), messages from peers on
//! the bus with [`Strictness::Tolerant`] (unknown fields from newer peers are
//! ignored). Both refuse a message over the size limit before parsing it.

mod checks;
mod decode;
mod error;
mod objects;
mod parts;

pub use checks::{check_depth, check_schema};
use decode::decode_sharing;
pub use decode::{Validate, decode};
pub use error::DecodeError;
pub use objects::{object, objects, optional_object};
pub use parts::{Parts, fields_of};

/// The default size limit for one message: 1 MiB.
pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// How deeply a JSON value from outside may nest (task params, a run's
/// input, a gate's answer, a worker's result and artifacts): an object or
/// array is one level, and what it holds one more. Well inside every
/// decoder on the path: serde_json stops at 128 levels, and a stored
/// envelope or run record wraps the value in a few levels of its own, so
/// a value accepted here can always be read back.
pub const MAX_DEPTH: usize = 64;

/// How a decoder treats fields it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Unknown fields are an error (input from users and clients).
    Strict,
    /// Unknown fields are ignored (messages from possibly newer peers).
    Tolerant,
}
