"""The docstring examples' shared names for a plain ``pytest --doctest-modules probe`` (issue 56 item 5).

The project's own doctest test (tests/project/test_doctests.py) gives every example ``probe``, ``torch``,
``np``, ``pd``, ``loaded`` (``probe.load("zoo:induction")``) and ``inputs`` (its tokenized repeat); this file
gives pytest's own doctest runner the same names, from the same definition, so both runs read the examples
alike. Nothing is loaded unless a doctest item runs.
"""

from __future__ import annotations

import pytest

_SHARED: dict = {}


def shared_namespace() -> dict:
    """``probe``, ``torch``, ``np``, ``pd``, ``loaded`` and ``inputs``, built once per session."""
    if not _SHARED:
        import numpy as np
        import pandas as pd
        import torch

        import probe

        loaded = probe.load("zoo:induction")  # 2 layers × 4 heads, a trained induction circuit
        inputs = probe.models.tokenize_text(loaded, "rada ruga buse rada ruga buse")  # 7 tokens with <bos>
        _SHARED.update(probe=probe, torch=torch, np=np, pd=pd, loaded=loaded, inputs=inputs)
    return _SHARED


@pytest.fixture(autouse=True)
def _doctest_names(request):
    """Only doctest items get the names (and only they pay for loading the organism)."""
    if isinstance(request.node, pytest.DoctestItem):
        request.getfixturevalue("doctest_namespace").update(shared_namespace())
