"""`python -m klaraptor.collect.dask.gpuquery [DEVICE]`: what GPU this process sees, as JSON.

Dask workers ask this in a subprocess, so a broken driver costs a timeout, not the worker, and
no CUDA context stays in the worker process. The one line it prints starts with MARK.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MARK = "klaraptor-gpuquery "


def _uuid(props: dict[str, Any]) -> str | None:
    raw = props.get("uuid")
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != 16:
        return None
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def query(device_id: int = 0) -> dict[str, Any]:
    """{"problem": why not} without a usable GPU, else the device query, its profile key, the
    number of visible devices and the GPU's identity (UUID and PCI bus id)."""
    from klaraptor.backends.cupy_backend import gpu_problem

    problem = gpu_problem()
    if problem is not None:
        return {"problem": problem}
    import cupy

    from klaraptor.device.profile import query_device

    try:
        profile = query_device(device_id)
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        pci = str(cupy.cuda.Device(device_id).pci_bus_id)
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - any failure means: this GPU cannot be used
        return {"problem": f"cannot query CUDA device {device_id}: {type(exc).__name__}: {exc}"}
    return {
        "problem": None,
        "count": count,
        "device": profile.to_dict(),
        "key": profile.key,
        "uuid": _uuid(props),
        "pci_bus_id": pci,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = query(int(args[0]) if args else 0)
    print(MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
