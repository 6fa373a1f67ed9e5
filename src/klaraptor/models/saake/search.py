"""SAAKE's bottleneck-driven search over program parameters and block shape (SAAKE §5, Alg. 3),
on emulated times only: every configuration it looks at is a compiled variant emulated from its
SASS at the actual size D (`KernelEmulator.from_variant`), never run.

From the author's configuration (default variant, default block), the emulator names the
bottleneck (`sensitivity.analyse`); the neighbours (one program parameter one value up or down,
or one block dimension doubled or halved) are ordered by the move that relieves it:

- latency-bound: more resident warps per SM first (more concurrency hides the latency);
- throughput-bound: least emulated time spent on the named resource first (less demand on it).

The walk moves to the first neighbour, in that order, whose emulated time is lower, and stops
where none is. `search` returns the path (`SearchPath`), each step with the reason it was taken.
The compiled attributes of each variant (registers, static shared memory) are the compiler's
(`compiled_attributes`: cuobjdump's resource usage of the variant's cubin), unless given.

`JointSpace` emulates the joint space lazily: a variant's emulator (its trip counts, the costly
part: seconds per variant) is built once, after which each block costs milliseconds. So ranking
every configuration (`JointSpace.ranking`) costs about what the walk costs once the walk has
visited most variants. `most_promising(emulated, k)`: the k configurations of least emulated
time, what `klaraptor search --measure K` times on the GPU; `SearchPath.emulated` holds every
configuration the walk emulated. A variant whose trip counts need the kernel's data (no
counters here) cannot be emulated: it ranks last, with why (`JointSpace.failed`).

`budgeted_plan(ranking, budget, point_seconds)`: the budgeted search (`klaraptor search
--budget F`). Timing a configuration costs about a per-point overhead plus its kernel time times
the protocol's launches, so the configurations emulation ranks fastest are also the cheapest to
measure; the search measures the whole joint space in emulated order and stops when F times
brute force's estimated cost (every configuration priced by the same model, before measuring)
is spent. F is the user's setting, fixed in advance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import Block, DataSize, KernelAttributes, ParamValues

ATTRIBUTES_FROM_COMPILER = (
    "compiled attributes: registers and static shared memory as the compiler reports them "
    "(cuobjdump -res-usage of each variant's cubin; no GPU queried)"
)
MAX_STEPS = 64  # a walk strictly decreases the emulated time; this only bounds a pathology


class SearchError(KlaraptorError):
    """The search cannot run: a kernel without program parameters, or an author's configuration
    that cannot be emulated."""


@dataclass(frozen=True)
class SearchConfig:
    """One point of the joint space: a compiled variant and a block."""

    variant: ParamValues
    block: Block

    def text(self) -> str:
        vals = ", ".join(f"{k}={v}" for k, v in self.variant.items())
        return f"{vals}, block {self.block}"


@dataclass(frozen=True)
class SearchStep:
    """One configuration on the path: its emulated time, the bottleneck emulation names there,
    and why the walk moved on from it or stopped at it (`moved_to`: None where it stopped)."""

    config: SearchConfig
    ms: float
    bottleneck: str
    meaning: str  # what the bottleneck resource is, in one line
    why: str
    moved_to: SearchConfig | None
    neighbours_emulated: int


@dataclass(frozen=True)
class SearchPath:
    """The walk: the steps from the author's configuration to the chosen one."""

    kernel: str
    D: DataSize
    steps: tuple[SearchStep, ...]
    attributes_source: str
    configurations_emulated: int
    # every configuration the walk emulated, with its emulated ms (inf: cannot be emulated)
    emulated: tuple[tuple[SearchConfig, float], ...] = ()

    @property
    def chosen(self) -> SearchStep:
        return self.steps[-1]

    @property
    def speedup(self) -> float:
        """The author's emulated time over the chosen one's."""
        return self.steps[0].ms / self.chosen.ms


class VariantEmulator(Protocol):
    """What the walk reads of a variant's emulator (`KernelEmulator`)."""

    candidates: tuple[Block, ...]

    def cycles(self, D: Sequence[int], j: int) -> float: ...
    def shape(self, D: Sequence[int], j: int) -> Any: ...
    def utilisation(self, D: Sequence[int], j: int) -> dict[str, float]: ...


