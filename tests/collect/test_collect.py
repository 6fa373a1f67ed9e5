"""Collector bookkeeping on the CPU: planning, resume, job transport and crash/hang isolation.

The isolation tests run real child processes (the generic runner, not a fake GPU) that crash
(os.abort, a non-zero exit) or hang (sleep) on chosen items.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from klaraptor.collect import collector as kc
from klaraptor.collect import process as kp
from klaraptor.collect.jobfile import write_job
from klaraptor.collect.process import EventReader, Events
from klaraptor.collect.worker import Point
from klaraptor.core.errors import CollectError, CompileError
from klaraptor.core.types import DataSize, KernelAttributes
from klaraptor.device.profile import DeviceProfile, recorded_profile
from klaraptor.space.configspace import ConfigSpace, launch_values
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import Measurement, Store

SRC = 'extern "C" __global__ void scale(float* a, int n) { }'


def make_args(D, rng):  # noqa: ANN001, ANN201 - module level: picklable by reference
    return (np.zeros(D["N"], np.float32), np.int32(D["N"]))


def spec(**kw: object) -> KernelSpec:
    base: dict[str, object] = dict(
        name="test.scale",
        source=SRC,
        kernel="scale",
        data=(DataParam("N", arg=1),),
        dim=1,
        grid=("ceil(N / bx)", "1", "1"),
        make_args=make_args,
    )
    base.update(kw)
    return KernelSpec(**base)  # type: ignore[arg-type]


def h200() -> DeviceProfile:
    return recorded_profile("h200")


ATTRS = KernelAttributes(
    num_regs=96,
    static_smem=0,
    const_size=0,
    local_size=0,
    max_threads_per_block=640,
    max_dynamic_smem=49152,
)


# ---------------------------------------------------------------------------------------------
# Planning and resume


def test_plan_rejects_unlaunchable_points_with_reasons() -> None:
    s = spec(constraints=("bx <= N",))
    plan = kc.plan_points(s, [s.size(100), s.size(5000)], ConfigSpace.for_spec(s), ATTRS, h200())
    # N=100: 32, 64, 96 pass "bx <= N"; N=5000: 32..640 (register limit 65536 / 96 = 682).
    assert [p.block[0] for p in plan.points if p.D["N"] == 100] == [32, 64, 96]
    big = [p.block[0] for p in plan.points if p.D["N"] == 5000]
    assert big == list(range(32, 641, 32))
    assert [p.id for p in plan.points] == list(range(len(plan.points)))
    reasons = {(d["N"], c.block[0]): why for d, c, why in plan.rejected}
    assert "bx <= N" in reasons[(100, 128)]
    assert "max_threads_per_block 640" in reasons[(5000, 672)]
    assert "registers" in reasons[(5000, 1024)]
    p = next(p for p in plan.points if p.D["N"] == 5000 and p.block[0] == 96)
    assert p.grid == (53, 1, 1) and p.smem == 0
    assert plan.todo == plan.points and plan.skipped == 0


def test_plan_dynamic_shared_memory() -> None:
    s = spec(dynamic_smem="bx * 256")
    attrs = KernelAttributes(32, 0, 0, 0, 1024, 232448 - 0)  # opted in to the device maximum
    plan = kc.plan_points(s, [s.size(4096)], ConfigSpace.for_spec(s), attrs, h200())
    assert max(p.block[0] for p in plan.points) == 896  # 896 * 256 = 229376 <= 232448
    assert all(p.smem == p.block[0] * 256 for p in plan.points)
    assert any("shared memory" in why for _, _, why in plan.rejected)


def test_plan_launch_values_match_the_per_block_formulas() -> None:
    # The grid and shared memory are evaluated once over all blocks of a size; each point must
    # carry what the spec's per-block formulas give (2-D blocks, a program parameter, sizes
    # where the grid's ceil matters).
    s = spec(
        name="test.tile2d",
        dim=2,
        grid=("ceil(N / (bx * ITEMS))", "ceil(N / by)", "1"),
        dynamic_smem="bx * by * ITEMS * 4",
        params={"ITEMS": (1, 2, 4)},
        default_params={"ITEMS": 1},
        constraints=("bx * ITEMS <= N",),
    )
    attrs = {pv: ATTRS for pv in ConfigSpace.for_spec(s).variants(s)}
    sizes = [s.size(n) for n in (33, 100, 1000, 4097)]
    plan = kc.plan_points(s, sizes, ConfigSpace.for_spec(s), attrs, h200())
    assert len(plan.points) > 100
    for p in plan.points:
        pv = p.params
        assert p.grid == s.grid_for(p.D, p.block, pv), p
        assert p.smem == s.dynamic_smem_for(p.D, p.block, pv), p
        assert isinstance(p.grid[0], int) and isinstance(p.smem, int)


def test_plan_launch_values_keep_the_specs_error() -> None:
    # A grid formula that gives a non-integer is the spec's mistake: the same SpecError as a
    # per-block evaluation, naming the formula (not a silently truncated grid).
    from klaraptor.core.errors import SpecError

    s = spec(grid=("N / bx", "1", "1"))
    with pytest.raises(SpecError, match="grid"):
        launch_values(s, s.size(100), [(32, 1, 1)], None)


def test_resume_skips_measured_points(tmp_path: Path) -> None:
    s = spec()
    dev = h200()
    space = ConfigSpace.for_spec(s, candidates=[32, 64, 128, 256])
    n = s.size(1024)
    with Store(tmp_path / "k.sqlite") as store:
        kc._register(store, s)
        store.put_measurements(
            [
                Measurement(s.name, dev.key, n, (32, 1, 1), "time", "ok", {"median_ms": 1}),
                Measurement(s.name, dev.key, n, (64, 1, 1), "time", "failed", {}, "crash"),
                Measurement(s.name, dev.key, n, (128, 1, 1), "time", "rejected", {}, "x"),
                Measurement(s.name, "other GPU", n, (256, 1, 1), "time", "ok", {}),
            ]
        )
        done = store.measured_configs(s.name, dev.key, kc.TIME)
        plan = kc.plan_points(s, [n], space, ATTRS, dev, done)
    # ok and failed points are done; a 'rejected' row and another device's row are not.
    assert [p.block[0] for p in plan.todo] == [128, 256]
    assert plan.skipped == 2 and len(plan.points) == 4


def test_stale_measurements_are_refused_or_replaced(tmp_path: Path) -> None:
    old, new = spec(), spec(source=SRC + "\n// edited")
    with Store(tmp_path / "k.sqlite") as store:
        kc._register(store, old)
        store.put_measurement(
            Measurement(old.name, "d", old.size(64), (32, 1, 1), "time", "ok", {})
        )
        kc._check_fingerprint(store, old, kc.CollectOptions())  # same version: fine
        with pytest.raises(CollectError, match="different version"):
            kc._check_fingerprint(store, new, kc.CollectOptions())
        kc._check_fingerprint(store, new, kc.CollectOptions(replace_stale=True))
        assert store.count_measurements(old.name) == 0


def test_collection_facts_merge_per_device(tmp_path: Path) -> None:
    s = spec()
    with Store(tmp_path / "k.sqlite") as store:
        kc._register(store, s)
        kc._update_facts(store, s, "gpu A", ptx_barriers=0, sync_per_warp=0.0)
        kc._update_facts(store, s, "gpu A", ncu_status="ok")
        kc._update_facts(store, s, "gpu B", ptx_barriers=1)
        a, b = store.collect_facts(s.name, "gpu A"), store.collect_facts(s.name, "gpu B")
        assert store.kernel(s.name).spec["kernel"] == "scale"
    assert a is not None and (a.ptx_barriers, a.sync_per_warp, a.ncu_status) == (0, 0.0, "ok")
    assert b is not None and (b.ptx_barriers, b.sync_per_warp, b.ncu_status) == (1, None, "")


def test_plan_is_the_configspace_dry_run() -> None:
    from klaraptor.assemble import plan

    s = spec()
    points = plan(s, [64], device=h200(), space=ConfigSpace.for_spec(s))
    status = {p.block[0]: p.status for p in points}
    assert status[32] == "measure" and status[1024] == "measure"
    assert all(p.D == s.size(64) for p in points)


def test_report_format() -> None:
    r = kc.CollectReport("k", "dev", [{"N": 1}])
    r._add("time", "ok", 3)
    r._add("time", "failed")
    r.failures.append(kc.Failure({"N": 1}, (64, 1, 1), "time", "timeout after 2 s"))
    r.wall_s["timing"] = 1.5
    text = str(r)
    assert "3 ok" in text and "1 failed" in text and "timeout after 2 s" in text


# ---------------------------------------------------------------------------------------------
# Job files


def test_lambda_make_args_cannot_be_sent(tmp_path: Path) -> None:
    s = spec(make_args=lambda D, rng: ())
    with pytest.raises(CollectError, match="module level"):
        write_job(
            tmp_path / "j",
            mode="time",
            spec=s,
            points=[],
            options=kc.CollectOptions(),
            events=tmp_path / "e",
        )


def test_job_from_a_main_script_reaches_the_worker(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            from pathlib import Path
            import numpy as np
            from klaraptor.collect.process import run_once, worker_command, worker_env
            from klaraptor.spec import DataParam, KernelSpec
            from klaraptor.collect.worker import Point
            from klaraptor.collect.jobfile import write_job

            def make_args(D, rng):
                return (np.zeros(D["N"], np.float32), np.int32(D["N"]))

            SPEC = KernelSpec(name="user.scale", source={SRC!r}, kernel="scale",
                              data=(DataParam("N", arg=1),), dim=1,
                              grid=("ceil(N / bx)", "1", "1"), make_args=make_args)

            if __name__ == "__main__":
                out = Path(sys.argv[1])
                write_job(out / "job", mode="probe", spec=SPEC,
                          points=[Point(0, {{"N": 64}}, (32, 1, 1), (2, 1, 1))], options=None,
                          events=out / "events")
                events = run_once(worker_command(out / "job"), out / "events", timeout_s=60,
                                  env=worker_env())
                print(json.dumps(events))
            """
        )
    )
    env = kp.worker_env()
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (probe,) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert probe["event"] == "probe"
    assert probe["spec"] == "user.scale"
    # The script was re-run as __mp_main__ and aliased as __main__ (as multiprocessing does),
    # so pickle's reference __main__.make_args resolved to the re-created function.
    assert probe["make_args"] == "__mp_main__.make_args"
    assert probe["main"] == "__mp_main__"
    assert probe["points"] == 1


