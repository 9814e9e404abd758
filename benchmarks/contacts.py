"""Benchmark: streamed contacts (probe) vs HF `predict_contacts` under eager attention, on an ESM-2-35M-shaped
model.

    python benchmarks/contacts.py                 # 12 layers x 20 heads, hidden 480, random weights, L = 1000
    python benchmarks/contacts.py --length 300    # quicker
    python benchmarks/contacts.py --structure-set tests/data   # per-head analysis of a structure set
                                                               # (ProtBert-shaped BERT) against a plain
                                                               # forward, per chain

Peak memory of each method is measured in its own subprocess (the process's high-water mark, ru_maxrss):
"peak" is the whole process, "Δ peak" the rise above the process right after the model was loaded. Time is
measured in a third subprocess holding all three (HF reference, probe, and the plain sdpa ESM forward — the
floor any attention capture pays on top of): one warm-up each, then --repeats rounds alternating them, median
per method. Prints a markdown table with ratios (ours / reference) and the largest difference between the two
contact maps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _sequence(length: int, seed: int = 0) -> str:
    import random

    rng = random.Random(seed)
    return "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(length))


def _runner(method: str, model_dir: str, sequence: str):
    """A function computing the [L L] contact map of `sequence` with `method` ("ours" or "reference")."""
    import torch

    if method == "ours":
        from probe import models
        from probe.proteins.contacts import predict_contacts

        loaded = models.load(model_dir)
        return lambda: predict_contacts(loaded, sequence).contacts
    if method == "plain":  # the plain sdpa forward of the same model on the same sequence: the floor
        from probe import models

        loaded = models.load(model_dir)
        inputs = models.tokenize_protein(loaded, sequence)

        def forward():
            with torch.inference_mode():
                return loaded.model(**inputs).logits[0, :1, :1].numpy()

        return forward
    from transformers import EsmForMaskedLM, EsmTokenizer

    model = EsmForMaskedLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    encoded = EsmTokenizer.from_pretrained(model_dir)([sequence], return_tensors="pt")

    def run():
        with torch.inference_mode():
            return model.predict_contacts(encoded["input_ids"], encoded["attention_mask"])[0].numpy()

    return run


def _child(method: str, mode: str, model_dir: str, length: int, repeats: int, save: str | None) -> dict:
    """Runs in a subprocess. memory: load one method, one run, high-water marks. time: both methods loaded,
    one warm-up each, then `repeats` rounds alternating the two (so load from other processes hits both
    alike)."""
    import numpy as np

    sequence = _sequence(length)
    if mode == "memory":
        run = _runner(method, model_dir, sequence)
        baseline = _rss_mb()
        contacts = run()
        if save:
            np.save(save, contacts)
        return {"peak_mb": _rss_mb(), "delta_mb": _rss_mb() - baseline}
    runs = {name: _runner(name, model_dir, sequence) for name in ("reference", "ours", "plain")}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {"medians": {name: sorted(values)[len(values) // 2] for name, values in times.items()},
            "times": times}


def _spawn(method: str, mode: str, model_dir: str, length: int, repeats: int, save: str | None = None,
           threads: int | None = None) -> dict:
    command = [sys.executable, __file__, "--child", method, mode, model_dir, "--length", str(length),
               "--repeats", str(repeats)] + (["--save", save] if save else []) + (
               ["--threads", str(threads)] if threads else [])
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def structure_set(folder: str, layers: int, heads: int, hidden: int, repeats: int) -> None:
    """Per chain: a plain forward of a ProtBert-style (spaced) BERT vs the whole per-head unit (capture, APC
    maps, precision by range, the contact test's shift null, Vig et al.'s counts) without a control and with
    the default one (3 untrained twins, built once per model before timing), alternating, median of
    `repeats`."""
    import torch

    from probe import models
    from probe.proteins.sets import ContactOptions, analyse_unit
    from probe.proteins.units import structure_files, structure_units
    from probe.zoo.tiny import save_tiny

    with tempfile.TemporaryDirectory() as scratch:
        model_dir = str(save_tiny("protbert", os.path.join(scratch, "model"), hidden_size=hidden,
                                  num_hidden_layers=layers, num_attention_heads=heads,
                                  intermediate_size=4 * hidden))
        loaded = models.load(model_dir)
    units, _ = structure_units(structure_files(folder))
    print(f"ProtBert-style BERT ({layers} layers x {heads} heads, hidden {hidden}, random weights), CPU, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}\n")
    print("| chain | residues | plain forward | per-head unit, --control none | per-head unit, 3 twins | "
          "ratio none | ratio 3 twins | twins / none |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for unit in units:
        outcome = analyse_unit(loaded, unit, ContactOptions())  # warm-up (builds the twins once)
        inputs = models.tokenize_protein(loaded, outcome.result.sequence)

        def forward(inputs=inputs):
            with torch.inference_mode():
                loaded.model(**inputs)

        def bare(unit=unit):
            analyse_unit(loaded, unit, ContactOptions(control=0))

        def twins(unit=unit):
            analyse_unit(loaded, unit, ContactOptions())

        timings = {"forward": [], "none": [], "twins": []}
        for _ in range(repeats):
            for name, run in (("forward", forward), ("none", bare), ("twins", twins)):
                start = time.perf_counter()
                run()
                timings[name].append(time.perf_counter() - start)
        plain, none, full = (sorted(timings[name])[len(timings[name]) // 2] for name in timings)
        length = len(outcome.result.sequence)
        print(f"| {unit.id} | {length} | {plain * 1000:.0f} ms | {none * 1000:.0f} ms | "
              f"{full * 1000:.0f} ms | {none / plain:.1f}x | {full / plain:.1f}x | {full / none:.2f}x |")
    print(f"\nload average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1000, help="residues (default 1000)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=480)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (median)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in the measuring processes (default: torch's own choice); 1 "
                             "gives steadier ratios on a machine shared with other jobs")
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "MODE", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    parser.add_argument("--structure-set", metavar="DIR",
                        help="instead: time the per-head analysis of every chain of DIR (see the docstring)")
    args = parser.parse_args()
    if args.structure_set:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        structure_set(args.structure_set, args.layers, args.heads, args.hidden, args.repeats)
        return
    if args.child:
        method, mode, model_dir = args.child
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        print(json.dumps(_child(method, mode, model_dir, args.length, args.repeats, args.save)))
        return

    import numpy as np
    import torch

    from probe.zoo.tiny import save_tiny

    with tempfile.TemporaryDirectory() as scratch:
        model_dir = str(save_tiny("esm", os.path.join(scratch, "model"), seed=0, hidden_size=args.hidden,
                                  num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                  intermediate_size=4 * args.hidden))
        results = {method: _spawn(method, "memory", model_dir, args.length, args.repeats,
                                  os.path.join(scratch, f"{method}.npy"), args.threads)
                   for method in ("reference", "ours", "plain")}
        timed = _spawn("both", "time", model_dir, args.length, args.repeats, threads=args.threads)
        for method, seconds in timed["medians"].items():
            results[method]["seconds"] = seconds
        pairs = timed["times"]
        difference = float(np.abs(np.load(os.path.join(scratch, "ours.npy"))
                                  - np.load(os.path.join(scratch, "reference.npy"))).max())

    ours, ref, plain = results["ours"], results["reference"], results["plain"]
    print(f"ESM-2-35M-shaped model ({args.layers} layers x {args.heads} heads, hidden {args.hidden}, random "
          f"weights), L = {args.length} residues, CPU, {args.threads or torch.get_num_threads()} threads, "
          f"torch {torch.__version__}\n")
    print("| | HF `predict_contacts` (eager) | probe (streamed) | plain ESM forward (sdpa) | probe / HF | "
          "probe / plain |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| time (median of {args.repeats}) | {ref['seconds']:.2f} s | {ours['seconds']:.2f} s | "
          f"{plain['seconds']:.2f} s | {ours['seconds'] / ref['seconds']:.2f}x | "
          f"**{ours['seconds'] / plain['seconds']:.2f}x** |")
    print(f"| peak memory (process) | {ref['peak_mb']:.0f} MB | {ours['peak_mb']:.0f} MB | "
          f"{plain['peak_mb']:.0f} MB | {ours['peak_mb'] / ref['peak_mb']:.2f}x | "
          f"{ours['peak_mb'] / plain['peak_mb']:.2f}x |")
    print(f"| Δ peak above loaded model | {ref['delta_mb']:.0f} MB | {ours['delta_mb']:.0f} MB | "
          f"{plain['delta_mb']:.0f} MB | {ours['delta_mb'] / ref['delta_mb']:.2f}x | "
          f"{ours['delta_mb'] / max(plain['delta_mb'], 1):.2f}x |")
    print("\nper round, probe / plain: "
          f"{', '.join(f'{a / b:.2f}' for a, b in zip(pairs['ours'], pairs['plain'], strict=True))}")
    print(f"\nmax |Δ contacts| = {difference:.2e}")


if __name__ == "__main__":
    main()
