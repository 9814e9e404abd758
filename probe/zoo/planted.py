"""Tiny GPT-2s whose heads are set by hand, so the right answer is known: the ground truth for `probe label`
(:func:`build_planted_gpt2`) and for circuit search (:func:`build_name_mover`, shipped as ``zoo:name-mover``).

**The planted labels** (:func:`build_planted_gpt2`):

Layer 0, head 0 — previous-token head, built from positional embeddings: position p is embedded as
(cos ω_f p, sin ω_f p) for four frequencies (plus the negated copy, so LayerNorm only rescales it); the query
rotates position i back by one step, so q_i · k_j = β Σ_f cos(ω_f (i − 1 − j)) peaks at j = i − 1.
Layer 0, head 1 — self head: the same features without the rotation (peak at j = i).
Layer 1, head 2 — first-token sink: a constant query and a key that reads a feature only the <bos> token
carries. Every other head has zero query/key weights, so it attends uniformly. Attention and MLP outputs are
zeroed, so the residual stream (what the next layer sees) is just the embeddings.

**The planted name mover** (:func:`build_name_mover`; its card is ``probe/zoo/name-mover/MODEL_CARD.md``): an
IOI-like circuit — a duplicate-token head L0H0 that tells the name-mover head L1H0 which name not to copy —
among seeded random distractor heads, with its task file (:func:`name_mover_rows`). ``zoo:name-mover`` is a
*planted* organism (:func:`probe.zoo.planted_names`): loaded like the trained ones, listed apart from them.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import transformers

from probe.quiet import transformers_quiet
from probe.zoo.tiny import build_tiny, tiny_config, word_tokenizer

# (layer, head) -> head type that `probe label` must find (and nothing else).
PLANTED_HEADS: dict[tuple[int, int], str] = {(0, 0): "previous_token", (0, 1): "self", (1, 2): "first_token"}

_FREQUENCIES = (1, 3, 7, 17)  # ω_f = 2π · k / 256: no offset within 128 positions mimics offset 0
_BOS_FEATURE = 16  # embedding dims 16 and 17 carry (+b, −b) on <bos> only


def _positional(n_positions: int, width: int) -> torch.Tensor:
    """[position width] features: per frequency (cos, sin, −cos, −sin), zero mean across dims, constant
    norm."""
    position = torch.arange(n_positions, dtype=torch.float64)
    table = torch.zeros(n_positions, width, dtype=torch.float64)
    for f, k in enumerate(_FREQUENCIES):
        angle = 2 * math.pi * k / 256 * position
        table[:, 4 * f:4 * f + 4] = torch.stack([angle.cos(), angle.sin(), -angle.cos(), -angle.sin()], -1)
    return table


def build_planted_gpt2(beta: float = 400.0, sink: float = 300.0):
    """(model, tokenizer) of the hand-set 2-layer, 4-head GPT-2 described in the module doc."""
    model, tokenizer = build_tiny("gpt2", seed=0)
    config = model.config
    width, n_heads = config.n_embd, config.n_head
    head_dim = width // n_heads
    assert width == 32 and n_heads == 4 and config.n_layer == 2, \
        "the planted model is laid out for the tiny GPT-2"
    with torch.no_grad():
        for parameter in model.transformer.h.parameters():
            parameter.zero_()
        for layer in model.transformer.h:  # LayerNorms back to the identity map (weight 1, bias 0)
            layer.ln_1.weight.fill_(1.0)
            layer.ln_2.weight.fill_(1.0)
        model.transformer.wte.weight.zero_()
        model.transformer.wte.weight[tokenizer.bos_token_id, _BOS_FEATURE] = 0.2
        model.transformer.wte.weight[tokenizer.bos_token_id, _BOS_FEATURE + 1] = -0.2
        model.transformer.wpe.weight.copy_(_positional(config.n_positions, width).float())

        # After ln_1 a position's (cos, sin) pair reads 2·(cos, sin) (the features have std 1/2).
        def plant_positional(layer: int, head: int, shift: int) -> None:
            weight = model.transformer.h[layer].attn.c_attn.weight  # [in, 3·width]: q | k | v
            q0, k0 = head * head_dim, width + head * head_dim
            for f, k in enumerate(_FREQUENCIES):
                omega = 2 * math.pi * k / 256 * shift
                c, s = math.cos(omega), math.sin(omega)
                # q = β/2 · R(−ω·shift) x: cos(a)cos(ω)+sin(a)sin(ω) = cos(a − ω), sin(a)cos(ω) − cos(a)sin(ω)
                # = sin(a − ω)
                weight[4 * f, q0 + 2 * f] = beta / 2 * c
                weight[4 * f + 1, q0 + 2 * f] = beta / 2 * s
                weight[4 * f, q0 + 2 * f + 1] = -beta / 2 * s
                weight[4 * f + 1, q0 + 2 * f + 1] = beta / 2 * c
                weight[4 * f, k0 + 2 * f] = 0.5
                weight[4 * f + 1, k0 + 2 * f + 1] = 0.5

        plant_positional(0, 0, shift=1)  # previous token
        plant_positional(0, 1, shift=0)  # self
        attn = model.transformer.h[1].attn.c_attn
        attn.bias[2 * head_dim] = 1.0  # head 2: constant query
        attn.weight[_BOS_FEATURE, width + 2 * head_dim] = sink  # its key reads the <bos> feature
    return model.eval(), tokenizer


def save_planted_gpt2(directory: str | Path) -> Path:
    """Save the planted model (weights, config, tokenizer) to `directory`; `probe label --model DIR` reads
    it."""
    directory = Path(directory)
    model, tokenizer = build_planted_gpt2()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def negate_head_output(model, layer: int, head: int) -> None:
    """Negate the slice of `layer`'s output projection that head `head` writes through (Llama-family
    ``o_proj``, GPT-2's ``c_proj``), in place: the head attends exactly as before (its query and key maps are
    untouched, and in the last layer nothing downstream reads its output but the logits) while its OV circuit
    is negated, so a copying head becomes its copy-suppressing twin."""
    n_heads = model.config.num_attention_heads
    with torch.no_grad():
        if model.config.model_type == "gpt2":
            weight = model.transformer.h[layer].attn.c_proj.weight  # Conv1D [in out]: rows are head · d_head
            d_head = weight.shape[0] // n_heads
            weight[head * d_head:(head + 1) * d_head] *= -1
        else:
            # Linear [out in]: columns head · d_head
            weight = model.model.layers[layer].self_attn.o_proj.weight
            d_head = weight.shape[1] // n_heads
            weight[:, head * d_head:(head + 1) * d_head] *= -1


# ------------------------------------------------------------------------------------------------------------
# zoo:name-mover: a planted IOI-like circuit (shipped in probe/zoo/name-mover/, built by build_name_mover)
# ------------------------------------------------------------------------------------------------------------

NAME_MOVER = "name-mover"
NAMES = ("Mary", "John", "Alice", "Bob", "Anna", "Tom", "Kate", "Paul", "Lucy", "Mark")
FILLERS = ("the", "a", "went", "to", "store", "gave", "drink", "then", "and", "after", "lunch", "park",
           "book", "with", "saw", "at", "home", "later", "walked", "found", "ball", "in", "garden", "house")
# residual-stream layout of the name mover (width 64): what each block of dimensions carries
_NAME, _IS_NAME, _IS_BOS = 0, 10, 11  # one dim per name; a name flag; a <bos> flag
_FILLER, _FILLER_DIMS = 12, 16  # fillers: seeded random directions in dims 12-27
_S, _U = 28, 38  # L0H0 writes the name it attends to in dims 28-37; L1H0 writes the name it moves in 38-47
_JUNK, _BALANCE = 48, 63  # distractor heads write mostly in 48-62; dim 63 makes every vector sum to 0


def _balanced(vector: torch.Tensor) -> torch.Tensor:
    """`vector` with its last entry set so that it sums to 0 over the width (a LayerNorm only scales it)."""
    vector = vector.clone()
    vector[..., _BALANCE] = 0.0
    vector[..., _BALANCE] = -vector.sum(-1)
    return vector


def build_name_mover(seed: int = 0, duplicate: float = 7.5, sink: float = 7.0, attend: float = 21.0,
                     inhibit: float = 18.0, unembed: float = 5.6, noise: float = 0.3, leak: float = 2e-4):
    """(model, tokenizer) of zoo:name-mover: a 2-layer, 4-head GPT-2 (width 64, MLPs of width 1 zeroed, no
    positions, untied unembedding) whose heads are set by hand to do an IOI-like task — ``… A … B … B`` → A,
    the name that occurs once — with seeded random distractor heads around them.

    * **L0H0, duplicate-token head**: from a name it attends to every copy of that name (itself included;
      other tokens attend to ``<bos>``) and writes the name into its own subspace (dims 28-37): at the last
      position, which repeats B, it writes "B" — the S-inhibition signal.
    * **L1H0, name mover**: its query is a constant "any name" (`attend`) minus `inhibit` × the name L0H0
      wrote; its key the position's name (dims 0-9 and the name flag), so from the last position it attends to
      the one name that is not B, A; its OV copies that name into dims 38-47, which the unembedding reads
      (`unembed` per name): logit(A) − logit(B) is large. With the last B replaced by a third name C the query
      inhibits C, A and B tie, and the difference is about 0.
    * **Distractors** (L0H1-3, L1H1-3): seeded Gaussian query, key and value maps (std `noise`) that read the
      whole stream, and output maps that write mostly into dims 48-62 and a little everywhere.

    Every embedding and every head's write sums to 0 over the width, so each LayerNorm only rescales.

    Returns
    -------
    (transformers.GPT2LMHeadModel, transformers.PreTrainedTokenizerFast)
        In eval mode, on the sdpa kernel; the tokenizer reads :data:`NAMES` and :data:`FILLERS` word by word
        and starts every text with ``<bos>``.

    Examples
    --------
    >>> model, tokenizer = build_name_mover()
    >>> ids = torch.tensor([tokenizer("the Mary went John to the John")["input_ids"]])  # [batch seq]
    >>> with torch.no_grad():  # [vocab]: the next token after the repeated John
    ...     logits = model(input_ids=ids).logits[0, -1]
    >>> vocab = tokenizer.get_vocab()
    >>> round(float(logits[vocab["Mary"]] - logits[vocab["John"]]), 1) > 5
    True
    """
    tokenizer = word_tokenizer([*NAMES, *FILLERS], bos_token="<bos>")
    vocab = tokenizer.get_vocab()
    config = tiny_config("gpt2", vocab_size=len(tokenizer), n_positions=64, n_embd=64, n_inner=1,
                         tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    width, n_heads, head_dim = 64, 4, 16
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for layer in model.transformer.h:
            layer.ln_1.weight.fill_(1.0)
            layer.ln_2.weight.fill_(1.0)
        model.transformer.ln_f.weight.fill_(1.0)
        embed = torch.zeros(len(tokenizer), width)
        for index, name in enumerate(NAMES):
            embed[vocab[name], _NAME + index] = embed[vocab[name], _IS_NAME] = 1.0
        embed[vocab["<bos>"], _IS_BOS] = 1.0
        for word in FILLERS:
            direction = torch.randn(_FILLER_DIMS, generator=generator)
            embed[vocab[word], _FILLER:_FILLER + _FILLER_DIMS] = direction / direction.norm() * 2 ** 0.5
        model.transformer.wte.weight.copy_(_balanced(embed))
        names = len(NAMES)

        def slices(layer: int, head: int):
            block = model.transformer.h[layer].attn
            q, k, v = (part * width + head * head_dim for part in range(3))
            return block.c_attn.weight, block.c_attn.bias, block.c_proj.weight, q, k, v, head * head_dim

        # L0H0: q·k = duplicate · [same name] + sink · [key is <bos>]; value: the name; output: into dims S
        weight, bias, out, q, k, v, o = slices(0, 0)
        for index in range(names):
            weight[_NAME + index, q + index] = duplicate
            weight[_NAME + index, k + index] = 1.0
            weight[_NAME + index, v + index] = 1.0
            out[o + index] = _balanced(torch.eye(width)[_S + index] / 3.27)  # a name reads 3.27 after ln_1
        bias[q + names] = sink
        weight[_IS_BOS, k + names] = 1.0
        # L1H0: q·k = attend · [key is a name] − inhibit · [key's name = the name in dims S]; OV: name -> U
        weight, bias, out, q, k, v, o = slices(1, 0)
        bias[q + names] = attend
        weight[_IS_NAME, k + names] = 1.0
        for index in range(names):
            weight[_S + index, q + index] = -inhibit
            weight[_NAME + index, k + index] = 1.0
            weight[_NAME + index, v + index] = 1.0
            out[o + index] = _balanced(torch.eye(width)[_U + index] / 2.31)  # a name reads 2.31 after ln_1
            model.lm_head.weight[vocab[NAMES[index]], _U + index] = unembed
        for layer in range(2):  # the distractors
            for head in range(1, n_heads):
                weight, bias, out, q, k, v, o = slices(layer, head)
                for start in (q, k, v):
                    weight[:, start:start + head_dim] = noise * torch.randn(width, head_dim,
                                                                            generator=generator)
                # layer 0 leaks little (its writes move the layer-1 LayerNorm's scale, on which A and B tie
                # in the corrupted run); layer 1 writes in dims 48-62 and leaks 10x more (only ln_f reads it)
                write = leak * (10 if layer else 1) * torch.randn(head_dim, width, generator=generator)
                write[:, _JUNK:_BALANCE] += 100 * leak * layer * torch.randn(head_dim, _BALANCE - _JUNK,
                                                                             generator=generator)
                out[o:o + head_dim] = _balanced(write)
    return model, tokenizer


def name_mover_rows(pairs: int = 32, seed: int = 0) -> list[dict]:
    """The planted name mover's task as a user would write it (the rows of ``probe/zoo/name-mover/task.csv``):
    clean ``<fillers> A <fillers> B <fillers> B`` (or B first: ``B … A … B``), corrupted = the same with the
    last B replaced by a third name C, correct A, incorrect B; fillers random, 1-4 between names.

    Examples
    --------
    >>> row = name_mover_rows(1, seed=3)[0]
    >>> sorted(row), row["clean"].split()[-1] == row["incorrect"], row["corrupted"].split()[-1] in NAMES
    (['clean', 'correct', 'corrupted', 'corruption', 'incorrect'], True, True)
    """
    generator = torch.Generator().manual_seed(seed)

    def pick(pool, count=1):
        return [pool[int(i)] for i in torch.randperm(len(pool), generator=generator)[:count]]

    def fillers():
        return pick(FILLERS, int(torch.randint(1, 5, (1,), generator=generator)))

    rows = []
    for _ in range(pairs):
        a, b, c = pick(NAMES, 3)
        first, second = (a, b) if torch.rand(1, generator=generator) < 0.5 else (b, a)
        words = [*fillers(), first, *fillers(), second, *fillers()]
        rows.append({"clean": " ".join([*words, b]), "corrupted": " ".join([*words, c]), "correct": a,
                     "incorrect": b, "corruption": "the repeated name replaced by a third name (ABC)"})
    return rows


def save_name_mover(directory: str | Path, pairs: int = 32) -> Path:
    """Write zoo:name-mover to `directory`: weights, config, tokenizer, and its task file ``task.csv``
    (:func:`name_mover_rows`, `pairs` rows); the card files are kept in the package (MODEL_CARD.md,
    card.json).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = save_name_mover(folder, pairs=4)
    ...     sorted(path.name for path in written.iterdir() if path.suffix in (".csv", ".safetensors"))
    ['model.safetensors', 'task.csv']
    """
    import csv

    directory = Path(directory)
    model, tokenizer = build_name_mover()
    with transformers_quiet():
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    rows = name_mover_rows(pairs)
    with open(directory / "task.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return directory
