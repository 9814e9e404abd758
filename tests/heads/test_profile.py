"""Head profiles: the streamed statistics equal a dense computation from eager attention (N = 512),
hand-computed values on planted patterns, the local/retrieval split with a positive and a negative control,
and `probe profile`'s bad inputs (one line, exit 2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from probe import models
from probe.cli import main
from probe.heads.profile import ProfileConfig, head_profiles, random_inputs, sample_rows
from probe.heads.profile_sink import ROW_STATS, RowWindows, row_statistics
from probe.runs.atomic import is_temporary

TOL = 1e-5


def eager_attention(model, input_ids) -> torch.Tensor:
    """[layer head query key] float64 from eager output_attentions."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(out.attentions, dim=1)[0].double()


def dense_row_stats(alpha: np.ndarray, rows: np.ndarray, sink: int, window: int, max_offset: int) -> dict:
    """The definitions written out on a dense [head query key] array, row by row: {stat: [head]} means over
    `rows`, and the per-offset mean α [head offset] (offsets −max_offset .. max_offset)."""
    n_heads, _, n_key = alpha.shape
    keys = np.arange(n_key)
    out = {name: np.zeros(n_heads) for name in ROW_STATS}
    offsets = np.zeros((n_heads, 2 * max_offset + 1))
    for h in range(n_heads):
        for i in rows:
            a = alpha[h, i]
            distance = np.abs(i - keys)
            order = np.argsort(distance, kind="stable")
            cumulative = np.cumsum(a[order])
            median = distance[order][np.searchsorted(cumulative, 0.5 * a.sum())]
            positive = a[a > 0]
            streaming = a[(keys < sink) | (distance < window)].sum()
            values = {
                "mean_distance": (a * distance).sum(), "median_distance": median,
                "entropy": -(positive * np.log(positive)).sum(), "sink_mass": a[:sink].sum(),
                "local_mass": a[distance < window].sum(), "streaming_mass": streaming,
                "beyond_mass": a.sum() - streaming, "max_alpha": a.max(),
            }
            for name, value in values.items():
                out[name][h] += value / len(rows)
            for m, offset in enumerate(range(-max_offset, max_offset + 1)):
                if 0 <= i - offset < n_key:
                    offsets[h, m] += a[i - offset] / len(rows)
    return out, offsets


def dense_profile(loaded, inputs, config: ProfileConfig, rows_of) -> dict:
    """Means over inputs of the dense per-input statistics: {stat: [layer head]}, plus dominant offset and
    share."""
    per_input, offsets = [], []
    for index, ids in enumerate(inputs):
        alpha = eager_attention(loaded.model, ids).numpy()  # [layer head query key]
        rows = rows_of(index, ids.shape[1])
        layers = [dense_row_stats(alpha[layer], rows, config.sink_tokens, config.window, config.max_offset)
                  for layer in range(alpha.shape[0])]
        per_input.append({name: np.stack([stats[name] for stats, _ in layers]) for name in ROW_STATS})
        offsets.append(np.stack([offset for _, offset in layers]))  # [layer head offset]
    result = {name: np.mean([values[name] for values in per_input], axis=0) for name in ROW_STATS}
    offsets = np.stack(offsets)  # [input layer head offset]
    dominant = offsets.mean(0).argmax(-1)  # [layer head]
    result["dominant_offset"] = dominant - config.max_offset
    result["dominant_offset_share"] = np.take_along_axis(offsets.mean(0), dominant[..., None], -1)[..., 0]
    return result


