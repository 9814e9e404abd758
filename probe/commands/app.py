"""`probe app` (not built yet)."""

from __future__ import annotations

import argparse

from probe.errors import ProbeError


def add_parser(subparsers) -> argparse.ArgumentParser:
    return subparsers.add_parser("app", help="(not built yet)")


def run(args: argparse.Namespace) -> int:
    raise ProbeError("probe app is not built yet")
