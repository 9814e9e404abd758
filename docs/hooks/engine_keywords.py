"""MkDocs hook: the engine page (docs/engine.md) gets its keyword table from the code.

The page holds one marker line, :data:`MARKER`, where the table goes; this hook replaces it with
:func:`probe.engine.keywords.keyword_table` — one row per entry of ``KEYWORDS``, its kind and what the engine
does with it — so a keyword is declared, and described, in ``probe/engine/keywords.py`` only. A page without
the marker (or with two) fails the build.

Also usable on its own: ``python docs/hooks/engine_keywords.py`` prints the generated page.
"""

from __future__ import annotations

import sys
from pathlib import Path

PAGE = "engine.md"
MARKER = "<!-- keyword table: generated from probe/engine/keywords.py (docs/hooks/engine_keywords.py) -->"


def render(markdown: str) -> str:
    """The page with the marker line replaced by the keyword table of the code."""
    from probe.engine.keywords import keyword_table

    if markdown.count(MARKER) != 1:
        raise ValueError(f"{PAGE}: needs the marker line {MARKER} exactly once (found "
                         f"{markdown.count(MARKER)}): it is where the keyword table goes")
    return markdown.replace(MARKER, keyword_table())


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
