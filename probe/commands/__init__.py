"""The command line: one module per `probe` subcommand (capture, label, contacts, app, card), each with
`add_parser(subparsers)` and `run(args) -> int`, plus the shared flags (:mod:`~probe.commands.common`) and the
command line of `python -m probe.zoo.train` (:mod:`~probe.commands.train`).

What belongs here: argparse, checking flags into library values (a ``LabelConfig``, an executor), and
printing. The work itself is the library's (batch work through :func:`probe.runs.runner.run`). This is the top
layer: nothing in the package imports it but :mod:`probe.cli`.
"""
