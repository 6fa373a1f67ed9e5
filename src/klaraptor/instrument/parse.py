"""Finding kernel launches in CUDA host code with libclang.

Why libclang (the `libclang` wheel, which ships libclang.so) rather than tree-sitter's CUDA
grammar: rewriting a launch safely needs what only a compiler front end knows. Clang parses CUDA
itself (`-x cuda`), so `kernel<<<grid, block, smem, stream>>>(args)` is a CUDAKernelCallExpr with
its callee resolved to a declaration: we can tell a launch of the annotated kernel from one of
another function of that name, a template kernel's instance from a plain kernel, a launch written
in the file from one produced by a macro expansion, an argument the program wrote from a default
one, and host code from device code (dynamic parallelism). A grammar sees tokens only; it would
have to guess all of these, which is what regular expressions over C++ do badly.

No CUDA toolkit is needed: clang parses in CUDA host mode with `-nocudainc -nocudalib` and
`include/`, klaraptor's stand-in for the CUDA headers (and for the compiler's builtin headers,
which the wheel lacks). What the stand-in does not declare costs a diagnostic, never a silent
miss: every `K<<<` of an annotated kernel K in the file's tokens is accounted for, either as a
launch that can be rewritten or with a reason it is left alone.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaraptor.core.errors import InstrumentError, MissingDependencyError

if TYPE_CHECKING:
    from clang import cindex

INCLUDE_DIR = Path(__file__).with_name("include")
STUB_HEADER = INCLUDE_DIR / "klaraptor_cuda_stub.h"
# The function clang's Sema calls for `<<<...>>>` (CUDA >= 9.2, and before).
_CONFIG_FUNCS = frozenset({"__cudaPushCallConfiguration", "cudaConfigureCall"})


def clang_index() -> cindex.Index:
    """A libclang index; MissingDependencyError naming the extra when libclang is absent."""
    try:
        from clang import cindex
    except ImportError:
        raise MissingDependencyError(
            "klaraptor instrument parses host code with libclang: pip install 'klaraptor[instrument]'"
        ) from None
    try:
        return cindex.Index.create()
    except Exception as exc:  # noqa: BLE001 - libclang.so missing or unloadable
        raise MissingDependencyError(
            f"libclang could not be loaded ({exc}); pip install 'klaraptor[instrument]'"
        ) from None


@dataclass(frozen=True)
class Span:
    """A byte range [start, end) of the source file."""

    start: int
    end: int


@dataclass(frozen=True)
class KernelDecl:
    """A `__global__` function declared in the translation unit (any file)."""

    name: str
    params: tuple[str, ...]  # parameter names ('' for an unnamed one)
    signature: str  # the function type, as clang spells it
    template: bool
    file: str
    line: int


@dataclass(frozen=True)
class Launch:
    """One `callee<<<config>>>(args)` of the main file, with the byte spans a rewrite needs.

    `problem` says why it cannot be rewritten safely (None when it can)."""

    kernel: str
    line: int
    column: int
    span: Span  # the whole launch, callee to ')'
    callee: Span  # the callee as written (`k`, `ns::k`)
    open_config: Span  # '<<<'
    first_config: Span  # the first token after '<<<'
    last_config: Span  # the last token before '>>>'
    close_config: Span  # '>>>'
    open_args: Span  # '('
    n_config: int  # the config entries written: 2, 3 or 4
    n_args: int  # the arguments written
    problem: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    """A diagnostic of the parser (warnings and above)."""

    file: str
    line: int
    severity: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"


@dataclass
class ParsedSource:
    """What instrumentation needs from one parse of a `.cu` file."""

    path: Path
    data: bytes
    launches: list[Launch] = field(default_factory=list)
    kernels: dict[str, list[KernelDecl]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # (line, offset of '<<<', name) of every `name <<<` in the file's tokens, launches or not.
    chevrons: list[tuple[int, int, str]] = field(default_factory=list)
    # The files the main file includes directly (resolved paths).
    includes: list[str] = field(default_factory=list)

    def line_of(self, offset: int) -> int:
        return self.data.count(b"\n", 0, offset) + 1


def clang_args(
    include_dirs: Sequence[str | Path] = (),
    defines: Sequence[str] = (),
    extra: Sequence[str] = (),
    std: str = "c++17",
) -> list[str]:
    """The command line libclang parses a `.cu` file with (CUDA host mode, no toolkit)."""
    args = [
        "-x",
        "cuda",
        "--cuda-host-only",
        "-nocudainc",
        "-nocudalib",
        # Never the machine's toolkit: parsing is the same with or without one.
        "--cuda-path=/nonexistent/klaraptor-no-cuda",
        "-Wno-unknown-cuda-version",
        "-Wno-unknown-pragmas",
        # Clang stops after 20 errors by default: the rest of the file would go unread.
        "-ferror-limit=0",
        f"-std={std}",
        "-isystem",
        str(INCLUDE_DIR),
        "-include",
        str(STUB_HEADER),
    ]
    args += [f"-I{d}" for d in include_dirs]
    args += [f"-D{d}" for d in defines]
    args += list(extra)
    return args


def read_source(path: Path) -> bytes:
    """The bytes of a source file that is readable UTF-8 text; an InstrumentError otherwise."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InstrumentError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    if b"\0" in data:
        raise InstrumentError(f"{path}: not a text file (it contains NUL bytes)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InstrumentError(f"{path}: not UTF-8 text ({exc})") from None
    return data


def parse_source(
    path: str | Path,
    *,
    include_dirs: Sequence[str | Path] = (),
    defines: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> ParsedSource:
    """Parse `path` (a CUDA file) and collect its kernels, launches and chevron tokens."""
    from clang import cindex

    path = Path(path)
    data = read_source(path)
    index = clang_index()
    args = clang_args(include_dirs, defines, extra_args)
    tu = None
    pch = _stub_pch(index, args)
    if pch is not None:
        try:
            tu = index.parse(str(path), args=_with_pch(args, pch))
        except cindex.TranslationUnitLoadError:
            tu = None
        if tu is not None and any("precompiled" in d.spelling.lower() for d in tu.diagnostics):
            tu = None  # a PCH clang does not accept: parse without it
    if tu is None:
        try:
            tu = index.parse(str(path), args=args)
        except cindex.TranslationUnitLoadError as exc:
            raise InstrumentError(f"{path}: libclang could not parse the file ({exc})") from None
    out = ParsedSource(path=path, data=data)
    main = str(path)
    for d in tu.diagnostics:
        if d.severity >= cindex.Diagnostic.Error:  # warnings are the program's business
            loc = d.location
            out.diagnostics.append(
                Diagnostic(
                    str(loc.file) if loc.file else main,
                    loc.line,
                    "error" if d.severity >= cindex.Diagnostic.Error else "warning",
                    d.spelling,
                )
            )
    _collect_kernels(tu.cursor, out.kernels, cindex)
    _collect_launches(tu, tu.cursor, main, data, out, cindex, device=False)
    _collect_chevrons(tu, main, data, out, cindex)
    out.includes = [str(inc.include) for inc in tu.get_includes() if inc.depth == 1]
    return out


_PCH: dict[tuple[str, ...], Path | None] = {}
_PCH_DIR: list[Path] = []


def _with_pch(args: list[str], pch: Path) -> list[str]:
    """`args` with the stand-in header replaced by its precompiled form."""
    i = args.index("-include")
    return [*args[:i], "-include-pch", str(pch), *args[i + 2 :]]


def _stub_pch(index: Any, args: list[str]) -> Path | None:
    """The stand-in header precompiled for these arguments (once per process): it brings the C++
    math library, most of a parse's time. None where clang cannot make one."""
    from clang import cindex

    key = tuple(args)
    if key not in _PCH:
        _PCH[key] = None
        if not _PCH_DIR:
            _PCH_DIR.append(Path(tempfile.mkdtemp(prefix="klaraptor-pch-")))
            atexit.register(shutil.rmtree, _PCH_DIR[0], True)
        i = args.index("-include")
        header_args = [*args[:i], *args[i + 2 :]]
        try:
            tu = index.parse(
                str(STUB_HEADER), args=header_args, options=cindex.TranslationUnit.PARSE_INCOMPLETE
            )
            if not any(d.severity >= cindex.Diagnostic.Error for d in tu.diagnostics):
                path = _PCH_DIR[0] / f"stub{len(_PCH)}.pch"
                tu.save(str(path))
                _PCH[key] = path
        except (cindex.TranslationUnitLoadError, cindex.TranslationUnitSaveError):
            pass
    return _PCH[key]


def _is_kernel(cursor: Any, cindex: Any) -> bool:
    return any(c.kind == cindex.CursorKind.CUDAGLOBAL_ATTR for c in cursor.get_children())


def _collect_kernels(cursor: Any, out: dict[str, list[KernelDecl]], cindex: Any) -> None:
    K = cindex.CursorKind
    for c in cursor.get_children():
        if c.location.is_in_system_header:
            continue  # the C and C++ libraries declare no kernel (and thousands of functions)
        if c.kind in (K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL):
            _collect_kernels(c, out, cindex)
        elif c.kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE) and _is_kernel(c, cindex):
            params = tuple(p.spelling for p in c.get_children() if p.kind == K.PARM_DECL)
            loc = c.location
            out.setdefault(c.spelling, []).append(
                KernelDecl(
                    name=c.spelling,
                    params=params,
                    signature=c.type.spelling,
                    template=c.kind == K.FUNCTION_TEMPLATE,
                    file=str(loc.file) if loc.file else "",
                    line=loc.line,
                )
            )


def _in_main(cursor: Any, main: str) -> bool:
    f = cursor.location.file
    return f is not None and str(f) == main


def _collect_launches(
    tu: Any, cursor: Any, main: str, data: bytes, out: ParsedSource, cindex: Any, device: bool
) -> None:
    K = cindex.CursorKind
    for c in cursor.get_children():
        if cursor.kind == K.TRANSLATION_UNIT and not _in_main(c, main):
            continue  # headers: their launches are not ours to rewrite
        inner_device = device
        if c.kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.CXX_METHOD):
            attrs = {a.kind for a in c.get_children()}
            inner_device = (K.CUDAGLOBAL_ATTR in attrs or K.CUDADEVICE_ATTR in attrs) and (
                K.CUDAHOST_ATTR not in attrs
            )
        if c.kind == K.CALL_EXPR:
            launch = _launch(tu, c, main, data, out, cindex, device)
            if launch is not None:
                out.launches.append(launch)
        _collect_launches(tu, c, main, data, out, cindex, inner_device)


