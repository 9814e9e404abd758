"""docs/howto/attention-variant.md, followed from its own text: step 1's entry (the page's code block)
declared on the keyword table moves the refusal and puts the keyword's row on the engine page; a harmless toy
keyword needs step 1 only, end to end through the attention function; step 2's bias (the page's code block)
is slope_h · (j − i) on a planted case. And the page names at most 6 files to touch, tests included."""

from __future__ import annotations

import pytest
import torch

from probe.engine.attention import capture_attention_forward
from probe.engine.keywords import KEYWORDS, read_keywords
from probe.errors import ProbeError
from tests.howto import DOCS, files_to_touch, hook, python_blocks

HOWTO = DOCS / "howto" / "attention-variant.md"
KINDS = {"implemented", "harmless", "none_only"}


def howto() -> str:
    return HOWTO.read_text(encoding="utf-8")


def declared_entry() -> tuple[str, tuple[str, str]]:
    """Step 1's code block: one entry of KEYWORDS, as the page writes it."""
    block = next(block for block in python_blocks(howto()) if block.lstrip().startswith('"alibi_slopes":'))
    entries = eval("{" + block + "}")  # noqa: S307 - the page's own dict entry
    assert len(entries) == 1
    return next(iter(entries.items()))


def engine_page() -> str:
    """docs/engine.md as the docs build renders it (its keyword table written from KEYWORDS)."""
    return hook("engine_keywords").render((DOCS / "engine.md").read_text(encoding="utf-8"))


class _Attention(torch.nn.Module):
    is_causal = True


def test_the_how_to_names_at_most_six_files_tests_included():
    files = files_to_touch(howto())
    assert files == {"probe/engine/keywords.py", "probe/engine/attention.py", "probe/engine/kernels.py",
                     "tests/engine/test_engine_variants.py", "tests/coverage/catalogue.py",
                     "docs/architectures.md"}
    assert "docs/engine.md" not in files  # the keyword table is written from KEYWORDS


def test_step_one_moves_the_refusal_and_puts_the_row_on_the_engine_page(monkeypatch):
    name, (kind, text) = declared_entry()
    assert name == "alibi_slopes" and kind in KINDS and text
    slopes = torch.tensor([0.0, 1.0])
    # the page's starting point: the engine refuses the keyword today, and its page has no row for it
    assert name not in KEYWORDS
    with pytest.raises(ProbeError, match=r"'alibi_slopes'.*--engine eager"):
        read_keywords({name: slopes})
    assert f"| `{name}` |" not in engine_page()

    monkeypatch.setitem(KEYWORDS, name, (kind, text))  # step 1, on the table itself
    read_keywords({name: slopes, "scaling": 0.5})
    with pytest.raises(ProbeError, match="'alibi_scale'"):  # the next unknown keyword: still refused
        read_keywords({name: slopes, "alibi_scale": 2.0})
    assert engine_page().count(f"| `{name}` | {kind} | {text} |") == 1


def test_a_harmless_keyword_needs_step_one_only(monkeypatch):
    torch.manual_seed(0)
    query, key, value = torch.randn(3, 1, 2, 5, 8).unbind(0)  # [batch head query dim]
    with pytest.raises(ProbeError, match=r"'toy_flag'.*--engine eager"):
        capture_attention_forward(_Attention(), query, key, value, None, toy_flag=True)
    monkeypatch.setitem(KEYWORDS, "toy_flag", ("harmless", "a toy flag: nothing the function needs"))
    with_flag, _ = capture_attention_forward(_Attention(), query, key, value, None, toy_flag=True)
    plain, _ = capture_attention_forward(_Attention(), query, key, value, None)
    torch.testing.assert_close(with_flag, plain, rtol=0, atol=0)
    assert "| `toy_flag` | harmless | a toy flag: nothing the function needs |" in engine_page()
    # a none_only keyword given a value is still refused (the kind matters, not only the name)
    monkeypatch.setitem(KEYWORDS, "toy_packed", ("none_only", "toy packed batches"))
    capture_attention_forward(_Attention(), query, key, value, None, toy_packed=None)
    with pytest.raises(ProbeError, match="'toy_packed' \\(toy packed batches\\)"):
        capture_attention_forward(_Attention(), query, key, value, None, toy_packed=[0, 5])


@pytest.mark.parametrize("n_query", [4, 1])
def test_step_two_bias_is_slope_times_key_minus_query_position(n_query):
    """The page's bias on two heads with slopes 0 and 1, four keys; one query (a KV-cache step) is the last
    position."""
    block = next(block for block in python_blocks(howto()) if "slopes[:, None, None]" in block)
    namespace = {"torch": torch, "slopes": torch.tensor([0.0, 1.0]), "key": torch.zeros(1, 2, 4, 8),
                 "query": torch.zeros(1, 2, n_query, 8), "n_query": n_query}
    exec(compile(block, str(HOWTO), "exec"), namespace)  # noqa: S102 - the page's own code
    bias = namespace["bias"]  # [head query key]
    by_hand = torch.tensor([[[float(j - i) for j in range(4)] for i in range(4)]])[:, 4 - n_query:]
    torch.testing.assert_close(bias, torch.cat([torch.zeros_like(by_hand), by_hand]), rtol=0, atol=0)