def assert_table_equals(table: pd.DataFrame, expected: dict, n_layers: int, n_heads: int) -> None:
    for name, values in expected.items():
        ours = table[name].to_numpy().reshape(n_layers, n_heads)
        if name == "median_distance":  # integers averaged over rows: must agree row for row
            assert np.abs(ours - values).max() <= TOL, name
        elif name.endswith("distance"):  # distances run to ~N: float32 α gives a relative 1e-5
            assert (np.abs(ours - values) / np.maximum(1.0, np.abs(values))).max() <= TOL, name
        else:
            assert np.abs(ours - values).max() <= TOL, name


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
def test_profile_equals_dense_eager_at_512(tiny_dir, arch):
    """Every row (query_rows ≥ N): the streamed statistics equal the dense definitions on eager attention."""
    positions = {"gpt2": {"n_positions": 512}, "llama": {"max_position_embeddings": 512},
                 "bert": {"max_position_embeddings": 512}}[arch]
    loaded = models.load(str(tiny_dir(arch, sharpness=3.0, **positions)))
    config = ProfileConfig(seq_len=512, window=16, max_offset=8, n_bootstrap=50)
    inputs = random_inputs(loaded, 2, 512, seed=1)
    table = head_profiles(loaded, inputs, config)
    assert len(table) == loaded.n_layers * loaded.n_heads and (table["rows_per_input"] == 512).all()
    expected = dense_profile(loaded, inputs, config, lambda index, n: np.arange(n))
    assert_table_equals(table, expected, loaded.n_layers, loaded.n_heads)
    assert (table["mean_distance_ci_low"] <= table["mean_distance"] + TOL).all()
    assert (table["mean_distance"] <= table["mean_distance_ci_high"] + TOL).all()


