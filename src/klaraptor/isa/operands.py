"""Splitting instruction and source text, shared by the PTX and SASS parsers and the readers of
annotated CUDA sources."""

from __future__ import annotations

import re
from typing import NamedTuple

from klaraptor.spec.csource import split_top_level


class SplitInstruction(NamedTuple):
    """One instruction's text taken apart: its guard predicate (None without one) and whether it
    is negated, the text without the guard, the opcode and its modifiers (the head split at '.'),
    and the operands."""

    pred: str | None
    negated: bool
    text: str
    parts: list[str]
    operands: tuple[str, ...]


def split_instruction(
    stmt: str, guard: re.Pattern[str], opening: str, closing: str
) -> SplitInstruction:
    """`stmt` (`@!P0 OP.MOD a, [b]`) taken apart; `guard` matches the predicate prefix with the
    negation and the predicate as its two groups, `opening`/`closing` are the brackets of the
    operands (see `split_operands`)."""
    pred, neg = None, False
    g = guard.match(stmt)
    if g:
        neg, pred = g.group(1) == "!", g.group(2)
        stmt = stmt[g.end() :]
    head, _, rest = stmt.partition(" ")
    return SplitInstruction(
        pred, neg, stmt, head.split("."), tuple(split_operands(rest, opening, closing))
    )


def matching(text: str, start: int, opening: str, closing: str) -> int | None:
    """The index of the `closing` bracket that closes the `opening` one at `start`; None when it
    is never closed."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return None


def split_operands(rest: str, opening: str, closing: str) -> list[str]:
    """The comma-separated operands in `rest`, stripped; a comma inside brackets (any of the
    `opening`/`closing` characters: an address `[R1+0x10]`, a vector `{%r1, %r2}`) does not
    split. PTX and SASS bracket different things, so each parser names its own brackets."""
    split = split_top_level(rest, opening, closing)
    assert split is not None  # only a split that stops at `until` can find no end
    pieces, last = split
    return [*pieces, last] if last else pieces
