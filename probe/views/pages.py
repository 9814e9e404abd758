"""What marks an HTML page as one probe wrote: every standalone page (a report, a saved view) carries
:data:`GENERATOR` in its head, and :func:`is_probe_page` finds it, so a command may replace its own page at
``--out`` but never a user's own HTML without ``--force``. Import-light (no torch, no pandas): the commands
check ``--out`` before their heavy imports."""

from __future__ import annotations

from pathlib import Path

GENERATOR = '<meta name="generator" content="probe">'
HEAD_BYTES = 4096  # the mark sits in the page's head, within its first few hundred bytes
# reports written before the mark existed begin with this title
_OLD_REPORT_TITLE = b"<title>probe report \xc2\xb7 "


def is_probe_page(path: str | Path) -> bool:
    """Whether the file at `path` is an HTML page probe wrote (its head carries :data:`GENERATOR`, or the
    title of a report written before the mark existed)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return False
    return GENERATOR.encode() in head or _OLD_REPORT_TITLE in head


__all__ = ["GENERATOR", "HEAD_BYTES", "is_probe_page"]
