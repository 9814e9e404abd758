"""One protocol for every view of the notebook (issue 56): a view gives its HTML fragment
(:meth:`HtmlView.html`) and its page's title; drawing itself under a cell (Jupyter's display protocol:
``_repr_html_`` and ``_repr_mimebundle_``) and saving itself as one offline page
(:meth:`HtmlView.save_page`, atomically, marked as probe's own by :data:`probe.views.pages.GENERATOR`) come
from :class:`HtmlView`. A view with other formats (the attention view's SVG and PNG, the timeline's SVG)
overrides ``save`` and calls ``save_page`` for HTML.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from probe.errors import ProbeError
from probe.runs.atomic import write_atomically
from probe.views.pages import GENERATOR

PAGE_SUFFIXES = (".html", ".htm")


def standalone_page(body: str, title: str) -> str:
    """A whole HTML page around `body` (no external resource), marked as probe's own.

    Examples
    --------
    >>> page = standalone_page("<p>hello</p>", "probe · example")
    >>> page.startswith("<!DOCTYPE html>"), '<meta name="generator" content="probe">' in page
    (True, True)
    """
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta '
            f'charset="utf-8">{GENERATOR}<title>{html.escape(title)}</title><meta name="viewport" '
            'content="width=device-width, initial-scale=1">'
            "<link rel=\"icon\" href=\"data:,\"></head>\n"
            f'<body><div class="probe-report">{body}</div></body></html>\n')


def checked_path(path: str | Path, kind: str, suffixes: Sequence[str] = PAGE_SUFFIXES) -> Path:
    """`path` as a Path, refused in one line when its extension is not one of `suffixes` or its folder does
    not exist.

    Examples
    --------
    >>> checked_path("figure.pdf", "timeline", (".svg", ".html"))
    Traceback (most recent call last):
    probe.errors.ProbeError: figure.pdf: save the timeline as .svg or .html
    """
    path = Path(path).expanduser()
    if path.suffix.lower() not in suffixes:
        shown = [suffix for suffix in suffixes if suffix != ".htm"]
        listed = f"{', '.join(shown[:-1])} or {shown[-1]}" if len(shown) > 1 else shown[0]
        raise ProbeError(f"{path}: save the {kind} as {listed}")
    if not path.parent.is_dir():
        raise ProbeError(f"{path}: the folder {path.parent} does not exist; create it first")
    return path


class HtmlView:
    """The base of the notebook's views: subclasses define :meth:`html` and :meth:`page_title` (and, for a
    page that is more than the fragment, :meth:`page_body`).

    Examples
    --------
    >>> class Hello(HtmlView):
    ...     kind = "greeting"
    ...     def html(self, element_id=None):
    ...         return "<p>hello</p>"
    ...     def page_title(self):
    ...         return "hello"
    >>> Hello()._repr_mimebundle_()["text/html"]
    '<p>hello</p>'
    >>> Hello().save("hello.txt")
    Traceback (most recent call last):
    probe.errors.ProbeError: hello.txt: save the greeting as .html
    """

    kind = "view"  # how messages name it: "save the 3D view as .html"

    def html(self, element_id: str | None = None) -> str:
        """A self-contained HTML fragment of the view (style, data, script and the call that mounts it)."""
        raise NotImplementedError

    def page_title(self) -> str:
        """The title of the view's page."""
        raise NotImplementedError

    def page_body(self) -> str:
        """What the view's page holds: the fragment, unless a view says more."""
        return self.html()

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/html": self.html(), "text/plain": repr(self)}

    def save(self, path: str | Path) -> Path:
        """Write the view as a page of its own (FILE.html, atomically) and return its path."""
        return self.save_page(path)

    def save_page(self, path: str | Path) -> Path:
        """Write :meth:`page_body` as one offline page (FILE.html, atomically) and return its path."""
        path = checked_path(path, self.kind)
        page = standalone_page(self.page_body(), self.page_title())
        write_atomically(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
        return path


__all__ = ["PAGE_SUFFIXES", "HtmlView", "checked_path", "standalone_page"]
