"""Shared fixtures: tiny seeded models saved to temp directories, and a network-free environment."""

from __future__ import annotations

import os

import pytest

# No test may touch the network: the hub client answers from the local cache or fails at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared")
STRUCTURES = os.path.abspath(os.path.join(SHARED, "data", "structures"))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """tiny_dir(arch, **overrides) -> directory of a saved tiny model (cached per arguments for the session)."""
    from probe.tiny import save_tiny

    cache: dict = {}

    def make(arch: str, seed: int = 0, **overrides):
        key = (arch, seed, tuple(sorted(overrides.items())))
        if key not in cache:
            directory = tmp_path_factory.mktemp(f"tiny-{arch}")
            cache[key] = save_tiny(arch, directory, seed=seed, **overrides)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def structures_dir():
    """../shared/data/structures, or a skip saying why."""
    if not os.path.isdir(STRUCTURES):
        pytest.skip(f"real PDB files not available: {STRUCTURES} is absent (it lives beside the repository)")
    return STRUCTURES
