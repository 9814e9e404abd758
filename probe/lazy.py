"""Re-exports loaded on first use (PEP 562): the one helper every package ``__init__`` of probe uses.

A package lists the names it re-exports and the module defining each; importing the package imports none of
them, so ``import probe`` (and ``probe --help``) stays fast and a name's module is imported the first time the
name is read. Relative targets (``".composition"``) are resolved against the package. The first import of the
heavy stack happens here, under :func:`probe.quiet.quiet_import` (tqdm's note in a notebook without
ipywidgets).

Examples
--------
>>> from probe.lazy import lazy_exports
>>> __getattr__, __dir__ = lazy_exports("probe", {"Path": "pathlib"})
>>> __getattr__("Path").__name__
'Path'
>>> __getattr__("nothing")
Traceback (most recent call last):
...
AttributeError: module 'probe' has no attribute 'nothing'
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from probe.quiet import quiet_import


def lazy_exports(package: str, names: Mapping[str, str], submodules: Iterable[str] = ()
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` for lazily loaded names.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : mapping of str to str
        Exported name -> the module that defines it, absolute (``"probe.views.view"``) or relative to the
        package (``".composition"``).
    submodules : iterable of str, optional
        Submodules reachable as attributes (``probe.views`` after ``import probe``).

    Returns
    -------
    tuple of callables
        ``(__getattr__, __dir__)``, to assign at the package's top level.
    """
    names = dict(names)
    submodules = tuple(submodules)

    def __getattr__(name: str) -> Any:
        if name in names:
            with quiet_import():  # no TqdmWarning in a notebook without ipywidgets (probe.quiet)
                return getattr(importlib.import_module(names[name], package), name)
        if name in submodules:
            with quiet_import():
                return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        module = sys.modules.get(package)
        own = list(vars(module)) if module is not None else []
        return sorted({*own, *names, *submodules})

    return __getattr__, __dir__
