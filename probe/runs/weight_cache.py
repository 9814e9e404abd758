"""The weight-only stages of a labelling run, computed once per model and kept across runs (what ``probe
label`` and ``probe history`` pass :func:`probe.heads.label.label_model` as ``copying_of``).

Some head measurements read a model's weights and no input — the copying score (Elhage et al.'s OV-circuit
eigenvalues, :mod:`probe.heads.copying`). Their cost is fixed per model (for a GPT-2-small shape most of it is
``W_U W_E``, a d_model × vocab × d_model product), so rerunning ``probe label`` on the same weights — another
head type, more probes, a resumed run — need not pay it again. A stage's result is kept in
``cache_root()/weights/`` (:func:`probe.cache.cache_root`) under the model's **revision** (a content hash of
a local model's weight files, the commit of a hub model: :func:`probe.models.load`), the stage's name and its
:data:`VERSIONS` entry (raised whenever the stage's definition changes, so an old result is never read back
for a new definition). A model whose revision is unknown is computed every time. Files are written atomically;
one that cannot be read is recomputed and replaced. The library's ``label_model`` computes the stage itself
unless given this cache: the disk is the runs layer's business.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from probe.cache import cache_root
from probe.hashing import identity_hash
from probe.heads.copying import CopyingScores, copying_scores
from probe.runs.atomic import write_atomically

# stage -> definition version (raise it when the stage computes something else)
VERSIONS = {"copying": "2-centred-unembedding"}


def stage_path(loaded, stage: str) -> Path | None:
    """Where `stage`'s result for `loaded`'s weights is kept; None when the revision is unknown."""
    revision = str(getattr(loaded, "revision", "") or "")
    if not revision or revision == "unknown":
        return None
    key = identity_hash({"revision": revision, "stage": stage, "version": VERSIONS[stage],
                         "shape": [int(loaded.n_layers), int(loaded.n_heads)]})
    return cache_root() / "weights" / f"{stage}-{key}.npz"


def cached_copying_scores(loaded) -> CopyingScores:
    """:func:`probe.heads.copying.copying_scores` of `loaded`, read from the cache when these weights' scores
    were computed before (the same revision and definition), else computed and kept.

    Parameters
    ----------
    loaded : probe.models.LoadedModel

    Returns
    -------
    CopyingScores
        Equal to ``copying_scores(loaded)``.

    Examples
    --------
    >>> import os, tempfile
    >>> os.environ["PROBE_CACHE"] = tempfile.mkdtemp()
    >>> loaded = probe.load("zoo:induction")
    >>> first = cached_copying_scores(loaded)  # computed and kept
    >>> stage_path(loaded, "copying").exists()
    True
    >>> again = cached_copying_scores(loaded)  # read back: no weight is multiplied
    >>> bool(torch.equal(first.scores, again.scores)), again.unembedding
    (True, 'lm_head')
    >>> del os.environ["PROBE_CACHE"]
    """
    path = stage_path(loaded, "copying")
    if path is not None and path.is_file():
        kept = _read(path, (loaded.n_layers, loaded.n_heads))
        if kept is not None:
            return kept
    result = copying_scores(loaded)
    if path is not None:
        _write(path, result)
    return result


def _read(path: Path, shape: tuple[int, int]) -> CopyingScores | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            scores = np.asarray(data["scores"], dtype=np.float64)
            meta = json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError):
        return None  # unreadable: computed again and replaced
    if scores.shape != shape:
        return None
    return CopyingScores(torch.from_numpy(scores), meta.get("unembedding"), meta.get("note"))


def _write(path: Path, result: CopyingScores) -> None:
    """Atomically (:func:`probe.runs.atomic.write_atomically`); a folder that cannot be written only costs
    the next run the computation."""
    meta = json.dumps({"unembedding": result.unembedding, "note": result.note})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, lambda tmp: np.savez(tmp, scores=result.scores.double().numpy(),
                                                    meta=np.array(meta)))
    except OSError:
        pass


def is_cached(loaded, stage: str = "copying") -> bool:
    """Whether `stage`'s result for these weights is in the cache."""
    path = stage_path(loaded, stage)
    return path is not None and path.is_file()


__all__ = ["VERSIONS", "cached_copying_scores", "is_cached", "stage_path"]
