"""`probe capture`: α of chosen layers × heads for one text or protein sequence, written to an .npz file."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from probe.commands.common import add_model_options, check_model_options, load_keywords
from probe.commands.paths import output_path
from probe.errors import ProbeError
from probe.naming import parse_index_list

if TYPE_CHECKING:
    from probe import models


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "capture", help="write per-head attention of one input to an .npz",
        description="Run the model once on the capture engine and write attention [layer, head, query, key]. "
                    "Encoder-decoder models (T5, BART) write one array per stack: attention_enc (encoder "
                    "self-attention), attention_dec (decoder self-attention) and attention_cross (decoder "
                    "rows over encoder keys); the decoder reads the input text as its target, shifted right. "
                    "A hybrid's layers without attention weights (linear attention, state-space) are left "
                    "out: the layers array names the ones written.",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="input text (language models)")
    source.add_argument("--sequence", help="protein sequence (ESM models)")
    parser.add_argument("--layers", help="layers to keep, e.g. 0,3 or 0-5 (default: all; encoder-decoders: "
                                         "the layer numbers within each stack)")
    parser.add_argument("--heads", help="heads to keep in each layer, e.g. 1,5 (default: all)")
    parser.add_argument("--out", required=True, help="output .npz")
    return parser


def _stack_layers(loaded: models.LoadedModel, text: str | None) -> list[tuple[str, list[int]]]:
    """(stack name, engine layer numbers) to capture; "" names a single-stack model's one stack."""
    plan = loaded.plan
    if not plan.is_multi_stack:
        chosen = parse_index_list(text, loaded.n_layers, "layers")
        missing = [layer for layer in chosen if layer not in loaded.attention_layers]
        if text and missing:
            raise ProbeError(f"--layers {','.join(map(str, missing))}: no attention weights there; this "
                             f"model has them in layers {','.join(map(str, loaded.attention_layers))}")
        return [("", [layer for layer in chosen if layer in loaded.attention_layers])]
    widest = max(stack.count for stack in plan.stacks)
    chosen = parse_index_list(text, widest, "layers")
    return [(stack.name, [stack.first + layer for layer in chosen if layer < stack.count])
            for stack in plan.stacks]


def run(args: argparse.Namespace) -> int:
    out = output_path(args.out, (".npz",))
    if args.text is not None and not args.text:  # the library's error names no flag; this one does, at once
        raise ProbeError("--text is empty: pass --text with at least one word")
    check_model_options(args)
    # numpy, torch and transformers are imported only now, after the checks that need none of them, so
    # `--help` and argument errors answer at once (tests/commands/test_cli_fast.py).
    import numpy as np
    import torch

    from probe import models
    from probe.engine import DenseSink, capture
    from probe.runs.atomic import write_atomically

    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    stacks = _stack_layers(loaded, args.layers)
    heads = parse_index_list(args.heads, loaded.n_heads, "heads")
    if args.sequence is not None:
        if loaded.kind != models.ModelKind.PROTEIN_MLM:
            raise ProbeError(f"--sequence needs a protein model; {args.model} is a {loaded.kind}: use --text")
        inputs = models.tokenize_protein(loaded, args.sequence)
    else:
        if loaded.kind == models.ModelKind.PROTEIN_MLM:
            raise ProbeError(f"{args.model} is a protein model: pass --sequence instead of --text")
        inputs = models.tokenize_text(loaded, args.text)
    sinks = [DenseSink(layers, heads) for _, layers in stacks]
    with capture(loaded.model, [sink for sink, (_, layers) in zip(sinks, stacks, strict=True) if layers]), \
            torch.inference_mode():
        loaded.model(**inputs)
    arrays = {"heads": np.array(heads), "tokens": np.array(_tokens(loaded, inputs["input_ids"]))}
    if "decoder_input_ids" in inputs:
        arrays["decoder_tokens"] = np.array(_tokens(loaded, inputs["decoder_input_ids"]))
    shapes = []
    for (name, layers), sink in zip(stacks, sinks, strict=True):
        suffix = f"_{name}" if name else ""
        first = next(stack.first for stack in loaded.plan.stacks if stack.name == name)
        alpha = sink.attention(0)[0] if layers else np.zeros((0, len(heads), 0, 0))  # [layer head query key]
        arrays[f"attention{suffix}"] = alpha.float().numpy() if layers else alpha
        arrays[f"layers{suffix}"] = np.array([layer - first for layer in layers])
        shapes.append(f"attention{suffix} {tuple(arrays[f'attention{suffix}'].shape)}")

    def write(tmp):
        with open(tmp, "wb") as handle:
            np.savez_compressed(handle, **arrays)

    write_atomically(out, write)
    print(f"wrote {', '.join(shapes)} [layer, head, query, key] to {out}", file=sys.stderr)
    return 0


def _tokens(loaded: models.LoadedModel, ids) -> list[str]:
    return loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist())
