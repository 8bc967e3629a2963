//! "Did you mean": the known name nearest a misspelled one.

/// The candidate nearest `name`, when one is near enough to be what was
/// meant: the same but for case, `_` and `-` (`input_schema` for
/// `inputSchema`), else at most a third of its letters edited (at least
/// one, at most three).
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let folded = fold(name);
    let limit = (name.chars().count() / 3).clamp(1, 3);
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        if candidate == name {
            continue;
        }
        let distance = if fold(candidate) == folded {
            0
        } else {
            edits(&name.to_lowercase(), &candidate.to_lowercase())
        };
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Lower case without `_` and `-`.
fn fold(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The edits that turn `a` into `b`: insertions, deletions,
/// substitutions and swaps of two neighbours (`wrok` is one from `work`).
fn edits(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: the edits from a[..i] to b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: [&str; 5] = [
        "displayName",
        "description",
        "signals",
        "skills",
        "inputSchema",
    ];

    #[test]
    fn near_misses_find_their_name_and_far_ones_nothing() {
        assert_eq!(nearest("displayname", FIELDS), Some("displayName"));
        assert_eq!(nearest("display_name", FIELDS), Some("displayName"));
        assert_eq!(nearest("input_schema", FIELDS), Some("inputSchema"));
        assert_eq!(nearest("sklls", FIELDS), Some("skills"));
        assert_eq!(nearest("signal", FIELDS), Some("signals"));
        assert_eq!(nearest("descripton", FIELDS), Some("description"));
        assert_eq!(nearest("colour", FIELDS), None);
        assert_eq!(nearest("x", FIELDS), None);
        assert_eq!(
            nearest("skills", FIELDS),
            None,
            "the name itself is no suggestion"
        );
    }

    #[test]
    fn edit_distance_counts_each_edit() {
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("same", "same"), 0);
        assert_eq!(edits("wrok", "work"), 1);
    }
}
