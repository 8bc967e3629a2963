//! A problem of a file, at its line and field, as every loader reports
//! it.

use std::path::{Path, PathBuf};

use super::{FieldProblem, line_of};

use serde::{Deserialize, Serialize};

/// One problem of a definition file, where it is: a file that cannot be
/// used, or (as a warning) something in it that is likely a mistake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}{}: {}{message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct Diagnostic {
    /// The file.
    pub file: PathBuf,
    /// The line, when it could be found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The field (`steps[1].agent`), when the problem has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl Diagnostic {
    /// A problem of the whole file (it cannot be read, or is no
    /// definition at all).
    pub fn file(file: &Path, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: file.to_path_buf(),
            line: None,
            field: None,
            message: message.into(),
        }
    }

    /// A problem of `field` in `file`, whose text is `text` (for the
    /// line); `offset` lines come before `text` in the file (a Markdown
    /// card's frontmatter starts on line 2).
    pub fn at(
        file: &Path,
        text: &str,
        offset: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let field = field.into();
        Diagnostic {
            file: file.to_path_buf(),
            line: line_of(text, &field).map(|l| l + offset),
            field: (!field.is_empty()).then_some(field),
            message: message.into(),
        }
    }

    /// [`Diagnostic::at`] for a problem found by [`read_strict`] (or a
    /// parser that knows its own line).
    pub fn located(file: &Path, text: &str, offset: usize, p: FieldProblem) -> Diagnostic {
        let mut d = Diagnostic::at(file, text, offset, p.field.unwrap_or_default(), p.message);
        if let Some(line) = p.line {
            d.line = Some(line + offset);
        }
        d
    }
}
