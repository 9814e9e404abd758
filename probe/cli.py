"""The `probe` command: `probe COMMAND`, one subcommand per name of :data:`probe.commands.SUBCOMMANDS` (the
one list; `probe --help` shows them).

Results go to files or stdout, progress and messages to stderr. Exit codes: 0 ok, 2 bad input (one line naming
the fix), 1 internal error, 130 interrupted.

This module and every ``probe/commands/<name>.py`` import only the standard library and light probe modules at
their top; torch, pandas and transformers are imported inside a command's ``run()``, so ``probe --help``,
argument errors and missing-file errors answer in well under a second (tests/commands/test_cli_fast.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from probe.commands import SUBCOMMANDS  # the one list of subcommands (re-exported here for the tests)
from probe.errors import ProbeError
from probe.quiet import quiet_process


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the fix (not the usage block), with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        message = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `probe` parser. With `argv` naming a subcommand (``["label", ...]``) only that subcommand's module
    is imported, so its help and argument errors never wait for another command's imports; otherwise all of
    them (``probe --help`` lists every subcommand)."""
    parser = OneLineParser(
        prog="probe", description="Capture, label and explore attention heads of Hugging Face models."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = argv[0] if argv else None
    for name in (named,) if named in SUBCOMMANDS else SUBCOMMANDS:
        module = importlib.import_module(f"probe.commands.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(run=module.run, subparser=sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # named by the subcommand's parser: the hint is `probe label --help`, not `probe --help`
            args.subparser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as done:  # --help, or a bad option already reported in one line
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    quiet_process()  # transformers' warnings and progress bars off: stderr is probe's (probe.quiet)
    try:
        return int(args.run(args) or 0)
    except ProbeError as error:
        print(f"probe {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"probe {args.command}: interrupted; finished results are kept", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place internal errors are reported
        if os.environ.get("PROBE_DEBUG"):
            traceback.print_exc()
        print(f"probe {args.command}: internal error: {type(error).__name__}: {error} "
              "(set PROBE_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