def neighbours(
    spec: Any, config: SearchConfig, blocks_of: Callable[[ParamValues], Collection[Block]]
) -> list[tuple[SearchConfig, str]]:
    """The moves of Alg. 3 from `config`, each with its description: one program parameter one
    value down or up (same block), or one block dimension halved or doubled (same variant);
    only configurations in the space (`blocks_of(variant)`: the variant's launchable blocks)."""
    out: list[tuple[SearchConfig, str]] = []
    values = dict(config.variant.items())
    for prm in spec.params:
        i = prm.values.index(values[prm.name])
        for nb in (i - 1, i + 1):
            if 0 <= nb < len(prm.values):
                pv = spec.param_values({**values, prm.name: prm.values[nb]})
                if config.block in blocks_of(pv):
                    move = f"{prm.name} {values[prm.name]} -> {prm.values[nb]}"
                    out.append((SearchConfig(pv, config.block), move))
    own = set(blocks_of(config.variant))
    for axis, name in enumerate("xyz"):
        for factor, verb in ((2, "doubled"), (0.5, "halved")):
            b = list(config.block)
            b[axis] = int(b[axis] * factor)
            block = (b[0], b[1], b[2])
            if b[axis] >= 1 and block != config.block and block in own:
                out.append((SearchConfig(config.variant, block), f"block {name} {verb}"))
    return out


def relief_key(
    mode: str, bottleneck: str, em: VariantEmulator, j: int, *, d: Sequence[int], cycles: float
) -> tuple[float, float]:
    """The sort key of a neighbour (smaller first): latency-bound, more resident warps per SM
    first; throughput-bound, least time on the bottleneck resource first; ties by emulated time."""
    if mode == "latency":
        w = em.shape(d, j)
        resident = min(w.active_blocks, max(w.blocks, 1)) * w.warps_per_block
        return (-float(resident), cycles)
    return (em.utilisation(d, j).get(bottleneck, 0.0) * cycles, cycles)


def compiled_attributes(spec: Any, variant: ParamValues, profile: Any) -> KernelAttributes:
    """A variant's attributes as the compiler states them (its SASS analysis, compiled with the
    CUDA toolkit when not cached): registers, static shared memory, local memory."""
    from klaraptor.models.saake.isa_source import kernel_isa
    from klaraptor.models.snowpack.features import attributes_from, from_isa_features

    isa, _ = kernel_isa(spec, variant=variant)
    return attributes_from(from_isa_features(isa.features, spec.name), profile)


