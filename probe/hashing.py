"""Content identities: a stable hash of options, of a file, of a model directory's weights.

These are the identities the journal (:mod:`probe.runs.journal`) compares to decide whether a finished unit
can be reused, and the ``revision`` of a local model (:func:`probe.models.load`). They live at the bottom of
the package so that every layer (head labelling, protein sets, the runner) computes them the same way.

Weights are recognised by their **content**. Hashing a large checkpoint costs a read of its files, so the hash
of a file is remembered for the life of the process keyed by (path, size, modification time, change time,
inode): a second question about the same unchanged file in the same run is free. The key is only a shortcut
inside one process, and one a same-size swap cannot fool: ``cp -p`` keeps the size and sets the old
modification time but changes the change time (which no tool can set back), ``rsync -a`` writes a new inode.
Across runs nothing is reused on a key alone: every run hashes the content again.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

WEIGHT_PATTERNS = ("*.safetensors", "*.bin")  # the files whose bytes are a local model's revision
_CHUNK = 1 << 20
_Key = tuple[str, int, int, int, int]  # (path, size, mtime_ns, ctime_ns, inode)
_FILE_DIGESTS: dict[_Key, str] = {}  # -> full sha256 hex of the file
_DIRECTORY_DIGESTS: dict[tuple[_Key, ...], str] = {}  # the keys of a directory's weight files -> its revision


def identity_hash(options: Mapping[str, object]) -> str:
    """16 hex characters of sha256 over the options as canonical JSON (sorted keys; paths as text, tuples as
    lists, sets sorted, enums by value, numpy scalars as numbers)."""
    text = json.dumps(dict(options), sort_keys=True, separators=(",", ":"), default=_canonical)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _canonical(value: object) -> object:
    """A JSON form of a value json cannot write, the same in every run (never an object's memory address)."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, np.generic):
        return value.item()
    text = str(value)
    if " at 0x" in text:
        raise TypeError(f"identity option of type {type(value).__name__} has no stable text form: pass its "
                        "value")
    return text


def _key(path: Path) -> _Key:
    status = path.stat()
    return str(path.resolve()), status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino


def _update(digest, path: Path) -> None:
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)


def _digest(path: Path) -> str:
    """The full sha256 hex of a file's bytes, remembered per (path, size, mtime, ctime, inode) for this
    process."""
    key = _key(path)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        _update(digest, path)
        _FILE_DIGESTS[key] = digest.hexdigest()
    return _FILE_DIGESTS[key]


def file_hash(path: str | os.PathLike) -> str:
    """'sha256:' + 16 hex characters of the file's bytes (for structures, probe files, FASTA, ...)."""
    return "sha256:" + _digest(Path(path))[:16]


def weight_files(directory: str | os.PathLike) -> list[Path]:
    """The weight files of a model directory, in a fixed order (safetensors, then pickled .bin)."""
    folder = Path(directory)
    return [path for pattern in WEIGHT_PATTERNS for path in sorted(folder.glob(pattern))]


def weights_hash(directory: str | os.PathLike) -> str:
    """'sha256:' + 16 hex characters over the bytes of every weight file of `directory`, concatenated in
    order: a local model's revision (what :func:`probe.models.load` records and every run identity uses)."""
    files = weight_files(directory)
    key = tuple(_key(path) for path in files)
    if key not in _DIRECTORY_DIGESTS:
        digest = hashlib.sha256()
        for path in files:
            _update(digest, path)
        _DIRECTORY_DIGESTS[key] = "sha256:" + digest.hexdigest()[:16]
    return _DIRECTORY_DIGESTS[key]


_BLOB = re.compile(r"[0-9a-f]{64}")  # a Hugging Face cache blob named by its file's sha256 (LFS files)


def weights_identity(directory: str | os.PathLike) -> str:
    """'sha256:' + 16 hex characters over the sha256 of each weight file of `directory`: equal exactly when
    the weight files hold the same bytes. In a Hugging Face cache snapshot a weight file links to a blob named
    by its sha256 (LFS), which is used without reading the file, so a sweep over hub revisions costs no extra
    pass over their bytes; other files are read once per process (:func:`file_hash`'s memory)."""
    digests = []
    for path in weight_files(directory):
        target = Path(os.path.realpath(path))
        digests.append(target.name if path.is_symlink() and _BLOB.fullmatch(target.name) else _digest(path))
    return "sha256:" + hashlib.sha256(" ".join(digests).encode()).hexdigest()[:16]
