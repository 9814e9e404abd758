"""The timeline beside a control (issue 54): another model's history — the 1-layer twin that cannot form an
induction head — drawn dashed in the ICL-score and loss panels only, never in the head panels; the same model
refused; the copying and K-composition panels with their exact values; the report's and the app's
``--history-control`` flags answered before any heavy import."""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

import probe
from probe.errors import ProbeError
from probe.views import timeline
from tests.views.test_timeline import STEPS, SVG, planted, titles


def control(model: str = "run-1layer", steps=STEPS) -> pd.DataFrame:
    """A 1-layer twin: its ICL score stays near 0 (−0.01 per decade), its heads' induction score 0.9 (a value
    no head of `planted` has, so that a control's head in a head panel would show)."""
    table = planted(model)
    table = table[(table["row"] == "checkpoint") | (table["layer"] == 0)].copy()
    table = table[table["step"].isin(steps)]
    points = table["row"] == "checkpoint"
    table.loc[points, "icl_score"] = [-0.01 * math.log10(step + 1) for step in table.loc[points, "step"]]
    table.loc[points, "held_out_loss"] = 6.0
    table.loc[~points, "induction"] = 0.9
    return table


def measured(model: str = "run") -> pd.DataFrame:
    """`planted` with copying and K-composition: L1H0's copying rises 0.1 → 0.7, its K-composition with the
    previous-token head is unknown until L0H1 is labelled (step 100) and 0.3 at step 1000."""
    table = planted(model)
    heads = table["row"] == "head"
    table.loc[heads, "copying"] = 0.05
    l1h0 = heads & (table["layer"] == 1) & (table["head"] == 0)
    table.loc[l1h0, "copying"] = [0.1, 0.2, 0.4, 0.7]
    later = heads & (table["layer"] == 1) & (table["step"] >= 100)
    table.loc[later, "composition_prev_token"] = 0.1
    table.loc[l1h0 & (table["step"] == 1000), "composition_prev_token"] = 0.3
    return table


def by_name(svg: str, name: str) -> list[ET.Element]:
    return [p for p in ET.fromstring(svg).iter(f"{SVG}polyline") if p.get("data-name") == name]


def test_the_control_is_drawn_dashed_in_the_icl_and_loss_panels_only():
    view = probe.show_history(planted(), control=control())
    svg = view.svg()
    root = ET.fromstring(svg)
    icl, loss = by_name(svg, "control icl_score"), by_name(svg, "control held-out loss")
    assert len(icl) == 1 and len(loss) == 1
    assert icl[0].get("stroke-dasharray") == timeline.CONTROL_DASH
    assert loss[0].get("stroke-dasharray") == timeline.CONTROL_DASH
    dots = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "control"]
    assert len(dots) == len(STEPS)
    said = titles(svg)
    assert "1-layer control: run-1layer · step-1000 (step 1,000): ICL score -0.030 ± 0.100 nats" in said
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "1-layer control:" in texts and "run-1layer" in texts  # the legend, on two rows
    assert "ICL score: loss at token 120 − loss at token 12" in texts  # the positions, in the title
    # the head panels hold the model's 4 heads only: no dot of the control's L0H0 (induction 0.9)
    assert not any("0.900" in text for text in said)
    assert len(by_name(svg, "L0H0")) == 2  # one line per head panel: previous-token, induction
    # the same step and ICL value sit at the same height for the model and the control (step 0: both 0.0)
    model_dot = next(c for c in root.iter(f"{SVG}circle") if c.get("class") == "labelled")
    assert (dots[0].get("cx"), dots[0].get("cy")) == (model_dot.get("cx"), model_dot.get("cy"))
    assert "beside 1-layer control: run-1layer" in repr(view)
    assert "Dashed grey: 1-layer control: run-1layer (4 checkpoints)." in view.html()


def test_without_a_control_nothing_of_it_is_drawn():
    svg = probe.show_history(planted()).svg()
    assert by_name(svg, "control icl_score") == [] and 'class="control"' not in svg
    assert "1-layer control" not in svg


def test_a_control_of_other_steps_widens_the_axis():
    view = probe.show_history(planted(), control=control(steps=(0, 10)))
    assert view.control.steps.tolist() == [0, 10]
    wider = probe.show_history(planted().query("step <= 100"), control=control())
    root = ET.fromstring(wider.svg())
    model_x = [float(c.get("cx")) for c in root.iter(f"{SVG}circle") if c.get("class") == "labelled"][:3]
    control_x = [float(c.get("cx")) for c in root.iter(f"{SVG}circle") if c.get("class") == "control"]
    assert max(control_x) > max(model_x) + 50  # the control reaches step 1000, the model 100