class JointSpace:
    """The joint space of a kernel at one size D, emulated on demand (module docstring): each
    variant's launchable blocks (constraints, then the device limits of that compiled variant)
    and its emulator, each made once. `ms(config)` records what it emulated (`emulated`)."""

    def __init__(
        self,
        spec: Any,
        D: Any,
        profile: Any,
        attrs_of_variant: Callable[[ParamValues], KernelAttributes] | None = None,
        *,
        emulator_of: Callable[[ParamValues, Sequence[Block]], VariantEmulator] | None = None,
        attributes_source: str | None = None,
        blocks: Mapping[ParamValues, Sequence[Block]] | None = None,
    ) -> None:
        """`blocks`: each variant's blocks as the caller has them (a build's launchable
        candidates); default: the space's, filtered here (`blocks_of`)."""
        from klaraptor.space.configspace import ConfigSpace

        self.spec = spec
        self.size = spec.size(D)
        self.d = tuple(int(v) for v in self.size.values())
        self.profile = profile
        self.clock_khz = float(profile.sm_clock_mhz) * 1e3
        if attrs_of_variant is None:
            attrs_of_variant = lambda pv: compiled_attributes(spec, pv, profile)  # noqa: E731
            attributes_source = attributes_source or ATTRIBUTES_FROM_COMPILER
        self.attrs_of_variant = attrs_of_variant
        self.attributes_source = attributes_source or "compiled attributes: given by the caller"
        if emulator_of is None:
            size = self.size

            def emulator_of(pv: ParamValues, blocks: Sequence[Block]) -> VariantEmulator:
                from klaraptor.models.saake.emulator import KernelEmulator

                return KernelEmulator.from_variant(
                    spec, pv, profile, attrs_of_variant(pv), blocks, [size]
                )

        self.emulator_of = emulator_of
        self.space = ConfigSpace.for_spec(spec)
        self.default = SearchConfig(spec.default_variant, tuple(spec.default_block or (256, 1, 1)))
        self._blocks: dict[ParamValues, list[Block]] = (
            {pv: [tuple(int(v) for v in b) for b in bs] for pv, bs in blocks.items()}  # type: ignore[misc]
            if blocks is not None
            else {}
        )
        self._given = blocks is not None
        self._ems: dict[ParamValues, VariantEmulator | None] = {}
        self.failed: dict[ParamValues, str] = {}  # variants that cannot be emulated, and why
        self.emulated: dict[SearchConfig, float] = {}

    def variants(self) -> list[ParamValues]:
        return list(self._blocks) if self._given else self.space.variants(self.spec)

    def blocks_of(self, pv: ParamValues) -> list[Block]:
        """The variant's blocks that the constraints admit and that it can launch at D."""
        if pv not in self._blocks:
            if self._given:
                return []
            space, spec, size = self.space, self.spec, self.size
            cands = list(dict.fromkeys([*space.candidates, self.default.block]))
            arg = pv if spec.params else None
            ok, _ = space.admissible(size, cands, spec=spec, params=arg)
            ok, _ = space.filter_launchable(
                ok, size, self.attrs_of_variant(pv), self.profile, params=arg
            )
            self._blocks[pv] = ok
        return self._blocks[pv]

    def emulator(self, pv: ParamValues) -> VariantEmulator | None:
        """The variant's emulator over its blocks; None (why in `failed`) when its trip counts
        cannot be derived without the kernel's data."""
        if pv not in self._ems:
            try:
                self._ems[pv] = self.emulator_of(pv, self.blocks_of(pv))
            except KlaraptorError as exc:
                self._ems[pv] = None
                self.failed[pv] = str(exc)
        return self._ems[pv]

    def where(self, c: SearchConfig) -> tuple[VariantEmulator, int]:
        em = self.emulator(c.variant)
        if em is None:
            raise SearchError(
                f"kernel {self.spec.name!r}: {c.text()} cannot be emulated: "
                f"{self.failed[c.variant]}"
            )
        return em, em.candidates.index(c.block)

    def ms(self, c: SearchConfig) -> float:
        """Emulated milliseconds of one configuration at D (inf: it cannot be emulated)."""
        if c not in self.emulated:
            em = self.emulator(c.variant)
            if em is None or c.block not in em.candidates:
                self.emulated[c] = math.inf
            else:
                j = em.candidates.index(c.block)
                self.emulated[c] = em.cycles(self.d, j) / self.clock_khz
        return self.emulated[c]

    def configs(self) -> list[SearchConfig]:
        """Every configuration of the joint space at D, in canonical order."""
        return [SearchConfig(pv, b) for pv in self.variants() for b in self.blocks_of(pv)]

    def ranking(self) -> list[tuple[SearchConfig, float]]:
        """Every configuration with its emulated ms, least first (those that cannot be emulated
        last, in canonical order)."""
        timed = [(c, self.ms(c)) for c in self.configs()]
        return sorted(timed, key=lambda cm: cm[1] if math.isfinite(cm[1]) else math.inf)

    def search_order(self) -> list[tuple[SearchConfig, float]]:
        """`ranking`, with the configurations that cannot be emulated after the others in
        their `neighbourhood_order` from the author's configuration (the static fallback)."""
        ranked = self.ranking()
        left = [c for c, ms in ranked if not math.isfinite(ms)]
        if not left:
            return ranked
        static = neighbourhood_order(self.spec, self.default, left, self.blocks_of)
        return [cm for cm in ranked if math.isfinite(cm[1])] + [(c, math.inf) for c in static]


