"""Sweeps: label many checkpoints of a model (or many models) into one table, in-process or on Ray, and plot each
labelled head's score across training steps.

    probe label --model DIR --revisions step-0,step-50,step-100 --out sweep.parquet --plot sweep.html [--ray auto]
    probe label --models-file checkpoints.txt --out sweep.parquet            # one checkpoint directory per line

A revision is a subdirectory of a local --model (what ``python -m probe.zoo.train NAME --checkpoint-steps ...``
writes: DIR/step-N/) or a hub branch, tag or commit (Pythia publishes ``step1000`` ... ``step143000``). The table is
the label table of every checkpoint (``revision`` is the weights' identity as always: commit hash or content hash)
with two more columns: ``checkpoint`` (the revision as named, or the directory's name) and ``step`` (from the
checkpoint's card.json, or the number in its name; empty when unknown).

Every checkpoint is one unit of :mod:`probe.runs.ray_executor`: finished checkpoints are journalled beside --out as they
finish (a killed run resumes after them; --force recomputes), checkpoints that fail (a missing or corrupt
directory) go to ``OUT.errors.csv`` and the exit code is 2, and the others are labelled all the same.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from probe.errors import ProbeError
from probe.runs.ray_executor import (
    Unit,
    UnitResult,
    add_ray_options,
    errors_table,
    exit_code,
    journaled,
    ray_options,
    results_table,
    run_units,
)
from probe.runs.units import Checkpoint, LabelTask, make_checkpoint

SWEEP_COLUMNS = ["checkpoint", "step"]  # added after the label table's own columns
PLOT_EXTENSIONS = (".html", ".png")


def add_sweep_options(parser: argparse.ArgumentParser) -> None:
    """The flags `probe label` gains: --revisions, --models-file, --plot, --ray, --ray-workers."""
    parser.add_argument("--revisions", metavar="R1,R2,...",
                        help="label these checkpoints of each --model: subdirectories of a local model directory "
                             "(step-0,step-50: what `python -m probe.zoo.train --checkpoint-steps` writes) or hub "
                             "branches/tags/commits; adds the columns checkpoint and step")
    parser.add_argument("--models-file", metavar="FILE",
                        help="one model or checkpoint directory per line (# comments allowed), labelled like --model")
    parser.add_argument("--plot", metavar="FILE.html|FILE.png",
                        help="figure of each labelled head's score across checkpoints; writes FILE.html and "
                             "FILE.png (PNG needs kaleido and a Chromium)")
    add_ray_options(parser)
    for action in parser._actions:  # --models-file may stand in for --model (run_label asks for one of them)
        if action.dest == "model":
            action.required = False


def wanted(args: argparse.Namespace) -> bool:
    """Whether `probe label` should run through the sweep runner (any of its flags given)."""
    return not getattr(args, "model", None) or any(
        getattr(args, name, None) is not None for name in ("revisions", "models_file", "plot", "ray"))


def parse_revisions(text: str) -> list[str]:
    revisions = [part.strip() for part in text.split(",") if part.strip()]
    if not revisions:
        raise ProbeError("--revisions is empty; give comma-separated revisions, e.g. step-0,step-50")
    return list(dict.fromkeys(revisions))


def read_models_file(path: str) -> list[str]:
    """The non-empty, non-comment lines of a --models-file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ProbeError(f"--models-file {path} does not exist")
    lines = [line.split("#", 1)[0].strip() for line in file.read_text().splitlines()]
    specs = [line for line in lines if line]
    if not specs:
        raise ProbeError(f"--models-file {path} lists no models (one directory or hub id per line)")
    return specs


def sweep_checkpoints(models: list[str] | None, revisions: str | None, models_file: str | None) -> list[Checkpoint]:
    """The checkpoints the flags name, in order: each --model × each revision, then the --models-file lines."""
    specs = list(dict.fromkeys(models or []))
    if revisions is not None and not specs:
        raise ProbeError("--revisions needs --model: the model whose checkpoints they are")
    checkpoints = []
    for spec in specs:
        for revision in parse_revisions(revisions) if revisions is not None else [None]:
            checkpoints.append(make_checkpoint(spec, revision))
    if models_file is not None:
        checkpoints += [make_checkpoint(spec) for spec in read_models_file(models_file)]
    if not checkpoints:
        raise ProbeError("nothing to label: give --model or --models-file")
    return list({c.key: c for c in checkpoints}.values())


def label_units(checkpoints: list[Checkpoint]) -> list[Unit]:
    return [Unit(key=c.key, group=c, payload=c) for c in checkpoints]


def sweep_table(results: list[UnitResult]) -> pd.DataFrame:
    """The successful checkpoints' label tables, in checkpoint order, step as a nullable integer."""
    table = results_table(results)
    if len(table):
        table["step"] = table["step"].astype("Int64")
    return table


# ---------------------------------------------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------------------------------------------


