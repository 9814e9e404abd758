"""Crash-safe journal of finished units (a model, a record, a chain) kept beside an output file.

Each unit is one file in the hidden parts directory `.{out.name}.parts/`, written atomically
(:func:`probe.runs.atomic.write_atomically`), so a SIGKILL loses at most the unit being written and never
leaves a half unit. A unit file is an uncompressed npz (no pickle) holding the caller's arrays, the table as
parquet bytes and a small JSON header with the unit's name and the identity of the options that produced it. A
rerun reuses a unit only if its identity is exactly the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from probe.hashing import file_hash, identity_hash
from probe.runs.atomic import exclusive, is_temporary, pid_alive, remove_dead_temporaries, write_atomically

_META = "__meta__"
_TABLE = "__table__"
# what reading a damaged or foreign unit file can raise: it is then treated as absent
_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
_SUFFIX = ".npz"
_LOCK = "writer.lock"  # the output's writers serialise through it (Journal.writing)


@dataclass(frozen=True)
class JournalEntry:
    """One finished unit as it was recorded."""

    unit: str
    identity: str
    table: pd.DataFrame | None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def _unit_file_name(unit: str) -> str:
    """A safe, unique file name for any unit name: a readable prefix plus a hash of the full name."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", unit)[:40].lstrip(".") or "unit"
    return f"{readable}-{hashlib.sha256(unit.encode('utf-8')).hexdigest()[:16]}{_SUFFIX}"


def _bytes_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def parts_directory(out: str | Path) -> Path:
    """The hidden folder beside `out` that holds its journal: `.{out.name}.parts/`."""
    out = Path(out)
    return out.parent / f".{out.name}.parts"


def steps_directory(parts: Path, unit: str) -> Path:
    """The steps folder of `unit` in the parts folder `parts` (``steps/{unit file}/``)."""
    return Path(parts) / "steps" / _unit_file_name(unit).removesuffix(_SUFFIX)


class Journal:
    """Finished units of one output file, persisted in `.{out.name}.parts/` beside it; `force=True` empties
    it.

    The directory is created by the first `put`, so a run that fails on bad input before finishing a unit
    leaves nothing beside the output.
    """

    def __init__(self, out: str | Path, force: bool = False) -> None:
        self.directory = parts_directory(out)
        if force and self.directory.exists():
            shutil.rmtree(self.directory)
        if self.directory.is_dir():
            remove_dead_temporaries(self.directory)  # left by writers killed mid-put

    def _path(self, unit: str) -> Path:
        return self.directory / _unit_file_name(unit)

    def steps_directory(self, unit: str) -> Path:
        """Where the unit's finished steps wait while it runs (:class:`probe.runs.steps.StepStore`); removed
        once the unit is recorded."""
        return steps_directory(self.directory, unit)

    @staticmethod
    def _read_meta(archive) -> dict:
        return json.loads(bytes(archive[_META]).decode("utf-8"))

    def _recorded_identity(self, unit: str) -> str | None:
        path = self._path(unit)
        try:
            with np.load(path, allow_pickle=False) as archive:
                meta = self._read_meta(archive)
        except _UNREADABLE:
            return None
        return meta["identity"] if meta.get("unit") == unit else None

    def get(self, unit: str, identity: str) -> JournalEntry | None:
        """The unit as recorded, only if it was finished with exactly this identity; otherwise None."""
        path = self._path(unit)
        try:
            with np.load(path, allow_pickle=False) as archive:
                meta = self._read_meta(archive)
                if meta.get("unit") != unit or meta.get("identity") != identity:
                    return None
                table = None
                if _TABLE in archive.files:
                    table = pd.read_parquet(io.BytesIO(bytes(archive[_TABLE])))
                arrays = {name: archive[name] for name in archive.files if name not in (_META, _TABLE)}
        except _UNREADABLE:
            return None
        return JournalEntry(unit=unit, identity=identity, table=table, arrays=arrays)

    def stale(self, unit: str, identity: str) -> bool:
        """True when the unit was recorded with another identity (its options changed; it will be
        recomputed)."""
        recorded = self._recorded_identity(unit)
        return recorded is not None and recorded != identity

    def put(self, unit: str, identity: str, table: pd.DataFrame | None = None,
            arrays: Mapping[str, np.ndarray] | None = None) -> None:
        """Record a finished unit atomically (replacing any earlier record of the same unit)."""
        members: dict[str, np.ndarray] = {}
        for name, value in (arrays or {}).items():
            if name in (_META, _TABLE):
                raise ValueError(f"journal array name {name!r} is reserved")
            array = np.asarray(value)
            if array.dtype.hasobject:
                raise ValueError(f"journal array {name!r} holds Python objects; only numeric/string arrays "
                                 "are stored")
            members[name] = array
        if table is not None:
            buffer = io.BytesIO()
            table.to_parquet(buffer)
            members[_TABLE] = _bytes_array(buffer.getvalue())
        members[_META] = _bytes_array(json.dumps({"unit": unit, "identity": identity}).encode("utf-8"))

        self.directory.mkdir(parents=True, exist_ok=True)

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as stream:
                np.savez(stream, **members)

        write_atomically(self._path(unit), write)
        steps = self.steps_directory(unit)
        shutil.rmtree(steps, ignore_errors=True)  # the unit is whole: its steps are done
        with contextlib.suppress(OSError):  # and the steps folder with them once no unit is running
            steps.parent.rmdir()

    def writing(self):
        """A context manager holding the output's writer lock (``writer.lock`` in the journal's folder): the
        runner re-reads, merges and replaces the output inside it, so concurrent runs into one output keep
        each other's rows."""
        return exclusive(self.directory / _LOCK)

    def units(self) -> list[tuple[str, str]]:
        """(unit, identity) of every recorded unit, sorted by unit name."""
        found = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            if is_temporary(path):
                continue
            try:
                with np.load(path, allow_pickle=False) as archive:
                    meta = self._read_meta(archive)
            except _UNREADABLE:
                continue
            found.append((meta["unit"], meta["identity"]))
        return sorted(found)


__all__ = ["Journal", "JournalEntry", "file_hash", "identity_hash", "parts_directory", "pid_alive",
           "steps_directory"]
