"""Retrieval heads (probe.heads.retrieval): Wu et al.'s score on planted cases, equality with their recipe on
eager attention, the needle probes, the label pipeline's generation hook, and positive / negative control
organisms."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from probe.errors import ProbeError
from probe.heads import retrieval
from probe.heads.label import LabelConfig, label_model
from probe.heads.registry import DEFAULT_TYPES, HEAD_TYPES, REGISTRY, TOKEN_TYPES, target_pattern
from probe.heads.retrieval import (
    ArgmaxSink,
    RetrievalConfig,
    needle_probes,
    needle_recall,
    retrieval_score,
    retrieval_scores,
    score_needles,
    uniform_chance,
)

# ------------------------------------------------------------------------------------------------------------
# The definition on planted cases
# ------------------------------------------------------------------------------------------------------------

# positions:          0  1  2  3  4  5  6  7  8
PROMPT = torch.tensor([[1, 9, 5, 3, 5, 6, 7, 9, 3]])  # <bos> hay hay key | needle 5 6 7 | hay key
START, END = torch.tensor([4]), torch.tensor([7])


def planted(keys_per_head: list[list[int]]) -> torch.Tensor:
    """[step batch=1 layer=1 head] argmax keys from one list of per-step keys per head."""
    return torch.tensor(keys_per_head).T[:, None, None, :]


def test_score_counts_steps_whose_top_key_is_in_the_needle_and_holds_the_generated_token():
    generated = torch.tensor([[5, 6, 7]])
    keys = planted([
        [4, 5, 6],  # copies each needle token from its needle position: 3/3
        [4, 4, 4],  # always the first needle token: right only at step 0: 1/3
        [2, 5, 6],  # step 0 attends to a haystack copy of 5 (position 2): outside the needle, no credit: 2/3
        [5, 6, 4],  # inside the needle but the wrong token every time: 0
        [0, 8, 3],  # never inside: 0
    ])
    score = retrieval_score(keys, generated, PROMPT, START, END)
    assert score.shape == (1, 1, 5)
    assert torch.allclose(score[0, 0], torch.tensor([1.0, 1 / 3, 2 / 3, 0.0, 0.0]))


def test_generated_tokens_outside_the_needle_score_nothing_and_keys_may_point_past_the_prompt():
    generated = torch.tensor([[5, 9, 6]])  # step 1 emits a haystack token
    keys = planted([[4, 7, 5], [4, 9, 10]])  # head 1 at steps 1-2 attends to generated positions 9, 10
    score = retrieval_score(keys, generated, PROMPT, START, END)
    assert torch.allclose(score[0, 0], torch.tensor([2 / 3, 1 / 3]))


def test_uncaptured_steps_do_not_score():
    generated = torch.tensor([[5, 6, 7]])
    keys = planted([[4, -1, -1]])
    assert float(retrieval_score(keys, generated, PROMPT, START, END)[0, 0, 0]) == pytest.approx(1 / 3)


def test_chance_is_the_rate_at_which_a_random_key_holds_the_generated_needle_token():
    needle = [torch.tensor([5, 6, 7])]
    generated = torch.tensor([[5, 6, 9]])  # 9 is not in the needle
    # step s sees 9 + s keys: (1/9 + 1/10 + 0) / 3
    assert float(uniform_chance(generated, needle, prompt_len=9)[0]) == pytest.approx((1 / 9 + 1 / 10) / 3)
    repeated = [torch.tensor([5, 5, 7])]
    assert float(uniform_chance(torch.tensor([[5, 5, 7]]), repeated, 9)[0]) == pytest.approx(
        (2 / 9 + 2 / 10 + 1 / 11) / 3)


def test_recall_is_rouge1_recall_on_token_ids():
    needles = [torch.tensor([5, 6, 7, 8]), torch.tensor([5, 5, 6, 7])]
    generated = torch.tensor([[8, 7, 1, 5], [5, 1, 1, 1]])
    assert needle_recall(generated, needles).tolist() == [0.75, 0.25]
    # strictly > 50 %
    assert retrieval.kept(torch.tensor([0.5, 0.625, 0.0]), 0.5).tolist() == [False, True, False]
    assert retrieval.kept(torch.tensor([0.0]), 0.0).tolist() == [True]


def test_argmax_sink_refuses_prefill_blocks():
    from probe.engine import AttentionBlock

    sink = ArgmaxSink(1, 2)
    block = AttentionBlock(0, 0, (0, 1), 0, 4, 0, 4, torch.rand(1, 2, 4, 4))
    with pytest.raises(ProbeError, match="prefill the prompt outside"):
        sink.update(block)
    one_row = torch.tensor([[[[0.1, 0.7, 0.2]], [[0.5, 0.2, 0.3]]]])  # [batch head 1 key]
    sink.update(AttentionBlock(0, 0, (0, 1), 0, 1, 2, 3, one_row))
    assert sink.argmax_keys().tolist() == [[[[1, 0]]]]


# ------------------------------------------------------------------------------------------------------------
# Probes
# ------------------------------------------------------------------------------------------------------------


def test_needle_probes_hold_a_unique_needle_cued_by_a_key():
    from probe.models import load

    tokenizer = load("zoo:retrieval").tokenizer
    probes = needle_probes(tokenizer, 6, 300, seed=3)
    again = needle_probes(tokenizer, 6, 300, seed=3)
    assert torch.equal(probes.input_ids, again.input_ids)
    assert probes.input_ids.shape == (6, 300)
    assert (probes.input_ids[:, 0] == tokenizer.bos_token_id).all()
    assert torch.allclose(probes.depth, (torch.arange(6) + 0.5) / 6)
    for index, row in enumerate(probes.input_ids):
        start, end = int(probes.needle_start[index]), int(probes.needle_end[index])
        needle, key = row[start:end], row[start - 2:start]
        assert end - start == 8 and torch.equal(row[-2:], key)
        assert len(set(needle.tolist()) | set(key.tolist())) == 10  # distinct
        haystack = torch.cat([row[1:start - 2], row[end:-2]])
        assert not set(haystack.tolist()) & (set(needle.tolist()) | set(key.tolist()))
    assert probes.needle_start.tolist() == sorted(probes.needle_start.tolist())  # depth grows with the index


def test_too_short_probes_are_a_one_line_error():
    from probe.models import load

    with pytest.raises(ProbeError, match="longer --seq-len"):
        needle_probes(load("zoo:retrieval").tokenizer, 1, 10, seed=0)


# ------------------------------------------------------------------------------------------------------------
# Equality with Wu et al.'s recipe on eager attention
# ------------------------------------------------------------------------------------------------------------


def wu_reference(model, prompt: torch.Tensor, start: int, end: int, n_new: int):
    """retrieval_head_detection.py's loop, written out: prefill prompt[:-1]; then feed one token at a time
    with output_attentions; emitted = argmax of the logits; each head's top-1 key of its last row scores
    1/(end − start) when start ≤ key < end and prompt[key] equals the emitted token."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    config = model.config
    score = torch.zeros(config.num_hidden_layers, config.num_attention_heads)
    emitted = []
    with torch.no_grad():
        cache = getattr(model(input_ids=prompt[None, :-1], use_cache=True), name)
        token = prompt[-1]
        for _ in range(n_new):
            out = model(input_ids=token.view(1, 1), use_cache=True, output_attentions=True, **{name: cache})
            cache = getattr(out, name)
            token = out.logits[0, -1].argmax()
            emitted.append(int(token))
            for layer, attention in enumerate(out.attentions):  # [1 head 1 key]
                for head in range(attention.shape[1]):
                    key = int(attention[0, head, -1].topk(1).indices[0])
                    if start <= key < end and int(prompt[key]) == int(token):
                        score[layer, head] += 1 / (end - start)
    return score, emitted


