"""Static analysis of one kernel: SASS and PTX, classes, CFG and loops, resources, features.

`analyze(spec)` compiles with NVRTC and disassembles with cuobjdump (both needed only here);
`KernelISA.to_dict()` keeps the disassembly text, control codes, PTX and resource figures, and
`KernelISA.from_dict()` re-derives everything else from them on any CPU, without the tools.

Calls: on sm_90 without `-rdc`, ptxas places `__noinline__` device functions and its own slow
paths (IEEE division, square root) inside the kernel's code, reached by CALL.REL; they are
followed as subroutines (their instructions count once; their loop depth adds the depth of the
deepest call site). A CALL whose target is outside the kernel's code (separate compilation) is
not followed and is reported in `warnings`. In PTX, every `.func` the entry calls (transitively)
is included the same way.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

from klaraptor.isa import classify as cl
from klaraptor.isa import compile as nv
from klaraptor.isa import tools
from klaraptor.isa.cfg import CFG, build_cfg, ptx_flows, sass_cfg
from klaraptor.isa.errors import DisassemblyError, KlaraptorError, UnknownOpcodeError
from klaraptor.isa.ptx import PtxFunction, PtxInstruction, parse_ptx
from klaraptor.isa.sass import (
    Control,
    Instruction,
    SassFunction,
    parse_instruction,
    parse_res_usage,
    parse_sass,
    resources,
)

FORMAT = 1
FEATURE_VERSION = 1
RECORDED = "isa_sm90.json.gz"
_DEPTH_BINS = 3  # loop depth 0, 1, 2-or-more in the per-depth counts


@dataclass(frozen=True)
class PtxRecord:
    """A PTX instruction of the kernel or of a function it calls, with its loop depth."""

    function: str
    ins: PtxInstruction
    cls: str
    space: str | None
    dtype: str | None
    depth: int


@dataclass
class KernelISA:
    """Everything static about one kernel (see the module docstring)."""

    name: str
    kernel: str
    arch: str
    options: tuple[str, ...]
    tools: dict[str, str]
    resources: dict[str, int]
    dynamic_smem: str | None
    fingerprint: str
    sass: SassFunction
    ptx_module: str
    strict: bool = True
    # Derived by _derive():
    sass_classes: list[cl.OpClass] = field(default_factory=list)
    sass_cfg: CFG | None = None
    ptx_functions: dict[str, PtxFunction] = field(default_factory=dict)
    ptx: list[PtxRecord] = field(default_factory=list)
    ptx_cfgs: dict[str, CFG] = field(default_factory=dict)
    unknown_sass: list[str] = field(default_factory=list)
    unknown_ptx: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    features: dict[str, float] = field(default_factory=dict)

    # -- derived views ------------------------------------------------------------------------

    @property
    def instructions(self) -> list[Instruction]:
        return self.sass.instructions

    @property
    def reachable(self) -> list[bool]:
        """Per SASS instruction: reached from the entry or a called subroutine."""
        assert self.sass_cfg is not None
        blocks = self.sass_cfg.blocks
        return [blocks[b].root is not None for b in self.sass_cfg.block_of]

    @property
    def loop_depth(self) -> list[int]:
        """Per SASS instruction loop depth (call-site depth included)."""
        assert self.sass_cfg is not None
        return self.sass_cfg.instr_depth

    def sass_mix(self) -> dict[str, int]:
        """Static count of reachable SASS instructions per class."""
        return dict(
            Counter(c.cls for c, r in zip(self.sass_classes, self.reachable, strict=True) if r)
        )

    def sass_mix_by_depth(self) -> dict[str, list[int]]:
        """{class: [count at loop depth 0, 1, 2 or more]} over reachable SASS instructions."""
        out: dict[str, list[int]] = {}
        for c, r, d in zip(self.sass_classes, self.reachable, self.loop_depth, strict=True):
            if r:
                out.setdefault(c.cls, [0] * _DEPTH_BINS)[min(d, _DEPTH_BINS - 1)] += 1
        return out

    def block_mix(self) -> list[dict[str, int]]:
        """Static class counts of every SASS basic block (empty for unreachable blocks)."""
        assert self.sass_cfg is not None
        out: list[dict[str, int]] = []
        for b in self.sass_cfg.blocks:
            if b.root is None:
                out.append({})
            else:
                out.append(dict(Counter(c.cls for c in self.sass_classes[b.start : b.end])))
        return out

    def ptx_mix(self) -> dict[str, int]:
        return dict(Counter(r.cls for r in self.ptx))

    def instruction_table(self) -> list[dict[str, Any]]:
        """One row per SASS instruction: what an emulator needs, as plain values."""
        assert self.sass_cfg is not None
        rows = []
        for i, (ins, c) in enumerate(zip(self.instructions, self.sass_classes, strict=True)):
            b = self.sass_cfg.blocks[self.sass_cfg.block_of[i]]
            rows.append(
                {
                    "addr": ins.addr,
                    "text": ins.text,
                    "opcode": ins.opcode,
                    "mods": list(ins.mods),
                    "cls": c.cls,
                    "pipe": c.pipe,
                    "dst": list(ins.dst),
                    "src": list(ins.src),
                    "space": ins.space,
                    "guarded": ins.guarded,
                    "target": ins.target,
                    "block": b.index,
                    "routine": b.root,
                    "depth": self.sass_cfg.instr_depth[i],
                    "stall": ins.ctrl.stall,
                    "write_sb": ins.ctrl.write_sb,
                    "read_sb": ins.ctrl.read_sb,
                    "wait_mask": ins.ctrl.wait_mask,
                    "yield_bit": ins.ctrl.yield_bit,
                    "reuse": ins.ctrl.reuse,
                }
            )
        return rows

    def loop_summary(self) -> dict[str, Any]:
        assert self.sass_cfg is not None
        entry_cfg = self.ptx_cfgs.get(self.kernel)
        return {
            "sass": self.sass_cfg.summary(),
            "ptx": entry_cfg.summary() if entry_cfg is not None else {},
            "ptx_max_depth_with_calls": max((r.depth for r in self.ptx), default=0),
        }

    # -- serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record: raw disassembly, control codes, PTX, resources and provenance."""
        return {
            "format": FORMAT,
            "name": self.name,
            "kernel": self.kernel,
            "arch": self.arch,
            "options": list(self.options),
            "tools": dict(self.tools),
            "resources": dict(self.resources),
            "dynamic_smem": self.dynamic_smem,
            "fingerprint": self.fingerprint,
            "sass": [[ins.addr, ins.text, ins.ctrl.code] for ins in self.sass.instructions],
            "ptx": self.ptx_module,
            "table_version": cl.TABLE_VERSION,
            "feature_version": FEATURE_VERSION,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, strict: bool = False) -> KernelISA:
        """Rebuild (and re-derive) a KernelISA from `to_dict()` output; no tools needed."""
        if d.get("format") != FORMAT:
            raise KlaraptorError(
                f"ISA record of {d.get('name', '?')!r} has format {d.get('format')!r}, this "
                f"klaraptor reads format {FORMAT}; re-record it (scripts/record_isa.py)"
            )
        try:
            fn = SassFunction(
                d["kernel"],
                [parse_instruction(a, t, Control.from_code(c)) for a, t, c in d["sass"]],
            )
            isa = cls(
                name=d["name"],
                kernel=d["kernel"],
                arch=d["arch"],
                options=tuple(d["options"]),
                tools=dict(d["tools"]),
                resources={k: int(v) for k, v in d["resources"].items()},
                dynamic_smem=d.get("dynamic_smem"),
                fingerprint=d.get("fingerprint", ""),
                sass=fn,
                ptx_module=d["ptx"],
                strict=strict,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise KlaraptorError(
                f"ISA record of {d.get('name', '?')!r} is malformed ({type(exc).__name__}: {exc})"
            ) from None
        isa._derive()
        return isa

    # -- derivation ---------------------------------------------------------------------------

    def _derive(self) -> None:
        self.warnings = []
        self.sass_classes, self.unknown_sass = cl.classify_sass(
            self.sass.instructions, self.name, strict=self.strict
        )
        if self.unknown_sass:
            self.warnings.append(
                f"SASS opcodes not in the classification table, classed 'unknown': "
                f"{', '.join(self.unknown_sass)}"
            )
        self.sass_cfg = sass_cfg(self.sass)
        external = [
            ins.text
            for ins in self.sass.instructions
            if ins.opcode == "CALL" and self._call_target_missing(ins)
        ]
        if external:
            self.warnings.append(
                f"{len(external)} CALL(s) target code outside the kernel and are not followed: "
                + "; ".join(external[:3])
            )
        if self.sass_cfg.unresolved:
            self.warnings.append(
                f"{len(self.sass_cfg.unresolved)} indirect branch(es): their targets are unknown"
            )
        if self.sass_cfg.irreducible:
            self.warnings.append(
                f"irreducible control flow ({len(self.sass_cfg.irreducible)} retreating edges "
                "that are not back edges): those cycles get no loop depth"
            )
        self.ptx_functions = parse_ptx(self.ptx_module)
        if self.kernel not in self.ptx_functions:
            raise DisassemblyError(
                f"kernel {self.name!r}: the PTX has no function {self.kernel!r} "
                f"(found {sorted(self.ptx_functions)})"
            )
        self._derive_ptx()
        self.features = _features(self)

    def _call_target_missing(self, ins: Instruction) -> bool:
        if ins.target is None:
            return True
        try:
            self.sass.index_of(ins.target)
        except DisassemblyError:
            return True
        return False

    def _derive_ptx(self) -> None:
        # The entry plus every .func it reaches, each once; a callee's instructions add the
        # loop depth of its deepest call site (iterated to a fixed point, like the SASS side).
        order = [self.kernel]
        self.ptx_cfgs = {}
        sites: list[tuple[str, int, str]] = []  # (caller, instruction index, callee)
        unknown: set[str] = set()
        i = 0
        while i < len(order):
            name = order[i]
            i += 1
            fn = self.ptx_functions.get(name)
            if fn is None:
                self.warnings.append(f"PTX calls {name!r}, which the module does not define")
                continue
            self.ptx_cfgs[name] = build_cfg(ptx_flows(fn))
            for k, ins in enumerate(fn.instructions):
                if ins.op == "call":
                    callee = next((o for o in ins.operands if not o.startswith("(")), None)
                    if callee is not None:
                        sites.append((name, k, callee))
                        if callee not in order:
                            order.append(callee)
        offset = dict.fromkeys(order, 0)
        for _ in range(32):
            changed = False
            for caller, k, callee in sites:
                g = self.ptx_cfgs.get(caller)
                if g is None:
                    continue
                d = offset[caller] + g.instr_depth[k]
                if d > offset[callee]:
                    offset[callee] = d
                    changed = True
            if not changed:
                break
        else:
            self.warnings.append("recursive PTX calls: call-site loop depths are capped")
        self.ptx = []
        for name in order:
            fn = self.ptx_functions.get(name)
            g = self.ptx_cfgs.get(name)
            if fn is None or g is None:
                continue
            for k, ins in enumerate(fn.instructions):
                c = cl.ptx_class(ins.op, ins.mods, ins.operands)
                if c is None:
                    unknown.add(ins.op)
                    c = "unknown"
                self.ptx.append(
                    PtxRecord(
                        function=name,
                        ins=ins,
                        cls=c,
                        space=cl.ptx_space(ins.op, ins.mods),
                        dtype=cl.ptx_dtype(ins.mods, ins.op),
                        depth=offset[name] + g.instr_depth[k],
                    )
                )
        self.unknown_ptx = sorted(unknown)
        if self.unknown_ptx:
            if self.strict:
                raise UnknownOpcodeError(self.unknown_ptx, self.name, "PTX")
            self.warnings.append(
                f"PTX opcodes not in the classification table, classed 'unknown': "
                f"{', '.join(self.unknown_ptx)}"
            )


def _features(isa: KernelISA) -> dict[str, float]:
    """Flat static features (SNOWPACK Table 1 in spirit); names are stable per FEATURE_VERSION."""
    f: dict[str, float] = {}
    mix = isa.sass_mix()
    f["sass_total"] = sum(mix.values())
    for c in cl.SASS_CLASSES:
        f[f"sass_{c}"] = mix.get(c, 0)
    by_depth = isa.sass_mix_by_depth()
    for c in ("global_load", "global_store", "shared_load", "shared_store", "fma", "sfu"):
        counts = by_depth.get(c, [0] * _DEPTH_BINS)
        for d in range(_DEPTH_BINS):
            f[f"sass_{c}_depth{d}{'+' if d == _DEPTH_BINS - 1 else ''}"] = counts[d]
    assert isa.sass_cfg is not None
    for k, v in isa.sass_cfg.summary().items():
        f[f"sass_{k}"] = float(v)

    pmix = Counter(r.cls for r in isa.ptx)
    f["ptx_total"] = len(isa.ptx)
    for c in cl.PTX_CLASSES:
        f[f"ptx_{c}"] = pmix.get(c, 0)
    for c in ("load", "store", "atomic"):
        for sp in cl.PTX_SPACES:
            f[f"ptx_{c}_{sp}"] = sum(1 for r in isa.ptx if r.cls == c and r.space == sp)
    arith = {"add", "sub", "mul", "mad", "div", "rem", "minmax", "abs_neg", "sfu"}
    for fam in ("int", "f16", "f32", "f64"):
        f[f"ptx_arith_{fam}"] = sum(1 for r in isa.ptx if r.cls in arith and r.dtype == fam)
    # Address arithmetic proxy (SNOWPACK's "pointer arithmetic"): 64-bit integer add/mul/mad.
    f["ptx_int64_arith"] = sum(
        1
        for r in isa.ptx
        if r.cls in ("add", "sub", "mul", "mad")
        and (any(m in ("s64", "u64") for m in r.ins.mods) or "wide" in r.ins.mods)
    )
    for c in ("load", "store"):
        for d in range(_DEPTH_BINS):
            name = f"ptx_{c}_global_depth{d}{'+' if d == _DEPTH_BINS - 1 else ''}"
            f[name] = sum(
                1
                for r in isa.ptx
                if r.cls == c and r.space in ("global", "generic") and min(r.depth, 2) == d
            )
    entry_cfg = isa.ptx_cfgs[isa.kernel]
    for k, v in entry_cfg.summary().items():
        f[f"ptx_{k}"] = float(v)
    f["ptx_max_loop_depth_with_calls"] = max((r.depth for r in isa.ptx), default=0)

    entry = isa.ptx_functions[isa.kernel]
    f["params"] = len(entry.params)
    f["calls"] = sum(1 for r in isa.ptx if r.cls == "call")
    f["barriers"] = sum(1 for r in isa.ptx if r.cls == "barrier")
    reads = any(
        r.cls in ("load", "atomic", "async_copy") and r.space not in ("param", "const")
        for r in isa.ptx
    )
    writes = any(r.cls in ("store", "atomic") and r.space not in ("param",) for r in isa.ptx)
    f["reads_memory"] = float(reads)
    f["writes_memory"] = float(writes)
    f["no_memory_access"] = float(not reads and not writes)
    f["only_reads_memory"] = float(reads and not writes)
    for k, v in isa.resources.items():
        f[k] = float(v)
    f["ptx_shared_static_bytes"] = entry.shared_bytes
    f["ptx_local_bytes"] = entry.local_bytes
    f["ptx_local_decls"] = entry.local_decls
    f["dynamic_shared"] = float(bool(isa.dynamic_smem) or bool(entry.dynamic_shared))
    return {k: float(v) for k, v in f.items()}


def feature_names() -> list[str]:
    """The names of `KernelISA.features`, in order, for this FEATURE_VERSION."""
    # Any recorded kernel has the full set; derive from a tiny synthetic record instead of a
    # hard-coded list so the two never disagree.
    probe = KernelISA(
        name="probe",
        kernel="k",
        arch="sm_90",
        options=(),
        tools={},
        resources=resources({}),
        dynamic_smem=None,
        fingerprint="",
        sass=SassFunction("k", [parse_instruction(0, "EXIT", Control.from_code(0x7E0))]),
        ptx_module=".visible .entry k()\n{\n\tret;\n}\n",
        strict=False,
    )
    probe._derive()
    return list(probe.features)


# ---------------------------------------------------------------------------------------------
# Entry points


def analyze(
    spec: Any,
    arch: str = nv.DEFAULT_ARCH,
    *,
    strict: bool = True,
    match_cupy: bool = True,
    search_dirs: Sequence[str | Path] | None = None,
    variant: Any = None,
) -> KernelISA:
    """Compile `spec` (a KernelSpec) with NVRTC, disassemble, classify and analyse its kernel;
    `variant` (ParamValues): that compiled variant of a spec with program parameters (its
    `kernel` is then the template instance's lowered name where the spec uses templates).

    strict=True raises UnknownOpcodeError for an opcode the tables do not know; strict=False
    classes it "unknown", lists it in `unknown_sass`/`unknown_ptx` and adds a warning.
    """
    result = nv.compile_spec(spec, arch, match_cupy=match_cupy, variant=variant)
    kernel = next(iter(result.lowered.values()), spec.kernel)
    sass_text = tools.run_cuobjdump(result.cubin, ["-sass"], search_dirs)
    usage_text = tools.run_cuobjdump(result.cubin, ["-res-usage"], search_dirs)
    funcs = parse_sass(sass_text)
    if kernel not in funcs:
        raise DisassemblyError(
            f"kernel {spec.name!r}: the cubin has no function {kernel!r} (found "
            f'{sorted(funcs)}); declare it `extern "C" __global__` so its name is not mangled'
        )
    usage = parse_res_usage(usage_text).get(kernel, {})
    fingerprint = spec.fingerprint() + (f"|{variant}" if variant else "")
    isa = KernelISA(
        name=spec.name,
        kernel=kernel,
        arch=result.arch,
        options=result.options,
        tools={"nvrtc": result.nvrtc_version, **tools.versions(search_dirs)},
        resources=resources(usage),
        dynamic_smem=spec.dynamic_smem,
        fingerprint=fingerprint,
        sass=funcs[kernel],
        ptx_module=_compact_ptx(result.ptx),
        strict=strict,
    )
    isa._derive()
    return isa


def _compact_ptx(ptx: str) -> str:
    """The PTX without its header comments and blank lines (what the record keeps)."""
    lines = [ln.rstrip() for ln in ptx.splitlines()]
    return "\n".join(ln for ln in lines if ln.strip() and not ln.lstrip().startswith("//"))


def recorded_path() -> Path:
    return Path(str(importlib_resources.files("klaraptor") / "data" / RECORDED))


def load_recorded(path: str | Path | None = None, *, strict: bool = False) -> dict[str, KernelISA]:
    """The recorded KernelISA of every kernel in `isa_sm90.json.gz` (no tools needed)."""
    p = Path(path) if path is not None else recorded_path()
    if not p.is_file():
        raise KlaraptorError(
            f"no recorded ISA file at {p}; create it with `python scripts/record_isa.py`"
        )
    with gzip.open(p, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    return {name: KernelISA.from_dict(d, strict=strict) for name, d in data["kernels"].items()}


def load_recorded_raw(path: str | Path | None = None) -> dict[str, Any]:
    """The recorded file as stored (provenance and per-kernel dicts)."""
    p = Path(path) if path is not None else recorded_path()
    with gzip.open(p, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def disassemble(
    cubin: bytes, search_dirs: Sequence[str | Path] | None = None
) -> dict[str, SassFunction]:
    """Every function of a cubin, parsed (cuobjdump -sass)."""
    return parse_sass(tools.run_cuobjdump(cubin, ["-sass"], search_dirs))
