"""Batch work: units of work, run in-process or on Ray, journalled so that nothing finished is lost.

What belongs here: the one runner (:mod:`~probe.runs.runner`: ``run(units, task, out, executor)``, the
in-process executor), the tasks of ``probe label`` and ``probe contacts`` (:mod:`~probe.runs.tasks`), of
``probe circuit --type`` (:mod:`~probe.runs.circuits`) and of ``probe profile`` (:mod:`~probe.runs.profiles`),
the Ray executor and its watchdog (:mod:`~probe.runs.ray_executor`, :mod:`~probe.runs.ray_watchdog`), the
crash-safe journal (:mod:`~probe.runs.journal`) and the one atomic writer (:mod:`~probe.runs.atomic`), which
checkpoints a batch names (:mod:`~probe.runs.checkpoints`, :mod:`~probe.runs.hub`) and the sweep figure
(:mod:`~probe.runs.plot`, :mod:`~probe.runs.export`), and a training run's history per checkpoint
(:mod:`~probe.runs.history`: ``probe history``). Built on :mod:`probe.heads`, :mod:`probe.proteins` and
:mod:`probe.circuits`; never imports :mod:`probe.commands` or argparse.

Examples
--------
>>> import pandas as pd
>>> from probe.runs.runner import Unit, UnitOutput, run
>>> class Squares:  # a Task: a unit's identity, its computation and its rows
...     def identity(self, unit):
...         return str(unit.payload)
...     def load(self, group):
...         return None  # what the units of one group share (a model)
...     def compute(self, state, unit):
...         return UnitOutput(table=pd.DataFrame({"x": [unit.payload], "square": [unit.payload ** 2]}))
...     def rows(self, unit, result):
...         return result.table
...     def owners(self, table):
...         return table["x"].astype(str)
>>> report = run([Unit(str(x), group="all", payload=x) for x in (2, 3)], Squares(), progress=False)
>>> report.table  # no Out: nothing persisted, the table returned
   x  square
0  2       4
1  3       9
>>> report.code
0
"""
