"""The default values of the protein analysis, in one import-light module (no numpy, no torch).

``probe contacts --help`` shows them without loading the heavy modules that use them
(:mod:`probe.proteins.features`, :mod:`probe.proteins.structure`); those modules take them from here.
"""

from __future__ import annotations

CONTACT_THRESHOLD = 8.0  # Å, Cβ–Cβ
BINDING_DISTANCE = 4.0  # Å, residue heavy atom to ligand heavy atom
CB_MODES: tuple[str, ...] = ("virtual", "real")
DEFAULT_CB = "virtual"
# θ of Vig et al.'s shares: provis' ICLR 2021 version (946e9b4) ran its count share at --min-attn .3; its
# first version (34e6869) ran the attention-weighted share at .1 (reproduce it with --min-attention 0.1)
MIN_ATTENTION = 0.3
MIN_ATTENTION_FIRST_VERSION = 0.1
MIN_TOTAL = 100.0  # heads with Σ α over weights > θ below this get no share (report_edge_features' min_total)
MIN_COUNT = 100  # heads with fewer weights ≥ θ get no count share (the same min_total, applied to counts)
# the extensions of `probe contacts`' outputs, by kind (probe.proteins.outputs writes them)
# (the tables also as .csv, by the extension; the per-head summary carries its run's metadata in parquet only)
SUFFIXES = {"out": (".npz",), "heads_out": (".parquet", ".csv"), "chains_out": (".parquet", ".csv"),
            "heads_summary": (".parquet",)}

__all__ = ["BINDING_DISTANCE", "CB_MODES", "CONTACT_THRESHOLD", "DEFAULT_CB", "MIN_ATTENTION",
           "MIN_ATTENTION_FIRST_VERSION", "MIN_COUNT", "MIN_TOTAL", "SUFFIXES"]
