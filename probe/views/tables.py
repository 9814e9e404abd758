"""The labels table as a readable HTML table (a notebook cell, the report): score with its interval, chance,
the untrained twins' bar (or "not run"), q, label, the held-out confirmation's score and interval, output
share, role, ablation and group effect — sorted and
coloured like the app's labelled-heads table (best score first within a type; ✓ green when labelled, grey when
not labelled, the reason on hover; NaN is "unknown"); its note says which controls a label beat."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from probe.errors import ProbeError
from probe.heads.tables import TABLE_EXTENSIONS, read_table_file, rows_of_model
from probe.naming import fixed, head_name
from probe.views.bundle import inline_script, inline_style
from probe.views.html_view import HtmlView
from probe.views.reading import (
    controls_line,
    format_q,
    held_out_text,
    is_grey,
    is_labelled,
    is_significant,
    label_reason,
    number,
    twins_ran,
    twins_text,
)

MAX_ROWS = 500  # rows drawn in a notebook (a note says how many were left out)


def as_table(labels) -> pd.DataFrame:
    """A labels table from a DataFrame or a file written by `probe label` (.csv, .parquet, .json)."""
    if isinstance(labels, pd.DataFrame):
        table = labels
    elif isinstance(labels, (str, Path)):
        path = Path(labels).expanduser()
        if path.is_dir():
            raise ProbeError(f"labels {path} is a folder: give the table file inside it, written by "
                             "`probe label`")
        if not path.is_file():
            raise ProbeError(f"labels {path}: no such file; pass a table written by `probe label`")
        if path.suffix.lower() not in TABLE_EXTENSIONS:
            raise ProbeError(f"labels {path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")
        table = read_table_file(path)
    else:
        raise ProbeError(f"labels must be a DataFrame or a table file written by `probe label`, not "
                         f"{type(labels).__name__}")
    missing = [c for c in ("layer", "head", "head_type", "score") if c not in table.columns]
    if missing:
        raise ProbeError(f"the labels table lacks the columns {', '.join(missing)}; pass a table written by "
                         "`probe label`")
    return table


def one_model(table: pd.DataFrame, loaded) -> pd.DataFrame:
    """The rows of the model `loaded` (matched by name or revision; a one-line ProbeError when the table holds
    none of its rows or names a head it lacks) at the first probe length it lists."""
    table = rows_of_model(table, loaded.name, loaded.revision, (loaded.n_layers, loaded.n_heads))
    if "seq_len" in table.columns and table["seq_len"].nunique() > 1:
        table = table[table["seq_len"] == table["seq_len"].iloc[0]]
    return table


def badges(table: pd.DataFrame | None) -> dict[str, dict[str, list[str]]]:
    """head type -> {"layer:head": [badge text, css class, why not labelled]}: the score, ✓ when labelled,
    faint (grey) when not labelled, with :func:`probe.views.reading.label_reason` ("" when labelled)."""
    out: dict[str, dict[str, list[str]]] = {}
    if table is None or table.empty:
        return out
    for row in table.itertuples(index=False):
        labelled = is_labelled(getattr(row, "label", None))
        css = "labelled" if labelled else ("faint" if is_grey(row) else "")
        score = number(row, "score")
        text = ("unknown" if score is None else f"{score:.2f}") + (" ✓" if labelled else "")
        out.setdefault(str(row.head_type), {})[f"{int(row.layer)}:{int(row.head)}"] = [text, css,
                                                                                       label_reason(row)]
    return out


COLUMNS = ("head", "type", "score", "interval", "chance", "twins p99", "q", "label", "held-out",
           "output share", "role", "ablation", "group effect")



def _interval(row, low: str, high: str) -> str:
    a, b = number(row, low), number(row, high)
    return "" if a is None or b is None else f"[{a:.3f}, {b:.3f}]"


def _effect(row, effect: str, z: str) -> tuple[str, float | None]:
    value, score = number(row, effect), number(row, z)
    if value is None:
        return "unknown", None
    return f"{value:+.3f}" + (f" (z {fixed(score)})" if score is not None else ""), value


def _cell(text: str, sort, css: str = "") -> str:
    sort_value = "" if sort is None else (f"{sort:.6g}" if isinstance(sort, float) else str(sort))
    css = css or ("unknown" if text == "unknown" else "")
    return (f'<td data-sort="{html.escape(sort_value)}"' + (f' class="{css}"' if css else "") + f">"
            f"{html.escape(text)}</td>")


def table_rows(table: pd.DataFrame, only_labelled: bool = False) -> pd.DataFrame:
    """The rows shown, in the app's order: by type, labelled first, best score first."""
    rows = table.copy()
    rows["labelled_row"] = [is_labelled(v) for v in rows["label"]] if "label" in rows.columns else False
    if only_labelled:
        rows = rows[rows["labelled_row"]]
    return rows.sort_values(["head_type", "labelled_row", "score"], ascending=[True, False, False],
                            na_position="last", kind="stable")