def neighbourhood_order(
    spec: Any,
    start: SearchConfig,
    configs: Sequence[SearchConfig],
    blocks_of: Callable[[ParamValues], Collection[Block]],
) -> list[SearchConfig]:
    """`configs` by their number of Alg. 3 moves from `start` (breadth first over `neighbours`,
    in its move order), the unreachable last in their given order: the static order a search
    falls back to where emulation cannot rank (trip counts that need the kernel's data), so it
    measures the author's configuration and its neighbourhood outward."""
    wanted = set(configs)
    seen = {start}
    frontier, out = [start], [start] if start in wanted else []
    while frontier:
        nxt = []
        for c in frontier:
            for n, _ in neighbours(spec, c, blocks_of):
                if n not in seen:
                    seen.add(n)
                    nxt.append(n)
                    if n in wanted:
                        out.append(n)
        frontier = nxt
    reached = set(out)
    return out + [c for c in configs if c not in reached]


def most_promising(
    emulated: Mapping[SearchConfig, float] | Sequence[tuple[SearchConfig, float]], k: int
) -> list[SearchConfig]:
    """The `k` configurations of least emulated time (ties in the given order); those that
    cannot be emulated are never among them."""
    if k < 1:
        raise SearchError(f"the number of configurations to measure must be at least 1, got {k}")
    items = list(emulated.items()) if isinstance(emulated, Mapping) else list(emulated)
    finite = [(c, ms) for c, ms in items if math.isfinite(ms)]
    return [c for c, _ in sorted(finite, key=lambda cm: cm[1])[:k]]


class PlanOrder(Enum):
    """The order a budgeted search measures the joint space in (it measures a prefix)."""

    EMULATED = "emulated"  # least emulated time first (`emulated_first_by_share`)
    VARIANTS_FIRST = "variants-first"  # each variant's best first (`variants_first`)


# The budgeted search's order when the user names none: chosen on the tunables suite's training
# sizes by the rule of benchmarks/bench_saake_search.py, fixed before either order was scored
# there (16 of 18 pairs within 5 % against 12 of 18, both recorded H200 truths; docs/saake.md).
DEFAULT_ORDER = PlanOrder.VARIANTS_FIRST


@dataclass(frozen=True)
class BudgetedPlan:
    """What a budgeted search measures (`budgeted_plan`): the joint space in the order it is
    measured, each configuration's estimated measurement seconds, and how many of that order (a
    prefix) fit the budget, a fraction of brute force's estimated cost fixed before measuring."""

    budget: float
    order: tuple[SearchConfig, ...]
    emulated_ms: tuple[float, ...]  # inf: cannot be emulated (measured after the emulated ones)
    estimated_s: tuple[float, ...]
    measure: int
    brute_force_estimate_s: float
    rule: PlanOrder = PlanOrder.EMULATED  # how `order` was made

    @property
    def chosen(self) -> tuple[SearchConfig, ...]:
        """The configurations to measure, least emulated time first."""
        return self.order[: self.measure]

    @property
    def estimated_cost_s(self) -> float:
        return float(sum(self.estimated_s[: self.measure]))

    @property
    def unemulated_measured(self) -> int:
        """How many of the chosen could not be emulated (ordered by the static fallback)."""
        return sum(not math.isfinite(t) for t in self.emulated_ms[: self.measure])


def emulated_first_by_share(emulated_ms: Sequence[float]) -> list[int]:
    """Indices in order of emulated time, least first, interleaved by share with those that
    cannot be emulated (inf or nan), which keep their given order: any prefix holds about the
    same fraction of each list. Nothing ranks what cannot be emulated, so a search (or a
    build's prior) neither trusts nor dismisses it; put last, a histogram whose emulable
    quarter took the whole budget never tried the others (H200, dc0480d)."""
    known, unknown = _split(emulated_ms)
    return _by_share(known, unknown)


