"""A budgeted plan collected in one worker session (`collect_plan`), on the CPU: the real job
files, worker protocol, plan loop, crash isolation and store writes, with a worker stand-in
(`plan_worker_emulator.py`) answering from the recorded H200 times instead of launching."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from klaraptor import suite
from klaraptor.assemble.api import launchable
from klaraptor.assemble.planned import make_plan, plan_keys
from klaraptor.collect import collector as kc
from klaraptor.collect import executor as gpu_executor
from klaraptor.collect.collector import CollectOptions, collect_plan
from klaraptor.collect.plan import TableMeasurer
from klaraptor.collect.worker import Point
from klaraptor.store import Store
from klaraptor.suite.recorded import load_recorded

EMULATOR = Path(__file__).with_name("plan_worker_emulator.py")
KERNEL = "polybench.gemm.gemm"


@pytest.fixture(scope="module")
def case():  # noqa: ANN201
    data = load_recorded()
    kd = data.kernels[KERNEL]
    spec = suite.get(KERNEL)
    device = data.profile()
    attrs = kd.facts(data.device_key).attributes
    sizes = [spec.size(n) for n in spec.meta["train_sizes"]]
    candidates, _ = launchable(spec, device, attrs, sizes[0])
    arg_bytes = [(spec.size(D), b) for D, b in kd.facts(data.device_key).arg_bytes]
    plan, _ = make_plan(spec, device, candidates, sizes, arg_bytes=arg_bytes)
    rows = [[list(D.values()), list(b), False, t[0]] for (D, b), t in kd.times().items()]
    rows += [[list(D.values()), list(b), True, t[0]] for (D, b), t in kd.cold_times().items()]
    return spec, device, attrs, candidates, plan, rows


def _emulate(monkeypatch, tmp_path: Path, rows, crash: str = "") -> None:  # noqa: ANN001
    table = tmp_path / "times.json"
    table.write_text(json.dumps(rows))
    monkeypatch.setenv("KLARAPTOR_TEST_TIMES", str(table))
    monkeypatch.setenv("KLARAPTOR_TEST_CRASH", crash)
    monkeypatch.setattr(
        gpu_executor,
        "worker_command",
        lambda job, python=None: [sys.executable, str(EMULATOR), str(job)],
    )


def _offline(plan, rows, candidates):  # noqa: ANN001, ANN202
    index = {tuple(b): i for i, b in enumerate(candidates)}
    hot = {(tuple(D), index[tuple(b)]): (ms, 0.002) for D, b, c, ms in rows if not c}
    cold = {(tuple(D), index[tuple(b)]): (ms, 0.002) for D, b, c, ms in rows if c}
    return plan.run(TableMeasurer(hot, cold))


def test_one_session_runs_the_plan_as_offline(case, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    spec, device, attrs, candidates, plan, rows = case
    _emulate(monkeypatch, tmp_path, rows)
    with Store(tmp_path / "s.sqlite") as store:
        kc._register(store, spec)
        rep, result = collect_plan(
            spec, plan, candidates, store=store, device=device, attrs=attrs, progress=False
        )
        want = _offline(plan, rows, candidates)
        assert result.keys() == want.keys() and result.spent_s == pytest.approx(want.spent_s)
        assert rep.worker["plan_workers"] == 1  # one session, hot and cold mixed
        hot = store.measurements(spec.name, device.key, kind="time", status="ok")
        cold = store.measurements(spec.name, device.key, kind="time_cold", status="ok")
        n_cold = sum(p["kind"] == "cold" for p in want.points)
        assert len(hot) == len(want.points) - n_cold and len(cold) == n_cold > 0
        assert rep.count("time", "not planned") > 0  # offered, never measured nor stored
        # Run again: everything is known, no worker starts, the same plan comes back.
        rep2, again = collect_plan(
            spec, plan, candidates, store=store, device=device, attrs=attrs, progress=False
        )
        assert again.keys() == want.keys() and "plan_workers" not in rep2.worker


def test_a_crash_costs_one_point_and_the_plan_goes_on(case, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    spec, device, attrs, candidates, plan, rows = case
    # The id of the third cold point the plan takes (points are laid out hot, cold per block).
    want = _offline(plan, rows, candidates)
    victim = [k for k in want.keys() if k[2]][2]
    keys = plan_keys(plan, spec.data_names, candidates)
    laid = kc.plan_points(spec, [spec.size(1536), spec.size(768), spec.size(256)],
                          kc.ConfigSpace.for_spec(spec), attrs, device)  # fmt: skip
    ids = {}
    for p in laid.points:
        for cold in (False, True) if p.D == spec.size(1536) else (False,):
            ids[keys[(p.D, p.config, cold)]] = len(ids)
    _emulate(monkeypatch, tmp_path, rows, crash=f"{ids[victim]}:{tmp_path / 'crashed'}")
    with Store(tmp_path / "s.sqlite") as store:
        kc._register(store, spec)
        rep, result = collect_plan(
            spec, plan, candidates, store=store, device=device, attrs=attrs, progress=False
        )
        assert (tmp_path / "crashed").exists()
        assert rep.worker["plan_workers"] == 2 and rep.count("time_cold", "failed") == 1
        failed = store.measurements(spec.name, device.key, kind="time_cold", status="failed")
        assert [m.block for m in failed] == [candidates[victim[1]]]
        assert "died" in failed[0].reason
        assert victim not in result.keys() and len(result.points) >= len(want.points) - 1


class _Recorder:
    """Records what `_measure_point` asks of the kernel, the timer and the argument cache."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def measure(self, launch, **kw):  # noqa: ANN001, ANN003, ANN201
        self.calls.append("timed")
        return {"median_ms": 1.0, "spread": 0.0}

    def get(self, D):  # noqa: ANN001, ANN201
        return ()

    def expected(self, D):  # noqa: ANN001, ANN201
        self.calls.append("checked")
        return {}

    def take_setup(self) -> float:
        return 0.0


