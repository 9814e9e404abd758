"""The circuit of a head type, found automatically: from the type's labelled heads (the receivers), the
upstream heads whose composition and path-patching effects beat their controls, as a graph.

:func:`find_circuit` goes:

1. **Receivers**: the type's labelled heads in a label table (a file, a DataFrame, or a fresh
   :func:`probe.heads.label.label_model` run of the type alone).
2. **Composition** (:mod:`probe.circuits.composition`): Q, K and V scores of every head of an earlier layer
   into each receiver (``all_pairs``: into every head), z against random matrices.
3. **Candidates**: per receiver and mode, the ``top_k`` senders by composition z (0: all of them).
4. **Path patching** (:mod:`probe.circuits.patching`) on the type's paired probes
   (:mod:`probe.circuits.corruption`): each candidate (sender, mode) into *all* the type's receivers of later
   layers at once (``effect``: receivers that back each other up hide a sender that feeds them all), each
   candidate edge alone (``edge_effect``), against random sender–receiver pairs of the same shape; and the
   type's heads' own corrupted outputs, every path (``type_effect``: what the whole mechanism carries).
5. **Edges**: a candidate edge is in the circuit when its composition score beats every random matrix pair and
   its sender's patching effect into the type's heads (same mode) beats every random pair and is at least
   ``min_share`` (5 %) of the type's heads' joint effect (a control set of near-zero effects is beaten by
   any nonzero one: the share keeps negligible senders out); where no corruption
   is defined or the model cannot be patched (post-norm, no trained LM head), an edge is each receiver's
   strongest sender in a mode when it beats every random pair, marked ``patched = False``: weights, not causal
   evidence (a trained model's heads mostly beat random matrices).

The result (:class:`Circuit`) is a graph — nodes: heads with their labels; edges: mode, score, z, effect —
with one-line findings (:meth:`Circuit.lines`), a JSON payload for the views (:meth:`Circuit.payload`) and,
for the label table, each receiver's strongest upstream edge (:func:`fed_by`: ``fed_by``, ``fed_by_mode``,
``fed_by_effect``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from probe.circuits.composition import MODES, composition_scores
from probe.circuits.corruption import Pairs, corrupted_pairs
from probe.circuits.patching import control_patches, patch_effects, z_and_beats
from probe.engine.paths import PathPatch
from probe.errors import ProbeError
from probe.heads.label.config import LabelConfig, Memo
from probe.heads.registry import REGISTRY
from probe.heads.tables import labelled_mask, load_table
from probe.naming import fixed, head_name

Head = tuple[int, int]
EDGE_COLUMNS = ["sender", "receiver", "mode", "score", "z", "percentile", "beats_random", "effect",
                "effect_z",
                "beats_controls", "edge_effect", "edge_z", "patched", "in_circuit"]
FED_BY_COLUMNS = ["fed_by", "fed_by_mode", "fed_by_effect"]
MIN_Z_CONTROLS = 20  # fewer random pairs: an edge's effect is said as an empirical p, with no z


@dataclass(frozen=True)
class CircuitConfig:
    """How a circuit is searched (frozen). ``probe circuit``'s flags mirror these fields."""

    modes: tuple[str, ...] = MODES  # composition / patching modes: Q, K, V
    top_k: int = 3  # candidate senders per receiver and mode, by composition z (0: every earlier head)
    all_pairs: bool = False  # composition of every pair of heads, not only into the type's heads
    examples: int = 16  # paired probe examples
    controls: int = 8  # random sender–receiver pairs per receiver shape
    n_random: int = 200  # random factor pairs of the composition baseline
    seed: int = 0  # seeds the probes, the controls and the baseline
    max_rows: int = 64  # rows per patched forward
    # an edge's sender must carry at least this share of the type's heads' joint effect (type_effect)
    min_share: float = 0.05