@pytest.mark.parametrize("name", ["retrieval", "induction"])
def test_streamed_scores_equal_the_papers_recipe_on_eager_attention(name):
    from transformers import AutoModelForCausalLM

    from probe import zoo
    from probe.models import load

    loaded = load(f"zoo:{name}")
    eager = AutoModelForCausalLM.from_pretrained(zoo.path(name), attn_implementation="eager").eval()
    length = 200 if name == "retrieval" else 48
    probes = needle_probes(loaded.tokenizer, 4, length, seed=1)
    ours = score_needles(loaded, probes, RetrievalConfig(min_recall=0.0, batch_size=2))
    for index in range(4):
        reference, emitted = wu_reference(eager, probes.input_ids[index], int(probes.needle_start[index]),
                                          int(probes.needle_end[index]), 8)
        assert ours.generated[index].tolist() == emitted
        assert torch.allclose(ours.score[index], reference)
    assert ours.score.max() > 0.5  # the comparison covers heads that do retrieve


# ------------------------------------------------------------------------------------------------------------
# The registry and the pipeline hook
# ------------------------------------------------------------------------------------------------------------


def test_retrieval_is_an_opt_in_generation_scored_type_for_causal_lms():
    spec = REGISTRY["retrieval"]
    assert "retrieval" in HEAD_TYPES and "retrieval" not in DEFAULT_TYPES and "retrieval" not in TOKEN_TYPES
    assert spec.probe == "generation" and spec.scorer is not None and spec.kinds == {"causal_lm"}
    with pytest.raises(ProbeError, match="no target pattern"):
        target_pattern("retrieval", [1, 2, 3])


