"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse

from probe.card import architecture_card, load_config
from probe.commands.paths import output_path, writable_folder
from probe.errors import ProbeError
from probe.memory import available_memory, check_fits, memory_plan
from probe.runs.export import PLOT_EXTENSIONS
from probe.specs import locate

# What probe.heads.tables reads and writes (its TABLE_EXTENSIONS; tests/commands/test_cli_fast.py checks they
# are equal), written out so that checking --out needs no pandas.
TABLE_EXTENSIONS = (".parquet", ".csv", ".json")
# the named texts of --text (probe.heads.corpus.TEXTS), written out so that --help and argument errors need no
# torch (tests/commands/test_cli_fast.py checks they equal the library's)
TEXTS = ("development", "validation", "stdlib", "stdlib-held-out")


def add_model_options(parser: argparse.ArgumentParser, many: bool = False, required: bool = True) -> None:
    """--model (hub id, local directory or zoo:NAME), --device, --dtype, --engine, --device-map,
    --offload-folder, --max-memory (pass the last four to probe.models.load with :func:`load_keywords`)."""
    help_text = "hub id (gpt2), local directory (what save_pretrained wrote) or zoo:NAME"
    if many:
        parser.add_argument("--model", action="append", required=required, help=help_text + "; repeat for "
                                                                                            "several")
    else:
        parser.add_argument("--model", required=True, help=help_text)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                        help="weights dtype (default: the checkpoint's)")
    parser.add_argument("--engine", default="auto", choices=["auto", "fused", "eager"],
                        help="capture engine: auto (default: fused where the model's attention goes through "
                             "AttentionInterface, else the eager fallback, O(N²) per layer), fused (refuse "
                             "models outside the interface) or eager")
    parser.add_argument("--device-map", default=None, metavar="auto|balanced|cpu|cuda",
                        help="place the model with transformers' device_map (accelerate): auto, balanced, "
                             "sequential, cpu or cuda; weights that do not fit go to --offload-folder "
                             "(default: the whole model on --device)")
    parser.add_argument("--offload-folder", default=None, metavar="DIR",
                        help="with --device-map: folder for the weights offloaded to disk")
    parser.add_argument("--max-memory", default=None, metavar="DEV=AMOUNT,...",
                        help="with --device-map: memory per device as transformers takes it, e.g. "
                             "0=10GiB,cpu=30GiB")


def check_model_options(args: argparse.Namespace, names=None) -> None:
    """The shared model flags checked before any heavy import (one line naming the fix): every model spec
    exists (`names`, default --model; probe.specs.locate) and an --offload-folder can be written."""
    for name in (args.model if isinstance(args.model, list) else [args.model]) if names is None else names:
        locate(name)
    if getattr(args, "offload_folder", None):
        writable_folder(args.offload_folder, "--offload-folder")


def add_control_option(parser: argparse.ArgumentParser, default: str | None = "untrained",
                       rule: str = "a head is significant only above their heads' 99th percentile",
                       shown: str | None = None) -> None:
    """--control untrained[:K] | none: K untrained twins of the model (probe.untrained) run on the same inputs
    as a negative control (`rule`: what the command does with them); read it with
    probe.untrained.parse_control (import-light) before heavy imports. `default` None (to tell an absent
    flag from a given one) with `shown`: the value the command then uses, for the help."""
    parser.add_argument("--control", default=default, metavar="untrained[:K]|none",
                        help="untrained twins of the model (its own architecture, tokenizer and "
                             f"_init_weights, seeded random weights) run on the same inputs: {rule}; "
                             f"untrained = untrained:3; none: off (default {shown or default})")


def load_keywords(args: argparse.Namespace) -> dict:
    """probe.models.load's engine and placement keywords from the shared model flags (add_model_options)."""
    return {"engine": args.engine, "device_map": args.device_map, "offload_folder": args.offload_folder,
            "max_memory": args.max_memory}


