"""Models placed by transformers' own device_map (accelerate offload): a tiny GPT-2 with one layer on "disk"
labels to the same table as in memory; the placement flags are checked before anything loads."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.engine import capture_attention
from probe.errors import ProbeError
from probe.heads.label import LabelConfig, label_model

# GPT-2's modules with layer 1 on disk (its weights live in the offload folder, on the meta device until used)
DISK_MAP = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.drop": "cpu",
            "transformer.h.0": "cpu", "transformer.h.1": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}
CONFIG = dict(types=("previous_token", "induction"), examples=8, seq_len=16, n_bootstrap=50,
              ablation_examples=4, ablation_controls=2)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    from probe.zoo.tiny import save_tiny

    return str(save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-offload")))


@pytest.fixture(scope="module")
def offloaded(gpt2_dir, tmp_path_factory):
    loaded = models.load(gpt2_dir, device_map=DISK_MAP, offload_folder=tmp_path_factory.mktemp("offload"))
    assert loaded.model.hf_device_map["transformer.h.1"] == "disk"
    assert loaded.model.transformer.h[1].attn.c_attn.weight.device.type == "meta"  # really offloaded
    return loaded


def test_alpha_equals_the_in_memory_model(gpt2_dir, offloaded):
    memory = models.load(gpt2_dir)
    inputs = models.tokenize_text(memory, "the cat saw the dog and the dog saw the cat")
    assert torch.equal(capture_attention(memory.model, inputs), capture_attention(offloaded.model, inputs))
    assert offloaded.device == torch.device("cpu")


def _compare(memory_table, offloaded_table):
    assert list(memory_table["head_name"]) == list(offloaded_table["head_name"])
    numeric = [c for c in memory_table.columns if memory_table[c].dtype.kind == "f"]
    for column in numeric:
        a, b = memory_table[column].to_numpy(), offloaded_table[column].to_numpy()
        assert ((abs(a - b) <= 1e-5) | (a != a) & (b != b)).all(), column
    assert list(memory_table["label"]) == list(offloaded_table["label"])


def test_label_table_equals_the_in_memory_one_without_output_norms(gpt2_dir, offloaded):
    config = LabelConfig(**CONFIG, output_share=False)
    _compare(label_model(models.load(gpt2_dir), config), label_model(offloaded, config))


def test_label_table_equals_the_in_memory_one_with_output_norms(gpt2_dir, offloaded):
    config = LabelConfig(**CONFIG)
    # the output norms read o_proj's weight, on the meta device under disk offload until accelerate's hook
    # loads it: the engine reads it through the hook (issue 31 item 1), so no "Cannot copy out of meta tensor"
    _compare(label_model(models.load(gpt2_dir), config), label_model(offloaded, config))


@pytest.mark.parametrize("keywords, message", [
    (dict(device_map="everywhere"), "unknown --device-map"),
    (dict(offload_folder="x"), "need --device-map"),
    (dict(device_map=DISK_MAP), "--offload-folder"),
    (dict(device_map="auto", max_memory="0:10GiB"), "DEVICE=AMOUNT"),
    (dict(device_map="auto", max_memory="cpu=lots"), "10GiB"),
])
def test_bad_placement_is_one_line(gpt2_dir, keywords, message):
    with pytest.raises(ProbeError, match=message):
        models.load(gpt2_dir, **keywords)


def test_max_memory_text_form():
    assert models.parse_max_memory("0=10GiB, cpu=30GiB") == {0: "10GiB", "cpu": "30GiB"}


def test_the_cli_takes_the_placement_flags(gpt2_dir, tmp_path):
    import numpy as np

    from probe.cli import main

    out = tmp_path / "a.npz"
    code = main(["capture", "--model", gpt2_dir, "--device-map", "cpu", "--text", "the cat saw the dog",
                 "--out", str(out)])
    assert code == 0
    memory = models.load(gpt2_dir)
    expected = capture_attention(memory.model, models.tokenize_text(memory, "the cat saw the dog"))[0]
    assert np.allclose(np.load(out)["attention"], expected.numpy(), atol=1e-6)


# Issue 58: the untrained twins of a device-mapped model are placed like it (the default control runs)
AUTO = ["--device-map", "auto", "--max-memory", "cpu=100KB"]  # tiny GPT-2: its layers and ln_f go to disk


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every weight's values, read through accelerate's hooks where a module is on disk."""
    from accelerate.utils import named_module_tensors

    found = {}
    for prefix, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        weights = getattr(hook, "weights_map", None) if getattr(hook, "offload", False) else None
        for name, tensor in named_module_tensors(module, recurse=False):
            key = f"{prefix}.{name}" if prefix else name
            value = weights[name] if weights is not None and tensor.is_meta else tensor
            found[key] = value.detach().clone()
    return found


