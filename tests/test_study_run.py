"""Running studies: resumable, fault tolerant (a worker killed mid-study), deterministic across
executors (local process pool and Ray give identical rows), and bad input fails in one line
with nothing written."""

import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from nngauge.errors import NNGaugeError
from nngauge.studies import parse_spec, plan_units, run_study
from nngauge.studies._db import measures, open_db, units
from nngauge.studies._units import derive_seed

FAKE = parse_spec({"architectures": {"explicit": [{"width": 4, "depth": 3}] * 4},
                   "data": {"source": "gaussian:d=3", "n": 20},
                   "training": {"lrs": [0.1]}})


def fake_result(task) -> dict:
    """A deterministic stand-in for a unit's results (no torch: fast workers)."""
    value = derive_seed(task.unit.key) % 10_000 / 100
    if task.unit.kind == "init":
        return {"measures": {"nlc": value, "output_bias": 1.0}, "train": None, "seconds": 0.0}
    return {"measures": {}, "seconds": 0.0,
            "train": {"best_val_error": value / 100, "test_error": value / 100,
                      "train_error": 0.0, "epochs": 1, "diverged": False}}


def faulty_runner(task, marker: str, raise_arch: int = -1) -> dict:
    """Kills its own worker process at architecture 1's init unit the first time (the file
    ``marker`` remembers), and raises for every unit of architecture ``raise_arch``. Bound with
    functools.partial, so it pickles (by reference for the local pool, by value for Ray)."""
    if task.unit.arch_index == 1 and task.unit.kind == "init" and not Path(marker).exists():
        Path(marker).write_text("killed")
        os._exit(1)
    if task.unit.arch_index == raise_arch:
        raise ValueError("boom in the unit")
    time.sleep(0.05)
    return fake_result(task)


def _rows(url: str) -> tuple[dict, dict]:
    engine = open_db(url, create=False)
    with engine.connect() as conn:
        unit_rows = {r["key"]: {k: v for k, v in r.items() if k != "seconds"}
                     for r in conn.execute(select(units)).mappings()}
        measure_rows = {(r.unit_key, r.name): r.value for r in conn.execute(select(measures))}
    engine.dispose()
    return unit_rows, measure_rows


def _expected(spec):
    from nngauge.studies._units import UnitTask, resolve_architectures

    archs = resolve_architectures(spec)
    return {u.key: fake_result(UnitTask(spec, archs[u.arch_index], u)) for u in plan_units(spec)}


def _assert_complete(url, spec):
    unit_rows, measure_rows = _rows(url)
    expected = _expected(spec)
    assert sorted(unit_rows) == sorted(expected)  # no missing, no extra (keys are unique)
    for key, result in expected.items():
        for name, value in result["measures"].items():
            assert measure_rows[(key, name)] == value
        if result["train"]:
            assert unit_rows[key]["test_error"] == result["train"]["test_error"]
    assert len(measure_rows) == sum(len(r["measures"]) for r in expected.values())


@pytest.mark.slow
def test_killed_worker_is_retried_within_the_run(tmp_path):
    """A local pool worker that kills itself (os._exit) mid-unit is retried within the same run:
    all 8 units run, none fails, progress goes from 0/8 to 8/8, and the database holds exactly
    the expected rows."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    seen = []
    runner = functools.partial(faulty_runner, marker=str(tmp_path / "marker"))
    summary = run_study(FAKE, url, workers=2, runner=runner,
                        progress=lambda done, total: seen.append((done, total)))
    assert (tmp_path / "marker").read_text() == "killed"  # the kill did happen
    assert summary.failed == {} and summary.ran == summary.total == 8
    assert seen[0] == (0, 8) and seen[-1] == (8, 8)
    _assert_complete(url, FAKE)


@pytest.mark.slow
def test_without_retries_a_rerun_completes_without_duplicates(tmp_path):
    """With max_retries=0 a killed worker's unit fails as "worker process died" and a raising
    unit with its error, and failed units are absent from the database; a rerun skips the
    finished units, runs only the failed ones, and completes the study without duplicates."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    marker = str(tmp_path / "marker")
    first = run_study(FAKE, url, workers=2, max_retries=0,
                      runner=functools.partial(faulty_runner, marker=marker, raise_arch=2))
    plan = {u.key: u for u in plan_units(FAKE)}
    killed = next(k for k, u in plan.items() if u.arch_index == 1 and u.kind == "init")
    assert "worker process died" in first.failed[killed]
    raised = [k for k, u in plan.items() if u.arch_index == 2]
    assert all(first.failed[k] == "ValueError: boom in the unit" for k in raised)
    unit_rows, _ = _rows(url)
    assert set(unit_rows) == set(plan) - set(first.failed)  # failed units are absent, whole
    assert first.ran == 8 - len(first.failed)

    second = run_study(FAKE, url, workers=2, max_retries=0,
                       runner=functools.partial(faulty_runner, marker=marker))
    assert second.failed == {} and second.skipped == first.ran
    assert second.ran == len(first.failed)
    _assert_complete(url, FAKE)


