//! Every trigger shipped or shown in the docs loads and passes the static
//! checks against the example agents' cards: `triggers/`,
//! `docs/examples/triggers/`, and every complete trigger in a YAML block
//! of docs/triggers.md.

use std::collections::BTreeMap;
use std::path::Path;

use orchestrator::agent::{AgentCard, Catalog, GitOptions};
use orchestrator::envelope::AgentName;
use orchestrator::trigger::{Trigger, Triggers};

fn cards() -> BTreeMap<AgentName, AgentCard> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let catalog = Catalog::load(&[root.join("agents")], &GitOptions::default());
    assert!(catalog.errors.is_empty(), "{:#?}", catalog.errors);
    catalog.agents
}

#[test]
fn shipped_and_documented_triggers_load_and_check_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["triggers", "docs/examples/triggers"] {
        let loaded = Triggers::load(&root.join(dir), &cards());
        assert!(loaded.errors.is_empty(), "{dir}: {:#?}", loaded.errors);
        assert!(
            loaded.loaded.len() >= 2,
            "{dir}: {:?}",
            loaded.loaded.keys()
        );
    }
    let page = std::fs::read_to_string(root.join("docs/triggers.md")).unwrap();
    let mut whole = 0;
    for block in page.split("```yaml\n").skip(1) {
        let text = block.split("```").next().unwrap();
        // Fragments (a step or two) are checked inside a trigger.
        let text = if text.starts_with("id:") {
            whole += 1;
            text.to_string()
        } else {
            format!(
                "id: fragment\nrequired_scopes: [Files.Read, Mail.Send]\ninput_schema: {{type: object, properties: {{q: {{}}, request: {{}}}}}}\nsteps:\n{text}"
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, &text).unwrap();
        let trigger = Trigger::load(&path).unwrap_or_else(|e| panic!("{e:#?}\n{text}"));
        let problems = trigger.problems_with(&cards());
        assert!(problems.is_empty(), "{problems:#?}\n{text}");
    }
    assert!(whole >= 1, "docs/triggers.md shows a whole trigger");
}
