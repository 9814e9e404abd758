"""What an organism ships besides its weights: card.json, MODEL_CARD.md and labels.csv, its label table.

The label table is what :func:`probe.heads.label.label_model` gives the saved organism with the LabelConfig
the card records under ``"label_table"`` (``{"file": "labels.csv", "label_config": {...}}``: every field, so
the shipped table can be recomputed and compared, as tests/models/test_zoo.py does). It is written by training
and by ``probe train NAME --relabel`` (:func:`relabel`, the weights untouched), with
:func:`probe.heads.tables.save_table`; the dashboard reads it at start-up instead of labelling.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

from probe.errors import ProbeError
from probe.heads.label import LabelConfig, label_model
from probe.heads.label.config import NOT_IDENTITY
from probe.heads.tables import labelled_mask, save_table
from probe.models import load
from probe.training.organisms import ORGANISMS, TrainConfig
from probe.untrained import DEFAULT_TWINS
from probe.zoo import LABELS_FILE, check_requirements
from probe.zoo.tiny import save_tiny

ESM_RANDOM = "esm-random"


def label_config_of(options: dict | None) -> LabelConfig:
    """The LabelConfig a card records (``{}`` or None: the defaults); JSON lists become tuples.

    Raises
    ------
    ProbeError
        A key is not a LabelConfig field (a card written by another version of probe).
    """
    known = {item.name for item in dataclasses.fields(LabelConfig)}
    unknown = sorted(set(options or {}) - known)
    if unknown:
        raise ProbeError(f"the card's label_config has {', '.join(unknown)}, not LabelConfig fields: relabel "
                         "with `probe train NAME --relabel` after removing them")
    return LabelConfig(**{key: tuple(value) if isinstance(value, list) else value
                          for key, value in (options or {}).items()})


def config_record(config: LabelConfig) -> dict:
    """Every field of `config` as JSON values (tuples as lists), for card.json."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def label_table(directory: Path, name: str, config: LabelConfig) -> pd.DataFrame:
    """The label table of the organism saved in `directory`, its model column ``zoo:NAME`` (where it ships).

    Returns
    -------
    pandas.DataFrame
        One row per (head, head type), the columns of :data:`probe.heads.tables.COLUMNS`.
    """
    table = label_model(load(str(directory)), config)
    return table.assign(model=f"zoo:{name}")


def card_label_config(card: dict, organism: TrainConfig | None) -> LabelConfig:
    """The LabelConfig an organism is labelled with: the card's ``label_table.label_config`` when it has one,
    else the recipe's overrides (:attr:`TrainConfig.label_config`) of the defaults with ``probe label``'s
    default control, :data:`~probe.untrained.DEFAULT_TWINS` untrained twins (a label must beat them too)."""
    recorded = card.get("label_table", {}).get("label_config")
    if recorded is not None:
        return label_config_of(recorded)
    recipe = organism.label_config if organism is not None else {}
    return label_config_of({"twins": DEFAULT_TWINS, **recipe})


def classifier_summary(table: pd.DataFrame) -> dict:
    """The card's view of a label table: ``labels`` ({head_type: [head names]}) and ``labelled_scores``
    (numbers rounded to 4 places, NaN as null: card.json is strict JSON)."""
    labelled = table[labelled_mask(table["label"])]
    labels = {t: sorted(g.loc[labelled_mask(g["label"]), "head_name"])
              for t, g in table.groupby("head_type", sort=False)}
    scores = [{k: (None if v != v else round(v, 4)) if isinstance(v, float) else v for k, v in row.items()}
              for row in labelled[["head_name", "head_type", "score", "ci_low", "chance", "accuracy",
                                   "baseline_accuracy"]].to_dict("records")]
    return {"labels": labels, "labelled_scores": scores}


