"""Distributed collection, the parts without a cluster: the partition rule, worker admission,
the parent-death guard, the GPU query and argument checks on a CPU, and bad input (no Dask, a
spec that cannot travel, no GPUs for --gpus). The cluster tests are in test_distributed_cluster.py.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import klaraptor
from klaraptor import suite
from klaraptor.backends.cupy_backend import gpu_problem
from klaraptor.collect.dask import tasks
from klaraptor.collect.dask.admission import WorkerProbe, admit, client_versions, group_by_device
from klaraptor.collect.dask.executor import check_transportable
from klaraptor.collect.dask.gpuquery import query
from klaraptor.collect.dask.partition import chunk_target, partition
from klaraptor.collect.worker import Point
from klaraptor.core.errors import CollectError
from klaraptor.core.types import DataSize
from klaraptor.device.profile import recorded_profile
from klaraptor.spec import DataParam, KernelSpec

ROOT = Path(__file__).resolve().parents[2]


def points(sizes: dict[int, int]) -> list[Point]:
    """`n` points (blocks 32, 64, ...) per size N, ids in order."""
    out = []
    for n, count in sizes.items():
        D = DataSize(("N",), (n,))
        for k in range(count):
            out.append(Point(len(out), D, (32 * (k + 1), 1, 1), (1, 1, 1)))
    return out


def greedy(chunks: list[list[Point]], workers: int) -> list[int]:
    """Points per worker when each idle worker takes the next chunk (equal cost per point)."""
    load = [0] * workers
    for c in chunks:
        load[load.index(min(load))] += len(c)
    return load


# ---------------------------------------------------------------------------------------------
# The partition rule


@pytest.mark.parametrize(
    "sizes, workers",
    [
        ({512: 51, 1024: 51, 1536: 51, 2048: 51}, 2),
        ({256: 3, 512: 40, 4096: 200, 8192: 7}, 3),
        ({100: 1}, 4),
        ({n: 51 for n in range(256, 2177, 128)}, 1),
        ({n: 51 for n in range(256, 2177, 128)}, 2),
    ],
)
def test_every_point_is_in_one_chunk_and_the_work_is_balanced(
    sizes: dict[int, int], workers: int
) -> None:
    pts = points(sizes)
    chunks = partition(pts, workers)
    ids = [p.id for c in chunks for p in c]
    assert sorted(ids) == [p.id for p in pts]  # none lost, none twice
    cap = chunk_target(len(pts), workers)
    assert all(1 <= len(c) <= cap for c in chunks)
    assert [len(c) for c in chunks] == sorted((len(c) for c in chunks), reverse=True)
    if len(pts) >= workers:
        load = greedy(chunks, workers)
        assert max(load) - min(load) <= max(len(c) for c in chunks)
    for c in chunks:  # each chunk ordered by size, so arguments are built once per size
        assert c == sorted(c, key=lambda p: (p.D.values(), p.id))


def test_a_size_stays_whole_when_it_fits_and_is_cut_evenly_when_not() -> None:
    pts = points({512: 51, 1024: 51, 1536: 51, 2048: 51})
    # 204 points on 2 GPUs, 4 chunks each: 26 per chunk; each size cut into 2 pieces of 25-26.
    chunks = partition(pts, 2)
    assert chunk_target(204, 2) == 26
    assert sorted(len(c) for c in chunks) == [25] * 4 + [26] * 4
    assert all(len({p.D for p in c}) == 1 for c in chunks)
    # On 1 GPU the target is 51: whole sizes.
    assert [len({p.D for p in c}) for c in partition(pts, 1)] == [1, 1, 1, 1]
    # Small sizes share a chunk.
    small = partition(points({1: 5, 2: 5, 3: 5, 4: 50}), 1, target=20)
    assert sorted(len(c) for c in small) == [15, 16, 17, 17]
    assert any(len({p.D for p in c}) == 3 for c in small)


def test_the_last_chunks_are_cut_so_the_gpus_finish_together() -> None:
    # 43 sizes of 51 points on 4 GPUs: 102-point chunks (two sizes) to the end would leave the
    # GPUs up to a chunk apart; the last chunk per GPU is cut in four, handed out last.
    pts = points({256 + 16 * i: 51 for i in range(43)})
    chunks = partition(pts, 4)
    assert sorted(p.id for c in chunks for p in c) == [p.id for p in pts]
    sizes = [len(c) for c in chunks]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 102
    assert max(sizes[-4:]) <= 26  # pieces of a quarter of a chunk come last
    load = greedy(chunks, 4)
    assert max(load) - min(load) <= 26
    # One GPU: nothing to balance, no chunk is cut.
    assert min(len(c) for c in partition(pts, 1)) >= 51


def test_chunk_target() -> None:
    assert chunk_target(816, 1) == 204 and chunk_target(816, 2) == 102
    assert chunk_target(10_000, 1) == 256  # capped: one lost worker costs at most a chunk
    assert chunk_target(3, 8) == 1 and chunk_target(0, 2) == 1


# ---------------------------------------------------------------------------------------------
# Admission


def probe(
    address: str, device: dict | None, *, gpu: str | None = None, **kw: object
) -> WorkerProbe:
    base = dict(address=address, host="n1", pid=1, gpu_asked=True, **client_versions())
    if device is not None:
        base.update(device=device, device_key=kw.pop("key", None), gpu_id=gpu or address)
    base.update(kw)
    return WorkerProbe(**base)  # type: ignore[arg-type]


H200 = recorded_profile("h200")
# A second GPU model for the admission rules: the recorded H200 profile under another name.
OTHER = dataclasses.replace(H200, name="NVIDIA H100 80GB HBM3")


def test_workers_of_one_gpu_model_are_admitted_and_the_key_is_theirs() -> None:
    ps = [probe(f"tcp://w{i}", H200.to_dict(), key=H200.key) for i in range(3)]
    admitted, refused, key = admit(ps, need_gpu=True, device_key=None)
    assert [p.address for p in admitted] == ["tcp://w0", "tcp://w1", "tcp://w2"]
    assert refused == {} and key == H200.key


def test_a_mix_of_gpu_models_is_refused_unless_one_is_chosen() -> None:
    ps = [
        probe("tcp://a", H200.to_dict(), key=H200.key),
        probe("tcp://b", OTHER.to_dict(), key=OTHER.key),
        probe("tcp://c", H200.to_dict(), key=H200.key),
    ]
    with pytest.raises(CollectError, match="different GPUs.*never mixed"):
        admit(ps, need_gpu=True, device_key=None)
    assert group_by_device(ps) == {H200.key: ["tcp://a", "tcp://c"], OTHER.key: ["tcp://b"]}
    # A worker whose GPU is not the build's device key is refused, with why.
    admitted, refused, key = admit(ps, need_gpu=True, device_key=H200.key)
    assert [p.address for p in admitted] == ["tcp://a", "tcp://c"] and key == H200.key
    assert "not the build's device" in refused["tcp://b"] and OTHER.name in refused["tcp://b"]


def test_one_worker_per_gpu() -> None:
    ps = [
        probe("tcp://a", H200.to_dict(), key=H200.key, gpu="GPU-1"),
        probe("tcp://b", H200.to_dict(), key=H200.key, gpu="GPU-1"),
        probe("tcp://c", H200.to_dict(), key=H200.key, gpu="GPU-2"),
    ]
    admitted, refused, _ = admit(ps, need_gpu=True, device_key=None)
    assert [p.address for p in admitted] == ["tcp://a", "tcp://c"]
    assert "already uses" in refused["tcp://b"]
    # A late worker on a GPU that a live worker owns is refused; on a freed GPU it is admitted.
    late = [probe("tcp://d", H200.to_dict(), key=H200.key, gpu="GPU-1")]
    assert admit(late, need_gpu=True, device_key=H200.key, taken={"GPU-1": "tcp://a"})[0] == []
    assert admit(late, need_gpu=True, device_key=H200.key, taken={})[0] == late


def test_version_mismatch_no_gpu_and_failed_probes_are_refused_with_why() -> None:
    ps = [
        probe("tcp://old", H200.to_dict(), key=H200.key, klaraptor="0.0.9"),
        probe("tcp://py", H200.to_dict(), key=H200.key, python="2.7"),
        probe("tcp://cpu", None, gpu_problem="no usable CUDA GPU (no CuPy)"),
        WorkerProbe.failed("tcp://gone", "did not answer the probe within 5 s"),
        probe("tcp://ok", H200.to_dict(), key=H200.key),
    ]
    admitted, refused, _ = admit(ps, need_gpu=True, device_key=None)
    assert [p.address for p in admitted] == ["tcp://ok"]
    assert (
        "klaraptor 0.0.9" in refused["tcp://old"] and klaraptor.__version__ in refused["tcp://old"]
    )
    assert "Python 2.7" in refused["tcp://py"]
    assert "no usable GPU" in refused["tcp://cpu"]
    assert "did not answer" in refused["tcp://gone"]
    # GPU-free work (preflight) does not need a GPU; other software is still refused.
    admitted, refused, _ = admit(ps, need_gpu=False, device_key=None)
    assert {p.address for p in admitted} == {"tcp://cpu", "tcp://ok"}
    assert set(refused) == {"tcp://old", "tcp://py", "tcp://gone"}


# ---------------------------------------------------------------------------------------------
# On the worker, without a GPU


def _host_items_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    n = D["n"]
    return rng.random(n, dtype=np.float32), np.empty(n, np.float32), np.int32(n)


def test_preflight_checks_each_variant_against_its_own_plan() -> None:
    """A kernel with program parameters plans each block once per compiled variant (here the
    grid depends on ITEMS): the worker compares every point with its own variant's plan, and
    a refused point gets the worker's reason."""
    from klaraptor.collect.collector import plan_points
    from klaraptor.space.configspace import ConfigSpace

    spec = KernelSpec(
        name="test.items.preflight",
        source='extern "C" __global__ void k(float* x, float* y, int n) {}',
        kernel="k",
        data=(DataParam("n", arg=2),),
        dim=1,
        grid=("ceil(n / (bx * ITEMS))", "1", "1"),
        make_args=_host_items_args,
        params={"ITEMS": (1, 8)},
        constraints=("bx * ITEMS <= 4096",),
    )
    dev = recorded_profile("h200")
    space = ConfigSpace.for_spec(spec)
    D = spec.size(1 << 16)
    plan = plan_points(spec, [D], space, None, dev)
    assert {p.params["ITEMS"] for p in plan.points} == {1, 8}
    refused_d, refused_cfg, refused_why = next(
        r for r in plan.rejected if r[1].params["ITEMS"] == 8
    )
    assert refused_cfg.block[0] * 8 > 4096
    # a client that planned the refused point anyway (another worker's view of the space)
    stray = Point(
        len(plan.points), refused_d, refused_cfg.block, (1, 1, 1), params=refused_cfg.params
    )
    out = tasks.preflight_chunk(spec, [*plan.points, stray], dev.to_dict(), space, 0)
    by_id = {r.id: r for r in out["results"]}
    assert all(by_id[p.id].status == "ok" for p in plan.points), [
        r.reason for r in out["results"] if r.status != "ok"
    ]
    assert by_id[stray.id].status == "failed"
    assert refused_why in by_id[stray.id].reason


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_guarded_child_dies_with_its_parent(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from klaraptor.collect.dask.tasks import guarded
        child = subprocess.Popen(guarded([sys.executable, "-c", "import time; time.sleep(60)"]))
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        time.sleep(0.3)  # the child has passed its guard and become the sleeper
        os.kill(child, 0)  # alive
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the guarded child outlived its parent")
    finally:
        proc.kill()


def test_the_gpu_query_says_why_there_is_no_gpu() -> None:
    if gpu_problem() is None:
        pytest.skip("this machine has a GPU")
    out = query(0)
    assert out["problem"] and "GPU" in out["problem"]


def test_host_arguments_are_those_the_timing_worker_builds() -> None:
    spec = suite.get("polybench.gemm.gemm")
    D = spec.size(64)
    args = tasks.host_args(spec, D, seed=0)
    # The timing worker seeds default_rng([seed, stream 0, *D]) and calls make_args(D, rng).
    again = spec.make_args(D, np.random.default_rng([0, 0, 64]), device=False)
    assert all(np.array_equal(a, b) for a, b in zip(args, again))
    sha, nbytes = tasks.digest(args)
    assert nbytes == 3 * 64 * 64 * 4 + 3 * 4
    assert tasks.digest(tasks.host_args(spec, D, seed=0))[0] == sha
    assert tasks.digest(tasks.host_args(spec, D, seed=1))[0] != sha
    with pytest.raises(CollectError, match="device=False"):
        tasks.digest((object(),))


def local_args(D, rng):  # noqa: ANN001, ANN201 - module level: importable by name
    return (np.zeros(D["N"], np.float32), np.int32(D["N"]))


def test_a_spec_the_workers_cannot_import_is_refused_on_the_client() -> None:
    base = dict(
        name="t.s",
        source='extern "C" __global__ void k(float* a, int n) { }',
        kernel="k",
        data=(DataParam("N", arg=1),),
        dim=1,
        grid=("ceil(N / bx)", "1", "1"),
    )
    check_transportable(KernelSpec(**base, make_args=local_args))  # type: ignore[arg-type]
    with pytest.raises(CollectError, match="module-level"):
        check_transportable(KernelSpec(**base, make_args=lambda D, rng: ()))  # type: ignore[arg-type]
    # A script's functions pickle as __main__.<name>: the workers cannot import them.
    script = textwrap.dedent(
        """
        import numpy as np
        from klaraptor.collect.dask.executor import check_transportable
        from klaraptor.spec import DataParam, KernelSpec
        def make_args(D, rng):
            return (np.zeros(4, np.float32), np.int32(4))
        spec = KernelSpec(name="t.m", source='extern "C" __global__ void k(float* a, int n) { }',
                          kernel="k", data=(DataParam("N", arg=1),), dim=1,
                          grid=("ceil(N / bx)", "1", "1"), make_args=make_args)
        try:
            check_transportable(spec)
        except Exception as e:
            print(type(e).__name__, e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    ).stdout
    assert out.startswith("CollectError") and "__main__" in out


# ---------------------------------------------------------------------------------------------
# Bad input without a cluster

BLOCK_DASK = "import sys; sys.modules['dask'] = None; sys.modules['distributed'] = None; "


def test_without_dask_the_cli_says_how_to_install_it() -> None:
    code = BLOCK_DASK + (
        "from klaraptor.cli.main import main; "
        "sys.exit(main(['build', 'polybench.gemm.gemm', '--dask', 'tcp://127.0.0.1:1']))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert res.returncode == 5  # CollectError: the exit code of collection problems
    text = " ".join((res.stderr + res.stdout).split())
    assert "needs Dask, which is not installed" in text and "klaraptor[dask]" in text


def test_without_dask_the_executor_says_how_to_install_it() -> None:
    code = BLOCK_DASK + (
        "from klaraptor.collect.dask import DaskExecutor\n"
        "try:\n    DaskExecutor(None)\nexcept Exception as e:\n    print(type(e).__name__, e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    ).stdout
    assert out.startswith("CollectError") and "pip install 'klaraptor[dask]'" in out


def test_gpus_without_gpus_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed")
    if gpu_problem() is None:
        pytest.skip("this machine has a GPU")
    from klaraptor.cli.main import main

    assert main(["build", "polybench.gemm.gemm", "--gpus", "2"]) == 5
    err = " ".join(capsys.readouterr().err.split())
    assert "a local GPU cluster needs CUDA GPUs on this machine" in err
    assert "--dask ADDRESS" in err
    with pytest.raises(SystemExit) as exc:  # a usage error, refused by argparse
        main(["build", "polybench.gemm.gemm", "--gpus", "0"])
    assert exc.value.code == 2


def test_counts_in_partition_are_exact() -> None:
    pts = points({n: 51 for n in range(256, 2177, 128)})
    per_size = Counter(p.D["N"] for c in partition(pts, 2) for p in c)
    assert set(per_size.values()) == {51} and len(per_size) == 16


def test_the_worker_tasks_start_the_isolated_worker_and_report_why_it_cannot_run(
    tmp_path: Path,
) -> None:
    # On a machine without CuPy the guarded worker subprocess starts, and its fatal event
    # (no CuPy) comes back as the CollectError the client re-raises.
    if gpu_problem() is None:
        pytest.skip("this machine has a GPU")
    from klaraptor.collect.collector import CollectOptions

    spec = KernelSpec(
        name="t.s",
        source='extern "C" __global__ void k(float* a, int n) { }',
        kernel="k",
        data=(DataParam("N", arg=1),),
        dim=1,
        grid=("ceil(N / bx)", "1", "1"),
        make_args=local_args,
    )
    opts = CollectOptions(startup_timeout_s=60)
    pts = [Point(0, spec.size(64), (32, 1, 1), (2, 1, 1))]
    with pytest.raises(CollectError, match="CuPy|cupy"):
        tasks.info_task(spec, opts)
    with pytest.raises(CollectError, match="CuPy|cupy"):
        tasks.time_chunk(spec, pts, opts)
    answer = tasks.probe(True, 0, 60)
    assert answer["gpu"]["problem"] and answer["klaraptor"] == klaraptor.__version__
    # Without ncu the counter chunk says so instead of failing.
    missing = CollectOptions(ncu=str(tmp_path / "no-ncu"))
    out = tasks.ncu_chunk(spec, pts, H200.to_dict(), missing)
    assert out["status"] == "skipped" and "ncu" in out["reason"]
