"""KLARAPTOR's annotation front-end: a `.cu` file with `#pragma kernel_info_*` lines → KernelSpecs.

The original tool (thesis §5.1) reads two pragmas per kernel K:

    #pragma kernel_info_size_param_idx_K = i;   // argument i of K carries the data size
    #pragma kernel_info_dim_K = d;              // K uses d-dimensional thread blocks

plus, per kernel, a small Python-syntax file with the block constraints and the grid formula.
Here that file is `<stem>.<K>.py` beside the `.cu` file. It is parsed, never executed; every
value must be a literal:

    grid = ("ceil(n / bx)", "ceil(n / by)", "1")   # over the size parameter's name and bx, by, bz
    constraints = ["bx <= n", "by <= n"]            # optional
    arrays = {"A": "n * n", "x": "n"}               # element count of each pointer argument
    scalars = {"alpha": 1.5}                        # values of the other scalar arguments
    dynamic_smem = "bx * 4"                         # optional, bytes
    sizes = [256, 512, 768, 1024]                   # optional training sizes
    default_block = [256, 1, 1]                     # optional
    defines = {"DATA_TYPE": "float", "NJ": "nj"}    # optional, macros of the training source
    assume = {"nj": "n"}                            # optional, see below

A `scalars` value may also be an expression string over the size parameter (`"k": "n // 2"`: a
representative value for each training size). `defines` are `#define`d before the kernel when
it is compiled for training (host headers are not followed): types such as `DATA_TYPE`, and the
program's compile-time sizes mapped to the kernel's own size arguments, so that a kernel written
for one fixed size (PolyBench/GPU's `A[i * NJ + j]`) is measured at every training size.
`assume` names the other integer arguments the model takes as functions of the size parameter
(`nj` equal to `n` in a square problem): training passes those values, and `klaraptor
instrument` checks them at run time, launching with the program's own configuration where they
do not hold.

Because collection needs inputs for any size, `arrays` and `scalars` extend the original format:
KLARAPTOR ran the user's whole program, we only need the kernel. NVRTC cannot compile host code,
so only `#define`s, `__device__` helpers and the annotated `__global__` kernels are kept, and the
kernels are wrapped in `extern "C"` so their names stay unmangled.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError, ProgramError, SpecError
from klaraptor.isa.operands import matching
from klaraptor.program import parse_expr
from klaraptor.spec import Data, DataParam, KernelSpec
from klaraptor.spec.csource import blank_comments
from klaraptor.spec.expressions import evaluate_exprs

# Any kernel_info pragma, whatever its value: the value is checked after, so a bad one is named
# as bad rather than passed over as missing.
_PRAGMA = re.compile(
    r"^[ \t]*#[ \t]*pragma[ \t]+kernel_info_(size_param_idx|dim)_(\w+)[ \t]*([^\n]*)$", re.M
)
_PRAGMA_VALUE = re.compile(r"=\s*([^;]*?)\s*;?\s*(?://.*)?")
_DEFINE = re.compile(r"^\s*#\s*define\s+.*$", re.M)
_FUNC_HEAD = re.compile(r"(?:extern\s+\"C\"\s+)?(__global__|__device__)[^;{()]*?\b(\w+)\s*\(", re.S)

_C_DTYPES: dict[str, type[np.generic]] = {
    "float": np.float32,
    "double": np.float64,
    "int": np.int32,
    "unsigned": np.uint32,
    "long": np.int64,
    "short": np.int16,
    "char": np.int8,
    "int32_t": np.int32,
    "int64_t": np.int64,
    "uint32_t": np.uint32,
    "size_t": np.uint64,
}
_CONFIG_KEYS = {
    "grid",
    "constraints",
    "arrays",
    "scalars",
    "dynamic_smem",
    "sizes",
    "default_block",
    "defines",
    "assume",
}
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a kernel's signature."""

    name: str
    ctype: str
    pointer: bool

    @property
    def dtype(self) -> type[np.generic]:
        base = self.ctype.split()[-1]
        if base not in _C_DTYPES:
            raise SpecError(f"parameter {self.name!r}: unsupported type {self.ctype!r}")
        return _C_DTYPES[base]