def variants_first(configs: Sequence[SearchConfig], emulated_ms: Sequence[float]) -> list[int]:
    """Indices: every variant's least emulated configuration first (those variants in order of
    it), then the rest in order of emulated time; those that cannot be emulated interleaved by
    share, as `emulated_first_by_share`. Emulation's error is shared within a variant (one
    SASS, one set of trip counts) more than across variants, so a prefix that measures each
    variant once bets less on one variant's emulation being right."""
    known, unknown = _split(emulated_ms)
    seen: set[ParamValues] = set()
    firsts: list[int] = []
    rest: list[int] = []
    for i in known:
        v = configs[i].variant
        (rest if v in seen else firsts).append(i)
        seen.add(v)
    return _by_share(firsts + rest, unknown)


def _split(emulated_ms: Sequence[float]) -> tuple[list[int], list[int]]:
    """(indices of the emulated, least emulated time first; those that cannot be emulated, in
    their given order)."""
    known = sorted(
        (i for i, t in enumerate(emulated_ms) if math.isfinite(t)),
        key=lambda i: (emulated_ms[i], i),
    )
    return known, [i for i, t in enumerate(emulated_ms) if not math.isfinite(t)]


def _by_share(known: Sequence[int], unknown: Sequence[int]) -> list[int]:
    """`known` and `unknown` merged so that any prefix holds about the same share of each."""
    keyed = [(k / len(known), 0, i) for k, i in enumerate(known)]
    keyed += [(k / len(unknown), 1, i) for k, i in enumerate(unknown)]
    return [i for _, _, i in sorted(keyed)]


def check_budget(budget: float | str) -> float:
    """A search budget: a fraction of brute force's estimated measurement cost, in (0, 1]."""
    try:
        b = float(budget)
    except (TypeError, ValueError):
        b = math.nan
    if not (math.isfinite(b) and 0.0 < b <= 1.0):
        raise SearchError(
            "the search budget must be a fraction of brute force's estimated measurement cost, "
            f"greater than 0 and at most 1 (e.g. 0.25), got {budget!r}"
        )
    return b


