"""Batch work: units of work, run in-process or on Ray, journalled so that nothing finished is lost.

What belongs here: the one runner (:mod:`~probe.runs.runner`: ``run(units, task, out, executor)``, the
in-process executor), the tasks of ``probe label`` and ``probe contacts`` (:mod:`~probe.runs.tasks`), the Ray
executor and its watchdog (:mod:`~probe.runs.ray_executor`, :mod:`~probe.runs.ray_watchdog`), the crash-safe
journal (:mod:`~probe.runs.journal`) and the one atomic writer (:mod:`~probe.runs.atomic`), which checkpoints
a batch names (:mod:`~probe.runs.checkpoints`, :mod:`~probe.runs.hub`) and the sweep figure
(:mod:`~probe.runs.plot`, :mod:`~probe.runs.export`), and a training run's history per checkpoint
(:mod:`~probe.runs.history`: ``probe history``). Built on :mod:`probe.heads` and :mod:`probe.proteins`;
never imports :mod:`probe.commands` or argparse.
"""
