"""A model's training history as one table: per checkpoint, the in-context-learning score, the loss by
position and the training loss; per checkpoint and head, the previous-token and induction (prefix-matching)
scores and labels and the copying score (``probe history``; Olsson et al. 2022's phase-change measurements).

One unit of :func:`probe.runs.runner.run` per checkpoint (:class:`HistoryTask`), so a history is journalled
beside its output, resumes after a SIGKILL at the unit of one checkpoint, keeps the rows of checkpoints a run
does not name, and is the same table for the same checkpoints and options (its identity: the options and the
content hash of the checkpoint's weights). What each unit measures, reusing the package's own measurements:

* heads: :func:`probe.heads.label.label_model` with :attr:`HistoryConfig.label` (previous-token on held-out
  natural text, induction on repeated random blocks drawn by the held-out text's token frequencies — Olsson's
  prefix-matching score — each with its clustered-bootstrap label; the held-out text is the ICL score's,
  :attr:`HistoryConfig.split`, unless the label config names another than GAP's development split), and its
  ``copying`` column (:mod:`probe.heads.copying`, Σλ/Σ|λ| of the OV circuit);
* natural text: :func:`probe.training.incontext.position_losses` on the held-out passages
  (:func:`probe.training.text.held_out_rows`), the ICL score (:func:`probe.training.incontext.icl_score`) —
  the passages of :attr:`HistoryConfig.split`, by default the text held out from the one the model's card says
  it was trained on (:func:`probe.runs.history_inputs.held_out_text`: stdlib-held-out for ``stdlib-code``,
  GAP's development split for the GAP organisms and for models without such a card);
* training loss: the checkpoint's card.json ``train_loss`` (what ``probe train --checkpoint-steps`` records:
  the running mean, EMA 0.98, of the steps before it; NaN where unknown, e.g. step 0 or another trainer's
  checkpoints).

The table (:data:`HISTORY_COLUMNS`) is long and has three kinds of row, told apart by ``row``:

* ``"checkpoint"`` — one per checkpoint: ``train_loss``, ``held_out_loss`` (mean over tokens 1 … late of the
  held-out passages), ``icl_score`` and its standard error over passages ``icl_se``, ``icl_early``,
  ``icl_late`` (the positions), ``n_passages``;
* ``"head"`` — one per checkpoint and head: ``layer``, ``head``, ``head_name``, ``previous_token``,
  ``previous_token_label``, ``induction``, ``induction_label``, ``copying`` and ``composition_prev_token``;
* ``"position"`` — one per checkpoint and token position 1 … late: ``position``, ``loss`` (the mean over the
  held-out passages).

``composition_prev_token`` is each head's K-composition with the checkpoint's previous-token head(s) (Elhage
et al. 2021, :func:`composition_with_previous_token`); NaN — unknown, never 0 — where no previous-token head
is labelled in an earlier layer. Every row carries ``model``, ``checkpoint`` and ``step``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from probe.errors import ProbeError
from probe.hashing import identity_hash
from probe.heads.corpus import PROBE_SPLIT
from probe.heads.label import LabelConfig, config_identity, label_model
from probe.runs import runner
from probe.runs.checkpoints import (
    Checkpoint,
    checkpoint_directory,
    checkpoint_revision,
    checkpoint_step,
    local_directory,
    make_checkpoint,
)
from probe.runs.history_inputs import (
    TEXT_SPLITS,
    check_one_model,
    check_revisions_inside,
    check_text_fits,
    held_out_text,
)
from probe.runs.hub import load_checkpoint
from probe.runs.runner import Out, Unit, UnitOutput, UnitResult
from probe.runs.weight_cache import cached_copying_scores
from probe.training import incontext, text

HEAD_TYPES = ("previous_token", "induction")
HISTORY_COLUMNS = [
    "model", "checkpoint", "step", "row",
    "train_loss", "held_out_loss", "icl_score", "icl_se", "icl_early", "icl_late", "n_passages",
    "layer", "head", "head_name", "previous_token", "previous_token_label", "induction", "induction_label",
    "copying", "composition_prev_token",
    "position", "loss",
]
ROWS = ("checkpoint", "head", "position")


def default_label_config() -> LabelConfig:
    """The head measurements of a history: previous-token and induction only, no ablation (not part of the
    phase-change measurements, and the costliest stage), the default probe sets and statistics otherwise."""
    return LabelConfig(types=HEAD_TYPES, ablate="none")


@dataclass(frozen=True)
class HistoryConfig:
    """What a history measures (frozen; its fields and the weights are a unit's identity).

    Attributes
    ----------
    label : LabelConfig
        The head classifier's settings (default: :func:`default_label_config`); its types must include
        previous_token and induction.
    icl_early, icl_late : int
        The ICL score's tokens (1-based within a held-out passage): loss at `icl_late` minus loss at
        `icl_early` (Olsson et al.'s 500 and 50, scaled to GAP passages: 120 and 12).
    split : str or None
        The text the held-out loss and the ICL score are measured on, one of
        :data:`probe.runs.history_inputs.TEXT_SPLITS`; None (the default): the split held out from the text
        the model's card.json names (:func:`probe.runs.history_inputs.held_out_text`; GAP's development split
        where no card names one), resolved once by :func:`history` before anything is measured.
    max_passages : int or None
        Use only the first this many held-out passages long enough (None: every one; tests use few).
    batch_size : int
        Held-out rows per forward (not part of the identity).
    """

    label: LabelConfig = field(default_factory=default_label_config)
    icl_early: int = incontext.ICL_EARLY
    icl_late: int = incontext.ICL_LATE
    split: str | None = None
    max_passages: int | None = None
    batch_size: int = 64


def history_identity(config: HistoryConfig, model: str, revision: str | None) -> str | None:
    """The identity of one checkpoint's rows: every option that changes them, the model's name and the
    content hash of its weights (None when the weights are not known before loading)."""
    if revision is None:
        return None
    options = {key: value for key, value in asdict(config).items() if key not in ("label", "batch_size")}
    return identity_hash({**options, "label": config_identity(config.label), "model": model,
                          "revision": revision, "columns": HISTORY_COLUMNS})


def composition_with_previous_token(loaded, labels: pd.DataFrame) -> np.ndarray:
    """Each head's K-composition with the model's previous-token head(s) `[layer head]`
    (:func:`probe.circuits.composition.composition_scores`, TransformerLens' definition): the largest score
    over the heads `labels` labels ``previous_token`` in earlier layers; NaN (unknown, never 0) for a head
    with no such head before it, and everywhere when none is labelled or the model's factors are refused."""
    from probe.circuits.circuit import labelled_heads
    from probe.circuits.composition import composition_scores

    out = np.full((loaded.n_layers, loaded.n_heads), math.nan)  # [layer head]
    senders = labelled_heads(labels, "previous_token")
    if not senders:
        return out
    first = min(layer for layer, _ in senders)
    receivers = [(layer, head) for layer in range(first + 1, loaded.n_layers)
                 for head in range(loaded.n_heads)]
    scores = composition_scores(loaded, receivers, senders, modes=["K"]) if receivers else pd.DataFrame()
    if scores.empty:
        return out
    best = scores.groupby(["receiver_layer", "receiver_head"])["score"].max()
    for (layer, head), score in best.items():
        out[int(layer), int(head)] = score
    return out


def train_loss(checkpoint: Checkpoint) -> float:
    """The training loss a checkpoint's card.json records (``train_loss``), NaN when it has none."""
    directory = checkpoint_directory(checkpoint)
    card = directory / "card.json" if directory is not None else None
    try:
        found = card is not None and card.is_file()
        value = json.loads(card.read_text()).get("train_loss") if found else None
    except (OSError, ValueError):
        value = None
    return float(value) if isinstance(value, int | float) else math.nan


def measure(loaded, checkpoint: Checkpoint, config: HistoryConfig, note=None) -> pd.DataFrame:
    """Every row of one checkpoint's history (:data:`HISTORY_COLUMNS`; ``model`` is the checkpoint's spec).

    Raises
    ------
    ProbeError
        The model is no causal LM, its tokenizer has no BOS token, it has fewer positions than
        ``icl_late`` + 1, or ``config.split`` is None (unresolved: :func:`history` resolves it).
    """
    if loaded.kind != "causal_lm":
        raise ProbeError(f"{loaded.name} is a {loaded.kind.description}: a history measures next-token loss, "
                         "so it needs a causal LM")
    if loaded.tokenizer.bos_token_id is None:
        raise ProbeError(f"{loaded.name}'s tokenizer has no BOS token: the held-out passages start with one")
    if loaded.max_tokens < config.icl_late + 1:
        raise ProbeError(f"{loaded.name} reads {loaded.max_tokens} positions: too few for the ICL score at "
                         f"token {config.icl_late}; lower --icl-positions")
    if config.split is None:
        raise ProbeError("HistoryConfig.split is None here: measure through probe.runs.history.history, "
                         "which resolves it from the model's card, or give the split")
    labels = label_model(loaded, config.label, note=note, copying_of=cached_copying_scores)
    rows = text.held_out_rows(loaded.tokenizer, config.icl_late, config.split, config.max_passages)
    if not len(rows):
        raise ProbeError(f"no passage of the {config.split} text has {config.icl_late} tokens with "
                         f"{loaded.name}'s tokenizer; lower --icl-positions")
    losses = incontext.position_losses(loaded.model, rows, config.batch_size)  # [row position]
    by_position = losses.mean(0).numpy()  # [position]
    model = dict(model=checkpoint.spec, checkpoint=checkpoint.name, step=checkpoint.step)
    summary = pd.DataFrame([dict(**model, row="checkpoint", train_loss=train_loss(checkpoint),
                                 held_out_loss=float(losses.mean()),
                                 icl_score=incontext.icl_score(losses, config.icl_early, config.icl_late),
                                 icl_se=incontext.icl_standard_error(losses, config.icl_early,
                                                                     config.icl_late),
                                 icl_early=config.icl_early, icl_late=config.icl_late,
                                 n_passages=len(rows))])
    heads = head_rows(labels, composition_with_previous_token(loaded, labels)).assign(**model, row="head")
    positions = pd.DataFrame({"position": np.arange(1, len(by_position) + 1), "loss": by_position}).assign(
        **model, row="position")
    return tidy(pd.concat([summary, heads, positions], ignore_index=True))


def head_rows(labels: pd.DataFrame, composition: np.ndarray) -> pd.DataFrame:
    """One row per head from a label table: the previous-token and induction scores and labels side by side,
    copying, and `composition` `[layer head]`. Where a table holds several probe lengths, the longest
    probes' rows are used."""
    if "seq_len" in labels and labels["seq_len"].notna().any():
        labels = labels[labels["seq_len"].isna() | (labels["seq_len"] == labels["seq_len"].max())]
    keys = ["layer", "head", "head_name"]
    heads = labels[keys + ["copying"]].drop_duplicates(keys).sort_values(["layer", "head"])
    for head_type in HEAD_TYPES:
        part = labels[labels["head_type"] == head_type][keys + ["score", "label"]]
        heads = heads.merge(part.rename(columns={"score": head_type, "label": f"{head_type}_label"}),
                            on=keys, how="left")
    heads["composition_prev_token"] = composition[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)]
    return heads


def tidy(table: pd.DataFrame) -> pd.DataFrame:
    """`table` in :data:`HISTORY_COLUMNS` order with stable dtypes (steps and head indices nullable ints,
    labels nullable booleans): the same table whether it was just computed or read back."""
    table = table.reindex(columns=HISTORY_COLUMNS)
    for column in ("step", "layer", "head", "position", "icl_early", "icl_late", "n_passages"):
        table[column] = pd.array(pd.to_numeric(table[column]), dtype="Int64")
    for column in ("previous_token_label", "induction_label"):
        table[column] = table[column].astype("boolean")
    for column in ("model", "checkpoint", "row", "head_name"):
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    other = ("model", "checkpoint", "row", "head_name", "step", "layer", "head", "position", "icl_early",
             "icl_late", "n_passages", "previous_token_label", "induction_label")
    float_columns = [column for column in HISTORY_COLUMNS if column not in other]
    table[float_columns] = table[float_columns].astype(float)
    return table


@dataclass(frozen=True)
class HistoryTask:
    """One checkpoint's history per unit (picklable: it may travel to a Ray worker)."""

    config: HistoryConfig = field(default_factory=HistoryConfig)
    device: str = "cpu"

    def identity(self, unit: Unit) -> str | None:
        checkpoint: Checkpoint = unit.payload
        return history_identity(self.config, checkpoint.spec, checkpoint_revision(checkpoint))

    def load(self, group: Checkpoint):
        return load_checkpoint(group, self.device)

    def compute(self, state, unit: Unit) -> UnitOutput:
        notes: list[str] = []
        table = measure(state, unit.payload, self.config, note=notes.append)
        return UnitOutput(table=table, notes=notes)

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        return None if result.table is None else tidy(result.table)

    def owners(self, table: pd.DataFrame) -> pd.Series:
        return table["model"].astype(str) + "@" + table["checkpoint"].astype(str)


def read_history(path: Path, output: bool = False) -> pd.DataFrame:
    """A history table written by :func:`history` (.csv or .parquet); one-line ProbeError for anything
    else, naming the fix: another table to read, or (`output`: the existing file of an output) another output
    or ``force``."""
    fix = ("pass another --out, or --force to overwrite it" if output else
           "give a table written by `probe history --out`")
    try:
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except (OSError, ValueError) as error:
        raise ProbeError(f"{path} is not a history table ({error}): {fix}") from None
    missing = [column for column in HISTORY_COLUMNS if column not in table.columns]
    if missing:
        raise ProbeError(f"{path} is not a history table (no {', '.join(missing[:3])} column): {fix}")
    return tidy(table)


def write_history(table: pd.DataFrame, path: Path) -> None:
    """Write a history table by the extension: .csv or .parquet."""
    if path.suffix == ".parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_csv(path, index=False)


def same_model(a: str, b: str) -> bool:
    """Whether two model specs name the same model: equal, or the same local folder however written."""
    if a == b:
        return True
    first, second = local_directory(a), local_directory(b)
    return first is not None and second is not None and first.resolve() == second.resolve()


def read_own_history(path: Path, model: str | None, force: bool = False) -> pd.DataFrame:
    """The history table at an output `path`, which must be `model`'s: a history is one model's timeline, so
    rows of another model are refused in one line (a foreign file too), or with `force` dropped (the file is
    then replaced by this model's rows)."""
    table = read_history(path, output=True)
    if model is None or not len(table):
        return table
    mine = table["model"].astype(str).map(lambda other: same_model(other, model)).to_numpy(bool)
    if not mine.all() and not force:
        other = str(table.loc[~mine, "model"].iloc[0])
        raise ProbeError(f"{path} holds the history of another model ({other}): a history is one model's; "
                         "pass another --out, or --force to replace it")
    return table[mine]


def history_output(path: Path | None, force: bool = False, model: str | None = None) -> Out:
    """Where a history goes: one table at `path` (.csv or .parquet), rows of other checkpoints of `model`
    kept; a table holding another model's history is refused (replaced with `force`)."""
    return Out(path=path, write=lambda table, finished: {path: lambda tmp: write_history(table, tmp)},
               read=(lambda: read_own_history(path, model, force)) if path is not None else None, force=force,
               written=lambda table, finished: [f"wrote {len(table)} rows ({len(finished)} checkpoint(s)) to "
                                                f"{path}"],
               command="probe history", noun="checkpoint")


def step_revisions(spec: str) -> list[str]:
    """The checkpoint subdirectories of a local model directory (those with a config.json and a training
    step, e.g. step-0 … step-1500 as ``probe train`` writes them), in step order; ProbeError when none."""
    directory = local_directory(spec)
    if directory is None:
        raise ProbeError(f"{spec} is not a local model directory: give --revisions, the checkpoints to "
                         "measure")
    found = [(checkpoint_step(entry.name, entry), entry.name) for entry in sorted(directory.iterdir())
             if (entry / "config.json").is_file()]
    found = sorted((step, name) for step, name in found if step is not None)
    if not found:
        raise ProbeError(f"{spec} holds no checkpoint folders (step-N/ with a config.json): train with "
                         "`probe train NAME --out DIR` (its recipe's checkpoints) or --checkpoint-steps")
    return [name for _, name in found]


def history(model: str, revisions: Sequence[str] | None = None, config: HistoryConfig | None = None,
            out: Path | None = None, force: bool = False, progress: bool = True,
            note: Callable[[str], None] | None = None) -> runner.RunReport:
    """Measure every checkpoint of `model` (a directory or hub id) and return the run's report; its ``table``
    is the history (:data:`HISTORY_COLUMNS`), checkpoints in step order.

    Parameters
    ----------
    model
        The model whose checkpoints are measured: a local directory holding step-N/ folders, or a hub id.
    revisions
        The checkpoints: subdirectories of `model` or hub revisions; None: every step-N/ folder of `model`.
    config
        What is measured (:class:`HistoryConfig`); None: the defaults. Its ``split`` None is resolved here,
        once, from the model's card (:func:`probe.runs.history_inputs.held_out_text`); a split given is used
        as given.
    out
        The table file (.csv or .parquet), journalled and resumable; None: nothing written.
    force
        Recompute every checkpoint.
    progress
        One bar on stderr counting checkpoints.
    note
        Called once, after the checks and before anything is measured, with the held-out text and where it
        came from (e.g. ``"held-out text: stdlib-held-out (from run/card.json: trained on stdlib)"``).

    Returns
    -------
    probe.runs.runner.RunReport
        ``.table`` the history, ``.code`` the exit code (0: every checkpoint measured).
    """
    config = config or HistoryConfig()
    if config.split is not None and config.split not in TEXT_SPLITS:
        raise ProbeError(f"HistoryConfig.split {config.split!r} is not a text probe knows: give one of "
                         f"{', '.join(TEXT_SPLITS)}, or None (the held-out text of the model's card)")
    asked = config.label.types
    missing = [name for name in HEAD_TYPES if asked is not None and name not in asked]
    if missing:
        raise ProbeError(f"a history needs the head types {', '.join(HEAD_TYPES)}; the label config lacks "
                         f"{', '.join(missing)}")
    names = list(revisions) if revisions is not None else step_revisions(model)
    if not names:
        raise ProbeError("no checkpoint to measure: give --revisions a comma-separated list, e.g. "
                         "step-0,step-500")
    check_revisions_inside(model, names)
    checkpoints = [make_checkpoint(model, name) for name in dict.fromkeys(names)]
    checkpoints.sort(key=lambda c: (c.step is None, c.step if c.step is not None else 0))
    # the held-out text, once, before anything reads it (the units' identity, the checks, the measuring)
    if config.split is None:
        split, source = held_out_text(model, checkpoints)
        config = replace(config, split=split)
    else:
        source = "as given"
    if config.label.text == PROBE_SPLIT:
        # the heads are probed on the text the ICL score reads (GAP's development split is the label default)
        config = replace(config, label=replace(config.label, text=config.split))
    # before any unit: one model (config, tokenizer), positions and text that fit (probe.runs.history_inputs)
    reference = check_one_model(model, checkpoints)
    if reference is not None:
        check_text_fits(reference, config.icl_early, config.icl_late, config.split, config.max_passages)
    if note is not None:
        note(f"held-out text: {config.split} ({source})")
    units = [Unit(key=c.key, group=c, payload=c) for c in checkpoints]
    return runner.run(units, HistoryTask(config), history_output(out, force, model), progress=progress,
                      description="history")


__all__ = ["HEAD_TYPES", "HISTORY_COLUMNS", "ROWS", "HistoryConfig", "HistoryTask",
           "composition_with_previous_token",
           "default_label_config", "head_rows", "history", "history_identity", "history_output",
           "measure", "read_history", "read_own_history", "same_model", "step_revisions", "tidy",
           "train_loss"]
