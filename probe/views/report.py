"""`probe report`: ONE self-contained HTML file of a model — works from file://, no server, no network
request.

Sections: the architecture card; the head atlas of every head type; the labelled heads with the meaning
columns; the interactive view (every head's thumbnail on a probe input, full maps with the token view, keys,
PNG/SVG export: the same views.js as the app and the notebook); for protein models the contact map
(predicted ↗ · true ↙, titled by what it shows) and the leaderboard's first HEAD_MAPS heads as residue maps
(APC attention ↗ · true contacts ↙; ≤ 256 cells a side, probe.views.figures.residue_map_svg), every head
against the contact base rate (probe.proteins) with each unknown's reason as its cell's title
(probe.views.unknowns), the chain and domain notes (probe.proteins.domain), and with a structure the 3D view
of the heads' attention on it (probe.views.structure_view: 3Dmol.js inlined, ≈ 0.55 MB); the circuits asked
for (probe.circuits, one graph each). Written atomically (probe.runs.atomic).

Size: α is uint8 (probe.views.encode). With REPORT_BUDGET every head's full map is kept when all fit at one
token per cell (144 heads × 128 tokens: 2.4 MB of maps); else the `full_maps` heads chosen (labelled first) at
the finest pooling that fits. docs/views.md gives the measured sizes.
"""

from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path

import numpy as np

from probe.card import architecture_card
from probe.errors import ProbeError
from probe.heads.corpus import SAMPLE_PASSAGES, covers, natural_text, tokenize_corpus
from probe.heads.probesets import repeated_blocks
from probe.models import ModelKind, load
from probe.naming import display_name, head_name
from probe.proteins.analysis import analyse_protein, protein_input
from probe.proteins.contacts import head_attention_map
from probe.runs.atomic import write_atomically
from probe.views import encode
from probe.views.circuit import circuit_fragment
from probe.views.figures import atlas_svg, contact_svg, residue_map_svg
from probe.views.html_view import standalone_page
from probe.views.pooling import pooled_attention
from probe.views.reading import controls_line, format_q, is_labelled
from probe.views.structure_view import structure_fragment, structure_view
from probe.views.tables import as_table, badges, one_model, table_html
from probe.views.unknowns import unknown_reason
from probe.views.view import DEMO_PROTEIN, View, display_tokens, fragment, input_ids_of

REPORT_BUDGET = 4 * 2**20  # bytes of full maps in a report
FULL_MAPS = 4  # heads with a full map when not every head fits the budget at one token per cell
PROBE_TOKENS = 128  # the probe input's length (repeated random blocks: induction and copying show)
LEADERBOARD_ROWS = 24
HEAD_MAPS = 4  # the leaderboard's first heads drawn as residue maps (APC attention ↗, true contacts ↙)
P_COLUMNS = ("p_fwer_L_long",)  # read as the label tables print them (format_q: "< 0.001")
# bytes of residue maps in the report's 3D view (uint8, L² + 4 per head): the best 90 heads by long-range P@L
# on ubiquitin (76 residues), 31 on lysozyme (129), so that a 12 × 12 model's protein report with every head's
# map on lysozyme stays within 5 MB (docs/views.md); 3Dmol.js adds 0.54 MB
STRUCTURE_BUDGET = 2**19


def probe_input(loaded, seq_len: int = PROBE_TOKENS):
    """The report's default input, [1 token]: natural text for a language model whose tokenizer reads
    English (GAP's Wikipedia passages, the label runs' own corpus: probe.heads.corpus), else (the organisms'
    small languages, protein models) random tokens with one block repeated
    (probe.heads.probesets.repeated_blocks)."""
    return _probe_input(loaded, seq_len)[0]


def _probe_input(loaded, seq_len: int):
    """(:func:`probe_input`, what it is: the report's note)."""
    length = min(seq_len, loaded.max_tokens)
    if loaded.kind in (ModelKind.CAUSAL_LM, ModelKind.MASKED_LM):
        corpus = tokenize_corpus(loaded.tokenizer, limit=SAMPLE_PASSAGES)
        if covers(corpus) and length >= 8:
            return (natural_text(loaded.tokenizer, corpus, 1, length, seed=0).input_ids[:1],
                    "natural text: Wikipedia passages of the GAP corpus (probe.heads.corpus)")
    return (repeated_blocks(loaded.tokenizer, 1, length, seed=0).input_ids[:1],
            "a probe input: random tokens with one block repeated (probe.heads.probesets.repeated_blocks)")


