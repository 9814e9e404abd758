"""transformers' own output, one home: what the CLI and the library calls do with its warnings, progress bars
and load report.

* :func:`quiet_process` — the CLI's setting for the whole process (``probe`` calls it before a command runs):
  transformers' verbosity at "error" and its progress bars off, through its environment variables when it is
  not imported yet (a command imports it inside ``run()``), else through its logging API.
* :func:`quiet_import` — tqdm's note when transformers is first imported in a notebook without ipywidgets,
  ignored (probe's lazy attributes import through it).
* :func:`transformers_quiet` — the same for one library call (:func:`probe.models.load`): inside,
  transformers' progress bars are off and its log records are collected instead of printed (its own switches,
  ``transformers.utils.logging``: ``disable_progress_bar``, ``disable_default_handler``, ``add_handler``); on
  exit everything is as it was. The caller summarises what was collected in one line
  (:func:`load_summary`); ``verbose=True`` leaves transformers to print as it does.

What a notebook showed before (issue 44): a TqdmWarning (tqdm.auto without ipywidgets), two "Loading weights"
bars, "This checkpoint seem corrupted" and a LOAD REPORT table of the masked-LM head's newly initialised
weights — now one line naming the weights, or nothing when the checkpoint matches the class.

Thread safety: the dashboard loads models from worker threads. The switches are process-wide, so the first
caller to enter turns them and the last to leave restores them (a counter under a lock); records go to the
collector of the thread that logged them, and a thread outside any quiet call logs as before.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

_LOCK = threading.Lock()
_LOCAL = threading.local()
_STATE: dict = {"depth": 0}
_PROCESS = {"quiet": False}  # quiet_process() was called: the CLI, whose users pass no verbose=True


class _Collector(logging.Handler):
    """transformers' records of the threads inside :func:`transformers_quiet`, kept for the summary; another
    thread's records are printed as transformers' default handler would (stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.fallback = logging.StreamHandler(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        kept = getattr(_LOCAL, "records", None)
        if kept is not None:
            kept.append(record)
        else:
            self.fallback.handle(record)


def quiet_process() -> None:
    """Keep stderr for probe's own progress and messages for the rest of the process: transformers'
    warnings and progress bars off (the CLI)."""
    _PROCESS["quiet"] = True
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    if "transformers" in sys.modules:
        hf_logging = sys.modules["transformers"].utils.logging
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


@contextmanager
def quiet_import() -> Iterator[None]:
    """Import the heavy stack with tqdm's note at its first import in a Jupyter kernel without ipywidgets
    ignored ("IProgress not found", a TqdmWarning: transformers imports ``tqdm.auto`` for the progress bars
    that probe turns off) — ``warnings.catch_warnings``, nothing patched. probe's lazy attributes
    (``probe.models``, ``probe.show``, …) import through it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        yield


def _enter() -> None:
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    with _LOCK:
        _STATE["depth"] += 1
        if _STATE["depth"] > 1:
            return
        root = logging.getLogger("transformers")
        before = list(root.handlers)
        hf_logging.disable_default_handler()
        collector = _Collector()
        hf_logging.add_handler(collector)
        _STATE.update(collector=collector, removed=[h for h in before if h not in root.handlers],
                      propagate=root.propagate, bars=hf_logging.is_progress_bar_enabled(),
                      hub_bars_off=hub_utils.are_progress_bars_disabled())
        hf_logging.disable_propagation()
        hf_logging.disable_progress_bar()
        # accelerate's own warnings while transformers places a model ("Some parameters are on the meta
        # device ...") are collected with transformers' records
        accelerate = logging.getLogger("accelerate")
        accelerate.addHandler(collector)
        _STATE["accelerate_propagate"], accelerate.propagate = accelerate.propagate, False


def _leave() -> None:
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    with _LOCK:
        _STATE["depth"] -= 1
        if _STATE["depth"] > 0:
            return
        collector = _STATE.pop("collector")
        hf_logging.remove_handler(collector)
        accelerate = logging.getLogger("accelerate")
        accelerate.removeHandler(collector)
        accelerate.propagate = _STATE.pop("accelerate_propagate")
        if _STATE.pop("removed"):
            hf_logging.enable_default_handler()
        if _STATE.pop("propagate"):
            hf_logging.enable_propagation()
        if _STATE.pop("bars"):
            hf_logging.enable_progress_bar()  # turns the hub's on too: put it back as it was
            if _STATE["hub_bars_off"]:
                hub_utils.disable_progress_bars()
        _STATE.pop("hub_bars_off")


@contextmanager
def transformers_quiet(verbose: bool = False) -> Iterator[list[logging.LogRecord]]:
    """Inside: transformers' progress bars off and its log records (warnings and above) collected in the
    list this yields instead of printed; on exit transformers' settings are as they were. With `verbose`
    nothing is changed (the list stays empty).

    >>> from transformers.utils import logging as hf_logging
    >>> with transformers_quiet() as records:
    ...     hf_logging.is_progress_bar_enabled()
    False
    """
    records: list[logging.LogRecord] = []
    if verbose:
        yield records
        return
    outer = getattr(_LOCAL, "records", None)
    _enter()
    _LOCAL.records = records
    try:
        yield records
    finally:
        _LOCAL.records = outer
        if outer is not None:
            outer.extend(records)
        _leave()


def _groups(keys: Sequence[str], shown: int = 2) -> str:
    """["cls.predictions.bias", "cls.predictions.decoder.bias", "pooler.dense.weight"] ->
    "cls.predictions.*, pooler.dense.*" (the first `shown` groups, then a count)."""
    groups = list(dict.fromkeys(".".join(key.split(".")[:2]) + ".*" if key.count(".") > 1 else key
                                for key in sorted(keys)))
    return ", ".join(groups[:shown]) + (f" and {len(groups) - shown} more" if len(groups) > shown else "")


def load_summary(name: str, class_name: str, info: dict | None, records: Sequence[logging.LogRecord]) -> str:
    """One line for what transformers reported while loading `name` as `class_name`, or "" when it
    reported nothing: the weights newly initialised (missing from the checkpoint), the checkpoint's weights
    not used, the mismatched ones (``from_pretrained(..., output_loading_info=True)``), and how many other
    warnings it logged (`records`, less the load report itself); outside the CLI, where ``verbose=True`` shows
    the rest."""
    info = info or {}
    missing, unused = list(info.get("missing_keys") or ()), list(info.get("unexpected_keys") or ())
    mismatched = [str(entry[0]) if isinstance(entry, (tuple, list)) else str(entry)
                  for entry in info.get("mismatched_keys") or ()]
    parts = []
    if missing:
        parts.append(f"{len(missing)} weights not in the checkpoint newly initialised ({_groups(missing)})")
    if unused:
        parts.append(f"{len(unused)} of the checkpoint's weights unused ({_groups(unused)})")
    if mismatched:
        parts.append(f"{len(mismatched)} with mismatched shapes ({_groups(mismatched)})")
    others = [record for record in records if "LOAD REPORT" not in record.getMessage()]
    if others:
        parts.append(f"{len(others)} more transformers warning{'s' if len(others) > 1 else ''}")
    if not parts:
        return ""
    hint = "" if _PROCESS["quiet"] else " (probe.models.load(..., verbose=True) shows transformers' report)"
    return f"{name} loaded as {class_name}: " + "; ".join(parts) + hint


__all__ = ["load_summary", "quiet_import", "quiet_process", "transformers_quiet"]
