"""The protein panel's data: predicted contacts (and true ones from an uploaded structure) per protein, and
one head's APC-corrected map, each computed once through the inference gate and cached."""

from __future__ import annotations

import hashlib

import numpy as np

from probe import models
from probe.errors import ProbeError
from probe.naming import display_name

from . import protein_analysis
from .cache import LRUCache
from .config import AppConfig
from .facts import ModelFacts
from .gate import InferenceGate
from .protein_analysis import ProteinResult


class ProteinStore:
    """Protein results by key, and the APC maps of every head of a layer."""

    def __init__(self, facts: ModelFacts, gate: InferenceGate, config: AppConfig) -> None:
        self.facts, self.gate, self.config = facts, gate, config
        self.results = LRUCache(8, config.cache_bytes)
        # One protein's APC maps, a layer (every head) per entry: a head step inside a layer, and every user
        # who looks at the same structure with the same model, costs no forward pass.
        self.maps = LRUCache(64, config.cache_bytes)
        # The 3D view's payload per protein result (its chain, every head's residue map within the view's
        # budget, the contacts): built once per uploaded structure.
        self.views = LRUCache(8, config.cache_bytes)
        # Uploaded structure files by digest, so that another chain of the same file runs without an upload:
        # all together at most config.upload_memory_bytes (probe app --upload-memory-mb), the oldest dropped
        # first (its chain menu then asks for the file again).
        self.uploads = LRUCache(64, config.upload_memory_bytes)

    def keep_upload(self, data: bytes) -> str:
        """Keep an uploaded structure file (bounded by entries and bytes, LRU) and return its key for
        :meth:`upload`."""
        key = hashlib.sha256(data).hexdigest()[:20]
        self.uploads.put(key, np.frombuffer(data, dtype=np.uint8))  # [byte]
        return key

    def upload(self, key) -> bytes:
        """The bytes of a kept upload; ProbeError when it has expired (or the key is not one)."""
        kept = self.uploads.get(key) if isinstance(key, str) else None
        if kept is None:
            raise ProbeError("the uploaded file has expired from the server's memory (it keeps "
                             f"{self.config.upload_memory_bytes / 2**20:g} MiB of uploads in all, the oldest "
                             "dropped first); upload it again")
        return kept.tobytes()

    def analyse(self, spec: str, sequence: str | None = None, structure: bytes | None = None,
                filename: str = "", chain: str | None = None) -> tuple[str, ProteinResult]:
        """Predicted contacts (and true ones from an uploaded structure) for one protein; (cache key,
        result)."""
        loaded = self.facts.model(spec)
        if loaded.kind != models.ModelKind.PROTEIN_MLM:
            kind = getattr(loaded.kind, 'value', loaded.kind)
            raise ProbeError(f"{display_name(spec)} is a {kind}; choose "
                             "a protein model (ESM) for contact maps")
        if structure is not None and len(structure) > self.config.upload_bytes:
            raise ProbeError(f"the upload is {len(structure) // 1024} KiB; the limit is "
                             f"{self.config.upload_bytes // 1024} KiB")
        digest = hashlib.sha256(
            b"%s|%s|%s|%s|%s" % (spec.encode(), (sequence or "").encode(), structure or b"",
                                 filename.encode(), (chain or "").encode())).hexdigest()[:20]
        result = self.results.get_or_compute(
            digest, lambda: protein_analysis.analyse(loaded, sequence, structure, filename, chain,
                                                     self.facts.residue_cap(spec)), self.gate.foreground)
        return digest, result

    def result(self, key: str) -> ProteinResult:
        result = self.results.get(key)
        if result is None:
            raise ProbeError("this protein result has expired from the server's cache; press Run again")
        return result

    def head_map(self, key: str, layer: int, head: int) -> np.ndarray:
        """The selected head's APC-corrected, symmetrised attention over residues: [residue residue].

        Cached per (protein, model, layer): one forward pass gives every head of the layer."""
        result = self.result(key)
        layer, head = self.facts.head_of(result.model, {"layer": layer, "head": head})
        maps = self.maps.get_or_compute(
            ("apc", result.model, key, layer),
            lambda: protein_analysis.layer_maps(self.facts.model(result.model), result.sequence, layer),
            self.gate.foreground)  # [head residue residue]
        return maps[head]

    def structure_payload(self, key: str) -> dict | None:
        """The 3D view's payload of the protein result `key` (:mod:`probe.views.structure3d`): its uploaded
        chain with the heads' residue attention and the contacts; None when the result has no structure (a
        typed sequence)."""
        from probe.views.structure_view import show_structure

        result = self.result(key)
        if result.structure is None:
            return None
        return self.views.get_or_compute(
            ("3d", key),
            lambda: _Payload(show_structure(self.facts.model(result.model), result.structure,
                                            sequence=result.sequence).payload()),
            self.gate.foreground).data


class _Payload:
    """A JSON payload in the LRU cache, counted by its residue maps' bytes."""

    def __init__(self, data: dict) -> None:
        self.data = data
        self.nbytes = len(data["maps"]["data"]) + len(data.get("pdb", ""))
