"""The unit functions of `probe label` and `probe contacts`, as tasks :func:`probe.runs.ray_executor.run_units` runs
in-process or on Ray workers.

* :class:`LabelTask`: one unit = one checkpoint, a (model, revision) :class:`Checkpoint`; the worker loads it and
  calls ``probe.heads.label.label_model`` — the function `probe label` calls — and returns its table with two more
  columns, ``checkpoint`` (the revision as the user named it) and ``step`` (its training step when known).
* :class:`ContactsTask`: one unit = one FASTA record or one structure chain (:class:`ContactUnit`); every unit
  shares one model (loaded once per worker). The structure is read inside the worker, so an unreadable file fails
  only its unit. Returns the per-head table and the record's arrays (contact map, true map, precision).

Everything here is picklable: tasks and payloads travel to Ray workers; models never do.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from probe.errors import ProbeError, first_line
from probe.runs.ray_executor import Unit, UnitOutput, UnitResult

_STEP = re.compile(r"(?:^|[^a-z])(?:step|checkpoint|global_step|iter)[-_]?(\d+)$", re.IGNORECASE)


def checkpoint_step(name: str | None, directory: Path | None = None) -> int | None:
    """The training step of a checkpoint: card.json's "step" in its directory (what probe.zoo.train writes), else
    the number in a name like step-50, step143000 (Pythia's branches) or checkpoint-500 (HF Trainer); else None."""
    if directory is not None and (directory / "card.json").is_file():
        try:
            step = json.loads((directory / "card.json").read_text()).get("step")
        except (OSError, ValueError):
            step = None
        if isinstance(step, int):
            return step
    match = _STEP.search(Path(name).name) if name else None
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Checkpoint:
    """One model to label: `spec` as for --model, `revision` a hub branch/tag/commit or a subdirectory of a local
    `spec` (None: the model as is), `step` its training step when known."""

    spec: str
    revision: str | None = None
    step: int | None = None

    @property
    def key(self) -> str:
        return self.spec if self.revision is None else f"{self.spec}@{self.revision}"

    @property
    def name(self) -> str:
        """The checkpoint column: the revision, or the directory's name for a plain model."""
        return self.revision if self.revision is not None else Path(self.spec.rstrip("/")).name


def local_revision(spec: str, revision: str) -> Path | None:
    """spec/revision when `spec` is a local directory (or zoo:NAME) holding that checkpoint directory."""
    from probe import models

    try:
        base = Path(models.resolve(spec)).expanduser()
    except ProbeError:
        return None
    candidate = base / revision
    return candidate if (candidate / "config.json").is_file() else None


def make_checkpoint(spec: str, revision: str | None = None) -> Checkpoint:
    """A Checkpoint with its step read from its directory or its name."""
    directory = local_revision(spec, revision) if revision is not None else None
    if revision is None:
        local = Path(spec).expanduser()
        directory = local if local.is_dir() else None
    return Checkpoint(spec, revision, checkpoint_step(revision or spec, directory))


def load_checkpoint(checkpoint: Checkpoint, device: str = "cpu", dtype: str | None = None):
    """probe.models.load for one checkpoint. A revision is a subdirectory of a local spec, or a hub revision
    (downloaded with huggingface_hub to the usual cache). The LoadedModel keeps the user's spec as its name."""
    from probe import models

    if checkpoint.revision is None:
        return models.load(checkpoint.spec, device=device, dtype=dtype)
    directory = local_revision(checkpoint.spec, checkpoint.revision)
    if directory is not None:
        return replace(models.load(str(directory), device=device, dtype=dtype), name=checkpoint.spec)
    if "revision" in inspect.signature(models.load).parameters:
        return models.load(checkpoint.spec, device=device, dtype=dtype, revision=checkpoint.revision)
    if Path(checkpoint.spec).expanduser().exists() or checkpoint.spec.startswith(models.ZOO_PREFIX):
        raise ProbeError(f"{checkpoint.spec} has no checkpoint directory {checkpoint.revision!r} (with a "
                         "config.json); list its step-N folders or pass --models-file")
    try:
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(checkpoint.spec, revision=checkpoint.revision))
    except Exception as error:  # noqa: BLE001 - hub errors (offline, unknown revision) come in many types
        raise ProbeError(f"cannot fetch revision {checkpoint.revision!r} of {checkpoint.spec}: "
                         f"{first_line(error)}") from None
    loaded = models.load(str(path), device=device, dtype=dtype)
    return replace(loaded, name=checkpoint.spec, revision=path.name)  # snapshots/<commit hash>