@dataclass(frozen=True)
class AnnotatedArgs:
    """Builds launch arguments for an annotated kernel from its config file.

    A module-level class (not a closure) so specs built from `.cu` files can be pickled into the
    collection worker.
    """

    kernel: str
    params: tuple[KernelParam, ...]
    size_param: str
    arrays: tuple[tuple[str, str], ...]
    # A number, or an expression string over the size parameter (evaluated for each D).
    scalars: tuple[tuple[str, float | str], ...]

    def __call__(
        self, D: Data, rng: np.random.Generator, *, device: bool = True
    ) -> tuple[Any, ...]:
        arrays = dict(self.arrays)
        env = {k: float(v) for k, v in D.items()}
        counts = evaluate_exprs(
            {name: parse_expr(text, tuple(D)) for name, text in arrays.items()}, env
        )
        scalars = {k: v for k, v in self.scalars if not isinstance(v, str)}
        exprs = {k: parse_expr(v, tuple(D)) for k, v in self.scalars if isinstance(v, str)}
        if exprs:
            scalars.update({k: float(v) for k, v in evaluate_exprs(exprs, env).items()})
        out: list[Any] = []
        for p in self.params:
            if p.pointer:
                n = int(counts[p.name])
                if np.issubdtype(p.dtype, np.floating):
                    host = (rng.random(n) + 0.5).astype(p.dtype)  # never zeros (hides bad writes)
                else:
                    host = rng.integers(1, 8, n).astype(p.dtype)
                if device:
                    import cupy

                    out.append(cupy.asarray(host))
                else:
                    out.append(host)
            elif p.name == self.size_param:
                out.append(p.dtype(D[self.size_param]))
            else:
                out.append(p.dtype(scalars[p.name]))
        return tuple(out)


def read_annotated(path: str | Path) -> list[KernelSpec]:
    """Every annotated kernel of a `.cu` file as a KernelSpec (one `<stem>.<K>.py` per kernel)."""
    kernels = annotated_kernels(path)
    for k in kernels:  # a missing pragma first: it is a problem of the file's annotations
        if k.problem is not None and (k.size_param_idx is None or k.dim is None):
            raise k.problem
    for k in kernels:
        if k.problem is not None:
            raise k.problem
    return [k.spec for k in kernels if k.spec is not None]


@dataclass(frozen=True)
class AnnotatedKernel:
    """One annotated kernel of a `.cu` file: its pragmas and its spec, or why it has none."""

    kernel: str
    line: int  # the line of its first kernel_info pragma
    size_param_idx: int | None
    dim: int | None
    spec: KernelSpec | None
    problem: SpecError | None


