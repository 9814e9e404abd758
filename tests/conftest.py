"""Shared fixtures: tiny seeded models saved to temp directories, and a network-free environment."""

from __future__ import annotations

import os

import pytest
import torch

# No test may touch the network: the hub client answers from the local cache or fails at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# Real PDB entries shipped with the tests (wwPDB, CC0; see tests/data/README.md).
STRUCTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """tiny_dir(arch, **overrides) -> directory of a saved tiny model (cached per arguments for the
    session)."""
    from probe.zoo.tiny import save_tiny

    cache: dict = {}

    def make(arch: str, seed: int = 0, **overrides):
        key = (arch, seed, tuple(sorted(overrides.items())))
        if key not in cache:
            directory = tmp_path_factory.mktemp(f"tiny-{arch}")
            cache[key] = save_tiny(arch, directory, seed=seed, **overrides)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def planted_dir(tmp_path_factory) -> str:
    """The planted GPT-2 (probe.zoo.planted.PLANTED_HEADS: L0H0 previous token, L0H1 self, L1H2 first token)
    saved once per session; what `probe label --model DIR` and `models.load(DIR)` read."""
    from probe.zoo.planted import save_planted_gpt2

    return str(save_planted_gpt2(tmp_path_factory.mktemp("planted")))


@pytest.fixture(scope="module")
def planted(planted_dir):
    """The planted GPT-2, loaded once per test module (a test that changes its weights changes only its
    module's copy)."""
    from probe import models

    return models.load(planted_dir)


@pytest.fixture(scope="session")
def structures_dir():
    """tests/data: pdb1ubi.pdb, 1aki.pdb and pdb1ejg.pdb (real wwPDB files shipped with the repository)."""
    return STRUCTURES


UBIQUITIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"
THREE_LETTER = {"A": "ALA", "R": "ARG", "N": "ASN", "D": "ASP", "C": "CYS", "Q": "GLN", "E": "GLU",
                "G": "GLY", "H": "HIS", "I": "ILE", "L": "LEU", "K": "LYS", "M": "MET", "F": "PHE",
                "P": "PRO", "S": "SER", "T": "THR", "W": "TRP", "Y": "TYR", "V": "VAL"}


def eager_attention(model, inputs) -> torch.Tensor:
    """Reference α from eager attention: [batch layer head query key]."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(out.attentions, dim=1)  # [batch layer head query key]


@pytest.fixture
def cuda_kernels_only(monkeypatch):
    """On a CUDA device the engine's output and log-sum-exp must come from a fused kernel (flash or
    memory-efficient): where a kernel refuses a call the engine falls back to its blockwise softmax, which
    gives the same α, so an equality test alone would pass without ever running the kernel. With this fixture
    that fallback fails the test with the kernel's own error (e.g. "attn_bias is not correctly aligned"). Not
    for soft-capped models, whose scores no kernel computes."""
    from probe.engine import kernels

    def refused(query, key, value, scores, block_rows=256):
        if query.device.type == "cuda" and scores.softcap is None:  # the kernel again, its error unsuppressed
            kernels._cuda_fused_attention(query, key, value, scores.mask, scores.is_causal, scores.scale, 0.0)
        raise AssertionError(f"the blockwise fallback ran for a {query.dtype} call on {query.device}, where "
                             "a fused CUDA kernel should have given the output and the log-sum-exp")

    monkeypatch.setattr(kernels, "blockwise_attention", refused)


def compact_synthetic_pdb(sequence: str) -> str:
    """A PDB text whose residues walk a serpentine path through a cubic lattice of 3.8 Å: a compact 'fold'
    with short-, medium- and long-range contacts (Cβ 0.5 Å beside Cα; glycines have none)."""
    side = 5
    lines, serial = [], 1
    for index, letter in enumerate(sequence):
        layer, rest = divmod(index, side * side)
        row, col = divmod(rest, side)
        if row % 2:
            col = side - 1 - col
        if layer % 2:
            row = side - 1 - row
        ca = (3.8 * col, 3.8 * row, 3.8 * layer)
        atoms = [("N", (ca[0] - 0.5, ca[1], ca[2]), "N"), ("CA", ca, "C"),
                 ("C", (ca[0] + 0.5, ca[1], ca[2]), "C")]
        if letter != "G":
            atoms.append(("CB", (ca[0], ca[1] + 0.5, ca[2]), "C"))
        for name, (x, y, z), element in atoms:
            lines.append(f"ATOM  {serial:5d} {name:<4s} {THREE_LETTER[letter]} A{index + 1:4d}    "
                         f"{x:8.3f}{y:8.3f}{z:8.3f}  1.00  0.00          {element:>2s}")
            serial += 1
    return "\n".join(lines + ["TER", "END"]) + "\n"


@pytest.fixture(scope="session")
def ubiquitin_structure():
    """tests/data/pdb1ubi.pdb: ubiquitin (1UBI), chain A, 76 residues."""
    return os.path.join(STRUCTURES, "pdb1ubi.pdb")


@pytest.fixture(params=["single pass", "kernel"])
def slot_path(request, monkeypatch):
    """Both ways the engine serves gathered slots and output norms to sinks that want no head densely: the
    single pass, reading α at the slots from its own blocks and Σ_j α_ij n_j from one more value column (CPU
    float32 inputs up to ``SLOT_PASS_MAX_KEYS``), and the fused kernel on a padded value channel with α
    rebuilt at the slots (longer inputs, other devices and dtypes; forced here by a limit of 0 keys). After
    the test, checks that the path named really ran."""
    from probe.engine import attention

    passes = []
    single_pass = attention._stream_single_pass

    def counted(*args, **kwargs):
        passes.append(1)
        return single_pass(*args, **kwargs)

    monkeypatch.setattr(attention, "_stream_single_pass", counted)
    if request.param == "kernel":
        monkeypatch.setattr(attention, "SLOT_PASS_MAX_KEYS", 0)
    yield request.param
    if request.param == "kernel":
        assert not passes, "the single pass ran where the kernel path was forced"
    else:
        assert passes, "the single pass never ran"
