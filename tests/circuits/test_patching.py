"""Path patching (probe.engine.paths, probe.circuits.patching): the engine's spliced edges equal a reference
twin — Wang et al.'s recipe written out as live intervened forwards (every head frozen at its clean output
except the sender's corrupted one, every MLP frozen, the receivers' q/k/v recorded, then patched into a clean
run) — on a 3-layer GPT-2 (fused projection) and a grouped-query Llama with RoPE; zero patching of every path
equals the engine's ablation; the direct path of a last-layer head to the logits equals its ablation when
nothing else follows it; batching does not change an effect; controls are drawn as documented."""

from __future__ import annotations

import math

import pytest
import torch

from probe import models
from probe.circuits.corruption import PairedBatch, Pairs
from probe.circuits.patching import Measured, control_patches, patch_effects, z_and_beats
from probe.engine.paths import PathPatch, PathPlan
from probe.errors import ProbeError
from probe.heads.ablation import example_loss, set_effects

TOL = 1e-5


def _sharpen(loaded, factor: float = 25.0):
    """Random tiny weights attend almost uniformly and move the loss by 1e-7: projections scaled up, so that
    every edge moves it measurably."""
    with torch.no_grad():
        for name, parameter in loaded.model.named_parameters():
            if name.endswith("weight") and any(part in name for part in ("attn", "mlp")):
                parameter.mul_(factor)
    return loaded


def _pairs(loaded, seed: int = 0, batch: int = 3, seq: int = 12) -> Pairs:
    generator = torch.Generator().manual_seed(seed)
    vocab = loaded.model.get_input_embeddings().num_embeddings
    clean = torch.randint(4, vocab, (batch, seq), generator=generator)
    corrupted = torch.randint(4, vocab, (batch, seq), generator=generator)
    counted = torch.rand(batch, seq, generator=generator) < 0.6
    labels = torch.where(counted, clean, torch.full_like(clean, -100))
    pair = PairedBatch({"input_ids": clean, "labels": labels}, {"input_ids": corrupted})
    return Pairs("induction", (pair,), "test", "test")


class Twin:
    """Wang et al.'s path patching written as live forwards with hooks on the model's own modules (the
    reference: no recording arithmetic, no norm called by hand)."""

    def __init__(self, model, arch: str):
        self.model, self.arch = model, arch
        config = model.config
        self.n_heads = config.num_attention_heads
        self.d_head = config.hidden_size // self.n_heads
        self.n_kv = getattr(config, "num_key_value_heads", None) or self.n_heads
        if arch == "gpt2":
            self.blocks = list(model.transformer.h)
            self.out = [block.attn.c_proj for block in self.blocks]
            self.mlp = [block.mlp for block in self.blocks]
            self.final = model.transformer.ln_f
        else:
            self.blocks = list(model.model.layers)
            self.out = [block.self_attn.o_proj for block in self.blocks]
            self.mlp = [block.mlp for block in self.blocks]
            self.final = model.model.norm

    def projection(self, layer: int, head: int, mode: str):
        """(module, columns) of a receiver."""
        d, width = self.d_head, self.n_heads * self.d_head
        kv = head // (self.n_heads // self.n_kv)
        if self.arch == "gpt2":
            start = {"Q": head * d, "K": width + head * d, "V": 2 * width + head * d}[mode]
            return self.blocks[layer].attn.c_attn, slice(start, start + d)
        attn = self.blocks[layer].self_attn
        module = {"Q": attn.q_proj, "K": attn.k_proj, "V": attn.v_proj}[mode]
        start = (head if mode == "Q" else kv) * d
        return module, slice(start, start + d)

    def run(self, ids, hooks):
        handles = [register(fn) for register, fn in hooks]
        try:
            with torch.no_grad():
                return self.model(input_ids=ids).logits
        finally:
            for handle in handles:
                handle.remove()

    def effect(self, pairs: Pairs, senders, receivers, logits: bool = False) -> float:
        batch = pairs.batches[0]
        clean_ids, corrupt_ids, labels = batch.clean["input_ids"], batch.corrupted["input_ids"], batch.clean[
            "labels"]
        z_clean, z_corrupt, mlp_clean = {}, {}, {}

        def keep(store, layer, pre=True):
            if pre:
                return lambda _m, args: store.__setitem__(layer, args[0].clone())
            return lambda _m, _a, out: store.__setitem__(layer, out.clone())

        layers = range(len(self.blocks))
        hooks = [(self.out[i].register_forward_pre_hook, keep(z_clean, i)) for i in layers]
        hooks += [(self.mlp[i].register_forward_hook, keep(mlp_clean, i, pre=False)) for i in layers]
        clean = example_loss(self.run(clean_ids, hooks), labels, True)
        self.run(corrupt_ids, [(self.out[i].register_forward_pre_hook, keep(z_corrupt, i)) for i in layers])
        # run 2: every head frozen at clean except the senders (corrupted), every MLP frozen at clean
        d = self.d_head

        def frozen(layer):
            def hook(_m, args):
                z = z_clean[layer].clone()
                for sender_layer, head in senders:
                    if sender_layer == layer:
                        z[..., head * d:(head + 1) * d] = z_corrupt[layer][..., head * d:(head + 1) * d]
                return (z,)
            return hook

        recorded, final = {}, {}
        hooks = [(self.out[i].register_forward_pre_hook, frozen(i)) for i in layers]
        hooks += [(self.mlp[i].register_forward_hook, (lambda layer: lambda _m, _a, _o: mlp_clean[layer])(i))
                  for i in layers]
        for layer, head, mode in receivers:
            module, _ = self.projection(layer, head, mode)
            hooks.append((module.register_forward_hook, keep(recorded, (layer, head, mode), pre=False)))
        hooks.append((self.final.register_forward_pre_hook, keep(final, "final")))
        self.run(clean_ids, hooks)
        # run 3: clean, the receivers' q/k/v columns (and the final norm's input) set to run 2's
        hooks = []
        for key in recorded:
            module, columns = self.projection(*key)

            def splice(_m, _a, out, key=key, columns=columns):
                out = out.clone()
                out[..., columns] = recorded[key][..., columns]
                return out
            hooks.append((module.register_forward_hook, splice))
        if logits:
            hooks.append((self.final.register_forward_pre_hook, lambda _m, _a: (final["final"],)))
        patched = example_loss(self.run(clean_ids, hooks), labels, True)
        return float((patched - clean).mean())


