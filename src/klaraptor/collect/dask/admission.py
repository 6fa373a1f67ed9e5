"""Which Dask workers may take part in a build (GPU-free rules over the workers' probes).

A worker is refused when its probe failed, when it runs another klaraptor (version, protocol,
job format or Python), when it has no usable GPU, when its GPU is not the build's device key,
or when another admitted worker already measures on the same GPU (one worker per GPU, so a
kernel is never timed by two workers on one GPU at once). Workers with different GPUs are never
mixed into one model: without a chosen device key, a cluster of several GPU models is refused.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from klaraptor.collect.dask.tasks import PROTOCOL
from klaraptor.collect.jobfile import JOB_VERSION
from klaraptor.core.errors import CollectError
from klaraptor.core.version import __version__


@dataclass(frozen=True)
class WorkerProbe:
    """What one worker reported: who it is, what it runs, and the GPU it measures on."""

    address: str
    host: str = ""
    pid: int = 0
    nthreads: int = 0
    klaraptor: str = ""
    protocol: int = 0
    job_version: int = 0
    python: str = ""
    cuda_visible_devices: str | None = None
    gpu_asked: bool = False
    gpu_problem: str | None = None
    device: dict[str, Any] | None = None
    device_key: str | None = None
    gpu_id: str | None = None
    error: str = ""

    @classmethod
    def from_answer(cls, address: str, ans: Mapping[str, Any], *, gpu_asked: bool) -> WorkerProbe:
        gpu = ans.get("gpu") or {}
        gpu_id = gpu.get("uuid") or (
            f"{ans.get('host', '?')}/pci {gpu['pci_bus_id']}" if gpu.get("pci_bus_id") else None
        )
        return cls(
            address=address,
            host=str(ans.get("host", "")),
            pid=int(ans.get("pid", 0)),
            nthreads=int(ans.get("nthreads", 0)),
            klaraptor=str(ans.get("klaraptor", "")),
            protocol=int(ans.get("protocol", 0)),
            job_version=int(ans.get("job_version", 0)),
            python=str(ans.get("python", "")),
            cuda_visible_devices=ans.get("cuda_visible_devices"),
            gpu_asked=gpu_asked,
            gpu_problem=gpu.get("problem") if gpu_asked else None,
            device=gpu.get("device"),
            device_key=gpu.get("key"),
            gpu_id=gpu_id,
        )

    @classmethod
    def failed(cls, address: str, why: str) -> WorkerProbe:
        return cls(address=address, error=why)


def client_versions() -> dict[str, Any]:
    """What this client runs, as a worker's probe reports it."""
    return {
        "klaraptor": __version__,
        "protocol": PROTOCOL,
        "job_version": JOB_VERSION,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    }


def version_mismatch(p: WorkerProbe) -> str:
    """Why the worker's software cannot work with this client ('' when it can)."""
    mine = client_versions()
    theirs = {k: getattr(p, k) for k in mine}
    if theirs == mine:
        return ""

    def fmt(v: Mapping[str, Any]) -> str:
        return (
            f"klaraptor {v['klaraptor']} (protocol {v['protocol']}, job format "
            f"{v['job_version']}, Python {v['python']})"
        )

    return (
        f"runs {fmt(theirs)}, but this client runs {fmt(mine)}; install the same klaraptor "
        "version with the same Python on the client and on every worker"
    )


def refusal(p: WorkerProbe, *, need_gpu: bool, device_key: str | None) -> str:
    """Why worker `p` may not take part ('' when it may); the GPU-sharing rule is `admit`'s."""
    if p.error:
        return p.error
    if why := version_mismatch(p):
        return why
    if need_gpu:
        if p.gpu_problem:
            return f"has no usable GPU: {p.gpu_problem}"
        if device_key is not None and p.device_key != device_key:
            return (
                f"its GPU is {p.device_key!r}, not the build's device {device_key!r}; "
                "measurements of different GPUs are never mixed (build for each GPU separately)"
            )
    return ""


def group_by_device(probes: Iterable[WorkerProbe]) -> dict[str, list[str]]:
    """Device key → addresses of the workers with a usable GPU of that key."""
    groups: dict[str, list[str]] = {}
    for p in probes:
        if p.device_key and not p.gpu_problem and not p.error:
            groups.setdefault(p.device_key, []).append(p.address)
    return {k: sorted(v) for k, v in sorted(groups.items())}


def admit(
    probes: Iterable[WorkerProbe],
    *,
    need_gpu: bool,
    device_key: str | None,
    taken: Mapping[str, str] | None = None,
) -> tuple[list[WorkerProbe], dict[str, str], str | None]:
    """(admitted workers, {address: why refused}, the device key).

    Without `device_key`, the key is the one GPU model of the workers; several models raise
    CollectError. `taken` maps GPU ids to the live admitted workers that already own them.
    """
    probes = sorted(probes, key=lambda p: p.address)
    refused: dict[str, str] = {}
    ok: list[WorkerProbe] = []
    for p in probes:
        why = refusal(p, need_gpu=need_gpu, device_key=device_key)
        if why:
            refused[p.address] = why
        else:
            ok.append(p)
    if need_gpu and device_key is None:
        groups = group_by_device(ok)
        if len(groups) > 1:
            listing = "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items())
            raise CollectError(
                f"the Dask workers have different GPUs ({listing}). Measurements of different "
                "GPUs are never mixed into one model: build for one of them with "
                "DaskExecutor(client, device=KEY) or build(..., client=..., device=PROFILE), "
                "once per GPU model, or give each GPU model its own scheduler"
            )
        device_key = next(iter(groups), None)
    owners = dict(taken or {})
    admitted: list[WorkerProbe] = []
    for p in ok:
        gpu = p.gpu_id if need_gpu else None
        if gpu is not None and gpu in owners and owners[gpu] != p.address:
            refused[p.address] = (
                f"measures on GPU {gpu}, which worker {owners[gpu]} already uses; one worker per "
                "GPU (start workers with `dask cuda worker`, or give each worker its own "
                "CUDA_VISIBLE_DEVICES)"
            )
            continue
        if gpu is not None:
            owners[gpu] = p.address
        admitted.append(p)
    return admitted, refused, device_key