def _chosen_heads(table, thumbs: np.ndarray, count: int) -> list[tuple[int, int]]:
    """The best labelled head of each type, then the most peaked heads (largest mean row maximum) up to
    `count`."""
    chosen: list[tuple[int, int]] = []
    if table is not None and not table.empty and "label" in table.columns:
        labelled = table[[is_labelled(v) for v in table["label"]]].sort_values("score", ascending=False)
        for _, rows in labelled.groupby("head_type", sort=True):
            key = (int(rows.iloc[0]["layer"]), int(rows.iloc[0]["head"]))
            if key not in chosen:
                chosen.append(key)
    peaked = thumbs.max(-1).mean(-1)  # [layer head]
    for flat in np.argsort(-peaked, axis=None, kind="stable"):
        key = tuple(int(v) for v in np.unravel_index(flat, peaked.shape))
        if len(chosen) >= count:
            break
        if key not in chosen:
            chosen.append(key)
    return chosen[:count]


def _card_html(loaded) -> str:
    try:
        rows = architecture_card(loaded.config).rows()
    except ProbeError as error:
        return f'<p class="note">no architecture card: {html.escape(str(error))}</p>'
    return '<table class="card">' + "".join(f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td></tr>"
                                            for a, b in rows) + "</table>"


def _atlas_html(table, layers: int, heads: int) -> str:
    if table is None or table.empty:
        return ('<p class="note">no labels: pass --labels TABLE (written by <code>probe label</code>), or '
                'run '
                "<code>probe label --report</code></p>")
    figures = []
    for head_type in sorted(table["head_type"].astype(str).unique()):
        rows = table[table["head_type"].astype(str) == head_type]
        count = sum(is_labelled(v) for v in rows["label"]) if "label" in rows.columns else 0
        figures.append(f"<figure>{atlas_svg(table, layers, heads, head_type)}<figcaption>"
                       f"<b>{html.escape(head_type)}</b> · {count} labelled</figcaption></figure>")
    return ('<p class="note">score on the fixed 0–1 scale (Viridis) · grey: not labelled · ✓ labelled · '
            "hover a cell for its score, interval, chance, the untrained twins' bar, q and why it is not "
            f'labelled</p><p class="note controls">{html.escape(controls_line(table))}</p>'
            '<div class="atlases">' + "".join(figures) + "</div>")