def test_default_labelling_does_not_decode():
    from probe.models import load

    table = label_model(load("zoo:induction"), LabelConfig(examples=2, ablate="none"))
    assert "retrieval" not in set(table["head_type"])


def test_masked_models_skip_retrieval_with_a_note():
    from probe.models import load

    notes = []
    with pytest.raises(ProbeError, match="none of the types retrieval applies"):
        label_model(load("zoo:esm-random"), LabelConfig(types=("retrieval",)), note=notes.append)
    assert any("skipped retrieval" in line for line in notes)


# ------------------------------------------------------------------------------------------------------------
# Controls
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def organism_table():
    """The retrieval organism labelled on 16 needle probes of 4,096 tokens (its card's label config)."""
    from probe import zoo
    from probe.models import load
    from probe.training.cards import card_label_config

    config = card_label_config(zoo.card("retrieval"), None)
    assert config.seq_len >= 4096
    return label_model(load("zoo:retrieval"), config)


def test_retrieval_organism_is_labelled_retrieval_at_4k_tokens(organism_table):
    table = organism_table
    assert set(table["head_type"]) == {"retrieval"} and set(table["seq_len"]) == {4096.0}
    assert (table["probe_set"] == "needles").all()
    labelled = table[table["label"]]
    assert set(labelled["layer"]) == {1}  # the copying layer (layer 0 holds the previous-token heads)
    assert labelled["score"].max() > 0.9 and (labelled["ci_low"] > 0.25).all()
    assert (labelled["chance"] < 1e-3).all()  # 8 needle tokens among 4,096 keys
    # the model retrieved (recall > 50 %) at least half of the selection half's 8 probes (issue 57: n_examples
    # and n_clusters are the selection half's; the other 8 are the held-out confirmation's)
    assert (table["n_clusters"] == 8).all() and (table["n_examples"] >= 4).all()
    assert not math.isnan(float(labelled["q_value"].max())) and (labelled["q_value"] <= 0.05).all()
    assert (table.loc[table["layer"] == 0, "score"] == 0).all()


def test_retrieval_organism_meets_its_card(organism_table):
    from probe import zoo

    assert zoo.check_requirements(organism_table, zoo.card("retrieval")["requirements"]) == []


def random_twin(tmp_path):
    """The retrieval organism's architecture and tokenizer with random weights (no mechanism)."""
    from probe.models import load
    from probe.training import organisms as zoo_train

    config = zoo_train.ORGANISMS["retrieval"]
    tokenizer = zoo_train.build_tokenizer(config)
    model = zoo_train.build_model(config, tokenizer, seed=5)
    model.save_pretrained(tmp_path / "random")
    tokenizer.save_pretrained(tmp_path / "random")
    return load(str(tmp_path / "random"))