CASES = [
    ([(0, 1)], [(1, 2, "K")], False),
    ([(0, 1)], [(2, 0, "Q"), (2, 3, "V")], False),
    ([(0, 1), (1, 3)], [(2, 1, "K"), (2, 2, "K")], False),
    ([(0, 2)], [(1, 0, "V"), (2, 0, "V")], False),  # receivers in two layers: each gets clean + Δ
    ([(1, 0)], [], True),  # the direct path to the logits
    ([(0, 3)], [(1, 1, "Q")], True),
]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_exact_edges_equal_the_reference_twin(tiny_dir, arch):
    overrides = {"n_layer": 3} if arch == "gpt2" else {"num_hidden_layers": 3}
    loaded = _sharpen(models.load(str(tiny_dir(arch, **overrides))))
    pairs = _pairs(loaded)
    patches = [PathPatch(tuple(s), tuple(r), logits) for s, r, logits in CASES]
    measured = patch_effects(loaded, pairs, patches)
    twin = Twin(loaded.model, arch)
    for (senders, receivers, logits), effect in zip(CASES, measured.effects, strict=True):
        expected = twin.effect(pairs, senders, receivers, logits)
        assert effect == pytest.approx(expected, abs=1e-6), (senders, receivers)
        assert abs(expected) > 5e-5  # an edge that moves the loss: the equality is not 0 = 0
    assert measured.forwards == 3 and measured.rows == 3 * 2 + 3 * len(CASES)


def test_grouped_query_key_receiver_patches_the_shared_head(tiny_dir):
    """Llama with 2 key/value heads for 4 query heads: a K receiver at query head 0 and at query head 1 (the
    same key/value head) are the same patch."""
    loaded = _sharpen(models.load(str(tiny_dir("llama", num_hidden_layers=3))))
    pairs = _pairs(loaded)
    one, two, other = patch_effects(loaded, pairs, [PathPatch(((0, 1),), ((1, 0, "K"),)),
                                                    PathPatch(((0, 1),), ((1, 1, "K"),)),
                                                    PathPatch(((0, 1),), ((1, 2, "K"),))]).effects
    assert one == pytest.approx(two, abs=1e-7) and abs(one - other) > 1e-5


