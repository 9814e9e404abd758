"""The package layout is the architecture: every module of probe/ is walked with ast (function-level imports
included) and the import graph must have no cycles and no import from a lower layer to a higher one.

Layers, bottom to top (a module may import its own layer and the ones below):

    base      probe (the package), errors, naming, hashing, models, card, data, zoo (the package), zoo.tiny,
              zoo.planted
    engine    probe.engine.*
    heads     probe.heads.*        proteins   probe.proteins.*   (side by side: neither imports the other)
    training  probe.zoo.train, probe.zoo.data (model organisms trained on the probe sets: they may import heads)
    runs      probe.runs.*
    views     probe.views.*, probe.app   (notebook views and the report: they draw what the layers below compute)
    commands  probe.commands.*, probe.cli   (nothing below imports them)

Deviation from the first plan, on purpose: ``probe.zoo.data`` builds its coreference training sentences from the
probe sets' templates (:func:`probe.heads.probesets.coreference_examples`), so it sits with ``zoo.train`` above
heads instead of in base; nothing in base imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "probe"

BASE = {"probe", "probe.errors", "probe.naming", "probe.hashing", "probe.models", "probe.card", "probe.data",
        "probe.zoo", "probe.zoo.tiny", "probe.zoo.planted"}
TRAINING = {"probe.zoo.train", "probe.zoo.data"}
RANK = {"base": 0, "engine": 1, "heads": 2, "proteins": 2, "training": 3, "runs": 4, "views": 5, "commands": 6}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    if module in BASE:
        return "base"
    if module in TRAINING:
        return "training"
    if module == "probe.cli":
        return "commands"
    if module == "probe.app":
        return "views"
    top = module.split(".")[1]
    if top not in ("engine", "heads", "proteins", "runs", "views", "commands"):
        raise AssertionError(f"{module} is in no layer: add it to tests/test_layout.py (and to the docs)")
    return top


def _known(name: str) -> str | None:
    """The probe module `name` names, or the nearest package above it."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":` — code that runs only when the module is the program (an entry point)."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators))


def walk(tree: ast.AST):
    """ast.walk without `if __name__ == "__main__":` blocks: nothing imports a program's entry point, so what it
    imports (`python -m probe.zoo.train` runs probe.commands.train) is not a dependency of the module."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if not _is_main_guard(child))


def imports_of(module: str) -> set[str]:
    """Every probe module `module` imports, at any depth of its code (function-level imports too)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_known(alias.name) for alias in node.names if alias.name.split(".")[0] == "probe")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "probe":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else _known(base))
    found.discard(None)
    found.discard(module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_is_in_a_layer():
    assert len(MODULES) > 40
    for module in MODULES:
        layer(module)


def test_no_import_goes_up_a_layer_and_heads_and_proteins_stay_apart():
    upward = []
    for module, imported in GRAPH.items():
        for target in imported:
            mine, theirs = layer(module), layer(target)
            if RANK[theirs] > RANK[mine] or ({mine, theirs} == {"heads", "proteins"}):
                upward.append(f"{module} ({mine}) imports {target} ({theirs})")
    assert not upward, "\n".join(sorted(upward))


def test_nothing_imports_the_commands():
    importers = sorted(m for m, imported in GRAPH.items() for t in imported
                       if layer(t) == "commands" and layer(m) != "commands")
    assert not importers


def test_no_import_cycles():
    """Tarjan's strongly connected components: every component is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, cycles


def test_argparse_only_in_the_commands():
    users = sorted(m for m, path in MODULES.items() if layer(m) != "commands"
                   and any(isinstance(node, (ast.Import, ast.ImportFrom)) and
                           any(alias.name == "argparse" for alias in node.names) or
                           (isinstance(node, ast.ImportFrom) and node.module == "argparse")
                           for node in walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert not users


def test_one_module_replaces_files():
    """Only probe.runs.atomic renames a temporary file over another (os.replace / os.rename / Path.replace)."""
    renamers = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("replace", "rename") and isinstance(node.func.value, ast.Name) and \
                    node.func.value.id == "os":
                renamers.add(module)
    assert renamers == {"probe.runs.atomic"}


@pytest.mark.parametrize("package", ["engine", "heads", "proteins", "runs", "commands", "zoo"])
def test_every_subpackage_says_what_belongs_there(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 15, f"probe/{package}/__init__.py needs a paragraph saying what belongs there"