def test_random_model_is_not_labelled_retrieval(tmp_path):
    loaded = random_twin(tmp_path)
    notes = []
    table = label_model(loaded, LabelConfig(types=("retrieval",), seq_len=4096, examples=8),
                        note=notes.append)
    assert not table["label"].any()
    assert table["score"].isna().all()  # it never copies the needle: no probe counts, so no score (not 0)
    assert any("0 of 8 probes count" in line for line in notes)
    # scored on every probe anyway (min_recall 0): no head retrieves
    scores = retrieval_scores(loaded, RetrievalConfig(examples=8, seq_len=4096, min_recall=0.0))
    assert scores["score"].max() < 0.2 and (scores["n_retrieved"] == 8).all()


def test_positional_control_is_not_labelled_retrieval():
    """zoo:positional (fixed-offset heads at -15, no induction head) copies only the needles that happen to
    lie ~16 tokens back: 3 of 16 probes. Conditioning on success alone (Wu et al.) would credit its heads; the
    share rule leaves the length unscored, and scored on every probe its heads stay far below the
    organism's."""
    from probe.heads.retrieval import needle_probes, score_needles
    from probe.models import load

    loaded = load("zoo:positional")
    notes = []
    table = label_model(loaded, LabelConfig(types=("retrieval",), seq_len=56, examples=16), note=notes.append)
    assert not table["label"].any() and table["score"].isna().all()
    assert any("0 of 16 probes count" in line for line in notes)
    probes = needle_probes(loaded.tokenizer, 16, 56, seed=0)
    success_only = score_needles(loaded, probes, RetrievalConfig(min_retrieved=0.0))
    retrieved = ~torch.isnan(success_only.chance)
    assert 1 <= int(retrieved.sum()) <= 4
    # the selection effect the rule exists for
    assert float(torch.nanmean(success_only.score, 0)[1].min()) > 0.5
    scores = retrieval_scores(loaded, RetrievalConfig(examples=16, seq_len=56, min_recall=0.0))
    assert scores["score"].max() < 0.3


def test_induction_heads_copy_needles_too():
    """Not a negative control: at its own lengths the induction organism copies the needle with its layer-1
    induction heads, and by Wu et al.'s definition those are retrieval heads."""
    from probe.models import load

    table = label_model(load("zoo:induction"), LabelConfig(types=("retrieval",), seq_len=56, examples=16,
                                                            ablate="none"))
    assert set(table.loc[table["label"], "layer"]) == {1}


