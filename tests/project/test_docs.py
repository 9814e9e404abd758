"""The documentation: the site builds with --strict, the CLI reference is generated from the parser, the
how-to examples run against the code, and the README stays short."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_at_most_250_lines_and_its_links_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "the README links to the documentation pages"
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_every_page_in_docs_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert pages and {page for page in pages if f": {page}" not in config} == set()


def test_cli_reference_has_every_subcommands_help_from_the_parser():
    from probe.cli import build_parser

    hook = _module(DOCS / "hooks" / "cli_reference.py", "cli_reference")
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    rendered = hook.render(page)
    commands = hook._subcommands(build_parser())
    assert {"capture", "label", "contacts", "app", "card"} <= set(commands)
    for name, parser in commands.items():
        assert f"usage: probe {name} " in rendered
        for action in parser._actions:  # every flag of every subcommand is on the page
            for flag in action.option_strings:
                assert flag in rendered, (name, flag)
    assert "Exit codes: 0 ok, 2 bad input" in rendered  # the prose stays as the intro
    # the hand-written page carries no usage block: the generated one is the only one
    assert "usage: probe" not in page


def test_cli_reference_adds_new_subcommands_and_refuses_stale_sections():
    hook = _module(DOCS / "hooks" / "cli_reference.py", "cli_reference")
    without_card = hook.render("# CLI\n\n### `probe capture`\n\nprose\n")
    # no prose: its own section
    assert "### `probe card`" in without_card and "usage: probe card " in without_card
    assert without_card.index("usage: probe capture ") < without_card.index("prose")
    with pytest.raises(ValueError, match="probe nosuch"):
        hook.render("### `probe nosuch`\n")


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def test_the_sinks_of_the_how_to_equal_the_same_statistics_from_dense_alpha():
    import probe
    from probe.engine import capture, capture_attention

    torch.set_num_threads(1)
    namespace: dict = {}
    blocks = _python_blocks(DOCS / "howto" / "sink.md")
    for block in blocks:
        if "class " in block:
            exec(compile(block, "sink.md", "exec"), namespace)  # noqa: S102 - the page's own example code
    loaded = probe.models.load("zoo:induction")
    inputs = probe.models.tokenize_text(loaded, "a b c d a b c d a b")
    entropy = namespace["EntropySink"](loaded.n_layers, loaded.n_heads)
    previous = namespace["PreviousTokenMass"](inputs["input_ids"], loaded.n_layers, loaded.n_heads)
    with capture(loaded.model, [entropy, previous]), torch.inference_mode():
        loaded.model(**inputs)
    alpha = capture_attention(loaded.model, inputs)[0]  # [layer head query key]
    plogp = torch.where(alpha > 0, alpha * alpha.log(), torch.zeros_like(alpha))
    torch.testing.assert_close(entropy.result(), -plogp.sum(-1).mean(-1), atol=1e-5, rtol=0)
    n = alpha.shape[-1]
    rows = torch.arange(1, n)
    torch.testing.assert_close(previous.mass, alpha[:, :, rows, rows - 1].mean(-1), atol=1e-5, rtol=0)
    # a negative control: the statistics tell heads apart (not a constant the sinks could return regardless)
    assert float(entropy.result().std()) > 0.01 and float(previous.mass.std()) > 0.005


def test_the_reduce_sink_of_the_how_to_equals_the_same_masses_from_dense_alpha():
    from probe.engine import capture_attention

    torch.set_num_threads(1)
    block = next(b for b in _python_blocks(DOCS / "howto" / "sink.md") if "KeyMassSink(" in b)
    namespace: dict = {}
    exec(compile(block, "sink.md", "exec"), namespace)  # noqa: S102 - the page's own example code
    loaded, inputs, result = namespace["loaded"], namespace["inputs"], namespace["sink"].result()
    alpha = capture_attention(loaded.model, inputs)[0].double()  # [layer head query key]
    n = alpha.shape[-1]
    torch.testing.assert_close(result["first token"][0], alpha[..., 0].mean(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(result["second half"][0], alpha[..., n // 2:].sum(-1).mean(-1), atol=1e-5,
                               rtol=0)
    assert float(result["first token"].std()) > 0.01  # heads differ: not a constant


def test_the_head_type_of_the_how_to_has_the_targets_it_describes():
    namespace: dict = {}
    block = next(b for b in _python_blocks(DOCS / "howto" / "head-type.md") if "def first_copy_targets" in b)
    exec(compile(block, "head-type.md", "exec"), namespace)  # noqa: S102 - the page's own example code
    ctx = namespace["TargetContext"](torch.tensor([[5, 7, 5, 5, 7]]))  # [batch seq]
    pattern = namespace["first_copy_targets"](ctx)[None][0]  # [query key]
    pairs = {tuple(pair) for pair in pattern.nonzero().tolist()}
    assert pairs == {(2, 0), (3, 0), (4, 1)}  # the first earlier copy only: row 3 -> 0, not 2


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None
                    or importlib.util.find_spec("mkdocstrings") is None,
                    reason="the docs extra is not installed: pip install -e '.[docs]' (scripts/test.sh does)")
def test_mkdocs_build_strict_passes(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    site = tmp_path / "site"
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert "usage: probe label" in cli and "usage: probe contacts" in cli
    engine = (site / "api" / "engine" / "index.html").read_text(encoding="utf-8")
    assert 'id="probe.engine.capture.capture_attention"' in engine
    # numpydoc shapes, verbatim
    assert "torch.Tensor, shape=(batch, layer, head, query, key), float32" in engine
    assert ":func:" not in engine and ":class:" not in engine  # Sphinx roles became links or code


def test_the_docs_home_and_the_readme_say_what_the_demo_opens_on():
    """Issue 44: the docs home never mentioned notebooks or `probe report`, and its demo line disagreed with
    the README's. Both name the model the dashboard opens on (the app's first default model), the notebook
    view and the report."""
    from app.registry import default_models
    from probe.naming import display_name
    from probe.specs import packaged_dir

    first = display_name(default_models(minilm=packaged_dir("sentence-transformers/all-MiniLM-L6-v2")
                                        is not None)[0])
    for page in (ROOT / "docs" / "index.md", ROOT / "README.md"):
        text = page.read_text(encoding="utf-8")
        demo = next(line for line in text.splitlines() if line.startswith("bash scripts/demo.sh"))
        assert first in demo and "organisms" in demo, (page.name, demo)
        assert "probe.show(" in text and "probe report" in text, page.name


# a page's own requests to another host: stylesheets, scripts, fonts, images, frames (links to read are fine)
REQUESTS = re.compile(r'<(?:link|script|img|iframe|source)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]+"'
                      r"|url\((?:['\"])?(?:https?:)?//")


@pytest.mark.browser
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="the docs extra is not installed: pip install -e '.[docs]' (scripts/test.sh does)")
def test_the_docs_site_asks_the_network_for_nothing(tmp_path):
    """Issue 44: the site requested Google Fonts (Material's default) — offline it waited on them. Every
    page and stylesheet is scanned for requests to another host, and pages opened offline in Chromium make
    none."""
    import json
    import time

    from tests.browser import chromium

    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    found = {str(path.relative_to(site)): REQUESTS.findall(path.read_text(encoding="utf-8"))
             for path in [*site.rglob("*.html"), *site.rglob("*.css")]}
    assert {page: hits for page, hits in found.items() if hits} == {}
    assert REQUESTS.search('<link rel="preconnect" href="https://fonts.gstatic.com">')  # it sees one
    driver = chromium((1280, 800), offline=True, network_log=True)
    try:
        for page in ("index.html", "labels/index.html", "api/engine/index.html"):
            driver.get_log("performance")
            driver.get((site / page).as_uri())
            time.sleep(1.0)
            requests = [json.loads(entry["message"])["message"]["params"]["request"]["url"]
                        for entry in driver.get_log("performance")
                        if json.loads(entry["message"])["message"]["method"] == "Network.requestWillBeSent"]
            assert [url for url in requests if not url.startswith(("file:", "data:", "blob:"))] == [], page
    finally:
        driver.quit()


def test_every_public_reexport_has_an_api_entry_and_a_numpydoc_docstring():
    import importlib
    import inspect

    import probe

    directives = set()
    for page in (DOCS / "api").glob("*.md"):
        directives |= set(re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), flags=re.M))
    missing, undocumented = [], []
    for name, module in probe._LAZY.items():
        obj = getattr(importlib.import_module(module), name)
        path = f"{obj.__module__}.{obj.__qualname__}"
        if path not in directives:
            missing.append(path)
        doc = inspect.getdoc(obj) or ""
        sections = ("Parameters\n----------", "Attributes\n----------", "Returns\n-------")
        methods = [inspect.getdoc(member) or "" for _, member in inspect.getmembers(obj, inspect.isfunction)]
        if not any(section in text for text in (doc, *methods) for section in sections):
            undocumented.append(path)
    assert missing == [], f"add `::: NAME` for these to a page in docs/api/: {missing}"
    assert undocumented == [], f"these need numpydoc Parameters/Returns/Attributes sections: {undocumented}"


def _documented_columns(doc: str) -> set[str]:
    """The column names in the first cell of each row of the Markdown tables of a docstring (`{a,b}`
    expanded)."""

    def expand(name: str) -> list[str]:
        match = re.search(r"\{([^{}]*)\}", name)
        if not match:
            return [name]
        return [out for part in match.group(1).split(",")
                for out in expand(name[:match.start()] + part + name[match.end():])]

    names: set[str] = set()
    for cell in re.findall(r"^\s*\| (.+?) \|", doc, flags=re.M):
        for token in re.findall(r"`([^`]+)`", cell):
            names.update(expand(token))
    return names


def _attribute_docstring(module, name: str) -> str:
    """The string literal right after `name = ...` in a module's source (a PEP 257 attribute docstring)."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(module)).body
    for node, after in zip(body, body[1:], strict=False):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node,
            ast.AnnAssign) else []
        if any(getattr(target, "id", None) == name for target in targets):
            assert isinstance(after, ast.Expr) and isinstance(after.value,
                                                              ast.Constant), f"{name} has no docstring"
            return after.value.value
    raise AssertionError(f"{name} is not assigned in {module.__name__}")


