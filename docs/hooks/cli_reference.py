"""MkDocs hook: the CLI reference (docs/cli.md) gets every subcommand's ``--help``, generated from argparse.

The page's prose stays hand-written; under each ``### `probe NAME` `` heading this hook inserts the help that
``probe NAME --help`` prints, built from :func:`probe.cli.build_parser` at build time, so a new flag or a new
subcommand (which gets a section of its own at the end of the page) can never be missing from the site. A
heading that names a subcommand the parser does not have fails the build: the prose is stale.

Also usable on its own: ``python docs/hooks/cli_reference.py`` prints the generated page.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

PAGE = "cli.md"
WIDTH = "100"  # columns of the rendered help (argparse reads $COLUMNS)
HEADING = re.compile(r"^(#{2,4}) `probe ([A-Za-z0-9_-]+)`\s*$")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """name -> parser of each subcommand, in the order the parser lists them."""
    for action in parser._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return parser.format_help().rstrip()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def _block(parser: argparse.ArgumentParser) -> list[str]:
    return ["", "```text", *_help(parser).splitlines(), "```", ""]


def render(markdown: str) -> str:
    """The page with each subcommand's help inserted under its heading, and sections added for the rest."""
    from probe.cli import build_parser

    parser = build_parser()
    commands = _subcommands(parser)
    out: list[str] = []
    seen: list[str] = []
    for line in markdown.splitlines():
        out.append(line)
        match = HEADING.match(line)
        if match:
            name = match.group(2)
            if name not in commands:
                raise ValueError(f"{PAGE}: section `probe {name}` names no subcommand of probe "
                                 f"(there are {', '.join(commands)}); remove or rename it")
            out.extend(_block(commands[name]))
            seen.append(name)
    missing = [name for name in commands if name not in seen]
    if missing:
        out.extend(["", "## Other subcommands", ""])
        for name in missing:
            out.append(f"### `probe {name}`")
            out.extend(_block(commands[name]))
    out.extend(["", "## `probe --help`", *_block(parser)])
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' hook signature
    if page.file.src_uri != PAGE:
        return markdown
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown)
    except ValueError as error:
        raise PluginError(str(error)) from None


if __name__ == "__main__":
    sys.stdout.write(render((Path(__file__).resolve().parents[1] / PAGE).read_text(encoding="utf-8")))
