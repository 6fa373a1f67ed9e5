"""`instrument`: rewrite a CUDA program's launches of annotated kernels to use their helpers.

Each launch `K<<<grid, block[, smem[, stream]]>>>(args)` of an annotated kernel K with a build
becomes `klaraptor_<K>_launch(K, grid, block, smem, stream, args)` (smem and stream default to 0
as in CUDA). At run time the wrapper reads D from the launch's own arguments (the pragma's size
parameter), asks K's helper program for grid and block (cached per D), and launches K with them;
the program's own grid and block are kept where the helper has no answer. Nothing else of the
file changes: two lines are added before its first line, `#include "<out>.klaraptor.h"` and
`#line 1 "<source>"`, so that compiler messages name the source's own lines, and each rewritten
launch keeps the text of its configuration and arguments as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from klaraptor.core.errors import InstrumentError, KlaraptorError
from klaraptor.frontends.annotated import AnnotatedKernel, annotated_kernels
from klaraptor.helper.program import HelperProgram
from klaraptor.instrument.emit import (
    RUNTIME_HEADER,
    Assumption,
    KernelPlan,
    helper_header_name,
    program_header,
    runtime_header,
)
from klaraptor.instrument.parse import Launch, ParsedSource, parse_source, read_source

# A kernel's helper program by store name (`<stem>.<K>`), or a KlaraptorError saying why none.
HelperLookup = Callable[[str], HelperProgram]
_BOM = b"\xef\xbb\xbf"
MAX_DATA = 8  # KLARAPTOR_MAX_DATA of klaraptor_runtime.h


@dataclass(frozen=True)
class Notice:
    """A warning about one place of the source: what was left alone, and why."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.message}"
            if self.line
            else f"{self.path}: {self.message}"
        )


@dataclass(frozen=True)
class LaunchOutcome:
    """One launch of an annotated kernel: rewritten, or the reason it was left alone."""

    kernel: str
    line: int
    rewritten: bool
    reason: str | None = None


@dataclass
class Instrumented:
    """The instrumented program and the headers to write beside it (nothing written yet)."""

    source: Path
    output: Path
    text: bytes
    headers: dict[str, str]
    launches: list[LaunchOutcome] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)

    @property
    def rewritten(self) -> int:
        return sum(o.rewritten for o in self.launches)

    def write(self) -> list[Path]:
        """Write the program and its headers; the paths written."""
        folder = self.output.parent
        if not folder.is_dir():
            raise InstrumentError(
                f"cannot write {self.output}: the directory {folder} does not exist; create it first"
            )
        written = []
        try:
            self.output.write_bytes(self.text)
            written.append(self.output)
            for name, text in self.headers.items():
                (folder / name).write_text(text)
                written.append(folder / name)
        except OSError as exc:
            raise InstrumentError(
                f"cannot write {exc.filename or self.output}: {exc.strerror or exc}"
            ) from None
        return written


def default_output(source: Path) -> Path:
    return source.with_name(f"{source.stem}.klaraptor.cu")


def program_header_name(output: Path) -> str:
    stem = output.stem
    return f"{stem[: -len('.klaraptor')] if stem.endswith('.klaraptor') else stem}.klaraptor.h"


