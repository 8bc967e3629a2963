//! Static checks of a parsed trigger: what only the whole definition shows,
//! and what only the agents' cards show. Each problem names its field, so
//! the loader can give its line.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::step::{OnFailure, Step, StepKind};
use super::template;
use super::{RunMode, Trigger};
use crate::agent::AgentCard;
use crate::envelope::AgentName;

/// One problem in a trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The field (`steps[1].params.body`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn problem(path: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        path: path.into(),
        message: message.into(),
    }
}

/// The fields a template may read of a step: `steps.<id>.<field>`.
pub const STEP_FIELDS: [&str; 4] = ["result", "state", "error", "task_id"];

/// The roots a template may read.
const ROOTS: [&str; 5] = ["input", "steps", "run", "trigger", "route"];

/// Where a step stands in its trigger.
#[derive(Debug)]
pub struct Placed<'a> {
    /// The step.
    pub step: &'a Step,
    /// Its path in the file (`steps[1].parallel[0]`).
    pub path: String,
    /// The parallel step it is a branch of.
    pub branch_of: Option<&'a str>,
    /// The step it compensates.
    pub compensates: Option<&'a str>,
    /// The ids of the steps that have ended before it starts.
    before: BTreeSet<&'a str>,
}

impl Trigger {
    /// What is wrong with the trigger on its own: its id, duplicate step
    /// ids, templates that do not parse or name what cannot resolve at
    /// that point (a later step is a cycle), schemas that do not compile,
    /// the schedule or subject.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if super::step::check_id(&self.id).is_err() {
            out.push(problem(
                "id",
                "must be 1 to 64 of a-z, 0-9, `-` and `_`, starting with a letter",
            ));
        }
        if self.steps.is_empty() {
            out.push(problem("steps", "a trigger needs at least one step"));
        }
        if let Some(schema) = &self.input_schema
            && let Err(e) = jsonschema::validator_for(schema)
        {
            out.push(problem(
                "input_schema",
                format!("not a valid JSON Schema: {e}"),
            ));
        }
        self.check_run_mode(&mut out);
        let placed = self.placed();
        let mut seen = BTreeMap::new();
        for p in &placed {
            if let Some(first) = seen.insert(p.step.id.as_str(), p.path.as_str()) {
                out.push(problem(
                    format!("{}.id", p.path),
                    format!("`{}` is also the id of {first}", p.step.id),
                ));
            }
        }
        let all: BTreeSet<&str> = placed.iter().map(|p| p.step.id.as_str()).collect();
        for p in &placed {
            self.check_templates(p, &all, &mut out);
            if let StepKind::Approval(a) = &p.step.kind
                && let Some(schema) = &a.input_schema
                && let Err(e) = jsonschema::validator_for(schema)
            {
                out.push(problem(
                    format!("{}.approval.input_schema", p.path),
                    format!("not a valid JSON Schema: {e}"),
                ));
            }
        }
        out
    }

    /// What the agents' cards show to be wrong: an unknown agent or skill,
    /// and skill scopes the trigger does not declare.
    pub fn problems_with(&self, cards: &BTreeMap<AgentName, AgentCard>) -> Vec<Problem> {
        let mut out = Vec::new();
        for p in self.placed() {
            match &p.step.kind {
                StepKind::Task(t) => {
                    let Some(card) = cards.get(&t.agent) else {
                        out.push(problem(
                            format!("{}.agent", p.path),
                            format!("no agent `{}` is known", t.agent),
                        ));
                        continue;
                    };
                    let Some(skill) = card.skill(t.action.as_str()) else {
                        out.push(problem(
                            format!("{}.action", p.path),
                            format!("agent `{}` has no skill `{}`", t.agent, t.action),
                        ));
                        continue;
                    };
                    let missing: Vec<&str> = skill
                        .scopes
                        .iter()
                        .map(|s| s.as_str())
                        .filter(|s| !self.required_scopes.iter().any(|r| r.as_str() == *s))
                        .collect();
                    if !missing.is_empty() {
                        out.push(problem(
                            format!("{}.action", p.path),
                            format!(
                                "skill `{}` of `{}` needs scopes the trigger does not declare in required_scopes: {}",
                                t.action,
                                t.agent,
                                missing.join(", ")
                            ),
                        ));
                    }
                }
                StepKind::Route(r) => {
                    for (i, agent) in r.agents.iter().enumerate() {
                        if !cards.contains_key(agent) {
                            out.push(problem(
                                format!("{}.route.agents[{i}]", p.path),
                                format!("no agent `{agent}` is known"),
                            ));
                        }
                    }
                }
                StepKind::Parallel(_) | StepKind::Approval(_) => {}
            }
        }
        out
    }

    fn check_run_mode(&self, out: &mut Vec<Problem>) {
        let (wants_schedule, wants_event) = match self.run_mode {
            RunMode::OnDemand => (false, false),
            RunMode::Schedule => (true, false),
            RunMode::Event => (false, true),
        };
        for (field, wanted, present) in [
            ("schedule", wants_schedule, self.schedule.is_some()),
            ("event", wants_event, self.event.is_some()),
        ] {
            if wanted && !present {
                out.push(problem(
                    field,
                    format!("`run_mode: {field}` needs `{field}:`"),
                ));
            }
            if present && !wanted {
                out.push(problem(
                    field,
                    format!("applies only with `run_mode: {field}`"),
                ));
            }
        }
        if let Some(s) = &self.schedule {
            match (&s.cron, s.every) {
                (Some(cron), None) => {
                    if let Err(e) = cron.parse::<croner::Cron>() {
                        out.push(problem(
                            "schedule.cron",
                            format!("`{cron}` is not a cron expression: {e}"),
                        ));
                    }
                }
                (None, Some(every)) if every.as_secs() >= 1 => {}
                (None, Some(_)) => {
                    out.push(problem("schedule.every", "must be at least one second"));
                }
                _ => out.push(problem(
                    "schedule",
                    "needs exactly one of `cron` and `every`",
                )),
            }
            if let Err(e) = self.check_input(&s.run_input()) {
                out.push(problem(
                    "schedule.input",
                    format!("each run's input must match input_schema: {e}"),
                ));
            }
        }
        if let Some(e) = &self.event {
            let ok = !e.subject.is_empty()
                && !e.subject.contains(char::is_whitespace)
                && e.subject.split('.').all(|t| !t.is_empty());
            if !ok {
                out.push(problem(
                    "event.subject",
                    format!("`{}` is not a NATS subject", e.subject),
                ));
            }
        }
    }

    /// Every step in definition order (a step, then its branches, then
    /// its compensation), with its path and, for the checks, the steps
    /// ended before it starts: the earlier top-level steps (and their
    /// branches); a compensation also sees the step it compensates.
    pub fn placed(&self) -> Vec<Placed<'_>> {
        let mut out = Vec::new();
        let mut before: BTreeSet<&str> = BTreeSet::new();
        for (i, step) in self.steps.iter().enumerate() {
            let path = format!("steps[{i}]");
            out.push(Placed {
                step,
                path: path.clone(),
                branch_of: None,
                compensates: None,
                before: before.clone(),
            });
            if let StepKind::Parallel(p) = &step.kind {
                for (j, b) in p.branches.iter().enumerate() {
                    out.push(Placed {
                        step: b,
                        path: format!("{path}.parallel[{j}]"),
                        branch_of: Some(&step.id),
                        compensates: None,
                        before: before.clone(),
                    });
                }
            }
            let own: Vec<&str> = step.walk().iter().map(|s| s.id.as_str()).collect();
            if let OnFailure::Compensate(c) = &step.on_failure {
                let mut seen = before.clone();
                seen.extend(own.iter().copied().filter(|id| *id != c.id));
                out.push(Placed {
                    step: c,
                    path: format!("{path}.compensate"),
                    branch_of: None,
                    compensates: Some(&step.id),
                    before: seen,
                });
            }
            before.extend(own);
        }
        out
    }

    fn check_templates(&self, p: &Placed<'_>, all: &BTreeSet<&str>, out: &mut Vec<Problem>) {
        let mut reads: Vec<(String, Result<Vec<String>, template::TemplateError>)> = Vec::new();
        for (field, value) in p.step.templates() {
            reads.push((format!("{}.{field}", p.path), template::paths(value)));
        }
        if let Some(when) = &p.step.when {
            reads.push((format!("{}.when", p.path), template::condition_paths(when)));
        }
        if let StepKind::Route(r) = &p.step.kind {
            reads.push((
                format!("{}.route.text", p.path),
                template::paths(&serde_json::Value::String(r.text.clone())),
            ));
        }
        for (field, names) in reads {
            let names = match names {
                Ok(n) => n,
                Err(e) => {
                    out.push(problem(field, format!("template does not parse: {e}")));
                    continue;
                }
            };
            for name in names {
                // `route.text` is set for a route step's params only.
                let routed = matches!(p.step.kind, StepKind::Route(_))
                    && field.starts_with(&format!("{}.params", p.path));
                if name.split('.').next() == Some("route") {
                    if !routed || !matches!(name.as_str(), "route" | "route.text") {
                        out.push(problem(
                            field.clone(),
                            format!("`{name}`: only a route step's params read `route.text` (the request routed)"),
                        ));
                    }
                    continue;
                }
                if let Some(message) = self.unresolvable(&name, p, all) {
                    out.push(problem(field.clone(), format!("`{name}`: {message}")));
                }
            }
        }
    }

    /// Why `name` cannot resolve in step `p`, if it cannot.
    fn unresolvable(&self, name: &str, p: &Placed<'_>, all: &BTreeSet<&str>) -> Option<String> {
        let mut parts = name.split('.');
        let root = parts.next().unwrap_or_default();
        if !ROOTS.contains(&root) {
            return Some(format!(
                "a template reads {}, not `{root}`",
                ROOTS.map(|r| format!("`{r}`")).join(", ")
            ));
        }
        match root {
            "input" => {
                let field = parts.next()?;
                let properties = self.input_schema.as_ref()?.get("properties")?.as_object()?;
                (!properties.contains_key(field))
                    .then(|| format!("the input_schema has no property `{field}`"))
            }
            "steps" => {
                let Some(id) = parts.next() else {
                    return Some("name a step: `steps.<id>.result`".into());
                };
                if id == p.step.id {
                    return Some("a step cannot read its own result (a cycle)".into());
                }
                if !all.contains(id) {
                    return Some(format!("no step has the id `{id}`"));
                }
                if !p.before.contains(id) {
                    return Some(format!(
                        "step `{id}` has not ended when `{}` starts (a cycle, or a step running alongside it)",
                        p.step.id
                    ));
                }
                match parts.next() {
                    Some(field) if !STEP_FIELDS.contains(&field) => Some(format!(
                        "a step has {}, not `{field}`",
                        STEP_FIELDS.map(|f| format!("`{f}`")).join(", ")
                    )),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(yaml: &str) -> Trigger {
        serde_norway::from_str(yaml).unwrap()
    }

    fn messages(problems: &[Problem]) -> Vec<String> {
        problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn each_static_mistake_is_found_with_its_field() {
        let t = trigger(
            r#"
id: demo
input_schema: { type: object, properties: { query: { type: string } } }
run_mode: schedule
schedule: { cron: "not cron" }
steps:
  - id: a
    agent: x
    action: y
    params: { q: "{{ input.qurey }}", self: "{{ steps.a.result }}" }
  - id: b
    agent: x
    action: y
    params: { later: "{{ steps.c.result }}", none: "{{ steps.zz.result }}", bad: "{{ steps.a.output }}" }
  - id: c
    parallel:
      - { id: a, agent: x, action: y }
      - { id: d, agent: x, action: y, params: { sib: "{{ steps.e.result }}" } }
      - { id: e, agent: x, action: y, when: "oops.x" }
"#,
        );
        let got = messages(&t.problems());
        let want = [
            "schedule.cron: `not cron` is not a cron expression",
            "steps[2].parallel[0].id: `a` is also the id of steps[0]",
            "steps[0].params.q: `input.qurey`: the input_schema has no property `qurey`",
            "steps[0].params.self: `steps.a.result`: a step cannot read its own result (a cycle)",
            "steps[1].params.later: `steps.c.result`: step `c` has not ended when `b` starts",
            "steps[1].params.none: `steps.zz.result`: no step has the id `zz`",
            "steps[1].params.bad: `steps.a.output`: a step has",
            "steps[2].parallel[1].params.sib: `steps.e.result`: step `e` has not ended",
            "steps[2].parallel[2].when: `oops.x`: a template reads",
        ];
        for w in want {
            assert!(
                got.iter().any(|g| g.starts_with(w)),
                "missing {w:?} in {got:#?}"
            );
        }
        assert_eq!(got.len(), want.len(), "{got:#?}");
    }

    #[test]
    fn a_sound_trigger_has_no_problems_and_a_compensation_sees_its_step() {
        let t = trigger(
            r#"
id: ok
steps:
  - id: a
    agent: x
    action: y
  - id: b
    agent: x
    action: y
    params: { from_a: "{{ steps.a.result.v }}" }
    on_failure: compensate
    compensate: { id: undo, agent: x, action: z, params: { e: "{{ steps.b.error }}" } }
  - id: c
    when: "steps.b.state == 'completed'"
    approval: { prompt: "go?" }
"#,
        );
        assert_eq!(t.problems(), []);
    }

    /// `route.text` is the text a route step's task was routed for: its
    /// params may read it; nothing else may (it is set nowhere else).
    #[test]
    fn only_a_route_steps_params_read_the_routed_text() {
        let t = trigger(
            r#"
id: r
steps:
  - id: pick
    route: { text: "{{ input.q }}" }
    params: { message: "{{ route.text }}" }
  - id: after
    agent: x
    action: y
    params: { m: "{{ route.text }}", n: "{{ steps.pick.result }}" }
"#,
        );
        assert_eq!(
            messages(&t.problems()),
            [
                "steps[1].params.m: `route.text`: only a route step's params read `route.text` (the request routed)"
            ]
        );
    }
}