def test_the_label_tables_documented_columns_are_its_columns():
    from probe.heads import tables

    assert _documented_columns(_attribute_docstring(tables, "COLUMNS")) == set(tables.COLUMNS)


def test_the_protein_tables_documented_columns_are_the_columns_they_have(ubiquitin_structure):
    import inspect

    import probe
    from probe.proteins import contacts, sets
    from probe.proteins.units import structure_units

    torch.set_num_threads(1)
    loaded = probe.models.load("zoo:esm-random")
    units, skipped = structure_units([Path(ubiquitin_structure)])
    assert skipped == []
    outcomes = [sets.analyse_unit(loaded, unit, sets.ContactOptions()) for unit in units]
    heads = sets.heads_table(outcomes)
    chains = sets.chain_table(outcomes)
    summary = sets.summarize_heads(heads, chains)
    per_head = outcomes[0].result.heads
    assert per_head is not None and len(chains) == len(units) >= 1
    assert _documented_columns(inspect.getdoc(contacts.ContactResult)) == set(per_head.columns)
    assert _documented_columns(inspect.getdoc(sets.chain_table)) == set(chains.columns)
    assert set(heads.columns) == {"record", "id"} | set(per_head.columns)
    assert _documented_columns(_attribute_docstring(sets, "HEAD_SUMMARY_COLUMNS")) == set(summary.columns)
    assert list(summary.columns) == list(sets.HEAD_SUMMARY_COLUMNS)
