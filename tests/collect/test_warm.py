"""Warm collection workers (`klaraptor.collect.warm`, issue 33 item 2): one worker process
reused across jobs, isolation kept. Real `--serve` workers run CPU jobs (mode probe); a
stand-in serve program crashes, hangs and loses its context on cue to show a killed or dead
worker is never reused and every item gets exactly one result."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from klaraptor.collect import process as kp
from klaraptor.collect import warm
from klaraptor.collect.collector import CollectOptions
from klaraptor.collect.jobfile import write_job
from klaraptor.core.errors import CollectError
from tests.collect.test_collect import spec


@pytest.fixture
def pool():  # noqa: ANN201
    p = warm.WarmPool()
    yield p
    p.close()


def _probe_job(tmp_path: Path, name: str) -> tuple[Path, Path]:
    job, ev = tmp_path / f"{name}.job", tmp_path / f"{name}.ev"
    write_job(job, mode="probe", spec=spec(), points=[], options=CollectOptions(), events=ev)
    return job, ev


def test_real_worker_serves_jobs_in_one_process(tmp_path: Path, pool) -> None:  # noqa: ANN001
    pids = []
    for name in ("a", "b", "c"):
        job, ev = _probe_job(tmp_path, name)
        (probe,) = kp.run_once(
            kp.worker_command(job), ev, timeout_s=120, env=kp.worker_env(), pool=pool
        )
        assert probe["event"] == "probe" and probe["spec"] == spec().name
        pids.append(probe["pid"])
    assert len(set(pids)) == 1 and pool.started == 1 and pool.idle_workers() == 1


def test_real_worker_survives_a_fatal_job(tmp_path: Path, pool) -> None:  # noqa: ANN001
    job, ev = _probe_job(tmp_path, "ok")
    (first,) = kp.run_once(
        kp.worker_command(job), ev, timeout_s=120, env=kp.worker_env(), pool=pool
    )
    bad = tmp_path / "bad.job"
    bad.write_bytes(b"not a job")
    with pytest.raises(CollectError, match="ended"):
        kp.run_once(kp.worker_command(bad), tmp_path / "bad.ev", timeout_s=60,
                    env=kp.worker_env(), pool=pool)  # fmt: skip
    job2, ev2 = _probe_job(tmp_path, "ok2")
    (second,) = kp.run_once(
        kp.worker_command(job2), ev2, timeout_s=120, env=kp.worker_env(), pool=pool
    )
    assert second["pid"] == first["pid"] and pool.started == 1


def test_switched_off_each_job_gets_its_own_process(tmp_path: Path, monkeypatch, pool) -> None:  # noqa: ANN001
    monkeypatch.setenv(warm.WARM_ENV, "0")
    pids = set()
    for name in ("a", "b"):
        job, ev = _probe_job(tmp_path, name)
        (probe,) = kp.run_once(
            kp.worker_command(job), ev, timeout_s=120, env=kp.worker_env(), pool=pool
        )
        pids.add(probe["pid"])
    assert len(pids) == 2 and pool.started == 0


def test_other_commands_are_not_served_warm(tmp_path: Path, pool) -> None:  # noqa: ANN001
    run = warm.start(["env", "true"], tmp_path / "log", None, pool)
    run.release()
    assert isinstance(run, warm.FreshRun) and pool.started == 0


def test_guarded_worker_commands_share_one_warm_worker_under_the_guard(
    tmp_path: Path,
    pool,  # noqa: ANN001
) -> None:
    """A Dask worker runs the collection worker under its parent-death guard: the jobs of every
    chunk go to ONE warm worker started under that guard (issue 33 item 5: one persistent
    worker per GPU, not one per chunk)."""
    from klaraptor.collect.dask.tasks import guarded

    pids = []
    for name in ("a", "b", "c"):
        job, ev = _probe_job(tmp_path, name)
        (probe,) = kp.run_once(
            guarded(kp.worker_command(job)), ev, timeout_s=120, env=kp.worker_env(), pool=pool
        )
        pids.append(probe["pid"])
    assert len(set(pids)) == 1 and pool.started == 1
    # The guard exec()s the worker: same process, its parent is this one.
    status = Path(f"/proc/{pids[0]}/status").read_text()
    assert f"PPid:\t{os.getpid()}" in status


# A serve program speaking the warm protocol; each job file is JSON {"ids": [...]} and an item
# id of 102 crashes it, 104 hangs it, 106 loses the "context" (exit status 3, then it exits).
FAKE_SERVE = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    for line in sys.stdin:
        path = line.strip()
        job = json.loads(Path(path).read_text())
        rc = 0
        with open(job["events"], "a") as ev:
            def emit(**e):
                ev.write(json.dumps(e) + "\\n"); ev.flush()
            emit(event="ready", pid=os.getpid())
            for i in job["ids"]:
                emit(event="start", id=i)
                if i == 102:
                    os._exit(9)
                if i == 104:
                    time.sleep(600)
                if i == 106:
                    rc = 3
                    break
                emit(event="result", id=i, status="ok", value={"pid": os.getpid()})
        tmp = path + ".exit.tmp"
        Path(tmp).write_text(str(rc))
        os.replace(tmp, path + ".exit")
        if rc == 3:
            sys.exit(3)
    """
)


