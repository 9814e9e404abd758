"""The dashboard on a hybrid model (Qwen3-Next-shaped: softmax attention in layers 1 and 3 of 4)."""

from __future__ import annotations

from tests.tiny_archs import save


def test_the_app_steps_only_a_hybrids_layers_with_alpha(tmp_path):
    """The dashboard's keyboard shape of a hybrid names its softmax layers (assets/keys.js steps only those,
    see tests/app/test_app_js.py); a model whose every layer has α keeps the plain shape (the control)."""
    from app.config import AppConfig
    from app.panels.page import _shape
    from app.service import Service

    directory = str(save("qwen3_next", tmp_path / "qwen3-next"))
    service = Service(AppConfig(models=(directory, "zoo:induction")))
    assert _shape(service, directory) == {"layers": 4, "heads": 4, "attention_layers": [1, 3]}
    assert _shape(service, "zoo:induction") == {"layers": 2, "heads": 4}
