"""The user's probe file: one JSON object per line, text plus query and target character spans, read into
:class:`~probe.heads.probesets.spans.SpanExample` with one-line errors naming the line."""

from __future__ import annotations

import json
from pathlib import Path

from probe.errors import ProbeError
from probe.heads.probesets.spans import Span, SpanExample

# ------------------------------------------------------------------------------------------------------------
# The user's probe file
# ------------------------------------------------------------------------------------------------------------


def _span(value, what: str, where: str, text: str) -> Span:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in value)):
        raise ProbeError(f"{where}: {what} must be [start, stop] character offsets, got {json.dumps(value)}")
    start, stop = value
    if not 0 <= start < stop <= len(text):
        raise ProbeError(f"{where}: {what} [{start}, {stop}] is not a non-empty span inside the text "
                         f"(0..{len(text)})")
    return start, stop


def _spans(value, what: str, where: str, text: str) -> tuple[Span, ...]:
    """One span [s, e] or a list of spans [[s, e], ...]."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(x, (list, tuple)) for x in value):
        return tuple(_span(item, what, where, text) for item in value)
    return (_span(value, what, where, text),)


def load_probe_file(path: str | Path) -> list[SpanExample]:
    """Read a JSONL probe file: one object per line (blank lines skipped), e.g.

        {"text": "mary saw john because she was late", "query": [22, 25], "target": [0, 4],
         "distractors": [[9, 13]]}

    `query`: the attending word's character span [start, stop); `target`: one span or a list of spans (the
    antecedent mentions); `distractors` (optional): other candidate mentions, for the nearest-mention
    baseline. Every problem is a one-line ProbeError naming the file and line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProbeError(f"probe file {path} does not exist")
    examples = []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise ProbeError(f"probe file {path} line {line}: not UTF-8 text (byte {error.start}); save it as "
                         "UTF-8") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProbeError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            raise ProbeError(f"{where}: expected a JSON object with text, query and target")
        missing = [key for key in ("text", "query", "target") if key not in record]
        if missing:
            raise ProbeError(
                f"{where}: missing {', '.join(missing)} (each line needs text, query and target)")
        text = record["text"]
        if not isinstance(text, str) or not text.strip():
            raise ProbeError(f"{where}: text must be a non-empty string")
        query = _span(record["query"], "query", where, text)
        targets = _spans(record["target"], "target", where, text)
        distractors = _spans(record["distractors"], "distractors", where,
                             text) if record.get("distractors") else ()
        examples.append(SpanExample(text, query, targets, distractors, source=where, group="file"))
    if not examples:
        raise ProbeError(f"probe file {path} is empty: write one JSON object per line with text, query and "
                         "target")
    return examples
