"""benchmarks/big.py (issue 31): the checkpoint it writes shard by shard is one transformers reads back,
placed by `device_map="auto"` with its last layers on disk; the tiny shape runs end to end (slow: three
child processes)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open

from probe import models

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "big.py"


@pytest.fixture(scope="module")
def big():
    spec = importlib.util.spec_from_file_location("benchmark_big", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up there)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def checkpoint(big, tmp_path_factory):
    return big.write_checkpoint(big.SHAPES["tiny"], tmp_path_factory.mktemp("big") / "tiny")


def test_the_shards_hold_every_weight_once_and_are_reused(big, checkpoint):
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())["weight_map"]
    layers = big.SHAPES["tiny"].config["num_hidden_layers"]
    assert len(set(index.values())) == layers + 1  # embeddings + final norm, then one shard per layer
    assert "lm_head.weight" not in index  # tied to the embedding
    with safe_open(str(checkpoint / index["model.layers.1.self_attn.q_proj.weight"]), "pt") as shard:
        weight = shard.get_tensor("model.layers.1.self_attn.q_proj.weight")
        norm = shard.get_tensor("model.layers.1.input_layernorm.weight")
    assert weight.dtype == torch.bfloat16 and abs(float(weight.float().std()) - big.STD) < 0.002
    assert torch.equal(norm, torch.ones_like(norm))
    stamp = {file: (checkpoint / file).stat().st_mtime_ns for file in set(index.values())}
    big.write_checkpoint(big.SHAPES["tiny"], checkpoint)  # same shape: nothing rewritten
    assert stamp == {file: (checkpoint / file).stat().st_mtime_ns for file in stamp}


def test_a_changed_marker_rewrites_the_checkpoint(big, tmp_path):
    directory = big.write_checkpoint(big.SHAPES["tiny"], tmp_path / "tiny")
    marker = directory / "big.json"
    first = (directory / "model-00002-of-00005.safetensors").stat().st_mtime_ns
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "seed": 5}))
    big.write_checkpoint(big.SHAPES["tiny"], directory)
    assert (directory / "model-00002-of-00005.safetensors").stat().st_mtime_ns != first
    assert json.loads(marker.read_text())["seed"] == 0


def test_auto_placement_puts_the_last_layers_on_disk_with_the_written_weights(big, checkpoint, tmp_path):
    budget = big.budget_short_of_one_layer(big.SHAPES["tiny"], "bfloat16")
    loaded = models.load(str(checkpoint), dtype="bfloat16", device_map="auto", offload_folder=tmp_path,
                         max_memory=budget)
    placed = loaded.model.hf_device_map
    assert placed["model.layers.0"] == placed["model.layers.1"] == "cpu"
    assert placed["model.layers.2"] == placed["model.layers.3"] == "disk"
    assert loaded.model.model.layers[3].self_attn.q_proj.weight.device.type == "meta"  # really offloaded
    memory = models.load(str(checkpoint), dtype="bfloat16")
    with safe_open(str(checkpoint / "model-00002-of-00005.safetensors"), "pt") as shard:
        written = shard.get_tensor("model.layers.0.mlp.up_proj.weight")
    assert torch.equal(memory.model.model.layers[0].mlp.up_proj.weight, written)
    assert memory.model.lm_head.weight.data_ptr() == memory.model.model.embed_tokens.weight.data_ptr()
    ids = torch.randint(3, 512, (1, 24))
    with torch.inference_mode():
        assert torch.equal(loaded.model(input_ids=ids).logits, memory.model(input_ids=ids).logits)


def test_the_real_shapes_have_their_models_parameter_counts(big):
    """Llama-3.2-1B has 1,235,814,400 parameters, Llama-2-7B 6,738,415,616 (their published configs)."""
    for name, expected in (("1b", 1_235_814_400), ("7b", 6_738_415_616)):
        with torch.device("meta"):
            skeleton = transformers.LlamaForCausalLM(big.llama_config(big.SHAPES[name]))
        assert sum(parameter.numel() for parameter in skeleton.parameters()) == expected, name


@pytest.mark.slow
def test_the_tiny_shape_runs_end_to_end(tmp_path):
    """~40 s on 2 cores: three child processes (checkpoint, plain, label), each importing transformers."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--shape", "tiny", "--dir", str(tmp_path / "tiny")],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| tiny |"))
    assert "`auto`" in row and "2 of 4 layers on disk" in row and "2 × 1024" in row
    assert "cost per probe of 1024 tokens" in done.stdout and "probe card --model" in done.stdout
