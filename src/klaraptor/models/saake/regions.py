"""Code regions of a kernel's SASS for SAAKE's per-region sensitivity (its Tables 4-5), mapped
back to source lines where line information exists.

A region is a set of SASS instructions that run equally often per warp in the emulator's trace
(`tripcounts` count classes): each loop (its own blocks, not those of the loops inside it), each
routine reached by CALL, and the kernel's code outside every loop. Their instruction indices are
what `emulate.RegionScale` perturbs.

Source lines: the recorded SASS carries none (it was compiled without line information), so the
kernel is compiled once more by NVRTC with `-lineinfo` and disassembled by `nvdisasm -g` (the
`isa` extra; no GPU), and each address gets the line nvdisasm gives it, but only when that SASS
is the recorded one instruction for instruction (the same opcode at every address): otherwise the
regions are named by their addresses alone, and the report says why. The map is cached beside the
ISA analyses (`isa_source.cache_dir()`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klaraptor.core.errors import KlaraptorError
from klaraptor.isa.analysis import KernelISA

_LINE = re.compile(r'//## File "([^"]*)", line (\d+)')
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
_SECTION = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")


@dataclass(frozen=True)
class Region:
    """One code region: a count class's instructions (see the module docstring)."""

    name: str  # "loop@0x1b0", "outside loops", "routine@0x..."
    kind: str  # "loop", "outside loops", "routine"
    ops: frozenset[int]
    first_addr: int
    last_addr: int
    depth: int = 0  # loop nesting depth (1: outermost loop)
    lines: tuple[int, ...] = ()
    source: str = ""  # the text of the region's first source line

    def label(self) -> str:
        """`loop 0x01b0-0x0410 (depth 2), lines 11-19: for (int k = 0; k < m; ++k) {`"""
        what = {"loop": "loop", "routine": "routine"}.get(self.kind, "code outside loops")
        text = f"{what} 0x{self.first_addr:04x}-0x{self.last_addr:04x}"
        if self.kind == "loop":
            text += f" (depth {self.depth})"
        if self.lines:
            lo, hi = min(self.lines), max(self.lines)
            text += f", line {lo}" if lo == hi else f", lines {lo}-{hi}"
            if self.source:
                text += f": {self.source}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "addresses": [self.first_addr, self.last_addr],
            "depth": self.depth,
            "instructions": len(self.ops),
            "lines": [min(self.lines), max(self.lines)] if self.lines else None,
            "source": self.source or None,
        }


@dataclass
class LineMap:
    """SASS address -> source line of one kernel, or why there is none (`status`)."""

    lines: dict[int, int] = field(default_factory=dict)
    status: str = "ok"


def parse_line_info(text: str, kernel: str) -> dict[int, tuple[str, int]]:
    """{address: (opcode, source line)} of `kernel`'s section in `nvdisasm -g` output (an
    instruction takes the line of the last `//## File ..., line N` comment before it)."""
    out: dict[int, tuple[str, int]] = {}
    inside = False
    line = 0
    for raw in text.splitlines():
        sec = _SECTION.match(raw)
        if sec:
            inside = sec.group(1) == kernel
            line = 0
            continue
        if not inside:
            continue
        m = _LINE.search(raw)
        if m:
            line = int(m.group(2))
            continue
        m = _INSTR.search(raw)
        if m:
            out[int(m.group(1), 16)] = (m.group(2), line)
    return out


def _compile_with_lines(spec: Any, isa: KernelISA) -> LineMap:
    from klaraptor.isa.compile import compile_source
    from klaraptor.isa.tools import find_tool

    nvdisasm = find_tool("nvdisasm")
    res = compile_source(
        spec.source, (*spec.options, "-lineinfo"), isa.arch, name=f"{spec.kernel}.cu", ptx=False
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(res.cubin)
        proc = subprocess.run(
            [str(nvdisasm), "-g", "-c", str(path)], capture_output=True, text=True, timeout=120
        )
    if proc.returncode != 0:
        return LineMap(status=f"nvdisasm -g failed: {proc.stderr.strip()[:300]}")
    got = parse_line_info(proc.stdout, spec.kernel)
    want = {ins.addr: ins.opcode for ins in isa.instructions}
    differ = [a for a, op in want.items() if got.get(a, ("", 0))[0] != op]
    if differ or not got:
        return LineMap(
            status=f"the SASS compiled with -lineinfo differs from the recorded SASS at "
            f"{len(differ)} of {len(want)} addresses (NVRTC {res.nvrtc_version}); regions are "
            "named by address"
        )
    return LineMap({a: ln for a, (_, ln) in got.items() if ln > 0})


def line_map(spec: Any, isa: KernelISA) -> LineMap:
    """The address -> source line map of `spec`'s recorded SASS (module docstring), cached; a
    LineMap with an explanatory status when it cannot be made (tools missing, SASS differs)."""
    from klaraptor.models.saake.isa_source import cache_dir

    path = cache_dir() / f"{spec.fingerprint()}-{isa.arch}-lines.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return LineMap({int(a): int(v) for a, v in raw["lines"].items()}, raw["status"])
        except (OSError, ValueError, KeyError):
            pass  # re-made below
    try:
        lm = _compile_with_lines(spec, isa)
    except KlaraptorError as exc:  # ToolMissingError, CompileError: no lines, say why
        return LineMap(status=f"no line information: {exc}")
    except (OSError, subprocess.SubprocessError) as exc:
        return LineMap(status=f"no line information: {exc}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"lines": lm.lines, "status": lm.status}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # the cache is an optimisation
    return lm


def code_regions(
    isa: KernelISA,
    classes: Sequence[Any],
    lines: Mapping[int, int] | None = None,
    source: str = "",
) -> list[Region]:
    """The regions of a kernel (module docstring) from its count classes, in address order."""
    cfg = isa.sass_cfg
    assert cfg is not None
    text = source.splitlines()
    depth_of: dict[str, int] = {}
    by_name = {c.name: c for c in classes}

    def depth(c: Any) -> int:
        if c.name not in depth_of:
            parent = by_name.get(c.parent) if c.parent else None
            depth_of[c.name] = 1 + depth(parent) if parent is not None and parent.kind == "loop" else 1  # fmt: skip
        return depth_of[c.name]

    groups: dict[str, tuple[str, set[int], int]] = {}
    for c in classes:
        idx = {i for b in c.blocks for i in range(cfg.blocks[b].start, cfg.blocks[b].end)}
        idx = {i for i in idx if isa.instructions[i].opcode != "NOP"}
        if not idx:
            continue
        if c.kind == "loop":
            groups[c.name] = ("loop", idx, depth(c))
        elif c.kind == "routine":
            groups[c.name] = ("routine", idx, 0)
        else:
            kind, have, _ = groups.get("outside loops", ("outside loops", set(), 0))
            groups["outside loops"] = (kind, have | idx, 0)
    out = []
    for name, (kind, idx, d) in groups.items():
        addrs = [isa.instructions[i].addr for i in idx]
        ls = tuple(sorted({lines[a] for a in addrs if lines and a in lines}))
        src = ""
        if kind != "outside loops" and ls and 0 < ls[0] <= len(text):
            src = " ".join(text[ls[0] - 1].split())[:80]
        out.append(Region(name, kind, frozenset(idx), min(addrs), max(addrs), d, ls, src))
    return sorted(out, key=lambda r: r.first_addr)


__all__ = ["LineMap", "Region", "code_regions", "line_map", "parse_line_info"]
