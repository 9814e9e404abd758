"""A dashboard layer step on the server: the layer's α for an input already shown (the explorer's
``layer_view``: capture or cache, then the payload), with and without the all-layer prefetch of
app/captures.py, in alternating rounds.

    python benchmarks/layer_step.py                       # all-MiniLM-L6-v2 (the demo's model), 232 tokens
    python benchmarks/layer_step.py --model zoo:induction --tokens 232 --rounds 10

Without prefetch every layer step runs a forward pass that captures that layer; with it, the input's first
request captures every layer once and a step reads the cache. Prints the per-step medians (ms) of both and
their ratio, with the load average (times on a loaded machine are not the app's). The browser's part of a
step (the payload's decode and plotly's redraw) is measured by
tests/app/test_app_browser.py::test_layer_steps_at_232_tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the app package beside probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model spec (default: the all-MiniLM-L6-v2 wheel)")
    parser.add_argument("--tokens", type=int, default=232)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()

    from app import captures
    from app.config import AppConfig
    from app.panels import explorer
    from app.registry import minilm_dir
    from app.service import Service

    spec = args.model or str(minilm_dir())
    full = captures.PREFETCH_BYTES
    times = {"prefetch": [], "one layer": []}
    for round_ in range(args.rounds):
        for mode in (("prefetch", "one layer") if round_ % 2 == 0 else ("one layer", "prefetch")):
            captures.PREFETCH_BYTES = full if mode == "prefetch" else 1
            service = Service(AppConfig(models=(spec,), max_tokens=max(args.tokens, 64)))
            loaded = service.facts.model(spec)
            vocab = len(loaded.tokenizer)
            ids = [(round_ * 7919 + 31 * i) % (vocab - 10) + 5 for i in range(args.tokens)]
            store = {"model": spec, "ids": ids}
            explorer.layer_view(service, store, {"layer": 0})  # the input's first view (Run)
            for layer in [*range(1, loaded.n_layers), *range(loaded.n_layers - 2, -1, -1)]:
                start = time.perf_counter()
                payload, message = explorer.layer_view(service, store, {"layer": layer})
                times[mode].append((time.perf_counter() - start) * 1000)
                assert payload and not message, message
    load = os.getloadavg()[0]
    one, pre = statistics.median(times["one layer"]), statistics.median(times["prefetch"])
    print(f"{spec}: {args.tokens} tokens, {len(times['prefetch'])} steps each; load average {load:.1f} on "
          f"{os.cpu_count()} cores")
    print("layer step on the server | median ms")
    print(f"one layer per forward pass | {one:.1f}")
    print(f"every layer prefetched | {pre:.1f}")
    print(f"ratio | {pre / one:.2f}")


if __name__ == "__main__":
    main()
