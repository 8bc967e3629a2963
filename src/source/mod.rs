//! Definition files (triggers, agent cards, registries, packs): where a
//! field is written ([`line_of`]), what is wrong and where
//! ([`Diagnostic`]), every problem of a file rather than the first
//! ([`read_strict`]), and the known name nearest a misspelled one
//! ([`nearest`]).

mod diagnostic;
mod locate;
mod stamp;
mod strict;
mod suggest;

pub use diagnostic::Diagnostic;
pub use locate::line_of;
pub use stamp::{Stamp, stamp};
pub use strict::{FieldProblem, parse, read_strict};
pub use suggest::nearest;