def test_the_same_model_or_an_unfit_control_is_refused():
    with pytest.raises(ProbeError, match="^the control's history is of run, the model itself: give another "):
        probe.show_history(planted(), control=planted())
    with pytest.raises(ProbeError, match="the control's history holds 2 models"):
        probe.show_history(planted(), control=pd.concat([control("a"), control("b")]))
    shifted = control().assign(icl_early=50, icl_late=500)
    with pytest.raises(ProbeError, match=r"ICL score is at tokens \(50, 500\), the model's at \(12, 120\)"):
        probe.show_history(planted(), control=shifted)
    with pytest.raises(ProbeError, match="the control's history is not a history table"):
        probe.show_history(planted(), control=pd.DataFrame({"name": ["ada"]}))


def test_a_control_file_is_read_as_the_history_is(tmp_path):
    path = tmp_path / "control.csv"
    control().to_csv(path, index=False)
    view = probe.show_history(planted(), control=str(path))
    np.testing.assert_allclose(view.control.icl, [-0.01 * math.log10(s + 1) for s in STEPS])
    assert view.control.heads == ("L0H0", "L0H1")
    runs = probe.show_history(planted(str(tmp_path / "run")), control=control(str(tmp_path / "run-1layer")))
    page = runs.html()  # the runs by their folders' names, never by a path of this machine (issue 44)
    assert "1-layer control: run-1layer" in page and 'data-model="run"' in page and str(tmp_path) not in page


def test_copying_and_k_composition_have_their_own_panels():
    view = probe.show_history(measured())
    svg = view.svg()
    texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "copying score per head" in texts and "K-composition with the previous-token head" in texts
    said = titles(svg)
    assert "L1H0 at step-1000 (step 1,000): copying 0.700 · labelled induction" in said
    assert "L1H0 at step-100 (step 100): copying 0.400 · not labelled induction" in said
    assert "L1H0 at step-1000 (step 1,000): composition_prev_token 0.300 · labelled induction" in said
    # unknown before step 100 (no previous-token head yet): no dot, never 0
    assert not any(t.startswith("L1H0 at step-10 ") and "composition" in t for t in said)
    assert sum("composition_prev_token" in t for t in said) == 2 * 2  # layer 1's two heads at 100 and 1000
    assert len(by_name(svg, "L1H0")) == 4  # a line in each of the four head panels
    assert view.size[1] > probe.show_history(planted()).size[1]  # a third row
    assert svg.count("<svg") == 1 and f'height="{view.size[1]}"' in svg


def test_a_history_without_copying_keeps_four_panels_and_an_unknown_composition_says_so():
    svg = probe.show_history(planted()).svg()
    assert "copying score per head" not in svg
    copying_only = measured().assign(composition_prev_token=np.nan)
    svg = probe.show_history(copying_only).svg()
    assert "K-composition with the previous-token head" in svg
    assert "unknown at every checkpoint: no previous-token head labelled in an earlier layer" in svg
    assert not any("composition_prev_token" in t for t in titles(svg))


def test_the_report_draws_the_control_beside_its_history():
    from probe.views.report import report_html, write_report

    page = report_html("zoo:induction", seq_len=16, history=planted("zoo:induction"),
                       history_control=control("zoo:induction-1layer"))
    assert "<h2>Training history</h2>" in page and 'data-name="control icl_score"' in page
    assert "1-layer control: zoo:induction-1layer · step-0 (step 0)" in page
    with pytest.raises(ProbeError, match="the model itself"):
        report_html("zoo:induction", seq_len=16, history=planted("zoo:induction"),
                    history_control=planted("zoo:induction"))
    with pytest.raises(ProbeError, match="give history= too"):
        write_report("zoo:induction", "r.html", history_control=control())


def answer(argv: list[str]) -> str:
    """`probe ARGV` in a fresh interpreter: its exit code and the heavy modules it imported, then stderr."""
    code = ("import sys\nfrom probe.cli import main\ncode = main(sys.argv[1:])\n"
            "heavy = [m for m in ('torch', 'dash', 'pandas', 'transformers') if m in sys.modules]\n"
            "print(code, heavy)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    return done.stdout.strip() + "\n" + done.stderr


@pytest.mark.parametrize("argv, message", [
    (["report", "--model", "zoo:induction", "--history-control", "{table}", "--out", "{out}"],
     "--history-control is drawn beside a training history: give --history too"),
    (["report", "--model", "zoo:induction", "--history", "{table}", "--history-control", "/no/such.csv",
      "--out", "{out}"], "--history-control /no/such.csv"),
    (["report", "--model", "zoo:induction", "--history", "{table}", "--history-control", "{notes}",
      "--out", "{out}"], "extension"),
    (["app", "--history-control", "{table}"], "--history-control is drawn beside a training history"),
    (["app", "--history", "{table}", "--history-control", "/no/such.csv"],
     "--history-control /no/such.csv: give the .csv or .parquet table"),
])
def test_a_bad_history_control_flag_answers_before_heavy_imports(tmp_path, argv, message):
    table, notes = tmp_path / "history.csv", tmp_path / "notes.txt"
    planted().to_csv(table, index=False)
    notes.write_text("not a table")
    said = answer([part.format(table=table, notes=notes, out=tmp_path / "r.html") for part in argv])
    assert said.startswith("2 []"), said
    assert message in said
