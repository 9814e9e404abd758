"""The user's probe file: one JSON object per line, text plus query and target character spans, read into
:class:`~probe.heads.probesets.spans.SpanExample` with one-line errors naming the line. :func:`read_text` and
:func:`json_objects` are the one JSON-lines reader (also of ``probe circuit --task`` files,
:func:`probe.circuits.task.load_task`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def read_text(path: str | Path, what: str) -> str:
    """The text of a UTF-8 file the user gave; a missing or unreadable file, or bytes that are not UTF-8, are
    a one-line :class:`~probe.errors.ProbeError` naming `what`, the file and (not UTF-8) the line.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    what : str
        What the file is, for the messages ("probe file", "task file").

    Returns
    -------
    str

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "probes.jsonl")
    >>> _ = open(path, "wb").write(b'{"text": "ok"}\\n\\xe8\\n')
    >>> read_text(path, "probe file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    probe.errors.ProbeError: probe file ...probes.jsonl line 2: not UTF-8 text (byte 15); save it as UTF-8
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProbeError(f"{what} {path} does not exist")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ProbeError(f"cannot read {what} {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise ProbeError(f"{what} {path} line {line}: not UTF-8 text (byte {error.start}); save it as "
                         "UTF-8") from None


def json_objects(text: str, path: str | Path, fields: Sequence[str], unit: str = "line"
                 ) -> list[tuple[str, dict]]:
    """(where, object) of every non-blank line of a JSON-lines `text`: where is ``"PATH UNIT N"`` (N from 1),
    the prefix of every later message about that object. A line that is not JSON, or not a JSON object, is a
    one-line :class:`~probe.errors.ProbeError` naming it (and the `fields` an object needs).

    Parameters
    ----------
    text : str
        The file's text (:func:`read_text`).
    path : str or os.PathLike
        The file, for the messages.
    fields : sequence of str
        The fields each object needs (named when a line is not an object; the caller checks them).
    unit : str, default "line"
        What a line is called in the messages ("row" for task files).

    Returns
    -------
    list of (str, dict)

    Examples
    --------
    >>> json_objects('{"a": 1}\\n\\n{"a": 2}', "f.jsonl", ["a"])
    [('f.jsonl line 1', {'a': 1}), ('f.jsonl line 3', {'a': 2})]
    >>> json_objects('{"a": 1}\\n[1]', "f.jsonl", ["a"])
    Traceback (most recent call last):
    probe.errors.ProbeError: f.jsonl line 2: expected a JSON object with a
    """
    objects = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path} {unit} {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProbeError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            named = ", ".join(fields[:-1]) + " and " + fields[-1] if len(fields) > 1 else "".join(fields)
            raise ProbeError(f"{where}: expected a JSON object with {named}")
        objects.append((where, record))
    return objects


def load_probe_file(path: str | Path) -> list[SpanExample]:
    """Read a JSONL probe file: one object per line (blank lines skipped), e.g.

        {"text": "mary saw john because she was late", "query": [22, 25], "target": [0, 4],
         "distractors": [[9, 13]]}

    `query`: the attending word's character span [start, stop); `target`: one span or a list of spans (the
    antecedent mentions); `distractors` (optional): other candidate mentions, for the nearest-mention
    baseline. Every problem is a one-line ProbeError naming the file and line.
    """
    path = Path(path).expanduser()
    examples = []
    for where, record in json_objects(read_text(path, "probe file"), path, ("text", "query", "target")):
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
