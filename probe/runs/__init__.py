"""Batch work: units of work, run in-process or on Ray, journalled so that nothing finished is lost.

What belongs here: the crash-safe journal and the one atomic writer (:mod:`~probe.runs.journal`), the units of
labelling and contact work (:mod:`~probe.runs.units`), the Ray executor (:mod:`~probe.runs.ray_executor`) and
checkpoint sweeps (:mod:`~probe.runs.sweep`). Built on :mod:`probe.heads` and :mod:`probe.proteins`; never imports
:mod:`probe.commands` or argparse.
"""