@dataclass(frozen=True)
class Circuit:
    """A head type's circuit: nodes, edges and what was measured (see the module doc).

    Examples
    --------
    >>> circuit = probe.show_circuit(loaded, "induction").circuit  # the shipped labels, 16 paired probes
    >>> print(circuit.lines()[0][:81])
    zoo:induction · induction: L0H1 → L1H0 L1H1 L1H2 L1H3 by K-composition (0.32–0.34
    >>> sorted(circuit.payload())[:4]  # what views.js draws
    ['corruption', 'edges', 'head_type', 'heads']
    """

    model: str
    head_type: str
    n_layers: int
    n_heads: int
    receivers: tuple[Head, ...]
    nodes: pd.DataFrame  # head, layer, head_index, labels, role ("receiver" | "sender")
    edges: pd.DataFrame  # EDGE_COLUMNS: every candidate edge; in_circuit marks the circuit's
    composition: pd.DataFrame  # every scored pair (probe.circuits.composition.COLUMNS)
    corruption: str | None = None  # what the paired probes corrupt; None: not patched
    probe_set: str | None = None
    type_effect: float = math.nan  # the type's heads' corrupted outputs, every path (nats)
    total_effect: float = math.nan  # the whole corrupted input (nats)
    clean_loss: float = math.nan
    examples: int = 0
    forwards: int = 0  # patched, clean and corrupted forwards run
    controls: int = 0  # random sender–receiver patches the joint effects were tested against
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def found(self) -> pd.DataFrame:
        """The circuit's edges."""
        return self.edges[self.edges["in_circuit"].astype(bool)] if len(self.edges) else self.edges

    def lines(self) -> list[str]:
        """What was found, one line per sender and mode (or that nothing beats the controls)."""
        prefix = f"{self.model} · {self.head_type}"
        if not self.receivers:
            return [f"{prefix}: no head is labelled {self.head_type}: no circuit"]
        receivers = " ".join(head_name(*head) for head in self.receivers)
        found = self.found
        if found.empty and self.corruption and self.controls < 2:
            return [f"{prefix}: nothing upstream of {receivers} could be tested by path patching: "
                    f"{self.controls} random sender–receiver pair(s) of the same shape are left to patch "
                    "against once the candidates are taken (a small model: fewer candidates, --top-k 1, "
                    "leave more; the composition scores stand on their own)"]
        if found.empty:
            what = "composition and path patching" if self.corruption else "composition"
            return [f"{prefix}: nothing upstream of {receivers} beats its controls ({what})"]
        out = []
        for (sender, mode), rows in found.groupby(["sender", "mode"], sort=False):
            scores = f"{rows['score'].min():.2f}–{rows['score'].max():.2f}"
            zs = f"z {fixed(rows['z'].min(), 0)}–{fixed(rows['z'].max(), 0)}"
            into = " ".join(rows["receiver"])
            text = (f"{prefix}: {sender} → {into} by {mode}-composition ({scores}, {zs} against random "
                    "matrices)")
            effect = float(rows["effect"].iloc[0])
            if bool(rows["patched"].iloc[0]) and not math.isnan(effect):
                share = (f"; {effect / self.type_effect:.0%} of the type's heads' joint effect "
                         f"{self.type_effect:+.2f}") if self.type_effect and not math.isnan(
                             self.type_effect) else ""
                text += (f" and path patching into {_mode_word(mode)}: {effect:+.2f} nats "
                         f"({against_controls(float(rows['effect_z'].iloc[0]), self.controls)}{share})")
            else:
                text += " (composition only: not patched)"
            out.append(text)
        return out

    def payload(self) -> dict:
        """The JSON the views draw (views.js ``mountCircuit``): layers, heads, nodes and the candidate
        edges."""
        def clean(value):
            if isinstance(value, float) and not math.isfinite(value):
                return None
            return value.item() if hasattr(value, "item") else value

        nodes = [{key: clean(value) for key, value in row.items()} for row in self.nodes.to_dict("records")]
        edges = [{key: clean(value) for key, value in row.items()} for row in self.edges.to_dict("records")]
        return {"version": 1, "model": self.model, "head_type": self.head_type, "layers": self.n_layers,
                "heads": self.n_heads, "nodes": nodes, "edges": edges, "lines": self.lines(),
                "corruption": self.corruption, "type_effect": clean(self.type_effect),
                "total_effect": clean(self.total_effect), "notes": list(self.notes)}


def against_controls(z: float, controls: int) -> str:
    """How an effect above every one of its `controls` random sender–receiver pairs is said: the empirical p
    (p ≤ 1/(controls + 1): the effect is the largest of controls + 1 values), and a z only from
    :data:`MIN_Z_CONTROLS` controls on (a z over a handful of controls is no normal z: 3 controls gave
    "z 1852.9"). Shared by the CLI, the views and the app (:meth:`Circuit.lines`)."""
    said = f"above every random pair of {controls}, p ≤ 1/{controls + 1}"
    if controls < MIN_Z_CONTROLS or not math.isfinite(z):
        return said
    return f"z {fixed(z)}, {said}"


def _mode_word(mode: str) -> str:
    return {"Q": "queries", "K": "keys", "V": "values"}.get(mode, mode)


def shipped_labels(name: str) -> str | None:
    """The label table shipped with a model, or None: a model organism's (``probe/zoo/NAME/labels.csv`` for
    ``zoo:NAME``) or a package-shipped model's, by its model id (:func:`probe.specs.shipped_labels_path`)."""
    from probe.specs import shipped_labels_path

    shipped = shipped_labels_path(name)
    return str(shipped) if shipped is not None else None


