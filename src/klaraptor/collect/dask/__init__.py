"""Collection across GPUs and machines on Dask (the optional extra `klaraptor[dask]`).

- `DaskExecutor(client)`: an executor for `klaraptor.collect.collector.collect` (and
  `klaraptor.build(..., client=client)`): chunks of points measured on the workers' GPUs, rows
  written by the client into the store;
- `connect(address)`: a client of a running scheduler; `local_gpu_cluster(n)`: one worker per
  GPU of this machine (dask-cuda's LocalCUDACluster);
- `preflight(...)`: the GPU-free checks of a build run on the cluster (plans and arguments).

Nothing here imports Dask until it is used.
"""

from __future__ import annotations

from klaraptor.collect.dask.cluster import INSTALL, connect, local_gpu_cluster, require_dask
from klaraptor.collect.dask.executor import DaskExecutor, DistributedStats
from klaraptor.collect.dask.partition import chunk_target, partition
from klaraptor.collect.dask.preflight import PreflightReport, preflight

__all__ = [
    "INSTALL",
    "DaskExecutor",
    "DistributedStats",
    "PreflightReport",
    "chunk_target",
    "connect",
    "local_gpu_cluster",
    "partition",
    "preflight",
    "require_dask",
]