def test_cold_points_skip_the_output_check() -> None:
    from types import SimpleNamespace

    from klaraptor.collect.worker import _measure_point

    rec = _Recorder()
    spec = SimpleNamespace(reference=print, idempotent=True, meta={}, outputs=(1,), rtol=1e-5)
    backend = SimpleNamespace(
        check_outputs=lambda *a, **k: rec.calls.append("compared") or {"ok": True},
        launch=lambda *a, **k: None,
    )
    k = SimpleNamespace(
        backend=backend, spec=spec, fn=None, fn_for=lambda pv: None, launcher=lambda p, args: None
    )
    D = suite.get(KERNEL).size(64)
    for cold in (False, True):
        rec.calls.clear()
        p = Point(0, D, (32, 1, 1), (2, 64, 1), cold=cold)
        _measure_point(k, rec, rec, p, CollectOptions())
        assert rec.calls == (["timed"] if cold else ["checked", "compared", "timed"])


class _SetupOnce(_Recorder):
    """The first measurement of a size pays its set-up (0.7 s), as ArgsCache reports it."""

    def __init__(self) -> None:
        super().__init__()
        self.paid = False

    def take_setup(self) -> float:
        out = 0.0 if self.paid else 0.7
        self.paid = True
        return out


def test_a_raced_point_keeps_the_set_up_it_paid_when_it_is_refined() -> None:
    # The point that builds the size's arguments is often the best one, refined in the full
    # stage: its set-up must stay reported, or its wall passes for timing.
    from types import SimpleNamespace

    from klaraptor.collect.worker import _race_group

    rec = _SetupOnce()
    times = iter([1.0, 1.001, 5.0, 1.0, 1.001] + [1.0] * 10)
    rec.measure = lambda launch, **kw: {  # type: ignore[method-assign]
        "median_ms": (t := next(times)),
        "q1_ms": t * 0.99,
        "q3_ms": t * 1.01,
        "spread": 0.02,
    }
    spec = SimpleNamespace(reference=None, idempotent=True, meta={}, outputs=(1,), rtol=1e-5)
    backend = SimpleNamespace(context_alive=lambda: True)
    k = SimpleNamespace(
        backend=backend, spec=spec, fn=None, fn_for=lambda pv: None, launcher=lambda p, a: None
    )
    timers = SimpleNamespace(get=lambda cold: rec)
    D = suite.get(KERNEL).size(64)
    points = [Point(i, D, (32 * (i + 1), 1, 1), (2, 64, 1)) for i in range(3)]
    events = SimpleNamespace(emit=lambda *a, **kw: None)
    lost, out = _race_group(k, rec, timers, points, CollectOptions(check=False), events)  # type: ignore[arg-type]
    assert not lost and out[0][1]["race_stage"] == "full"
    assert out[0][1]["setup_s"] == 0.7 and out[1][1]["setup_s"] == 0.0