def _launch(
    tu: Any, call: Any, main: str, data: bytes, out: ParsedSource, cindex: Any, device: bool
) -> Launch | None:
    """The launch of a CUDAKernelCallExpr (libclang shows it as a CALL_EXPR whose second child
    is the call of the configuration function), or None for any other call."""
    K = cindex.CursorKind
    kids = list(call.get_children())
    if len(kids) < 2 or kids[1].kind != K.CALL_EXPR or kids[1].spelling not in _CONFIG_FUNCS:
        return None
    callee_ref = _decl_ref(kids[0], cindex)
    ref = callee_ref.referenced if callee_ref is not None else None
    name = ref.spelling if ref is not None else call.spelling
    start = call.extent.start
    if start.file is None or str(start.file) != main:
        return None
    line, column = start.line, start.column
    span = Span(start.offset, call.extent.end.offset)
    problem: str | None = None
    empty = Span(span.start, span.start)
    tokens = [t for t in call.get_tokens()]
    toks = [(t.spelling, t.extent.start.offset, t.extent.end.offset) for t in tokens]
    try:
        lt = next(i for i, t in enumerate(toks) if t[0] == "<<<")
    except StopIteration:
        lt = -1
    callee_words = [t[0] for t in toks[:lt]] if lt > 0 else []
    if (
        lt <= 0
        # A launch from a macro: its tokens are the macro's, not the launch's own text.
        or toks[0][1] != span.start
        or toks[-1][2] != span.end
        or not callee_words
        or callee_words[-1] != name
        or any(w not in ("::",) and not w.isidentifier() for w in callee_words)
        or data[toks[0][1] : toks[lt - 1][2]].decode(errors="replace").replace(" ", "")
        != "".join(callee_words)
    ):
        return Launch(
            name, line, column, span, empty, empty, empty, empty, empty, empty, 0, 0,
            "written by a macro expansion (the launch's text is not in the file)",
        )  # fmt: skip
    depth, gt = 0, -1
    for i in range(lt + 1, len(toks)):
        s = toks[i][0]
        if s in ("(", "[", "{"):
            depth += 1
        elif s in (")", "]", "}"):
            depth -= 1
        elif s == ">>>" and depth == 0:
            gt = i
            break
    if gt < lt + 2 or gt + 1 >= len(toks) or toks[gt + 1][0] != "(" or toks[-1][0] != ")":
        return Launch(
            name, line, column, span, empty, empty, empty, empty, empty, empty, 0, 0,
            "cannot find '>>>(' ... ')' in the launch's tokens",
        )  # fmt: skip
    callee = Span(toks[0][1], toks[lt - 1][2])
    open_cfg = Span(toks[lt][1], toks[lt][2])
    first_cfg = Span(toks[lt + 1][1], toks[lt + 1][2])
    last_cfg = Span(toks[gt - 1][1], toks[gt - 1][2])
    close_cfg = Span(toks[gt][1], toks[gt][2])
    open_args = Span(toks[gt + 1][1], toks[gt + 1][2])
    close_args = toks[-1][1]

    def written(c: Any, lo: int, hi: int) -> bool:
        s = c.extent.start
        return s.file is not None and str(s.file) == main and lo <= s.offset < hi

    n_config = sum(written(c, open_cfg.end, close_cfg.start) for c in kids[1].get_children())
    n_args = sum(written(c, open_args.end, close_args) for c in kids[2:])
    all_args = len(kids) - 2
    if ref is None or ref.kind not in (K.FUNCTION_DECL,):
        problem = "the callee is not a kernel function the parser could resolve"
    elif cindex.conf.lib.clang_getSpecializedCursorTemplate(ref) is not None:
        problem = f"{name} is a template kernel: which instance a build describes cannot be told"
    elif device:
        problem = "a launch from device code (dynamic parallelism) runs no host helper"
    elif not 2 <= n_config <= 4:
        problem = f"cannot read its launch configuration ({n_config} entries found)"
    elif n_args != all_args:
        problem = "it relies on default arguments, which the tuned launch cannot pass on"
    return Launch(
        name,
        line,
        column,
        span,
        callee,
        open_cfg,
        first_cfg,
        last_cfg,
        close_cfg,
        open_args,
        n_config,
        n_args,
        problem,
    )


def _decl_ref(cursor: Any, cindex: Any) -> Any | None:
    """The DECL_REF_EXPR under an expression's implicit casts and parentheses."""
    K = cindex.CursorKind
    c = cursor
    while c is not None:
        if c.kind == K.DECL_REF_EXPR:
            return c
        kids = list(c.get_children())
        if c.kind not in (K.UNEXPOSED_EXPR, K.PAREN_EXPR) or len(kids) != 1:
            return None
        c = kids[0]
    return None


def _collect_chevrons(tu: Any, main: str, data: bytes, out: ParsedSource, cindex: Any) -> None:
    """Every `name <<<` of the file's raw tokens (including macro bodies and #if'd-out code)."""
    f = tu.get_file(main)
    extent = cindex.SourceRange.from_locations(
        cindex.SourceLocation.from_offset(tu, f, 0),
        cindex.SourceLocation.from_offset(tu, f, len(data)),
    )
    prev = None
    for t in tu.get_tokens(extent=extent):
        if t.spelling == "<<<" and prev is not None and prev.kind == cindex.TokenKind.IDENTIFIER:
            out.chevrons.append((prev.extent.start.line, t.extent.start.offset, prev.spelling))
        prev = t
