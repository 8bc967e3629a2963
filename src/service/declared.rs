//! The agents the orchestrator knows (the catalog read from `--agents`),
//! with their skills' schemas compiled once: a task's params are checked
//! against its skill's `inputSchema` before anything is stored or queued,
//! and a result against its `outputSchema` before the task completes.
//! Replaced whole when the agent files change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::agent::Catalog;
use crate::codec::DecodeError;
use crate::envelope::AgentName;

/// The catalog in force, and its compiled schemas.
pub struct Declared {
    /// The agents and card workflows, with what was wrong in their files.
    pub catalog: Catalog,
    schemas: Schemas,
    /// The agents with an `outputSchema` on some skill: only their
    /// results need their task's action to be checked.
    outputs: BTreeSet<AgentName>,
}

impl std::ops::Deref for Declared {
    type Target = Catalog;
    fn deref(&self) -> &Catalog {
        &self.catalog
    }
}

/// A skill's schema that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("agent `{agent}`, skill `{skill}`: {which} is not a valid JSON Schema: {message}")]
pub struct SchemaError {
    /// The agent.
    pub agent: AgentName,
    /// Its skill.
    pub skill: String,
    /// `inputSchema` or `outputSchema`.
    pub which: &'static str,
    /// What the schema compiler said.
    pub message: String,
}

/// One skill's compiled schemas.
#[derive(Clone, Default)]
struct Compiled {
    input: Option<Arc<jsonschema::Validator>>,
    output: Option<Arc<jsonschema::Validator>>,
}

/// Compiled schemas by agent and action.
#[derive(Clone, Default)]
pub(crate) struct Schemas(BTreeMap<(AgentName, String), Compiled>);

impl Declared {
    /// Compiles every skill's schemas; one that does not compile is an
    /// error naming the agent, the skill and what is wrong (the catalog's
    /// reading refuses such a card, so this is for cards made in code).
    pub(crate) fn new(catalog: Catalog) -> Result<Declared, SchemaError> {
        let mut compiled = BTreeMap::new();
        for card in catalog.agents.values() {
            for skill in card.skills() {
                let compile = |schema: &Option<Value>, which: &'static str| {
                    schema
                        .as_ref()
                        .map(|s| {
                            jsonschema::validator_for(s)
                                .map(Arc::new)
                                .map_err(|e| SchemaError {
                                    agent: card.name.clone(),
                                    skill: skill.id.clone(),
                                    which,
                                    message: e.to_string(),
                                })
                        })
                        .transpose()
                };
                let c = Compiled {
                    input: compile(&skill.input_schema, "inputSchema")?,
                    output: compile(&skill.output_schema, "outputSchema")?,
                };
                if c.input.is_some() || c.output.is_some() {
                    compiled.insert((card.name.clone(), skill.id.clone()), c);
                }
            }
        }
        let outputs = compiled
            .iter()
            .filter(|(_, c)| c.output.is_some())
            .map(|((agent, _), _)| agent.clone())
            .collect();
        Ok(Declared {
            catalog,
            schemas: Schemas(compiled),
            outputs,
        })
    }

    /// The checks a submit applies to `params` for `action` of `agent`:
    /// their depth (first: the other checks walk them, and every stored
    /// envelope must read back), the skill's input schema, and that a
    /// token can bind them (an integer beyond 2^53 has no canonical form);
    /// the first error names the field (`params.query`) and what is
    /// wanted there.
    pub(crate) fn check_params(
        &self,
        agent: &AgentName,
        action: &str,
        params: &Map<String, Value>,
    ) -> Result<(), DecodeError> {
        crate::codec::check_depth("params", params.values(), 1)?;
        if let Some(validator) = self.compiled(agent, action).and_then(|c| c.input.as_ref()) {
            crate::codec::check_schema(
                validator,
                &Value::Object(params.clone()),
                "params",
                &format!("the `{action}` skill's inputSchema"),
            )?;
        }
        check_canonical(params)
    }

    /// [`Declared::check_params`] without a schema: for params no skill
    /// declares (a turn's model request, an MCP tool's arguments).
    pub(crate) fn check_form(params: &Map<String, Value>) -> Result<(), DecodeError> {
        crate::codec::check_depth("params", params.values(), 1)?;
        check_canonical(params)
    }

    /// Whether any agent declares an output schema.
    pub(crate) fn checks_outputs(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// Whether any skill of `agent` declares an output schema (so a
    /// result of it needs its task's action to be checked).
    pub(crate) fn checks_output(&self, agent: &AgentName) -> bool {
        self.outputs.contains(agent)
    }

    /// Checks a result of `action` of `agent`; the first error names the
    /// field (`result.summary`) and what the schema wants there.
    pub(crate) fn check_result(
        &self,
        agent: &AgentName,
        action: &str,
        result: &Value,
    ) -> Result<(), DecodeError> {
        let Some(validator) = self.compiled(agent, action).and_then(|c| c.output.as_ref()) else {
            return Ok(());
        };
        crate::codec::check_schema(
            validator,
            result,
            "result",
            &format!("the `{action}` skill's outputSchema"),
        )
    }

    fn compiled(&self, agent: &AgentName, action: &str) -> Option<&Compiled> {
        self.schemas.0.get(&(agent.clone(), action.to_string()))
    }
}

/// That a token can bind `params`: each has a canonical form.
fn check_canonical(params: &Map<String, Value>) -> Result<(), DecodeError> {
    let mut path = String::from("params");
    for (name, value) in params {
        path.truncate("params".len());
        path.push('.');
        path.push_str(name);
        crate::task_token::canonical::check(value, &mut path)
            .map_err(|e| DecodeError::invalid(e.path, e.message))?;
    }
    Ok(())
}
