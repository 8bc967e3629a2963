//! Triggers (`triggers/*.yaml`, JSON also accepted): named workflows with a
//! default system prompt, an input schema and steps (docs/triggers.md).
//!
//! A file is read strictly: an unknown field, a wrong type or a step that
//! is not one of the four kinds is reported with the file, the line and
//! the field. After parsing, [`Trigger::problems`] finds what only the
//! whole trigger shows (duplicate step ids, templates naming steps that
//! have not run, a bad cron expression), and [`Trigger::problems_with`]
//! checks it against the agents' cards.
//!
//! The rooms: one trigger's definition (`definition`) and its steps
//! (`step`), read from its file (`parse`), checked alone (`check`,
//! `schedule`, `template`) and against the cards (`cards`); the triggers
//! of a directory (`directory`); and `validate`, what `orchestrator
//! validate` reports.

mod cards;
mod check;
mod definition;
mod directory;
mod parse;
mod schedule;
mod step;
pub(crate) mod template;
mod validate;

pub use check::{Placed, Problem};
pub use definition::{CatchUp, Defaults, EventSource, Overlap, RunMode, Schedule, Trigger};
pub use directory::{Triggers, is_trigger_file, locate, stamp, trigger_files};
pub use step::{
    Approval, BadStepId, FailurePolicy, Merge, OnFailure, Parallel, Route, Step, StepError,
    StepKind, StepProblem, TaskStep,
};
pub use template::{TemplateError, condition, paths, render, render_text};
pub use validate::{Validation, validate};

#[cfg(test)]
mod testing {
    use std::path::{Path, PathBuf};

    /// Writes `text` to `name` in `dir`.
    pub(super) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A trigger file with no problem.
    pub(super) const GOOD: &str = "id: summarize\ndefault_system_prompt: Be brief.\ninput_schema: { type: object, required: [query], properties: { query: { type: string } } }\nsteps:\n  - id: search\n    agent: knowledge-agent\n    action: search:kb\n    params: { query: \"{{ input.query }}\" }\n";
}