def type_labels(labels, loaded) -> pd.DataFrame:
    """The label table of `loaded` from a DataFrame or a file (rows of other models dropped)."""
    table = load_table(labels) if isinstance(labels, (str, Path)) else labels
    if "model" in table.columns and (table["model"].astype(str) == loaded.name).any():
        table = table[table["model"].astype(str) == loaded.name]
    return table


def labelled_heads(table: pd.DataFrame, head_type: str) -> tuple[Head, ...]:
    """The heads labelled `head_type` in `table` (every probe length together)."""
    rows = table[(table["head_type"].astype(str) == head_type) & labelled_mask(table["label"])]
    return tuple(sorted({(int(row.layer), int(row.head)) for row in rows.itertuples()}))


def _nodes(table: pd.DataFrame, heads: set[Head], receivers: tuple[Head, ...]) -> pd.DataFrame:
    labelled = table[labelled_mask(table["label"])] if len(table) else table
    records = []
    for layer, head in sorted(heads):
        mine = (labelled["layer"] == layer) & (labelled["head"] == head) if len(labelled) else None
        types = sorted({str(t) for t in labelled.loc[mine, "head_type"]}) if mine is not None else []
        records.append({"head": head_name(layer, head), "layer": layer, "head_index": head,
                        "labels": " ".join(types),
                        "role": "receiver" if (layer, head) in receivers else "sender"})
    return pd.DataFrame.from_records(records, columns=["head", "layer", "head_index", "labels", "role"])


def find_circuit(
    loaded,
    head_type: str,
    labels=None,
    config: CircuitConfig = CircuitConfig(),  # noqa: B008 - frozen
    label_config: LabelConfig | None = None,
    note: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    memo: Memo | None = None,
) -> Circuit:
    """The circuit of `head_type` on `loaded` (module doc).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model.
    head_type : str
        A registered head type (``induction``, ``coreference``, …).
    labels : pandas.DataFrame or str or Path, optional
        A label table (``probe label --out``, a zoo model's shipped ``labels.csv``); None: the type is
        labelled here first (:func:`probe.heads.label.label_model` with `label_config`, ablation off).
    config : CircuitConfig, optional
        Candidates, probes and controls.
    label_config : LabelConfig, optional
        The probe sets (seed, length, coreference set) of the pairs and of a fresh labelling.
    note : callable, optional
        Called with one-line notes (refusals, dropped examples, RoPE).
    progress : callable, optional
        Called as ``progress(forwards done, forwards)`` while patching.
    memo : callable, optional
        ``memo(key, compute)`` (:data:`probe.heads.label.config.Memo`): the resumable steps go through it —
        a fresh labelling's batches, the composition scores (``composition``), each paired batch's clean and
        corrupted forwards and each patched forward (``patch/…``,
        :func:`probe.circuits.patching.patch_effects`); ``probe circuit --out`` journals them
        (:mod:`probe.runs.circuits`). The random controls are drawn from ``config.seed`` alone, so a
        resumed run patches the same controls.

    Returns
    -------
    Circuit

    Examples
    --------
    >>> labels = shipped_labels("zoo:induction")
    >>> circuit = find_circuit(loaded, "induction", labels, CircuitConfig(examples=8))
    >>> circuit.found.groupby(["sender", "mode"]).size().to_dict()  # edges into L1H0–L1H3
    {('L0H1', 'K'): 4, ('L0H3', 'K'): 4}
    >>> round(circuit.type_effect, 1), circuit.forwards, circuit.controls
    (10.7, 10, 3)
    """
    if head_type not in REGISTRY:
        raise ProbeError(f"unknown head type {head_type!r}: choose from {', '.join(REGISTRY)}")
    modes = tuple(dict.fromkeys(str(mode).upper() for mode in config.modes))
    if config.top_k < 0 or config.examples < 1 or config.controls < 2:
        raise ProbeError("top_k must be ≥ 0, examples ≥ 1 and controls ≥ 2")
    label_config = label_config or LabelConfig(seed=config.seed)
    notes: list[str] = []

    def say(text: str) -> None:
        notes.append(text)
        if note is not None:
            note(text)

    if labels is None:
        from probe.heads.label import label_model  # the labelling pipeline, only when no table is given

        labels = label_model(loaded, LabelConfig(types=(head_type,), examples=label_config.examples,
                                                 seq_len=label_config.seq_len, seed=label_config.seed,
                                                 coref_set=label_config.coref_set, ablate="none",
                                                 output_share=False), note=say, memo=memo)
    table = type_labels(labels, loaded)
    receivers = labelled_heads(table, head_type)
    empty = pd.DataFrame(columns=EDGE_COLUMNS)
    base = {"model": loaded.name, "head_type": head_type, "n_layers": loaded.n_layers,
            "n_heads": loaded.n_heads}
    if not receivers:
        return Circuit(**base, receivers=(), nodes=_nodes(table, set(), ()), edges=empty,
                       composition=pd.DataFrame(), notes=tuple(notes))
    def scored():
        return composition_scores(loaded, None if config.all_pairs else receivers, modes=modes,
                                  n_random=config.n_random, seed=config.seed)

    scores = scored() if memo is None else memo("composition", scored)
    for text in scores.attrs.get("notes", []):
        say(text)
    into = scores[scores["receiver"].isin([head_name(*r) for r in receivers])] if len(scores) else scores
    candidates = _candidates(into, config.top_k)
    pairs = corrupted_pairs(loaded, head_type, label_config, config.examples, note=say)
    if pairs.note:
        say(pairs.note)
    patched = _patch(loaded, pairs, candidates, receivers, modes, config, say, progress, memo)
    edges = _edges(candidates, patched, config.min_share)
    in_circuit = edges[edges["in_circuit"]] if len(edges) else edges
    heads = set(receivers) | {_head(name) for name in in_circuit["sender"]}
    return Circuit(**base, receivers=receivers, nodes=_nodes(table, heads, receivers), edges=edges,
                   composition=scores, corruption=pairs.corruption if patched else None,
                   probe_set=pairs.probe_set, type_effect=patched.get("type_effect", math.nan),
                   total_effect=patched.get("total_effect", math.nan),
                   clean_loss=patched.get("clean_loss", math.nan), examples=pairs.examples if patched else 0,
                   forwards=patched.get("forwards", 0), controls=len(patched.get("controls", ())),
                   notes=tuple(notes))


