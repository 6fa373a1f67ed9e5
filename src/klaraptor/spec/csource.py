"""CUDA C++ source read as the compiler's first phase reads it: comments are not code.

`blank_comments` replaces every comment with spaces (newlines kept), so that offsets and line
numbers stay those of the original text and a pattern searched for afterwards (a pragma, a
function head) is never found inside a comment. It scans the text once as a lexer does: string
and character literals (with escapes), raw string literals `R"delim(...)delim"`, `//` comments
(a backslash before the newline continues them, as in C) and `/* */` comments, which do not nest.
"""

from __future__ import annotations

import re

_RAW_OPEN = re.compile(r'(?:u8|[uUL])?R"([^ ()\\\t\v\f\n]{0,16})\(')


def _blank(text: str) -> str:
    return "".join(ch if ch == "\n" else " " for ch in text)


def blank_comments(source: str) -> str:
    """`source` with each comment replaced by spaces (its newlines kept); literals untouched."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch == "/" and source.startswith("//", i):
            j = i + 2
            while j < n and not (source[j] == "\n" and source[j - 1] != "\\"):
                j += 1
            out.append(_blank(source[i:j]))
            i = j
        elif ch == "/" and source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2  # an unterminated comment runs to the end, as for cc
            out.append(_blank(source[i:j]))
            i = j
        elif ch in "uULR" and (m := _RAW_OPEN.match(source, i)) and not _ident_before(source, i):
            close = source.find(f'){m.group(1)}"', m.end())
            j = n if close < 0 else close + len(m.group(1)) + 2
            out.append(source[i:j])
            i = j
        elif ch == '"' or (ch == "'" and not _digit_separator(source, i)):
            j = i + 1
            while j < n and source[j] != ch and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(source[i:j])
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _ident_before(source: str, i: int) -> bool:
    """Whether `source[i]` continues an identifier (`fooR"x(` is no raw string)."""
    return i > 0 and (source[i - 1].isalnum() or source[i - 1] == "_")


def _digit_separator(source: str, i: int) -> bool:
    """Whether the `'` at `i` separates digits (`1'000'000`, C++14) rather than opening a
    character literal: the token it is in starts with a digit."""
    j = i
    while j > 0 and (source[j - 1].isalnum() or source[j - 1] in "_'"):
        j -= 1
    return j < i and source[j].isdigit()


__all__ = ["blank_comments"]


def split_top_level(
    text: str, opening: str, closing: str, *, until: str | None = None
) -> tuple[list[str], str] | None:
    """The pieces of `text` between commas outside brackets (any of the `opening` / `closing`
    characters), stripped: those before the last comma, then the last piece. With `until` (a
    closing character), the text ends at the first `until` outside brackets, and None means it
    never came."""
    pieces: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in opening:
            depth += 1
        elif ch in closing:
            if ch == until and depth == 0:
                return pieces, "".join(cur).strip()
            depth -= 1
        if ch == "," and depth == 0:
            pieces.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if until is not None:
        return None
    return pieces, "".join(cur).strip()