@dataclass(frozen=True)
class LabelTask:
    """Label every head of one checkpoint per unit (`probe label`'s work, split by checkpoint)."""

    config: object  # probe.heads.label.LabelConfig
    device: str = "cpu"
    dtype: str | None = None

    def load(self, group: Checkpoint):
        return load_checkpoint(group, self.device, self.dtype)

    def run(self, state, payload: Checkpoint) -> UnitOutput:
        from probe.heads.label import label_model

        table = label_model(state, self.config)
        table["checkpoint"] = payload.name
        table["step"] = pd.array([payload.step] * len(table), dtype="Int64")
        return UnitOutput(table=table)


# ---------------------------------------------------------------------------------------------------------------
# Contacts: the unit function is probe.proteins.sets.analyse_unit (what `probe contacts` calls per unit)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContactsTask:
    """`probe contacts`' work, one record or structure chain (a probe.proteins.sets.UnitSpec) per unit; every unit
    shares the model named by the group, loaded once per worker. Returns contact_sets.pack's (table, arrays)."""

    options: object  # probe.proteins.sets.ContactOptions (as the command resolved it)
    device: str = "cpu"
    dtype: str | None = None

    def load(self, group: str):
        from probe import models

        loaded = models.load(group, device=self.device, dtype=self.dtype)
        models.require_protein(loaded, "probe contacts")
        return loaded

    def run(self, state, payload) -> UnitOutput:
        from probe.proteins import sets as contact_sets

        table, arrays = contact_sets.pack(contact_sets.analyse_unit(state, payload, self.options))
        return UnitOutput(table=table, arrays=arrays)


def contact_work(model: str, specs) -> list[Unit]:
    """One distributed unit per contact_sets.UnitSpec (same key)."""
    return [Unit(key=spec.key, group=model, payload=spec) for spec in specs]


def run_contact_units(args, loaded, units, options, outcomes: dict, journal=None, identities: dict | None = None,
                      report=None) -> list[tuple[str, str]]:
    """`probe contacts --ray`: the units not yet in `outcomes` ({key: UnitOutcome}, filled in place as units
    finish, so the command's Ctrl-C handler writes what finished) on Ray workers, each journalled as it arrives
    and reported with `report(id, outcome)`. Failed units are printed, listed in OUT.errors.csv beside the first
    output, and returned as [(id, one-line error)]; the run goes on without them."""
    import sys

    from probe.proteins import sets as contact_sets
    from probe.runs.ray_executor import errors_table, ray_options, run_units

    todo = [spec for spec in units if spec.key not in outcomes]
    specs = {spec.key: spec for spec in todo}
    failed: list[tuple[str, str]] = []

    def on_result(result: UnitResult) -> None:
        spec = specs[result.key]
        if not result.ok:
            failed.append((spec.id, result.error))
            print(f"probe contacts: {spec.id}: {result.error}", file=sys.stderr)
            return
        if journal is not None:
            journal.put(spec.key, identities[spec.key], result.table, result.arrays)
        outcomes[spec.key] = contact_sets.unpack(spec, result.table, result.arrays)
        if report is not None:
            report(spec.id, outcomes[spec.key])

    results = run_units(contact_work(loaded.name, todo), ContactsTask(options, args.device, args.dtype),
                        ray=ray_options(args), on_result=on_result, description="contacts")
    first = next((getattr(args, name) for name in ("out", "heads_out", "chains_out", "heads_summary")
                  if getattr(args, name, None)), None)
    if failed and first:
        errors = Path(first).with_name(Path(first).stem + ".errors.csv")
        errors_table(results).to_csv(errors, index=False)
        print(f"probe contacts: {len(failed)} unit(s) failed; listed in {errors}", file=sys.stderr)
    return failed
