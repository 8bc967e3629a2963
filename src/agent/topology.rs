//! The topology of the agents: who uses whom, as edges, drawn as a
//! Mermaid flowchart.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// One edge of the topology.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Edge {
    /// The agent, workflow or trigger that uses `to`.
    pub from: String,
    /// The agent used.
    pub to: String,
    /// How: `calls` (an agent may call it as a tool), `chain`,
    /// `parallel`, `router` (a card's workflow runs it), `step` (a
    /// trigger's step runs it).
    pub kind: String,
}

/// `edges` as a Mermaid flowchart, left to right, each node labelled with
/// its name and each edge with its kind.
pub fn mermaid(edges: &[Edge]) -> String {
    let id = |name: &str| -> String {
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("n_{safe}")
    };
    let mut out = String::from("flowchart LR\n");
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|e| [e.from.as_str(), e.to.as_str()])
        .collect();
    for n in nodes {
        out.push_str(&format!("    {}[\"{}\"]\n", id(n), n.replace('"', "'")));
    }
    let mut sorted: Vec<&Edge> = edges.iter().collect();
    sorted.sort();
    sorted.dedup();
    for e in sorted {
        out.push_str(&format!(
            "    {} -->|{}| {}\n",
            id(&e.from),
            e.kind,
            id(&e.to)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_become_a_flowchart() {
        let e = |f: &str, t: &str, k: &str| Edge {
            from: f.into(),
            to: t.into(),
            kind: k.into(),
        };
        let chart = mermaid(&[
            e("coordinator", "researcher", "calls"),
            e("team", "knowledge-agent", "chain"),
            e("coordinator", "researcher", "calls"),
        ]);
        assert_eq!(
            chart,
            "flowchart LR\n    n_coordinator[\"coordinator\"]\n    n_knowledge_agent[\"knowledge-agent\"]\n    n_researcher[\"researcher\"]\n    n_team[\"team\"]\n    n_coordinator -->|calls| n_researcher\n    n_team -->|chain| n_knowledge_agent\n"
        );
    }
}