def test_job_with_an_importable_spec(tmp_path: Path) -> None:
    write_job(
        tmp_path / "job",
        mode="probe",
        spec=spec(),
        points=[],
        options=kc.CollectOptions(),
        events=tmp_path / "ev",
    )
    (probe,) = kp.run_once(
        kp.worker_command(tmp_path / "job"), tmp_path / "ev", timeout_s=60, env=kp.worker_env()
    )
    assert probe["make_args"] == f"{__name__}.make_args"


def test_event_reader_waits_for_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "ev"
    r = EventReader(path)
    assert r.read() == []
    Events(path).emit("start", id=1)
    with open(path, "a") as fh:
        fh.write('{"event": "result", "id"')
    assert r.read() == [{"event": "start", "id": 1}]
    with open(path, "a") as fh:
        fh.write(': 1, "value": NaN}\nnot json\n')
    got = r.read()
    assert got[0]["id"] == 1 and np.isnan(got[0]["value"])
    assert got[1]["event"] == "garbled"


# ---------------------------------------------------------------------------------------------
# Crash and hang isolation with real child processes

STUB = """\
import json, os, sys, time
from klaraptor.collect.process import Events

ids = json.loads(sys.argv[1])
events = Events(sys.argv[2])
behaviour = json.loads(sys.argv[3])
events.emit("ready", pid=os.getpid())
for i in ids:
    events.emit("start", id=i)
    b = behaviour.get(str(i), "ok")
    if b == "abort":
        os.abort()
    if b == "exit":
        sys.stderr.write(f"boom on item {i}\\n")
        sys.exit(7)
    if b == "hang":
        time.sleep(3600)
    if b == "compile_error":
        events.emit("fatal", error="CompileError", message="NVRTC could not compile",
                    log="kern.cu(1): error: identifier \\"undefined_name\\" is undefined")
        sys.exit(1)
    if b == "fail":
        events.emit("result", id=i, status="failed", value={}, reason="output check failed")
        continue
    events.emit("result", id=i, status="ok", value={"median_ms": i / 10})
"""


