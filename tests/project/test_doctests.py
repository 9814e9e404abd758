"""Every docstring example runs, and every name on the API pages has one.

As biotite runs its modules' examples: the ``>>>`` examples of each public module are collected with
:class:`doctest.DocTestFinder` (every docstring of the module, its classes and their members), one test per
module, plus the attribute docstrings the API pages render (``COLUMNS``, ``HEAD_SUMMARY_COLUMNS``: a string
literal after an assignment, which doctest does not see). The modules are those that define a name rendered on
``docs/api/*.md`` (``::: name``) and every other module of ``probe/`` or ``app/`` with an example in it.

The examples see their module's namespace plus a shared one, built once per session: ``probe``, ``torch``,
``np``, ``pd``, ``loaded`` (``probe.load("zoo:induction")``: 2 layers × 4 heads, a trained induction circuit)
and ``inputs`` (its tokenized ``"rada ruga buse rada ruga buse"``: a block of its pseudo-words and the block's
repeat, 7 tokens with ``<bos>``). They run from the repository root
(``tests/data/`` holds the structures they read), on tiny or zoo models only, never the network.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API_PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
# a long output may wrap as the source's line length asks; `...` in an output needs `# doctest: +ELLIPSIS`
FLAGS = doctest.NORMALIZE_WHITESPACE
TEXT = "rada ruga buse rada ruga buse"  # zoo:induction's pseudo-words: one block and its repeat (7 tokens)


def api_names() -> list[str]:
    """Every name rendered on the API pages, in page order."""
    return [name for page in API_PAGES
            for name in re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), flags=re.M)]


def resolve(name: str):
    """(object, the module that defines it) for a dotted name: a module, or an attribute of one."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        obj = module
        for part in parts[split:]:
            obj = getattr(obj, part)
        if isinstance(obj, types.ModuleType):
            return obj, obj
        defined_in = getattr(obj, "__module__", None)
        return obj, (importlib.import_module(defined_in) if isinstance(defined_in, str) and
                     isinstance(obj, (type, types.FunctionType)) else module)
    raise ImportError(name)


def module_of_name(name: str) -> str:
    """The module a dotted name lives in, from the files alone (nothing imported at collection)."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:split])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return ".".join(parts[:split])
    raise ValueError(f"{name} is in no module of the repository")


def module_of_path(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[0] == "app":
        parts[0] = "probe_app"  # the repository's app/ folder is installed as probe_app
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_with_examples() -> list[str]:
    """Modules of probe/ and app/ whose source holds an example (read as text: nothing is imported)."""
    paths = [*(ROOT / "probe").rglob("*.py"), *(ROOT / "app").rglob("*.py")]
    return sorted(module_of_path(path) for path in paths if ">>>" in path.read_text(encoding="utf-8"))


def attribute_docstring(module, name: str) -> tuple[str, int] | None:
    """(the string literal right after ``name = ...`` in the module's source, its line), or None."""
    body = ast.parse(inspect.getsource(module)).body
    for node, after in zip(body, body[1:], strict=False):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(getattr(target, "id", None) == name for target in targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return inspect.cleandoc(after.value.value), after.lineno
    return None


def rendered_docstring(name: str) -> str:
    """The docstring mkdocstrings renders for a ``::: name`` line."""
    obj, module = resolve(name)
    if isinstance(obj, (types.ModuleType, type, types.FunctionType)) or callable(obj):
        return inspect.getdoc(obj) or ""
    found = attribute_docstring(module, name.rsplit(".", 1)[1])
    return found[0] if found else ""


def attribute_names(module_name: str) -> list[str]:
    """The data attributes of a module that the API pages render (their docstrings are source literals)."""
    out = []
    for name in api_names():
        if name.rsplit(".", 1)[0] != module_name:
            continue
        obj, _ = resolve(name)
        if not isinstance(obj, (types.ModuleType, type, types.FunctionType)) and not callable(obj):
            out.append(name.rsplit(".", 1)[1])
    return out


def collected_modules() -> list[str]:
    return sorted({module_of_name(name) for name in api_names()} | set(modules_with_examples()))


@pytest.fixture(scope="session")
def shared_namespace():
    import numpy as np
    import pandas as pd
    import torch

    import probe

    loaded = probe.load("zoo:induction")
    inputs = probe.models.tokenize_text(loaded, TEXT)
    return {"probe": probe, "torch": torch, "np": np, "pd": pd, "loaded": loaded, "inputs": inputs}


def doctests_of(module_name: str, namespace: dict) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = finder.find(module, module_name, extraglobs=namespace)
    parser = doctest.DocTestParser()
    filename = inspect.getsourcefile(module)
    for name in attribute_names(module_name):
        text, line = attribute_docstring(module, name)
        globs = {**vars(module), **namespace}
        test = parser.get_doctest(text, globs, f"{module_name}.{name}", filename, line)
        if test.examples:
            tests.append(test)
    return [test for test in tests if test.examples]


@pytest.mark.parametrize("module_name", collected_modules())
def test_docstring_examples_run(module_name, shared_namespace, monkeypatch):
    import torch

    monkeypatch.chdir(ROOT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runner, failures = doctest.DocTestRunner(optionflags=FLAGS), []
    try:
        tests = doctests_of(module_name, shared_namespace)
        assert tests, f"{module_name} is collected but has no example"
        for test in tests:
            runner.run(test, out=failures.append)
    finally:
        torch.set_num_threads(threads)
    assert runner.failures == 0, "\n".join(failures)


def test_every_name_on_the_api_pages_has_an_example():
    missing = [name for name in api_names() if ">>>" not in rendered_docstring(name)]
    assert missing == [], f"give these a short running example in their docstring: {missing}"
    # each is defined where its page says (a re-export's example would run in another module, or never)
    elsewhere = [name for name in api_names() if resolve(name)[1].__name__ != module_of_name(name)]
    assert elsewhere == [], f"name these by the module that defines them: {elsewhere}"


def test_the_collection_is_not_empty_and_a_failing_example_fails():
    """A negative control: the runner reports a wrong output, so a passing run means the outputs matched."""
    assert {"probe.engine.capture", "probe.anatomy", "probe.views.reading", "probe.heads.label"} <= set(
        collected_modules())

    def broken():
        """
        >>> 1 + 1
        3
        """

    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(broken, "broken", globs={}):
        runner.run(test, out=lambda text: None)
    assert runner.summarize(verbose=False).failed == 1
