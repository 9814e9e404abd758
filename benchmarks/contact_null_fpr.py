"""Benchmark: the false-positive rate of the contact test on models that know no contacts.

    python benchmarks/contact_null_fpr.py --arch esm --seeds 70 --out fpr_esm.jsonl    # 70 × 3 = 210 runs
    python benchmarks/contact_null_fpr.py --arch bert --seeds 24 --out fpr_bert.jsonl  # 12-layer BERT
    python benchmarks/contact_null_fpr.py --report fpr_esm.jsonl fpr_bert.jsonl        # the tables again

A **run** is one random-weight model (seed s: ``torch.manual_seed(s)`` before the class builds it, so its
own ``_init_weights``) on one structure of ``tests/data`` (1aki 129 residues, 1ejg 46, 1ubi 76), analysed at
the defaults of ``probe contacts`` — :func:`probe.proteins.contacts.predict_contacts` with a true map and
K = 3 untrained twins. Such a model knows no contacts, so any significant head is a false positive. Per run
the script records whether *any* head is significant in *any* range (the default decision: p_fwer ≤ 0.05
and P@L above the twins' p99), whether any (head, range) has p_fwer ≤ 0.05 (the shift test alone, its nominal
family-wise level 0.05 per run), the old hypergeometric test's count of heads with BH q < 0.05
(``q_exchangeable``), and the per-head p-values (``p_value`` ≤ 0.05 should be ≤ 5 % of the heads).

Architectures: ``esm`` is ESM-2 8M's shape (6 layers × 20 heads, width 320, 1026 positions, rotary, ESM's
33-token vocabulary); ``bert`` a 12-layer BERT-base shape (12 × 12 heads, width 768) with ProtBert's protein
vocabulary (residues separated by spaces). One JSON line per run is appended to --out as it finishes (a rerun
skips the runs already there); the summary gives each rate with its exact (Clopper–Pearson) 95 % interval.
Use ``OMP_NUM_THREADS=1`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the script imports numpy with the library, after parsing its flags
    import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STRUCTURES = ("1aki.pdb", "pdb1ejg.pdb", "pdb1ubi.pdb")
RANGES = ("short", "medium", "long")


def random_model(arch: str, seed: int):
    """A LoadedModel of `arch` ("esm" or "bert") with the class's own random initialisation under `seed`."""
    import tempfile

    import torch
    import transformers

    from probe.layers import attention_plan, set_engine
    from probe.models import LoadedModel, ModelKind, residue_format
    from probe.zoo.tiny import esm_tokenizer, protbert_tokenizer

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = esm_tokenizer(scratch) if arch == "esm" else protbert_tokenizer(scratch)
    if arch == "esm":  # facebook/esm2_t6_8M_UR50D's config
        config = transformers.EsmConfig(
            vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20,
            intermediate_size=1280, max_position_embeddings=1026, position_embedding_type="rotary",
            token_dropout=True, emb_layer_norm_before=False, layer_norm_eps=1e-5, pad_token_id=1,
            mask_token_id=32, is_folding_model=False)
        model_class = transformers.EsmForMaskedLM
    else:  # BERT-base's shape with ProtBert's vocabulary
        config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=768, num_hidden_layers=12,
                                         num_attention_heads=12, intermediate_size=3072,
                                         max_position_embeddings=1024, pad_token_id=0)
        model_class = transformers.BertForMaskedLM
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = model_class(config).eval()
    plan = attention_plan(model)
    set_engine(model, plan.engine)
    return LoadedModel(model, tokenizer, ModelKind.PROTEIN_MLM, f"random-{arch}-seed{seed}", f"seed:{seed}",
                       residue_format=residue_format(tokenizer), has_contact_head=arch == "esm", plan=plan,
                       engine=plan.engine)


def one_run(loaded, structure, true_map, control: int) -> dict:
    """The false-positive record of one model on one structure."""
    from probe.proteins.contacts import predict_contacts
    from probe.proteins.significance import with_exchangeable

    heads = predict_contacts(loaded, structure.sequence, true_map, per_head=True, control=control).heads
    heads = with_exchangeable(heads)  # the retired hypergeometric test, off by default: asked for here
    record = {"significant": {}, "fwer": {}, "q_exchangeable": {}, "p_value_05": {}, "min_p_fwer": {}}
    for name in RANGES:
        record["significant"][name] = int(heads[f"significant_L_{name}"].fillna(False).sum())
        record["fwer"][name] = int((heads[f"p_fwer_L_{name}"] <= 0.05).sum())
        record["q_exchangeable"][name] = int((heads[f"q_exchangeable_L_{name}"] < 0.05).sum())
        record["p_value_05"][name] = [int((heads[f"p_value_L_{name}"] <= 0.05).sum()),
                                      int(heads[f"p_value_L_{name}"].notna().sum())]
        record["min_p_fwer"][name] = float(heads[f"p_fwer_L_{name}"].min())
    return record


