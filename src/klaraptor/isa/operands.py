"""Splitting an instruction's operand text, shared by the PTX and SASS parsers."""

from __future__ import annotations


def split_operands(rest: str, opening: str, closing: str) -> list[str]:
    """The comma-separated operands in `rest`, stripped; a comma inside brackets (any of the
    `opening`/`closing` characters: an address `[R1+0x10]`, a vector `{%r1, %r2}`) does not
    split. PTX and SASS bracket different things, so each parser names its own brackets."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in rest:
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out
