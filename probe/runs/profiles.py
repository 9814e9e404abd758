"""`probe profile` on the runner (:func:`probe.runs.runner.run`): one unit per model and length.

:class:`ProfileTask` profiles every head of one model at one length per unit
(:func:`probe.heads.profile.head_profiles`); the payload is the length (None: the default, capped by the
model's positions). Its identity (:func:`profile_identity`) is everything that determines the unit's rows —
the profile's settings (:class:`~probe.heads.profile.ProfileConfig` at that length), the inputs (``--random
N`` or the content hash of the text), the model's name and the content hash of its weights, and the dtype —
computed before anything is loaded: a rerun with the same flags reuses the journalled unit, one with other
flags recomputes it.

Inside a unit each run of consecutive inputs (:func:`probe.heads.profile.inputs_per_step`; the untrained
twins' runs too) is a resumable step (:class:`probe.runs.steps.StepStore`): a SIGKILL loses at most the step
in flight, and the rerun's table equals an uninterrupted run's (a step read back is bit for bit the sums it
computed; the row sample of every input is drawn again from the seed). The task is picklable: it travels to
Ray workers (``--ray``).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from probe import models
from probe.errors import ProbeError
from probe.hashing import identity_hash
from probe.heads.profile import ProfileConfig, head_profiles, random_inputs, span_summary, text_inputs
from probe.heads.tables import save_table
from probe.runs.checkpoints import Checkpoint, checkpoint_revision
from probe.runs.hub import load_checkpoint
from probe.runs.journal import parts_directory
from probe.runs.steps import unit_steps
from probe.runs.units import Out, Unit, UnitOutput, UnitResult


def profile_units(model: str, lengths: tuple[int, ...] | None) -> list[Unit]:
    """One unit per length (key ``MODEL@LENGTH``; None: one unit at the default length, key ``MODEL``).

    Examples
    --------
    >>> [unit.key for unit in profile_units("zoo:induction", (32, 64))]
    ['zoo:induction@32', 'zoo:induction@64']
    """
    checkpoint = Checkpoint(model)
    if lengths is None:
        return [Unit(key=model, group=checkpoint, payload=None)]
    return [Unit(key=f"{model}@{length}", group=checkpoint, payload=length) for length in lengths]


def profile_identity(config: ProfileConfig, length: int | None, inputs: str, model: str,
                     revision: str | None, dtype: str | None) -> str | None:
    """The identity of one unit's rows (None when the weights' revision is unknown before loading).

    Examples
    --------
    >>> a = profile_identity(ProfileConfig(), 64, "random:2", "zoo:induction", "abc", None)
    >>> a == profile_identity(ProfileConfig(), 32, "random:2", "zoo:induction", "abc", None)
    False
    """
    if revision is None:
        return None
    return identity_hash({"profile": asdict(config), "length": length, "inputs": inputs, "model": model,
                          "revision": revision, "dtype": dtype})


@dataclass(frozen=True)
class ProfileTask:
    """Profile one model at one length per unit (module doc). `text`: the text to cut into inputs, else
    `random` inputs of random tokens; `out`: the table, beside which each unit's steps are journalled (None:
    nothing kept); `progress`: in-process, lines and forwards counted on stderr."""

    config: ProfileConfig
    text: str | None = None
    random: int | None = None
    device: str = "cpu"
    dtype: str | None = None
    placement: Mapping[str, object] = field(default_factory=dict)  # models.load's engine / device_map
    out: str | None = None
    progress: bool = False

    @property
    def inputs(self) -> str:
        """What the inputs are, for the identity: ``random:N`` or the text's SHA-256."""
        if self.text is None:
            return f"random:{self.random}"
        return "text:" + hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def identity(self, unit: Unit) -> str | None:
        checkpoint: Checkpoint = unit.group
        return profile_identity(self.config, unit.payload, self.inputs, checkpoint.spec,
                                checkpoint_revision(checkpoint), self.dtype)

    def load(self, group: Checkpoint):
        return load_checkpoint(group, self.device, self.dtype, **self.placement)

    def _say(self, message: str, end: str = "\n") -> None:
        if self.progress:  # in-process: at once
            print(f"probe profile: {message}", end=end, file=sys.stderr, flush=True)

    def compute(self, state, unit: Unit) -> UnitOutput:
        if state.kind == models.ModelKind.PROTEIN_MLM and self.text is not None:
            raise ProbeError(f"{state.name} is a protein model: use --random N instead of --text-file")
        seq_len = unit.payload if unit.payload is not None else min(self.config.seq_len, state.max_tokens)
        state.check_length(seq_len, f"--seq-len {seq_len}")
        config = replace(self.config, seq_len=seq_len)
        if self.text is not None:
            inputs = text_inputs(state, self.text, seq_len)
        else:
            inputs = random_inputs(state, self.random, seq_len, config.seed)  # streamed: made one at a time
        identity = profile_identity(self.config, unit.payload, self.inputs, unit.group.spec, state.revision,
                                    self.dtype)
        store = unit_steps(self.out, unit.key, identity, self._say)
        kept = (f"each finished run of inputs is journalled in {parts_directory(self.out)}/, where a rerun "
                "resumes" if store is not None else "nothing is kept: an interrupted run starts again")
        self._say(f"{unit.key}: {len(inputs)} input(s) of ≤ {seq_len} tokens, {1 + config.twins} forward(s) "
                  f"each; {kept}")

        shown = [0.0]

        def progress(done: int, total: int) -> None:  # inputs × (1 + untrained twins), twice a second
            if done == total or time.perf_counter() - shown[0] > 0.5:
                shown[0] = time.perf_counter()
                self._say(f"{unit.key}: forward {done}/{total}", end="\n" if done == total else "\r")

        table = head_profiles(state, inputs, config, progress if self.progress else None,
                              memo=store.memo if store is not None else None)
        longest = table["seq_len"].iloc[0]
        notes = [f"{unit.key}: {span_summary(table)} over {len(inputs)} inputs of ≤ {longest} tokens"]
        if store is not None and store.read:
            notes.append(f"{unit.key}: {store.read} step(s) read back from the interrupted run, "
                         f"{store.written} computed")
        return UnitOutput(table=table, identity=identity, notes=notes)

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        return result.table

    def owners(self, table: pd.DataFrame) -> pd.Series:
        return table["model"].astype(str) + "@" + table["seq_len"].astype(str)


def profile_output(path: Path, force: bool = False) -> Out:
    """Where ``probe profile --out`` writes: the rows of this run's units, in unit order (an earlier table is
    replaced, as before the runner)."""

    def write(table: pd.DataFrame, finished) -> dict:
        return {path: lambda tmp: save_table(table, tmp)}

    def written(table: pd.DataFrame, finished) -> list[str]:
        return [f"wrote {path} ({len(table)} rows, {len(finished)} model length(s))"]

    return Out(path=path, write=write, force=force, written=written, command="probe profile",
               noun="profile")


__all__ = ["ProfileTask", "profile_identity", "profile_output", "profile_units"]
