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


# ------------------------------------------------------------------------------------------------------------
# Issue 55: outputs it did not write, encoder-decoder models, what is printed
# ------------------------------------------------------------------------------------------------------------


def test_circuit_refuses_a_users_file_unless_force_and_replaces_its_own(tmp_path, capsys):
    """--out, --composition and --html that probe did not write are refused in one line (exit 2, bytes
    unchanged) unless --force; the files a circuit run wrote are its own (the same check passes them)."""
    import argparse

    from probe.commands.circuit import check_outputs
    from probe.views.pages import GENERATOR

    mine = {"--out": tmp_path / "c.csv", "--composition": tmp_path / "p.parquet",
            "--html": tmp_path / "c.html"}
    mine["--out"].write_text("name,age\nada,36\n")
    mine["--composition"].write_bytes(b"not parquet at all\n")
    mine["--html"].write_text("<!doctype html><title>my page</title>\n")
    for flag, path in mine.items():
        before = path.read_bytes()
        capsys.readouterr()
        assert main(["circuit", "--model", "zoo:induction", "--type", "induction", flag, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{flag} {path} exists and is not a" in err and "--force" in err, err
        assert path.read_bytes() == before
    args = argparse.Namespace(out=str(mine["--out"]), composition=str(mine["--composition"]),
                              html=str(mine["--html"]), force=True, task=None)
    assert check_outputs(args) == (mine["--out"], mine["--composition"], mine["--html"])  # --force: allowed
    # what probe circuit writes is its own: the same check lets a rerun replace it
    pd.DataFrame({"sender": ["L0H1"], "receiver": ["L1H0"], "mode": ["K"], "in_circuit": [True]}).to_csv(
        mine["--out"], index=False)
    pd.DataFrame({"sender": ["L0H1"], "receiver": ["L1H0"], "sender_layer": [0], "receiver_layer": [1],
                  "mode": ["K"]}).to_parquet(mine["--composition"])
    mine["--html"].write_text(f"<!doctype html><head>{GENERATOR}</head>\n")
    assert check_outputs(argparse.Namespace(**{**vars(args), "force": False})) == tuple(mine.values())


def test_circuit_refuses_a_sequence_to_sequence_model_before_loading_it(tmp_path, monkeypatch, capsys):
    """From config.json's is_encoder_decoder: one line, and the weights are never loaded (before: 3 lines
    after the model loaded and its heads were labelled). A decoder-only model passes the same check."""
    from probe import models
    from probe.commands.circuit import refuse_seq2seq
    from tests.tiny_archs import save

    def never(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(models, "load", never)
    t5 = save("t5", tmp_path / "t5")
    assert main(["circuit", "--model", str(t5), "--type", "induction"]) == 2
    err = capsys.readouterr().err
    assert err == (f"probe circuit: error: {t5} is a sequence-to-sequence model (encoder and decoder "
                   "stacks): a circuit is found in one stack of heads; give a decoder-only or encoder-only "
                   "model\n")
    refuse_seq2seq("zoo:induction")  # the control: a decoder-only model is not refused


def test_circuit_prints_a_readable_table_and_an_empirical_p_from_few_controls(capsys):
    """Without --out: the findings (stderr), then a table to read on stdout — rounded, the circuit's edges
    first — never the raw CSV with 17-digit floats. With 3 random pairs the patching effect is said as an
    empirical p (above all 3: p ≤ 1/4), not as a z (before: "z 1852.9")."""
    import re

    assert main(["circuit", "--model", "zoo:induction", "--type", "induction", "--examples", "4",
                 "--controls", "3"]) == 0
    captured = capsys.readouterr()
    finding = next(line for line in captured.err.splitlines() if "L0H1 → L1H0 L1H1 L1H2 L1H3" in line)
    assert "above every random pair of 3, p ≤ 1/4" in finding and "nats (z" not in finding
    lines = captured.out.splitlines()
    assert lines[0].split() == ["sender", "receiver", "mode", "composition", "z", "effect_nats", "circuit"]
    assert lines[1].split()[0] == "L0H1" and lines[1].split()[-1] == "True"
    assert not re.search(r"\d\.\d{4,}", captured.out) and "," not in captured.out  # rounded, not CSV
    assert "-0.0 " not in captured.out and " -0 " not in captured.out


def test_against_controls_says_z_only_from_enough_controls():
    from probe.circuits.circuit import MIN_Z_CONTROLS, against_controls

    assert against_controls(1852.9, 3) == "above every random pair of 3, p ≤ 1/4"
    assert against_controls(4.25, MIN_Z_CONTROLS) == (f"z 4.2, above every random pair of {MIN_Z_CONTROLS}, "
                                                      f"p ≤ 1/{MIN_Z_CONTROLS + 1}")
    assert against_controls(-0.04, 40).startswith("z 0.0,")  # never "z -0.0"
