//! Finds the line of a field in a YAML file from its path
//! (`steps[2].parallel[0].agent`), so a problem found after parsing is
//! reported where it is written. Block style is followed exactly; inside
//! flow style (`{ a: 1 }`) or JSON the nearest enclosing line found is
//! given, or none.

/// One segment of a path.
#[derive(Debug, PartialEq)]
pub(super) enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits `steps[2].agent` into `steps`, `2`, `agent`.
pub(super) fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        while let Some(open) = rest.find('[') {
            let after = &rest[open + 1..];
            let Some(end) = after.find(']') else {
                break;
            };
            if let Ok(i) = after[..end].parse() {
                out.push(Segment::Index(i));
            }
            rest = &after[end + 1..];
        }
    }
    out
}

/// A line of the file, as the locator sees it.
struct Line<'a> {
    /// 1-based.
    number: usize,
    /// The column of a leading `- `, if the line starts a sequence item.
    dash: Option<usize>,
    /// The column where the content (after any `- `) starts.
    col: usize,
    /// The content.
    text: &'a str,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let indent = raw.len() - raw.trim_start().len();
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "---" {
            continue;
        }
        let (dash, col, content) = match trimmed.strip_prefix('-') {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                let after = rest.trim_start();
                (Some(indent), indent + 1 + (rest.len() - after.len()), after)
            }
            _ => (None, indent, trimmed),
        };
        out.push(Line {
            number: i + 1,
            dash,
            col,
            text: content,
        });
    }
    out
}

/// The 1-based line of `path` in `text`, or of its nearest ancestor that
/// can be found; `None` when not even the first segment is found.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    if text.trim_start().starts_with(['{', '[']) {
        return json_line_of(text, path);
    }
    let all = lines(text);
    let mut range: &[Line<'_>] = &all;
    let mut found = None;
    for segment in segments(path) {
        let Some((line, rest)) = (match segment {
            Segment::Key(key) => find_key(range, key),
            Segment::Index(i) => find_item(range, i),
        }) else {
            break;
        };
        found = Some(line);
        range = rest;
    }
    found
}

/// The line holding `key:` at the range's mapping level, and the lines of
/// its value.
fn find_key<'r, 'a>(range: &'r [Line<'a>], key: &str) -> Option<(usize, &'r [Line<'a>])> {
    let level = range.first()?.col;
    let at = range.iter().position(|l| {
        l.col == level
            && (l.text.strip_prefix(key).is_some_and(|r| r.starts_with(':'))
                || l.text
                    .strip_prefix('"')
                    .and_then(|r| r.strip_prefix(key))
                    .is_some_and(|r| r.starts_with("\":")))
    })?;
    let after = &range[at + 1..];
    let end = after
        .iter()
        .position(|l| l.col <= level || l.dash.is_some_and(|d| d < level))
        .unwrap_or(after.len());
    Some((range[at].number, &after[..end]))
}

/// The line starting item `index` of the sequence at the range's level,
/// and the item's lines (its own first line included).
fn find_item<'r, 'a>(range: &'r [Line<'a>], index: usize) -> Option<(usize, &'r [Line<'a>])> {
    let level = range.first()?.dash?;
    let starts: Vec<usize> = range
        .iter()
        .enumerate()
        .filter(|(_, l)| l.dash == Some(level))
        .map(|(i, _)| i)
        .collect();
    let start = *starts.get(index)?;
    let end = starts.get(index + 1).copied().unwrap_or(range.len());
    let item = &range[start..end];
    // The item's first line is read from its content column on.
    Some((item[0].number, item))
}

/// A container open at the scanner's position in a JSON text.
enum Frame {
    /// An object, with the key whose value is being read.
    Object(Option<String>),
    /// An array, with the index of the element being read (`None` before
    /// the first).
    Array(Option<usize>),
}

