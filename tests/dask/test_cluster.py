"""Distributed collection on a real Dask LocalCluster of worker processes (no GPU needed).

The work the workers do here is the GPU-free part of a build (`klaraptor.collect.dask.preflight`):
they plan each size again against the H200 profile and build its arguments with the spec's
factory; the client merges their rows into the store, one transaction per chunk. The same
executor runs the timing and counter passes on GPUs (benchmarks/bench_multi_gpu.py).
Workers are killed for real (SIGKILL of their process), and so is a client.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

import klaraptor  # noqa: E402
from klaraptor.backends.cupy_backend import gpu_problem  # noqa: E402
from klaraptor.collect.dask import DaskExecutor, connect, preflight  # noqa: E402
from klaraptor.collect.dask.cluster import pinned_cluster  # noqa: E402
from klaraptor.collect.dask.partition import chunk_target  # noqa: E402
from klaraptor.collect.dask.preflight import PREFLIGHT  # noqa: E402
from klaraptor.collect.dask.tasks import identity  # noqa: E402
from klaraptor.core.errors import CollectError  # noqa: E402
from klaraptor.device.profile import recorded_profile  # noqa: E402
from klaraptor.space.configspace import ConfigSpace  # noqa: E402
from klaraptor.spec import DataParam, KernelSpec  # noqa: E402
from klaraptor.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
H200 = recorded_profile("h200")
SRC = 'extern "C" __global__ void scale(float* a, int n) { }'
SIZES = [1000, 2000, 3000, 4000, 5000, 6000]
ARGS_S = 0.4  # a slow argument factory: a chunk is in flight long enough to be killed in it

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(gpu_problem() is None, reason="these tests expect workers without a GPU"),
]


def slow_args(D, rng):  # noqa: ANN001, ANN201 - module level: the workers import it by name
    time.sleep(ARGS_S)
    return (rng.random(D["N"], dtype=np.float32), np.int32(D["N"]))


def unseeded_args(D, rng):  # noqa: ANN001, ANN201 - ignores rng: not reproducible
    return (np.random.default_rng().random(D["N"], dtype=np.float32), np.int32(D["N"]))


def failing_args(D, rng):  # noqa: ANN001, ANN201 - fails for the largest size
    if D["N"] > 5000:
        raise MemoryError("cannot allocate the input")
    return (rng.random(D["N"], dtype=np.float32), np.int32(D["N"]))


def make_spec(make_args: Any = slow_args, name: str = "dist.scale") -> KernelSpec:
    return KernelSpec(
        name=name,
        source=SRC,
        kernel="scale",
        data=(DataParam("N", arg=1),),
        dim=1,
        grid=("ceil(N / bx)", "1", "1"),
        make_args=make_args,
    )


SPEC = make_spec()
N_POINTS = len(SIZES) * len(ConfigSpace.for_spec(SPEC).candidates)  # 6 sizes x 32 blocks


def new_cluster(n: int = 2) -> LocalCluster:
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")


@pytest.fixture(scope="module")
def cluster() -> Any:
    with new_cluster() as c:
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Any:
    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=60)
        yield c


def rows(store: Store, spec: KernelSpec = SPEC) -> list[Any]:
    return store.measurements(spec.name, H200.key, PREFLIGHT)


def assert_each_point_once(store: Store, spec: KernelSpec = SPEC) -> None:
    ms = rows(store, spec)
    keys = Counter((m.D, m.block) for m in ms)
    assert len(ms) == N_POINTS and set(keys.values()) == {1}
    assert {m.D["N"] for m in ms} == set(SIZES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# Partitioning, store merging, resume


def test_workers_share_the_points_and_the_client_writes_each_once(
    client: Any, tmp_path: Path
) -> None:
    store = Store(tmp_path / "s.sqlite")
    ex = DaskExecutor(client, device=H200)
    report = preflight(SPEC, SIZES, store=store, device=H200, executor=ex)
    assert report.counts == {"ok": N_POINTS, "failed": 0, "skipped": 0, "rejected": 0}
    assert_each_point_once(store)
    # Two workers, 4 chunks each: 24 points per chunk, so each 32-point size in 2 pieces.
    assert chunk_target(N_POINTS, 2) == 24
    per = ex.stats.per_worker
    assert len(per) == 2 and sum(w["points"] for w in per.values()) == N_POINTS
    loads = sorted(w["points"] for w in per.values())
    assert loads[1] - loads[0] <= 24  # balanced within one chunk
    assert ex.stats.chunks == 12 and ex.stats.requeued_points == 0
    assert ex.stats.duplicates_dropped == 0
    # Each size was built on the workers; the same seed gives the same arguments everywhere.
    by_worker: dict[str, set[int]] = {}
    for m in rows(store):
        by_worker.setdefault(m.value["collected_by"]["worker"], set()).add(m.D["N"])
        assert m.value["args_bytes"] == 4 * m.D["N"] + 4
    assert set(by_worker) == set(per) and all(len(s) >= 2 for s in by_worker.values())
    assert report.irreproducible == [] and all(len(s) == 1 for s in report.args_sha1.values())
    # Run again: nothing is measured twice.
    again = preflight(SPEC, SIZES, store=store, device=H200, executor=DaskExecutor(client))
    assert again.counts["skipped"] == N_POINTS and again.counts["ok"] == 0
    assert again.stats.dispatched == 0
    store.close()


def test_an_unreproducible_argument_factory_and_a_failing_one_are_reported(
    client: Any, tmp_path: Path
) -> None:
    store = Store(tmp_path / "s.sqlite")
    spec = make_spec(unseeded_args, "dist.unseeded")
    report = preflight(spec, SIZES, store=store, device=H200, client=client)
    # Each size is cut into two chunks, so its arguments were built twice, differently.
    assert sorted(d["N"] for d in report.irreproducible) == SIZES
    assert "make_args is not seeded" in report.format()
    bad = make_spec(failing_args, "dist.failing")
    report = preflight(bad, SIZES, store=store, device=H200, client=client)
    assert report.counts["failed"] == 32 and report.counts["ok"] == N_POINTS - 32
    assert all("MemoryError" in why and d["N"] == 6000 for d, _, why in report.failures)
    store.close()


def test_a_build_interrupted_on_the_client_resumes_without_measuring_again(
    cluster: LocalCluster, client: Any, tmp_path: Path
) -> None:
    path = tmp_path / "s.sqlite"
    script = textwrap.dedent(
        f"""
        from distributed import Client
        from klaraptor.device.profile import recorded_profile
        from klaraptor.collect.dask import preflight
        from klaraptor.store import Store
        from tests.dask.test_cluster import SIZES, SPEC
        with Client({cluster.scheduler_address!r}) as c:
            preflight(SPEC, SIZES, store=Store({str(path)!r}), device=recorded_profile("h200"),
                      client=c)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists():
                with Store(path) as s:
                    if s.kernel(SPEC.name) and len(rows(s)) >= 48:
                        break
            time.sleep(0.05)
        assert proc.poll() is None, "the client finished before it could be interrupted"
        proc.send_signal(signal.SIGKILL)  # the client dies for real, mid-build
        proc.wait()
    finally:
        proc.kill()
    store = Store(path)
    before = {(m.D, m.block): m for m in rows(store)}
    assert 48 <= len(before) < N_POINTS
    assert len(before) % 16 == 0  # whole chunks of 16 points: one transaction each
    ex = DaskExecutor(client)
    report = preflight(SPEC, SIZES, store=store, device=H200, executor=ex)
    assert report.counts["skipped"] == len(before)
    assert report.counts["ok"] == N_POINTS - len(before)
    assert sum(w["points"] for w in ex.stats.per_worker.values()) == N_POINTS - len(before)
    after = {(m.D, m.block): m for m in rows(store)}
    for key, m in before.items():  # the rows written before the interruption are untouched
        assert after[key].created == m.created and after[key].value == m.value
    assert_each_point_once(store)
    store.close()


