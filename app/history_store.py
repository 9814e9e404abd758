"""The training history the dashboard shows (`probe app --history FILE`): the table `probe history` wrote,
read once, its timeline (probe.views.timeline) and the checkpoints it measured that this machine holds — each
served as a model of its own, so the history panel's slider moves the whole page to a checkpoint. A control's
history (`--history-control`: the 1-layer twin) is drawn beside it in the timeline; its checkpoints are not
served."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from probe.errors import ProbeError
from probe.naming import display_name
from probe.runs.checkpoints import local_directory
from probe.runs.history import read_history
from probe.views.timeline import TimelineView, show_history


class HistoryStore:
    """One model's training history (or none: every method then says so).

    Parameters
    ----------
    path : str or None
        A table written by ``probe history --out`` (.csv or .parquet); one model's history (another table is
        refused in one line). Its model is a run folder or zoo:NAME whose ``step-N/`` folders are the
        checkpoints.
    control : str or None
        Another model's history (the 1-layer control), drawn beside it in the ICL-score and loss panels; the
        same model's is refused.
    """

    def __init__(self, path: str | None, control: str | None = None) -> None:
        self.view: TimelineView | None = None
        self.specs: tuple[str | None, ...] = ()  # [checkpoint] the model spec of each checkpoint, or None
        if path is None:
            if control is not None:
                raise ProbeError("--history-control is drawn beside a training history: give --history too")
            return
        table = read_history(Path(path).expanduser())
        twin = None if control is None else read_history(Path(control).expanduser())
        view = show_history(table, control=twin)  # one model's history: several are refused by show_history
        run = local_directory(view.model) or Path(view.model).expanduser()  # zoo:NAME: its folder
        # the page names the runs as it names models: never by a path of this machine (issue 44)
        twin = None if view.control is None else replace(view.control, model=display_name(view.control.model))
        self.view = replace(view, model=display_name(view.model), control=twin)
        self.specs = tuple(str(run / name) if (run / name / "config.json").is_file() else None
                           for name in self.view.checkpoints)

    @property
    def served(self) -> tuple[str, ...]:
        """The checkpoints' model specs this machine holds (in step order): the models the app adds."""
        return tuple(spec for spec in self.specs if spec is not None)

    def index_of(self, spec: str | None) -> int | None:
        """The checkpoint index of the model `spec` (None: not one of this history's checkpoints)."""
        return self.specs.index(spec) if spec is not None and spec in self.specs else None

    def spec_at(self, index: int) -> str:
        """The model spec of checkpoint `index`; ProbeError where this machine does not hold it."""
        if self.view is None or not 0 <= index < len(self.specs):
            raise ProbeError(f"no checkpoint {index} in the history")
        spec = self.specs[index]
        if spec is None:
            raise ProbeError(f"{self.view.checkpoints[index]} of {display_name(self.view.model)} is not on "
                             "this machine: the timeline shows its scores, the page cannot open it")
        return spec

    def timeline(self, index: int | None, theme: str = "light") -> str:
        """The timeline's SVG, the checkpoint `index` marked (None: no mark), in the page's theme."""
        if self.view is None:
            return ""
        marked = int(self.view.steps[index]) if index is not None else None
        return replace(self.view, marked=marked, theme=theme).svg()
