"""A contact readout for any protein LM: ESM's recipe (L1 logistic regression on APC(sym α)) fitted on
structures, leave-one-structure-out, the top-k-head baseline, `probe contacts --fit / --regression`, and their
bad inputs."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from probe import models
from probe.cli import main
from probe.proteins import regression as fitting
from probe.proteins.contacts import predict_contacts
from probe.proteins.regression_file import read_regression
from probe.proteins.structure import contact_map, read_structure

SEQUENCE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAG"


def _synthetic(seed: int, length: int = 60, channels: tuple[int, int] = (2, 3), informative: int = 5):
    """A true map with contacts at random far pairs, and [layer head L L] maps where one channel is the true
    map plus noise (a planted contact head) and the others are symmetric noise."""
    rng = np.random.default_rng(seed)
    separation = np.abs(np.subtract.outer(np.arange(length), np.arange(length)))
    true_map = ((rng.random((length, length)) < 0.06) & (separation >= 6)).astype(np.int8)
    true_map = np.maximum(true_map, true_map.T)
    true_map[separation < 3] = 1  # local contacts, as in real maps (never fitted: separation < 6)
    maps = rng.normal(size=(*channels, length, length))
    maps = maps + maps.transpose(0, 1, 3, 2)
    layer, head = divmod(informative, channels[1])
    maps[layer, head] += 4.0 * true_map
    sequence = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=length))
    return maps.astype(np.float32), fitting.TrainingStructure(f"s{seed}", sequence, true_map)


def test_fold_of_the_standardisation_equals_sklearn_on_standardised_features():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    features = rng.normal(loc=0.3, scale=0.02, size=(400, 6))  # small raw scale, as APC values are
    labels = (features[:, 1] + 0.01 * rng.normal(size=400) > 0.31).astype(int)
    weight, bias = fitting.fit_logistic(features, labels, c=1.0)
    mean, scale = features.mean(0), features.std(0)
    reference = LogisticRegression(C=1.0, solver="liblinear", intercept_scaling=100.0, max_iter=1000,
                                   random_state=0, **fitting._l1()).fit((features - mean) / scale, labels)
    expected = reference.predict_proba((features - mean) / scale)[:, 1]
    ours = 1.0 / (1.0 + np.exp(-(bias + features @ weight)))
    np.testing.assert_allclose(ours, expected, atol=1e-12)
    assert np.argmax(np.abs(weight)) == 1


def test_planted_contact_channel_is_found_and_held_out_precision_is_high():
    data = [_synthetic(seed) for seed in range(3)]
    maps, structures = [m for m, _ in data], [s for _, s in data]
    fitted, evaluation = fitting.fit(maps, structures, "synthetic", k=2)
    assert np.unravel_index(np.argmax(np.abs(fitted.weight)), fitted.weight.shape) == (1, 2)  # channel 5
    assert fitted.top_heads[0] == (1, 2)
    assert set(evaluation["method"]) == {"regression", "top_heads"} and len(evaluation) == 6
    held = evaluation[evaluation["method"] == "regression"]
    assert (held["p_at_L5_long"] > 0.9).all() and (held["p_at_L_medium"] > 0.5).all()
    # a negative control: noise everywhere, nothing held out is found
    noise = [_synthetic(seed, informative=5) for seed in range(3)]
    for maps_, _ in noise:
        maps_[1, 2] = np.random.default_rng(9).normal(size=maps_[1, 2].shape)
    _, evaluation = fitting.fit([m for m, _ in noise], [s for _, s in noise], "noise", k=2)
    assert evaluation[evaluation["method"] == "regression"]["p_at_L5_long"].mean() < 0.5


def test_leave_one_out_never_sees_the_held_out_structure():
    data = [_synthetic(seed) for seed in range(3)]
    maps, structures = [m for m, _ in data], [s for _, s in data]
    table = fitting.leave_one_out(maps, structures, k=2)
    # the regression for s0 is the one fitted on s1 and s2 alone
    features = [fitting.pair_features(m, s.true_map) for m, s in zip(maps[1:], structures[1:], strict=True)]
    weight, bias = fitting.fit_logistic(np.concatenate([f[0] for f in features]),
                                        np.concatenate([f[1] for f in features]))
    expected = fitting._scores(fitting.predict_map(maps[0], weight, bias), structures[0].true_map)
    row = table[(table["id"] == "s0") & (table["method"] == "regression")].iloc[0]
    for column, value in expected.items():
        assert row[column] == pytest.approx(value)


def test_fitted_regression_streams_through_the_contact_sink(tiny_dir, structures_dir, tmp_path):
    loaded = models.load(str(tiny_dir("protbert")))
    files = [os.path.join(structures_dir, name) for name in ("1aki.pdb", "pdb1ejg.pdb", "pdb1ubi.pdb")]
    structures = fitting.training_structures(files, loaded)
    maps = [fitting.head_maps(loaded, s.sequence) for s in structures]
    fitted, _ = fitting.fit(maps, structures, loaded.name, c=10.0, evaluate=False)
    path = tmp_path / "r.json"
    fitted.save(path)
    again = read_regression(path)
    np.testing.assert_array_equal(again.weight, fitted.weight)
    assert again.bias == fitted.bias and again.structures == ("1aki_A", "pdb1ejg_A", "pdb1ubi_A")
    # a new sequence: the streamed prediction equals sigmoid(b + Σ w·APC(sym α)) from every head's dense map
    result = predict_contacts(loaded, SEQUENCE, regression=again.as_tuple())
    expected = fitting.predict_map(fitting.head_maps(loaded, SEQUENCE), again.weight, again.bias)
    assert result.contacts.shape == (len(SEQUENCE), len(SEQUENCE))
    assert 0.0 <= result.contacts.min() and result.contacts.max() <= 1.0
    assert np.abs(again.weight).sum() > 0 and expected.std() > 1e-4  # not a constant map
    np.testing.assert_allclose(result.contacts, expected, atol=1e-5)


def test_cli_fit_with_leave_one_out_then_predict_a_new_sequence(tiny_dir, structures_dir, tmp_path, capsys):
    model = str(tiny_dir("protbert"))
    target = tmp_path / "protbert.json"
    assert main(
        ["contacts", "--model", model, "--fit", str(structures_dir), "--regression", str(target)]) == 0
    captured = capsys.readouterr()
    assert "leave-one-out) regression:" in captured.out and "top-5-head average:" in captured.out
    data = json.loads(target.read_text())
    assert data["format"] == "probe-contact-regression" and len(data["evaluation"]) == 6
    assert np.asarray(data["weight"]).shape == (2, 4)
    assert {row["id"] for row in data["evaluation"]} == {"1aki_A", "pdb1ejg_A", "pdb1ubi_A"}
    out = tmp_path / "c.npz"
    assert main(["contacts", "--model", model, "--regression", str(target), "--sequence", SEQUENCE,
                 "--out", str(out)]) == 0
    with np.load(out) as npz:
        contacts = npz["contacts_0"]
    assert contacts.shape == (len(SEQUENCE), len(SEQUENCE)) and 0 <= contacts.min() and contacts.max() <= 1
    # with a structure, the per-head table and the regression's precision together
    ubiquitin = os.path.join(structures_dir, "pdb1ubi.pdb")
    assert main(["contacts", "--model", model, "--regression", str(target), "--structure", ubiquitin,
                 "--out", str(tmp_path / "u.npz")]) == 0
    with np.load(tmp_path / "u.npz") as npz:
        assert "precision_0" in npz and npz["contacts_0"].shape == (76, 76)
    # the default place: beside the first output
    assert main(
        ["contacts", "--model", model, "--fit", str(structures_dir), "--out", str(tmp_path / "x.npz")]) == 0
    assert (tmp_path / f"{os.path.basename(model)}.contact_regression.json").is_file()
    truth = contact_map(read_structure(ubiquitin))
    assert truth.shape == (76, 76)


@pytest.fixture()
def fitted_file(tiny_dir, structures_dir, tmp_path):
    target = tmp_path / "fitted.json"
    assert main(["contacts", "--model", str(tiny_dir("protbert")), "--fit", str(structures_dir),
                 "--regression", str(target)]) == 0
    return target


def _one_line_error(capsys, argv, message):
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1 and "Traceback" not in error


@pytest.mark.parametrize(("extra", "message"), [
    (["--fit", "/nonexistent/set"], "--fit /nonexistent/set does not exist"),
    (["--fit", "ONE"], "leave-one-structure-out needs at least two"),
    (["--fit", "DATA", "--sequence", "MKT"], "--fit fits and saves a regression"),
    (["--fit", "DATA", "--regression", "r.txt"], "--regression r.txt: the extension must be one of .json"),
    (["--regression", "/nonexistent/r.json", "--sequence", "MKT"],
     "does not exist: fit one with probe contacts"),
    (["--regression", "GARBAGE", "--sequence", "MKT"], "is not a contact regression file"),
    (["--regression", "FOREIGN", "--sequence", "MKT"], "is not a contact regression file written by"),
    (["--regression", "DAMAGED", "--sequence", "MKT"], "is damaged"),
    (["--min-total", "nan", "--sequence", "MKT"], "--min-total nan must be a finite sum"),
    (["--min-total", "-1", "--sequence", "MKT"], "--min-total -1.0 must be a finite sum"),
])
def test_bad_inputs_are_one_line_errors(tiny_dir, structures_dir, tmp_path, capsys, extra, message):
    garbage, foreign, damaged = (tmp_path / "garbage.json", tmp_path / "foreign.json",
                                 tmp_path / "damaged.json")
    garbage.write_bytes(b"\x00\x01 not json")
    foreign.write_text(json.dumps({"hello": 1}))
    damaged.write_text(json.dumps({"format": "probe-contact-regression", "weight": "x", "bias": 0}))
    replace = {"DATA": str(structures_dir), "ONE": os.path.join(structures_dir, "pdb1ubi.pdb"),
               "GARBAGE": str(garbage), "FOREIGN": str(foreign), "DAMAGED": str(damaged)}
    os.chdir(tmp_path)
    _one_line_error(capsys, ["contacts", "--model", str(tiny_dir("protbert")),
                             *[replace.get(item, item) for item in extra]], message)


def test_a_regression_of_another_model_is_refused(tiny_dir, fitted_file, capsys):
    esm = str(tiny_dir("esm", seed=3, num_hidden_layers=3))  # 3 × 4 heads, the regression is for 2 × 4
    _one_line_error(capsys,
                    ["contacts", "--model", esm, "--regression", str(fitted_file), "--sequence", "MKTAYIAK"],
                    "fit one for this model with --fit")
    # the same shape (2 × 4) but other weights: refused by the revision recorded at --fit
    same_shape = str(tiny_dir("protbert", seed=5))
    _one_line_error(capsys, ["contacts", "--model", same_shape, "--regression", str(fitted_file),
                             "--sequence", "MKTAYIAK"], "not for")
    assert json.loads(fitted_file.read_text())["revision"] == models.load(str(tiny_dir("protbert"))).revision
    # a shape mismatch without a recorded revision is still caught
    data = json.loads(fitted_file.read_text())
    data["revision"] = ""
    fitted_file.write_text(json.dumps(data))
    _one_line_error(capsys,
                    ["contacts", "--model", esm, "--regression", str(fitted_file), "--sequence", "MKTAYIAK"],
                    "fitted for 2 layers × 4 heads")


def test_fit_refuses_to_overwrite_a_foreign_file(tiny_dir, structures_dir, tmp_path, capsys):
    foreign = tmp_path / "mine.json"
    foreign.write_text(json.dumps({"someone": "else"}))
    _one_line_error(capsys, ["contacts", "--model", str(tiny_dir("protbert")), "--fit", str(structures_dir),
                             "--regression", str(foreign)], "exists but is not a contact regression")
    assert json.loads(foreign.read_text()) == {"someone": "else"}


_VALID = {"format": "probe-contact-regression", "version": 1, "model": "tiny", "revision": "", "bias": -1.0,
          "weight": [[0.5, 0.0, 0.0, 0.25], [0.0, 0.0, 1.0, 0.0]], "c": 0.15, "structures": ["a_A", "b_A"],
          "top_heads": [[1, 2], [0, 0]],
          "evaluation": [{"id": "a_A", "method": "regression", "p_at_L_long": None}]}


@pytest.mark.parametrize(("change", "message"), [
    ({"c": "abc"}, 'is damaged: "c" must be a positive number (it is "abc")'),
    ({"c": -1}, '"c" must be a positive number'),
    ({"structures": 5}, '"structures" must be a list of structure ids (it is 5)'),
    ({"top_heads": [1, 2]}, '"top_heads" must be a list of [layer, head] pairs inside the 2 × 4 weights'),
    ({"top_heads": [[2, 0]]}, '"top_heads" must be a list of [layer, head] pairs inside the 2 × 4 weights'),
    ({"weight": [[0.5, 0.0], [1.0]]}, '"weight" must be a [layer, head] table'),
    ({"weight": [["0.5", 0.0], [1.0, 0.0]]}, '"weight" must hold finite numbers only (it holds "0.5")'),
    ({"weight": [[True, 0.0], [1.0, 0.0]]}, '"weight" must hold finite numbers only (it holds true)'),
    ({"bias": None}, '"bias" must be a finite number (it is null)'),
    ({"model": 3}, '"model" must be a string'),
    ({"version": 2}, '"version" must be 1'),
    ({"evaluation": {"id": 1}}, '"evaluation" must be a list of rows'),
    ({"colour": "red"}, 'unknown key "colour"'),
])
def test_a_regression_file_is_checked_against_its_schema(tmp_path, capsys, change, message):
    """Each key of a hand-made or damaged file: one line naming it, exit 2, before the model is loaded (the
    model named here does not exist, so reaching it would be another error)."""
    path = tmp_path / "regression.json"
    path.write_text(json.dumps(_VALID), encoding="utf-8")
    assert read_regression(path).top_heads == ((1, 2), (0, 0))  # the unchanged file is valid
    path.write_text(json.dumps({**_VALID, **change}), encoding="utf-8")
    _one_line_error(capsys, ["contacts", "--model", "zoo:esm-random", "--regression", str(path),
                             "--sequence", "MKT"], message)


def test_deeply_nested_json_and_a_folder_are_one_line_errors(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "probe-contact-regression", "weight": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _one_line_error(capsys, ["contacts", "--model", "zoo:esm-random", "--regression", str(deep),
                             "--sequence", "MKT"], "its JSON is nested too deeply")
    folder = tmp_path / "a-folder.json"
    folder.mkdir()
    _one_line_error(capsys, ["contacts", "--model", "zoo:esm-random", "--regression", str(folder),
                             "--sequence", "MKT"], f"--regression {folder} is a folder: give the .json file")