def instrument(
    source: str | Path,
    output: str | Path | None = None,
    *,
    helpers: HelperLookup | Mapping[str, HelperProgram],
    include_dirs: Sequence[str | Path] = (),
    defines: Sequence[str] = (),
    clang_args: Sequence[str] = (),
) -> Instrumented:
    """Instrument `source` (a `.cu` file annotated the KLARAPTOR way): the rewritten program and
    its headers, and a Notice for every launch, kernel or parse problem left alone.

    `helpers` gives each annotated kernel's helper program by store name (a mapping, or a
    function raising KlaraptorError when a kernel has no build); `include_dirs`, `defines` and
    `clang_args` are passed to the parser like a compiler's -I, -D and options.
    """
    source = Path(source)
    check_source(source)
    out = Path(output) if output is not None else default_output(source)
    if out.exists() and out.resolve() == source.resolve():
        raise InstrumentError(f"{out}: the output would overwrite the source; choose another -o")
    lookup = _as_lookup(helpers)
    notices: list[Notice] = []
    annotated = {k.kernel: k for k in annotated_kernels(source)}
    plans_by_kernel: dict[str, KernelPlan] = {}
    unusable: dict[str, str] = {}
    parsed = parse_source(source, include_dirs=include_dirs, defines=defines, extra_args=clang_args)
    for name, ak in annotated.items():
        why = _plan(source, ak, parsed, lookup, plans_by_kernel)
        if why is not None:
            unusable[name] = why
            notices.append(
                Notice(source, ak.line, f"kernel {name}: {why}; its launches are left alone")
            )

    edits: list[tuple[int, int, bytes]] = []
    outcomes: list[LaunchOutcome] = []
    seen_chevrons: set[int] = set()
    used: list[KernelPlan] = []
    for launch in parsed.launches:
        if launch.kernel not in annotated:
            continue
        if launch.open_config.end > launch.open_config.start:
            seen_chevrons.add(launch.open_config.start)
        reason = launch.problem or unusable.get(launch.kernel)
        if reason is None:
            plan = plans_by_kernel[launch.kernel]
            edits += _launch_edits(parsed.data, launch, plan)
            if plan not in used:
                used.append(plan)
            outcomes.append(LaunchOutcome(launch.kernel, launch.line, True))
        else:
            outcomes.append(LaunchOutcome(launch.kernel, launch.line, False, reason))
            if launch.problem is not None:
                notices.append(
                    Notice(source, launch.line, f"launch of {launch.kernel} left alone: {reason}")
                )
    for line, offset, name in parsed.chevrons:
        if name in annotated and offset not in seen_chevrons:
            outcomes.append(LaunchOutcome(name, line, False, "not read by the parser"))
            notices.append(
                Notice(
                    source,
                    line,
                    f"{name}<<<...>>> left alone: the parser read no launch here (a macro "
                    "definition, a block the preprocessor skips, or code it could not parse)",
                )
            )
    outcomes.sort(key=lambda o: o.line)
    errors = [d for d in parsed.diagnostics if d.severity == "error"]
    if errors:
        shown = "; ".join(str(d) for d in errors[:3])
        hint = (
            "pass the program's include directories with -I; "
            if any("file not found" in d.message for d in errors)
            else ""
        )
        notices.append(
            Notice(
                source,
                0,
                f"the parser reported {len(errors)} error(s) ({hint}klaraptor parses without the "
                f"CUDA headers; launches it could not read are reported above): {shown}",
            )
        )
    if out.parent.resolve() != source.parent.resolve() and _local_includes(parsed):
        notices.append(
            Notice(
                source,
                0,
                f"{out.name} is written to {out.parent}, but the program includes files beside "
                f"it ({', '.join(_local_includes(parsed))}): compile with -I {source.parent}",
            )
        )

    header = program_header_name(out)
    text = _apply(parsed.data, edits, header, _line_name(source, out))
    headers = {RUNTIME_HEADER: runtime_header()}
    for plan in used:
        headers[helper_header_name(plan.helper)] = plan.helper.to_c_header()
    headers[header] = program_header(out.name, used)
    return Instrumented(source, out, text, headers, outcomes, notices)


def check_source(source: Path) -> None:
    """A clear error for a source that is missing, not a file, unreadable or not text."""
    if not source.exists():
        raise InstrumentError(f"{source}: no such file")
    if not source.is_file():
        raise InstrumentError(f"{source}: not a regular file")
    read_source(source)


def _as_lookup(helpers: HelperLookup | Mapping[str, HelperProgram]) -> HelperLookup:
    if not isinstance(helpers, Mapping):
        return helpers
    table = dict(helpers)

    def lookup(name: str) -> HelperProgram:
        if name not in table:
            raise KlaraptorError(f"no build of {name}")
        return table[name]

    return lookup


