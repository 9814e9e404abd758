"""`probe circuit --task FILE`: a researcher's own task — every edge of the model scored (EAP, EAP-IG or
exact patching), the faithfulness curve against random circuits, the circuit. The work is
:func:`probe.circuits.task_circuit`; this module is printing only (the flags are
:mod:`probe.commands.circuit`'s)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import load_keywords


def _say(message: str) -> None:
    print(f"probe circuit: {message}", file=sys.stderr)


def run_task(args: argparse.Namespace, out: Path | None) -> int:
    """``probe circuit --task FILE``: every edge of the model scored on the task, the faithfulness curve and
    the circuit (:func:`probe.circuits.task_circuit`), printed; the edge table written to `out`."""
    from probe import models
    from probe.circuits.task_circuit import task_circuit
    from probe.heads.tables import save_table
    from probe.runs.atomic import write_atomically
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    found = task_circuit(loaded, args.task, args.metric, args.method, args.steps)
    table = found.table
    print("\n".join(found.lines()), flush=True)
    if out is not None:
        write_atomically(out, lambda tmp: save_table(table, tmp))
        _say(f"wrote {out} ({len(table)} edges, {int(table['in_circuit'].sum())} in the circuit)")
    return 0