def test_sampled_rows_equal_dense_on_the_same_rows(tiny_dir):
    """query_rows < N: exact means over the sampled rows (the rows head_profiles draws, reproduced here)."""
    loaded = models.load(str(tiny_dir("llama", sharpness=3.0, max_position_embeddings=512)))
    config = ProfileConfig(seq_len=300, query_rows=40, window=16, max_offset=8, n_bootstrap=50, seed=3)
    inputs = random_inputs(loaded, 2, 300, seed=3)
    table = head_profiles(loaded, inputs, config)
    assert (table["rows_per_input"] == 40).all()
    generator = torch.Generator().manual_seed(config.seed)
    drawn = [sample_rows(300, 40, generator).numpy() for _ in inputs]
    assert all(len(rows) == 40 and len(set(rows // 7.5)) > 30 for rows in drawn)  # spread over the positions
    expected = dense_profile(loaded, inputs, config, lambda index, n: drawn[index])
    assert_table_equals(table, expected, loaded.n_layers, loaded.n_heads)


def test_planted_previous_token_and_uniform_rows():
    """Hand-computed values: a previous-token head and a uniform causal head on 10 positions."""
    n = 10
    previous = torch.zeros(n, n)
    previous[0, 0] = 1.0
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    uniform = torch.tril(torch.ones(n, n))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    alpha = torch.stack([previous, uniform])[None]  # [batch head query key]
    stats, offsets = row_statistics(alpha, torch.arange(n), RowWindows(sink_tokens=1, window=3, max_offset=2))
    assert stats["mean_distance"][0, 0].tolist() == [0.0] + [1.0] * (n - 1)
    assert stats["median_distance"][0, 0].tolist() == [0.0] + [1.0] * (n - 1)
    assert stats["entropy"][0, 0].abs().max() == 0
    assert stats["max_alpha"][0, 0].tolist() == [1.0] * n
    assert offsets[0, 0, :, 3].tolist() == [0.0] + [1.0] * (n - 1)  # offset +1 (m = 1 + max_offset)
    # uniform over keys 0..i: mean distance i/2, lower weighted median ⌊i/2⌋... counted from the query
    i = torch.arange(n, dtype=torch.float64)
    assert torch.allclose(stats["mean_distance"][0, 1], i / 2)
    expected_median = [min(d for d in range(k + 1) if (d + 1) / (k + 1) >= 0.5) for k in range(n)]
    assert stats["median_distance"][0, 1].tolist() == expected_median
    assert torch.allclose(stats["entropy"][0, 1], torch.log(i + 1))
    assert torch.allclose(stats["sink_mass"][0, 1], 1 / (i + 1))
    local = torch.minimum(i + 1, torch.tensor(3.0)) / (i + 1)
    assert torch.allclose(stats["local_mass"][0, 1], local)
    streaming = torch.where(i < 3, 1.0, 4 / (i + 1))  # keys 0 and i−2..i
    assert torch.allclose(stats["streaming_mass"][0, 1], streaming.double())
    assert torch.allclose(stats["beyond_mass"][0, 1], 1 - streaming.double())


def test_local_and_retrieval_split_positive_and_negative_control(tiny_dir):
    """A model whose heads attend only within 8 tokens (Mistral sliding window 8) is all 'local'; the same
    architecture without the window (Llama, near-uniform causal attention over 256 tokens) is all
    'retrieval'."""
    windowed = models.load(str(tiny_dir("mistral", max_position_embeddings=512)))  # sliding_window = 8
    full = models.load(str(tiny_dir("llama", max_position_embeddings=512)))
    config = ProfileConfig(seq_len=256, sink_tokens=0, window=8, max_offset=4, threshold=0.9, n_bootstrap=20)
    local = head_profiles(windowed, random_inputs(windowed, 2, 256), config)
    assert (local["span"] == "local").all() and (local["local_mass"] > 1 - TOL).all()
    assert (local["median_distance"] < 8).all()
    wide = head_profiles(full, random_inputs(full, 2, 256), config)
    assert (wide["span"] == "retrieval").all() and (wide["beyond_mass"] > 0.5).all()
    assert (wide["mean_distance"] > 50).all()


def test_profile_cli_writes_a_table(tiny_dir, tmp_path):
    model = tiny_dir("llama", max_position_embeddings=512)
    text = tmp_path / "text.txt"
    text.write_text(" ".join(["the cat saw the dog and it was one two three"] * 40))
    out = tmp_path / "profile.parquet"
    assert main(["profile", "--model", str(model), "--text-file", str(text), "--seq-len", "128", "--window",
                 "16", "--bootstrap", "20", "--out", str(out)]) == 0
    table = pd.read_parquet(out)
    assert len(table) == 8 and table["n_inputs"].iloc[0] == 3  # 440 tokens: three full windows of 127 + <bos>
    assert set(table["span"]) <= {"local", "retrieval"}
    # written atomically: no temporary left (the journal folder .profile.parquet.parts/ is the runner's)
    assert not [path for path in tmp_path.glob(".profile.parquet.*") if path.name != ".profile.parquet.parts"]
    assert not [path for path in tmp_path.rglob("*") if is_temporary(path)]


@pytest.mark.parametrize("extra, message", [
    ([], "one of the arguments --text-file --random is required"),
    (["--random", "0"], "--random 0"),
    (["--random", "1", "--seq-len", "0"], "--seq-len 0"),
    (["--random", "1", "--seq-len", "99999"], "takes at most"),
    (["--random", "1", "--threshold", "1.5"], "--threshold"),
    (["--random", "1", "--query-rows", "0"], "--query-rows"),
    (["--random", "1", "--window", "-1"], "--window"),
    (["--text-file", "/nonexistent/text.txt"], "is not a file"),
    (["--random", "1", "--out", "profile.txt"], "extension"),
    (["--random", "x"], "invalid int value"),
])
def test_bad_inputs_are_one_line_exit_2(tiny_dir, tmp_path, capsys, extra, message):
    args = ["profile", "--model", str(tiny_dir("llama")), *extra]
    if "--out" not in extra:
        args += ["--out", str(tmp_path / "p.csv")]
    else:
        args[args.index("profile.txt")] = str(tmp_path / "profile.txt")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_text_file_that_is_not_text_is_exit_2(tiny_dir, tmp_path, capsys):
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    assert main(["profile", "--model", str(tiny_dir("llama")), "--text-file", str(binary),
                 "--out", str(tmp_path / "p.csv")]) == 2
    assert "UTF-8" in capsys.readouterr().err
