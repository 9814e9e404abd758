"""Quick check of whether a natural-text organism forms previous-token and induction heads while it trains:
the numbers of docs/zoo.md's "Findings so far" table (issue 42).

    OMP_NUM_THREADS=1 python scripts/organism_check.py natural-text --set '{"vocab_size": 259}' \
        --at 0,500,1000,1500,2000,2500,3000

Trains the recipe (with the JSON overrides of ``--set``, as ``probe train --set``) exactly as
:func:`probe.training.train.train` does (same schedule, same optimizer step, no checkpoints written) and
prints, at each step of ``--at``, eager-attention measurements that are cheaper than ``probe history``:

* induction: each head's mean attention from every token of the second copy to the token after its first
  occurrence, on 32 random blocks of 40 tokens drawn by the held-out split's token frequencies and written
  twice (Olsson et al.'s prefix matching; chance 1/position ≈ 0.02);
* previous-token: each head's mean attention to the token before, on 32 held-out passages × 100 tokens;
* rep1 / rep2: the loss on the first and on the second copy of those blocks;
* the held-out loss and the ICL score (:mod:`probe.training.incontext`) on the first 300 held-out passages.

``--copy-stats`` only counts, on the training split in windows of the recipe's length, how often copying pays
off: per window, the tokens whose most recent earlier occurrence is followed by the right next token while the
split's own most frequent bigram is wrong; and, for a match of the current and the previous token, how often
copying and the bigram are right (docs/zoo.md's "Why a smaller vocabulary did not help").

``--group-pages`` trains on the stream with the passages of one Wikipedia page (GAP's URL column) adjacent;
``--held-out SPLIT`` measures on another GAP split (for a run trained on the development split).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import asdict

import torch

from probe.heads.corpus import gap_records
from probe.training import incontext, text
from probe.training.organisms import ORGANISMS, TrainConfig, build_model, build_tokenizer, make_batch
from probe.training.train import learning_rate, optimizer_step

BLOCKS, BLOCK = 32, 40


def repeated_blocks(tokenizer, split: str) -> torch.Tensor:
    """`[block 1+2·BLOCK]`: <bos>, a block drawn by the split's token frequencies, the same block again."""
    counts = torch.zeros(len(tokenizer))
    for ids in text.encode_passages(tokenizer, split):
        counts += torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=len(tokenizer)).float()
    counts[tokenizer.bos_token_id] = 0
    generator = torch.Generator().manual_seed(123)
    block = torch.multinomial(counts / counts.sum(), BLOCKS * BLOCK, replacement=True,
                              generator=generator).reshape(BLOCKS, BLOCK)  # [block position]
    return torch.cat([torch.full((BLOCKS, 1), tokenizer.bos_token_id), block, block], 1)  # [block 1+2·BLOCK]


def copy_statistics(tokenizer, split: str, window: int) -> str:
    """The counts of ``--copy-stats`` (the bigram is fit on the same split: an optimistic baseline)."""
    stream = [t for ids in text.encode_passages(tokenizer, split) for t in (-1, *ids)]
    following: dict[int, Counter] = defaultdict(Counter)
    for current, after in zip(stream, stream[1:], strict=False):
        following[current][after] += 1
    bigram = {token: counts.most_common(1)[0][0] for token, counts in following.items()}
    wins = pairs = pair_copy = pair_bigram = 0
    for start in range(0, len(stream) - window, window):
        w = stream[start:start + window]
        last: dict = {}
        for i in range(1, window - 1):
            if w[i] in last and w[i] != -1 and w[last[w[i]] + 1] == w[i + 1] != bigram[w[i]]:
                wins += 1
            key = (w[i - 1], w[i])
            if key in last and -1 not in key:
                pairs += 1
                pair_copy += w[last[key] + 1] == w[i + 1]
                pair_bigram += bigram[w[i]] == w[i + 1]
            last[w[i]], last[key] = i, i
    windows = len(stream) / window
    return (f"{len(stream)} tokens; copy right and bigram wrong at {wins / windows / window:.1%} of tokens; "
            f"two-token matches {pairs / windows:.1f} a window, copying right {pair_copy / pairs:.1%}, "
            f"the bigram {pair_bigram / pairs:.1%}")


