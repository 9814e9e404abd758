"""Load test of `probe app`: N simulated users against a locally started dashboard, loopback only, bounded in
time.

    python benchmarks/app_load.py               # 20 users for 60 s against `probe app` on the default models
    python benchmarks/app_load.py --users 5 --duration 10 --model zoo:induction --model zoo:esm-random

Each user repeats what a person does in the page, with a 0.2–1 s pause between actions (seeded): run a prompt
(tokenize), draw the grid of every head for it (one forward pass, pooled thumbnails), look at a head (its
layer's α sent once, the overlay's targets, the line view; head steps inside the layer and the token view are
drawn in the browser and cost no request), step to another layer, redraw the atlas, and every few rounds run a
protein and look at its contact maps. Requests are the browser's own Dash callback POSTs, built from the
app's /_dash-dependencies. An error is any non-2xx answer, a failed connection, or a page message saying
"internal error". Prints one table: requests, errors, throughput, latency p50 / p95 / max per request kind,
with the machine's load average at the start and the end beside it (timings on a loaded machine are not the
app's).

Before the load, the protein path is measured alone (`--protein-rounds`, one user, nothing else running): each
protein's first run (one forward pass for the contact head and every head's attention, the structure's maps),
its first view (the selected head's layer: one forward pass, then cached per layer) and a second view of
another head of the same layer (cache hit: only the figures). That is the cost per request the load test
multiplies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PROMPTS = [
    "the cat saw the dog . the cat saw the dog",
    "mary gave the book to john because he wanted it",
    "one two three four five one two three four five",
    "alice and bob went to the city . alice liked the river",
    "the doctor said that the nurse took the ball to the garden",
]
PROTEINS = ["MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG",
            "KVFGRCELAAAMKRHGLDNYRGYSLGNWVCAAKFESNFNTQATNRNTDGSTDYGILQINSRWWCNDGRTPGSRNLCNIPCSALLSSDITASVNCAKKIVSDGNGMNAWVAWRNRCKGTDVQAWIRGCRL",
            "TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(port: int, model_args: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "probe.cli", "app", "--host", "127.0.0.1", "--port",
               str(port), *model_args]
    # a file, not a pipe: a full pipe would block the server's request log
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit(f"the app exited: {log.read()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
            return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the app did not start within 180 s")


class Client:
    """Posts Dash callbacks the way the page does; records latency and errors per request kind."""

    def __init__(self, base: str, callbacks: dict[str, dict], log: list, log_lock: threading.Lock) -> None:
        self.base, self.callbacks, self.log, self.log_lock = base, callbacks, log, log_lock

    def call(self, kind: str, first_output: str, values: dict[str, object]) -> dict:
        spec = self.callbacks[first_output]
        body = {
            "output": spec["output"], "outputs": _outputs(spec["output"]),
            "inputs": [dict(item, value=values.get(f"{item['id']}.{item['property']}"))
                       for item in spec["inputs"]],
            "state": [dict(item, value=values.get(f"{item['id']}.{item['property']}"))
                      for item in spec["state"]],
            "changedPropIds": [key for key in values if key.startswith("!")] or [
                f"{spec['inputs'][0]['id']}.{spec['inputs'][0]['property']}"],
        }
        body["changedPropIds"] = [key.lstrip("!") for key in body["changedPropIds"]]
        request = urllib.request.Request(f"{self.base}/_dash-update-component",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        start = time.perf_counter()
        error, payload = "", {}
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                raw = response.read()
                if response.status == 200 and raw:
                    payload = json.loads(raw)
        except urllib.error.HTTPError as failure:
            error = f"HTTP {failure.code}"
        except OSError as failure:
            error = f"{type(failure).__name__}: {failure}"
        elapsed = time.perf_counter() - start
        if not error and "internal error" in json.dumps(payload):
            error = "internal error shown in the page"
        if not error and "waiting for labelling" in json.dumps(payload):
            kind += " (busy)"  # answered at once with "waiting for labelling…": counted apart, not as a view
        with self.log_lock:
            self.log.append((kind, elapsed, error))
        return payload.get("response", {})


def _outputs(output: str) -> list[dict] | dict:
    parts = [part for part in output.strip(".").split("...")] if output.startswith("..") else [output]
    items = []
    for part in parts:
        component, prop = part.rsplit(".", 1)
        items.append({"id": component, "property": prop.split("@")[0]})
    return items if output.startswith("..") else items[0]


def user(client: Client, specs: dict[str, str], seed: int, stop_at: float) -> None:
    rng = random.Random(seed)
    text_model, protein_model = specs["text"], specs.get("protein")
    rounds = 0
    while time.time() < stop_at:
        prompt = rng.choice(PROMPTS)
        response = client.call("tokenize", "explorer-input", {
            "explorer-run.n_clicks": rounds + 1, "model.value": text_model, "explorer-text.value": prompt,
            "explorer-as-ids.value": [], "!explorer-run.n_clicks": 1})
        store = response.get("explorer-input", {}).get("data")
        client.call("grid", "head-grid", {"explorer-input.data": store, "head-type.value": "induction",
                                          "selected-head.data": {"layer": 0, "head": 0}})
        for _ in range(2):
            selected = {"layer": rng.randrange(specs["layers"]), "head": rng.randrange(specs["heads"])}
            time.sleep(rng.uniform(0.2, 1.0))
            # head steps inside a layer and token hovers are in the browser
            layer = {"layer": selected["layer"]}
            client.call("layer view", "explorer-layer-data", {
                "explorer-input.data": store, "selected-layer.data": layer})
            client.call("overlay", "explorer-pattern", {
                "explorer-input.data": store, "selected-layer.data": layer, "explorer-overlay.value": ["on"],
                "head-type.value": rng.choice(["previous_token", "induction", "duplicate_token"]),
                "label-version.data": 0})
            client.call("line view", "explorer-lines",
                        {"explorer-input.data": store, "selected-head.data": selected})
        time.sleep(rng.uniform(0.2, 1.0))
        client.call("atlas", "atlas-graph", {"model.value": text_model, "head-type.value": "induction",
                                             "colour-by.value": "score", "selected-head.data": selected,
                                             "label-version.data": 0})
        if protein_model and rounds % 3 == 2:
            time.sleep(rng.uniform(0.2, 1.0))
            response = client.call("protein run", "protein-result", {
                "protein-run.n_clicks": 1, "model.value": protein_model,
                "protein-sequence.value": rng.choice(PROTEINS), "protein-chain.value": "",
                "!protein-run.n_clicks": 1})
            store_p = response.get("protein-result", {}).get("data")
            if store_p:
                client.call("protein view", "protein-contacts", {
                    "protein-result.data": store_p,
                    "selected-head.data": {"layer": 0, "head": rng.randrange(2)}})
        rounds += 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return (ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] if ordered
            else float("nan"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--model", action="append", default=None,
                        help="passed to probe app (default: its own)")
    parser.add_argument("--port", type=int, default=None,
                        help="use an app already serving on 127.0.0.1:PORT instead of starting one")
    parser.add_argument("--protein-rounds", type=int, default=3,
                        help="proteins run alone before the load, to show the protein path's cost "
                             "(default 3)")
    args = parser.parse_args(argv)
    if not (1 <= args.users <= 100 and 1 <= args.duration <= 600):
        parser.error("bounded: 1..100 users, 1..600 s")
    port = args.port or free_port()
    model_args = [item for spec in (args.model or []) for item in ("--model", spec)]
    process = None if args.port else start_app(port, model_args)
    try:
        base = f"http://127.0.0.1:{port}"
        dependencies = json.loads(urllib.request.urlopen(f"{base}/_dash-dependencies").read())
        callbacks = _primary_callbacks(dependencies)
        layout = json.loads(urllib.request.urlopen(f"{base}/_dash-layout").read())
        specs = _models(layout, base, callbacks)
        _wait_for_labelling(base, callbacks, specs)
        if specs.get("protein") and args.protein_rounds > 0:
            protein_alone(Client(base, callbacks, solo := [], threading.Lock()), specs["protein"],
                          args.protein_rounds)
            report(solo, 1, None, specs, title="protein path alone (1 user, one request at a time)")
        load_before = os.getloadavg()
        log: list = []
        lock = threading.Lock()
        stop_at = time.time() + args.duration
        threads = [threading.Thread(target=user,
                                    args=(Client(base, callbacks, log, lock), specs, seed, stop_at))
                   for seed in range(args.users)]
        started = time.time()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.time() - started
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    report(log, args.users, wall, specs, load=(load_before, os.getloadavg()))
    return 1 if any(error for _, _, error in log) else 0


def protein_alone(client: Client, protein_model: str, rounds: int) -> None:
    """Each protein's run, first view (a forward pass for the head's layer) and second view (same layer:
    cached)."""
    for index in range(rounds):
        # a new protein each round: no cache hit
        sequence = PROTEINS[index % len(PROTEINS)][: 40 + 10 * index]
        response = client.call("protein run", "protein-result", {
            "protein-run.n_clicks": 1, "model.value": protein_model, "protein-sequence.value": sequence,
            "protein-chain.value": "", "!protein-run.n_clicks": 1})
        store = response.get("protein-result", {}).get("data")
        if not store:
            continue
        for kind, head in (("protein view (new layer)", 0), ("protein view (cached layer)", 1)):
            client.call(kind, "protein-contacts", {"protein-result.data": store,
                                                   "selected-head.data": {"layer": 0, "head": head}})


def _first_id(output: str) -> str:
    return output.strip(".").split("...")[0].rsplit(".", 1)[0]


def _primary_callbacks(dependencies: list[dict]) -> dict[str, dict]:
    """Server callbacks by their first output's component id; for an id that several callbacks write, the one
    that writes it first-hand (not as an allow_duplicate output, whose id carries an @hash)."""
    callbacks: dict[str, dict] = {}
    for dependency in dependencies:
        if dependency.get("clientside_function") or not isinstance(dependency["inputs"][0]["id"], str):
            continue
        first = dependency["output"].strip(".").split("...")[0]
        key = _first_id(dependency["output"])
        if "@" not in first or key not in callbacks:
            callbacks[key] = dependency
    return callbacks


def _models(layout: dict, base: str, callbacks: dict) -> dict:
    """The text and protein models the app serves, and the text model's shape (from the model-info line)."""
    options = _find(layout, "model")["props"]["options"]
    specs = [option["value"] if isinstance(option, dict) else option for option in options]
    client = Client(base, callbacks, [], threading.Lock())
    result: dict = {"all": specs}
    for spec in specs:
        info = client.call("info", "model-info", {"model.value": spec})["model-info"]["children"]
        kind = info.split(" · ")[1]
        shape = info.split(" · ")[2].split()
        if kind == "protein_mlm":
            result.setdefault("protein", spec)
        elif "text" not in result:
            result.update(text=spec, layers=int(shape[0]), heads=int(shape[3]))
    return result


