//! Agents in every format people write (docs/agents.md): the seeds' own
//! examples load with the warnings they deserve, each rule refuses a bad
//! variant naming its field and line, and an agent in git is cloned, then
//! fetched again on reload.

use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrator::agent::{Catalog, Format, GitMode, GitOptions, Pattern};
use orchestrator::source::Diagnostic;

fn seeds() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seeds")
}

fn offline() -> GitOptions {
    GitOptions::default()
}

fn messages(list: &[Diagnostic]) -> Vec<String> {
    list.iter().map(ToString::to_string).collect()
}

/// Whether one of `list` says `words` (about `field`, when given).
fn says(list: &[Diagnostic], field: Option<&str>, words: &str) -> bool {
    list.iter()
        .any(|d| d.message.contains(words) && field.is_none_or(|f| d.field.as_deref() == Some(f)))
}

fn names(c: &Catalog) -> Vec<&str> {
    c.agents.keys().map(|n| n.as_str()).collect()
}

/// RFC 0007's three example packs: each member is an agent whose card is
/// derived from its prompt (one skill, its key; text/plain by default),
/// the entry is the pack's entry, and the topology comes from the tool
/// references. The examples' tools that name no member and no pack tool
/// are warnings, with the nearest name offered.
#[test]
fn the_rfc_0007_example_packs_load_with_their_warnings() {
    let c = Catalog::load(&[seeds().join("promptpack/research-team.yaml")], &offline());
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert_eq!(names(&c), ["analyst", "coordinator", "researcher"]);
    assert_eq!(c.entry.as_ref().map(|e| e.as_str()), Some("coordinator"));
    let researcher = &c.agents[&"researcher".parse().unwrap()];
    assert_eq!(researcher.display_name.as_deref(), Some("Deep Researcher"));
    assert_eq!(researcher.version, "1.0.0");
    assert_eq!(
        researcher.origin.as_ref().unwrap().format,
        Format::PromptPack
    );
    let skill = &researcher.skills()[0];
    assert_eq!(skill.id, "researcher");
    assert_eq!(skill.tags, ["research", "web", "academic"]);
    assert_eq!(skill.input_modes, ["text/plain"]);
    assert_eq!(skill.output_modes, ["text/plain"]);
    let prompt = researcher.prompt.as_ref().unwrap();
    assert!(
        prompt
            .instruction
            .starts_with("You are a research specialist.")
    );
    assert_eq!(prompt.request_params["temperature"], 0.7);
    assert_eq!(
        prompt.functions.keys().collect::<Vec<_>>(),
        ["arxiv_search", "web_search"]
    );
    // The example's coordinator names `research` and `analyze`, which are
    // neither its members' keys nor pack tools.
    assert!(
        says(
            &c.warnings,
            Some("prompts.coordinator.tools[0]"),
            "did you mean `researcher`?"
        ),
        "{:#?}",
        messages(&c.warnings)
    );
    assert!(says(
        &c.warnings,
        Some("prompts.coordinator.tools[1]"),
        "did you mean `analyst`?"
    ));
    let line = c
        .warnings
        .iter()
        .find(|d| d.field.as_deref() == Some("prompts.coordinator.tools[0]"))
        .unwrap()
        .line;
    assert_eq!(line, Some(18));

    let c = Catalog::load(
        &[seeds().join("promptpack/customer-service.yaml")],
        &offline(),
    );
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert_eq!(
        names(&c),
        ["billing_agent", "order_agent", "router", "tech_agent"]
    );
    let billing = &c.agents[&"billing_agent".parse().unwrap()];
    assert_eq!(billing.description, "Answers billing and payment questions");
    for (i, near) in ["billing_agent", "tech_agent", "order_agent"]
        .iter()
        .enumerate()
    {
        let field = format!("prompts.router.tools[{i}]");
        assert!(
            says(
                &c.warnings,
                Some(&field),
                &format!("did you mean `{near}`?")
            ),
            "{field}"
        );
    }
    assert!(says(
        &c.warnings,
        Some("prompts.billing_agent.tools[0]"),
        "`lookup_invoice` is neither"
    ));

    // Once the names match, the topology follows the tool references.
    let c = Catalog::load(
        &[seeds().join("promptpack/vision-assistant.yaml")],
        &offline(),
    );
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    let describer = &c.agents[&"describer".parse().unwrap()];
    assert_eq!(describer.skills()[0].input_modes, ["text/plain", "image/*"]);
    assert!(says(
        &c.warnings,
        Some("prompts.coordinator.tools[0]"),
        "did you mean `describer`?"
    ));
    let fixed = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(seeds().join("promptpack/vision-assistant.yaml")).unwrap();
    let path = fixed.path().join("vision.yaml");
    std::fs::write(
        &path,
        text.replace("tools: [describe]", "tools: [describer]"),
    )
    .unwrap();
    let c = Catalog::load(&[path], &offline());
    assert!(
        c.warnings.iter().all(|w| w.field.is_none()),
        "{:#?}",
        c.warnings
    );
    let edges: Vec<(String, String, String)> = c
        .edges()
        .into_iter()
        .map(|e| (e.from, e.to, e.kind))
        .collect();
    assert_eq!(
        edges,
        [("coordinator".into(), "describer".into(), "calls".into())]
    );
}

