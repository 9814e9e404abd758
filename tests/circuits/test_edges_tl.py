"""EAP (probe.circuits.edges) equals TransformerLens 4.3's edge attribution, its rule written out here.

TransformerLens 4.3 (``transformer_lens/tools/analysis/attribution_patching.py``: ``attribution_patch`` with
``EdgeAttributionConfig(granularity="edge")``; edges from ``enumerate_edges``, scored by ``_edge_effects``) is
not imported (CI does not install it); its rule, on a hand-written GPT-2 forward of the same weights:

* graph: writers = the token embedding (``hook_embed``), every head's residual write (``attn.hook_result``)
  and every MLP output (``hook_mlp_out``); readers = every head's split q / k / v input
  (``attn.hook_q_input`` …: the residual stream before ``ln_1``, one copy per head), every MLP input
  (``hook_mlp_in``: before ``ln_2``) and the logits (the last ``hook_resid_post``: before ``ln_f``); a writer
  feeds every reader after it (a layer's heads feed its own MLP). One edge per position.
* score (denoising): per pair, per position p, (a_clean[u, p] − a_corrupt[u, p]) · ∂metric/∂(input of v at p)
  with the gradient on the corrupted run; TL keys edges by position, we sum them; the mean over pairs.

Our EAP is the noising form of hannamw/EAP-IG (Δ = corrupted − clean, gradient on the clean run), so TL's
numbers are ours on the swapped task (clean ↔ corrupted, the answers kept): asserted to float64 rounding,
and the unswapped scores (also sign-flipped) differ by far more — the negative control. The embeddings'
positional part is the same on both prompts of a pair, so its difference is zero in either graph.

Checked against TL 4.3.0 itself (not in CI: a TransformerBridge booted on the same weights): on this test's
model and task the rule below equals TL's attribution_patch to 1.2e-17 and ours to 2.4e-17 (largest score
3.0e-2); docs/circuits.md has the float32 GPT-2 and Llama numbers.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from probe.circuits.edges import edge_scores
from probe.circuits.task import repeat_task
from probe.zoo.tiny import build_tiny


@pytest.fixture(scope="module")
def gpt2():
    model, tokenizer = build_tiny("gpt2", seed=2, n_layer=3)
    model = model.double()
    with torch.no_grad():  # peaked attention, so the q and k edges are not all ~0
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(6.0)
    return model, tokenizer


def tl_forward(model, ids, handles):
    """Hand-written GPT-2 forward: (last-position logits, writers {name: [b q d_model]}). `handles` holds
    the reader inputs' zero-valued additions: ``L{l}.{q,k,v}`` `[b q head d_model]` (one residual copy per
    head, as TL's split q / k / v input), ``L{l}.mlp`` and ``logits`` `[b q d_model]`."""
    config, base = model.config, model.transformer
    heads, width = config.n_head, config.n_embd
    d_head = width // heads
    positions = torch.arange(ids.shape[1])
    tokens = base.wte(ids)
    writers = {"embed": tokens}  # TL's hook_embed: the token embedding alone
    x = tokens + base.wpe(positions)[None]
    causal = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()
    for layer, block in enumerate(base.h):
        weight, bias = block.attn.c_attn.weight, block.attn.c_attn.bias  # [d_model 3*d_model], y = x W + b
        parts = []
        for index, kind in enumerate("qkv"):
            inputs = x[:, :, None] + handles[f"L{layer}.{kind}"]  # [b q head d_model]
            columns = weight[:, index * width:(index + 1) * width].view(width, heads, d_head)
            shift = bias[index * width:(index + 1) * width].view(heads, d_head)
            parts.append(torch.einsum("bqhd,dhe->bhqe", block.ln_1(inputs), columns) + shift[:, None])
        q, k, v = parts  # [b head q d_head]
        scores = q @ k.transpose(-1, -2) / d_head ** 0.5  # [b head q k]
        z = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v  # [b head q d_head]
        out = block.attn.c_proj.weight.view(heads, d_head, width)  # [head d_head d_model]
        for head in range(heads):
            writers[f"L{layer}H{head}"] = z[:, head] @ out[head]  # TL's hook_result: [b q d_model]
        x = x + sum(writers[f"L{layer}H{head}"] for head in range(heads)) + block.attn.c_proj.bias
        writers[f"L{layer}.mlp"] = block.mlp(block.ln_2(x + handles[f"L{layer}.mlp"]))
        x = x + writers[f"L{layer}.mlp"]
    logits = model.lm_head(base.ln_f(x + handles["logits"]))
    return logits[:, -1], writers


