"""`probe circuit --type` and `probe profile` on the runner (issue 56, item 3): journalled units, resumption
after SIGKILL equal to an uninterrupted run, `--ray` like the other batch commands, bad input in one line.

A circuit's steps are its composition scores, each paired batch's clean and corrupted forwards and each
patched forward (probe.runs.circuits); a profile's are runs of consecutive inputs of the model and of each
untrained twin, one unit per length (probe.runs.profiles). A real subprocess SIGKILLs itself after its Kth
step is journalled; the rerun computes only the other steps and writes the uninterrupted run's table."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from probe.cli import main
from probe.runs.steps import StepStore

ROOT = Path(__file__).resolve().parents[2]
CIRCUIT = ["circuit", "--model", "zoo:induction", "--type", "induction", "--examples", "8"]
# two lengths (two units), an untrained twin: 3 + 3 steps at 16 tokens, 6 + 6 at 32 (STEP_TOKENS)
PROFILE = ["profile", "--model", "zoo:induction", "--random", "6", "--seq-len", "16,32", "--bootstrap", "20",
           "--window", "4", "--max-offset", "4", "--control", "untrained:1"]
STEP_TOKENS = 32  # tokens per profile step in these tests: 2 inputs a step at 16 tokens, 1 at 32
# the child: the command, SIGKILLing itself right after its Kth step whose key holds MATCH is journalled
KILLER = textwrap.dedent("""
    import os, signal, sys
    import probe.heads.profile
    from probe.runs import steps
    probe.heads.profile.STEP_TOKENS = int(os.environ["STEP_TOKENS"])
    saved, original = [], steps.StepStore._save
    def save(self, key, value):
        original(self, key, value)
        if os.environ["MATCH"] in key:
            saved.append(key)
            if len(saved) == int(os.environ["KILL_AFTER"]):
                os.kill(os.getpid(), signal.SIGKILL)
    steps.StepStore._save = save
    from probe.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _saved_keys(monkeypatch) -> list[str]:
    """The step keys this process computes and writes from now on (none read back)."""
    keys: list[str] = []
    original = StepStore._save

    def save(self, key, value):
        keys.append(key)
        original(self, key, value)

    monkeypatch.setattr(StepStore, "_save", save)
    return keys


def _killed(argv: list[str], match: str, after: int, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILL_AFTER": str(after), "MATCH": match, "OMP_NUM_THREADS": "1",
           "STEP_TOKENS": str(STEP_TOKENS),
           "PYTHONPATH": str(ROOT), "PROBE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", KILLER, *argv], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == -9, done.stderr[-2000:]
    return done


def _journalled(out: Path) -> list[Path]:
    steps = out.parent / f".{out.name}.parts" / "steps"
    return [p for p in steps.rglob("*") if p.suffix in (".safetensors", ".parquet")] if steps.is_dir() else []


