"""bfloat16 / float16 runs: α from the fused kernel's LSE against a float32 softmax of the very q and k the
model produced (the engine's own error) and against the float32 model's eager α (what a user sees, dominated
by the model's reduced precision); the logits under capture are the kernel's own, bit for bit; Σ_j α_ij n_j of
the output norms is float32-accurate. The tolerances asserted are the measured ones (docs/engine.md) with a
2-4x margin."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from probe.engine import DenseSink, SinkNeeds, capture
from probe.engine.output_norms import OutputProjections

# measured on these models: 5.4e-5 (both dtypes) against the same q, k; 4.8e-2 (bf16) and 6.9e-3 (fp16)
# against the float32 model; rows sum to 1 within 6.5e-5
SAME_QK_TOL = 2e-4
MODEL_TOL = {torch.bfloat16: 0.1, torch.float16: 0.02}
_REFERENCE: list[torch.Tensor] = []


def _recording_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                         **kwargs):
    """sdpa, and beside it the float32 softmax of the same (reduced-precision) q and k: [batch head query
    key]."""
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    keys = repeat_kv(key, query.shape[1] // key.shape[1]).float()
    scores = query.float() @ keys.transpose(-1, -2) * scale  # [batch head query key]
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, -torch.inf) if attention_mask.dtype == torch.bool else (
            scores + attention_mask.float())
    else:
        above = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(above, -torch.inf)
    _REFERENCE.append(torch.softmax(scores, -1).nan_to_num(0.0))
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


AttentionInterface.register("probe_test_record", _recording_attention)
AttentionMaskInterface.register("probe_test_record", sdpa_mask)


def _model(arch: str, dtype: torch.dtype):
    torch.manual_seed(0)
    if arch == "llama":  # grouped-query attention
        config = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                          hidden_size=64, intermediate_size=64, vocab_size=64,
                                          initializer_range=0.2)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=64, initializer_range=0.2,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    return model.eval().to(dtype)


def _inputs(padded: bool = True, device: str = "cpu"):
    """Two sequences of 48 tokens; `padded`: the second one's first 5 are padding (a mask: on CUDA the
    memory-efficient kernel), else no padding (no mask: on CUDA the flash kernel)."""
    ids = torch.randint(1, 64, (2, 48), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        mask[1, :5] = 0
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def _same_qk_reference(model, inputs) -> torch.Tensor:
    """[batch layer head query key] float32 softmax of the q, k the reduced-precision model computes."""
    _REFERENCE.clear()
    previous = model.config._attn_implementation
    model.set_attn_implementation("probe_test_record")
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(_REFERENCE, dim=1)


class _Norms:
    def __init__(self, model):
        self.projections, self.got = OutputProjections(model), {}

    def needs(self, layer, n_heads, n_query):
        return SinkNeeds(output_projections=self.projections)

    def update_output_norms(self, layer, norms):
        self.got[layer] = norms


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_alpha_logits_and_output_norms(arch, dtype):
    _check_reduced_precision(arch, dtype, _inputs())


@pytest.mark.gpu
@pytest.mark.parametrize("padded", [True, False], ids=["padded-memory-efficient", "unpadded-flash"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_on_cuda(arch, dtype, padded, cuda_kernels_only):
    """The same bounds with the CUDA kernels' LSE: flash (no padding: no mask) and memory-efficient (a
    padding mask), half-precision q, k; the float32 output-norm channel on the memory-efficient kernel. The
    fixture fails the test where a kernel refused and the blockwise fallback ran."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _check_reduced_precision(arch, dtype, _inputs(padded, "cuda"), "cuda")


def _check_reduced_precision(arch, dtype, inputs, device="cpu"):
    """The checks of the test above on `device`; every comparison on the CPU (DenseSink keeps α there)."""
    model = _model(arch, dtype).to(device)
    real = inputs["attention_mask"].bool().cpu()
    pairs = (real[:, :, None] & real[:, None, :])[:, None, None]  # [batch 1 1 query key]
    with torch.no_grad():
        plain = model(**inputs).logits
    reference = _same_qk_reference(model, inputs).cpu()
    float_model = _model(arch, torch.float32).to(device)
    float_model.set_attn_implementation("eager")
    with torch.no_grad():
        float_alpha = torch.stack(float_model(**inputs, output_attentions=True).attentions, dim=1).cpu()
    for heads in (None, [2, 1]):
        sink = DenseSink(heads=heads)
        with capture(model, sink), torch.no_grad():
            logits = model(**inputs).logits
        assert torch.equal(logits, plain)  # capture never changes what the model computes, in any dtype
        alpha = sink.attention(0)  # [batch layer head query key] float32
        chosen = slice(None) if heads is None else heads
        assert ((alpha - reference[:, :, chosen]).abs() * pairs).max() <= SAME_QK_TOL
        assert ((alpha - float_alpha[:, :, chosen]).abs() * pairs).max() <= MODEL_TOL[dtype]
        sums = alpha.sum(-1)[real[:, None, None, :].expand(-1, *alpha.shape[1:3], -1)]
        assert (sums - 1).abs().max() <= SAME_QK_TOL
    norms = _Norms(model)
    with capture(model, norms), torch.no_grad():
        assert torch.equal(model(**inputs).logits, plain)
    for layer in (0, 1):
        delivered = norms.got[layer]
        mixed = (reference[:, layer] * delivered.norms.cpu()[:, :, None, :]).sum(-1)  # [batch head query]
        relative = (delivered.mixed.cpu() - mixed).abs() / mixed.clamp(min=1e-6)
        assert relative[real[:, None].expand_as(relative)].max() <= SAME_QK_TOL
    # negative control: the reduced-precision model really differs from the float32 one
    assert ((reference - float_alpha).abs() * pairs).max() > 1e-3