def _protein_html(loaded, sequence: str | None, structure: str | None,
                  chain: str | None) -> tuple[str, str, str]:
    """(contact maps (predicted | true) and the head leaderboard against the contact base rate, the 3D view of
    the heads' attention on the structure (empty without one), the sequence). A `sequence` given with a
    `structure` is aligned to its chain, or refused when it is another protein (as show_structure does)."""
    # the library's one protein analysis (the app's and probe contacts'); below, only how the report shows it
    if structure is None:
        protein = protein_input(loaded, sequence if sequence is not None else DEMO_PROTEIN)
        note = ("no structure: pass --structure PDB for true contacts, P@L, the base rate and the 3D view of "
                "the heads' attention")
    else:
        protein = protein_input(loaded, sequence, structure, chain=chain)
        chain_read = protein.structure
        note = (f"{Path(structure).name} chain {chain_read.chain}: {len(chain_read.sequence)} residues, "
                f"{protein.true_contacts} true contacts (virtual Cβ–Cβ < 8 Å)")
        if sequence is not None and protein.sequence != chain_read.sequence:
            note += (f" · the given sequence ({len(protein.sequence)} residues) aligned to the chain: "
                     f"{protein.placed} of them placed on the structure")
        note += f" · {protein.other_chains}" if protein.other_chains else ""
    analysis = analyse_protein(loaded, protein)
    result, outside = analysis.result, analysis.outside
    sequence, true_map, parsed = protein.sequence, protein.true_map, protein.structure  # [L L] int8 or None
    parts = [f'<p class="note">{html.escape(note)}</p>']
    if outside:
        parts.append(f'<p class="note domain">{html.escape(outside)}</p>')
    view3d = ""
    if parsed is not None:
        shown = structure_view(loaded, parsed, result.sequence, true_map, result, budget=STRUCTURE_BUDGET)
        view3d = (f'<p class="note">{len(shown.alpha)} heads (every head when their residue maps fit, else '
                  "the best by long-range P@L): pick a head, click a residue to colour the fold by its "
                  "attention, click an edge or a second residue to select a pair</p>"
                  + structure_fragment(shown.payload(), "probe-report-structure"))
    maps = []
    if result.contacts is not None or true_map is not None:
        title = f"contacts · {display_name(loaded.name)}"
        maps.append(_figure(contact_svg(result.contacts, true_map, title),
                            "predicted ↗ · true ↙" if result.contacts is not None and true_map is not None
                            else ("predicted" if result.contacts is not None else "true contacts ↙"),
                            "contact-map"))
    if result.contacts is None:
        parts.append(f'<p class="note">{html.escape(display_name(loaded.name))} has no contact regression: '
                     "no predicted contacts; per-head rows and maps only</p>")
    if result.precision:
        parts.append(
            '<table class="card"><tr><th>range</th><th>P@L</th><th>P@L/2</th><th>P@L/5</th></tr>' + "".join(
            f"<tr><td>{name}</td>" + "".join(f"<td>{_fmt(result.precision.get(f'p_at_{k}_{name}'))}</td>"
                                             for k in ("L", "L2", "L5")) + "</tr>"
            for name in ("short", "medium", "long")) + "</table>")
    heads = result.heads
    if heads is not None and not heads.empty:
        key = "p_at_L_long" if true_map is not None else "logit_share"
        heads = heads.sort_values(key, ascending=False, na_position="last")
        for _, row in heads.head(HEAD_MAPS).iterrows():  # the leaderboard's first heads, as residue maps
            layer, index = int(row["layer"]), int(row["head"])
            apc = head_attention_map(loaded, result.sequence, layer, index)  # [L L]
            name = loaded.head_name(layer, index)
            maps.append(_figure(residue_map_svg(apc, true_map, name, f"{name} APC attention"),
                                f"{name} APC attention ↗"
                                + (" · true contacts ↙" if true_map is not None else ""),
                                "head-map"))
        columns = [c for c in ("name", "p_at_L_long", "base_rate_long", "enrichment_L_long", "p_fwer_L_long",
                               "untrained_p99_L_long", "significant_L_long", "logit_share", "contact_share",
                               "binding_share") if c in heads.columns]
        if "significant_L_long" in heads:
            shown = heads["significant_L_long"].map({True: "yes", False: "no"})
            heads = heads.assign(significant_L_long=shown)
        if true_map is None:
            columns = [c for c in columns if c in ("name", "logit_share")]
        head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in columns)
        ligands = parsed.ligands if parsed is not None else None
        body = "".join("<tr>" + "".join(_cell(row[c], c, ligands, true_map is not None) for c in columns)
                       + "</tr>" for _, row in heads.head(LEADERBOARD_ROWS).iterrows())
        parts.append(f'<h3>heads against the contact base rate (top {min(LEADERBOARD_ROWS, len(heads))} of '
                     f'{len(heads)}, by {key.replace("_", " ")})</h3><p class="note">enrichment = P@L / base '
                     'rate of '
                     "the range; p FWER: the diagonal-shift permutation test of the head's hits beyond "
                     "a predictor that knows only separation and residue types, family-wise over every "
                     "head and range (Westfall–Young maxT); untrained p99: the 99th percentile of P@L "
                     "over the heads of untrained twins; significant: p FWER ≤ 0.05 and P@L above it "
                     "(probe.proteins.significance); unknown: hover it for its reason</p>"
                     '<div class="scroll"><table '
                     f'class="probe-table"><thead><tr>{head}</tr></thead><tbody>{body}'
                     "</tbody></table></div>")
    if maps:
        parts.insert(1, f'<div class="atlases residue-maps">{"".join(maps)}</div>')
    return "".join(parts), view3d, sequence