def table_html(table: pd.DataFrame, only_labelled: bool = False, max_rows: int = MAX_ROWS) -> str:
    """The HTML of the labels table (<table class="probe-table">; views.js sorts it on a header click)."""
    rows = table_rows(table, only_labelled)
    shown = rows.head(max_rows)
    ran = twins_ran(table)
    head = "".join(f"<th>{html.escape(name)}</th>" for name in COLUMNS)
    body = []
    for row in shown.itertuples(index=False):
        labelled = bool(row.labelled_row)
        score = number(row, "score")
        q_value = number(row, "q_value")
        share = number(row, "output_share")
        share_text = "unknown" if share is None else f"{share:.3f} " + _interval(row, "output_share_low",
                                                                                "output_share_high")
        role = getattr(row, "role", None)
        role_text = role if isinstance(role, str) and role else ("unknown" if labelled else "")
        ablation, ablation_value = _effect(row, "ablation_effect", "ablation_z")
        group, group_value = _effect(row, "group_effect", "group_z")
        chance = number(row, "chance")
        name = head_name(int(row.layer), int(row.head))
        cells = [
            _cell(name, int(row.layer) * 10000 + int(row.head)),
            _cell(str(row.head_type), str(row.head_type)),
            _cell("unknown" if score is None else f"{score:.3f}", score),
            _cell(_interval(row, "ci_low", "ci_high"), number(row, "ci_low")),
            _cell("unknown" if chance is None else f"{chance:.3f}", chance),
            _cell(twins_text(row, ran), number(row, "untrained_p99"), "" if ran else "unknown"),
            _cell(format_q(q_value), q_value),
            f'<td data-sort="{int(labelled)}">' + ('<span class="yes">✓ labelled</span>' if labelled else "")
            + "</td>",
            _cell(held_out_text(row), number(row, "confirm_score")),
            _cell(share_text.strip(), share), _cell(role_text, role_text),
            _cell(ablation, ablation_value), _cell(group, group_value),
        ]
        faint = not labelled and is_grey(row)
        why = f' title="not labelled: {html.escape(label_reason(row))}"' if faint else ""
        body.append(f'<tr data-head="{name}"' + (' class="faint"' if faint else "") + why + ">"
                    + "".join(cells) + "</tr>")
    note = (f"{len(rows)} rows" + (f", the first {max_rows} shown" if len(rows) > max_rows else "") +
            " · by type, labelled first, best score first (click a header to sort) · ✓ labelled (passed the "
            "label rule) · grey: not labelled (hover a row: why) · unknown: not measured (never 0) · "
            + controls_line(table))
    return (f'<div class="probe-table-note">{html.escape(note)}</div><table '
            f'class="probe-table"><thead><tr>{head}'
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>")


class LabelTable(HtmlView):
    """A labels table that draws itself as HTML in a notebook (:func:`label_table`) and saves as a page."""

    kind = "labels table"

    def __init__(self, table: pd.DataFrame, only_labelled: bool = False, max_rows: int = MAX_ROWS) -> None:
        self.table = table
        self.only_labelled = only_labelled
        self.max_rows = max_rows

    def html(self, element_id: str | None = None) -> str:
        return (inline_style() + table_html(self.table, self.only_labelled, self.max_rows) + inline_script() +
                "<script>window.probeViews.mountAll();</script>")

    def page_title(self) -> str:
        models = list(dict.fromkeys(self.table["model"].astype(str))) if "model" in self.table else []
        return "probe labels" + (f" · {', '.join(models[:3])}" if models else "")

    def __repr__(self) -> str:  # what it draws, and why not every row when it does not
        chosen = len(table_rows(self.table, self.only_labelled))
        drawn, total = min(chosen, self.max_rows), len(self.table)
        why = ["the labelled heads (only_labelled=True)"] if self.only_labelled and chosen < total else []
        why += [f"the first {self.max_rows} (max_rows={self.max_rows})"] if chosen > self.max_rows else []
        return (f"<LabelTable: draws {drawn} of {total} rows: {', '.join(why)}>" if why
                else f"<LabelTable: draws {drawn} rows>")


def label_table(labels, only_labelled: bool = False, max_rows: int = MAX_ROWS) -> LabelTable:
    """The labels table of `probe label` as a readable, sortable HTML table under a notebook cell.

    Parameters
    ----------
    labels : pandas.DataFrame or str or Path
        A table written by ``probe label`` / :func:`probe.label_model`, or its file.
    only_labelled : bool, default False
        Only the labelled heads (as the app's labelled-heads table).
    max_rows : int, default 500
        Rows drawn; a note says how many were left out.

    Returns
    -------
    LabelTable
        With ``_repr_html_`` (columns: head, type, score, interval, chance, twins p99 — the untrained
        twins' bar, "not run" without them — q, label, output share, role, ablation, group effect).

    Examples
    --------
    >>> from probe.heads.tables import load_table
    >>> labels = load_table(probe.zoo.labels_path("induction"))  # zoo:induction's shipped labels
    >>> table = label_table(labels, only_labelled=True)
    >>> table  # in a notebook: the sortable HTML table under the cell
    <LabelTable: draws 8 of 80 rows: the labelled heads (only_labelled=True)>
    >>> html = table._repr_html_()
    >>> html.count("<tr"), "L1H3" in html  # a header and the 8 labelled heads
    (9, True)
    """
    return LabelTable(as_table(labels), only_labelled, max_rows)


__all__ = ["COLUMNS", "LabelTable", "as_table", "badges", "format_q", "is_labelled", "is_significant",
           "label_table", "number", "one_model", "table_html"]
