"""probe.anatomy on every architecture of the coverage list (tests/coverage/catalogue.py).

For each model type, what anatomy finds for every attention module the engine captures is written down in
``GAPS`` (the parts it does not find, and why): the test fails when a part appears or disappears, so the table
stays the truth. Where a value projection is found, it must be the map the model uses: the value states the
attention function receives equal the module's input through that projection (recorded in a forward, within
1e-5); where an output projection is found, its input is exactly the attention output (heads × value dim).
"""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from probe.anatomy import attention_parts, final_norm, find_layer_list, output_projection, parents
from probe.layers import attention_plan
from tests.coverage.catalogue import ARCHITECTURES, Architecture

RECORDER = "anatomy_recorder"
# model types whose values are RMS-normalised per head after the projection (no gain): Gemma 3n's v_norm
VALUE_RMS_NORMED = {"gemma3n_text"}
INTERLEAVED = "fused query_key_value interleaves heads (not read)"
# model_type -> {part: why it is not found}; parts: "value", "output", "norm" (a pre-norm block's gain) and
# "final" (the norm before the unembedding)
POST = {"norm": "post-norm", "final": "post-norm"}
GAPS: dict[str, dict[str, str]] = {
    "gpt_neox": {"value": INTERLEAVED, "norm": "no value module", "final": "final_layer_norm on gpt_neox"},
    "bloom": {"value": INTERLEAVED, "norm": "no value module"},
    "falcon": {"value": INTERLEAVED, "norm": "no value module"},
    "deepseek_v3": {"value": "MLA: values come from the latent kv_b_proj", "norm": "no value module"},
    "kimi_linear": {"value": "MLA attention layers (their v_proj belong to linear-attention layers)",
                    "norm": "no value module"},
    "opt": {"norm": "self_attn_layer_norm (not read)", "final": "decoder.final_layer_norm"},
    "llama4_text": {"final": "norm on the text model under another prefix"},
    "olmo2": {"norm": "post-norm"}, "olmo3": {"norm": "post-norm"}, "olmo_hybrid": {"norm": "post-norm"},
    "lfm2": {"norm": "operator_norm (not read)", "final": "embedding_norm"},
    "nemotron_h": {"norm": "norm (not read)", "final": "norm_f"},
    "bert": POST, "roberta": POST, "distilbert": POST, "electra": POST, "albert": POST, "bart": POST,
    "deberta-v2": {"value": "outside AttentionInterface: query_proj / value_proj (not read)",
                   "norm": "post-norm", "final": "post-norm"},
    "modernbert": {"norm": "attn_norm (not read)", "final": "final_norm"},
    "modernbert-decoder": {"norm": "attn_norm (not read)", "final": "final_norm"},
    "esm": {"norm": "LayerNorm inside EsmAttention (not read)", "final": "emb_layer_norm_after"},
    "t5": {"norm": "layer_norm (not read)", "final": "final_layer_norm"},
    "mt5": {"norm": "layer_norm (not read)", "final": "final_layer_norm"},
    "whisper": {"norm": "self_attn_layer_norm (not read)", "final": "layer_norm"},
}


def _build(arch: Architecture):
    config = transformers.CONFIG_MAPPING[arch.model_type](**arch.config)
    torch.manual_seed(0)
    return getattr(transformers, arch.model_class)(config).eval()


def _found(model) -> dict[str, bool]:
    """Per part, whether anatomy finds it for every captured attention module (and the final norm)."""
    plan = attention_plan(model)
    modules = {id(module): module for module in model.modules()}
    captured = [modules[key] for key, _ in plan.modules]
    parts = {id(item.module): item for item in attention_parts(model)}
    parent_of = parents(model)
    return {
        "value": all(id(m) in parts and parts[id(m)].value is not None for m in captured),
        "output": all(output_projection(m, parent_of) is not None for m in captured),
        "norm": all(id(m) in parts and parts[id(m)].norm is not None for m in captured),
        "final": final_norm(model) is not None,
    }