def add_sweep_options(parser: argparse.ArgumentParser) -> None:
    """--revisions, --models-file, --plot, --ray, --ray-workers of `probe label` (docs/scale.md)."""
    parser.add_argument("--revisions", metavar="R1,R2,...",
                        help="label these checkpoints of each --model: subdirectories of a local model "
                             "directory (step-0,step-50: what `probe train NAME --checkpoint-steps` writes) "
                             "or hub branches/tags/commits; adds the columns checkpoint and step")
    parser.add_argument("--models-file", metavar="FILE",
                        help="one model or checkpoint directory per line (# comments allowed), labelled like "
                             "--model")
    parser.add_argument("--plot", metavar="FILE.html|FILE.png",
                        help="figure of each labelled head's score across checkpoints; writes FILE.html and "
                             "FILE.png (PNG needs kaleido and a Chromium)")
    add_ray_options(parser)


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    """--ray [auto|HOST:PORT] and --ray-workers N (the flags `probe label` and `probe contacts` share)."""
    parser.add_argument("--ray", nargs="?", const="auto", default=None, metavar="auto|HOST:PORT",
                        help="run the units on Ray (pip install -e '.[ray]'): 'auto' (also the value of a "
                             "bare --ray) starts a local Ray sized to this machine, HOST:PORT joins a "
                             "cluster started with `ray start --head`")
    parser.add_argument("--ray-workers", type=int, default=None, metavar="N",
                        help="with --ray: Ray workers (each loads the model once; default: one per CPU of "
                             "the cluster)")


def executor(args: argparse.Namespace):
    """The runner's executor the flags ask for: probe.runs.ray_executor.RayExecutor with --ray, else
    in-process. Checked before any computing: --ray-workers needs --ray and at least 1, the address is auto or
    HOST:PORT."""
    from probe.runs.runner import InProcess  # torch and pandas: only once the command runs

    workers = getattr(args, "ray_workers", None)
    if getattr(args, "ray", None) is None:
        if workers is not None:
            raise ProbeError("--ray-workers needs --ray (units run in this process without it)")
        return InProcess()
    if workers is not None and workers < 1:
        raise ProbeError("--ray-workers must be at least 1")
    from probe.runs.ray_executor import RayExecutor, RayOptions, check_reachable  # as InProcess above

    if args.ray != "auto":
        check_reachable(args.ray)  # a bounded TCP connect, before anything is loaded: one line within seconds
    gpus = 1.0 if str(getattr(args, "device", "cpu")).startswith("cuda") else 0.0
    return RayExecutor(RayOptions(address=args.ray, workers=workers, gpus_per_worker=gpus))


def refuse_if_too_big(args: argparse.Namespace, model: str, command: str, seq_len: int, batch: int = 1,
                      block_bytes: int = 8 * 2**20, sink_bytes_per_head: int = 0,
                      flags: str = "a shorter --seq-len") -> None:
    """Before any weights are loaded: refuse in one line when the memory plan of `model` (probe.memory, from
    its config alone) exceeds the memory the device has free; `flags` names the command's own ways to ask
    less. No check when offloading was asked for (--device-map) or the config cannot be planned (loading then
    says why)."""
    if getattr(args, "device_map", None):  # (a flag of the model options where offloading exists)
        return
    try:
        config = load_config(model)
        card = architecture_card(config)
        plan = memory_plan(config, seq_len, args.dtype, batch, block_bytes,
                           sink_bytes_per_head * card.layers * card.query_heads)
    except ProbeError:
        return
    check_fits(plan, available_memory(args.device), command, flags)


def plot_paths(text: str):
    """--plot FILE.html|FILE.png -> FILE.html, checked with its sibling FILE.png (both are written) before any
    labelling: extension, folder, writable, and neither of the two may be a folder."""
    plot = output_path(text, PLOT_EXTENSIONS, "--plot")
    for sibling in (plot.with_suffix(".html"), plot.with_suffix(".png")):
        if sibling.is_dir():
            raise ProbeError(f"--plot {text}: {sibling} is a folder, and --plot writes both {plot.stem}.html "
                             f"and {plot.stem}.png; give another name")
    return plot


def parse_lengths(text: str | None) -> tuple[int, ...] | None:
    """"64,256" -> (64, 256); None -> None (the default length)."""
    if text is None:
        return None
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ProbeError(f"bad --seq-len {text!r}: give a number of tokens, or several separated by commas "
                         "(64,256)") from None
    if not lengths or any(length < 1 for length in lengths):
        raise ProbeError("--seq-len must be a positive number of tokens")
    return tuple(dict.fromkeys(lengths))