def page_stream(tokenizer, split: str) -> torch.Tensor:
    """`[token]`: :func:`probe.training.text.token_stream` with the passages of one Wikipedia page (GAP's URL
    column) adjacent, in file order within a page."""
    records, encoded = gap_records(split), text.encode_passages(tokenizer, split)
    order = sorted(range(len(records)), key=lambda i: (records[i]["URL"], i))
    return torch.tensor([t for i in order for t in (tokenizer.bos_token_id, *encoded[i])], dtype=torch.long)


@torch.no_grad()
def measure(model, repeats: torch.Tensor, passages: torch.Tensor, rows: torch.Tensor) -> str:
    model.eval()
    out = model(input_ids=repeats, output_attentions=True)
    loss = torch.nn.functional.cross_entropy(out.logits[:, :-1].transpose(1, 2), repeats[:, 1:],
                                             reduction="none")  # [block position]
    query = torch.arange(BLOCK + 1, 2 * BLOCK + 1)
    induction = torch.stack([a[:, :, query, query - BLOCK + 1].mean((0, 2))
                             for a in out.attentions])  # [layer head]
    out = model(input_ids=passages, output_attentions=True)
    query = torch.arange(2, passages.shape[1])
    previous = torch.stack([a[:, :, query, query - 1].mean((0, 2)) for a in out.attentions])  # [layer head]
    losses = incontext.position_losses(model, rows)  # [row position]
    model.train()
    return (f"held-out {float(losses.mean()):.3f} icl {incontext.icl_score(losses):+.3f} "
            f"rep1 {float(loss[:, 1:BLOCK].mean()):.2f} rep2 {float(loss[:, BLOCK + 1:].mean()):.2f} "
            "| induction "
            + " ".join(f"{x:.2f}" for x in induction.flatten().tolist())
            + " | previous " + " ".join(f"{x:.2f}" for x in previous.flatten().tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("organism", choices=[n for n, c in ORGANISMS.items() if c.data == "natural_text"])
    parser.add_argument("--set", default="{}", help="JSON TrainConfig overrides")
    parser.add_argument("--at", default="0,500,1000,2000", help="steps to measure at")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--group-pages", action="store_true")
    parser.add_argument("--held-out", default=text.HELD_OUT_SPLIT)
    parser.add_argument("--copy-stats", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = TrainConfig(**{**asdict(ORGANISMS[args.organism]), **json.loads(args.set)})
    at = {int(step) for step in args.at.split(",")}
    tokenizer = build_tokenizer(config)
    if args.copy_stats:
        print(copy_statistics(tokenizer, config.corpus_split, config.length))
        return
    model = build_model(config, tokenizer, args.seed)
    model.config._attn_implementation = "eager"  # output_attentions
    stream = page_stream(tokenizer, config.corpus_split) if args.group_pages else None
    repeats = repeated_blocks(tokenizer, args.held_out)
    passages = text.held_out_rows(tokenizer, 100, split=args.held_out, limit=32)
    rows = text.held_out_rows(tokenizer, incontext.ICL_LATE, split=args.held_out, limit=300)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay,
                                  betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(args.seed)
    print(args.organism, args.set, "seed", args.seed, "vocabulary", len(tokenizer), flush=True)
    started, running = time.perf_counter(), math.nan
    for step in range(config.steps + 1):
        if step in at:
            print(f"step {step:6d} {time.perf_counter() - started:6.0f} s "
                  + measure(model, repeats, passages, rows), flush=True)
        if step == config.steps:
            break
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        if stream is None:
            tokens, targets = make_batch(config, tokenizer, generator, config.batch)
        else:
            tokens, targets = text.text_windows(generator, stream, config.batch, config.length,
                                                tokenizer.bos_token_id)
        running, _ = optimizer_step(model, optimizer, trainable, tokens, targets, running)


if __name__ == "__main__":
    main()
