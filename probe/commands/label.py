"""`probe label` (not built yet)."""

from __future__ import annotations

import argparse

from probe.errors import ProbeError


def add_parser(subparsers) -> argparse.ArgumentParser:
    return subparsers.add_parser("label", help="(not built yet)")


def run(args: argparse.Namespace) -> int:
    raise ProbeError("probe label is not built yet")
