"""`probe contacts` (not built yet)."""

from __future__ import annotations

import argparse

from probe.errors import ProbeError


def add_parser(subparsers) -> argparse.ArgumentParser:
    return subparsers.add_parser("contacts", help="(not built yet)")


def run(args: argparse.Namespace) -> int:
    raise ProbeError("probe contacts is not built yet")