def test_a_device_mapped_twin_equals_the_in_memory_twin_and_cleans_up(gpt2_dir, offloaded):
    import gc
    from pathlib import Path

    from probe.untrained import untrained_twin

    memory = untrained_twin(models.load(gpt2_dir), 10_001)
    placed = untrained_twin(offloaded, 10_001)
    assert placed.model.hf_device_map == offloaded.model.hf_device_map
    disk_weight = placed.model.transformer.h[1].attn.c_attn.weight
    assert disk_weight.is_meta  # really on disk, in the twin's own folder
    folder = Path(placed.model.transformer.h[1].attn.c_attn._hf_hook.weights_map.dataset.save_folder)
    assert folder.is_dir() and folder.name.startswith("untrained-twin-10001-")
    mine, theirs = _state(memory.model), _state(placed.model)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    inputs = models.tokenize_text(offloaded, "the cat saw the dog and the dog saw the cat")
    with torch.no_grad():
        assert torch.equal(memory.model(**inputs).logits, placed.model(**inputs).logits)
        # and not the trained model: a twin, not a copy
        assert not torch.allclose(offloaded.model(**inputs).logits, placed.model(**inputs).logits)
    del placed, disk_weight
    gc.collect()
    assert not folder.exists()  # the twin's weights on disk go with it


def test_label_with_twins_on_an_explicit_device_map_equals_the_in_memory_run(gpt2_dir, offloaded):
    config = LabelConfig(**CONFIG, twins=2, output_share=False)
    notes: list[str] = []
    table = label_model(offloaded, config, note=notes.append)
    _compare(label_model(models.load(gpt2_dir), config), table)
    assert table["untrained_p99"].notna().all()  # the twins ran: their bar is in every row
    assert "controls: untrained twins 2 of 2, offloaded like the model (1 of 7 modules on disk)" in notes


def test_cli_label_on_an_auto_device_map_runs_the_default_control(gpt2_dir, tmp_path, capsys):
    import pandas as pd

    from probe.cli import main

    flags = ["label", "--model", gpt2_dir, "--types", "previous_token", "--examples", "8", "--seq-len", "16",
             "--bootstrap", "50", "--ablate", "none"]
    assert main([*flags, "--out", str(tmp_path / "memory.csv")]) == 0
    capsys.readouterr()
    placed = [*AUTO, "--offload-folder", str(tmp_path / "offload")]
    code = main([*flags, *placed, "--out", str(tmp_path / "a.csv")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "controls: untrained twins 3 of 3, offloaded like the model" in err
    memory, placed = pd.read_csv(tmp_path / "memory.csv"), pd.read_csv(tmp_path / "a.csv")
    assert memory["untrained_p99"].notna().all() and placed["untrained_p99"].notna().all()
    assert list(memory["label"]) == list(placed["label"])
    assert (memory["untrained_p99"] - placed["untrained_p99"]).abs().max() <= 1e-5
    assert sorted(p.name for p in (tmp_path / "offload").iterdir() if p.name.startswith("untrained")) == []