def stub(tmp_path: Path, behaviour: dict[int, str]):  # noqa: ANN201
    script = tmp_path / "stub_worker.py"
    script.write_text(STUB)
    spec_json = json.dumps({str(k): v for k, v in behaviour.items()})
    commands: list[list[int]] = []

    def command(remaining: list[int], events: Path) -> list[str]:
        commands.append(list(remaining))
        return [sys.executable, str(script), json.dumps(remaining), str(events), spec_json]

    return command, commands


def test_crashes_and_hangs_are_isolated_and_recorded(tmp_path: Path) -> None:
    command, commands = stub(tmp_path, {1: "abort", 3: "hang", 4: "exit", 6: "fail"})
    s, dev = spec(), "stub device"
    results: list[kp.ItemResult] = []
    with Store(tmp_path / "k.sqlite") as store:
        kc._register(store, s)

        def on_result(r: kp.ItemResult) -> None:
            results.append(r)
            D = DataSize(s.data_names, (r.id,))
            store.put_measurement(
                Measurement(s.name, dev, D, (32, 1, 1), "time", r.status, r.value, r.reason)
            )

        t0 = time.monotonic()
        stats = kp.run_isolated(
            command,
            range(8),
            on_result=on_result,
            timeout_s=2.0,
            workdir=tmp_path / "w",
            env=kp.worker_env(),
        )
        wall = time.monotonic() - t0
        rows = {m.D["N"]: m for m in store.measurements(s.name, dev, "time")}

    assert sorted(r.id for r in results) == list(range(8))  # every item exactly once
    assert {i for i, m in rows.items() if m.status == "ok"} == {0, 2, 5, 7}
    assert rows[5].value == {"median_ms": 0.5}
    assert "SIGABRT" in rows[1].reason and "while measuring this point" in rows[1].reason
    assert rows[3].reason == "timeout after 2 s (the worker was killed and replaced)"
    assert "exit code 7" in rows[4].reason and "boom on item 4" in rows[4].reason
    assert rows[6].status == "failed" and rows[6].reason == "output check failed"
    # A new worker after each crash/hang, each given only what was left.
    assert stats.workers == 4 and stats.crashes == 2 and stats.timeouts == 1
    assert commands == [list(range(8)), [2, 3, 4, 5, 6, 7], [4, 5, 6, 7], [5, 6, 7]]
    assert len(stats.ready) == 4
    assert wall < 30


