"""Benchmark: the cost of edge attribution (probe.circuits.edges) on a GPT-2-small shape, as ratios to plain
forward-backwards, in one process, alternating.

The model: transformers.GPT2Config defaults (12 layers × 12 heads, width 768, MLPs, vocabulary 50257), seeded
random weights, float32, no hub; the task: --pairs pairs of --tokens random tokens (the corrupted prompt: the
first half resampled), ``logit_diff``. Every edge of the graph is scored (32,491 edges).

  eap        — ``edge_scores(method="eap")``: 1 forward (corrupted, recorded) + 1 forward-backward (clean,
               recorded, its logits and gradient); the issue's budget is 2 forwards + 1 backward.
  eap-ig     — ``edge_scores(method="eap-ig", steps=k)``: 2 forwards + k forward-backwards; budget
               1.5 × (k + 1) plain forward-backwards.
  plain      — the unit: one forward-backward of the same batch and metric with nothing attached (the model's
               own forward with the same ``logits_to_keep=1`` that edge_scores passes, ``metric.backward()``
               into the parameters' ``.grad`` as training does); the same with the gradient taken at the
               embeddings only (``backward(inputs=…)``, as edge_scores takes it at its receivers: no
               parameter gradients); one plain forward under ``torch.inference_mode``.
  exact      — exact patching (one forward of the pairs per edge, batched --max-rows rows at a time) of one
               forward's edges and of --exact-edges more, alternating: the difference per edge × 32,491.

Each round runs the plain references and every measurement once, one after the other (A B A B …, --repeats
rounds after a warm-up, so a shared machine's load hits them alike; each round is printed as it ends); the
table shows medians of the per-round ratios and the load average before and after. Memory: the process's
peak resident set (VmHWM) after the warm-up and after the first eap-ig; ``--memory`` also runs each method
once in a fresh process and prints its peak beside one that runs a plain forward-backward.

Run:

    python benchmarks/edges.py --memory            # 3 rounds, one thread, peak memory per method
    python benchmarks/edges.py --repeats 5 --threads 0
    python benchmarks/edges.py --profile eap-ig    # where the time goes (torch.profiler, one call)
    python benchmarks/edges.py --skip eap-ig --skip exact   # EAP only (beside the plain references)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

EDGE_METHODS = ("eap", "eap-ig")


def _seconds(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _setup(args: argparse.Namespace):
    """(model, task, plain forward-backward, plain forward) on the GPT-2-small shape."""
    import torch
    import transformers

    from probe.circuits.edges import last_logits
    from probe.circuits.task import make_task, metric_values

    config = transformers.GPT2Config()
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    generator = torch.Generator().manual_seed(0)
    clean = torch.randint(0, config.vocab_size, (args.pairs, args.tokens), generator=generator)
    corrupted = clean.clone()
    half = args.tokens // 2
    corrupted[:, :half] = torch.randint(0, config.vocab_size, (args.pairs, half), generator=generator)
    answers = torch.randint(0, config.vocab_size, (2, args.pairs), generator=generator)
    task = make_task(None, clean.tolist(), corrupted.tolist(), answers[0].tolist(), answers[1].tolist(),
                     corruption="first half resampled (benchmark)")
    ids, correct, incorrect = clean, answers[0], answers[1]

    def plain_backward():
        model.zero_grad(set_to_none=True)
        logits = last_logits(model, ids)
        metric_values("logit_diff", logits, correct, incorrect).sum().backward()

    def plain_activations():  # the gradient at the embeddings only: no parameter's gradient
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds, use_cache=False, logits_to_keep=1).logits[:, -1]
        metric_values("logit_diff", logits, correct, incorrect).sum().backward(inputs=[embeds])

    def plain_forward():
        with torch.inference_mode():
            last_logits(model, ids).sum().item()

    return model, task, plain_backward, plain_forward, plain_activations


def _method(model, task, method: str, args: argparse.Namespace):
    from probe.circuits.edges import edge_scores

    def run():
        return edge_scores(model, task, method=method, steps=args.steps)
    return run


def _peak(which: str, args: argparse.Namespace) -> int:
    """Run `which` once in this process; print and return the peak resident set in MiB."""
    model, task, plain_backward, *_ = _setup(args)
    if which == "plain":
        plain_backward()
    else:
        _method(model, task, which, args)()
    peak = _rss()
    print(peak)
    return peak


def _memory(args: argparse.Namespace) -> dict[str, int]:
    peaks = {}
    for which in ("plain", *EDGE_METHODS):
        command = [sys.executable, __file__, "--peak", which, "--pairs", str(args.pairs), "--tokens",
                   str(args.tokens), "--steps", str(args.steps), "--threads", str(args.threads)]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        peaks[which] = int(result.stdout.strip().splitlines()[-1])
    return peaks


def _profile(which: str, args: argparse.Namespace) -> None:
    from torch.profiler import ProfilerActivity, profile

    model, task, plain_backward, *_ = _setup(args)
    run = plain_backward if which == "plain" else _method(model, task, which, args)
    run()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5, help="EAP-IG's k (default 5)")
    parser.add_argument("--exact-edges", type=int, default=16, help="extra edges exact patching runs")
    parser.add_argument("--max-rows", type=int, default=64, help="rows per exact-patching forward")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--skip", choices=(*EDGE_METHODS, "exact"), action="append", default=[],
                        help="leave a method out (repeatable): --skip eap-ig --skip exact measures EAP only")
    parser.add_argument("--memory", action="store_true", help="peak memory per method, fresh processes")
    parser.add_argument("--peak", choices=("plain", *EDGE_METHODS), help=argparse.SUPPRESS)
    parser.add_argument("--profile", choices=("plain", *EDGE_METHODS))
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()
    if args.peak:
        _peak(args.peak, args)
        return 0
    if args.profile:
        _profile(args.profile, args)
        return 0
    from probe.circuits.edges import edge_scores, model_graph
    from probe.engine.sites import site_map

    load_before = os.getloadavg()
    model, task, plain_backward, plain_forward, plain_activations = _setup(args)
    graph = model_graph(site_map(model))
    edges = graph.edges()
    per = max(1, args.max_rows // args.pairs)  # edges per patched forward
    sizes = (per, per + args.exact_edges)
    names = [(graph.senders[s].name, graph.receivers[r].name, graph.receivers[r].input) for s, r in edges]

    def exact(size):
        return lambda: edge_scores(model, task, method="exact", max_rows=args.max_rows, edges=names[:size])
    # one round: every measurement next to the plain references (A B A B …), rounds repeated
    order = [("plain fwd-bwd", plain_backward), ("plain fwd", plain_forward),
             ("plain fwd-bwd, activations only", plain_activations)]
    order += [(method, _method(model, task, method, args)) for method in EDGE_METHODS
              if method not in args.skip]
    if "exact" not in args.skip:
        order += [(f"exact {size}", exact(size)) for size in sizes]
    plain_backward(), plain_forward(), _method(model, task, "eap", args)()  # warm-up
    peaks = {"after the warm-up (model, plain fwd-bwd, eap)": _rss()}
    times: dict[str, list[float]] = {name: [] for name, _ in order}
    for round_ in range(args.repeats):
        for name, function in order:
            times[name].append(_seconds(function))
            if round_ == 0 and name == "eap-ig":
                peaks["after eap-ig"] = _rss()
        print(f"round {round_ + 1}: " + ", ".join(f"{name} {t[-1]:.2f} s" for name, t in times.items())
              + f"; load {os.getloadavg()[0]:.2f}", flush=True)
    load_after = os.getloadavg()
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"\nGPT-2-small shape (random weights), {len(edges)} edges, {args.pairs} pairs × {args.tokens} "
          f"tokens, float32, threads {args.threads}, {args.repeats} rounds (medians of per-round ratios); "
          f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f} "
          f"{load_after[1]:.2f}; plain forward {median['plain fwd']:.2f} s, plain forward-backward "
          f"{median['plain fwd-bwd']:.2f} s, activations only "
          f"{median['plain fwd-bwd, activations only']:.2f} s\n")
    print("| measured | s (per round) | ratio to the plain fwd-bwd of its round | in units | budget | "
          "ratio to the activation-only fwd-bwd |")
    print("|---|---:|---:|---:|---|---:|")
    for method in EDGE_METHODS:
        if method in args.skip:
            continue
        ratios = [a / b for a, b in zip(times[method], times["plain fwd-bwd"], strict=True)]
        only = [a / b for a, b in zip(times[method], times["plain fwd-bwd, activations only"], strict=True)]
        unit = 1 if method == "eap" else args.steps + 1
        budget = "2 fwd + 1 bwd" if method == "eap" else f"1.5 × {unit} = {1.5 * unit:g} fwd-bwd"
        name = method if method == "eap" else f"eap-ig, k = {args.steps}"
        print(f"| {name} | {median[method]:.1f} ({', '.join(f'{t:.1f}' for t in times[method])}) | "
              f"{statistics.median(ratios):.2f}× ({', '.join(f'{r:.2f}' for r in ratios)}) | "
              f"{statistics.median(ratios) / unit:.2f} × {unit} | {budget} | "
              f"{statistics.median(only):.2f}× |")
    if "exact" not in args.skip:
        per_edge = [(b - a) / args.exact_edges for a, b in zip(times[f"exact {sizes[0]}"],
                                                                 times[f"exact {sizes[1]}"], strict=True)]
        total = [t * len(edges) for t in per_edge]
        ratios = [t / b for t, b in zip(total, times["plain fwd-bwd"], strict=True)]
        print(f"| exact, every edge: ({sizes[1]} edges − {sizes[0]} edges) / {args.exact_edges} × "
              f"{len(edges)} | {statistics.median(total):.0f} ({', '.join(f'{t:.0f}' for t in total)}) | "
              f"{statistics.median(ratios):.0f}× | | – | |")
    print("\npeak resident set of this process (VmHWM): "
          + ", ".join(f"{name} {peak} MiB" for name, peak in peaks.items()))
    if args.memory:
        print("peak resident set, a fresh process per method (VmHWM): "
              + ", ".join(f"{name} {peak} MiB" for name, peak in _memory(args).items()))
    return 0


def _rss() -> int:
    """The process's peak resident set in MiB: VmHWM (Linux; ru_maxrss survives exec, so a child started by
    a big parent would report the parent's peak), else ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


if __name__ == "__main__":
    raise SystemExit(main())