def sweep_figure(table: pd.DataFrame, title: str | None = None):
    """plotly Figure: one panel per head type that some checkpoint labels; in it, one line per labelled head (score
    and its bootstrap interval at every checkpoint), and the uniform-attention chance level dashed. x is the
    training step when every checkpoint has one, else the checkpoints in order. Where a table holds several rows per
    head and type (several probe lengths), the row of the longest probes is plotted."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    if table.empty:
        raise ProbeError("no labelled checkpoints to plot")
    keys = ["checkpoint", "head_type", "head_name"]
    if table.duplicated(keys).any():  # several probe lengths / sets per head: plot the longest probes' row
        order_by = [c for c in ("seq_len",) if c in table.columns]
        table = table.sort_values(order_by, kind="stable") if order_by else table
        table = table.drop_duplicates(keys, keep="last")
    by_step = table["step"].notna().all()
    x_column = "step" if by_step else "checkpoint"
    labelled = table[table["label"].fillna(False).astype(bool)]
    types = [t for t in dict.fromkeys(table["head_type"]) if t in set(labelled["head_type"])]
    if not types:
        raise ProbeError("no head is labelled at any checkpoint: nothing to plot")
    figure = make_subplots(rows=len(types), cols=1, shared_xaxes=True, subplot_titles=types,
                           vertical_spacing=0.25 / max(len(types), 1))
    order = list(dict.fromkeys(table["checkpoint"]))
    heads_of = {t: sorted(set(labelled.loc[labelled["head_type"] == t, "head_name"]), key=_head_order) for t in types}
    every_head = sorted(set().union(*heads_of.values()), key=_head_order)
    palette = qualitative.Plotly + qualitative.Dark24
    colors = {head: palette[index % len(palette)] for index, head in enumerate(every_head)}  # one colour per head
    shown: set[str] = set()
    for row, head_type in enumerate(types, start=1):
        rows = table[table["head_type"] == head_type]
        for head in heads_of[head_type]:
            line = rows[rows["head_name"] == head]
            line = line.sort_values("step") if by_step else line.set_index("checkpoint").loc[order].reset_index()
            figure.add_trace(go.Scatter(
                x=line[x_column], y=line["score"], mode="lines+markers", name=head, legendgroup=head,
                showlegend=head not in shown, line={"color": colors[head]}, marker={"color": colors[head]},
                error_y={"type": "data", "symmetric": False, "array": line["ci_high"] - line["score"],
                         "arrayminus": line["score"] - line["ci_low"], "thickness": 1},
                hovertemplate=f"{head} {head_type}<br>{x_column} %{{x}}<br>score %{{y:.3f}}<extra></extra>",
            ), row=row, col=1)
            shown.add(head)
        chance = rows.groupby(x_column, sort=False)["chance"].mean()
        chance = chance.sort_index() if by_step else chance.loc[order]
        figure.add_trace(go.Scatter(x=chance.index, y=chance.values, mode="lines", name="chance (uniform)",
                                    line={"dash": "dash", "color": "grey"}, legendgroup="chance",
                                    showlegend=row == 1), row=row, col=1)
        figure.update_yaxes(title_text="score", range=[0, 1.05], row=row, col=1)
    figure.update_xaxes(title_text="training step" if by_step else "checkpoint", row=len(types), col=1)
    figure.update_layout(title=title or "Head scores across checkpoints (heads labelled at some checkpoint)",
                         height=260 * len(types) + 140, width=900, template="plotly_white")
    return figure


def _head_order(name: str) -> tuple[int, ...]:
    """"L10H2" -> (10, 2): heads in layer, head order."""
    return tuple(int(part) for part in name[1:].split("H"))


def save_figure(figure, path: str | Path) -> list[Path]:
    """Write FILE.html (plotly.js inline: opens offline) and FILE.png. The PNG is rendered by kaleido (which
    drives a local Chrome/Chromium); without kaleido, by headless Chromium screenshotting the HTML. Returns the
    files written; ProbeError when the PNG cannot be made (the HTML is written first all the same)."""
    path = Path(path).expanduser()
    if path.suffix.lower() not in PLOT_EXTENSIONS:
        raise ProbeError(f"--plot {path}: the extension must be .html or .png (both files are written)")
    if not path.parent.exists():
        raise ProbeError(f"--plot {path}: the folder {path.parent} does not exist; create it first")
    html, png = path.with_suffix(".html"), path.with_suffix(".png")
    figure.write_html(html, include_plotlyjs=True)
    reason = "kaleido is not installed"
    try:
        import kaleido  # noqa: F401
    except ImportError:
        pass
    else:
        try:
            figure.write_image(png, scale=2)
            return [html, png]
        except Exception as error:  # noqa: BLE001 - kaleido reports a missing browser in several ways
            reason = f"kaleido failed ({str(error).strip().splitlines()[0] if str(error).strip() else error!r})"
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise ProbeError(f"wrote {html} but no PNG: {reason} and no Chromium is on PATH (pip install kaleido, "
                         "and install chromium)")
    with tempfile.TemporaryDirectory() as scratch:
        static = Path(scratch) / "figure.html"  # no mode bar in the picture
        figure.write_html(static, include_plotlyjs=True, config={"staticPlot": True})
        _screenshot(browser, static, png, int(figure.layout.width or 900), int(figure.layout.height or 600))
    return [html, png]


def _screenshot(browser: str, html: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=5000",
                   f"--screenshot={png}", html.resolve().as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.exists():
        raise ProbeError(f"headless Chromium could not render {png}: {done.stderr.strip().splitlines()[-1:]}")


# ---------------------------------------------------------------------------------------------------------------
# `probe label` with sweep or Ray flags
# ---------------------------------------------------------------------------------------------------------------


def weights_fingerprint(checkpoint: Checkpoint) -> list:
    """Name, size and modification time of a local checkpoint's weight files (cheap: nothing is read), so a
    directory whose weights were replaced is recomputed; [] for hub models (their revision names them)."""
    from probe.runs.units import local_revision

    directory = local_revision(checkpoint.spec, checkpoint.revision) if checkpoint.revision else None
    if directory is None:
        try:
            from probe import models

            local = Path(models.resolve(checkpoint.spec)).expanduser()
        except ProbeError:
            return []
        directory = local if local.is_dir() else None
    if directory is None:
        return []
    files = sorted([*directory.glob("*.safetensors"), *directory.glob("*.bin")])
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def errors_path(out: Path) -> Path:
    return out.with_name(out.stem + ".errors.csv")


def run_label(args: argparse.Namespace, config) -> int:
    """`probe label` over checkpoints (--revisions, --models-file) and/or on Ray (--ray); see the module doc.
    Exit code 0 when every checkpoint was labelled, 2 when some failed on bad input, 1 otherwise."""
    from probe.commands.common import output_path, write_atomically
    from probe.heads.tables import TABLE_EXTENSIONS, load_table, save_table
    from probe.runs.journal import Journal, identity_hash

    out = output_path(args.out, TABLE_EXTENSIONS) if args.out else None
    if out is not None and out.exists() and out.stat().st_size > 0 and not args.force:
        load_table(out)  # never overwrite a file that is not a label table (one-line error naming --force)
    # checked before any computing: extension, folder, writable (the same checks as every --out)
    plot = output_path(args.plot, PLOT_EXTENSIONS, "--plot") if getattr(args, "plot", None) else None
    checkpoints = sweep_checkpoints(args.model, getattr(args, "revisions", None), getattr(args, "models_file", None))
    units = label_units(checkpoints)
    task = LabelTask(config, device=args.device, dtype=args.dtype)
    ray = ray_options(args)

    done: dict[str, UnitResult] = {}
    record = None
    if out is not None:
        journal = Journal(out, force=args.force)
        from probe.heads.label import config_identity

        settings = {"config": config_identity(config), "device": args.device, "dtype": args.dtype}
        done, record = journaled(journal, lambda unit: identity_hash(
            {**settings, "unit": unit.key, "weights": weights_fingerprint(unit.payload)}), units)
        if done:
            print(f"probe label: {len(done)} of {len(units)} checkpoint(s) already in {out}; skipped (--force "
                  "redoes them)", file=sys.stderr)
    finished: dict[str, UnitResult] = dict(done)

    def on_result(result: UnitResult) -> None:
        if not result.ok:
            print(f"probe label: {result.key}: failed: {result.error}", file=sys.stderr)
        finished[result.key] = result
        if out is not None and result.ok:
            record(result)
            table = sweep_table([finished[u.key] for u in units if u.key in finished])
            write_atomically(out, lambda tmp: save_table(table, tmp))

    results = run_units(units, task, ray=ray, on_result=on_result, done=done, description="label")
    table = sweep_table(results)
    computed = [r.table.assign(model=r.key) for r in results if r.ok and not r.cached and r.table is not None]
    if computed:  # one summary per checkpoint, named model@revision
        from probe.heads.label import summary_lines

        for line in summary_lines(pd.concat(computed, ignore_index=True)):
            print(line, file=sys.stderr)
    errors = errors_table(results)
    if out is None:
        if len(table):
            table.to_csv(sys.stdout, index=False)
    else:
        if len(table):
            write_atomically(out, lambda tmp: save_table(table, tmp))
            print(f"probe label: wrote {len(table)} rows ({len(results) - len(errors)} checkpoint(s)) to {out}",
                  file=sys.stderr)
        if len(errors):
            write_atomically(errors_path(out), lambda tmp: errors.to_csv(tmp, index=False))
            print(f"probe label: {len(errors)} checkpoint(s) failed; listed in {errors_path(out)}", file=sys.stderr)
        elif errors_path(out).exists():
            errors_path(out).unlink()
    if plot is not None and len(table):
        if not table["label"].fillna(False).astype(bool).any():
            print("probe label: no head is labelled at any checkpoint: no figure written", file=sys.stderr)
        else:
            for written in save_figure(sweep_figure(table), plot):
                print(f"probe label: wrote {written}", file=sys.stderr)
    return exit_code(results)
