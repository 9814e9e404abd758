"""Reading a how-to page (docs/howto/*.md) as its tests follow it: its Python blocks, the files it says to
touch, and a docs hook loaded from its file."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(text: str) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def files_to_touch(text: str) -> set[str]:
    """The paths the page's "Files to touch" table names: every backticked path in its second column."""
    section = text.split("## Files to touch", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    return {path for row in rows for path in re.findall(r"`([\w./-]+\.\w+)`", row.split("|")[2])}


def hook(name: str):
    """The docs build's hook docs/hooks/NAME.py, as a module."""
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