def test_a_killed_worker_loses_only_its_chunk_in_flight(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    killed: dict[str, Any] = {}
    with new_cluster() as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)

        def kill_one(ex: DaskExecutor) -> None:
            if killed or ex.points_done < 24 or not ex.in_flight:
                return
            addr = sorted(ex.in_flight)[0]
            pid = client.run(os.getpid, workers=[addr])[addr]
            killed.update(address=addr, points=ex.in_flight[addr], done=ex.points_done, pid=pid)
            os.kill(pid, signal.SIGKILL)  # the worker process dies for real, mid-chunk

        ex = DaskExecutor(client, device=H200, on_progress=kill_one)
        report = preflight(SPEC, SIZES, store=store, device=H200, executor=ex)
    assert killed, "no chunk was in flight to kill"
    assert ex.stats.lost_workers == [killed["address"]]
    # Only the chunk in flight was lost, and it was queued again, once.
    assert ex.stats.requeued_points == killed["points"] and ex.stats.requeued_chunks == 1
    assert ex.stats.dispatched == ex.stats.chunks + 1
    assert report.counts["ok"] == N_POINTS and ex.stats.duplicates_dropped == 0
    assert_each_point_once(store)
    # Every row came from a live worker: none from the killed process after its death.
    workers = Counter(m.value["collected_by"]["worker"] for m in rows(store))
    assert sum(workers.values()) == N_POINTS
    assert workers[killed["address"]] <= killed["done"]
    store.close()