def test_zero_patching_every_path_equals_the_engines_ablation(tiny_dir):
    loaded = _sharpen(models.load(str(tiny_dir("gpt2", n_layer=3))))
    pairs = _pairs(loaded, seed=3)
    groups = [((0, 1),), ((1, 0), (1, 3)), ((0, 2), (2, 1))]
    patches = [PathPatch(group, downstream=True) for group in groups]
    measured = patch_effects(loaded, pairs, patches, zero=True)
    batch = dict(pairs.batches[0].clean)

    def loss(logits, rows):
        return example_loss(logits, rows["labels"], True)
    ablated = set_effects(loaded, [batch], groups, loss)
    for group, effect in zip(groups, measured.effects, strict=True):
        assert effect == pytest.approx(ablated[group], abs=TOL)
        assert abs(effect) > 1e-4


def test_direct_path_to_the_logits_equals_ablation_when_nothing_follows(tiny_dir):
    """A last-layer head whose block has no MLP output (zeroed): its direct path to the logits is every path,
    so zero patching it equals zeroing the head; with the MLP on, they differ (the negative control)."""
    loaded = _sharpen(models.load(str(tiny_dir("gpt2", n_layer=2))))
    pairs = _pairs(loaded, seed=5)
    batch = dict(pairs.batches[0].clean)

    def loss(logits, rows):
        return example_loss(logits, rows["labels"], True)
    with_mlp = patch_effects(loaded, pairs, [PathPatch(((1, 2),), logits=True)], zero=True).effects[0]
    assert abs(with_mlp - set_effects(loaded, [batch], [((1, 2),)], loss)[((1, 2),)]) > 1e-5
    with torch.no_grad():
        loaded.model.transformer.h[1].mlp.c_proj.weight.zero_()
        loaded.model.transformer.h[1].mlp.c_proj.bias.zero_()
    direct = patch_effects(loaded, pairs, [PathPatch(((1, 2),), logits=True)], zero=True).effects[0]
    assert direct == pytest.approx(set_effects(loaded, [batch], [((1, 2),)], loss)[((1, 2),)], abs=TOL)


def test_batching_does_not_change_an_effect(tiny_dir):
    loaded = _sharpen(models.load(str(tiny_dir("gpt2", n_layer=3))))
    pairs = _pairs(loaded, seed=1)
    patches = [PathPatch(tuple(s), tuple(r), logits) for s, r, logits in CASES]
    together = patch_effects(loaded, pairs, patches, max_rows=64)
    one_by_one = patch_effects(loaded, pairs, patches, max_rows=3)
    assert one_by_one.forwards == 2 + len(patches) and together.forwards == 3
    assert together.effects == pytest.approx(one_by_one.effects, abs=1e-6)
    assert isinstance(together, Measured) and together.examples == 3


def test_refusals(tiny_dir):
    bert = models.load(str(tiny_dir("bert")))
    with pytest.raises(ProbeError, match="post-norm"):
        PathPlan(bert.model, bert.attention_layers, bert.n_heads)
    loaded = models.load(str(tiny_dir("gpt2")))
    plan = PathPlan(loaded.model, loaded.attention_layers, loaded.n_heads)
    with pytest.raises(ProbeError, match="earlier layer"):
        plan.check([PathPatch(((1, 0),), ((1, 2, "K"),))])
    with pytest.raises(ProbeError, match="not an attention head"):
        plan.check([PathPatch(((0, 9),), ((1, 2, "K"),))])
    with pytest.raises(ProbeError, match="no paired probes"):
        patch_effects(loaded, Pairs("induction", (), None, None, "none"), [])


def test_controls_are_random_pairs_of_the_same_shape():
    receivers = [(2, 0), (2, 1), (3, 0)]
    controls = control_patches(receivers, [((0, 1), "K")], layers=range(4), n_heads=4, controls=8, seed=0)
    assert len(controls) == 8
    assert len({(p.senders, p.receivers) for p in controls}) == 8
    for p in controls:
        (sender,) = p.senders
        assert sender[0] < 2
        layers = sorted(layer for layer, _, _ in p.receivers)
        assert layers == [2, 2, 3] and len({mode for _, _, mode in p.receivers}) == 1
        assert not (sender == (0, 1) and p.receivers[0][2] == "K" and
                    sorted((a, b) for a, b, _ in p.receivers) == receivers)
    assert control_patches([(0, 1)], [], layers=range(2), n_heads=4) == []  # nothing earlier
    z, beats = z_and_beats(3.0, [0.0, 1.0, 2.0])
    assert z == pytest.approx(2.0) and beats
    assert z_and_beats(1.5, [0.0, 1.0, 2.0])[1] is False
    assert math.isnan(z_and_beats(1.0, [0.5])[0])
