"""Reaching Dask: the optional import, a scheduler by address, a local cluster of one worker per GPU."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from klaraptor.core.errors import CollectError, KlaraptorError
from klaraptor.core.validate import check_number

INSTALL = "pip install 'klaraptor[dask]'"


def require_dask() -> Any:
    """The `distributed` module, or CollectError saying how to install it."""
    try:
        import dask  # noqa: F401 - distributed needs it; say so if it is the one missing
        import distributed
    except ImportError as exc:
        raise CollectError(
            f"collection on a Dask cluster needs Dask, which is not installed here ({exc}); "
            f"install it with {INSTALL} (on the client and on every worker; a local cluster of "
            "GPUs also uses dask-cuda: pip install dask-cuda)"
        ) from None
    return distributed


def connect(address: str, *, timeout_s: float = 30.0) -> Any:
    """A `distributed.Client` of the scheduler at `address`, or CollectError within `timeout_s`."""
    distributed = require_dask()
    if not isinstance(address, str) or not address.strip():
        raise CollectError(
            f"the Dask scheduler address must be a non-empty string such as tcp://HOST:8786, "
            f"got {address!r}"
        )
    check_address(address.strip())
    check_number(timeout_s, "the Dask timeout (seconds)", above=0.0)
    try:
        return distributed.Client(address.strip(), timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise CollectError(
            f"cannot reach the Dask scheduler at {address!r} within {timeout_s:g} s "
            f"({type(exc).__name__}: {exc}). Check the address (tcp://HOST:PORT, the port "
            "`dask scheduler` printed), that the scheduler runs, and that the port is open "
            "from here"
        ) from None


def check_address(address: str) -> None:
    """A malformed scheduler address is refused here, as a usage error: a `Client` given one
    fails in its constructor and then again, with a traceback, when it is garbage-collected."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme not in ("inproc",):
            parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise KlaraptorError(
            f"{address!r} is not a Dask scheduler address ({exc}); write tcp://HOST:PORT, e.g. "
            "tcp://10.0.0.5:8786 (the address `dask scheduler` printed)"
        ) from None


def visible_gpus(timeout_s: float = 120.0) -> list[str]:
    """The GPUs this machine shows (CUDA_VISIBLE_DEVICES entries, else 0..n-1); CollectError
    when there are none."""
    from klaraptor.collect.dask.gpuquery import MARK
    from klaraptor.collect.dask.tasks import run_json

    argv = [sys.executable, "-m", "klaraptor.collect.dask.gpuquery", "0"]
    found = run_json(argv, MARK, timeout_s=timeout_s, what="the GPU query")
    if found.get("problem"):
        raise CollectError(
            f"a local GPU cluster needs CUDA GPUs on this machine: {found['problem']}; use "
            "--dask ADDRESS to collect on another machine's workers"
        )
    n = int(found["count"])
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    listed = [d for d in listed if d]
    return listed[:n] if listed else [str(i) for i in range(n)]


def _rotated(devices: list[str], i: int) -> str:
    # Worker i sees its own GPU first (what dask-cuda does): device 0 in it is that GPU.
    return ",".join(devices[i:] + devices[:i])


def pinned_cluster(devices: list[str], **scheduler_options: Any) -> Any:
    """A local Dask cluster with one single-threaded worker process per entry of `devices`,
    each with CUDA_VISIBLE_DEVICES starting at its own GPU (the fallback without dask-cuda)."""
    distributed = require_dask()
    workers = {
        i: {
            "cls": distributed.Nanny,
            "options": {
                "nthreads": 1,
                "host": "127.0.0.1",
                "env": {"CUDA_VISIBLE_DEVICES": _rotated(devices, i)},
            },
        }
        for i in range(len(devices))
    }
    scheduler = {
        "cls": distributed.Scheduler,
        "options": {"host": "127.0.0.1", "dashboard_address": None, **scheduler_options},
    }
    return distributed.SpecCluster(
        workers=workers, scheduler=scheduler, silence_logs=logging.WARNING, name="klaraptor"
    )


def local_gpu_cluster(n_gpus: int) -> tuple[Any, str]:
    """(cluster, how) with one worker per GPU for `n_gpus` GPUs of this machine:
    `dask_cuda.LocalCUDACluster` when dask-cuda is installed, else `pinned_cluster`."""
    require_dask()
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise KlaraptorError(f"the number of GPUs must be a positive integer, got {n_gpus!r}")
    devices = visible_gpus()
    if n_gpus > len(devices):
        raise CollectError(
            f"{n_gpus} GPUs asked for, but this machine shows {len(devices)} ({devices})"
        )
    devices = devices[:n_gpus]
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        why = f"dask-cuda is not importable ({type(exc).__name__}: {exc})"
    else:
        try:
            cluster = LocalCUDACluster(
                n_workers=n_gpus,
                CUDA_VISIBLE_DEVICES=",".join(devices),
                threads_per_worker=1,
                dashboard_address=None,
                silence_logs=logging.WARNING,
            )
            return cluster, "dask_cuda.LocalCUDACluster"
        except Exception as exc:  # noqa: BLE001 - fall back to plain pinned workers, say why
            why = f"LocalCUDACluster failed ({type(exc).__name__}: {exc})"
    logging.getLogger("klaraptor").warning("%s; starting one pinned worker per GPU instead", why)
    return pinned_cluster(devices), f"pinned LocalCluster ({why})"


def open_client(
    address: str | None = None, gpus: int | None = None, *, timeout_s: float = 30.0
) -> tuple[Any, Any, str]:
    """(client, cluster we started or None, description) for `--dask ADDRESS` or `--gpus N`."""
    if address:
        return connect(address, timeout_s=timeout_s), None, f"Dask scheduler {address}"
    if gpus is None:
        raise CollectError("give a Dask scheduler address or a number of GPUs")
    distributed = require_dask()
    cluster, how = local_gpu_cluster(gpus)
    try:
        client = distributed.Client(cluster, timeout=timeout_s, set_as_default=False)
    except BaseException:
        cluster.close()
        raise
    return client, cluster, f"{gpus} local GPUs ({how})"