# ---------------------------------------------------------------------------------------------
# Bad input


def test_workers_without_a_gpu_are_refused_with_why(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = DaskExecutor(client, worker_wait_s=10)
    with pytest.raises(CollectError, match="no Dask worker can take part.*no usable GPU"):
        ex.ensure_workers(need_gpu=True)
    assert len(ex.stats.refused) == 2 and ex.gpus() == {}
    with pytest.raises(CollectError, match="no usable GPU"):
        klaraptor.build(SPEC, [1000], store=Store(tmp_path / "b.sqlite"), client=client)
    from klaraptor.cli.main import main

    address = client.scheduler.address
    assert (
        main(
            [
                "--store",
                str(tmp_path / "c.sqlite"),
                "build",
                "polybench.gemm.gemm",
                "--dask",
                address,
            ]
        )
        == 5
    )
    err = " ".join(capsys.readouterr().err.split())
    assert "no Dask worker can take part" in err and "no usable GPU" in err


def test_an_unreachable_scheduler_is_an_error_within_the_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    t = time.monotonic()
    with pytest.raises(CollectError, match="cannot reach the Dask scheduler.*within 2 s"):
        connect(address, timeout_s=2)
    assert time.monotonic() - t < 20
    from klaraptor.cli.main import main

    t = time.monotonic()
    rc = main(["build", "polybench.gemm.gemm", "--dask", address, "--dask-timeout", "2"])
    assert rc == 5 and time.monotonic() - t < 20
    assert "cannot reach the Dask scheduler" in " ".join(capsys.readouterr().err.split())
    with pytest.raises(CollectError, match="non-empty string"):
        connect("", timeout_s=2)


def test_a_worker_with_another_klaraptor_version_is_refused(tmp_path: Path) -> None:
    # A real worker process running a copy of klaraptor that says it is another version.
    other = tmp_path / "other"
    src = Path(klaraptor.__file__).parent
    shutil.copytree(src, other / "klaraptor", ignore=shutil.ignore_patterns("data", "__pycache__"))
    version = other / "klaraptor" / "core" / "version.py"
    version.write_text(version.read_text().replace(f'"{klaraptor.__version__}"', '"0.0.1+other"'))
    with LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as cluster:
        env = {**os.environ, "PYTHONPATH": str(other)}
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with Client(cluster, set_as_default=False) as client:
                client.wait_for_workers(1, timeout=60)
                ex = DaskExecutor(client, device=H200)
                with pytest.raises(CollectError, match=r"klaraptor 0\.0\.1\+other.*same klaraptor"):
                    preflight(
                        SPEC, SIZES, store=Store(tmp_path / "s.sqlite"), device=H200, executor=ex
                    )
        finally:
            worker.kill()
            worker.wait()


def test_pinned_workers_each_see_their_own_gpu_first() -> None:
    # The fallback of --gpus without dask-cuda: one worker per GPU, CUDA_VISIBLE_DEVICES rotated.
    with pinned_cluster(["0", "1"]) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        seen = client.run(identity)  # read in each worker process
        threads = client.nthreads()
    assert sorted(w["cuda_visible_devices"] for w in seen.values()) == ["0,1", "1,0"]
    assert set(threads.values()) == {1}