def test_crash_hang_and_lost_context_replace_the_worker(tmp_path: Path) -> None:
    pool = warm.WarmPool(serve_argv=lambda py: [py, "-c", FAKE_SERVE])
    results: dict[int, kp.ItemResult] = {}

    def command(remaining: list[int], events: Path) -> list[str]:
        job = events.with_suffix(".job")
        job.write_text(json.dumps({"ids": remaining, "events": str(events)}))
        return kp.worker_command(job)

    def on_result(r: kp.ItemResult) -> None:
        assert r.id not in results
        results[r.id] = r

    try:
        stats = kp.run_isolated(
            command, range(100, 110), on_result=on_result, timeout_s=1.5,
            workdir=tmp_path / "w", startup_timeout_s=30, pool=pool,
        )  # fmt: skip
        assert sorted(results) == list(range(100, 110))
        assert results[102].status == "failed" and "died" in results[102].reason
        assert results[104].status == "failed" and "timeout" in results[104].reason
        assert results[106].status == "failed"  # lost with its worker
        ok_pids = {i: r.value["pid"] for i, r in results.items() if r.status == "ok"}
        assert ok_pids[100] == ok_pids[101]
        assert len({ok_pids[101], ok_pids[103], ok_pids[105], ok_pids[107]}) == 4
        assert stats.crashes == 2 and stats.timeouts == 1 and pool.started == 4
        assert pool.idle_workers() == 1  # the last one, whose job ended normally
        # The next run reuses it.
        kp.run_isolated(
            command, [200], on_result=on_result, timeout_s=5, workdir=tmp_path / "w2", pool=pool
        )
        assert results[200].value["pid"] == ok_pids[107] and pool.started == 4
    finally:
        pool.close()


def test_a_worker_idle_too_long_is_not_reused(tmp_path: Path, monkeypatch, pool) -> None:  # noqa: ANN001
    monkeypatch.setattr(warm, "IDLE_REUSE_S", 0.0)
    pids = set()
    for name in ("a", "b"):
        job, ev = _probe_job(tmp_path, name)
        (probe,) = kp.run_once(
            kp.worker_command(job), ev, timeout_s=120, env=kp.worker_env(), pool=pool
        )
        pids.add(probe["pid"])
    assert len(pids) == 2 and pool.started == 2


def test_an_idle_worker_exits_by_itself(tmp_path: Path, pool) -> None:  # noqa: ANN001
    import time

    env = {**kp.worker_env(), "KLARAPTOR_WARM_IDLE_S": "0.5"}
    job, ev = _probe_job(tmp_path, "a")
    kp.run_once(kp.worker_command(job), ev, timeout_s=120, env=env, pool=pool)
    assert pool.idle_workers() == 1
    deadline = time.monotonic() + 20
    while pool.idle_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool.idle_workers() == 0  # it ended, holding no CUDA context for a finished program
    job, ev = _probe_job(tmp_path, "b")
    (probe,) = kp.run_once(kp.worker_command(job), ev, timeout_s=120, env=env, pool=pool)
    assert probe["event"] == "probe" and pool.started == 2  # a new one took the job


def test_footprint_counted_without_making_the_arrays() -> None:
    """The info job's argument bytes come from make_args.nbytes when it has one (inferred
    arguments): no random arrays are made at every training size just to be counted."""
    from types import SimpleNamespace

    from klaraptor.collect import worker
    from klaraptor.core.types import DataSize

    class Counting:
        def __call__(self, D, rng):  # noqa: ANN001, ANN204
            raise AssertionError("arrays made")

        def nbytes(self, D) -> int:  # noqa: ANN001
            return 4 * int(D["N"])

    job = SimpleNamespace(
        spec=SimpleNamespace(make_args=Counting()),
        options=None,
        extra={"sizes": [DataSize(("N",), (64,)), DataSize(("N",), (128,))]},
    )
    steps: dict[str, float] = {}
    assert worker._arg_bytes(job, None, steps) == [[[64], 256], [[128], 512]]
    assert steps["arg_bytes_s"] >= 0


def test_a_prestarted_worker_takes_the_first_job(tmp_path: Path, pool) -> None:  # noqa: ANN001
    early = warm.prestart(pool)
    assert early is not None and warm.prestart(pool) is None  # one is idle already
    job, ev = _probe_job(tmp_path, "a")
    (probe,) = kp.run_once(
        kp.worker_command(job), ev, timeout_s=120, env=kp.worker_env(), pool=pool
    )
    assert probe["pid"] == early.proc.pid and pool.started == 1
    pool.discard(early)  # it served a job: kept
    assert pool.idle_workers() == 1


def test_an_unused_prestarted_worker_is_discarded(pool) -> None:  # noqa: ANN001
    import time

    early = warm.prestart(pool)
    assert early is not None
    pool.discard(early)
    assert pool.idle_workers() == 0
    deadline = time.monotonic() + 20
    while early.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert early.proc.poll() is not None


@pytest.mark.gpu
def test_two_builds_on_the_gpu_share_one_warm_worker(tmp_path: Path) -> None:
    """Two budgeted builds in one process: their info and plan jobs all run on one worker."""
    from klaraptor.assemble import build
    from klaraptor.device.profile import query_device, recorded_profile
    from klaraptor.spec import catalog
    from klaraptor.store import Store

    rec = recorded_profile("h200")
    if query_device(0).key != rec.key:
        pytest.skip("not the recorded H200: the device microbenchmarks would run first")
    warm.POOL.close()
    before = warm.POOL.started
    for name in ("patterns.saxpy.saxpy", "patterns.poly.poly"):
        store = Store(tmp_path / f"{name}.sqlite")
        store.save_profile(rec)
        kern = build(catalog.get(name), store=store, progress=False)
        assert kern.report.collect.counts["time"]["ok"] > 0
    assert warm.POOL.started - before == 1