def budgeted_plan(
    ranking: Sequence[tuple[SearchConfig, float]],
    budget: float,
    point_seconds: Callable[[float], float],
    order: PlanOrder = DEFAULT_ORDER,
) -> BudgetedPlan:
    """Measure in emulated order (`order`) until a budget stated up front is spent.

    `ranking`: every configuration of the joint space with its emulated ms (inf where it cannot
    be emulated), in any order; `point_seconds(ms)`: the estimated seconds of timing one
    configuration of kernel time `ms` (a collection cost model: per-point overhead plus the
    protocol's launches). Brute force's cost is estimated as the sum over the whole space, a
    configuration that cannot be emulated priced at the median emulated time (or the overhead
    alone when none can be). The order (`PlanOrder`) is emulated time, least first, or each
    variant's best first and then the rest by emulated time; either interleaved by share with
    the configurations that cannot be emulated, in their given order (the caller's static
    fallback): a prefix holding a fraction f of the one holds about f of the other. The plan is
    the longest prefix whose estimated cost stays within `budget` times brute force's estimate,
    and at least its first configuration. Everything is decided before measuring."""
    b = check_budget(budget)
    items = list(ranking)
    if not items:
        raise SearchError("the budgeted search has no configuration to measure")
    finite = sorted(ms for _, ms in items if math.isfinite(ms))
    stand_in = finite[len(finite) // 2] if finite else 0.0
    ms_all = [ms for _, ms in items]
    if order is PlanOrder.VARIANTS_FIRST:
        idx = variants_first([c for c, _ in items], ms_all)
    else:
        idx = emulated_first_by_share(ms_all)
    configs = tuple(items[i][0] for i in idx)
    emulated = tuple(float(items[i][1]) for i in idx)
    cost = tuple(float(point_seconds(t if math.isfinite(t) else stand_in)) for t in emulated)
    if any(not (math.isfinite(c) and c > 0) for c in cost):
        raise SearchError("the measurement cost model gave a non-positive or non-finite cost")
    total = float(sum(cost))
    spent, n = 0.0, 0
    for c in cost:
        if n > 0 and spent + c > b * total:
            break
        spent, n = spent + c, n + 1
    return BudgetedPlan(b, configs, emulated, cost, n, total, order)


def prior_order(
    spec: Any,
    D: Any,
    candidates: Sequence[Any],
    profile: Any,
    attrs_of_variant: Callable[[ParamValues], KernelAttributes] | None = None,
    *,
    emulator_of: Callable[[ParamValues, Sequence[Block]], VariantEmulator] | None = None,
) -> list[Any]:
    """The candidates (blocks, or `Config`s of a kernel with program parameters) in order of
    emulated time at D, least first, without measuring: the `saake` prior of budgeted builds.
    Each variant's emulator is built once over that variant's candidate blocks; candidates
    that cannot be emulated are interleaved by share, in their given order
    (`emulated_first_by_share`). SearchError when none can be.
    `attrs_of_variant`, `emulator_of`: as `search`."""
    from klaraptor.core.types import Config

    def cfg(c: Any) -> SearchConfig:
        if isinstance(c, Config):
            return SearchConfig(c.params, tuple(int(v) for v in c.block))  # type: ignore[arg-type]
        return SearchConfig(spec.default_variant, tuple(int(v) for v in c))  # type: ignore[arg-type]

    configs = [cfg(c) for c in candidates]
    blocks: dict[ParamValues, list[Block]] = {}
    for c in configs:
        blocks.setdefault(c.variant, []).append(c.block)
    joint = JointSpace(spec, D, profile, attrs_of_variant, emulator_of=emulator_of, blocks=blocks)
    ms = [joint.ms(c) for c in configs]
    if configs and not any(math.isfinite(t) for t in ms):
        why = "; ".join(sorted(set(joint.failed.values()))) or "no candidate can launch"
        raise SearchError(
            f"kernel {spec.name!r}: the saake prior cannot rank its candidates at "
            f"{joint.size}: none can be emulated ({why})"
        )
    return [candidates[i] for i in emulated_first_by_share(ms)]


def search(
    spec: Any,
    D: Any,
    profile: Any,
    attrs_of_variant: Callable[[ParamValues], KernelAttributes] | None = None,
    *,
    emulator_of: Callable[[ParamValues, Sequence[Block]], VariantEmulator] | None = None,
    analyse: Callable[[Any, Sequence[int], int], Any] | None = None,
    attributes_source: str | None = None,
    joint: JointSpace | None = None,
) -> SearchPath:
    """Alg. 3 on emulated times (module docstring) from the author's configuration at D.

    `attrs_of_variant`: a variant's compiled attributes (default `compiled_attributes`);
    `emulator_of(variant, blocks)`: its emulator over those blocks (default
    `KernelEmulator.from_variant` at D); `analyse(em, d, j)`: its sensitivity (default
    `sensitivity.analyse`); `joint`: the emulated space to walk (default: one made from the
    arguments before; pass one to rank the rest of the space with the same emulators)."""
    if not spec.params:
        raise SearchError(
            f"kernel {spec.name!r} has no program parameters: `search` walks program parameters "
            "and block shape (for the block alone use `klaraptor explain`)"
        )
    if joint is None:
        joint = JointSpace(
            spec,
            D,
            profile,
            attrs_of_variant,
            emulator_of=emulator_of,
            attributes_source=attributes_source,
        )
    if analyse is None:
        from klaraptor.models.saake import sensitivity

        analyse = sensitivity.analyse  # type: ignore[assignment]  # takes a KernelEmulator
    analyse_at: Callable[[Any, Sequence[int], int], Any] = analyse
    size, d, clock_khz, default = joint.size, joint.d, joint.clock_khz, joint.default
    where = joint.where
    walked: dict[SearchConfig, float] = {}  # what this walk emulated (the space may hold more)

    def ms(c: SearchConfig) -> float:
        walked[c] = joint.ms(c)
        return walked[c]

    if default.block not in joint.blocks_of(default.variant):
        raise SearchError(
            f"kernel {spec.name!r}: the author's configuration ({default.text()}) cannot launch "
            f"at {size}"
        )
    current, current_ms = default, ms(default)
    if not math.isfinite(current_ms):
        why = joint.failed.get(default.variant)
        raise SearchError(
            f"kernel {spec.name!r}: the author's configuration ({default.text()}) cannot be "
            f"emulated at {size}" + (f": {why}" if why else "")
        )
    steps: list[SearchStep] = []
    visited = {current}
    for _ in range(MAX_STEPS):
        em, j = where(current)
        s = analyse_at(em, d, j)
        headline = s.headline()
        meaning = s.meaning(s.bottleneck)
        cands = [(c, m) for c, m in neighbours(spec, current, joint.blocks_of) if c not in visited]
        timed = {c: ms(c) for c, _ in cands}
        cands = [(c, m) for c, m in cands if math.isfinite(timed[c])]
        relief = (
            "more resident warps first"
            if s.mode == "latency"
            else f"least time on {s.name(s.bottleneck)} first"
        )

        keys = {
            c: relief_key(s.mode, s.bottleneck, *where(c), d=d, cycles=timed[c] * clock_khz)
            for c, _ in cands
        }
        ordered = sorted(cands, key=lambda cm: keys[cm[0]])
        visited.update(c for c, _ in ordered)
        nxt = next(
            ((k, c, m) for k, (c, m) in enumerate(ordered, 1) if timed[c] < current_ms), None
        )
        if nxt is None:
            why = (
                "stop: no neighbour can launch"
                if not ordered
                else "stop: its only neighbour does not emulate faster"
                if len(ordered) == 1
                else f"stop: none of its {len(ordered)} neighbours emulates faster"
            )
            steps.append(
                SearchStep(current, current_ms, headline, meaning, why, None, len(ordered))
            )
            break
        k, c, move = nxt
        why = (
            f"move: {move} ({s.mode}-bound: {relief}; neighbour {k} of {len(ordered)} in that "
            f"order, the first that emulates faster: {current_ms:.4g} -> {timed[c]:.4g} ms)"
        )
        steps.append(SearchStep(current, current_ms, headline, meaning, why, c, len(ordered)))
        current, current_ms = c, timed[c]
    return SearchPath(
        spec.name,
        size,
        tuple(steps),
        joint.attributes_source,
        len(walked),
        tuple(walked.items()),
    )


def format_path(path: SearchPath) -> str:
    """The path as lines for a terminal: one per step, then the choice."""
    lines = [f"{path.kernel} {path.D}: SAAKE's walk (Alg. 3) on emulated times", ""]
    for i, st in enumerate(path.steps):
        lines.append(f"{i}. {st.config.text()}: {st.ms:.4g} ms emulated")
        lines.append(f"   {st.bottleneck}; {st.meaning}")
        lines.append(f"   {st.why}")
    ch = path.chosen
    lines += [
        "",
        f"{path.configurations_emulated} configurations emulated; {path.attributes_source}.",
        f"chosen: {ch.config.text()} at {ch.ms:.4g} ms ({path.speedup:.2f}x the author's "
        f"{path.steps[0].ms:.4g} ms): emulated, not measured",
    ]
    return "\n".join(lines)


def path_to_dict(path: SearchPath) -> dict[str, Any]:
    def cfg(c: SearchConfig) -> Mapping[str, Any]:
        return {"params": dict(c.variant.items()), "block": list(c.block)}

    return {
        "kernel": path.kernel,
        "D": dict(path.D),
        "steps": [
            {
                "config": cfg(s.config),
                "emulated_ms": s.ms,
                "bottleneck": s.bottleneck,
                "meaning": s.meaning,
                "why": s.why,
                "moved_to": cfg(s.moved_to) if s.moved_to else None,
            }
            for s in path.steps
        ],
        "attributes_source": path.attributes_source,
        "configurations_emulated": path.configurations_emulated,
        "emulated_not_measured": True,
    }


__all__ = [
    "ATTRIBUTES_FROM_COMPILER",
    "BudgetedPlan",
    "JointSpace",
    "SearchConfig",
    "SearchError",
    "SearchPath",
    "SearchStep",
    "budgeted_plan",
    "check_budget",
    "emulated_first_by_share",
    "compiled_attributes",
    "format_path",
    "most_promising",
    "neighbourhood_order",
    "neighbours",
    "DEFAULT_ORDER",
    "PlanOrder",
    "variants_first",
    "path_to_dict",
    "prior_order",
    "relief_key",
    "search",
]
