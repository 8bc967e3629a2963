#!/usr/bin/env python3
"""Knowledge agent: keyword search over knowledge/*.md.

Reads a task envelope on stdin and writes the result JSON on stdout:
{"summary": "...", "citations": ["knowledge/file.md#section"], "matches": N}.
Exit 1 (a permanent failure) when params.query is missing.
"""
import json
import pathlib
import re
import sys

STOP = {"the", "and", "for", "with", "about", "what", "did", "are", "was", "our", "from", "that", "this", "how", "why"}


def words(text):
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2 and w not in STOP]


def sections(path):
    """Yields (heading, body) for each markdown section of a file."""
    heading, lines = path.stem, []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            if lines:
                yield heading, " ".join(lines).strip()
            heading, lines = line.lstrip("#").strip(), []
        elif line.strip():
            lines.append(line.strip())
    if lines:
        yield heading, " ".join(lines).strip()


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def first_sentence(text):
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text


def main():
    envelope = json.load(sys.stdin)
    query = envelope.get("payload", {}).get("params", {}).get("query")
    if not isinstance(query, str) or not query.strip():
        print("params.query is required (a non-empty string)", file=sys.stderr)
        return 1
    terms = set(words(query))
    scored = []
    for path in sorted(pathlib.Path("knowledge").glob("*.md")):
        for heading, body in sections(path):
            text_words = words(heading + " " + body)
            score = sum(text_words.count(t) for t in terms)
            if score:
                scored.append((score, f"knowledge/{path.name}#{slug(heading)}", heading, body))
    scored.sort(key=lambda s: (-s[0], s[1]))
    best = scored[:3]
    if best:
        summary = " ".join(f"{heading}: {first_sentence(body)}" for _, _, heading, body in best)
    else:
        summary = f"No notes mention {query!r}."
    json.dump({"summary": summary, "citations": [c for _, c, _, _ in best], "matches": len(scored)}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
