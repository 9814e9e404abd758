"""The engine reads what a sink needs from its declared `SinkNeeds`, never by probing attributes: no `hasattr`
/ `getattr` on a sink anywhere in probe/engine/, and the only sink methods the engine calls are the
protocols'."""

from __future__ import annotations

import ast
from pathlib import Path

from probe.engine import sinks

ENGINE = Path(__file__).resolve().parents[2] / "probe" / "engine"
# the methods the sink protocols declare (probe.engine.sinks), read from the protocols themselves
PROTOCOLS = (sinks.Sink, sinks.GatherSink, sinks.ReduceSink, sinks.OutputNormSink)
PROTOCOL_METHODS = {name for protocol in PROTOCOLS for name, value in vars(protocol).items()
                    if callable(value) and not name.startswith("_")}


def _names(node: ast.AST) -> set[str]:
    """Every identifier and attribute name inside an expression."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _sink_like(tree: ast.AST) -> set[str]:
    """Names bound by a loop or comprehension over something that mentions a sink (``for s in
    session.sinks``)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node,
                      (ast.For, ast.comprehension)) and any("sink" in n.lower() for n in _names(node.iter)):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return bound


def _probes_on_sinks(tree: ast.AST) -> list[int]:
    sink_like = _sink_like(tree)
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("hasattr", "getattr")
                and node.args and any("sink" in name.lower() or name in sink_like
                                      for name in _names(node.args[0]))):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_attribute_probing_on_sinks_in_the_engine():
    found = {}
    for path in sorted(ENGINE.glob("*.py")):
        lines = _probes_on_sinks(ast.parse(path.read_text()))
        if lines:
            found[path.name] = lines
    assert not found, f"hasattr/getattr on a sink in probe/engine/ (declare it in SinkNeeds instead): {found}"


def test_the_check_finds_a_probe():
    """Negative control: the detector flags the patterns it forbids."""
    source = ("def f(session, sink):\n    a = hasattr(sink, 'rows_for')\n"
              "    b = [getattr(s, 'x', None) for s in session.sinks]\n")
    assert _probes_on_sinks(ast.parse(source)) == [2, 3]
    assert _probes_on_sinks(ast.parse("getattr(module, 'is_causal', True)")) == []


def test_the_engine_calls_only_protocol_methods_on_sinks():
    """Every method call on a variable named `sink` in the engine is one of the protocols' methods."""
    called = set()
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "sink"):
                called.add(node.func.attr)
    # capture_attention reads back the DenseSink it made itself (`sink.attention(0)`): not a capability probe
    assert PROTOCOL_METHODS == {"needs", "update", "update_gathered", "update_reduced", "update_output_norms"}
    assert called and called <= PROTOCOL_METHODS | {"attention"}, called - PROTOCOL_METHODS