def _head(name: str) -> Head:
    layer, head = name[1:].split("H")
    return int(layer), int(head)


def _candidates(into: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """Per receiver and mode, the top_k senders by composition z (every one for 0)."""
    if into.empty:
        return into
    ranked = into.sort_values(["receiver", "mode", "z"], ascending=[True, True, False])
    if top_k:
        ranked = ranked.groupby(["receiver", "mode"], sort=False).head(top_k)
    return ranked.reset_index(drop=True)


def _patch(loaded, pairs: Pairs, candidates: pd.DataFrame, receivers: tuple[Head, ...], modes, config,
           say, progress, memo=None) -> dict:
    """Effects of the candidate (sender, mode) into every later receiver, of each candidate edge alone, of
    their controls and of the type's heads (module doc); {} when the model cannot be patched."""
    if not pairs.batches or candidates.empty:
        return {}
    joint: dict[tuple[str, str], PathPatch] = {}
    for row in candidates.itertuples():
        sender = (int(row.sender_layer), int(row.sender_head))
        into = tuple((layer, head, row.mode) for layer, head in receivers if layer > sender[0])
        joint.setdefault((row.sender, row.mode), PathPatch((sender,), into))
    single = {(row.sender, row.receiver, row.mode): PathPatch(
        ((int(row.sender_layer), int(row.sender_head)),),
        ((int(row.receiver_layer), int(row.receiver_head), row.mode),)) for row in candidates.itertuples()}
    tested = [((int(r.sender_layer), int(r.sender_head)), r.mode) for r in candidates.itertuples()]
    layers = loaded.attention_layers
    controls = control_patches(receivers, tested, layers, loaded.n_heads, config.controls, config.seed, modes)
    if len(controls) < config.controls:
        say(f"{loaded.name}: {len(controls)} of {config.controls} random sender–receiver controls exist of "
            f"the tested shape (modes {', '.join(modes)}): the joint effects are tested against those")
    single_controls = {}
    for layer in sorted({layer for layer, _ in receivers}):
        single_controls[layer] = control_patches([(layer, 0)], [], layers, loaded.n_heads, config.controls,
                                                 config.seed + 1 + layer, modes)
    singles = [p for chosen in single_controls.values() for p in chosen]
    patches = [*joint.values(), *single.values(), *controls, *singles,
               PathPatch(tuple(receivers), downstream=True)]
    try:
        measured = patch_effects(loaded, pairs, patches, max_rows=config.max_rows, progress=progress,
                                 memo=memo)
    except ProbeError as error:
        say(f"{loaded.name}: {error}")
        return {}
    effects = iter(measured.effects)
    joint_effect = {key: next(effects) for key in joint}
    single_effect = {key: next(effects) for key in single}
    control_effect = [next(effects) for _ in controls]
    single_control = {layer: [next(effects) for _ in chosen] for layer, chosen in single_controls.items()}
    type_effect = next(effects)
    return {"joint": joint_effect, "single": single_effect, "controls": control_effect,
            "single_controls": single_control, "type_effect": type_effect,
            "total_effect": measured.corrupted_loss - measured.clean_loss, "clean_loss": measured.clean_loss,
            "forwards": measured.forwards}


def _edges(candidates: pd.DataFrame, patched: dict, min_share: float) -> pd.DataFrame:
    records = []
    strongest: set[tuple[str, str]] = set()  # (receiver, mode) that has its composition-only edge
    floor = 0.0
    if patched and math.isfinite(patched["type_effect"]) and patched["type_effect"] > 0:
        floor = min_share * patched["type_effect"]
    for row in candidates.itertuples():
        record = {"sender": row.sender, "receiver": row.receiver, "mode": row.mode, "score": row.score,
                  "z": row.z, "percentile": row.percentile, "beats_random": bool(row.beats_random),
                  "effect": math.nan, "effect_z": math.nan, "beats_controls": False, "edge_effect": math.nan,
                  "edge_z": math.nan, "patched": bool(patched)}
        if patched:
            effect = patched["joint"][(row.sender, row.mode)]
            record["effect"] = effect
            record["effect_z"], record["beats_controls"] = z_and_beats(effect, patched["controls"])
            edge = patched["single"][(row.sender, row.receiver, row.mode)]
            record["edge_effect"] = edge
            record["edge_z"], _ = z_and_beats(edge, patched["single_controls"][int(row.receiver_layer)])
            record["in_circuit"] = (bool(row.beats_random) and record["beats_controls"] and effect > 0
                                    and effect >= floor)
        else:  # weights only: the receiver's strongest sender in the mode, above every random pair
            record["in_circuit"] = bool(row.beats_random) and (row.receiver, row.mode) not in strongest
            strongest.add((row.receiver, row.mode))
        records.append(record)
    edges = pd.DataFrame.from_records(records, columns=EDGE_COLUMNS)
    edges["in_circuit"] = edges["in_circuit"].astype(bool)
    return edges


def fed_by(circuit: Circuit) -> pd.DataFrame:
    """Each receiver's strongest upstream edge in the circuit: `[layer, head, fed_by, fed_by_mode,
    fed_by_effect]` (by patching effect, then composition z; receivers without an edge are absent)."""
    found = circuit.found
    records = []
    for receiver, rows in found.groupby("receiver", sort=True):
        rows = rows.assign(rank=rows["effect"].fillna(-math.inf)).sort_values(["rank", "z"], ascending=False)
        best = rows.iloc[0]
        layer, head = _head(receiver)
        records.append({"layer": layer, "head": head, "fed_by": best["sender"], "fed_by_mode": best["mode"],
                        "fed_by_effect": float(best["effect"])})
    return pd.DataFrame.from_records(records, columns=["layer", "head", *FED_BY_COLUMNS])


def fed_by_columns(loaded, table: pd.DataFrame, config: CircuitConfig = CircuitConfig(),  # noqa: B008
                   label_config: LabelConfig | None = None, note: Callable[[str], None] | None = None,
                   ) -> pd.DataFrame:
    """`table` (a label table of `loaded`) with :data:`FED_BY_COLUMNS` filled on every labelled head of every
    type that has labelled heads (``probe label --circuits``): one :func:`find_circuit` per such type."""
    out = table.copy()
    for column in FED_BY_COLUMNS:
        out[column] = math.nan if column == "fed_by_effect" else None
    labelled = out[labelled_mask(out["label"])]
    for head_type in dict.fromkeys(labelled["head_type"].astype(str)):
        circuit = find_circuit(loaded, head_type, out, config, label_config, note)
        for row in fed_by(circuit).itertuples():
            where = (out["head_type"].astype(str) == head_type) & (out["layer"] == row.layer) & (
                out["head"] == row.head) & labelled_mask(out["label"])
            out.loc[where, "fed_by"] = row.fed_by
            out.loc[where, "fed_by_mode"] = row.fed_by_mode
            out.loc[where, "fed_by_effect"] = row.fed_by_effect
    return out


__all__ = ["Circuit", "CircuitConfig", "EDGE_COLUMNS", "FED_BY_COLUMNS", "MIN_Z_CONTROLS", "against_controls",
           "fed_by", "fed_by_columns", "find_circuit", "labelled_heads", "shipped_labels", "type_labels"]
