//! The skills' `inputSchema`s, compiled once: a task's params are checked
//! against its skill's schema before anything is stored or queued.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::agent::AgentCard;
use crate::codec::DecodeError;
use crate::envelope::AgentName;

/// Compiled input schemas by agent and action.
#[derive(Clone, Default)]
pub(crate) struct Schemas(BTreeMap<(AgentName, String), Arc<jsonschema::Validator>>);

impl Schemas {
    /// Compiles every skill's schema; a schema that does not compile is an
    /// error naming the agent, the skill and what is wrong.
    pub(crate) fn compile(cards: &[AgentCard]) -> Result<Schemas, String> {
        let mut compiled = BTreeMap::new();
        for card in cards {
            for skill in card.skills() {
                let Some(schema) = &skill.input_schema else {
                    continue;
                };
                let validator = jsonschema::validator_for(schema).map_err(|e| {
                    format!(
                        "agent `{}`, skill `{}`: inputSchema is not a valid JSON Schema: {e}",
                        card.name, skill.id
                    )
                })?;
                compiled.insert((card.name.clone(), skill.id.clone()), Arc::new(validator));
            }
        }
        Ok(Schemas(compiled))
    }

    /// Checks `params` for `action` of `agent`; the first error names the
    /// field (`params.query`) and what the schema wants there.
    pub(crate) fn check(
        &self,
        agent: &AgentName,
        action: &str,
        params: &Map<String, Value>,
    ) -> Result<(), DecodeError> {
        let Some(validator) = self.0.get(&(agent.clone(), action.to_string())) else {
            return Ok(());
        };
        crate::codec::check_schema(
            validator,
            &Value::Object(params.clone()),
            "params",
            &format!("the `{action}` skill's inputSchema"),
        )
    }
}