def _plan(
    source: Path,
    ak: AnnotatedKernel,
    parsed: ParsedSource,
    lookup: HelperLookup,
    plans: dict[str, KernelPlan],
) -> str | None:
    """Plan the code of one annotated kernel; the reason it cannot be used, or None."""
    if ak.problem is not None or ak.spec is None:
        return str(ak.problem).removeprefix(f"{source}: ")
    spec = ak.spec
    decls = parsed.kernels.get(ak.kernel, [])
    if not decls:
        return "the parser found no __global__ function of that name"
    if any(d.template for d in decls):
        return "it is a template kernel: which instance a build describes cannot be told"
    if len({d.signature for d in decls}) > 1:
        return "it is overloaded: which overload a build describes cannot be told"
    params = decls[0].params
    if len(spec.data) > MAX_DATA:
        return f"it has {len(spec.data)} data parameters; the C cache holds at most {MAX_DATA}"
    data_args = []
    for p in spec.data:
        if p.arg is None or not 0 <= p.arg < len(params):
            return f"its size parameter {p.name!r} is not one of its {len(params)} arguments"
        data_args.append((p.name, p.arg))
    assumptions = []
    for name, expr in (spec.meta.get("assume") or {}).items():
        if name not in params:
            return f"the config assumes argument {name!r}, which it does not have"
        assumptions.append(Assumption(name, params.index(name), expr))
    try:
        helper = lookup(spec.name)
    except KlaraptorError as exc:
        return f"no build of {spec.name} to use ({exc})"
    if tuple(helper.data_names) != spec.data_names:
        return (
            f"its build takes D = {tuple(helper.data_names)}, the annotations "
            f"{spec.data_names}: build it again"
        )
    origin = f"model {helper.model_name}"
    device = helper.device_key
    if device:
        origin += f", built on {device}"
    plans[ak.kernel] = KernelPlan(
        kernel=ak.kernel,
        helper=helper,
        n_params=len(params),
        data_args=tuple(data_args),
        assumptions=tuple(assumptions),
        origin=origin,
    )
    return None


def _launch_edits(data: bytes, launch: Launch, plan: KernelPlan) -> list[tuple[int, int, bytes]]:
    """`K<<<cfg>>>(args)` -> `wrapper(K, cfg[, 0[, 0]], args)`: three edits, the callee, the
    configuration and the arguments kept as written."""
    defaults = {2: ", 0, 0", 3: ", 0", 4: ""}[launch.n_config]
    sep = ", " if launch.n_args else ""
    # Drop the spaces around '<<<' and before '>>>' along with them (comments are kept).
    gap1 = data[launch.callee.end : launch.open_config.start]
    open_start = launch.callee.end if not gap1.strip() else launch.open_config.start
    gap = data[launch.open_config.end : launch.first_config.start]
    open_end = launch.first_config.start if not gap.strip() else launch.open_config.end
    gap2 = data[launch.last_config.end : launch.close_config.start]
    close_start = launch.last_config.end if not gap2.strip() else launch.close_config.start
    return [
        (launch.callee.start, launch.callee.start, f"{plan.wrapper}(".encode()),
        (open_start, open_end, b", "),
        (close_start, launch.open_args.end, (defaults + sep).encode()),
    ]


def _line_name(source: Path, out: Path) -> str:
    """The source's name for `#line`: beside the output, its file name; else its full path."""
    if source.resolve().parent == out.resolve().parent:
        return source.name
    return str(source.resolve())


def _apply(data: bytes, edits: list[tuple[int, int, bytes]], header: str, name: str) -> bytes:
    out = bytearray()
    start = len(_BOM) if data.startswith(_BOM) else 0
    out += data[:start]
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    out += f'#include "{header}" /* klaraptor instrument */\n#line 1 "{quoted}"\n'.encode()
    pos = start
    for a, b, text in sorted(edits, key=lambda e: (e[0], e[1])):
        if a < pos:
            raise InstrumentError(f"internal: overlapping launch edits at byte {a}")
        out += data[pos:a] + text
        pos = b
    out += data[pos:]
    return bytes(out)


def _local_includes(parsed: ParsedSource) -> list[str]:
    """Quoted includes of the main file that resolve beside it."""
    folder = parsed.path.parent.resolve()
    return sorted({Path(p).name for p in parsed.includes if Path(p).resolve().parent == folder})