def run_cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nngauge", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_cli_bad_spec_and_bad_database_write_nothing(tmp_path):
    """CLI contract: `study run` with an invalid spec (measures.names) or an unopenable SQLite
    path exits 2 with a one-line error naming the problem, and writes no file."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[measures]\nnames = ["nlc", "sharpness"]\n')
    out = run_cli("study", "run", str(bad), "--db", "sqlite:///x.db", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "measures.names" in out.stderr
    good = tmp_path / "good.toml"
    good.write_text('[architectures]\nexplicit = [{width = 4, depth = 2}]\n'
                    '[data]\nsource = "gaussian:d=3"\nn = 20\n')
    out = run_cli("study", "run", str(good), "--db", "sqlite:///missing/x.db", cwd=tmp_path)
    assert out.returncode == 2 and "unable to open database file" in out.stderr
    assert out.stderr.strip().count("\n") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml", "good.toml"]


def test_bad_arguments_are_rejected_before_anything_runs(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    for kwargs, field in (({"executor": "dask"}, "executor"), ({"workers": 0}, "workers"),
                          ({"address": "h:1"}, "--address"), ({"max_retries": -1}, "max_retries")):
        with pytest.raises(NNGaugeError, match=field):
            run_study(FAKE, url, **kwargs)
    assert not (tmp_path / "s.db").exists()


# ------------------------------------------------------------------------------- real units


REAL = parse_spec({
    "name": "waveform-6", "seed": 3,
    "data": {"source": "waveform", "n": 300, "preprocess": "standardize"},
    "architectures": {"explicit": [
        {"width": 16, "depth": 3, "activation": "tanh"},
        {"width": 16, "depth": 5, "activation": "tanh", "scale": 1.5},
        {"width": 16, "depth": 3, "activation": "relu", "norm": "batch"},
        {"width": 16, "depth": 5, "activation": "relu", "skip": 1.0},
        {"width": 16, "depth": 3, "activation": "sigmoid", "bias_std": 0.5},
        {"width": 16, "depth": 7, "activation": "selu", "init": "gaussian"}]},
    "measures": {"names": ["nlc", "jacobian_norm"]},
    "training": {"lrs": [0.1], "batch_size": 50, "max_epochs": 2},
})


def test_unreachable_ray_address_fails_fast_and_writes_nothing(tmp_path):
    pytest.importorskip("ray")
    import ray

    assert not ray.is_initialized()  # runs before the module's Ray fixture
    started = time.perf_counter()
    with pytest.raises(NNGaugeError, match="reachable cluster at --address"):
        run_study(REAL, f"sqlite:///{tmp_path / 's.db'}", executor="ray",
                  address="127.0.0.1:1", connect_timeout=5)
    assert time.perf_counter() - started < 30
    assert not (tmp_path / "s.db").exists()


@pytest.mark.slow
def test_local_and_ray_executors_give_identical_rows(tmp_path, local_ray):
    """A real 12-unit waveform study gives identical unit and measure rows on the local process
    pool and on Ray; a Ray initialized by the caller is left running, and a rerun on Ray skips
    all 12 units."""
    local_url, ray_url = (f"sqlite:///{tmp_path / name}" for name in ("local.db", "ray.db"))
    local = run_study(REAL, local_url, workers=2)
    remote = run_study(REAL, ray_url, executor="ray")
    assert local.failed == remote.failed == {}
    assert local.ran == remote.ran == 12
    local_rows, local_measures = _rows(local_url)
    ray_rows, ray_measures = _rows(ray_url)
    assert local_rows == ray_rows and local_measures == ray_measures
    assert len(local_measures) == 6 * 3  # nlc, output_bias, jacobian_norm per architecture
    assert all(r["test_error"] is not None for r in local_rows.values() if r["kind"] == "train")
    assert local_ray.is_initialized()  # a Ray initialized by the caller is left running
    rerun = run_study(REAL, ray_url, executor="ray")
    assert (rerun.ran, rerun.skipped) == (0, 12)


@pytest.mark.slow
def test_ray_retries_a_unit_whose_worker_died(tmp_path, local_ray):
    """On the Ray executor with max_retries=2, a unit whose worker process killed itself is
    retried: all 8 units run, none fails, and the database holds exactly the expected rows."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import us
    try:
        url = f"sqlite:///{tmp_path / 's.db'}"
        runner = functools.partial(faulty_runner, marker=str(tmp_path / "marker"))
        summary = run_study(FAKE, url, executor="ray", runner=runner, max_retries=2)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert (tmp_path / "marker").read_text() == "killed"
    assert summary.failed == {} and summary.ran == 8
    _assert_complete(url, FAKE)