def tl_edges(layers, heads):
    """TL's enumerate_edges (positions merged), in its order: [(writer, reader, input, handle, head)]."""
    edges, available = [], ["embed"]
    for layer in range(layers):
        for kind in "qkv":
            edges += [(u, f"L{layer}H{h}", kind, f"L{layer}.{kind}", h)
                      for h in range(heads) for u in available]
        available = available + [f"L{layer}H{h}" for h in range(heads)]
        edges += [(u, f"L{layer}.mlp", "mlp", f"L{layer}.mlp", None) for u in available]
        available = available + [f"L{layer}.mlp"]
    return edges + [(u, "logits", "logits", "logits", None) for u in available]


def tl_rule(model, task):
    """TL 4.3's edge scores by its rule (module doc): {(writer, reader, input): score}."""
    layers, heads, width = model.config.n_layer, model.config.n_head, model.config.n_embd
    edges = tl_edges(layers, heads)
    totals = {edge[:3]: 0.0 for edge in edges}
    for clean, corrupt, correct, incorrect in zip(task.clean, task.corrupted, task.correct, task.incorrect,
                                                  strict=True):  # one pair per forward, as TL
        clean, corrupt = torch.tensor([clean]), torch.tensor([corrupt])
        shape = (1, clean.shape[1])

        def zeros(per_head, shape=shape):
            extra = (heads,) if per_head else ()
            return torch.zeros(*shape, *extra, width, dtype=torch.float64, requires_grad=True)
        handles = {f"L{layer}.{kind}": zeros(kind in "qkv") for layer in range(layers)
                   for kind in ("q", "k", "v", "mlp")}
        handles["logits"] = zeros(False)
        with torch.no_grad():
            _, clean_writers = tl_forward(model, clean, {name: h.detach() for name, h in handles.items()})
        last, corrupt_writers = tl_forward(model, corrupt, handles)  # the gradient on the corrupted run
        (last[0, correct] - last[0, incorrect]).backward()
        for writer, reader, kind, handle, head in edges:
            delta = clean_writers[writer] - corrupt_writers[writer].detach()  # clean − corrupted
            grad = handles[handle].grad  # [1 q head d_model] or [1 q d_model]
            grad = grad[:, :, head] if head is not None else grad
            totals[(writer, reader, kind)] += float((delta * grad).sum()) / len(task)  # Σ positions
    return totals


def test_eap_on_the_swapped_task_equals_transformerlens_rule(gpt2):
    model, tokenizer = gpt2
    task = repeat_task(tokenizer, pairs=3, block=5, seed=4)
    ids = torch.tensor(task.clean)
    zeros = {f"L{layer}.{kind}": 0.0 for layer in range(3) for kind in ("q", "k", "v", "mlp")}
    with torch.no_grad():  # the hand-written forward is the model's
        written = tl_forward(model, ids, {**zeros, "logits": 0.0})[0]
        assert torch.allclose(written, model(input_ids=ids).logits[:, -1], rtol=0, atol=1e-12)
    theirs = tl_rule(model, task)
    swapped = dataclasses.replace(task, clean=task.corrupted, corrupted=task.clean)
    ours = {(row.sender, row.receiver, row.input): row.score
            for row in edge_scores(model, swapped, method="eap").itertuples()}
    assert set(ours) == set(theirs) and len(ours) == 262  # the same graph, edge for edge
    largest = max(abs(value) for value in theirs.values())
    q_k = max(abs(value) for (_, _, kind), value in theirs.items() if kind in "qk")
    assert q_k > 1e-3 * largest  # the query and key edges are exercised too
    worst = max(abs(ours[key] - theirs[key]) for key in theirs)
    assert worst <= 1e-12 * largest, (worst, largest)
    # negative control: our default (noising) direction, even sign-flipped, is another quantity
    plain = {(row.sender, row.receiver, row.input): row.score
             for row in edge_scores(model, task, method="eap").itertuples()}
    assert max(abs(-plain[key] - theirs[key]) for key in theirs) > 1e-2 * largest
