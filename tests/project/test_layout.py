"""The package layout is the architecture: every module of probe/ is walked with ast (function-level imports
and ``if __name__ == "__main__":`` blocks included: an entry point's imports are dependencies too) and the
import graph must have no cycles and no import from a lower layer to a higher one.

Layers, bottom to top (a module may import its own layer and the ones below):

    base      probe (the package), errors, naming, hashing, models, specs, quiet (transformers' own output),
              layers, anatomy (where a model's projections, norms and layer list sit), lazy (the packages'
              re-exports loaded on first use), cache (where computed-once results live), card, memory, data,
              zoo (the catalogue: the package, zoo.tiny, zoo.planted), untrained, untrained_build (the
              untrained twins, and building one a device-map module at a time), labelled (the one rule of
              "this head is labelled")
    engine    probe.engine.*
    heads     probe.heads.*        proteins   probe.proteins.*   (side by side: neither imports the other)
    circuits  probe.circuits.* (which heads feed which: composition and path patching on the labelled heads,
              so it sits above heads; runs and views run and draw it)
    training  probe.training.* (the organisms' recipes, data, training loop and cards: the data is built
              from the probe sets and the cards run the head classifier, so it sits above heads)
    runs      probe.runs.*
    views     probe.views.*, probe.app   (notebook views and the report: they draw what the layers below
              compute)
    commands  probe.commands.*, probe.cli   (nothing below imports them)

Modules are short: none of probe/commands/ above 200 lines (argparse and printing), none of the package above
450 lines unless its docstring says why, in a sentence starting "Longer than 450 lines because".

Rooms: the names of a model's parts (``o_proj``, ``c_attn``, ``ln_f``, …) are written in probe.anatomy only;
the labelling pipeline is the package probe.heads.label; no module of probe/ or app/ imports another module's
``_private`` name (nor reads one through a module it imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "probe"

BASE = {"probe", "probe.errors", "probe.naming", "probe.hashing", "probe.models", "probe.specs",
        "probe.layers", "probe.anatomy", "probe.lazy", "probe.cache", "probe.card", "probe.memory",
        "probe.data", "probe.zoo", "probe.zoo.tiny", "probe.zoo.planted", "probe.untrained",
        "probe.untrained_build", "probe.quiet", "probe.labelled"}
RANK = {"base": 0, "engine": 1, "heads": 2, "proteins": 2, "circuits": 3, "training": 3, "runs": 4,
        "views": 5, "commands": 6}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    if module in BASE:
        return "base"
    if module == "probe.cli":
        return "commands"
    if module == "probe.app":
        return "views"
    top = module.split(".")[1]
    if top not in ("engine", "heads", "proteins", "circuits", "training", "runs", "views", "commands"):
        raise AssertionError(f"{module} is in no layer: add it to tests/project/test_layout.py (and to the "
                             "docs)")
    return top


def _known(name: str) -> str | None:
    """The probe module `name` names, or the nearest package above it."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def walk(tree: ast.AST):
    """Every node of a module, ``if __name__ == "__main__":`` blocks and function bodies included."""
    return ast.walk(tree)


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
            apart = {mine, theirs} in ({"heads", "proteins"}, {"circuits", "training"})
            if RANK[theirs] > RANK[mine] or apart:
                upward.append(f"{module} ({mine}) imports {target} ({theirs})")
    assert not upward, "\n".join(sorted(upward))


