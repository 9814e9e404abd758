"""Capture under accelerate's hooks: a model loaded with a device_map that puts a layer on "disk" (its weights
on the meta device between forwards, loaded by an AlignDevicesHook around each module's forward) gives the
same α, gathered slots, output norms and logits as the same model in memory. The output projection's weights
are read through accelerate's `align_module_device`, not from the meta parameter."""

from __future__ import annotations

import pytest
import torch
import transformers

from probe.engine import DenseSink, SinkNeeds, capture
from probe.engine.output_norms import OutputProjections

pytest.importorskip("accelerate")

TOL = 1e-5


class _Everything:
    """Dense α of two heads, gathered slots and output norms, all from one capture."""

    def __init__(self, model, slots):
        self.projections, self.slots = OutputProjections(model), slots
        self.blocks, self.gathered, self.norms = {}, {}, {}

    def needs(self, layer, n_heads, n_query):
        return SinkNeeds(heads=(2, 0), gather=(range(n_heads), self.slots),
                         output_projections=self.projections)

    def update(self, block):
        self.blocks.setdefault(block.layer, []).append(block.alpha.clone())

    def update_gathered(self, layer, heads, alpha):
        self.gathered[layer] = alpha.clone()

    def update_output_norms(self, layer, norms):
        self.norms[layer] = norms


def _configs():
    llama = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     hidden_size=32, intermediate_size=32, vocab_size=64,
                                     initializer_range=0.2)
    gpt_oss = transformers.GptOssConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
        intermediate_size=32, vocab_size=64, num_local_experts=2, num_experts_per_tok=1, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], initializer_range=0.2)
    return {"llama": llama, "gpt_oss": gpt_oss}


@pytest.mark.parametrize("arch", ["llama", "gpt_oss"])
def test_disk_offloaded_layer_equals_the_in_memory_run(arch, tmp_path):
    torch.manual_seed(0)
    config = _configs()[arch]
    memory = transformers.AutoModelForCausalLM.from_config(config).eval()
    if arch == "gpt_oss":
        with torch.no_grad():
            for layer in memory.model.layers:
                layer.self_attn.sinks.copy_(torch.tensor([1.5, -0.5, 0.5, 2.5]))
    memory.save_pretrained(tmp_path / "model")
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                  "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    offloaded = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "model", device_map=device_map, offload_folder=tmp_path / "offload").eval()
    # the premise: between forwards the disk layer's projection holds no weights
    assert offloaded.model.layers[1].self_attn.o_proj.weight.device.type == "meta"

    ids = torch.randint(1, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    slots = torch.stack([torch.arange(10) - 1, torch.zeros(10, dtype=torch.long)], -1)[None].expand(2, -1, -1)
    results = []
    for model in (memory, offloaded):
        everything, dense = _Everything(model, slots.contiguous()), DenseSink()
        with capture(model, [everything, dense]), torch.no_grad():
            logits = model(input_ids=ids).logits
        results.append((logits, everything, dense.attention(0)))
    (logits_a, sink_a, alpha_a), (logits_b, sink_b, alpha_b) = results
    assert (logits_a - logits_b).abs().max() <= TOL
    assert (alpha_a - alpha_b).abs().max() <= TOL
    for layer in (0, 1):
        assert (torch.cat(sink_a.blocks[layer], 2) - torch.cat(sink_b.blocks[layer], 2)).abs().max() <= TOL
        assert (sink_a.gathered[layer] - sink_b.gathered[layer]).abs().max() <= TOL
        assert sink_b.norms[layer] is not None
        assert (sink_a.norms[layer].norms - sink_b.norms[layer].norms).abs().max() <= TOL
        assert (sink_a.norms[layer].mixed - sink_b.norms[layer].mixed).abs().max() <= TOL
    assert float(sink_b.norms[1].mixed.abs().max()) > 0  # not a vacuous equality