def test_circuit_killed_mid_run_resumes_to_the_same_table(tmp_path, monkeypatch, capsys):
    """SIGKILLed after 3 of its patched forwards, `probe circuit --out` leaves them (and the composition and
    the clean/corrupted forwards) journalled and no table; the rerun says it resumed, computes only the other
    patched forwards (the uninterrupted run computed them all) and writes the uninterrupted run's table, bit
    for bit; a rerun of the finished unit computes nothing."""
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    whole = tmp_path / "whole.parquet"
    computed = _saved_keys(monkeypatch)
    assert main([*CIRCUIT, "--out", str(whole)]) == 0
    all_steps = list(computed)
    patched = [key for key in all_steps if key.startswith("patch/b0/")]
    assert "composition" in all_steps and "patch/b0" in all_steps and len(patched) >= 5, all_steps
    assert not _journalled(whole)  # the unit is journalled whole: its steps are gone
    capsys.readouterr()

    out = tmp_path / "edges.parquet"
    killed = _killed([*CIRCUIT, "--out", str(out)], "patch/b0/", 3, tmp_path)
    assert "each finished step is journalled in" in killed.stderr  # said before the first forward
    assert not out.exists() and len(_journalled(out)) == 2 + 3  # composition, b0's losses, 3 patched

    computed.clear()
    assert main([*CIRCUIT, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "resuming: 5 finished step(s)" in err and "5 step(s) read back" in err
    assert computed == [key for key in patched[3:]]  # nothing journalled is computed again
    assert "zoo:induction · induction: L0H1 → L1H0 L1H1 L1H2 L1H3 by K-composition" in err
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(whole), check_exact=True)
    assert not _journalled(out)

    # a rerun of the finished unit computes nothing
    computed.clear()
    assert main([*CIRCUIT, "--out", str(out)]) == 0
    assert computed == [] and "nothing to do" in capsys.readouterr().err


def test_profile_killed_mid_run_resumes_to_the_same_table(tmp_path, monkeypatch, capsys):
    """`probe profile --seq-len 16,32` is one unit per length. SIGKILLed inside the second length (its model
    run's 2 first steps journalled, the first length finished and written), the rerun reuses the first
    length, reads the 2 steps back, computes only the rest (the uninterrupted run computed them all) and
    writes the uninterrupted run's table, bit for bit."""
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("probe.heads.profile.STEP_TOKENS", STEP_TOKENS)
    whole = tmp_path / "whole.parquet"
    computed = _saved_keys(monkeypatch)
    assert main([*PROFILE, "--out", str(whole)]) == 0
    err = capsys.readouterr().err
    at_16 = [f"{run}/inputs{a}-{a + 1}" for run in ("model", "twin0") for a in (0, 2, 4)]
    at_32 = [f"{run}/inputs{a}-{a}" for run in ("model", "twin0") for a in range(6)]
    assert computed == at_16 + at_32
    table = pd.read_parquet(whole)
    assert table.groupby("seq_len").size().to_dict() == {16: 8, 32: 8}  # 2 layers x 4 heads per length
    assert "zoo:induction@32: 8 heads" in err and "each finished run of inputs is journalled" in err

    out = tmp_path / "profile.parquet"
    _killed([*PROFILE, "--out", str(out)], "inputs", len(at_16) + 2, tmp_path)
    assert set(pd.read_parquet(out)["seq_len"]) == {16}  # the first length was written as it finished
    assert len(_journalled(out)) == 2  # and journalled whole: only the second length's steps are left

    computed.clear()
    assert main([*PROFILE, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "reused zoo:induction@16" in err and "zoo:induction@32: resuming: 2 finished step(s)" in err
    assert computed == at_32[2:]  # nothing journalled is computed again
    pd.testing.assert_frame_equal(pd.read_parquet(out), table, check_exact=True)


@pytest.mark.parametrize("argv", [
    [*CIRCUIT, "--ray"], [*PROFILE, "--out", "{tmp}/p.csv", "--ray", "auto"],
])
def test_ray_without_ray_installed_is_one_line(argv, tmp_path, monkeypatch, capsys):
    """--ray without the ray extra: one line naming the install, exit 2, nothing written."""
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the extra
    assert main([part.format(tmp=tmp_path) for part in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and '--ray needs Ray: pip install -e ".[ray]"' in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("argv", "message"), [
    ([*CIRCUIT, "--ray-workers", "2"], "--ray-workers needs --ray"),
    ([*CIRCUIT, "--ray", "auto", "--ray-workers", "0"], "--ray-workers must be at least 1"),
    ([*CIRCUIT, "--ray", "127.0.0.1:1"], "127.0.0.1:1"),
    ([*PROFILE, "--out", "p.csv", "--ray-workers", "2"], "--ray-workers needs --ray"),
    ([*PROFILE[:6], "32,x", "--out", "p.csv"], "bad --seq-len '32,x'"),
    ([*PROFILE[:6], "32,0", "--out", "p.csv"], "--seq-len 0 must be at least 1"),
])
def test_bad_runner_flags_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.ray
@pytest.mark.slow
def test_circuit_and_profile_on_ray_equal_the_local_runs(tmp_path, monkeypatch, capsys):
    """`--ray auto` (a local Ray instance) writes the tables of the in-process runs, bit for bit, and the
    circuit's lines."""
    pytest.importorskip("ray")
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for argv, name in ((CIRCUIT, "edges.parquet"), (PROFILE, "profile.parquet")):
        local, on_ray = tmp_path / f"local-{name}", tmp_path / f"ray-{name}"
        assert main([*argv, "--out", str(local)]) == 0
        local_err = capsys.readouterr().err
        assert main([*argv, "--out", str(on_ray), "--ray", "auto", "--ray-workers", "2"]) == 0
        ray_err = capsys.readouterr().err
        pd.testing.assert_frame_equal(pd.read_parquet(on_ray), pd.read_parquet(local), check_exact=True)
        if argv is CIRCUIT:
            found = "zoo:induction · induction: L0H1 → L1H0 L1H1 L1H2 L1H3 by K-composition"
            assert found in local_err and found in ray_err
