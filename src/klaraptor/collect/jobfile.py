"""The job files of collection workers: what one measured point is (`Point`), and the file a
parent writes for `python -m klaraptor.collect.worker JOBFILE` (`write_job`) and the worker reads
(`read_header`, `read_body`). See `klaraptor.collect.worker` for the protocol."""

from __future__ import annotations

import os
import pickle
import runpy
import sys
import time
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klaraptor.core.errors import CollectError
from klaraptor.core.types import Block, Config, DataSize, Grid, ParamValues

JOB_VERSION = 1
MODES = ("info", "time", "ncu", "probe", "plan", "datadep")


@dataclass
class Point:
    """One (D, configuration) to measure, with what the launch needs (grid, dynamic shared
    memory). `params` is the compiled variant (none without program parameters).

    `cold`: time it with the L2 flushed before every sample (a first call on data not in the
    L2); the output check is left to the hot point at the same (D, configuration)."""

    id: int
    D: DataSize
    block: Block
    grid: Grid
    smem: int = 0
    cold: bool = False
    params: ParamValues = ParamValues.NONE

    @property
    def config(self) -> Config:
        return Config(self.params, self.block)


# ---------------------------------------------------------------------------------------------
# Job files


_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}


def pickled_modules(body: bytes) -> set[str]:
    """The modules that unpickling `body` imports names from (functions and classes pickled by
    reference). A module name that only appears as data (the module name of a function pickled
    by value, as Numba pickles kernels) does not count. ValueError if `body` is unreadable."""
    import pickletools

    modules: set[str] = set()
    recent: list[Any] = []
    # keyed by the memo index the opcode carries (an int for every memo opcode)
    memo: dict[object, Any] = {}
    for op, arg, _ in pickletools.genops(body):
        name = op.name
        if name in _STRING_OPS:
            recent.append(arg)
        elif name in _GET_OPS:
            recent.append(memo.get(arg))
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
        elif name in _PUT_OPS:
            memo[arg] = recent[-1] if recent else None
        elif name == "STACK_GLOBAL" and len(recent) >= 2 and isinstance(recent[-2], str):
            modules.add(recent[-2])
        elif name in ("GLOBAL", "INST"):
            modules.add(str(arg).split(" ")[0])
    return modules


def imports_main(body: bytes) -> bool:
    """Whether unpickling `body` imports a name from `__main__` (a function of the user's
    script pickled by reference). Unreadable pickles count as importing it."""
    try:
        return "__main__" in pickled_modules(body)
    except Exception:  # noqa: BLE001 - when in doubt, re-create __main__ as before
        return b"__main__" in body


def module_roots(body: bytes) -> list[str]:
    """The folders the worker needs on sys.path to import the user's modules that `body` refers
    to: a spec may come from a module imported through a sys.path entry that is gone by the time
    the job is written (a script that added its folder, imported, and removed it)."""
    try:
        names = pickled_modules(body)
    except Exception:  # noqa: BLE001 - unreadable: the worker reports the import error itself
        return []
    roots: list[str] = []
    for name in sorted(names - {"__main__"}):
        top = sys.modules.get(name.split(".")[0])
        origin = getattr(top, "__file__", None)
        if not origin:
            continue
        where = Path(origin).resolve().parent
        if Path(origin).name == "__init__.py":  # a package: its parent folder holds it
            where = where.parent
        if str(where) not in roots:
            roots.append(str(where))
    return roots


def _main_info(body: bytes) -> dict[str, str] | None:
    """How the worker re-creates the parent's __main__, when the job refers to it."""
    if b"__main__" not in body or not imports_main(body):
        return None
    main = sys.modules.get("__main__")
    mod_name = getattr(getattr(main, "__spec__", None), "name", None)
    if mod_name and mod_name != "__main__" and not mod_name.endswith(".__main__"):
        return {"module": mod_name}
    path = getattr(main, "__file__", None)
    if path:
        return {"path": os.path.abspath(path)}
    raise CollectError(
        "the kernel spec refers to functions defined in an interactive session (__main__ has no "
        "file), which a collection worker cannot import; define make_args, reference and other "
        "callables in a module or a script file"
    )


def write_job(
    path: str | os.PathLike[str],
    *,
    mode: str,
    spec: Any,
    points: Sequence[Point],
    options: Any,
    events: str | os.PathLike[str],
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write a job file for `python -m klaraptor.collect.worker`; CollectError if the spec cannot travel.

    `extra`: what a mode needs beyond the points (mode plan: the plan and the results known;
    mode info: the sizes whose argument bytes to count)."""
    if mode not in MODES:
        raise CollectError(f"unknown worker mode {mode!r}; one of {MODES}")
    try:
        body = pickle.dumps(
            (spec, list(points), options, dict(extra or {})), protocol=pickle.HIGHEST_PROTOCOL
        )
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        name = getattr(spec, "name", "?")
        raise CollectError(
            f"kernel spec {name!r} cannot be sent to the collection worker ({exc}). Collection "
            "runs in a subprocess, so make_args, reference, DataParam readers and callable "
            "constraints must be functions defined at module level (importable by name), "
            "not lambdas, nested functions or bound methods of local objects"
        ) from exc
    header = {
        "version": JOB_VERSION,
        "mode": mode,
        "events": str(events),
        "sys_path": [*sys.path, *(r for r in module_roots(body) if r not in sys.path)],
        "main": _main_info(body),
        "created": time.time(),
    }
    with open(path, "wb") as fh:
        pickle.dump(header, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.write(body)


_MAIN_DONE: list[Any] = []  # the main info already run in this (warm) worker


def _fixup_main(info: Mapping[str, str] | None) -> None:
    """Run the parent's main script/module as __mp_main__ and alias it as __main__ (once per
    worker: a warm worker's later jobs from the same parent find it there)."""
    if not info or (_MAIN_DONE and _MAIN_DONE[0] == dict(info)):
        return
    module = types.ModuleType("__mp_main__")
    if "module" in info:
        content = runpy.run_module(info["module"], run_name="__mp_main__", alter_sys=True)
    else:
        content = runpy.run_path(info["path"], run_name="__mp_main__")
    module.__dict__.update(content)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module
    _MAIN_DONE[:] = [dict(info)]


@dataclass
class Job:
    mode: str
    spec: Any
    points: list[Point]
    options: Any
    created: float
    extra: dict[str, Any]


def read_header(fh: Any) -> dict[str, Any]:
    header = pickle.load(fh)
    if not isinstance(header, dict) or header.get("version") != JOB_VERSION:
        raise CollectError(f"not a klaraptor job file of version {JOB_VERSION}")
    return header


def read_body(fh: Any, header: Mapping[str, Any]) -> Job:
    """Restore the parent's import environment, then unpickle (spec, points, options)."""
    sys.path[:0] = [p for p in header["sys_path"] if p not in sys.path]
    _fixup_main(header.get("main"))
    spec, points, options, *rest = pickle.load(fh)
    extra = dict(rest[0]) if rest else {}
    return Job(header["mode"], spec, points, options, float(header["created"]), extra)
