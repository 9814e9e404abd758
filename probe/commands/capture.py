"""`probe capture`: α of chosen layers × heads for one text or protein sequence, written to an .npz file."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from probe import models
from probe.commands.common import add_model_options, load_keywords, output_path
from probe.engine import capture_attention
from probe.errors import ProbeError
from probe.naming import parse_index_list
from probe.runs.atomic import write_atomically


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "capture", help="write per-head attention of one input to an .npz",
        description="Run the model once on the capture engine and write attention [layer, head, query, key].",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="input text (language models)")
    source.add_argument("--sequence", help="protein sequence (ESM models)")
    parser.add_argument("--layers", help="layers to keep, e.g. 0,3 or 0-5 (default: all)")
    parser.add_argument("--heads", help="heads to keep in each layer, e.g. 1,5 (default: all)")
    parser.add_argument("--out", required=True, help="output .npz")
    return parser


def run(args: argparse.Namespace) -> int:
    out = output_path(args.out, (".npz",))
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    layers = parse_index_list(args.layers, loaded.n_layers, "layers")
    heads = parse_index_list(args.heads, loaded.n_heads, "heads")
    if args.sequence is not None:
        if loaded.kind != models.ModelKind.PROTEIN_MLM:
            raise ProbeError(f"--sequence needs a protein model; {args.model} is a {loaded.kind}: use --text")
        inputs = models.tokenize_protein(loaded, args.sequence)
    else:
        if loaded.kind == models.ModelKind.PROTEIN_MLM:
            raise ProbeError(f"{args.model} is a protein model: pass --sequence instead of --text")
        inputs = models.tokenize_text(loaded, args.text)
    alpha = capture_attention(loaded.model, inputs, layers, heads)[0]  # [layer head query key]
    tokens = loaded.tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())

    def write(tmp):
        with open(tmp, "wb") as handle:
            np.savez_compressed(handle, attention=alpha.float().numpy(), layers=np.array(layers),
                                heads=np.array(heads), tokens=np.array(tokens))

    write_atomically(out, write)
    print(f"wrote attention {tuple(alpha.shape)} [layer, head, query, key] to {out}", file=sys.stderr)
    return 0