def add_labels(card: dict, out: Path, config: LabelConfig, requirements: dict) -> pd.DataFrame:
    """Label the organism in `out` with `config`, write out/labels.csv and put its labels, the config and the
    requirements it misses into `card`; returns the table."""
    table = label_table(out, card["name"], config)
    save_table(table, out / LABELS_FILE)
    # the fields that change no row (block_bytes, batch_size) do not make a config other than the default
    rows_only = {name: getattr(LabelConfig(), name) for name in NOT_IDENTITY}
    defaults = dataclasses.replace(config, **rows_only) == LabelConfig(twins=config.twins, text=config.text)
    twins = f", {config.twins} untrained twins as a control" if config.twins else ""
    if config.text != LabelConfig().text:
        twins += f", token probes on the {config.text} text"
    card["classifier"] = (f"probe.heads.label.label_model with the default LabelConfig(){twins}" if defaults
                          else "probe.heads.label.label_model with the LabelConfig of "
                               "label_table.label_config")
    card.pop("label_config", None)  # (older cards) now under label_table
    card["label_table"] = {"file": LABELS_FILE, "label_config": config_record(config)}
    card.update(classifier_summary(table))
    card["requirements_failed"] = check_requirements(table, requirements)
    return table


def write_card(card: dict, out: Path) -> dict:
    """card.json and MODEL_CARD.md into `out`, files made readable; returns `card`."""
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    markdown = esm_random_markdown(card) if card["name"] == ESM_RANDOM else model_card_markdown(card)
    (out / "MODEL_CARD.md").write_text(markdown)
    readable(out)
    return card


def relabel(name: str, out: Path) -> dict:
    """Label the organism in `out` again (its card.json written by training) with the LabelConfig its card
    records, and rewrite labels.csv, the card's labels and requirements, and MODEL_CARD.md; the weights are
    not touched. Returns the card."""
    card_file = out / "card.json"
    if not card_file.is_file():
        raise ProbeError(f"{out} has no card.json: train the organism into it first (probe train {name} "
                         "--out DIR)")
    card = json.loads(card_file.read_text())
    organism = ORGANISMS.get(name)
    config = card_label_config(card, organism)
    requirements = organism.requirements if organism is not None else card.get("requirements", {})
    card["requirements"] = requirements
    add_labels(card, out, config, requirements)
    return write_card(card, out)


def schedule_text(lr_floor: float) -> str:
    """The learning-rate schedule after the warm-up, in words (the model card's Training line).

    Examples
    --------
    >>> from probe.training.cards import schedule_text
    >>> schedule_text(0.1), schedule_text(1.0), schedule_text(0.5)
    ('cosine to lr/10', 'then constant', 'cosine to lr x 0.5')
    """
    if lr_floor == 1.0:
        return "then constant"
    if lr_floor == 0.1:
        return "cosine to lr/10"
    return f"cosine to lr x {lr_floor:g}"


def readable(directory: Path) -> None:
    """save_pretrained writes the weights 0600; shipped files must be readable by every user of an install."""
    for file in directory.iterdir():
        if file.is_file():
            file.chmod(0o644)


def save_esm_random(seed: int, out: Path, label: bool = True) -> dict:
    """zoo:esm-random: a tiny ESM-2-shaped EsmForMaskedLM with RANDOM weights and a random, non-zero contact
    head (probe.zoo.tiny). Untrained: it exists so the protein views and contact code run offline."""
    save_tiny("esm", out, seed=seed)
    card = {
        "name": ESM_RANDOM,
        "task": "none: UNTRAINED, random weights. It exists only so the protein views and the contact code "
                "work offline; its attention and contacts mean nothing",
        "architecture": "EsmForMaskedLM (ESM-2 layout: rotary positions, 33-token ESM vocabulary), 2 layers, "
                        "4 heads, width 32, random contact regression (probe.zoo.tiny.build_tiny('esm'))",
        "seed": seed,
        "steps": 0,
        "command": f"probe train {ESM_RANDOM} --seed {seed} --out DIR",
        "requirements": {"present": [], "absent": []},
    }
    if label:
        add_labels(card, out, LabelConfig(), card["requirements"])
    return write_card(card, out)


