"""Parse the functions of a PTX module into instruction records (for the PTX mix and loops)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from klaraptor.isa.errors import DisassemblyError
from klaraptor.isa.operands import matching, split_instruction

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_HEAD = re.compile(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)\s*\(")
_LABEL = re.compile(r"^([A-Za-z_$][\w$]*)\s*:\s*")
_GUARD = re.compile(r"^@(!?)(%?[\w$]+)\s+")
_DECL = re.compile(
    r"^\.(shared|local)\s+(?:\.align\s+\d+\s+)?\.(?:[bsuf](\d+))\s+([\w$]+)\s*\[(\d*)\]"
)
_MODULE_SHARED = re.compile(
    r"^\s*(\.extern\s+)?\.shared\s+(?:\.align\s+\d+\s+)?\.[bsuf](\d+)\s+([\w$]+)\s*\[(\d*)\]",
    re.MULTILINE,
)


@dataclass(frozen=True)
class PtxInstruction:
    """One PTX instruction of a function body."""

    text: str
    op: str  # e.g. "ld"
    mods: tuple[str, ...]  # e.g. ("global", "nc", "f32")
    pred: str | None
    pred_neg: bool
    operands: tuple[str, ...]
    labels: tuple[str, ...]  # labels that name this instruction
    target: str | None  # branch target label

    @property
    def guarded(self) -> bool:
        return self.pred is not None


@dataclass
class PtxFunction:
    """A .entry or .func of a PTX module."""

    name: str
    kind: str  # "entry" or "func"
    params: list[str] = field(default_factory=list)
    instructions: list[PtxInstruction] = field(default_factory=list)
    shared_bytes: int = 0  # declared in the body, plus module-level .shared it names
    local_bytes: int = 0  # .local declarations (the stack frame / local arrays)
    local_decls: int = 0
    dynamic_shared: list[str] = field(default_factory=list)  # extern .shared arrays it names
    calls: list[str] = field(default_factory=list)
    end_labels: tuple[str, ...] = ()  # labels after the last instruction

    def label_index(self) -> dict[str, int]:
        """Label → instruction index (labels at the end map to len(instructions))."""
        out = {lab: i for i, ins in enumerate(self.instructions) for lab in ins.labels}
        out.update({lab: len(self.instructions) for lab in self.end_labels})
        return out


def parse_ptx(text: str) -> dict[str, PtxFunction]:
    """Every function defined in a PTX module, by name."""
    src = _COMMENT.sub(" ", text)
    spans: list[tuple[re.Match[str], int, int, int]] = []
    for m in _HEAD.finditer(src):
        close = _matching(src, m.end() - 1, "(", ")")
        brace = src.find("{", close)
        semi = src.find(";", close)
        if brace < 0 or 0 <= semi < brace:
            continue  # a prototype, not a definition
        spans.append((m, close, brace, _matching(src, brace, "{", "}")))
    # Module-level .shared arrays: declared outside every function body.
    outside, pos = [], 0
    for _, _, brace, end in spans:
        outside.append(src[pos:brace])
        pos = end + 1
    outside.append(src[pos:])
    module_shared = {
        m.group(3): (bool(m.group(1)), int(m.group(2)) // 8 * int(m.group(4) or 0))
        for m in _MODULE_SHARED.finditer("".join(outside))
    }
    funcs: dict[str, PtxFunction] = {}
    for m, close, brace, end in spans:
        fn = PtxFunction(name=m.group(2), kind=m.group(1))
        fn.params = [p.split()[-1] for p in src[m.end() : close].split(",") if p.strip()]
        _parse_body(fn, src[brace + 1 : end])
        for name, (extern, nbytes) in module_shared.items():
            if re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", src[brace:end]):
                if extern:
                    fn.dynamic_shared.append(name)
                else:
                    fn.shared_bytes += nbytes
        funcs[fn.name] = fn
    return funcs


def _matching(src: str, start: int, open_: str, close: str) -> int:
    end = matching(src, start, open_, close)
    if end is None:
        raise DisassemblyError(f"unbalanced {open_!r} in the PTX at offset {start}")
    return end


def _parse_body(fn: PtxFunction, body: str) -> None:
    labels: list[str] = []
    # A brace alone on its line opens or closes a scope (call sequences): no instruction. Braces
    # inside an instruction are vector operands ({%f1, %f2, %f3, %f4}) and stay.
    lines = [";" if ln.strip() in ("{", "}") else ln for ln in body.splitlines()]
    for chunk in "\n".join(lines).split(";"):
        stmt = " ".join(chunk.split())
        while True:
            m = _LABEL.match(stmt)
            if m is None:
                break
            labels.append(m.group(1))
            stmt = stmt[m.end() :]
        if not stmt:
            continue
        if stmt.startswith("."):
            d = _DECL.match(stmt)
            if d:
                nbytes = int(d.group(2)) // 8 * int(d.group(4) or 0)
                if d.group(1) == "shared":
                    fn.shared_bytes += nbytes
                else:
                    fn.local_bytes += nbytes
                    fn.local_decls += 1
            continue
        ins = _instruction(stmt, tuple(labels))
        labels = []
        if ins.op == "call":
            callee = next((o for o in ins.operands if not o.startswith("(")), None)
            if callee:
                fn.calls.append(callee)
        fn.instructions.append(ins)
    fn.end_labels = tuple(labels)


def _instruction(stmt: str, labels: tuple[str, ...]) -> PtxInstruction:
    pred, neg, stmt, parts, operands = split_instruction(stmt, _GUARD, "([{", ")]}")
    target = None
    if parts[0] == "bra" and operands:
        target = operands[-1]
    return PtxInstruction(
        text=(f"@{'!' if neg else ''}{pred} " if pred else "") + stmt,
        op=parts[0],
        mods=tuple(parts[1:]),
        pred=pred,
        pred_neg=neg,
        operands=operands,
        labels=labels,
        target=target,
    )