def run_seeds(arch: str, seeds: range, control: int, out: Path,
              measure: Callable[[object, int, object, np.ndarray], tuple[dict, str]]) -> None:
    """The resumable loop of this benchmark and benchmarks/contact_power.py: for each seed its random model
    (:func:`random_model`) on each structure of STRUCTURES whose run `out` does not hold yet;
    ``measure(loaded, seed, structure, true_map)`` gives (the run's record, what the progress line says), and
    the record, with the run's arch, seed, structure, control, seconds and load, is appended to `out` as one
    JSON line as soon as it is made."""
    import os

    from probe.proteins.structure import contact_map, read_structure

    done = set()
    if out.exists():
        done = {(r["arch"], r["seed"], r["structure"]) for r in map(json.loads, out.read_text().splitlines())}
    structures = {name: read_structure(ROOT / "tests" / "data" / name) for name in STRUCTURES}
    maps = {name: contact_map(structure) for name, structure in structures.items()}  # [L L] int8 each
    for seed in seeds:
        if all((arch, seed, name) in done for name in STRUCTURES):
            continue
        loaded = random_model(arch, seed)
        for name in STRUCTURES:
            if (arch, seed, name) in done:
                continue
            started = time.perf_counter()
            record, said = measure(loaded, seed, structures[name], maps[name])
            record.update(arch=arch, seed=seed, structure=name, control=control,
                          seconds=round(time.perf_counter() - started, 2), load=os.getloadavg()[0])
            with open(out, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(f"seed {seed} {name}{said} ({record['seconds']} s)", file=sys.stderr, flush=True)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of successes / trials."""
    from scipy.stats import beta

    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else float(beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - tail, successes + 1, trials - successes))
    return low, high


def rate(successes: int, trials: int) -> str:
    low, high = clopper_pearson(successes, trials)
    return f"{successes}/{trials} = {successes / trials:.3f} (95 % CI {low:.3f}–{high:.3f})"


def report(paths: list[str]) -> None:
    for path in paths:
        records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        if not records:
            continue
        runs = len(records)
        arch = records[0]["arch"]
        tables = runs * len(RANGES)
        anywhere = sum(any(r["significant"].values()) for r in records)
        fwer = sum(any(r["fwer"].values()) for r in records)
        old = sum(any(r["q_exchangeable"].values()) for r in records)
        heads = sum(r["p_value_05"][n][1] for r in records for n in RANGES)
        low_p = sum(r["p_value_05"][n][0] for r in records for n in RANGES)
        by_range = {n: sum(bool(r["significant"][n]) for r in records) for n in RANGES}
        seeds = len({r["seed"] for r in records})
        print(f"\n{arch}: {runs} runs ({seeds} seeds × {len({r['structure'] for r in records})} structures), "
              f"K = {records[0]['control']} twins, load average {records[-1]['load']:.1f}\n")
        print("| decision | nominal | false positives |\n|---|---:|---|")
        print(f"| default: any significant head in a run (p_fwer ≤ 0.05 and P@L > twins' p99) | ≤ 0.05 | "
              f"{rate(anywhere, runs)} |")
        print("| the shift test alone: any (head, range) with p_fwer ≤ 0.05 in a run | 0.05 | "
              f"{rate(fwer, runs)} |")
        print("| per head: p_value ≤ 0.05 (shift permutation p, before maxT) | 0.05 | "
              f"{rate(low_p, heads)} |")
        print(f"| old: any head with hypergeometric BH q < 0.05 (`q_exchangeable`) in a run | 0.05 | "
              f"{rate(old, runs)} |")
        print(f"\nper range (default decision, {tables} range tables): "
              + ", ".join(f"{n} {by_range[n]}/{runs}" for n in RANGES))


def run_parser(description: str, seeds: int, out: str) -> argparse.ArgumentParser:
    """The flags of :func:`run_seeds`' benchmarks (this one's and contact_power's): --arch, --seeds (default
    `seeds`), --start, --control, --out (default `out`), --report."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--arch", choices=("esm", "bert"), default="esm")
    parser.add_argument("--seeds", type=int, default=seeds)
    parser.add_argument("--start", type=int, default=0, help="first model seed")
    parser.add_argument("--control", type=int, default=3, help="untrained twins (K)")
    parser.add_argument("--out", default=out)
    parser.add_argument("--report", nargs="+", metavar="JSONL", help="only print the tables of earlier runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = run_parser(__doc__.splitlines()[0], 70, "contact_null_fpr.jsonl").parse_args(argv)
    if args.report:
        report(args.report)
        return 0

    def measure(loaded, seed: int, structure, true_map) -> tuple[dict, str]:
        record = one_run(loaded, structure, true_map, args.control)
        return record, f": significant {record['significant']} fwer {record['fwer']}"

    out = Path(args.out)
    run_seeds(args.arch, range(args.start, args.start + args.seeds), args.control, out, measure)
    report([str(out)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
