"""Griffe extension: Sphinx cross-reference roles in probe's docstrings become links on the site.

probe's docstrings cite other objects the Sphinx way (``:func:`capture```, ``:mod:`~probe.engine.sinks```,
``:data:`probe.heads.tables.COLUMNS```), which mkdocstrings would show verbatim. This extension rewrites each
role, after the whole package is loaded, to an *optional* autorefs link: a link where the target is rendered
on some page of the site, plain code where it is not (so a strict build never fails on a reference to an
undocumented object). Targets resolve as Sphinx resolves them: a full dotted path, or a name relative to the
object's module or class; ``~`` shows only the last component, ``title <target>`` shows the title.
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc|const):`([^`]+)`")


def _lookup(scope, dotted: str):
    try:
        return scope[dotted]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _resolve(obj, target: str):
    """The object `target` names, seen from `obj` (None when it cannot be found)."""
    package = obj.package
    head, _, rest = target.partition(".")
    if head == package.name:
        return package if not rest else _lookup(package, rest)
    for scope in (obj if obj.is_class else None, obj.parent, obj.module):
        if scope is not None and (found := _lookup(scope, target)) is not None:
            return found
    return None


def _path(found) -> str:
    try:
        return found.canonical_path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return found.path


def rewrite(obj, text: str) -> str:
    """`text` with every Sphinx role replaced by an optional autorefs link (or plain code)."""

    def replace(match: re.Match) -> str:
        content = match.group(1).strip()
        title, _, inside = content.partition(" <")
        if inside.endswith(">"):
            target = inside[:-1].strip()
        else:
            title, target = content, content
        shorten = target.startswith("~")
        target = target.lstrip("~.")
        if shorten:
            title = target.rsplit(".", 1)[-1]
        found = _resolve(obj, target)
        code = f"<code>{html.escape(title)}</code>"
        if found is None:
            return f"`{title}`"
        return f'<autoref identifier="{html.escape(_path(found))}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a loaded package."""

    def on_package(self, *, pkg, **kwargs) -> None:  # noqa: ARG002 - griffe passes more keywords
        self._walk(pkg, set())

    def _walk(self, obj, seen: set[int]) -> None:
        if id(obj) in seen or obj.is_alias:
            return
        seen.add(id(obj))
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = rewrite(obj, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)
