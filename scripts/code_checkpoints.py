"""Per checkpoint of a Python-source organism (`probe train stdlib-code --out DIR`, DIR/step-N/),
eager-attention measurements on the held-out standard-library modules — the numbers of docs/zoo.md's "Round 2,
continued":

* previous-token: each head's mean attention to the token before, on 32 held-out passages x 120 tokens;
* induction (in distribution): each head's mean attention from the second copy of a 50-token held-out span to
  the token after its first occurrence (Olsson et al.'s prefix matching; the span is real code, not random
  tokens), and the loss on the first and on the second copy.

    python scripts/code_checkpoints.py runs/stdlib-code [--tokenizer DIR]

One line per checkpoint: step, loss first / second copy, the best previous-token head of each layer, the best
induction head of layer 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import transformers

from probe.training import text

SPAN, PASSAGE, ROWS = 50, 120, 32


def measure(model, natural: torch.Tensor, repeated: torch.Tensor) -> dict:
    """`natural` [row 120] and `repeated` [row 1 + 2·SPAN] token ids -> the checkpoint's numbers."""
    with torch.no_grad():
        plain = model(natural, output_attentions=True).attentions  # per layer [row head query key]
        out = model(repeated, output_attentions=True)
    positions = torch.arange(1, natural.shape[1])
    previous = [a[:, :, positions, positions - 1].mean((0, 2)) for a in plain]  # per layer [head]
    query = torch.arange(SPAN + 2, 2 * SPAN + 1)  # second copy, from its second token on
    key = query - SPAN + 1  # the token after the current token's first occurrence
    induction = [a[:, :, query, key].mean((0, 2)) for a in out.attentions]  # per layer [head]
    nll = -out.logits.log_softmax(-1)[:, :-1].gather(-1, repeated[:, 1:, None])[..., 0]  # [row position]
    return {"first": nll[:, 1:SPAN].mean().item(), "second": nll[:, SPAN + 1:].mean().item(),
            "previous": previous, "induction": induction}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--tokenizer", type=Path, help="default: the run's own")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.tokenizer or args.run)
    rows = [row for row in text.encode_passages(tokenizer, text.CODE_HELD_OUT_SPLIT) if len(row) > PASSAGE]
    natural = torch.tensor([row[:PASSAGE] for row in rows[:ROWS]])  # [row 120]
    span = natural[:, 1:SPAN + 1]
    repeated = torch.cat([natural[:, :1], span, span], 1)  # [row 1 + 2·SPAN]
    steps = sorted(args.run.glob("step-*"), key=lambda path: int(path.name.split("-")[1])) or [args.run]
    for directory in steps:
        model = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager")
        found = measure(model.eval(), natural, repeated)
        best_previous = " ".join(f"L{layer}H{int(v.argmax())} {float(v.max()):.2f}"
                                 for layer, v in enumerate(found["previous"]))
        last, layer = found["induction"][-1], len(found["induction"]) - 1
        print(f"{directory.name}: loss first / second copy {found['first']:.2f} / {found['second']:.2f}; "
              f"previous-token {best_previous}; induction L{layer}H{int(last.argmax())} "
              f"{float(last.max()):.2f}", flush=True)


if __name__ == "__main__":
    main()