def _recording_attention(module, query, key, value, attention_mask, **kwargs):
    # the first application's (ALBERT applies one module at every depth)
    _recording_attention.values.setdefault(id(module), value.detach())  # [batch kv_head key dim]
    kwargs = {name: item for name, item in kwargs.items() if name in ("dropout", "scaling", "is_causal")}
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


@pytest.fixture(scope="module")
def recorder():
    AttentionInterface.register(RECORDER, _recording_attention)
    AttentionMaskInterface.register(RECORDER, sdpa_mask)
    return _recording_attention


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=lambda arch: arch.id)
def test_anatomy_finds_what_the_table_says_and_it_is_what_the_model_uses(arch, recorder):
    """One model per type: what is found equals GAPS; every output projection takes heads × value dim; every
    value map found is the one the model applies (hidden states in, the recorded value states out)."""
    model = _build(arch)
    found = _found(model)
    expected = {part: part not in GAPS.get(arch.model_type, {}) for part in found}
    assert found == expected, f"{arch.model_type}: update GAPS (found {found})"
    _output_widths(model, arch)
    if arch.inputs == "text" and arch.expected is None and found["value"]:
        _values_match(model, arch, recorder)


def _values_match(model, arch: Architecture, recorder) -> None:
    model.set_attn_implementation(RECORDER)
    recorder.values = {}
    hidden: dict[int, torch.Tensor] = {}
    found = [item for item in attention_parts(model) if item.value is not None]
    plan_ids = {key for key, _ in attention_plan(model).modules}
    found = [item for item in found if id(item.module) in plan_ids]

    def keep(module, args, kwargs):
        states = kwargs.get("hidden_states", args[0] if args else None)
        hidden.setdefault(id(module), states.detach())

    handles = [item.module.register_forward_pre_hook(keep, with_kwargs=True) for item in found]
    top = min(model.config.get_text_config().vocab_size, 30)  # ordinary tokens of every vocabulary (ESM: 33)
    ids = torch.randint(4, top, (1, 7), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids}
    if getattr(model.config, "is_encoder_decoder", False):  # 5 decoder tokens: cross-attention is told apart
        inputs["decoder_input_ids"] = ids[:, :5]
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    checked = 0
    for item in found:
        if id(item.module) not in recorder.values or id(item.module) not in hidden:
            continue
        value = recorder.values[id(item.module)]  # [batch kv_head key dim]
        states = hidden[id(item.module)].double()  # [batch key d_model]
        expected = states @ item.value.weight()  # [batch key kv_width]
        bias = item.value.bias()
        if bias is not None:
            expected = expected + bias
        batch, n_kv, keys, dim = value.shape
        if expected.shape[1] != keys:  # cross-attention: keys from the encoder, not this module's input
            continue
        # [batch kv_head key dim]
        expected = expected.view(batch, keys, n_kv, dim).transpose(1, 2)
        if arch.model_type in VALUE_RMS_NORMED:
            eps = model.config.get_text_config().rms_norm_eps
            expected = expected * torch.rsqrt(expected.pow(2).mean(-1, keepdim=True) + eps)
        assert torch.allclose(value.double(), expected, atol=1e-5), arch.model_type
        checked += 1
    assert checked > 0, f"{arch.model_type}: no value projection was checked"


def _output_widths(model, arch: Architecture) -> None:
    config = model.config.get_text_config()
    parent_of = parents(model)
    modules = {id(module): module for module in model.modules()}
    for key, _ in attention_plan(model).modules:
        projection = output_projection(modules[key], parent_of)
        linear = isinstance(projection, torch.nn.Linear)
        width = projection.in_features if linear else projection.weight.shape[0]  # Conv1D: [in out]
        heads = getattr(config, "num_attention_heads", None) or getattr(config, "num_heads", None)
        assert heads and width % heads == 0, arch.model_type


def test_find_layer_list_refuses_a_model_without_one():
    from probe.errors import ProbeError

    albert = next(arch for arch in ARCHITECTURES if arch.model_type == "albert")
    with pytest.raises(ProbeError, match="cannot find the 2 transformer layers"):
        find_layer_list(_build(albert))