def _figure(svg: str, caption: str, kind: str) -> str:
    return f'<figure class="{kind}">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>'


def _cell(value, column: str, ligands, has_structure: bool) -> str:
    """One leaderboard cell: p-values as the label tables print them, an unknown with its reason (title)."""
    text = _fmt(value)
    if text == "unknown":
        reason = unknown_reason(column, ligands=ligands, has_structure=has_structure)
        return f'<td data-sort="" class="unknown" title="{html.escape(reason)}">unknown</td>'
    if column in P_COLUMNS:
        text = format_q(float(value))
    return f'<td data-sort="{html.escape(str(value))}">{text}</td>'


def _fmt(value) -> str:
    if isinstance(value, str):
        return html.escape(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "unknown"
    return "unknown" if not np.isfinite(number) else f"{number:.3g}"


def report_html(loaded, labels=None, text: str | None = None, structure: str | None = None,
                chain: str | None = None, seq_len: int = PROBE_TOKENS, full_maps: int = FULL_MAPS,
                budget: int = REPORT_BUDGET, history=None, circuits=(), history_control=None) -> str:
    """The report of one model as one HTML string (see :func:`write_report`)."""
    if isinstance(loaded, (str, Path)):
        loaded = load(str(loaded))
    table = one_model(as_table(labels), loaded) if labels is not None else None
    protein = loaded.kind == ModelKind.PROTEIN_MLM
    sections = [f"<h1>probe report · {html.escape(display_name(loaded.name))}</h1>",
                f'<p class="note">{html.escape(loaded.kind.description)}'
                f" · revision {html.escape(str(loaded.revision)[:24])} · written "
                f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} · one file, no "
                "network</p>",
                "<h2>Architecture</h2>", _card_html(loaded),
                "<h2>Head atlas</h2>", _atlas_html(table, loaded.n_layers, loaded.n_heads),
                "<h2>Labelled heads</h2>"]
    if table is not None and not table.empty:
        sections.append(table_html(table, only_labelled=True))
    else:
        sections.append('<p class="note">no labels table</p>')
    if history is not None:
        from probe.views.timeline import history_model, show_history

        if isinstance(history, (str, Path)):
            from probe.runs.history import read_history

            history = read_history(Path(history))
        timeline = show_history(history, model=history_model(history, loaded.name), control=history_control)
        sections += ["<h2>Training history</h2>", timeline.html()]
    protein_part, view3d, sequence = "", "", text
    if protein:
        protein_part, view3d, sequence = _protein_html(loaded, text, structure, chain)
    if sequence:
        ids = input_ids_of(loaded, sequence)
        what = "the protein" if protein else "the given text"
    else:
        ids, what = _probe_input(loaded, seq_len)
    n_tokens, all_heads = int(ids.shape[1]), loaded.n_layers * loaded.n_heads
    if encode.bytes_per_head(n_tokens) * all_heads <= budget:
        chosen, factor = None, 1
    else:
        _, thumbs = pooled_attention(loaded, ids, encode.pooling_factor(n_tokens, 1, 2**12), [(0, 0)],
                                     encode.THUMB_BINS)
        chosen = _chosen_heads(table, thumbs, max(1, full_maps))
        factor = encode.pooling_factor(n_tokens, len(chosen), budget)
    maps, thumbs = pooled_attention(loaded, ids, factor, chosen, encode.THUMB_BINS)
    tokens = display_tokens(loaded.tokenizer, loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist()))
    first = (_chosen_heads(table, thumbs, 1) or [min(maps)])[0]
    if first not in maps:
        first = min(maps)
    view = View(model=display_name(loaded.name), tokens=tuple(tokens),
                causal=loaded.kind == ModelKind.CAUSAL_LM, thumbnails=thumbs, maps=maps, factor=factor,
                badges=badges(table), selected=first, title=display_name(loaded.name))  # + "N tokens"
    held = "every head" if chosen is None else ", ".join(head_name(*key) for key in sorted(maps))
    sections += ["<h2>Every head on one input</h2>",
                 f'<p class="note">input: {html.escape(what)} · full maps: {html.escape(held)}'
                 + (f" (max-pooled {factor}×{factor})" if factor > 1 else "")
                 + " · hover a token for its row, click the view and use ←/→ ↑/↓ to step heads and "
                   "layers</p>",
                 fragment(view.payload(), "probe-report-view")]
    if protein:
        sections += ["<h2>Contacts</h2>", protein_part]
    if view3d:
        sections += ["<h2>Structure</h2>", view3d]
    for index, found in enumerate(circuits):  # a Circuit or a TaskCircuit: the same graph as show_circuit
        what = getattr(found, "head_type", None) or "your task, every edge"
        sections += [f"<h2>Circuit · {html.escape(what)}</h2>",
                     circuit_fragment(found.payload(), f"probe-report-circuit-{index}")]
    return standalone_page("\n".join(sections), f"probe report · {display_name(loaded.name)}")