/// `line_of` for JSON: scans the text, keeping the path to where it is,
/// and gives the line where `path` (or its deepest ancestor found) starts.
fn json_line_of(text: &str, path: &str) -> Option<usize> {
    let want = segments(path);
    let mut stack: Vec<Frame> = Vec::new();
    let mut best: Option<(usize, usize)> = None;
    let mut line = 1;
    let mut chars = text.chars();
    // Notes the position of the path on the stack: it is found when it
    // equals `want`, and an ancestor when a prefix of it.
    let mut at = |stack: &[Frame], line: usize| -> bool {
        let here: Vec<Segment<'_>> = stack
            .iter()
            .filter_map(|f| match f {
                Frame::Object(Some(k)) => Some(Segment::Key(k.as_str())),
                Frame::Array(Some(i)) => Some(Segment::Index(*i)),
                _ => None,
            })
            .collect();
        if here.len() <= want.len()
            && here.iter().zip(&want).all(|(a, b)| a == b)
            && best.is_none_or(|(depth, _)| here.len() > depth)
        {
            best = Some((here.len(), line));
        }
        here.len() == want.len() && best.is_some_and(|(d, _)| d == want.len())
    };
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            continue;
        }
        if c.is_whitespace() {
            continue;
        }
        // A value starting in an array is its next element.
        if let Some(Frame::Array(index @ None)) = stack.last_mut()
            && c != ']'
        {
            *index = Some(0);
            if at(&stack, line) {
                break;
            }
        }
        match c {
            '{' => stack.push(Frame::Object(None)),
            '[' => stack.push(Frame::Array(None)),
            '}' | ']' => {
                stack.pop();
            }
            ',' => match stack.last_mut() {
                Some(Frame::Object(key)) => *key = None,
                Some(Frame::Array(Some(i))) => {
                    *i += 1;
                    // The element's line is where its value starts.
                    let mut rest = chars.clone();
                    let mut start = line;
                    for c in rest.by_ref() {
                        if c == '\n' {
                            start += 1;
                        } else if !c.is_whitespace() {
                            break;
                        }
                    }
                    if at(&stack, start) {
                        break;
                    }
                }
                _ => {}
            },
            '"' => {
                let mut s = String::new();
                let mut escaped = false;
                for c in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        (_, c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            s.push(c);
                            escaped = false;
                        }
                    }
                }
                if let Some(Frame::Object(key @ None)) = stack.last_mut() {
                    *key = Some(s);
                    if at(&stack, line) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    best.filter(|(depth, _)| *depth > 0).map(|(_, line)| line)
}

#[cfg(test)]
mod tests {

    #[test]
    fn text_between_brackets_is_skipped_whatever_its_characters() {
        assert_eq!(
            segments("a[1]¥]x[2]"),
            vec![Segment::Key("a"), Segment::Index(1), Segment::Index(2)]
        );
        assert_eq!(segments("Ἐ[]🮔]"), vec![Segment::Key("Ἐ")]);
    }
    use super::*;

    const TEXT: &str = "\
id: demo
# a comment
steps:
  - id: search
    agent: knowledge-agent
    params: { query: x }
  - id: fan
    parallel:
      - id: a
        agent: one
      - id: b
        agent: two
        params:
          deep: 1
  - id: confirm
    approval: { prompt: ok? }
run_mode: on_demand
";

    #[test]
    fn block_paths_find_their_lines_and_flow_ones_the_nearest() {
        assert_eq!(line_of(TEXT, "id"), Some(1));
        assert_eq!(line_of(TEXT, "steps"), Some(3));
        assert_eq!(line_of(TEXT, "steps[0]"), Some(4));
        assert_eq!(line_of(TEXT, "steps[0].id"), Some(4));
        assert_eq!(line_of(TEXT, "steps[0].agent"), Some(5));
        assert_eq!(line_of(TEXT, "steps[1].parallel[1].agent"), Some(12));
        assert_eq!(line_of(TEXT, "steps[1].parallel[1].params.deep"), Some(14));
        assert_eq!(line_of(TEXT, "steps[0].params.query"), Some(6));
        assert_eq!(line_of(TEXT, "steps[2].approval.prompt"), Some(16));
        assert_eq!(line_of(TEXT, "run_mode"), Some(17));
        assert_eq!(line_of(TEXT, "steps[7]"), Some(3));
        assert_eq!(line_of(TEXT, "nothing"), None);
    }

    const JSON: &str = r#"{
  "name": "outlook-agent",
  "skills": [
    {
      "id": "send:draft",
      "tags": ["a", "b,\"c"]
    },
    { "id": "",
      "scopes": [] }
  ],
  "x": {"skills": 1}
}"#;

    #[test]
    fn json_paths_find_their_lines() {
        assert_eq!(line_of(JSON, "name"), Some(2));
        assert_eq!(line_of(JSON, "skills"), Some(3));
        assert_eq!(line_of(JSON, "skills[0]"), Some(4));
        assert_eq!(line_of(JSON, "skills[0].id"), Some(5));
        assert_eq!(line_of(JSON, "skills[0].tags[1]"), Some(6));
        assert_eq!(line_of(JSON, "skills[1]"), Some(8));
        assert_eq!(line_of(JSON, "skills[1].scopes"), Some(9));
        assert_eq!(line_of(JSON, "skills[1].nothing"), Some(8));
        assert_eq!(line_of(JSON, "x.skills"), Some(11));
        assert_eq!(line_of(JSON, "nothing"), None);
    }
}
