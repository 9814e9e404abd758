"""The intervention layer (probe.engine.sites, probe.engine.edits, probe.engine.interventions): every site of
GPT-2-, Llama- (grouped-query) and BERT-shaped tiny models equals a plain reference computed from the model's
own modules; edits take effect exactly (a replacement by the watched value changes no bit of the logits, a
zeroed head equals the engine's ablation); gradients equal autograd's; hooks never outlive the block."""

from __future__ import annotations

import pytest
import torch

from probe.engine import capture
from probe.engine.interventions import Edit, intervene
from probe.engine.sites import LAYER_SITES, site_map, sites
from probe.errors import ProbeError
from probe.zoo.tiny import build_tiny

ARCHS = ("gpt2", "llama", "bert")
IDS = torch.tensor([[1, 5, 9, 5, 9, 7], [2, 6, 6, 8, 3, 4]])  # [batch query]


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    model, _ = build_tiny(request.param, sharpness=2.0)
    return request.param, model


def parts_of(model, layer):
    return site_map(model).layers[layer]


def hooks_left(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def watched_all(model):
    names = sites(model)
    with intervene(model, watch=names) as run, torch.no_grad():
        logits = model(input_ids=IDS).logits
    return run.saved, logits


def test_sites_are_declared_from_the_anatomy(tiny):
    arch, model = tiny
    names = sites(model)
    for layer in (0, 1):
        for kind in ("resid_pre", "attn_in", "q_in", "k_in", "v_in", "q", "k", "v", "head_out", "attn_out",
                     "mlp_in", "mlp_out", "resid_post"):
            assert f"L{layer}.{kind}" in names
    assert ("final_norm" in names) == (arch != "bert")  # BERT's encoder ends in its last block's LayerNorm
    with pytest.raises(ProbeError, match="L2.q"):
        site_map(model).site("L2.q")
    if arch == "bert":
        refusal = "site final_norm is not available on BertForMaskedLM: no final norm"
        with pytest.raises(ProbeError, match=refusal):
            intervene(model, watch=["final_norm"]).__enter__()


def test_watched_sites_equal_a_plain_reference(tiny):
    arch, model = tiny
    saved, logits = watched_all(model)
    n_heads = model.config.num_attention_heads
    assert torch.equal(saved["logits"], logits)
    assert torch.equal(saved["embed"], saved["L0.resid_pre"])
    assert torch.equal(saved["L0.resid_post"], saved["L1.resid_pre"])
    for layer in (0, 1):
        s = {kind: saved[f"L{layer}.{kind}"] for kind in LAYER_SITES}
        parts = parts_of(model, layer)
        attention = parts.attention
        assert s["head_out"].shape == (2, 6, n_heads, 8)
        with torch.no_grad():
            # head_out concatenated through the output projection is attn_out
            assert torch.equal(attention.output.module(s["head_out"].flatten(-2)), s["attn_out"])
            assert torch.equal(s["attn_in"], s["resid_pre"])  # attention reads the block's input
            for kind in ("q", "k", "v"):
                heads = s[kind].shape[2]
                assert heads == (2 if arch == "llama" and kind != "q" else n_heads)  # GQA: 2 kv heads
                projection = getattr(attention, {"q": "query", "k": "key", "v": "value"}[kind])
                read = attention.norm(s["resid_pre"]) if attention.norm is not None else s["resid_pre"]
                full = projection.module(read)[..., projection.part or slice(None)]
                assert torch.equal(s[kind].flatten(-2), full)
                # each head's own input is the block's input
                assert torch.equal(s[kind + "_in"], s["resid_pre"][:, :, None].expand(-1, -1, heads, -1))
            if arch == "bert":  # post-norm: LayerNorm(attn_out + resid) feeds the MLP and is added after it
                block = parts.block
                normed = block.attention.output.LayerNorm(s["attn_out"] + s["resid_pre"])
                assert torch.equal(s["mlp_in"], normed)
                assert torch.equal(s["mlp_out"], block.output.dense(block.intermediate(s["mlp_in"])))
                assert torch.equal(s["resid_post"], block.output.LayerNorm(s["mlp_out"] + s["mlp_in"]))
            else:  # the sequential pre-norm block
                assert torch.equal(s["mlp_in"], s["resid_pre"] + s["attn_out"])
                assert torch.equal(s["mlp_out"], parts.mlp_out(parts.mlp_norm(s["mlp_in"])))
                assert torch.equal(s["resid_post"], s["resid_pre"] + s["attn_out"] + s["mlp_out"])
    if arch != "bert":
        norm = model.get_decoder().norm if arch == "llama" else model.transformer.ln_f
        with torch.no_grad():
            assert torch.equal(saved["resid_final"], saved["L1.resid_post"])
            assert torch.equal(saved["final_norm"], norm(saved["resid_final"]))
            assert torch.equal(model.get_output_embeddings()(saved["final_norm"]), logits)
            x = saved["resid_final"].double()
            centred = x - x.mean(-1, keepdim=True) if arch == "gpt2" else x
            manual = centred / saved["final_norm.scale"] * norm.weight.double()
            manual = manual + (norm.bias.double() if arch == "gpt2" else 0)
            assert saved["final_norm.scale"].shape == (2, 6, 1)
            assert torch.allclose(manual, saved["final_norm"].double(), atol=1e-5)


def test_replacing_by_the_watched_value_changes_no_bit(tiny):
    arch, model = tiny
    saved, logits = watched_all(model)
    for name in sites(model):
        if name == "final_norm.scale":
            continue
        with intervene(model, edit={name: Edit.replace(saved[name])}), torch.no_grad():
            again = model(input_ids=IDS).logits
        assert torch.equal(again, logits), name
    # a negative control: a replacement by other values changes them
    with intervene(model, edit={"L0.q_in": Edit.replace(saved["L0.q_in"] * 1.5, heads=[1])}), torch.no_grad():
        assert not torch.equal(model(input_ids=IDS).logits, logits)


def test_zeroing_a_head_output_is_the_engines_ablation(tiny):
    arch, model = tiny
    ablate = torch.zeros(2, model.config.num_attention_heads, dtype=torch.bool)  # [layer head]
    ablate[1, 2] = ablate[0, 0] = True
    with capture(model, (), ablate=ablate), torch.no_grad():
        engine = model(input_ids=IDS).logits
    edits = {"L1.head_out": Edit.zero(heads=[2]), "L0.head_out": Edit.zero(heads=[0])}
    with intervene(model, edit=edits), torch.no_grad():
        ours = model(input_ids=IDS).logits
    assert torch.equal(ours, engine)
    with torch.no_grad():
        assert not torch.allclose(model(input_ids=IDS).logits, engine, atol=1e-3)  # the ablation matters


def test_per_head_edits_touch_only_their_head(tiny):
    arch, model = tiny
    saved, _ = watched_all(model)
    other = torch.randn(2, 6, 1, 32, generator=torch.Generator().manual_seed(0))  # one input for head 1
    where = torch.tensor([[[False, True, False, False]], [[False, False, False, False]]])  # [batch 1 head]
    where = where[..., :saved["L1.k"].shape[2]]
    edits = {"L1.q_in": Edit.replace(other, heads=[1]), "L1.k_in": Edit.replace(other, where=where)}
    with intervene(model, watch=["L1.q", "L1.k"], edit=edits) as run, torch.no_grad():
        model(input_ids=IDS)
    attention = parts_of(model, 1).attention
    with torch.no_grad():
        read = attention.norm(other[:, :, 0]) if attention.norm is not None else other[:, :, 0]
        for kind, rows, head in (("q", slice(None), 1), ("k", slice(0, 1), 1)):
            projection = attention.query if kind == "q" else attention.key
            expected = projection.module(read)[..., projection.part or slice(None)]
            expected = expected.unflatten(-1, (saved[f"L1.{kind}"].shape[2], 8))
            edited, clean = run.saved[f"L1.{kind}"], saved[f"L1.{kind}"]
            assert torch.equal(edited[rows, :, head], expected[rows, :, head])
            keep = torch.ones(edited.shape[:3], dtype=torch.bool)
            keep[rows, :, head] = False
            assert torch.equal(edited[keep], clean[keep])  # every other head and row as it was
            assert not torch.equal(edited[rows, :, head], clean[rows, :, head])


def test_adding_to_one_heads_input_recomputes_only_that_head(tiny):
    arch, model = tiny
    saved, _ = watched_all(model)
    delta = torch.randn(2, 6, 1, 32, generator=torch.Generator().manual_seed(1))  # [batch query 1 d_model]
    with intervene(model, watch=["L1.v", "L1.v_in"], edit={"L1.v_in": Edit.add(delta, heads=[0])}) as run, \
            torch.no_grad():
        model(input_ids=IDS)
    attention = parts_of(model, 1).attention
    with torch.no_grad():
        x = saved["L1.resid_pre"] + delta[:, :, 0]
        read = attention.norm(x) if attention.norm is not None else x
        expected = attention.value.module(read)[..., attention.value.part or slice(None)][..., :8]  # head 0
    edited, clean = run.saved["L1.v"], saved["L1.v"]
    assert torch.allclose(edited[:, :, 0], expected, atol=1e-6)
    assert not torch.allclose(clean[:, :, 0], expected)
    assert torch.equal(edited[:, :, 1:], clean[:, :, 1:])
    assert torch.equal(run.saved["L1.v_in"][:, :, 0], x) and torch.equal(run.saved["L1.v_in"][:, :, 1],
                                                                          saved["L1.resid_pre"])


def test_edit_selection_by_position_and_function(tiny):
    arch, model = tiny
    saved, logits = watched_all(model)
    edit = Edit.apply(lambda t: t * 2, positions=[3])
    with intervene(model, watch=["L0.attn_out"], edit={"L0.attn_out": edit}) as run, torch.no_grad():
        changed = model(input_ids=IDS).logits
    assert torch.equal(run.saved["L0.attn_out"][:, 3], 2 * saved["L0.attn_out"][:, 3])
    assert torch.equal(run.saved["L0.attn_out"][:, :3], saved["L0.attn_out"][:, :3])
    if arch != "bert":  # causal: positions before 3 are untouched, 3 is not
        assert torch.equal(changed[:, :3], logits[:, :3]) and not torch.equal(changed[:, 3], logits[:, 3])


def delta_gradient(model, name: str, shape, metric) -> torch.Tensor:
    """Autograd's reference: the gradient of `metric` with respect to a zero tensor added at `name`."""
    delta = torch.zeros(shape, requires_grad=True)
    with intervene(model, edit={name: Edit.add(delta)}):
        value = metric(model(input_ids=IDS).logits)
    (grad,) = torch.autograd.grad(value, delta)
    return grad


def test_gradients_equal_autograds(tiny):
    arch, model = tiny
    saved, _ = watched_all(model)

    def metric(logits):
        return logits[0, -1, 3] - logits[1, 2, 5]

    names = ["L0.resid_pre", "L0.attn_in", "L0.head_out", "L1.q_in", "L1.k_in", "L1.v_in", "L1.q", "L1.k",
             "L0.attn_out", "L1.mlp_in", "L1.mlp_out", "L1.resid_post", "embed", "logits"]
    names += [] if arch == "bert" else ["final_norm", "resid_final"]
    with intervene(model, watch=names, grad=True) as run:
        metric(model(input_ids=IDS).logits).backward()
    for name in names:
        expected = delta_gradient(model, name, saved[name].shape, metric)
        assert run.grads[name].shape == saved[name].shape, name
        assert torch.allclose(run.grads[name], expected, atol=1e-5, rtol=1e-4), name
        assert expected.abs().max() > 0, name
    # by hand: d logit / d final_norm is the unembedding row at that position, zero elsewhere
    if arch != "bert":
        unembed = model.get_output_embeddings().weight.detach()
        by_hand = torch.zeros_like(saved["final_norm"])
        by_hand[0, -1], by_hand[1, 2] = unembed[3], -unembed[5]
        assert torch.equal(run.grads["final_norm"], by_hand)
    # each head's own input: its gradient flows through that head alone (head 0's only from head 0's query)
    query_grad = run.grads["L1.q"]  # [batch query head d_head]
    assert not torch.equal(run.grads["L1.q_in"][:, :, 0], run.grads["L1.q_in"][:, :, 1])
    assert query_grad.abs().max() > 0


def test_input_gradients_share_one_norm_vjp_and_equal_autograds_per_head(tiny, monkeypatch):
    """A layer's q / k / v inputs in one call (one norm VJP, heads stacked) equal each site's own gradient and
    autograd's; an input that an edit made different per head (a VJP per head) equals autograd's too, and
    differs from the VJP at the shared input (the control: the test sees which input the norm's Jacobian is
    taken at)."""
    from probe.engine import head_inputs
    from probe.engine.head_inputs import input_gradients

    arch, model = tiny
    saved, _ = watched_all(model)

    def metric(logits):
        return logits[0, -1, 3] - logits[1, 2, 5]

    names = ["L1.q_in", "L1.k_in", "L1.v_in"]
    noise = torch.randn(2, 6, 1, 32, generator=torch.Generator().manual_seed(2))  # [batch query 1 d_model]
    reference = {}
    for edit in ({}, {"L1.q_in": Edit.add(noise, heads=[1])}):  # then head 1's query reads its own input
        with intervene(model, watch=names, edit=edit, grad=True) as run:
            metric(model(input_ids=IDS).logits).backward()
        stacked = run.input_gradients(names)  # [Σ head batch query d_model]
        alone = torch.cat([run.grads[name].permute(2, 0, 1, 3) for name in names])
        assert stacked.shape == (sum(saved[name].shape[2] for name in names), 2, 6, 32)
        assert torch.allclose(stacked, alone, atol=1e-7, rtol=1e-6)
        with monkeypatch.context() as patch:  # one batch row per norm VJP call: the same numbers
            patch.setattr(head_inputs, "CHUNK", 1)
            assert torch.allclose(run.input_gradients(names), stacked, atol=1e-7, rtol=1e-6)
        for name in names:
            delta = torch.zeros(saved[name].shape, requires_grad=True)
            with intervene(model, edit={**edit, name: [*([edit[name]] if name in edit else []),
                                                       Edit.add(delta)]}):
                (expected,) = torch.autograd.grad(metric(model(input_ids=IDS).logits), delta)
            assert torch.allclose(run.grads[name], expected, atol=1e-5, rtol=1e-4), (name, bool(edit))
            assert expected.abs().max() > 0
            reference[name] = expected  # [batch query head d_model]
    expected, site = reference["L1.q_in"], site_map(model).site("L1.q_in")
    shared = input_gradients([site], [saved["L1.q_in"]], [run.column_gradient("L1.q_in")])  # the unedited x
    assert torch.allclose(shared[0], expected[:, :, 0], atol=1e-5, rtol=1e-4)  # head 0 reads it
    assert torch.allclose(shared[1], expected[:, :, 1], atol=1e-5) == (arch == "bert")  # post-norm: no J
    with pytest.raises(ProbeError, match="input_gradients is for q_in / k_in / v_in sites"):
        run.input_gradients(["L1.q"])


def test_a_run_is_freed_without_the_cyclic_collector(tiny):
    """A Run refers to nothing that refers back to it: dropping it frees it and its kept tensors at once
    (before, ``run.grads`` referred to the run, and EAP-IG's peak memory grew by a run per step)."""
    import gc
    import weakref

    arch, model = tiny
    gc.collect()
    gc.disable()
    try:
        with intervene(model, watch=["L1.q_in", "L0.head_out", "logits"], grad=True) as run:
            model(input_ids=IDS).logits[0, -1, 3].backward()
        assert run.grads["L1.q_in"].abs().max() > 0
        alive, kept = weakref.ref(run), weakref.ref(run.kept["L0.head_out"])
        del run
        assert alive() is None and kept() is None
        with intervene(model, watch=["L0.head_out"], grad=True) as run:  # control: a cycle is seen
            model(input_ids=IDS).logits[0, -1, 3].backward()
        run.itself, alive = run, weakref.ref(run)
        del run
        assert alive() is not None
    finally:
        gc.enable()
        gc.collect()


def test_hooks_are_removed_also_after_an_exception(tiny):
    arch, model = tiny
    before = hooks_left(model)
    with intervene(model, watch=sites(model), edit={"L1.head_out": Edit.zero(heads=[1])}):
        assert hooks_left(model) > before
        with torch.no_grad():
            model(input_ids=IDS)
    assert hooks_left(model) == before
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(model, watch=["L0.q", "logits"], edit={"L1.q_in": Edit.zero(heads=[0])}):
            with torch.no_grad():
                model(input_ids=IDS)
            raise RuntimeError("boom")
    assert hooks_left(model) == before


def test_bad_requests_are_refused_in_one_line(tiny):
    arch, model = tiny
    cases = [
        (dict(watch=["L7.q"]), "L7.q"),
        (dict(edit={"L0.attn_out": Edit.zero(heads=[0])}), "L0.attn_out has no head axis"),
        (dict(edit={"L0.head_out": Edit.zero(heads=[9])}), "head 9 is out of range at L0.head_out"),
        (dict(edit={"L0.q": "zero"}), "give an Edit"),
    ]
    for keywords, message in cases:
        with pytest.raises(ProbeError, match=message):
            with intervene(model, **keywords):
                pass
    with pytest.raises(ProbeError, match="grad=True needs a forward with gradients enabled"):
        with intervene(model, watch=["L0.q"], grad=True), torch.no_grad():
            model(input_ids=IDS)
    assert hooks_left(model) == 0


def test_other_threads_are_left_alone(tiny):
    import threading

    arch, model = tiny
    with torch.no_grad():
        plain = model(input_ids=IDS).logits
    seen = {}
    with intervene(model, edit={"L0.head_out": Edit.zero()}), torch.no_grad():
        worker = threading.Thread(target=lambda: seen.setdefault("logits", model(input_ids=IDS).logits))
        worker.start()
        worker.join()
        mine = model(input_ids=IDS).logits
    assert torch.equal(seen["logits"], plain) and not torch.equal(mine, plain)


def test_a_frozen_model_still_gives_gradients():
    model, _ = build_tiny("gpt2")
    names = ["L0.head_out", "L1.q_in", "L1.attn_out"]
    with intervene(model, watch=names, grad=True) as run:
        model(input_ids=IDS).logits[0, -1, 3].backward()
    trained = {name: run.grads[name].clone() for name in names}
    model.requires_grad_(False)  # nothing requires a gradient: the first site becomes a leaf
    with intervene(model, watch=names, grad=True) as run:
        model(input_ids=IDS).logits[0, -1, 3].backward()
    for name in names:
        assert torch.allclose(run.grads[name], trained[name], atol=1e-6), name
        assert trained[name].abs().max() > 0


def test_hooks_are_registered_only_by_the_intervention_layer():
    """Acceptance of issue 53: module hooks appear only in the intervention layer (the capture engine's
    attention function registers none)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    calls = ("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook")
    paths = [path for folder in ("probe", "app") for path in (root / folder).rglob("*.py")]
    found = sorted(str(path.relative_to(root)) for path in paths
                   if any(call + "(" in path.read_text(encoding="utf-8") for call in calls))
    assert found == ["probe/engine/interventions.py"]


def test_a_kwargs_hook_called_in_torchs_registration_window_is_skipped():
    """torch stores a with-kwargs hook, then marks it; a forward in another thread between the two calls it
    without kwargs. hooked() registers such hooks so that that call is skipped (None) instead of raising
    TypeError (seen once in CI: threaded label_model + capture_attention); called properly, they run."""
    from probe.engine.interventions import hooked, unregistered_skipped

    layer = torch.nn.Linear(2, 2)
    seen = []
    with hooked([(layer, "before_kwargs", lambda module, args, kwargs: seen.append("pre")),
                 (layer, "after_kwargs", lambda module, args, kwargs, output: seen.append("post"))]):
        (pre,) = layer._forward_pre_hooks.values()
        (post,) = layer._forward_hooks.values()
        assert pre(layer, (torch.ones(1, 2),)) is None  # the window: no kwargs, skipped
        assert post(layer, (torch.ones(1, 2),), torch.ones(1, 2)) is None
        assert seen == []
        layer(torch.ones(1, 2))  # registered: both run
        assert seen == ["pre", "post"]
    # negative control: the bare hook raises in the same window
    bare = lambda module, args, kwargs: None  # noqa: E731
    with pytest.raises(TypeError):
        bare(layer, (torch.ones(1, 2),))
    assert unregistered_skipped(bare, "before_kwargs")(layer, (torch.ones(1, 2),), {}) is None