/// The AgentCard RFC's examples: the YAML and the Markdown `sizer` read
/// the same; a name is made an agent id (`PMO-orchestrator` is
/// `pmo-orchestrator`) with the name as written kept; history files load
/// relative to the card; a tool-only card is left out of listings. Agents
/// a card names that are not declared are warnings.
#[test]
fn the_agentcard_rfc_examples_load_with_their_warnings() {
    let yaml = Catalog::load(&[seeds().join("agentcards/yaml")], &offline());
    let md = Catalog::load(&[seeds().join("agentcards/md")], &offline());
    assert!(
        yaml.errors.is_empty() && md.errors.is_empty(),
        "{:#?} {:#?}",
        yaml.errors,
        md.errors
    );
    let sizer = |c: &Catalog| {
        let mut card = c.agents[&"sizer".parse().unwrap()].clone();
        card.origin = None;
        card
    };
    assert_eq!(sizer(&yaml), sizer(&md));
    assert_eq!(
        sizer(&md).prompt.unwrap().instruction,
        "Given an object, respond only with an estimate of its size."
    );
    assert_eq!(
        names(&md),
        ["analyst", "code_formatter", "pmo-orchestrator", "sizer"]
    );
    let pmo = &md.agents[&"pmo-orchestrator".parse().unwrap()];
    assert_eq!(pmo.display_name.as_deref(), Some("PMO-orchestrator"));
    let calls: Vec<&str> = pmo.calls().iter().map(|n| n.as_str()).collect();
    assert_eq!(calls, ["ny-project-manager", "london-project-manager"]);
    let prompt = pmo.prompt.as_ref().unwrap();
    assert_eq!(prompt.servers, ["time", "github"]);
    assert_eq!(prompt.tools["github"], ["search_*"]);
    assert!(says(
        &md.warnings,
        None,
        "may call `ny-project-manager`, which is not declared"
    ));
    let analyst = &md.agents[&"analyst".parse().unwrap()];
    let history: Vec<(&str, &str)> = analyst
        .prompt
        .as_ref()
        .unwrap()
        .history
        .iter()
        .map(|m| (m.role.as_str(), m.text.as_str()))
        .collect();
    assert_eq!(
        history,
        [
            ("user", "Summarize last quarter in one line."),
            ("assistant", "Revenue up 4%, costs flat.")
        ]
    );
    // The history file is read by its card, not taken for a card.
    assert!(
        !messages(&md.warnings)
            .iter()
            .any(|w| w.contains("history.md")),
        "{:#?}",
        md.warnings
    );
    let formatter = &md.agents[&"code_formatter".parse().unwrap()];
    assert!(formatter.tool_only);
    assert!(md.listed().all(|a| a.name.as_str() != "code_formatter"));
}

