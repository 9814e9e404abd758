"""Contacts of protein sequences from attention: ESM's contact regression and the per-head analysis, one call.

Every protein language model is analysed head by head (ESM, ProtBert-style BERTs, ProtT5 encoders: the residue
block is found from the tokenizer's special tokens); only checkpoints with a contact regression (ESM,
``loaded.has_contact_head``) or a fitted one (:mod:`probe.proteins.regression`) also get predicted contacts —
for the others ``ContactResult.contacts`` is None. The work is done in one forward pass by the streaming
:class:`probe.proteins.sink.ContactSink`; precision is :mod:`probe.proteins.precision`'s.

Public API (what the CLI, notebook and dashboard call)::

    predict_contacts(loaded, sequence, true_map=None, per_head=None, features=None,
                     regression=None, control=3) -> ContactResult
    predict_contacts_batch(loaded, sequences, true_maps=None, per_head=None,
                           features=None, control=3) -> list[ContactResult]
    predict_contacts_windowed(loaded, sequence, window, stride=None,
                              true_map=None) -> ContactResult  # ESM only
    head_attention_map(loaded, sequence, layer, head) -> np.ndarray [L L]   # APC(sym(α)) of one head

Per-head table columns (one row per layer × head, :attr:`ContactResult.heads`): ``layer, head, name``
("L3H7"), ``weight`` (the regression weight w_c; NaN without a regression), ``logit_share`` (Σ over
pairs |i−j| ≥ 6 of |w_c·APC(sym(α_c))|, divided by the same sum over all heads: the share of the non-bias
logit this head supplies; NaN without a regression), the nine precision columns of its APC(sym(α_c)) map; per
range the contact test of :mod:`probe.proteins.significance`; the per-sequence ``far_contact_share``
(of the weights α_c(i, j) ≥ θ on *known* pairs |i−j| ≥ 6, both directions, the fraction on contacts; local and
unknown pairs are left out, so it is not Vig et al.'s share), ``far_high_count`` and ``far_background``; then
Vig et al.'s sums, shares and backgrounds of :mod:`probe.proteins.features` for this one sequence.

With a true map and ``control`` = K > 0 (3 by default) the same padded batch also runs through K untrained
twins of the model (:func:`probe.untrained.each_twin`: K extra forwards on the same engine path), whose
per-head P@L (:attr:`ContactResult.control`) set each range's ``untrained_p99``: a head is significant only
above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from probe.engine import DenseSink, capture
from probe.errors import ProbeError
from probe.models import LoadedModel, clean_protein, encode_proteins, protein_alphabet, require_protein
from probe.proteins.features import MIN_ATTENTION, MIN_COUNT, MIN_TOTAL, ResidueFeatures
from probe.proteins.precision import RANGES, apc, precision_by_range, symmetrize
from probe.proteins.sink import ContactSink, contact_regression
from probe.untrained import DEFAULT_TWINS, each_twin, twin_seed


@dataclass(frozen=True, eq=False)
class ContactResult:
    """Contacts of one sequence, and (when a true map was given) how good they are (frozen).

    Attributes
    ----------
    sequence : str
        The cleaned sequence, L residues.
    contacts : numpy.ndarray or None, shape=(L, L), float32
        Contact probabilities from the checkpoint's contact regression (NaN: pairs no window covered, windowed
        mode); None for a model without a contact head.
    true_contacts : numpy.ndarray or None, shape=(L, L), int8
        The true map given: 1 contact, 0 not, −1 unknown.
    precision : dict of str to float, or None
        Precision of `contacts` against the true map, keys :func:`probe.proteins.precision.precision_columns`
        (``p_at_{L|L2|L5}_{short|medium|long}``; NaN for a range without a known pair).
    heads : pandas.DataFrame or None
        The per-head table (per-head mode), one row per layer × head, with these columns:

        | column | dtype | meaning |
        |---|---|---|
        | `layer`, `head` | int | 0-based |
        | `name` | str | `L{layer}H{head}` |
        | `weight` | float | the head's contact-regression weight w_c; NaN without a regression |
        | `logit_share` | float | the head's share of the non-bias logit, Σ of abs(w_c·APC(sym(α_c))) over pairs at least 6 apart, over the same sum for all heads; NaN without a regression |
        | `p_at_{L,L2,L5}_{short,medium,long}` | float | the nine precisions of the head's APC(sym(α)) map (:func:`probe.proteins.precision.precision_columns`) |
        | `far_contact_share` | float | of the weights α ≥ θ on known pairs at least 6 apart, the fraction on contacts; NaN when there is none |
        | `far_high_count` | int | how many such weights |
        | `far_background` | float | the contact rate among those pairs |
        | `{hits_L,top_L,n_known,n_true}_{short,medium,long}` | int | the head's top-L pairs that are contacts, the top-L pairs with a known state, the known pairs and the contacts of the range |
        | `base_rate_{short,medium,long}` | float | n_true / n_known: the contact rate of the pairs considered |
        | `enrichment_L_{short,medium,long}` | float | P@L / base rate |
        | `strata_rate_{short,medium,long}` | float | the P@L a predictor knowing only separation and residue types gets on the head's own strata |
        | `z_L_{short,medium,long}` | float | the head's excess hits over that predictor, standardised over the diagonal shifts of the contact map |
        | `p_value_L_{short,medium,long}` | float | the head's shift-permutation p-value (at least 1 / shifts) |
        | `p_fwer_L_{short,medium,long}` | float | Westfall–Young step-down maxT p-value over the heads (family-wise) |
        | `untrained_p99_L_{short,medium,long}` | float | 99th percentile of the untrained twins' heads' P@L; NaN without twins |
        | `significant_L_{short,medium,long}` | boolean | p_fwer ≤ 0.05 and P@L above untrained_p99 (where there are twins); NA: untested |
        | `null_excess_L_{short,medium,long}` | list of float | the head's excess under every shift, shift 0 first (the null the set summary pools) |
        | `w_high` | float | Vig et al.'s Σα over the weights α > θ (provis' first version, 34e6869) |
        | `w_{contact,binding,helix,strand,turn_bend,blank}` | float | Σα·f over those weights (NaN: property unknown) |
        | `{contact,binding,helix,strand,turn_bend,blank}_share` | float | w_f / w_high, attention-weighted; NaN where w_high < min_total or unknown |
        | `n_high` | float | the count variant: weights α ≥ θ (provis' ICLR 2021 version, 946e9b4) |
        | `n_{contact,binding,helix,strand,turn_bend,blank}` | float | of those, on the property (NaN: property unknown) |
        | `{contact,binding,helix,strand,turn_bend,blank}_count_share` | float | n_f / n_high; NaN where n_high < min_count or unknown |
        | `{contact,binding,helix,strand,turn_bend,blank}_background` | float | the property's rate in this sequence (contact: over the known pairs at least 6 apart, as provis' report_top_heads); NaN where unknown |
        | `contact_background_all_pairs` | float | contact pairs over all L² pairs: the contact share of a head attending uniformly |

        The retired hypergeometric test (``p_exchangeable_L_r``, ``q_exchangeable_L_r``; it assumes the pairs
        exchangeable) is not among them: :func:`probe.proteins.significance.with_exchangeable` adds it.
    background : dict of str to float, or None
        Per-head mode: the counts behind the background rates (``n_pairs``, ``n_known_pairs``, ``n_residues``,
        ``n_contact_pairs``, ``n_{binding|helix|strand|turn_bend|blank}_residues``; NaN where unknown).
    control : pandas.DataFrame or None
        The untrained twins' heads (per-head mode with a true map and ``control`` > 0), one row per twin ×
        layer × head: ``seed, layer, head, name``, per range ``hits_L_r, top_L_r, p_at_L_r``.

    Examples
    --------
    >>> from probe.proteins.structure import contact_map, read_structure
    >>> esm = probe.load("zoo:esm-random")  # 2 layers x 4 heads, random weights: the numbers mean nothing
    >>> structure = read_structure("tests/data/pdb1ejg.pdb", chain="A")  # crambin, 46 residues
    >>> true_map = contact_map(structure, sequence=structure.sequence)  # [L L] int8
    >>> result = predict_contacts(esm, structure.sequence, true_map=true_map)
    >>> result.sequence[:10], result.contacts.shape, round(result.precision["p_at_L_long"], 3)
    ('TTCCPSIVAR', (46, 46), 0.217)
    >>> result.heads[["name", "weight", "p_at_L_long", "base_rate_long"]].head(2)
       name    weight  p_at_L_long  base_rate_long
    0  L0H0  0.281184     0.130435        0.150198
    1  L0H1 -0.028171     0.195652        0.150198
    """  # noqa: E501 - markdown table rows cannot wrap

    sequence: str
    # [L L] float32 probabilities (NaN: pairs no window covered); None: no contact head
    contacts: np.ndarray | None
    true_contacts: np.ndarray | None = None  # [L L] int8: 1 contact, 0 not, -1 unknown
    precision: dict[str, float] | None = None  # of `contacts`, keys precision_columns()
    heads: pd.DataFrame | None = None  # per-head table (see the module docstring)
    background: dict[str, float] | None = None  # counts behind Vig et al.'s background rates (per-head mode)
    control: pd.DataFrame | None = None  # the untrained twins' per-head P@L (see above)


def _require_protein(loaded: LoadedModel) -> None:
    require_protein(loaded, "contact analysis")


def _require_contact_head(loaded: LoadedModel, what: str) -> None:
    _require_protein(loaded)
    if not loaded.has_contact_head:
        raise ProbeError(f"{what} needs a contact regression, which {loaded.name} does not have (ESM "
                         "checkpoints do); per-head analysis against a structure works for every protein "
                         "model")


def _eos_id(loaded: LoadedModel) -> int | None:
    if not loaded.has_contact_head:
        return None
    return getattr(getattr(loaded.model, "esm", loaded.model).contact_head, "eos_idx", 2)


def predict_contacts_batch(
    loaded: LoadedModel,
    sequences: Sequence[str],
    true_maps: Sequence[np.ndarray | None] | None = None,
    per_head: bool | None = None,  # None: when a true map is given
    # binding sites, secondary structure per sequence
    features: Sequence[ResidueFeatures | None] | None = None,
    min_attention: float = MIN_ATTENTION,
    min_count: int = MIN_COUNT,
    regression: tuple[torch.Tensor, float] | None = None,
    *,
    min_total: float = MIN_TOTAL,
    control: int = DEFAULT_TWINS,
) -> list[ContactResult]:
    """Contacts of several sequences in one padded forward pass, each cropped to its own length; with
    per_head, the per-head table of each. `regression` (weight [layer head], bias), e.g. a fitted
    :class:`probe.proteins.regression.ContactRegression`, replaces the checkpoint's own; models without either
    get `contacts=None` and per-head statistics. `control`: untrained twins run on the same batch where a true
    map is given (0: none)."""
    _require_protein(loaded)
    if not sequences:
        raise ProbeError("no sequences given")
    cleaned, inputs = encode_proteins(loaded, list(sequences))
    true_maps = list(true_maps) if true_maps is not None else [None] * len(cleaned)
    features = list(features) if features is not None else [None] * len(cleaned)
    predicts = regression is not None or loaded.has_contact_head
    if per_head is None:
        per_head = any(true_map is not None for true_map in true_maps) or not predicts
    if regression is not None:
        # [layer head]
        weight, bias = torch.as_tensor(regression[0], dtype=torch.float32), float(regression[1])
        if tuple(weight.shape) != (loaded.n_layers, loaded.n_heads):
            raise ProbeError(f"the contact regression has {tuple(weight.shape)} layers × heads but "
                             f"{loaded.name} has ({loaded.n_layers}, {loaded.n_heads}): fit one for this "
                             "model (--fit)")
    elif loaded.has_contact_head:
        weight, bias = contact_regression(loaded.model)
    else:
        weight, bias = torch.zeros(loaded.n_layers, loaded.n_heads), 0.0  # [layer head]
    offset = loaded.residue_offset
    sink = ContactSink(weight, bias, inputs["input_ids"], inputs["attention_mask"], _eos_id(loaded),
                       true_maps, per_head, starts=[offset] * len(cleaned), lengths=[len(s) for s in cleaned],
                       features=features, min_attention=min_attention, regression=predicts, residues=cleaned)
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    controls = [None] * len(cleaned)
    if per_head and control > 0 and any(true_map is not None for true_map in true_maps):
        controls = _control_tables(loaded, inputs, cleaned, true_maps, control)
    results = []
    for b, sequence in enumerate(cleaned):
        contacts = sink.contacts(b).float().cpu().numpy() if predicts else None  # [L L]
        true_map = None if true_maps[b] is None else np.asarray(true_maps[b], dtype=np.int8)
        precision = None if true_map is None or contacts is None else precision_by_range(contacts, true_map)
        heads = sink.head_table(b, min_count, min_total=min_total, control=controls[b]) if per_head else None
        background = sink.background_counts(b) if per_head else None
        results.append(ContactResult(sequence, contacts, true_map, precision, heads, background, controls[b]))
    return results


def _control_tables(loaded: LoadedModel, inputs: dict, cleaned: list[str], true_maps: list, count: int,
                    ) -> list[pd.DataFrame | None]:
    """Per sequence, the twins' heads (``seed, layer, head, name``, per range ``hits_L_r, top_L_r, p_at_L_r``)
    on the same padded batch; None where there is no true map."""
    tables: list[list[pd.DataFrame]] = [[] for _ in cleaned]
    offset = loaded.residue_offset
    columns = ["layer", "head", "name"] + [f"{c}_{r}" for r in RANGES for c in ("hits_L", "top_L", "p_at_L")]
    # one twin at a time; an in-memory model's twins are kept for the next protein (each_twin's keep)
    for twin in each_twin(loaded, count, keep=True):
        seed = twin_seed(twin)
        sink = ContactSink(torch.zeros(twin.n_layers, twin.n_heads), 0.0, inputs["input_ids"],
                           inputs["attention_mask"], _eos_id(loaded), true_maps, True,
                           starts=[offset] * len(cleaned), lengths=[len(s) for s in cleaned],
                           regression=False, twin=True)
        with capture(twin.model, sink), torch.inference_mode():
            twin.model(**inputs)
        for b, true_map in enumerate(true_maps):
            if true_map is not None:
                tables[b].append(pd.DataFrame(sink.rows(b))[columns].assign(seed=seed))
    return [pd.concat(parts, ignore_index=True)[["seed", *columns]] if parts else None for parts in tables]


def predict_contacts(
    loaded: LoadedModel,
    sequence: str,
    # [L L] int8 (probe.proteins.structure.contact_map(structure, sequence=...))
    true_map: np.ndarray | None = None,
    per_head: bool | None = None,  # None: when a true map is given (always for models without a contact head)
    features: ResidueFeatures | None = None,  # binding sites, secondary structure (aligned to the sequence)
    min_attention: float = MIN_ATTENTION,
    min_count: int = MIN_COUNT,
    regression: tuple[torch.Tensor, float] | None = None,
    *,
    min_total: float = MIN_TOTAL,
    control: int = DEFAULT_TWINS,
) -> ContactResult:
    """Contacts of one protein sequence from the checkpoint's own contact head, and a per-head analysis.

    One forward pass on the capture engine: the contact logits are accumulated head by head (equal to HF
    ``EsmForMaskedLM.predict_contacts`` with eager attention within 1e-5), and with `per_head` every head's
    APC-corrected attention is scored against the true map, one layer at a time.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A protein model (``loaded.kind == "protein_mlm"``: ESM, ProtBert-style, ProtT5 encoder).
    sequence : str
        One-letter amino acids (L residues; checked, non-amino-acid letters are an error naming their
        positions).
    true_map : numpy.ndarray, optional, shape=(L, L), int8
        True contacts: 1 contact, 0 not, −1 unknown, aligned to `sequence`
        (:func:`probe.proteins.structure.contact_map` with ``sequence=``).
    per_head : bool, optional
        Compute the per-head table. None: when `true_map` is given, and always for a model without a contact
        head.
    features : probe.proteins.features.ResidueFeatures, optional
        Binding sites and secondary structure aligned to `sequence`, for Vig et al.'s shares.
    min_attention : float, default 0.3
        θ of Vig et al.'s shares: weights above it are summed (``{f}_share``), weights at least this high are
        counted (``{f}_count_share`` and the ``far_*`` measure).
    min_count : int, default 100
        Heads with fewer weights ≥ θ get NaN count shares.
    regression : tuple of (torch.Tensor, float), optional
        A contact regression (weights shape=(layer * head,), bias) to use instead of the checkpoint's contact
        head, e.g. one fitted by ``probe contacts --fit`` (:mod:`probe.proteins.regression`).
    min_total : float, default 100
        Heads whose Σα over the weights > θ is below this get NaN attention-weighted shares (provis'
        ``min_total``).
    control : int, default 3
        With a true map and the per-head table: K untrained twins of the model (:mod:`probe.untrained`) run
        on the same input; a head is significant only where its P@L is above their heads' 99th percentile
        (``untrained_p99_L_{range}``). 0: no twins.

    Returns
    -------
    ContactResult
        ``contacts`` shape (L, L) float32 probabilities (None without a contact head), ``precision`` and the
        per-head table ``heads`` when asked for.

    Raises
    ------
    ProbeError
        The model is not a protein model; the sequence holds letters that are not amino acids, or is longer
        than the model takes (use :func:`predict_contacts_windowed`).

    Examples
    --------
    >>> from probe.proteins.structure import contact_map, read_structure
    >>> loaded = probe.models.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> structure = read_structure("tests/data/pdb1ubi.pdb", chain="A")
    >>> true_map = contact_map(structure, sequence=structure.sequence)  # [L L] int8
    >>> result = predict_contacts(loaded, structure.sequence, true_map=true_map)
    >>> result.contacts.shape, result.heads.shape  # 76 residues; 2 layers x 4 heads, 89 columns
    ((76, 76), (8, 89))
    """
    return predict_contacts_batch(loaded, [sequence], [true_map], per_head, [features], min_attention,
                                  min_count, regression, min_total=min_total, control=control)[0]


def predict_contacts_windowed(
    loaded: LoadedModel,
    sequence: str,
    window: int,
    stride: int | None = None,
    true_map: np.ndarray | None = None,
) -> ContactResult:
    """Crop-and-average for sequences longer than the model takes: predict overlapping windows of `window`
    residues, `stride` apart (the last one ends at the sequence's end), and average the probabilities of each
    pair over the windows that hold both residues. Pairs farther apart than any window covers are NaN. No
    per-head table.

    Parameters
    ----------
    loaded : LoadedModel
        A protein model.
    sequence : str
        The protein, one letter per residue.
    window : int
        Residues per window (at most the model's limit).
    stride : int, optional
        Residues between window starts (default window // 2).
    true_map : ndarray, optional
        `[L L]` true contacts, for the precision columns.

    Returns
    -------
    ContactResult
    """
    _require_contact_head(loaded, "--window (crop-and-average contact prediction)")
    sequence = clean_protein(sequence, protein_alphabet(loaded))
    limit = loaded.max_tokens - 2
    if not 1 <= window <= limit:
        raise ProbeError(f"--window {window} must be between 1 and {limit} (the model's residue limit)")
    stride = stride or max(1, window // 2)
    length = len(sequence)
    starts = list(range(0, max(1, length - window + 1), stride))
    if starts[-1] + window < length:
        starts.append(length - window)
    total = np.zeros((length, length), dtype=np.float64)  # [L L]
    count = np.zeros((length, length), dtype=np.int32)  # [L L]
    for start in starts:
        stop = min(length, start + window)
        part = predict_contacts(loaded, sequence[start:stop], per_head=False).contacts  # [window window]
        total[start:stop, start:stop] += part
        count[start:stop, start:stop] += 1
    with np.errstate(invalid="ignore"):
        contacts = np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)
    true_map = None if true_map is None else np.asarray(true_map, dtype=np.int8)
    precision = None if true_map is None else precision_by_range(contacts, true_map)
    return ContactResult(sequence, contacts, true_map, precision, None)


def head_attention_map(loaded: LoadedModel, sequence: str, layer: int, head: int) -> np.ndarray:
    """[L L] APC-corrected symmetrized attention of one head on the residues (BOS/EOS dropped)."""
    _require_protein(loaded)
    if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
        raise ProbeError(f"head L{layer}H{head} does not exist: the model has layers "
                         f"0..{loaded.n_layers - 1} and heads 0..{loaded.n_heads - 1}")
    cleaned, inputs = encode_proteins(loaded, [sequence])
    sink = DenseSink([layer], [head])
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    start, length = loaded.residue_offset, len(cleaned[0])
    alpha = sink.attention(0)[0, 0, 0, start:start + length, start:start + length]  # [L L]
    return apc(symmetrize(alpha)).numpy()


__all__ = ["ContactResult", "head_attention_map", "predict_contacts", "predict_contacts_batch",
           "predict_contacts_windowed"]