def write_report(loaded, out: str | Path, labels=None, text: str | None = None, structure: str | None = None,
                 chain: str | None = None, seq_len: int = PROBE_TOKENS, full_maps: int = FULL_MAPS,
                 budget: int = REPORT_BUDGET, history=None, circuits=(), history_control=None) -> Path:
    """Write the one-file HTML report of a model (atomically) and return its path.

    Parameters
    ----------
    loaded : probe.models.LoadedModel or str
        The model (or what :func:`probe.load` takes).
    out : str or Path
        FILE.html.
    labels : pandas.DataFrame or str, optional
        A labels table (or its file) from ``probe label``: atlas, labelled heads, badges.
    text : str, optional
        The input of the view (a protein sequence for protein models); default: `seq_len` tokens of natural
        text (GAP's Wikipedia passages) for a language model that reads English, else a probe input
        (repeated random blocks); for protein models the structure's sequence or ubiquitin.
    structure : str, optional
        A PDB/mmCIF file (protein models): true contacts, P@L, the base rate.
    chain : str, optional
        The structure's chain (default: the first).
    seq_len : int, default 128
        Tokens of the probe input.
    full_maps : int, default 4
        Heads with a full map when not every head fits `budget` at one token per cell.
    budget : int, default 4 MiB
        Bytes of full maps (uint8: N² + 4 bytes per head).
    history : pandas.DataFrame or str, optional
        The table ``probe history`` wrote for this model's run (or its file): the training timeline
        (:func:`probe.views.timeline.show_history`); another model's history is refused.
    circuits : sequence of probe.circuits.Circuit, optional
        Circuits to draw, one section each (:func:`probe.circuits.find_circuit`; ``probe report --circuit``),
        or a task's (:func:`probe.circuits.task_search.task_circuit`; ``probe report --circuit-task``).
    history_control : pandas.DataFrame or str, optional
        With `history`: another model's history (or its file), drawn beside it in the timeline's ICL-score and
        loss panels — the 1-layer control (``probe report --history-control``); the same model's is refused.

    Returns
    -------
    Path
        `out`.

    Examples
    --------
    >>> import os, tempfile
    >>> from probe.heads.tables import load_table
    >>> labels = load_table(probe.zoo.labels_path("induction"))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     out = os.path.join(folder, "report.html")
    ...     path = write_report("zoo:induction", out, labels=labels, seq_len=32)
    ...     page = path.read_text(encoding="utf-8")
    >>> path.name, "<script src=" in page, "https://" in page  # one file: nothing loaded from elsewhere
    ('report.html', False, False)
    """
    out = Path(out).expanduser()
    if out.suffix.lower() not in (".html", ".htm"):
        raise ProbeError(f"--out {out}: a report is one .html file")
    if not out.parent.is_dir():
        raise ProbeError(f"--out {out}: the folder {out.parent} does not exist; create it first")
    if history_control is not None and history is None:
        raise ProbeError("history_control is drawn beside a history: give history= too")
    page = report_html(loaded, labels, text, structure, chain, seq_len, full_maps, budget, history, circuits,
                       history_control)
    write_atomically(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return out


__all__ = ["FULL_MAPS", "PROBE_TOKENS", "REPORT_BUDGET", "STRUCTURE_BUDGET", "probe_input", "report_html",
           "write_report"]
