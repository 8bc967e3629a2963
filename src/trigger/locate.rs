//! Finds the line of a field in a YAML file from its path
//! (`steps[2].parallel[0].agent`), so a problem found after parsing is
//! reported where it is written. Block style is followed exactly; inside
//! flow style (`{ a: 1 }`) or JSON the nearest enclosing line found is
//! given, or none.

/// One segment of a path.
#[derive(Debug, PartialEq)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits `steps[2].agent` into `steps`, `2`, `agent`.
fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        while let Some(end) = rest.find(']') {
            if let Ok(i) = rest[1..end].parse() {
                out.push(Segment::Index(i));
            }
            rest = &rest[end + 1..];
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

#[cfg(test)]
mod tests {
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
}
