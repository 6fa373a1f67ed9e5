"""Where SAAKE gets a kernel's SASS: the recorded analyses, else NVRTC + cuobjdump, cached.

Order: (1) the recorded sm_90 analyses shipped with klaraptor (`data/isa_sm90.json.gz`), when
the spec's fingerprint matches the recorded one (same source, options and kernel); (2) the cache
`$KLARAPTOR_HOME/isa/` (else `~/.cache/klaraptor/isa/`), one JSON file per spec fingerprint and
architecture, written by (3) a fresh analysis (`klaraptor.isa.analyze`, which needs the `isa`
extra: NVRTC, cuobjdump and nvdisasm, no GPU). So a kernel is compiled and disassembled once per
machine, and everything downstream (emulation, sensitivities, `explain`) runs on any CPU.

Analyses are made with strict=False: an opcode the classification table does not know is
classed "unknown" (the model reports it and emulates it as an ALU instruction) instead of
failing. A missing tool raises ToolMissingError, which names the tool and how to install it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from klaraptor.core.paths import home_path
from klaraptor.isa.analysis import KernelISA, analyze, load_recorded_raw
from klaraptor.isa.errors import ToolMissingError

ARCH = "sm_90"


def cache_dir() -> Path:
    """The folder of cached analyses (created on first write)."""
    return home_path("isa")


@functools.lru_cache(maxsize=1)
def _recorded_raw() -> dict[str, Any]:
    try:
        return dict(load_recorded_raw().get("kernels", {}))
    except Exception:  # noqa: BLE001 - no recorded file: fall through to analysing
        return {}


@functools.lru_cache(maxsize=64)
def _recorded(name: str) -> KernelISA | None:
    raw = _recorded_raw().get(name)
    return None if raw is None else KernelISA.from_dict(raw, strict=False)


def recorded_isa(name: str, fingerprint: str | None = None) -> KernelISA | None:
    """The recorded analysis of a suite kernel (None when absent or its fingerprint differs)."""
    raw = _recorded_raw().get(name)
    if raw is None or (fingerprint is not None and raw.get("fingerprint") != fingerprint):
        return None
    return _recorded(name)


def kernel_isa(spec: Any, arch: str = ARCH, variant: Any = None) -> tuple[KernelISA, str]:
    """The KernelISA of `spec` and where it came from ("recorded", "cache" or "analysed").
    `variant` (ParamValues): that compiled variant of a spec with program parameters (never
    recorded; a spec with parameters and no variant is analysed at its default variant)."""
    if spec.params and not variant:
        variant = spec.default_variant
    fp = spec.fingerprint()
    isa = None if variant else recorded_isa(spec.name, fp)
    if isa is not None:
        return isa, "recorded"
    if variant:
        tag = "_".join(f"{k}{v}" for k, v in variant.items())
        fp = f"{fp}-{tag}"
    path = cache_dir() / f"{fp}-{arch}.json"
    if path.is_file():
        try:
            return KernelISA.from_dict(json.loads(path.read_text(encoding="utf-8"))), "cache"
        except Exception:  # noqa: BLE001 - a damaged cache entry is re-made below
            pass
    try:
        isa = analyze(spec, arch, strict=False, variant=variant)
    except ToolMissingError as exc:
        raise ToolMissingError(
            f"the saake model needs the SASS of {spec.name!r}, which is not recorded: {exc}"
        ) from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(isa.to_dict()), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # the cache is an optimisation
    return isa, "analysed"


__all__ = ["ARCH", "cache_dir", "kernel_isa", "recorded_isa"]