def esm_random_markdown(card: dict) -> str:
    """MODEL_CARD.md of zoo:esm-random (built, not trained)."""
    lines = [f"# zoo:{ESM_RANDOM}", "", "**UNTRAINED.** " + card["task"] + ".", "",
             f"**Architecture.** {card['architecture']}.", "", f"**Built by** `{card['command']}` (no "
                                                               "training).", ""]
    if "labels" in card:
        lines += [f"**Labels** given by {card['classifier']} on random weights (effect over chance, "
                  "clustered bootstrap, Benjamini–Hochberg FDR 0.05; the tests check the requirements below, "
                  f"not this list; the whole table: `{LABELS_FILE}`):", ""]
        lines += [f"- {head_type}: {', '.join(heads) or 'none'}"
                  for head_type, heads in card["labels"].items()]
        lines.append("")
    lines += ["Machine-readable: `card.json` next to this file.", ""]
    return "\n".join(lines)


def data_lines(card: dict) -> list[str]:
    """MODEL_CARD.md's lines on the training text's repetition and the checkpoints, where the card has
    them."""
    lines, config = [], card["config"]
    figures = card.get("data_repetition")
    if figures:
        lines += ["", f"**Repetition of the training text** (`probe.training.repetition`, windows of "
                  f"{figures['context']} tokens, {figures['tokens']} predictions): bigram repetition "
                  f"frequency {figures['bigram_repetition_frequency']:.1%}, reliability "
                  f"{figures['reliability']:.1%}, "
                  f"{figures['in_repeated_spans']:.1%} of tokens in repeated spans."]
    steps = config.get("checkpoint_steps")
    if steps:
        stored = config.get("checkpoint_dtype", "float32")
        lines += ["", f"**Checkpoints.** `step-N/` after steps {', '.join(map(str, steps))}; weights stored "
                  f"in {stored}" + (" (they load as float32)" if stored != "float32" else "")
                  + "; `probe history --model DIR` measures them."]
    return lines


def model_card_markdown(card: dict) -> str:
    """MODEL_CARD.md from card.json (the JSON is the machine-readable truth)."""
    config = card["config"]
    lines = [
        f"# zoo:{card['name']}",
        "",
        f"**Task.** {card['task']}.",
        "",
        f"**Architecture.** {card['architecture']}. {config['n_layer']} layers, {config['n_head']} heads, "
        f"width {config['n_embd']}, {config['n_positions']} positions, {card['parameters']} trainable "
        "parameters.",
        "",
        f"**Vocabulary.** {card['vocabulary']}.",
        "",
        f"**Data.** `{card['data_generator']}`; the loss is computed only on tokens predictable from "
        "context.",
        "",
        f"**Training.** `{card['command']}`: seed {card['seed']}, {card['steps']} steps of batch "
        f"{config['batch']}, AdamW lr {config['lr']} ({config['warmup']} warm-up steps, "
        f"{schedule_text(config.get('lr_floor', 0.1))}), "
        f"{card['threads']} CPU thread(s): {card['train_seconds']} s measured. Final training loss "
        f"{card['final_train_loss']} nats.",
        "",
        "**Evaluation** (held-out):",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in card["evaluation"].items()]
    lines += data_lines(card)
    if "labels" in card:
        lines += ["", f"**Labels** given by {card['classifier']} (effect over chance, clustered bootstrap, "
                  "Benjamini–Hochberg FDR 0.05; the tests check the requirements below, not this list; the "
                  f"whole table: `{LABELS_FILE}`):", ""]
        lines += [f"- {head_type}: {', '.join(heads) or 'none'}"
                  for head_type, heads in card["labels"].items()]
        lines += ["", "Requirements: " + json.dumps(card["requirements"])
                  + (" — all met." if not card.get("requirements_failed")
                     else " — FAILED: " + "; ".join(card["requirements_failed"]))]
    lines += ["", "Machine-readable: `card.json` next to this file.", ""]
    return "\n".join(lines)