/// An AgentCard attribute the RFC defines and this orchestrator does not
/// act on is a warning naming it (at load, and so in `validate`), not
/// silence; the card still loads.
#[test]
fn attributes_read_and_not_run_are_said() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "helper.md",
        "---
use_history: true
shell: true
human_input: true
model: m
---
Help.
",
    );
    let c = Catalog::load(&[dir.path().to_path_buf()], &offline());
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert_eq!(names(&c), ["helper"]);
    for field in ["use_history", "shell", "human_input"] {
        assert!(
            says(&c.warnings, Some(field), "read and not run here"),
            "{field}: {:#?}",
            c.warnings
        );
    }
    assert!(!says(&c.warnings, Some("model"), "read and not run here"));
}

/// The conventions' `agent.json` (all its sections, legacy capabilities
/// as skills, the system prompt file as the instruction) and its
/// registry: the skill index is built and compared, the routing read.
#[test]
fn the_conventions_card_and_registry_load_with_their_warnings() {
    let c = Catalog::load(&[seeds().join("conventions")], &offline());
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert_eq!(names(&c), ["calendar-agent", "cooking-agent"]);
    let cook = &c.agents[&"cooking-agent".parse().unwrap()];
    let skills: Vec<&str> = cook.skills().iter().map(|s| s.id.as_str()).collect();
    assert_eq!(skills, ["parse-recipe", "suggest-meal", "parse_recipe"]);
    assert!(cook.skill("parse_recipe").unwrap().output_schema.is_some());
    assert_eq!(cook.role.as_deref(), Some("Sous Chef"));
    assert_eq!(cook.context, Some(orchestrator::agent::Context::Personal));
    assert_eq!(cook.dependencies.as_ref().unwrap().mcps.len(), 2);
    assert!(
        cook.prompt
            .as_ref()
            .unwrap()
            .instruction
            .starts_with("You are a sous chef.")
    );
    let origin = cook.origin.as_ref().unwrap();
    assert_eq!(
        origin.registry.as_deref(),
        Some(seeds().join("conventions/registry.json").as_path())
    );
    assert_eq!(c.routing.switch_commands, ["talk to", "switch to"]);
    let w = messages(&c.warnings);
    for expected in [
        "`claude-subprocess` is read but not run by `orchestrator worker`",
        "may call `agent-a`, which is not declared",
        "`knowledge/preferences.md` is not in the agent's directory",
        "lacks `parse_recipe` (of `cooking-agent`)",
    ] {
        assert!(w.iter().any(|m| m.contains(expected)), "{expected}: {w:#?}");
    }
}

/// A file in `dir` named `name` holding `text`.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

const PACK: &str = "id: p\nname: P\nversion: 1.0.0\ntemplate_engine: { version: v1, syntax: \"{{variable}}\" }\nprompts:\n  lead:\n    id: lead\n    name: Lead\n    version: 1.0.0\n    system_template: lead\n    tools: [helper]\n  helper:\n    id: helper\n    name: Helper\n    version: 1.0.0\n    system_template: help\nagents:\n  entry: lead\n  members:\n    lead: {}\n    helper: {}\n";

