"""probe.runs.runner with its two executors: the same units in-process and on a local Ray instance give the
same tables; a worker killed with SIGKILL costs only its unit; a bad unit is recorded and the run goes on;
`import probe` never imports ray.

The Ray tests share one small local instance (2 CPUs, 200 MB object store, no dashboard) and shut it down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from probe.errors import ProbeError
from probe.heads.label import LabelConfig
from probe.runs.checkpoints import make_checkpoint
from probe.runs.ray_executor import RayExecutor, RayOptions
from probe.runs.runner import Out, errors_table, exit_code, results_table, run
from probe.runs.tasks import SWEEP_COLUMNS, ContactsTask, LabelTask, contact_units
from probe.runs.tasks import label_units as units_of

# two types, small probe sets, no ablation: the runner is under test here, not the classifier
CONFIG = LabelConfig(**{name: value for name, value in dict(
    types=("previous_token", "induction"), examples=8, batch_size=8, n_bootstrap=100, ablate="none",
).items() if name in LabelConfig.__dataclass_fields__})
TWO_MODELS = ["zoo:induction", "zoo:positional"]


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, object_store_memory=200 * 2**20, include_dashboard=False,
             log_to_driver=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


def contacts_command(argv: list[str]) -> int:
    """`probe contacts ARGV` in this process (its own parser only, so other subcommands' flags do not
    matter)."""
    import argparse

    from probe.commands import contacts

    subparsers = argparse.ArgumentParser().add_subparsers()
    return contacts.run(contacts.add_parser(subparsers).parse_args(argv))


def label_units(specs):
    return units_of([make_checkpoint(spec) for spec in specs])


def run_units(units, task, ray=None, on_result=None):
    """The results of one runner run (nothing persisted), in unit order; `on_result(result)` per finished
    unit."""
    show = (lambda unit, result: on_result(result)) if on_result else None
    executor = RayExecutor(ray) if ray is not None else None
    return run(units, task, Out(show=show), executor).results


def test_import_probe_does_not_import_ray():
    code = ("import sys, probe, probe.cli, probe.runs.ray_executor, probe.runs.tasks, probe.commands.label\n"
            "from probe.runs.runner import Unit, UnitOutput, run\n"
            "class Task:\n"
            "    def identity(self, unit): return None\n"
            "    def load(self, group): return group * 10\n"
            "    def compute(self, state, unit): return UnitOutput(arrays={'x': state + unit.payload})\n"
            "    def rows(self, unit, result): return None\n"
            "    def owners(self, table): return table['unit']\n"
            "results = run([Unit('a', 1, 2), Unit('b', 1, 3)], Task()).results\n"
            "assert [int(r.arrays['x']) for r in results] == [12, 13]\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_ray_flag_without_ray_installed_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the extra
    with pytest.raises(ProbeError, match=r'--ray needs Ray: pip install -e "\.\[ray\]"'):
        run_units(label_units(["zoo:induction"]), LabelTask(CONFIG), ray=RayOptions())


def test_in_process_units_equal_label_model():
    """The in-process runner gives exactly the rows of label_model (what `probe label` calls), plus checkpoint
    and step columns."""
    from probe import models
    from probe.heads.label import label_model

    expected = pd.concat([label_model(models.load(spec), CONFIG) for spec in TWO_MODELS], ignore_index=True)
    table = run(label_units(TWO_MODELS), LabelTask(CONFIG, sweep=True)).table
    assert list(table["checkpoint"].unique()) == TWO_MODELS and table["step"].isna().all()
    pd.testing.assert_frame_equal(table.drop(columns=SWEEP_COLUMNS), expected, check_exact=True)


@pytest.mark.ray
def test_label_on_ray_equals_in_process(ray_cluster):
    units = label_units(TWO_MODELS)
    local = results_table(run_units(units, LabelTask(CONFIG)))
    results = run_units(units, LabelTask(CONFIG), ray=RayOptions(workers=2))
    assert all(r.ok for r in results) and {r.pid for r in results} != {os.getpid()}
    pd.testing.assert_frame_equal(results_table(results), local, check_exact=True)


@pytest.mark.ray
def test_killed_worker_costs_only_its_unit(ray_cluster):
    """One worker, three units; the worker is SIGKILLed when the first result arrives (the second unit is
    already queued on it). Ray restarts it, retries, and the table equals the uninterrupted in-process one."""
    units = label_units([*TWO_MODELS, "zoo:coreference"])
    expected = results_table(run_units(units, LabelTask(CONFIG)))
    killed: list[int] = []

    def kill_first_worker(result):
        if not killed:
            killed.append(result.pid)
            os.kill(result.pid, signal.SIGKILL)

    results = run_units(units, LabelTask(CONFIG), ray=RayOptions(workers=1), on_result=kill_first_worker)
    assert all(r.ok for r in results), errors_table(results)
    assert results[-1].pid != killed[0]  # the last unit ran on the restarted worker
    pd.testing.assert_frame_equal(results_table(results), expected, check_exact=True)


@pytest.mark.ray
def test_bad_units_are_recorded_and_the_run_goes_on(ray_cluster, tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text("{ not json")
    specs = ["zoo:induction", str(tmp_path / "missing"), str(corrupt), "zoo:positional"]
    results = run_units(label_units(specs), LabelTask(CONFIG), ray=RayOptions(workers=2))
    errors = errors_table(results)
    assert list(errors["unit"]) == specs[1:3] and set(errors["kind"]) == {"input"}
    assert "does not exist" in errors["error"].iloc[0] and "cannot read the config" in errors["error"].iloc[1]
    assert not errors["error"].str.contains("\n").any() and exit_code(results) == 2
    good = results_table(run_units(label_units(specs[::3]), LabelTask(CONFIG)))
    pd.testing.assert_frame_equal(results_table(results), good, check_exact=True)


def fasta_batch(tmp_path):
    from tests.conftest import UBIQUITIN

    records = [("full", UBIQUITIN), ("tagged", "GSHM" + UBIQUITIN), ("core", UBIQUITIN[5:60])]
    fasta = tmp_path / "batch.fasta"
    fasta.write_text("".join(f">{name}\n{sequence}\n" for name, sequence in records))
    return records, fasta


@pytest.mark.ray
def test_contacts_on_ray_equal_probe_contacts(ray_cluster, tmp_path, ubiquitin_structure):
    """A FASTA batch aligned to 1UBI on zoo:esm-random: the Ray units give exactly the per-head and per-chain
    rows `probe contacts` writes in-process, and the same arrays; an unreadable structure fails only its own
    unit."""
    from probe.proteins import sets as contact_sets
    from probe.proteins.units import UnitSpec, record_units

    records, fasta = fasta_batch(tmp_path)
    heads, chains = tmp_path / "heads.parquet", tmp_path / "chains.parquet"
    assert contacts_command(["--model", "zoo:esm-random", "--fasta", str(fasta), "--structure",
                             ubiquitin_structure, "--heads-out", str(heads), "--chains-out",
                             str(chains)]) == 0

    broken = tmp_path / "broken.pdb"
    broken.write_text("HEADER    NOT A STRUCTURE\nATOM  garbage\n")
    specs = record_units(records, ubiquitin_structure, "A")
    bad = UnitSpec(key="bad", id="broken", record=9, structure=str(broken))
    work = contact_units("zoo:esm-random", [specs[0], bad, *specs[1:]])
    task = ContactsTask(contact_sets.ContactOptions(per_head=True))
    results = run_units(work, task, ray=RayOptions(workers=2))
    errors = errors_table(results)
    assert list(errors["unit"]) == ["bad"] and list(errors["kind"]) == ["input"] and exit_code(results) == 2
    local = run_units(work, task)
    for mine, theirs in zip(results, local, strict=True):
        assert mine.error == theirs.error
        if mine.ok:
            pd.testing.assert_frame_equal(mine.table, theirs.table, check_exact=True)
            assert mine.arrays.keys() == theirs.arrays.keys()
            for name in mine.arrays:
                np.testing.assert_array_equal(mine.arrays[name], theirs.arrays[name])
    outcomes = [contact_sets.unpack(spec, r.table, r.arrays) for spec,
                r in zip(specs, [r for r in results if r.ok], strict=True)]
    pd.testing.assert_frame_equal(contact_sets.heads_table(outcomes), pd.read_parquet(heads),
                                  check_exact=True)
    pd.testing.assert_frame_equal(contact_sets.chain_table(outcomes), pd.read_parquet(chains),
                                  check_exact=True)


@pytest.mark.ray
def test_contacts_on_ray_journal_each_unit_and_list_failures(ray_cluster, tmp_path):
    """`probe contacts --ray`'s run: finished units journalled as they arrive, a failing one in
    OUT.errors.csv, the others done and equal to the in-process analysis."""
    from probe import models
    from probe.proteins import sets as contact_sets
    from probe.proteins.units import record_units
    from probe.runs.journal import Journal
    from tests.conftest import UBIQUITIN

    loaded = models.load("zoo:esm-random")
    specs = record_units([("a", UBIQUITIN), ("too_long", UBIQUITIN * 14), ("b", UBIQUITIN[:40])])
    options = contact_sets.ContactOptions(per_head=False)
    out = tmp_path / "c.npz"
    identities = {spec.key: contact_sets.unit_identity(loaded, spec, options) for spec in specs}
    task = ContactsTask(options, identities=identities)
    written = []
    report = run(contact_units(loaded.name, specs), task,
                 Out(path=out, write=lambda table,
                     finished: written.append([u.key for u, _ in finished]) or {}),
                 RayExecutor(RayOptions(workers=2)), progress=False)
    failed = [r for r in report.results if not r.ok]
    assert [r.key for r in failed] == [
        "1:too_long"] and "use --window" in failed[0].error and report.code == 2
    assert [u for u, _ in Journal(out).units()] == ["0:a", "2:b"] and written[-1] == ["0:a", "2:b"]
    expected = contact_sets.analyse_unit(loaded, specs[2], options)
    np.testing.assert_array_equal(report.results[2].arrays["contacts"], expected.result.contacts)
    assert list(pd.read_csv(tmp_path / "c.errors.csv")["unit"]) == ["1:too_long"]


@pytest.mark.ray
def test_probe_contacts_ray_flag_equals_in_process(tmp_path, ubiquitin_structure):
    """End to end, once `probe contacts` has the --ray flag wired in (see README, section scale)."""
    import argparse

    from probe.commands import contacts

    parser = contacts.add_parser(argparse.ArgumentParser().add_subparsers())
    if "--ray" not in parser._option_string_actions:
        pytest.skip("probe contacts has no --ray flag yet (wiring patch not applied)")
    _, fasta = fasta_batch(tmp_path)
    common = ["--model", "zoo:esm-random", "--fasta", str(fasta), "--structure", ubiquitin_structure]
    assert contacts_command([*common, "--heads-out", str(tmp_path / "a.parquet")]) == 0
    ray = pytest.importorskip("ray")
    ray.shutdown()  # the command starts its own local instance (and stops it)
    assert contacts_command([*common, "--heads-out", str(tmp_path / "b.parquet"), "--ray", "auto"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a.parquet"),
                                  pd.read_parquet(tmp_path / "b.parquet"), check_exact=True)
