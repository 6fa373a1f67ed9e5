"""What klaraptor reads from CUDA C++ source text without compiling it: a `__global__`
function's presence and its parameter list (to check a spec's argument indices)."""

from __future__ import annotations

import re

from klaraptor.spec.csource import blank_comments, split_top_level


def strip_comments(source: str) -> str:
    """`source` with every C/C++ comment blanked (string and character literals kept, offsets
    unchanged: `klaraptor.spec.csource`)."""
    return blank_comments(source)


# The C integer types a data parameter read from a kernel argument may have, and their maxima.
_C_INT_MAX = {
    "char": 2**7 - 1,
    "signed char": 2**7 - 1,
    "int8_t": 2**7 - 1,
    "unsigned char": 2**8 - 1,
    "uint8_t": 2**8 - 1,
    "short": 2**15 - 1,
    "short int": 2**15 - 1,
    "signed short": 2**15 - 1,
    "int16_t": 2**15 - 1,
    "unsigned short": 2**16 - 1,
    "unsigned short int": 2**16 - 1,
    "uint16_t": 2**16 - 1,
    "int": 2**31 - 1,
    "signed": 2**31 - 1,
    "signed int": 2**31 - 1,
    "int32_t": 2**31 - 1,
    "unsigned": 2**32 - 1,
    "unsigned int": 2**32 - 1,
    "uint32_t": 2**32 - 1,
    "long": 2**63 - 1,
    "long int": 2**63 - 1,
    "long long": 2**63 - 1,
    "long long int": 2**63 - 1,
    "int64_t": 2**63 - 1,
    "ptrdiff_t": 2**63 - 1,
    "unsigned long": 2**64 - 1,
    "unsigned long long": 2**64 - 1,
    "uint64_t": 2**64 - 1,
    "size_t": 2**64 - 1,
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|register)\b")


def c_int_max(declaration: str) -> tuple[str, int] | None:
    """(type, largest value) of a scalar integer parameter declaration such as `const int n`,
    or None when it is not one (a pointer, a float, a template or typedef klaraptor cannot
    tell)."""
    if any(ch in declaration for ch in "*&[<("):
        return None
    words = _QUALIFIERS.sub(" ", declaration).split()
    if len(words) < 2:
        return None
    ctype = " ".join(words[:-1]).removeprefix("std::")
    most = _C_INT_MAX.get(ctype)
    return None if most is None else (ctype, most)


def kernel_parameters(source: str, kernel: str) -> list[str] | None:
    """The parameter declarations of the `__global__` function `kernel` in `source`, or None
    when they cannot be told (no such function, or overloads that disagree)."""
    text = strip_comments(source)
    found: list[list[str]] = []
    for m in re.finditer(rf"\b{re.escape(kernel)}\s*\(", text):
        start = max(text.rfind(ch, 0, m.start()) for ch in ";{}#")
        if not re.search(r"\b__global__\b", text[start + 1 : m.start()]):
            continue
        split = split_top_level(text[m.end() :], "(<[", ")>]", until=")")
        if split is None:
            continue  # no closing parenthesis: not a declaration we can read
        params, last = split
        if last and last != "void":
            params.append(last)
        elif params:
            params.append(last)
        found.append(params)
    if not found or any(len(f) != len(found[0]) for f in found):
        return None
    return found[0]


def has_global_function(source: str, kernel: str) -> bool:
    """Whether `source` declares `kernel` as a __global__ function (comments ignored).

    For each `kernel(` the declaration it belongs to runs back to the previous `;`, `{`, `}` or
    preprocessor line; it must contain `__global__` (this allows `extern "C"`, templates,
    `__launch_bounds__(...)` and either order of `void __global__`).
    """
    text = strip_comments(source)
    for m in re.finditer(rf"\b{re.escape(kernel)}\s*\(", text):
        start = max(text.rfind(ch, 0, m.start()) for ch in ";{}#")
        if start >= 0 and text[start] == "#":
            start = text.find("\n", start)
            if start < 0 or start > m.start():
                continue
        segment = text[start + 1 : m.start()]
        if re.search(r"\b__global__\b", segment):
            return True
    return False


_LAST_IDENT = re.compile(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$")


def c_param_names(source: str, kernel: str) -> tuple[str, ...] | None:
    """The parameter names of the `__global__` function `kernel` in CUDA C++ `source`, or None
    when they cannot be read (no such function, unnamed parameters, macros)."""
    decls = kernel_parameters(source, kernel)
    if decls is None:
        return None
    names = []
    for decl in decls:
        d = decl.split("=")[0].strip()
        ident = _LAST_IDENT.search(d)
        if ident is None or len(d.split()) < 2 and "*" not in d:
            return None
        names.append(ident.group(1))
    return tuple(names)
