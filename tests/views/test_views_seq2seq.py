"""probe.show on an encoder–decoder (a tiny T5): one pass with the teacher-forced decoder inputs, every
stack's heads in the view, its layers named by stack for views.js; a single-stack model sends no names (the
control)."""

from __future__ import annotations

import numpy as np
import torch

from tests.tiny_archs import save


def test_show_on_t5_captures_every_stack_and_names_its_layers(tmp_path, tiny_dir):
    import probe
    from probe.engine import capture_attention
    from probe.models import load, model_inputs

    loaded = load(save("t5", tmp_path / "t5"))
    view = probe.show(loaded, "the cat saw the dog", selected=(6, 1))
    data = view.payload()
    assert data["layer_names"] == ["enc.L0", "enc.L1", "dec.L0", "dec.L1", "dec.L2", "cross.L0", "cross.L1",
                                   "cross.L2"]
    ids = torch.tensor([loaded.tokenizer("the cat saw the dog")["input_ids"]])
    reference = capture_attention(loaded.model, model_inputs(loaded, ids, torch.ones_like(ids)), layers=[6])
    np.testing.assert_allclose(view.maps[(6, 1)], reference[0, 0, 1].float().numpy(), atol=1e-6)  # cross.L1H1
    control = probe.show(load(str(tiny_dir("gpt2"))), "the cat saw the dog")
    assert "layer_names" not in control.payload()