def test_probe_label_cli_types_retrieval(tmp_path):
    import pandas as pd

    from probe.cli import main

    out = tmp_path / "labels.csv"
    assert main(["label", "--model", "zoo:retrieval", "--types", "retrieval", "--seq-len", "1024",
                 "--examples", "8", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert set(table["head_type"]) == {"retrieval"} and table["label"].any()


@pytest.mark.parametrize("arch", ["llama", "mistral", "gpt2"])
def test_argmax_keys_equal_eager_top1_on_gqa_sliding_window_and_gpt2(arch, tmp_path):
    """Random tiny models (Llama with grouped-query attention, Mistral with a sliding window, GPT-2): the
    sink's top-1 key of every head at every decoding step equals eager attention's, and so do the emitted
    tokens."""
    from transformers import AutoModelForCausalLM

    from probe.heads.retrieval import decode_with_argmax
    from probe.models import load
    from probe.zoo.tiny import save_tiny

    save_tiny(arch, tmp_path / arch, seed=0)
    loaded = load(str(tmp_path / arch))
    eager = AutoModelForCausalLM.from_pretrained(tmp_path / arch, attn_implementation="eager").eval()
    prompt = torch.randint(5, 40, (2, 60), generator=torch.Generator().manual_seed(0))
    generated, keys = decode_with_argmax(loaded.model, prompt, 5, loaded.n_layers, loaded.n_heads)
    name = "cache" if "cache" in inspect.signature(eager.forward).parameters else "past_key_values"
    for row in range(2):
        with torch.no_grad():
            cache = getattr(eager(input_ids=prompt[row:row + 1, :-1], use_cache=True), name)
            token = prompt[row, -1]
            for step in range(5):
                out = eager(input_ids=token.view(1, 1), use_cache=True, output_attentions=True,
                            **{name: cache})
                cache = getattr(out, name)
                token = out.logits[0, -1].argmax()
                assert int(generated[row, step]) == int(token)
                # [layer head]
                top = torch.stack([attention[0, :, -1].argmax(-1) for attention in out.attentions])
                assert torch.equal(keys[step, row], top)


# ------------------------------------------------------------------------------------------------------------
# Verified by ablation (Wu et al.: the top-K retrieval heads masked against K random heads)
# ------------------------------------------------------------------------------------------------------------


def test_head_counts_and_top_heads_by_hand():
    from probe.heads.retrieval_ablation import head_counts, top_heads

    assert head_counts(144) == [1, 3, 4, 6, 7] and head_counts(8) == [1] and head_counts(1000) == [10,
        20, 30, 40, 50]
    scores = torch.tensor([[0.1, float("nan")], [0.9, 0.5]])
    assert top_heads(scores, 2) == ((1, 0), (1, 1)) and top_heads(torch.full((2, 2), float("nan")), 1) == ()


def test_output_zeroing_of_a_non_retrieval_head_breaks_retrieval_and_the_summary_says_so(organism_table):
    """zoo:retrieval (8 heads: K = 1), heads zeroed (ours): masking L1H0 drops the needle recall from 0.65 to
    0.08, but zeroing L0H2 — retrieval score 0, a previous-token head the copy depends on — drops it further
    (0.00). The random controls come from the whole model, and the summary says the top head does not beat
    every control."""
    from probe.heads.label import summary_lines

    rows = organism_table
    assert (rows["retrieval_k"] == 1).all() and (rows["retrieval_mask"] == "output").all()
    first = rows.iloc[0]
    assert first["needle_recall"] > 0.5
    assert first["needle_recall_top"] < first["needle_recall"] - 0.3
    assert first["needle_recall_other_head"] == "L0H2"
    assert first["needle_recall_other_min"] <= first["needle_recall_top"]
    assert not bool(first["retrieval_beats_controls"])
    assert first["retrieval_ablation"].startswith("clean ") and "K=1" in first["retrieval_ablation"]
    line = next(line for line in summary_lines(rows) if "· retrieval" in line)
    assert "most damaging other head L0H2" in line and "NOT beyond every control" in line


def test_whole_model_draws_span_every_layer_and_never_the_top_heads():
    from probe.heads.retrieval_ablation import whole_model_draws

    draws = whole_model_draws(4, 3, 2, ((1, 0),), draws=20, seed=0)
    assert len(draws) == 20 and len(set(draws)) == 20  # distinct sets
    assert all(len(draw) == 2 and (1, 0) not in draw for draw in draws)
    assert {layer for draw in draws for layer, _ in draw} == {0, 1, 2, 3}
    assert whole_model_draws(1, 2, 2, ((0, 0),), draws=3, seed=0) == []  # too few heads left
    assert whole_model_draws(1, 3, 2, ((0, 0),), draws=3, seed=0) == [((0, 1), (0, 2))]  # only one set exists


def test_a_run_where_every_control_is_milder_beats_them_and_says_so():
    """The summary and the column on hand-made numbers: the top head below every random draw and below the
    worst other head beats the controls; one other head at the top's recall does not."""
    from probe.heads.retrieval_ablation import RetrievalAblation

    beats = RetrievalAblation(0.65, {1: (((1, 0),), 0.10, [0.60, 0.58])}, "query", {(0, 2): 0.5, (1, 1): 0.6})
    columns = beats.columns()
    assert columns["retrieval_beats_controls"] is True and columns["needle_recall_other_head"] == "L0H2"
    assert columns["retrieval_mask"] == "query" and "(query masked)" in columns["retrieval_ablation"]
    tie = RetrievalAblation(0.65, {1: (((1, 0),), 0.10, [0.60])}, "output", {(0, 2): 0.10})
    assert tie.columns()["retrieval_beats_controls"] is False


def test_wu_query_masking_makes_the_head_uniform_on_decoding_steps_only():
    """Wu et al.'s mask zeroes the head's query on decoding steps: that step's attention row of the head is
    uniform over the keys it sees, the other heads' are not, and the prefill is untouched (eager attention of
    a tiny Llama with peaked attention as the reference)."""
    from types import SimpleNamespace

    from probe.heads.retrieval_ablation import query_masked
    from probe.zoo.tiny import build_tiny

    model, _ = build_tiny("llama", seed=3, sharpness=4.0)
    model.set_attn_implementation("eager")
    loaded = SimpleNamespace(model=model, name="tiny llama", n_heads=model.config.num_attention_heads)
    ids = torch.randint(5, 60, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        clean = model(input_ids=ids[:, :8], use_cache=True, output_attentions=True)
        with query_masked(loaded, ((1, 2),)):
            prefill = model(input_ids=ids[:, :8], use_cache=True, output_attentions=True)
            step = model(input_ids=ids[:, 8:], cache=prefill.past_key_values, output_attentions=True)
    assert torch.allclose(prefill.attentions[1], clean.attentions[1])  # the prefill is not masked
    row = step.attentions[1][0, :, -1]  # [head key]: the decoding step's one row
    assert torch.allclose(row[2], torch.full((9,), 1 / 9), atol=1e-6)
    assert not torch.allclose(row[1], torch.full((9,), 1 / 9), atol=1e-3)


@pytest.mark.slow
def test_wu_masking_of_the_top_head_beats_every_control_on_the_organism(organism_table):
    """Wu et al.'s masking (query zeroed, decoding only) on the same 16 needle probes: masking L1H0 drops
    recall from 0.65 to 0.13, every random whole-model head and every other head alone leaves ≥ 0.5 — under
    their masking the retrieval head beats every control (L0H2, which output zeroing finds, is not one)."""
    from probe.heads.retrieval import needle_probes
    from probe.heads.retrieval_ablation import retrieval_ablation
    from probe.models import load

    loaded = load("zoo:retrieval")
    scores = torch.tensor(organism_table.sort_values(["layer", "head"])["score"].to_numpy()).reshape(2, 4)
    probes = needle_probes(loaded.tokenizer, 16, 4096, seed=0)
    columns = retrieval_ablation(loaded, probes, scores, mask="query").columns()
    assert columns["retrieval_mask"] == "query" and columns["needle_recall_top"] < 0.3
    assert columns["needle_recall_random_min"] > 0.5 and columns["needle_recall_other_min"] > 0.5
    assert columns["retrieval_beats_controls"] is True


def test_a_random_model_shows_no_drop_and_an_unscored_length_no_columns(tmp_path):
    """Negative control: the organism's architecture with random weights retrieves nothing, so masking its
    'top' heads (scored on every probe) does no more than random heads; labelled, its length has no score and
    the ablation columns are NaN (unknown, not 0)."""
    from probe.heads.retrieval import needle_probes, score_needles
    from probe.heads.retrieval_ablation import retrieval_ablation

    loaded = random_twin(tmp_path)
    probes = needle_probes(loaded.tokenizer, 8, 1024, seed=0)
    scored = score_needles(loaded, probes, RetrievalConfig(examples=8, seq_len=1024, min_recall=0.0,
                                                           min_retrieved=0.0))
    result = retrieval_ablation(loaded, probes, torch.nanmean(scored.score, 0)).columns()
    assert result["needle_recall_top"] >= result["needle_recall_random_min"]
    assert result["needle_recall"] - result["needle_recall_top"] < 0.1
    table = label_model(loaded, LabelConfig(types=("retrieval",), seq_len=1024, examples=8))
    assert table["needle_recall"].isna().all() and table["retrieval_k"].isna().all()