def _wait_for_labelling(base: str, callbacks: dict, specs: dict, timeout: float = 300.0) -> None:
    """`probe app` on the bundled organisms labels them at start-up; the load starts when that is done."""
    client = Client(base, callbacks, [], threading.Lock())
    deadline = time.time() + timeout
    for spec in specs.get("all", []):
        while time.time() < deadline:
            response = client.call("labels", "label-progress", {"model.value": spec,
                                                                "label-poll.n_intervals": 1,
                                                                 "!label-poll.n_intervals": 1})
            if "labelling " not in json.dumps(response.get("label-progress", {}), ensure_ascii=False):
                break
            time.sleep(1.0)


def _find(node, component_id):
    if isinstance(node, dict):
        if node.get("props", {}).get("id") == component_id:
            return node
        for value in node.values():
            found = _find(value, component_id)
            if found:
                return found
    if isinstance(node, list):
        for value in node:
            found = _find(value, component_id)
            if found:
                return found
    return None


def report(log: list, users: int, wall: float | None, specs: dict, load=None, title: str = "") -> None:
    errors = [error for _, _, error in log if error]
    if title:
        print(title)
    else:
        print(f"app load test: {users} users, {wall:.0f} s, text model {specs['text']}, "
              f"protein model {specs.get('protein')}")
    if load is not None:
        (a1, a5, _), (b1, b5, _) = load
        print(f"load average {a1:.1f} / {a5:.1f} (1 / 5 min) at the start, {b1:.1f} / {b5:.1f} at the end, "
              f"on {os.cpu_count()} cores")
    width = max([14, *(len(kind) + 1 for kind, _, _ in log)])
    print(f"{'kind':<{width}}{'requests':>9}{'errors':>8}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
    kinds = sorted({kind for kind, _, _ in log})
    for kind in [*kinds, "all"]:
        rows = [(elapsed, error) for k, elapsed, error in log if kind in ("all", k)]
        times = [elapsed * 1000 for elapsed, _ in rows]
        if not rows:
            continue
        print(f"{kind:<{width}}{len(rows):>9}{sum(1 for _, e in rows if e):>8}{percentile(times, 50):>9.0f}"
              f"{percentile(times, 95):>9.0f}{max(times):>9.0f}")
    if wall:
        print(f"throughput {len(log) / wall:.1f} requests/s; errors {len(errors)}"
              + (f" (first: {errors[0]})" if errors else ""))


if __name__ == "__main__":
    sys.exit(main())
