"""The steps of one unit, journalled as they finish: ``probe label`` resumes inside a model.

A unit of :func:`probe.runs.runner.run` (one model of ``probe label``) can take many minutes; its journal
entry (:mod:`probe.runs.journal`) is written only when it finishes. :class:`StepStore` keeps what the unit has
done so far: :func:`probe.heads.label.label_model` names each resumable step — one probe batch's forward (of
the model or of an untrained twin), one generated type's run at one length, one type's ablation — and hands
its result to :meth:`StepStore.memo`, which writes it atomically (:func:`probe.runs.atomic.write_atomically`)
before the run goes on, or reads it back when an earlier run of the same unit with the same identity finished
it. A SIGKILL loses at most the step in flight; the rerun's table equals an uninterrupted run's (a step read
back is bit-for-bit what it computed).

Where: ``.{out.name}.parts/steps/{unit}/{identity}/`` beside the output
(:meth:`probe.runs.journal.Journal.steps_directory`), one file per step: a safetensors file (no pickle) of the
step's flat dict of tensors, or a parquet file of its table. The identity is the unit's (the weights' hash
and every option that changes its rows), so a step is never read back for other options or weights; the
unit's folder is removed when its journal entry is written (:meth:`probe.runs.journal.Journal.put`) and by
``--force``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from probe.runs.atomic import remove_dead_temporaries, write_atomically
from probe.runs.journal import parts_directory, steps_directory

_TENSORS, _TABLE = ".safetensors", ".parquet"
# what reading a damaged step file can raise: the step is then computed again (and the file replaced)
_UNREADABLE = (OSError, ValueError, SafetensorError)


def _file_stem(key: str) -> str:
    """A safe, unique file name for a step key: a readable prefix plus a hash of the whole key."""
    readable = re.sub(r"[^A-Za-z0-9_.@-]", "_", key)[:60].lstrip(".") or "step"
    return f"{readable}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]}"


class StepStore:
    """The finished steps of one unit with one identity, in `directory` (created by the first step written).

    Parameters
    ----------
    directory : Path
        The unit's steps folder (:meth:`probe.runs.journal.Journal.steps_directory`).
    identity : str
        The unit's identity; steps of other identities (other options, other weights) are never read.

    Attributes
    ----------
    read, written : int
        Steps read back and steps computed and written by this store.

    Examples
    --------
    >>> import tempfile, torch
    >>> store = StepStore(Path(tempfile.mkdtemp()), identity="abc")
    >>> store.memo("model/natural@64/rows0-8", lambda: {"x": torch.ones(2)})  # computed, then written
    {'x': tensor([1., 1.])}
    >>> store.memo("model/natural@64/rows0-8", lambda: 1 / 0)  # read back: nothing is computed
    {'x': tensor([1., 1.])}
    >>> store.read, store.written, StepStore(store.directory.parent, "abc").finished()
    (1, 1, 1)
    """

    def __init__(self, directory: Path, identity: str) -> None:
        self.directory = Path(directory) / identity[:32]
        self.read = self.written = 0
        if self.directory.is_dir():
            remove_dead_temporaries(self.directory)  # left by a run killed mid-write

    def finished(self) -> int:
        """How many steps an earlier run of this unit left here."""
        if not self.directory.is_dir():
            return 0
        return sum(1 for path in self.directory.iterdir() if path.suffix in (_TENSORS, _TABLE)
                   and not path.name.startswith("."))

    def _path(self, key: str, suffix: str) -> Path:
        return self.directory / f"{_file_stem(key)}{suffix}"

    def _load(self, key: str):
        tensors, table = self._path(key, _TENSORS), self._path(key, _TABLE)
        try:
            if tensors.is_file():
                with safe_open(str(tensors), framework="pt") as handle:  # one open: metadata, then tensors
                    meta = dict(handle.metadata() or {})
                    if meta.get("key") == key:
                        order = meta["order"].split("\n") if meta.get("order") else list(handle.keys())
                        return {name: handle.get_tensor(name) for name in order}
            if table.is_file():
                frame = pd.read_parquet(table)
                if frame.attrs.get("step") == key:
                    frame.attrs.pop("step")
                    return frame
        except _UNREADABLE:
            return None
        return None

    def _save(self, key: str, value) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if isinstance(value, pd.DataFrame):
            frame = value.copy()
            frame.attrs = {**value.attrs, "step": key}
            write_atomically(self._path(key, _TABLE), lambda tmp: frame.to_parquet(tmp))
            return
        if not isinstance(value, dict) or not all(isinstance(t, torch.Tensor) for t in value.values()):
            raise TypeError(f"step {key!r}: a step's result is a dict of tensors or a DataFrame")
        tensors = {name: tensor.detach().cpu().contiguous().clone() for name, tensor in value.items()}
        metadata = {"key": key, "order": "\n".join(tensors)}
        write_atomically(self._path(key, _TENSORS), lambda tmp: save_file(tensors, str(tmp), metadata))

    def memo(self, key: str, compute: Callable[[], object]):
        """What an earlier run recorded under `key` with this identity, else ``compute()`` (recorded
        atomically before it is returned). The :data:`probe.heads.label.config.Memo` of ``probe label``."""
        kept = self._load(key)
        if kept is not None:
            self.read += 1
            return kept
        value = compute()
        try:
            self._save(key, value)
        except OSError:  # a folder that cannot be written (a Ray node without the output's disk) costs only
            return value  # the resumption: the run goes on
        self.written += 1
        return value


def unit_steps(out, key: str, identity: str | None, say: Callable[[str], None]) -> StepStore | None:
    """The journalled steps of unit `key` whose results have `identity`, beside the output `out` — None
    without an output or where the weights' revision is unknown (nothing can be kept) — and, where an
    interrupted run left finished steps, the one line that says they are read back.

    Examples
    --------
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "table.csv"
    >>> unit_steps(None, "zoo:induction", "abc", print) is None
    True
    >>> unit_steps(out, "zoo:induction", "abc", print).memo("one", lambda: {"x": torch.ones(1)})
    {'x': tensor([1.])}
    >>> store = unit_steps(out, "zoo:induction", "abc", lambda line: print(line.split(" are ")[0]))
    zoo:induction: resuming: 1 finished step(s) of an interrupted run
    """
    if out is None or identity is None:
        return None
    store = StepStore(steps_directory(parts_directory(out), key), identity)
    if store.finished():
        say(f"{key}: resuming: {store.finished()} finished step(s) of an interrupted run are read back from "
            f"{parts_directory(out)}/")
    return store
