"""The label tables the dashboard shows: computed in this process (by the background queue), the user's
--labels table, or the table shipped with a model — and the structure-set summary of the protein panel."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from probe import models
from probe.errors import ProbeError
from probe.heads.label import LabelConfig, label_model
from probe.heads.tables import rows_of_model
from probe.naming import display_name
from probe.untrained import DEFAULT_TWINS

from .config import AppConfig
from .facts import ModelFacts
from .jobs import LabelJob, LabelQueue, LabelRun
from .tables import one_length, read_heads_summary, read_labels, shipped_labels


def label_config(examples: int) -> LabelConfig:
    """The LabelConfig the app labels with (and its shipped all-MiniLM-L6-v2 table was computed with): the
    default configuration, but `examples` probe examples, no ablation column (it costs ~10 forwards per
    labelled head; `probe label` computes it) and, as `probe label`'s default ``--control untrained``,
    :data:`~probe.untrained.DEFAULT_TWINS` untrained twins: a label must also beat their heads."""
    return LabelConfig(examples=examples, ablate="none", twins=DEFAULT_TWINS)


def label_with_app_config(examples: int) -> LabelRun:
    """A background job's run: :func:`probe.heads.label.label_model` with `label_config(examples)`."""
    def run(loaded: models.LoadedModel, progress: Callable[[int, int], None]) -> pd.DataFrame:
        return label_model(loaded, label_config(examples), progress=progress)
    return run


class LabelStore:
    """Every served model's label table, and the background jobs that compute the missing ones."""

    def __init__(self, facts: ModelFacts, config: AppConfig, jobs_queue: Callable[..., LabelQueue],
                 labels: pd.DataFrame | None = None) -> None:
        self.facts, self.config = facts, config
        self._file = labels if labels is not None else (read_labels(config.labels) if config.labels else None)
        self._summary = read_heads_summary(config.heads_summary) if config.heads_summary else None
        self._computed: dict[str, pd.DataFrame] = {}
        self._shipped = {spec: table for spec in facts.specs
                         if (table := shipped_labels(spec)) is not None}  # tables shipped with the models
        self.jobs = jobs_queue(on_done=self._computed.__setitem__)

    def table(self, spec: str) -> pd.DataFrame | None:
        """The labels of one model: computed in this process, else its rows of the --labels table, else the
        table shipped with it (a bundled organism's labels.csv, all-MiniLM-L6-v2's in probe/data/labels)."""
        if spec in self._computed:
            return self._computed[spec]
        mine = self._file_rows_or_none(spec)
        return mine if mine is not None else self._shipped.get(spec)

    def shipped(self, spec: str) -> bool:
        """Whether `spec` came with a label table (read at start-up; nothing to compute)."""
        return spec in self._shipped

    def check_file(self) -> None:
        """Refuse (one-line ProbeError) a --labels table that holds no row of any served model, or names a
        head its model lacks: it would be another model's labels shown as these (called once the models are
        loaded)."""
        if self._file is None:
            return
        usable = self.facts.registry.usable_specs
        if "model" not in self._file.columns and len(usable) != 1:
            raise ProbeError("--labels: the table has no model column, so it cannot be matched to one of "
                             f"{len(usable)} served models; pass a table written by `probe label`")
        refusals = []
        for spec in usable:
            try:
                self._file_rows(spec)
                return
            except ProbeError as error:
                refusals.append(str(error))
        if len(refusals) == 1:
            raise ProbeError(f"--labels: {refusals[0]}")
        if refusals:
            raise ProbeError(f"--labels: the table holds no row of any served model "
                             f"({', '.join(map(display_name, usable))}); pass the table `probe label` wrote "
                             "for one of them")

    def _file_rows(self, spec: str) -> pd.DataFrame | None:
        """The --labels rows of `spec` (None without a --labels table); ProbeError when it holds none."""
        table = self._file
        if table is None:
            return None
        loaded = self.facts.model(spec)
        return one_length(rows_of_model(table, spec, loaded.revision, (loaded.n_layers, loaded.n_heads)))

    def _file_rows_or_none(self, spec: str) -> pd.DataFrame | None:
        try:
            return self._file_rows(spec)
        except ProbeError:
            return None  # another served model's rows (check_file refused a table of no served model)

    def heads_summary(self, spec: str) -> pd.DataFrame | None:
        """The structure-set summary (`probe contacts --heads-summary`) of `spec`: matched by the model name
        or revision it records (a summary that names no model is shown for the only protein model)."""
        summary = self._summary
        if summary is None:
            return None
        named = {str(summary.attrs.get(key)) for key in ("model", "revision") if summary.attrs.get(key)}
        if named:
            return summary if spec in named or self.facts.model(spec).revision in named else None
        proteins = [s for s in self.facts.specs if self.facts.is_protein(s)]
        return summary if proteins == [spec] else None

    def start(self, spec: str, run: LabelRun | None = None) -> LabelJob:
        """Queue labelling every head of `spec` for the background worker (one job at a time, each holding the
        inference gate only between probe batches, so views go first); returns the job to poll."""
        return self.jobs.start(spec, run or label_with_app_config(self.config.label_examples))

    def label_missing(self, report: Callable[[str], None] | None = None) -> list[str]:
        """Queue every text model that has no labels (none shipped, none in --labels) for background
        labelling; the specs queued. `report` gets one-line progress (probe app prints it in the terminal)."""
        if report is not None:
            self.jobs.report = report
        say = self.jobs.report
        usable = self.facts.registry.usable_specs
        missing = [spec for spec in usable if not self.facts.is_protein(spec) and self.table(spec) is None
                   and not self.facts.label_refusal(spec)]
        shipped = [spec for spec in usable if self.shipped(spec)]
        if say is not None and shipped:
            say(f"probe app: labels shipped with {', '.join(map(display_name, shipped))} (nothing to "
                "compute)")
        if say is not None and missing:
            say(f"probe app: labelling {', '.join(map(display_name, missing))} in the background; the page "
                "is usable meanwhile")
        for spec in usable:
            if say is not None and self.facts.label_refusal(spec):
                say("probe app: " + self.facts.label_refusal(spec))
        started = []
        for spec in missing:
            try:
                self.start(spec)
            except ProbeError as error:  # past --max-jobs: the rest waits for a click on 'Label heads'
                if say is not None:
                    say(f"probe app: {display_name(spec)} not labelled at start-up: {error}")
                continue
            started.append(spec)
        return started
