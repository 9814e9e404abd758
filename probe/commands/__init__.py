"""The command line: one module per `probe` subcommand (capture, label, contacts, app, card, profile, train),
each with `add_parser(subparsers)` and `run(args) -> int`, plus the shared flags and checks
(:mod:`~probe.commands.common`). Each imports only the standard library and light probe modules at its top and
its library inside `run()`, so `--help` and bad arguments answer before torch is imported.

What belongs here: argparse, checking flags into library values (a ``LabelConfig``, an executor), and
printing. The work itself is the library's (batch work through :func:`probe.runs.runner.run`). This is the top
layer: nothing in the package imports it but :mod:`probe.cli`.
"""