def test_compile_error_surfaces_with_the_log(tmp_path: Path) -> None:
    command, _ = stub(tmp_path, {0: "compile_error"})
    with pytest.raises(CompileError) as info:
        kp.run_isolated(
            command,
            [0, 1],
            on_result=lambda r: None,
            timeout_s=5,
            workdir=tmp_path / "w",
            env=kp.worker_env(),
        )
    assert "undefined_name" in info.value.log
    assert "undefined_name" in str(info.value)


def test_a_worker_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    def command(remaining: list[int], events: Path) -> list[str]:
        return [
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('no such module\\n'); sys.exit(5)",
        ]

    with pytest.raises(CollectError, match=r"exit code 5.*no such module"):
        kp.run_isolated(
            command,
            [0, 1],
            on_result=lambda r: None,
            timeout_s=5,
            workdir=tmp_path / "w",
            env=kp.worker_env(),
        )


def test_an_idle_worker_is_killed(tmp_path: Path) -> None:
    def command(remaining: list[int], events: Path) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(3600)"]

    t0 = time.monotonic()
    with pytest.raises(CollectError, match="did nothing for 1 s"):
        kp.run_isolated(
            command,
            [0],
            on_result=lambda r: None,
            timeout_s=5,
            startup_timeout_s=1.0,
            workdir=tmp_path / "w",
            env=kp.worker_env(),
        )
    assert time.monotonic() - t0 < 20


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_collect_without_cupy_says_so(tmp_path: Path) -> None:
    with Store(tmp_path / "k.sqlite") as store, pytest.raises(CollectError, match="needs CuPy"):
        kc.collect(spec(), [{"N": 64}], store=store, progress=False)


def test_point_pickles_plainly() -> None:
    import pickle

    p = Point(3, DataSize(("N",), (64,)), (32, 1, 1), (2, 1, 1), 0)
    assert pickle.loads(pickle.dumps(p)) == p