def annotated_kernels(path: str | Path) -> list[AnnotatedKernel]:
    """Every annotated kernel of a `.cu` file, by name: like `read_annotated`, but a problem of
    one kernel (a missing pragma or config, an index outside its parameters) stays with that
    kernel instead of being raised, so the others can still be used (`klaraptor instrument`).
    A file that cannot be read, has no annotations or gives a pragma two values raises
    SpecError."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: is a directory, not a .cu file")
    if not path.is_file():
        raise SpecError(f"{path}: no such .cu file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the file ({exc})") from None
    # Comments are no code: a pragma or a kernel inside /* */ or // is not one (offsets and
    # lines stay those of the file, so definitions are cut from the text as written).
    code = blank_comments(text)
    sizes, dims, lines = _pragmas(path, code)
    if not sizes and not dims:
        raise SpecError(
            f"{path}: no '#pragma kernel_info_size_param_idx_<K> = i;' annotations found"
        )
    functions = _functions(code)
    out = []
    for kernel in sorted(set(sizes) | set(dims)):
        size_idx, dim = sizes.get(kernel), dims.get(kernel)
        spec, problem = None, None
        try:
            if size_idx is None or dim is None:
                missing = "kernel_info_dim" if dim is None else "kernel_info_size_param_idx"
                raise SpecError(
                    f"{path}: kernel {kernel!r} is annotated but lacks "
                    f"'#pragma {missing}_{kernel} = ...;'"
                )
            if kernel not in functions or functions[kernel][0] != "__global__":
                raise SpecError(f"{path}: annotated kernel {kernel!r} has no __global__ definition")
            spec = _spec_for(path, text, code, functions, set(sizes), kernel, size_idx, dim)
        except SpecError as exc:
            problem = exc
        out.append(AnnotatedKernel(kernel, lines[kernel], size_idx, dim, spec, problem))
    return out


def _pragmas(path: Path, text: str) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """{kernel: argument index}, {kernel: block dimensionality} and {kernel: line of its first
    pragma} from the pragmas; a value that is not an integer, or a kernel given two different
    values, is a SpecError naming the lines."""
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    for m in _PRAGMA.finditer(text):
        kind, kernel, rest = m.group(1), m.group(2), m.group(3)
        line = text.count("\n", 0, m.start()) + 1
        shown = f"'#pragma kernel_info_{kind}_{kernel} {rest.strip()}'"
        value = _PRAGMA_VALUE.fullmatch(rest.strip())
        if value is None or not value.group(1):
            raise SpecError(f"{path}:{line}: {shown} has no value; write '= <integer>;'")
        try:
            number = int(value.group(1))
        except ValueError:
            raise SpecError(
                f"{path}:{line}: {shown}: the value {value.group(1)!r} is not an integer"
            ) from None
        key = (kind, kernel)
        if key in seen and seen[key][1] != number:
            first_line, first = seen[key]
            raise SpecError(
                f"{path}:{line}: conflicting pragmas for kernel {kernel!r}: line {first_line} "
                f"sets kernel_info_{kind} to {first}, line {line} to {number}; keep one"
            )
        seen.setdefault(key, (line, number))
    sizes = {k: v for (kind, k), (_, v) in seen.items() if kind == "size_param_idx"}
    dims = {k: v for (kind, k), (_, v) in seen.items() if kind == "dim"}
    lines: dict[str, int] = {}
    for (_, k), (line, _) in sorted(seen.items(), key=lambda item: item[1][0]):
        lines.setdefault(k, line)
    return sizes, dims, lines


def _spec_for(
    path: Path,
    text: str,
    code: str,
    functions: dict[str, tuple[str, str]],
    kernels: set[str],
    kernel: str,
    size_idx: int,
    dim: int,
) -> KernelSpec:
    where = f"{path}: kernel {kernel!r}"
    cfg_path = path.with_name(f"{path.stem}.{kernel}.py")
    cfg = _read_config(cfg_path)
    _check_config_types(cfg_path, cfg)
    defines = cfg.get("defines", {})
    params = _parse_params(functions[kernel][1], where, defines)
    if not 0 <= size_idx < len(params):
        raise SpecError(
            f"{where}: size parameter index {size_idx} is outside its {len(params)} parameters"
        )
    size = params[size_idx]
    if size.pointer or not np.issubdtype(size.dtype, np.integer):
        raise SpecError(
            f"{where}: parameter {size_idx} ({size.ctype} {size.name}) is not an integer size"
        )
    grid = cfg.get("grid")
    if not (
        isinstance(grid, (tuple, list)) and len(grid) == 3 and all(isinstance(g, str) for g in grid)
    ):
        raise SpecError(f"{cfg_path}: 'grid' must be three expression strings, got {grid!r}")
    arrays = cfg.get("arrays", {})
    scalars = cfg.get("scalars", {})
    assume = cfg.get("assume", {})
    by_name = {p.name: p for p in params}
    for name, value in [*scalars.items(), *assume.items()]:
        if isinstance(value, str):
            try:
                parse_expr(value, (size.name,))
            except KlaraptorError as exc:
                raise SpecError(f"{cfg_path}: the value of {name!r}: {exc}") from None
    for name in assume:
        p = by_name.get(name)
        if p is None or p.pointer or not np.issubdtype(p.dtype, np.integer) or p is size:
            raise SpecError(
                f"{cfg_path}: 'assume' names {name!r}, which is not an integer argument of "
                f"{kernel} other than its size parameter {size.name!r}"
            )
        if name in scalars:
            raise SpecError(f"{cfg_path}: {name!r} is in both 'scalars' and 'assume'; keep one")
    for p in params:
        if p.pointer and p.name not in arrays:
            raise SpecError(
                f"{cfg_path}: 'arrays' lacks the element count of pointer argument {p.name!r}"
            )
        if not p.pointer and p is not size and p.name not in scalars and p.name not in assume:
            raise SpecError(f"{cfg_path}: 'scalars' lacks a value for argument {p.name!r}")
    _check_config_names(cfg_path, cfg, params, size)
    device_code = _device_source(text, code, functions, kernels, defines)
    make_args = AnnotatedArgs(
        kernel=kernel,
        params=tuple(params),
        size_param=size.name,
        arrays=tuple((k, str(v)) for k, v in arrays.items()),
        scalars=tuple(
            (k, v if isinstance(v, str) else float(v))
            for k, v in [*scalars.items(), *assume.items()]
        ),
    )
    default_block = cfg.get("default_block")
    meta: dict[str, Any] = {"source_file": str(path), "config_file": str(cfg_path)}
    if "sizes" in cfg:
        meta["train_sizes"] = tuple(cfg["sizes"])
    if assume:
        meta["assume"] = dict(assume)
    return KernelSpec(
        name=f"{_store_name(path.stem)}.{kernel}",
        source=device_code,
        kernel=kernel,
        data=(DataParam(size.name, arg=size_idx),),
        dim=dim,
        grid=tuple(grid),  # type: ignore[arg-type]
        make_args=make_args,
        constraints=tuple(cfg.get("constraints", ())),
        dynamic_smem=cfg.get("dynamic_smem"),
        default_block=tuple(default_block) if default_block else None,  # type: ignore[arg-type]
        description=f"annotated kernel {kernel} from {path.name}",
        meta=meta,
    )


_CONFIG_TYPES: dict[str, tuple[str, Any]] = {
    "arrays": ("a dict of argument name -> element-count expression", dict),
    "scalars": ("a dict of argument name -> number or expression string", dict),
    "constraints": ("a list of expression strings", (list, tuple)),
    "sizes": ("a list of integer sizes", (list, tuple)),
    "default_block": ("three integers [bx, by, bz]", (list, tuple)),
    "dynamic_smem": ("an expression string", str),
    "defines": ("a dict of macro name -> replacement text", dict),
    "assume": ("a dict of argument name -> expression string", dict),
}


def _check_config_types(cfg_path: Path, cfg: dict[str, Any]) -> None:
    """Each config value has the shape the spec needs (a wrong one would fail deep inside)."""
    for key, (what, kind) in _CONFIG_TYPES.items():
        if key in cfg and cfg[key] is not None and not isinstance(cfg[key], kind):
            raise SpecError(f"{cfg_path}: {key!r} must be {what}, got {cfg[key]!r}")
    for name, count in cfg.get("arrays", {}).items():
        if not isinstance(count, (str, int)) or isinstance(count, bool):
            raise SpecError(
                f"{cfg_path}: 'arrays'[{name!r}] must be an element count (an expression "
                f"string or an integer), got {count!r}"
            )
    for name, value in cfg.get("scalars", {}).items():
        if not isinstance(value, (int, float, str)) or isinstance(value, bool):
            raise SpecError(
                f"{cfg_path}: 'scalars'[{name!r}] must be a number or an expression string, "
                f"got {value!r}"
            )
    for name, value in cfg.get("assume", {}).items():
        if not isinstance(value, str):
            raise SpecError(
                f"{cfg_path}: 'assume'[{name!r}] must be an expression string, got {value!r}"
            )
    for name, value in cfg.get("defines", {}).items():
        if not (isinstance(name, str) and _IDENT.fullmatch(name)) or not isinstance(value, str):
            raise SpecError(
                f"{cfg_path}: 'defines' maps macro names to replacement text (strings), got "
                f"{name!r}: {value!r}"
            )
        if "\n" in value:
            raise SpecError(f"{cfg_path}: 'defines'[{name!r}] must be one line, got {value!r}")
    for size in cfg.get("sizes") or ():
        if not isinstance(size, int) or isinstance(size, bool):
            raise SpecError(f"{cfg_path}: 'sizes' must be integers, got {size!r}")
    if "sizes" in cfg:
        sizes = list(cfg["sizes"] or ())
        if not sizes:
            raise SpecError(f"{cfg_path}: 'sizes' is empty; give training sizes or leave it out")
        twice = sorted({n for n in sizes if sizes.count(n) > 1})
        if twice:
            raise SpecError(f"{cfg_path}: 'sizes' gives {twice} more than once")


def _check_config_names(
    cfg_path: Path, cfg: dict[str, Any], params: list[KernelParam], size: KernelParam
) -> None:
    """`arrays` names pointer arguments, `scalars` the other non-size ones, and each element
    count is an expression over the size parameter only (a dry run would not catch a typo)."""
    pointers = [p.name for p in params if p.pointer]
    others = [p.name for p in params if not p.pointer and p is not size]
    for key, allowed, what in (
        ("arrays", pointers, "pointer arguments"),
        ("scalars", others, "scalar arguments other than the size"),
    ):
        for name in cfg.get(key) or {}:
            if name not in allowed:
                shown = ", ".join(allowed) or "none"
                raise SpecError(
                    f"{cfg_path}: {key!r} names {name!r}, which is not one of the kernel's "
                    f"{what} ({shown})"
                )
    for name, count in (cfg.get("arrays") or {}).items():
        try:
            parse_expr(str(count), (size.name,))
        except ProgramError as exc:  # it names the unknown name or the syntax error
            raise SpecError(
                f"{cfg_path}: 'arrays'[{name!r}] = {count!r} is not an element count over the "
                f"size parameter {size.name!r} ({exc})"
            ) from None


def _read_config(cfg_path: Path) -> dict[str, Any]:
    if cfg_path.is_dir():
        raise SpecError(
            f"{cfg_path}: is a directory; the per-kernel config must be a file (grid, "
            "constraints, arrays, scalars)"
        )
    if not cfg_path.is_file():
        raise SpecError(
            f"{cfg_path}: missing per-kernel config (grid, constraints, arrays, scalars)"
        )
    try:
        tree = ast.parse(cfg_path.read_text(), filename=str(cfg_path))
    except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: NUL bytes
        raise SpecError(f"{cfg_path}: cannot read the config ({e})") from None
    except SyntaxError as e:
        raise SpecError(f"{cfg_path}:{e.lineno}: not valid Python syntax: {e.msg}") from None
    cfg: dict[str, Any] = {}
    first_line: dict[str, int] = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            raise SpecError(
                f"{cfg_path}:{node.lineno}: only 'name = literal' assignments are allowed"
            )
        key = node.targets[0].id
        if key not in _CONFIG_KEYS:
            raise SpecError(
                f"{cfg_path}:{node.lineno}: unknown key {key!r} (allowed: {sorted(_CONFIG_KEYS)})"
            )
        if key in first_line:
            raise SpecError(
                f"{cfg_path}:{node.lineno}: {key!r} is assigned again (first at line "
                f"{first_line[key]}); keep one"
            )
        first_line[key] = node.lineno
        try:
            cfg[key] = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise SpecError(
                f"{cfg_path}:{node.lineno}: the value of {key!r} must be a literal"
            ) from None
    return cfg


def _functions(text: str) -> dict[str, tuple[str, str]]:
    """name -> (qualifier, parameter text) of every __global__/__device__ function definition."""
    out: dict[str, tuple[str, str]] = {}
    for m in _FUNC_HEAD.finditer(text):
        close = _matching(text, m.end() - 1, "(", ")")
        rest = text[close + 1 :].lstrip()
        if rest.startswith("{"):
            out[m.group(2)] = (m.group(1), text[m.end() : close])
    return out


def _device_source(
    text: str,
    code: str,
    functions: dict[str, tuple[str, str]],
    kernels: set[str],
    defines: dict[str, str] | None = None,
) -> str:
    """The config's `defines`, the file's other `#define`s, __device__ helpers and the annotated
    kernels, kernels in `extern "C"`: found in `code` (the text with its comments blanked), cut
    from `text` (comments kept)."""
    defines = defines or {}
    parts = [f"#define {name} {value}" for name, value in defines.items()]
    for m in _DEFINE.finditer(code):
        define = re.match(r"\s*#\s*define\s+(\w+)", m.group(0))
        if define is None or define.group(1) not in defines:
            parts.append(text[m.start() : m.end()])
    for m in _FUNC_HEAD.finditer(code):
        name, qual = m.group(2), m.group(1)
        if name not in functions or (qual == "__global__" and name not in kernels):
            continue
        close = _matching(code, m.end() - 1, "(", ")")
        body_open = code.index("{", close)
        body_close = _matching(code, body_open, "{", "}")
        definition = text[m.start() : body_close + 1]
        if qual == "__global__" and not definition.startswith("extern"):
            definition = 'extern "C" ' + definition
        parts.append(definition)
    return "\n\n".join(parts) + "\n"


def _matching(text: str, i: int, open_ch: str, close_ch: str) -> int:
    end = matching(text, i, open_ch, close_ch)
    if end is None:
        raise SpecError(f"unbalanced {open_ch!r} in the CUDA source")
    return end


def _parse_params(
    params_text: str, where: str, defines: dict[str, str] | None = None
) -> list[KernelParam]:
    """The parameters of a kernel's signature; a type spelled with a macro of the config's
    `defines` (`DATA_TYPE *A`) is read as its replacement."""
    defines = defines or {}
    params = []
    for raw in params_text.split(","):
        decl = re.sub(r"\b(const|__restrict__|__restrict|restrict|volatile)\b", " ", raw).strip()
        if not decl:
            continue
        m = re.fullmatch(
            r"([\w\s]+?)\s*(\*?)\s*(\w+)", decl.replace("* ", " *").replace(" *", " *")
        )
        if not m:
            raise SpecError(f"{where}: cannot read parameter {raw.strip()!r}")
        ctype, star, name = m.group(1).strip(), m.group(2), m.group(3)
        ctype = " ".join(defines.get(word, word) for word in ctype.split())
        if ctype.endswith("*"):
            ctype, star = ctype.rstrip("*").strip(), "*"
        param = KernelParam(name=name, ctype=ctype, pointer=bool(star))
        try:
            param.dtype  # noqa: B018 - a SpecError for unsupported types now, not at collection
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
        params.append(param)
    return params


def _store_name(stem: str) -> str:
    name = re.sub(r"\W", "_", stem)
    return name if name[:1].isalpha() else f"k_{name}"
