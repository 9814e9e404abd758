"""probe.runs.journal: atomic units, identity checks, force, and no corrupt unit after a SIGKILL mid-put."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe.runs.journal import Journal, file_hash, identity_hash


def test_identity_hash_is_canonical_and_sensitive():
    first = identity_hash({"types": ["induction"], "seed": 0, "model": "zoo:x"})
    # key order is irrelevant
    assert first == identity_hash({"model": "zoo:x", "seed": 0, "types": ["induction"]})
    assert first == identity_hash({"model": "zoo:x", "seed": 0, "types": ("induction",)})  # tuple == list
    assert len(first) == 16 and int(first, 16) >= 0
    assert first != identity_hash({"model": "zoo:x", "seed": 1, "types": ["induction"]})
    assert first != identity_hash({"model": "zoo:x", "seed": 0, "types": ["previous_token"]})
    assert identity_hash({"path": Path("/a/b")}) == identity_hash({"path": "/a/b"})
    assert identity_hash({"types": {"b", "a"}}) == identity_hash({"types": ["a", "b"]})
    assert identity_hash({"seed": np.int64(3)}) == identity_hash({"seed": 3})
    with pytest.raises(TypeError, match="no stable text form"):
        identity_hash({"model": object()})  # its str is a memory address: the hash would change every run


def test_file_hash(tmp_path):
    import hashlib

    path = tmp_path / "x.pdb"
    path.write_bytes(b"ATOM 1\n" * 1000)
    assert file_hash(path) == "sha256:" + hashlib.sha256(b"ATOM 1\n" * 1000).hexdigest()[:16]
    other = tmp_path / "y.pdb"
    other.write_bytes(b"ATOM 2\n" * 1000)
    assert file_hash(other) != file_hash(path)


def test_put_get_round_trip(tmp_path):
    out = tmp_path / "result.parquet"
    journal = Journal(out)
    assert journal.directory == tmp_path / ".result.parquet.parts"
    table = pd.DataFrame(
        {"layer": [0, 1], "head": [2, 3], "score": [0.25, float("nan")], "label": ["a", "b"]})
    arrays = {"contacts": np.arange(12, dtype=np.float32).reshape(3, 4), "names": np.array(["x", "yy"])}
    journal.put("sp|P1|weird/name with spaces", "id-1", table=table, arrays=arrays)

    entry = Journal(out).get("sp|P1|weird/name with spaces", "id-1")  # a fresh process-like reader
    assert entry is not None and entry.unit == "sp|P1|weird/name with spaces" and entry.identity == "id-1"
    pd.testing.assert_frame_equal(entry.table, table)
    assert set(entry.arrays) == {"contacts", "names"}
    np.testing.assert_array_equal(entry.arrays["contacts"], arrays["contacts"])
    assert entry.arrays["contacts"].dtype == np.float32
    np.testing.assert_array_equal(entry.arrays["names"], arrays["names"])
    assert journal.units() == [("sp|P1|weird/name with spaces", "id-1")]
    # no temporary file is left behind
    assert [p.name for p in journal.directory.iterdir()] == [p.name for p in journal.directory.glob("*.npz")]


def test_nothing_is_created_before_the_first_put(tmp_path):
    journal = Journal(tmp_path / "o.csv", force=True)
    assert journal.units() == [] and journal.get("a", "i") is None and not journal.stale("a", "i")
    assert list(tmp_path.iterdir()) == []  # a run that fails before finishing a unit leaves nothing
    journal.put("a", "i", table=pd.DataFrame({"x": [1]}))
    assert journal.directory.is_dir() and journal.units() == [("a", "i")]


def test_table_only_and_arrays_only(tmp_path):
    journal = Journal(tmp_path / "o.csv")
    journal.put("a", "i", table=pd.DataFrame({"x": [1]}))
    journal.put("b", "i", arrays={"m": np.eye(2)})
    assert journal.get("a", "i").arrays == {}
    assert journal.get("b", "i").table is None
    np.testing.assert_array_equal(journal.get("b", "i").arrays["m"], np.eye(2))


def test_identity_mismatch_stale_and_replace(tmp_path):
    journal = Journal(tmp_path / "o.csv")
    journal.put("model-a", "old", table=pd.DataFrame({"x": [1]}))
    assert journal.get("model-a", "new") is None
    assert journal.stale("model-a", "new") is True
    assert journal.stale("model-a", "old") is False
    assert journal.stale("model-b", "new") is False  # never recorded: not stale, just missing
    assert journal.get("model-b", "new") is None

    journal.put("model-a", "new", table=pd.DataFrame({"x": [2]}))
    assert journal.get("model-a", "old") is None
    assert journal.get("model-a", "new").table["x"].tolist() == [2]
    assert journal.units() == [("model-a", "new")]


def test_force_empties_the_journal(tmp_path):
    out = tmp_path / "o.csv"
    Journal(out).put("a", "i", table=pd.DataFrame({"x": [1]}))
    assert Journal(out).units() == [("a", "i")]
    forced = Journal(out, force=True)
    assert forced.units() == []
    assert forced.get("a", "i") is None


def test_damaged_unit_is_treated_as_absent(tmp_path):
    journal = Journal(tmp_path / "o.csv")
    journal.put("a", "i", table=pd.DataFrame({"x": [1]}))
    journal.put("b", "i", table=pd.DataFrame({"x": [2]}))
    path = next(p for p in journal.directory.glob("*.npz") if p.name.startswith("a-"))
    path.write_bytes(path.read_bytes()[:40])  # truncated by something outside the journal
    assert journal.get("a", "i") is None
    assert journal.units() == [("b", "i")]
    journal.put("a", "i", table=pd.DataFrame({"x": [3]}))  # and it can be rewritten
    assert journal.get("a", "i").table["x"].tolist() == [3]


def test_object_arrays_and_reserved_names_are_refused(tmp_path):
    journal = Journal(tmp_path / "o.csv")
    with pytest.raises(ValueError, match="Python objects"):
        journal.put("a", "i", arrays={"x": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="reserved"):
        journal.put("a", "i", arrays={"__meta__": np.zeros(1)})
    assert journal.units() == []


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import pandas as pd
    from probe.runs.journal import Journal

    journal = Journal(sys.argv[1])
    print("ready", flush=True)
    for step in range(1, 100000):
        unit = f"unit{step % 4}"
        journal.put(unit, f"id{step}", table=pd.DataFrame({"step": [step] * 1000}),
                    arrays={"block": np.full(400_000, step, dtype=np.int64)})  # ~3 MB: a put takes a while
""")


def test_sigkill_mid_put_leaves_no_corrupt_unit(tmp_path):
    """Kill a writer at random moments: every unit file is whole and self-consistent, no finished unit is
    lost, and the dead writer's temporary files are removed by the next Journal."""
    out = tmp_path / "o.parquet"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(0)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    recorded = 0
    for _kill in range(6):
        process = subprocess.Popen([sys.executable, str(script), str(out)], env=env, stdout=subprocess.PIPE)
        assert process.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.05, 0.5))
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
        process.stdout.close()

        journal = Journal(out)
        files = [p for p in journal.directory.iterdir()]
        assert not [p for p in files if p.name.startswith(".tmp-")]
        units = journal.units()
        assert len(units) == len(files)  # every unit file left is readable: none is half-written
        assert len(units) >= recorded  # a finished unit is never lost by a later kill
        recorded = len(units)
        for unit, identity in units:
            entry = journal.get(unit, identity)
            step = int(identity[2:])
            assert unit == f"unit{step % 4}"
            assert entry.table["step"].tolist() == [step] * 1000
            assert entry.arrays["block"].shape == (400_000,) and (entry.arrays["block"] == step).all()
    assert recorded == 4, "the writer never finished all four units"
