"""`probe circuit`: bad input answers in one line before torch is imported; on zoo:induction it prints the
finding, writes every candidate edge, the scored pairs and the offline graph; `probe label --circuits` fills
the fed_by columns and the default label run has none."""

from __future__ import annotations

from dataclasses import fields

import pandas as pd
import pytest

from probe.cli import main
from tests.commands.test_cli_fast import heavy_after


@pytest.mark.parametrize("argv, message", [
    (["circuit", "--help"], ""),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--modes", "Q,X"], "--modes Q,X"),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--top-k", "-1"], "--top-k"),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--controls", "1"], "--controls"),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--labels", "/no/such.csv"],
     "--labels /no/such.csv"),
    (["circuit", "--model", "zoo:induction", "--type", "induction", "--html", "x.png"], "extension"),
    (["circuit", "--model", "zoo:induction", "--type", "nonsense"], "invalid choice"),
])
def test_bad_input_answers_without_torch(argv, message):
    found = heavy_after(f"from probe.cli import main\ncode = main({argv!r})")
    assert found["heavy"] == [], f"probe {' '.join(argv)} imported {found['heavy']}"
    assert message in found["err"]


def test_defaults_equal_the_library():
    from probe.circuits import CircuitConfig
    from probe.commands import circuit

    defaults = {field.name: field.default for field in fields(CircuitConfig)}
    assert {key: defaults[key] for key in circuit.DEFAULTS} == circuit.DEFAULTS
    assert circuit.MODES == CircuitConfig().modes


def test_circuit_on_the_induction_organism(tmp_path, capsys):
    out, pairs, page = tmp_path / "edges.csv", tmp_path / "pairs.parquet", tmp_path / "circuit.html"
    code = main(["circuit", "--model", "zoo:induction", "--type", "induction", "--examples", "8", "--out",
                 str(out), "--composition", str(pairs), "--html", str(page)])
    assert code == 0
    err = capsys.readouterr().err
    assert "zoo:induction · induction: L0H1 → L1H0 L1H1 L1H2 L1H3 by K-composition" in err
    edges = pd.read_csv(out)
    found = edges[edges["in_circuit"]]
    assert set(found.loc[found["sender"] == "L0H1", "receiver"]) == {"L1H0", "L1H1", "L1H2", "L1H3"}
    assert set(edges["model"]) == {"zoo:induction"} and set(edges["head_type"]) == {"induction"}
    assert len(pd.read_parquet(pairs)) == 4 * 4 * 3  # into the 4 induction heads, 3 modes
    html = page.read_text()
    assert "data-probe-circuit" in html and "mountCircuit" in html
    assert 'src="http' not in html and 'href="http' not in html  # the browser test opens it offline


def test_label_circuits_fills_fed_by_and_the_default_run_does_not(tmp_path):
    with_circuits, plain = tmp_path / "with.csv", tmp_path / "plain.csv"
    argv = ["label", "--model", "zoo:induction", "--types", "previous_token,induction", "--examples", "8",
            "--bootstrap", "100", "--ablate", "none"]
    assert main([*argv, "--out", str(plain)]) == 0
    assert main([*argv, "--circuits", "--out", str(with_circuits)]) == 0
    table = pd.read_csv(with_circuits)
    induction = table[(table["head_type"] == "induction") & table["label"]]
    assert set(induction["head_name"]) == {"L1H0", "L1H1", "L1H2", "L1H3"}
    assert set(induction["fed_by"]) == {"L0H1"} and set(induction["fed_by_mode"]) == {"K"}
    assert pd.read_csv(plain)["fed_by"].isna().all()


def test_report_circuit_adds_the_graph_section(tmp_path):
    """`probe report --circuit TYPE` on a zoo model: its shipped label table, one circuit section with the
    graph's data (the browser test opens such a report offline)."""
    out = tmp_path / "report.html"
    assert main(["report", "--model", "zoo:induction", "--circuit", "induction", "--seq-len", "32", "--out",
                 str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<h2>Circuit · induction</h2>" in html and html.count('data-probe-circuit="') == 1
    assert '"sender":"L0H1"' in html and '"head_type":"induction"' in html
    heavy = heavy_after("from probe.cli import main\ncode = main(['report', '--model', 'zoo:induction', "
                        "'--circuit', 'nonsense', '--out', 'x.html'])")
    assert heavy["heavy"] == [] and "invalid choice" in heavy["err"]