def test_nothing_imports_the_commands():
    importers = sorted(m for m, imported in GRAPH.items() for t in imported
                       if layer(t) == "commands" and layer(m) != "commands")
    assert not importers


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (each an import cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
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

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles():
    """Every strongly connected component of the import graph is a single module."""
    assert not find_cycles(GRAPH), find_cycles(GRAPH)


def test_a_cycle_through_a_main_block_is_found():
    """The old circle (probe.zoo.train's `__main__` block importing probe.commands.train, which imported it)
    as a planted graph built by the same walk: found. Without the block: none."""
    entry = ast.parse('from probe.training import train\nif __name__ == "__main__":\n    import probe.cli\n')
    imported = {alias.name for node in walk(entry) if isinstance(node, ast.Import) for alias in node.names}
    graph = {"probe.training.train": {"probe.cli"} & imported, "probe.cli": {"probe.training.train"}}
    assert find_cycles(graph) == [["probe.cli", "probe.training.train"]]
    assert find_cycles({"probe.training.train": set(), "probe.cli": {"probe.training.train"}}) == []


def test_argparse_only_in_the_commands():
    users = sorted(m for m, path in MODULES.items() if layer(m) != "commands"
                   and any(isinstance(node, (ast.Import, ast.ImportFrom)) and
                           any(alias.name == "argparse" for alias in node.names) or
                           (isinstance(node, ast.ImportFrom) and node.module == "argparse")
                           for node in walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert not users


def test_one_module_replaces_files():
    """Only probe.runs.atomic renames a temporary file over another (os.replace / os.rename /
    Path.replace)."""
    renamers = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("replace", "rename") and isinstance(node.func.value, ast.Name) and \
                    node.func.value.id == "os":
                renamers.add(module)
    assert renamers == {"probe.runs.atomic"}


@pytest.mark.parametrize("package", ["engine", "heads", "proteins", "circuits", "training", "runs",
                                     "commands", "zoo"])
def test_every_subpackage_says_what_belongs_there(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 15, \
        f"probe/{package}/__init__.py needs a paragraph saying what belongs there"


def test_the_zoo_is_the_catalogue_only():
    """probe/zoo/ holds the catalogue, the tiny and planted models and the shipped files; training is
    elsewhere."""
    assert sorted(m for m in MODULES if m.startswith("probe.zoo")) == ["probe.zoo", "probe.zoo.planted",
                                                                       "probe.zoo.tiny"]
    assert not any(layer(target) == "training"
                   for m in MODULES if m.startswith("probe.zoo") for target in GRAPH[m])


def test_a_main_block_is_walked_like_any_code(tmp_path):
    """The negative control of the cycle test: an import under `if __name__ == "__main__":` is an import."""
    module = ast.parse('import os\nif __name__ == "__main__":\n    from probe.cli import main\n')
    found = {node.names[0].name for node in walk(module) if isinstance(node, (ast.Import, ast.ImportFrom))}
    assert found == {"os", "main"}


COMMAND_LINES = 200
MODULE_LINES = 450
WHY_LONGER = "Longer than 450 lines because"
# Modules allowed over the limits without saying why: none (the two long ones, engine/attention.py and
# models.py, say why in their docstrings). The list only shrinks.
KNOWN_LONG: set[str] = set()


def too_long(module: str) -> str | None:
    """Why `module` breaks the length rule, or None."""
    path = MODULES[module]
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if layer(module) == "commands" and module != "probe.cli" and lines > COMMAND_LINES:
        return f"{module}: {lines} lines, a command module is argparse and printing (at most {COMMAND_LINES})"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    if lines > MODULE_LINES and WHY_LONGER not in " ".join(doc.split()):
        return (f"{module}: {lines} lines > {MODULE_LINES} and its docstring does not say why "
                f"({WHY_LONGER} ...)")
    return None


def test_modules_are_short_or_say_why():
    offenders = sorted(reason for module in MODULES
                       if module not in KNOWN_LONG and (reason := too_long(module)))
    assert not offenders, "\n".join(offenders)


def test_the_known_long_modules_are_still_long():
    """The list only shrinks: a module that was split leaves it (delete its name)."""
    assert not sorted(module for module in KNOWN_LONG if module in MODULES and too_long(module) is None)


def test_the_length_rule_catches_a_long_module(tmp_path, monkeypatch):
    """Positive and negative control of the rule on files made here."""
    long_plain = tmp_path / "long_plain.py"
    long_plain.write_text('"""A module."""\n' + "x = 1\n" * 500)
    long_said = tmp_path / "long_said.py"
    long_said.write_text(f'"""A module.\n\n{WHY_LONGER} it is one table.\n"""\n' + "x = 1\n" * 500)
    monkeypatch.setitem(MODULES, "probe.heads.long_plain", long_plain)
    monkeypatch.setitem(MODULES, "probe.heads.long_said", long_said)
    assert too_long("probe.heads.long_plain") and too_long("probe.heads.long_said") is None


# ------------------------------------------------------------------------------------------------------------
# Rooms: model anatomy in one place, the label package, no private names across modules
# ------------------------------------------------------------------------------------------------------------

APP = PACKAGE.parent / "app"
# Attribute names of a model's parts: written (as string literals) in probe.anatomy only.
PART_NAMES = {"o_proj", "c_proj", "out_proj", "out_lin", "q_proj", "k_proj", "v_proj", "v_lin", "c_attn",
              "ln_1", "ln_f", "input_layernorm", "final_layernorm", "base_model_prefix"}


def part_names_in(source: str) -> set[str]:
    """The model-part names written as string literals in `source`."""
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in PART_NAMES}


def test_model_part_names_live_in_anatomy_only():
    elsewhere = sorted(f"{module}: {sorted(found)}" for module, path in MODULES.items()
                       if module != "probe.anatomy"
                       and (found := part_names_in(path.read_text(encoding="utf-8"))))
    assert not elsewhere, "\n".join(elsewhere)
    assert part_names_in(MODULES["probe.anatomy"].read_text(encoding="utf-8")) == PART_NAMES


def test_the_part_name_rule_catches_a_second_list():
    """Negative control: a module with its own list of projection names is found."""
    assert part_names_in('VALUE = ("v_proj", "value")\nnorm = getattr(block, "ln_1")\n') == {"v_proj", "ln_1"}
    assert part_names_in('x = "v_projection"\n') == set()


def test_anatomy_is_at_the_base_and_imports_only_the_base():
    assert layer("probe.anatomy") == "base"
    assert all(layer(target) == "base" for target in GRAPH["probe.anatomy"])


def test_the_labelling_pipeline_is_one_package():
    stages = {"probe.heads.label", "probe.heads.label.pipeline", "probe.heads.label.config",
              "probe.heads.label.probes", "probe.heads.label.scoring", "probe.heads.label.summary",
              "probe.heads.label.table", "probe.heads.label.ablation"}
    assert stages <= set(MODULES)
    assert not [m for m in MODULES if m.startswith("probe.heads.label_")]


def private_imports(path: Path) -> list[str]:
    """``from X import _name`` (X another module of probe or the app) and ``module._name`` where ``module``
    was imported from probe or the app: each as "line: what"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            ours = node.level > 0 or (node.module or "").split(".")[0] in ("probe", "probe_app")
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if ours and private:
                    where = "." * node.level + (node.module or "")
                    found.append(f"{node.lineno}: from {where} import {alias.name}")
                elif ours:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("probe", "probe_app"):
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_a_private_name_of_another():
    files = sorted(PACKAGE.rglob("*.py")) + sorted(APP.rglob("*.py"))
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in files
                 for line in private_imports(path)]
    assert not offenders, "\n".join(offenders)


def test_the_private_import_rule_catches_both_forms(tmp_path):
    """Negative control: both ways of reaching into another module are found; public names and the
    module's own privates are not."""
    planted = tmp_path / "planted.py"
    planted.write_text("from probe.heads.copying import _linearweight_of, copying_score\n"
                       "from .figures import _is_labelled\n"
                       "from probe.engine import session\n"
                       "import probe.heads.stats as stats\n"
                       "def _mine():\n    return session._ACTIVE, stats.uniform_chance, _mine\n")
    found = private_imports(planted)
    assert [item.split(": ", 1)[1] for item in found] == [
        "from probe.heads.copying import _linearweight_of", "from .figures import _is_labelled",
        "session._ACTIVE"]