/// Every rule, broken once: the file is refused with the field and (when
/// it can be found) the line, and a near miss names what was meant. The
/// good variant of each loads.
#[test]
fn each_rule_refuses_a_bad_variant_naming_the_field() {
    let good_card =
        r#"{"name": "a", "version": "1.0.0", "description": "d", "skills": [{"id": "s"}]}"#;
    // (file, text, field, what the message says, line)
    let cases: Vec<(&str, String, &str, &str, Option<usize>)> = vec![
        // agent.json
        ("x/agent.json", good_card.replace("\"a\"", "\"x\"").replace("\"description\"", "\"descripton\""), "descripton", "did you mean `description`?", Some(1)),
        ("a/agent.json", good_card.replace("\"skills\": [{\"id\": \"s\"}]", "\"skills\": [{\"id\": \"s\", \"input_schema\": {}}]"), "skills[0].input_schema", "did you mean `inputSchema`?", Some(1)),
        ("a/agent.json", good_card.replace("}]}", "}], \"context\": \"team\"}"), "context", "is not one of `personal`, `work`, `shared`", Some(1)),
        ("a/agent.json", good_card.replace("}]}", "}], \"signals\": \"food\"}"), "signals", "expected a sequence", Some(1)),
        ("a/agent.json", good_card.replace("}]}", "}], \"dependencies\": {\"agent\": [\"b\"]}}"), "dependencies.agent", "did you mean `agents`?", Some(1)),
        ("a/agent.json", good_card.replace("\"a\"", "\"b\""), "name", "differs from the directory name `a`", Some(1)),
        ("a/agent.json", good_card.replace("}]}", "}], \"invocation\": {\"type\": \"comand\"}}"), "invocation.type", "did you mean `command`?", Some(1)),
        ("a/agent.json", "{\n  \"name\": \"a\",\n  \"version\": \"1.0\",\n  \"description\": \"d\"\n}".into(), "version", "not a semantic version", Some(3)),
        // AgentCards
        ("c.md", "---\ntype: chain\nsequence: [a]\nservers: [x]\n---\n".into(), "servers", "not an attribute of `chain` cards", Some(4)),
        ("c.md", "---\ntype: agent\nsequence: [a]\n---\nhi\n".into(), "sequence", "not an attribute of `agent` cards (it is one of `chain` cards)", Some(3)),
        ("c.md", "---\ntype: agent\nsequnce: [a]\n---\nhi\n".into(), "sequnce", "did you mean `sequence` (of `chain` cards)?", Some(3)),
        ("c.md", "---\ntype: agent\nmodle: x\n---\nhi\n".into(), "modle", "did you mean `model`?", Some(3)),
        ("c.md", "---\ninstruction: one\n---\ntwo\n".into(), "instruction", "given twice", Some(2)),
        ("c.md", "---\ntool_only: true\ndefault: true\n---\nhi\n".into(), "tool_only", "cannot be the `default` one", Some(2)),
        ("c.md", "---\nschema_version: \"1\"\n---\nhi\n".into(), "schema_version", "must be an integer", Some(2)),
        ("c.md", "---\ntype: chian\n---\nhi\n".into(), "type", "did you mean `chain`?", Some(2)),
        ("c.md", "---\ntype: chain\n---\n".into(), "sequence", "missing", None),
        ("c.md", "---\ntype: agent\n---\n".into(), "instruction", "missing", None),
        ("c.md", "---\nmessages: ./nowhere.md\n---\nhi\n".into(), "messages", "nowhere.md", Some(2)),
        ("c.md", "---\nagents: [c]\n---\nhi\n".into(), "agents[0]", "names the card itself", Some(2)),
        ("c.yaml", "type: agent\ninstruction: hi\nmodel: [gpt]\n".into(), "model", "must be a text", Some(3)),
        // PromptPacks
        ("p.yaml", PACK.replace("entry: lead", "entry: leed"), "agents.entry", "did you mean `lead`?", Some(18)),
        ("p.yaml", PACK.replace("    helper: {}\n", "    helpr: {}\n"), "agents.members.helpr", "did you mean `helper`?", Some(21)),
        ("p.yaml", PACK.replace("tools: [helper]", "tools: [lead]"), "prompts.lead.tools[0]", "must not name the agent itself", Some(11)),
        ("p.yaml", PACK.replace("    helper: {}\n", "    helper: { tag: [x] }\n"), "agents.members.helper.tag", "did you mean `tags`?", Some(21)),
        ("p.yaml", PACK.replace("system_template: help", "system_template: help\n    temperature: 1"), "prompts.helper.temperature", "unknown field", Some(17)),
        ("p.yaml", PACK.replace("  entry: lead\n", ""), "agents.entry", "missing", Some(17)),
        // Registries
        ("registry.json", r#"{"version": "2.0", "agents": {}}"#.into(), "version", "reads registry version 3.0", Some(1)),
        ("registry.json", r#"{"version": "3.0", "agents": {"ghost": {"location": {"type": "local", "path": "./nowhere"}}}}"#.into(), "", "no such file or directory", None),
        ("registry.json", r#"{"version": "3.0", "agents": {}, "skilIndex": {}}"#.into(), "skilIndex", "did you mean `skillIndex`?", Some(1)),
        ("registry.json", r#"{"version": "3.0", "agents": {"a": {"location": {"type": "svn", "path": "./a"}}}}"#.into(), "agents.a.location.type", "`svn` is not one of `local`, `git`", Some(1)),
    ];
    for (name, text, field, words, line) in cases {
        let dir = tempfile::tempdir().unwrap();
        // A registry's agent, for the registry cases.
        write(dir.path(), "agents/a/agent.json", good_card);
        let file = write(dir.path(), name, &text);
        let c = Catalog::load(std::slice::from_ref(&file), &offline());
        let found = c.errors.iter().find(|d| d.message.contains(words));
        let Some(found) = found else {
            panic!(
                "{name} ({field}): nothing says `{words}`: {:#?}",
                messages(&c.errors)
            );
        };
        if !field.is_empty() {
            assert_eq!(found.field.as_deref(), Some(field), "{name}: {found}");
        }
        assert_eq!(found.line, line, "{name}: {found}");
        assert!(
            c.agents.is_empty() || name == "registry.json",
            "{name}: a refused file is left out"
        );
    }
    // The good variants load.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/agent.json", good_card);
    write(dir.path(), "p.yaml", PACK);
    write(
        dir.path(),
        "bom.md",
        "\u{feff}---\nname: bom\n---\n---SYSTEM\nYou are kind.\n",
    );
    let c = Catalog::load(&[dir.path().to_path_buf()], &offline());
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert_eq!(names(&c), ["a", "bom", "helper", "lead"]);
    assert_eq!(
        c.agents[&"bom".parse().unwrap()]
            .prompt
            .as_ref()
            .unwrap()
            .instruction,
        "You are kind."
    );
}

/// Names are unique across files and formats; a card workflow names only
/// declared agents; a registry refuses a skill two of its agents claim,
/// and an index that disagrees with the cards.
#[test]
fn names_and_skills_are_checked_across_files() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a/agent.json",
        r#"{"name": "a", "version": "1.0.0", "description": "d", "skills": [{"id": "s"}]}"#,
    );
    write(dir.path(), "a.md", "---\nname: a\n---\nhi\n");
    write(
        dir.path(),
        "team.md",
        "---\ntype: chain\nsequence: [a, ghost]\n---\n",
    );
    let c = Catalog::load(&[dir.path().to_path_buf()], &offline());
    assert!(
        says(&c.errors, None, "agent `a` is also declared in"),
        "{:#?}",
        c.errors
    );
    assert!(
        says(
            &c.errors,
            None,
            "chain `team` names agents that are not declared: `ghost`"
        ),
        "{:#?}",
        c.errors
    );
    assert!(c.workflows.is_empty());

    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "agents/a/agent.json",
        r#"{"name": "a", "version": "1.0.0", "description": "d", "skills": [{"id": "s"}]}"#,
    );
    write(
        dir.path(),
        "agents/b/agent.json",
        r#"{"name": "b", "version": "1.0.0", "description": "d", "skills": [{"id": "s"}]}"#,
    );
    let reg = write(
        dir.path(),
        "registry.json",
        r#"{"version": "3.0", "agents": {
             "a": {"location": {"type": "local", "path": "./agents/a"}},
             "b": {"location": {"type": "local", "path": "./agents/b"}}},
           "skillIndex": {"s": "b"}}"#,
    );
    let c = Catalog::load(&[reg], &offline());
    assert!(
        says(
            &c.errors,
            Some("agents.b"),
            "skill `s` is claimed by both `a` and `b`"
        ),
        "{:#?}",
        c.errors
    );
    assert!(
        says(
            &c.errors,
            Some("skillIndex.s"),
            "names `b`, but the skill is `a`'s"
        ),
        "{:#?}",
        c.errors
    );
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn head(dir: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A registry's agent in a git repository (a local bare one here): cloned
/// on first use into the configured folder, its commit recorded; a commit
/// pushed later is fetched on reload. Offline (`validate`), an agent not
/// cloned yet is a problem that says so.
#[test]
fn a_git_agent_is_cloned_then_fetched_again_on_reload() {
    let root = tempfile::tempdir().unwrap();
    let bare = root.path().join("remote.git");
    std::fs::create_dir_all(&bare).unwrap();
    git(
        &bare,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
    );
    let work = root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    let card = |description: &str| {
        format!(
            r#"{{"name": "remote-agent", "version": "1.0.0", "description": "{description}", "skills": [{{"id": "s"}}]}}"#
        )
    };
    write(&work, "agent.json", &card("first"));
    git(&work, &["add", "."]);
    git(&work, &["commit", "--quiet", "-m", "first"]);
    git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
    git(&work, &["push", "--quiet", "origin", "main"]);
    let first = head(&work);

    let registry = write(
        root.path(),
        "agents/registry.json",
        &format!(
            r#"{{"version": "3.0", "agents": {{"remote-agent": {{"location": {{"type": "git", "repo": "{}", "branch": "main"}}}}}}}}"#,
            bare.display()
        ),
    );
    let clones = root.path().join("clones");
    let mut options = GitOptions {
        mode: GitMode::Offline,
        dir: clones.clone(),
        ..GitOptions::default()
    };
    let c = Catalog::load(std::slice::from_ref(&registry), &options);
    assert!(
        says(
            &c.errors,
            Some("agents.remote-agent.location"),
            "not cloned yet"
        ),
        "{:#?}",
        c.errors
    );

    options.mode = GitMode::Clone;
    let c = Catalog::load(std::slice::from_ref(&registry), &options);
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    let agent = &c.agents[&"remote-agent".parse().unwrap()];
    assert_eq!(agent.description, "first");
    assert_eq!(
        agent.origin.as_ref().unwrap().commit.as_deref(),
        Some(first.as_str())
    );
    assert!(clones.join("remote-agent/agent.json").is_file());

    write(&work, "agent.json", &card("second"));
    git(&work, &["commit", "--quiet", "-am", "second"]);
    git(&work, &["push", "--quiet", "origin", "main"]);
    let second = head(&work);
    // Without a fetch, the clone is read as it is.
    let same = c.reload(&options);
    assert_eq!(
        same.agents[&"remote-agent".parse().unwrap()].description,
        "first"
    );
    options.mode = GitMode::Fetch;
    let after = c.reload(&options);
    assert!(after.errors.is_empty(), "{:#?}", after.errors);
    let agent = &after.agents[&"remote-agent".parse().unwrap()];
    assert_eq!(agent.description, "second");
    assert_eq!(
        agent.origin.as_ref().unwrap().commit.as_deref(),
        Some(second.as_str())
    );
}

/// A file that breaks keeps its last good version serving, said in a
/// warning, until it is mended; a file removed takes its agents with it.
#[test]
fn a_broken_file_keeps_its_last_good_version() {
    let dir = tempfile::tempdir().unwrap();
    let card = write(dir.path(), "helper.md", "---\ndescription: one\n---\nhi\n");
    write(dir.path(), "other.md", "---\ndescription: other\n---\nhi\n");
    let c = Catalog::load(&[dir.path().to_path_buf()], &offline());
    assert_eq!(names(&c), ["helper", "other"]);
    std::fs::write(&card, "---\ndescription: two\nbogus: 1\n---\nhi\n").unwrap();
    let broken = c.reload(&offline());
    assert!(
        says(&broken.errors, Some("bogus"), "not an attribute"),
        "{:#?}",
        broken.errors
    );
    assert!(says(
        &broken.warnings,
        None,
        "keeps serving until the file is mended"
    ));
    assert_eq!(broken.agents[&"helper".parse().unwrap()].description, "one");
    std::fs::write(&card, "---\ndescription: three\n---\nhi\n").unwrap();
    let mended = broken.reload(&offline());
    assert!(mended.errors.is_empty());
    assert_eq!(
        mended.agents[&"helper".parse().unwrap()].description,
        "three"
    );
    std::fs::remove_file(&card).unwrap();
    let gone = mended.reload(&offline());
    assert_eq!(names(&gone), ["other"]);
    // A card's workflow is read as one.
    write(
        dir.path(),
        "fan.md",
        "---\ntype: parallel\nfan_out: [other]\nfan_in: other\n---\n",
    );
    let c = gone.reload(&offline());
    let w = &c.workflows[&"fan".parse().unwrap()];
    assert!(matches!(
        &w.pattern,
        Pattern::Parallel {
            fan_in: Some(_),
            include_request: true,
            ..
        }
    ));
}

/// Every example of docs/agents.md (each block after an `<!-- example:
/// PATH -->` line) loads together, as `orchestrator run --agents` reads
/// them: no problem, the agents and workflows it describes.
#[test]
fn the_documented_examples_load_together() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md"))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut written = 0;
    for chunk in page.split("<!-- example: ").skip(1) {
        let (path, rest) = chunk.split_once(" -->").unwrap();
        let body = rest.split_once("```").unwrap().1;
        let body = body.split_once('\n').unwrap().1;
        let body = body.split("\n```").next().unwrap();
        write(dir.path(), path, &format!("{body}\n"));
        written += 1;
    }
    assert!(written >= 9, "{written} examples");
    let paths = ["agents", "research.pack.yaml", "cards"].map(|p| dir.path().join(p));
    let c = Catalog::load(&paths, &offline());
    assert!(c.errors.is_empty(), "{:#?}", messages(&c.errors));
    assert_eq!(
        names(&c),
        [
            "analyst",
            "billing",
            "calendar-agent",
            "cooking-agent",
            "coordinator",
            "formatter",
            "researcher",
            "summarizer"
        ]
    );
    let workflows: Vec<&str> = c.workflows.keys().map(|n| n.as_str()).collect();
    assert_eq!(workflows, ["fan", "front-desk", "pipeline"]);
    assert_eq!(c.entry.as_ref().map(|e| e.as_str()), Some("coordinator"));
    assert_eq!(
        c.routing.default_agent.as_ref().map(|a| a.as_str()),
        Some("cooking-agent")
    );
    let summarizer = c.agents[&"summarizer".parse().unwrap()]
        .prompt
        .clone()
        .unwrap();
    assert_eq!(
        summarizer.instruction,
        "You summarize. Three bullet points, no more."
    );
    assert_eq!(summarizer.history.len(), 2);
    // The triggers the cards' workflows make pass the triggers' checks.
    let triggers = orchestrator::trigger::Triggers::default().with_cards(&c);
    assert!(
        triggers.errors.is_empty(),
        "{:#?}",
        messages(&triggers.errors)
    );
    assert_eq!(triggers.loaded.len(), 3);
}
