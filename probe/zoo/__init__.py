"""Model organisms: the catalogue of tiny models with known heads, shipped with the package.

Each organism is a subdirectory of this package holding what `save_pretrained` writes (safetensors weights,
config.json, tokenizer files) plus MODEL_CARD.md, card.json (the labels the head classifier must give) and
labels.csv (its label table, so nothing is labelled at start-up). Organisms that ship their training
(``stdlib-code`` and its 1-layer control) also hold ``step-N/`` checkpoints (weights in float16, loaded as
float32) and ``history.csv``, the table ``probe history --model zoo:NAME`` writes. What belongs here: the
catalogue, the tiny and planted test models and the shipped files; training them is :mod:`probe.training`
(``probe train NAME``).
`probe.models.load("zoo:NAME")` resolves the spec through :func:`path`; nothing touches the network.

**Planted organisms** (:func:`planted_names`; card.json ``"planted": true``) ship the same files but their
weights are set by hand (:mod:`probe.zoo.planted` builds them, and a test checks the shipped weights equal its
output): ``zoo:name-mover``, the ground truth of circuit search. They resolve like the others and are listed
apart (:func:`names` is the trained catalogue, which label tables, the app and ``probe train`` iterate).

Examples
--------
>>> import probe
>>> probe.zoo.names()
['brackets', 'coreference', 'esm-random', 'implicit-causality', 'induction', 'positional', 'retrieval',
 'sentences', 'stdlib-code', 'stdlib-code-1layer']
>>> probe.zoo.card("induction")["requirements"]["present"]  # what its labels must show (tests check it)
[{'layer': 0, 'head_type': 'previous_token'}, {'layer': 1, 'head_type': 'induction'}]
"""

from __future__ import annotations

import json
from pathlib import Path

from probe.errors import ProbeError

ZOO_DIR = Path(__file__).resolve().parent


def _is_planted(directory: Path) -> bool:
    """Whether the organism in `directory` is planted (its card.json says ``"planted": true``)."""
    try:
        card_data = json.loads((directory / "card.json").read_text())
    except (OSError, ValueError):
        return False  # no card, or one that cannot be read: a trained organism (its own checks say why)
    return isinstance(card_data, dict) and card_data.get("planted") is True


def names() -> list[str]:
    """The shipped trained organisms, sorted: every subdirectory with a config.json that is not planted."""
    return sorted(entry.name for entry in ZOO_DIR.iterdir()
                  if (entry / "config.json").is_file() and not _is_planted(entry))


def planted_names() -> list[str]:
    """The shipped planted organisms (hand-set weights, card.json ``"planted": true``), sorted.

    Examples
    --------
    >>> planted_names()
    ['name-mover']
    """
    return sorted(entry.name for entry in ZOO_DIR.iterdir()
                  if (entry / "config.json").is_file() and _is_planted(entry))


def path(name: str) -> Path:
    """The directory of organism `name`, trained or planted (what `from_pretrained` reads); ProbeError listing
    the known names."""
    known, planted = names(), planted_names()
    if name not in known and name not in planted:
        raise ProbeError(f"unknown model organism zoo:{name}; known: "
                         f"{', '.join('zoo:' + n for n in known) or 'none'}"
                         + (f"; planted: {', '.join('zoo:' + n for n in planted)}" if planted else ""))
    return ZOO_DIR / name


LABELS_FILE = "labels.csv"


def labels_path(name: str) -> Path:
    """The shipped label table of organism `name`, ``probe/zoo/NAME/labels.csv`` (what training and
    ``probe train NAME --relabel`` write; read it with :func:`probe.heads.tables.load_table`). ProbeError when
    the organism is unknown or ships no table."""
    table = path(name) / LABELS_FILE
    if not table.is_file():
        raise ProbeError(f"zoo:{name} ships no label table ({table}): write it with probe train {name} "
                         "--relabel")
    return table


def card(name: str) -> dict:
    """The machine-readable model card (card.json) of organism `name`."""
    return json.loads((path(name) / "card.json").read_text())


def check_requirements(table, requirements: dict) -> list[str]:
    """What a label table (probe.heads.label.label_model's) fails of a card's requirements; empty when all are
    met.

    `present`: a labelled head of that type (in `layer`, at `offset`, with accuracy ≥ `min_accuracy` when
    given); `absent`: no labelled head of that type; `measured`: some head of that type reaches `min_accuracy`
    (labelled or not)."""
    from probe.labelled import labelled_mask  # pandas: not at import (the CLI answers bad input without it)

    failed = []
    labelled = table[labelled_mask(table["label"])]
    for need in requirements.get("present", []):
        rows = labelled[labelled["head_type"] == need["head_type"]]
        if need.get("layer") is not None:
            rows = rows[rows["layer"] == need["layer"]]
        if need.get("offset") is not None:
            rows = rows[rows["offset"] == need["offset"]]
        if need.get("min_accuracy") is not None:
            rows = rows[rows["accuracy"] >= need["min_accuracy"]]
        if rows.empty:
            failed.append(f"no labelled head for {need}")
    for ban in requirements.get("absent", []):
        names = sorted(labelled.loc[labelled["head_type"] == ban["head_type"], "head_name"])
        if names:
            failed.append(f"{ban['head_type']} heads present: {names}")
    for need in requirements.get("measured", []):
        rows = table[table["head_type"] == need["head_type"]]
        if not (rows["accuracy"] >= need["min_accuracy"]).any():
            failed.append(f"no {need['head_type']} head reaches accuracy {need['min_accuracy']}")
    return failed
