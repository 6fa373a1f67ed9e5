"""klaraptor.triton.autotune under Triton's CPU interpreter (TRITON_INTERPRET=1): real launches
of real @triton.jit kernels on CPU torch tensors, checked against torch; the config dispatch;
builds kept in the store and reloaded without measuring; bad input."""

from __future__ import annotations

import math
import os
import sys

import pytest

# Triton decides at import whether its language functions (tl.sum, ...) run in the interpreter,
# so the switch must be on before the first import of triton in this process. Where a CUDA GPU
# is present, test_triton_gpu.py needs compiled launches instead: these tests then run only when
# TRITON_INTERPRET=1 is set for the whole run.
if "triton" not in sys.modules:
    try:
        import torch as _torch

        _gpu = _torch.cuda.is_available()
    except ImportError:
        _gpu = False
    if not _gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")

torch = pytest.importorskip("torch", reason="the triton extra (torch, triton) is not installed")
triton = pytest.importorskip("triton", reason="the triton extra (torch, triton) is not installed")
tl = pytest.importorskip("triton.language")

from klaraptor.core.errors import SpecError  # noqa: E402
from klaraptor.store import Store  # noqa: E402


def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def rowsum_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@pytest.fixture
def interpret() -> None:
    from klaraptor.backends.triton_backend import interpreting

    if not interpreting():
        pytest.skip("triton was imported in this process without TRITON_INTERPRET=1")


def _add_sample(n_elements: int):
    x = torch.rand(n_elements)
    y = torch.rand(n_elements)
    out = torch.empty(n_elements)
    grid = lambda META: (triton.cdiv(n_elements, META["BLOCK_SIZE"]),)  # noqa: E731
    return grid, (x, y, out, n_elements), {}


ADD_CONFIGS = [
    triton.Config({"BLOCK_SIZE": 64}, num_warps=1),
    triton.Config({"BLOCK_SIZE": 256}, num_warps=2),
    triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
]


def _tuned_add(tmp_path, **kw):
    from klaraptor.triton import autotune

    jit = triton.jit(add_kernel)
    return autotune(
        configs=ADD_CONFIGS,
        key=["n_elements"],
        warmup=0,
        rep=1,
        store=str(tmp_path / "store.db"),
        progress=False,
        **kw,
    )(jit)


def test_launch_matches_torch_and_dispatches_the_chosen_config(interpret, tmp_path) -> None:
    tuned = _tuned_add(tmp_path, sample=_add_sample)
    build = tuned.build([1000, 3000, 5000])
    assert build.measured == 9 and not build.from_store
    assert [tuple(D.values()) for D in build.sizes] == [(1000,), (3000,), (5000,)]
    # the sample's grid (triton.cdiv over META) was found to vectorise over the configs
    assert list(tuned._grid_vectorises.values()) == [True]
    for n in (12345, 40000):
        x, y = torch.rand(n), torch.rand(n)
        out = torch.full((n,), -1.0)
        grid = lambda META, n=n: (triton.cdiv(n, META["BLOCK_SIZE"]),)  # noqa: E731
        tuned[grid](x, y, out, n)
        torch.testing.assert_close(out, x + y)
        chosen = tuned.select(x, y, out, n, grid=grid)
        assert chosen in ADD_CONFIGS and tuned.best_config is chosen
        assert tuned.last_select_us > 0


def test_each_config_dispatches_its_own_meta_parameters(interpret, tmp_path) -> None:
    """Force each config through the cache and check the launched grid used its BLOCK_SIZE:
    programs beyond n would write nothing, too few would leave -1s behind."""
    tuned = _tuned_add(tmp_path, sample=_add_sample)
    tuned.build([512, 2048])
    n = 4096
    x, y = torch.rand(n), torch.rand(n)
    seen: list[int] = []

    def grid(META):
        seen.append(META["BLOCK_SIZE"])
        return (triton.cdiv(n, META["BLOCK_SIZE"]),)

    for i in range(len(ADD_CONFIGS)):
        out = torch.full((n,), -1.0)
        key = tuned._key_of((x, y, out, n), {})
        tuned._cache[key] = (i, dict(tuned._all_kwargs[i]))
        tuned[grid](x, y, out, n)
        torch.testing.assert_close(out, x + y)
        assert seen[-1] == ADD_CONFIGS[i].kwargs["BLOCK_SIZE"]


def test_first_call_builds_from_scaled_down_keys_then_store_serves(interpret, tmp_path) -> None:
    tuned = _tuned_add(tmp_path, sample=_add_sample)
    n = 8192
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    tuned[lambda META: (triton.cdiv(n, META["BLOCK_SIZE"]),)](x, y, out, n)
    torch.testing.assert_close(out, x + y)
    (build,) = tuned._builds.values()
    assert sorted(D["n_elements"] for D in build.sizes) == [512, 1024, 2048, 4096]
    # A new tuner over the same kernel, configs and store: no measurement, the same model.
    again = _tuned_add(tmp_path, sample=None)
    out2 = torch.empty(n)
    again[lambda META: (triton.cdiv(n, META["BLOCK_SIZE"]),)](x, y, out2, n)
    torch.testing.assert_close(out2, x + y)
    (loaded,) = again._builds.values()
    assert loaded.from_store and loaded.kernel == build.kernel
    assert Store(str(tmp_path / "store.db")).count_measurements(build.kernel) == 12


def test_a_changed_config_list_is_a_new_build(interpret, tmp_path) -> None:
    from klaraptor.triton import autotune

    a = _tuned_add(tmp_path, sample=_add_sample)
    b = autotune(configs=ADD_CONFIGS[:2], key=["n_elements"], store=str(tmp_path / "s.db"))(
        triton.jit(add_kernel)
    )
    assert a.kernel_name(("torch.float32",)) != b.kernel_name(("torch.float32",))


def test_without_sample_the_first_call_is_measured_itself(interpret, tmp_path) -> None:
    tuned = _tuned_add(tmp_path)
    n = 3000
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    tuned[lambda META: (triton.cdiv(n, META["BLOCK_SIZE"]),)](x, y, out, n)
    torch.testing.assert_close(out, x + y)
    (build,) = tuned._builds.values()
    assert [D["n_elements"] for D in build.sizes] == [n]


def test_two_dimensional_key_prune_and_reset(interpret, tmp_path) -> None:
    from klaraptor.triton import autotune

    configs = [
        triton.Config({"BLOCK": 16}, num_warps=1),
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4, num_stages=2),
    ]
    pruned: list[int] = []

    def prune(configs, named_args, **kwargs):
        pruned.append(named_args["n_cols"])
        return [c for c in configs if c.kwargs["BLOCK"] >= named_args["n_cols"]]

    def sample(n_rows: int, n_cols: int):
        x = torch.rand(n_rows, n_cols)
        out = torch.empty(n_rows)
        return (n_rows,), (x, out, x.stride(0), n_rows * 0 + n_cols), {}

    tuned = autotune(
        configs=configs,
        key=["n_cols"],
        prune_configs_by={"early_config_prune": prune},
        reset_to_zero=["out_ptr"],
        warmup=0,
        rep=1,
        store=str(tmp_path / "s.db"),
        sample=lambda n_cols: sample(4, n_cols),
        progress=False,
    )(triton.jit(rowsum_kernel))
    build = tuned.build([{"n_cols": 16}, {"n_cols": 48}, {"n_cols": 96}])
    # a row must fit one block: 3 + 2 + 1 configs are left at n_cols = 16, 48, 96
    assert build.measured == 6 and pruned == [16, 48, 96]
    x = torch.rand(7, 120)
    out = torch.empty(7)
    tuned[(7,)](x, out, x.stride(0), 120)
    assert tuned.best_config is configs[2]
    torch.testing.assert_close(out, x.sum(dim=1))


def test_bad_input_names_the_problem(interpret, tmp_path) -> None:
    from klaraptor.triton import autotune

    jit = triton.jit(add_kernel)
    with pytest.raises(SpecError, match="names no argument"):
        autotune(configs=ADD_CONFIGS, key=["N"])(jit)
    with pytest.raises(SpecError, match="configs is empty"):
        autotune(configs=[], key=["n_elements"])(jit)
    with pytest.raises(SpecError, match="not an integer"):
        autotune(configs=[triton.Config({"BLOCK_SIZE": "big"})], key=["n_elements"])(jit)
    with pytest.raises(SpecError, match="unknown entries"):
        autotune(configs=ADD_CONFIGS, key=["n_elements"], prune_configs_by={"topk": 2})(jit)
    with pytest.raises(SpecError, match="use_cuda_graph"):
        autotune(configs=ADD_CONFIGS, key=["n_elements"], use_cuda_graph=True)
    tuned = _tuned_add(tmp_path, sample=_add_sample)
    with pytest.raises(SpecError, match="must give the key"):
        tuned.build(["big"])
    x = torch.rand(8)
    with pytest.raises(SpecError, match="is not an integer"):
        tuned[(1,)](x, x, x, 8.5)


def _cases():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "triton_cases.py"
    if not path.exists():
        pytest.skip("benchmarks/triton_cases.py is not beside the tests (an installed package)")
    spec = importlib.util.spec_from_file_location("triton_cases", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["triton_cases"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["vector_add", "fused_softmax", "matmul", "layer_norm"])
def test_tutorial_kernels_through_klaraptor(interpret, tmp_path, name: str) -> None:
    """Each vendored tutorial kernel, unchanged, built at two tiny keys with its config list,
    then launched by klaraptor at a third key and checked against torch."""
    from klaraptor.triton import autotune

    cases = _cases()
    case = next(c for c in cases.CASES if c.name == name)
    ns = cases.load_tutorial(case.file)
    configs = case.configs(ns)
    small = case.small
    half = {k: max(1, v // 2) for k, v in small.items()}
    tuned = autotune(
        configs=configs,
        key=case.key,
        warmup=0,
        rep=1,
        store=str(tmp_path / "s.db"),
        sample=lambda **key: case.make("cpu", **key, **case.small_extra),
        progress=False,
    )(case.jit(ns))
    build = tuned.build([half, small])
    assert build.measured >= len(configs)
    grid, args, kwargs = case.make(
        "cpu", **{k: v + 3 for k, v in small.items()}, **case.small_extra
    )
    tuned[grid](*args, **kwargs)
    case.check(args)
    assert tuned.best_config in configs


def test_tutorial_attention_through_klaraptor(interpret, tmp_path) -> None:
    """The tutorial's fused-attention forward kernel (block pointers, causal), unchanged, with
    its own filtered config list: built at N_CTX 128 and 256, launched by klaraptor at 384
    (N_CTX must stay a multiple of BLOCK_M: the kernel has no boundary checks) and checked
    against softmax(Q K^T) V in float32 and against torch's scaled_dot_product_attention."""
    from klaraptor.triton import autotune

    cases = _cases()
    case = cases.FUSED_ATTENTION
    ns = cases.load_tutorial(case.file)
    configs = case.configs(ns)
    assert len(configs) == 12
    tuned = autotune(
        configs=configs,
        key=case.key,
        warmup=0,
        rep=1,
        store=str(tmp_path / "s.db"),
        sample=lambda **key: case.make("cpu", **key, Z=1, H=1),
        progress=False,
    )(case.jit(ns))
    build = tuned.build([{"N_CTX": 128, "HEAD_DIM": 64}, {"N_CTX": 256, "HEAD_DIM": 64}])
    assert build.measured >= len(configs)
    grid, args, kwargs = case.make("cpu", N_CTX=384, HEAD_DIM=64, Z=1, H=2)
    out = args[5]
    out.fill_(float("nan"))
    tuned[grid](*args, **kwargs)
    assert tuned.best_config in configs
    case.check(args)
    q, k, v, sm_scale = args[:4]
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True, scale=sm_scale
    )
    torch.testing.assert_close(out.float(), sdpa, atol=1e-2, rtol=0)


def _random_build(tuned, dtypes, rng, n_terms):
    """A build with a random fitted model (some configs unmeasured, some never resident), as a
    GPU build leaves one, injected so that the choice is tested at many keys without timing."""
    from klaraptor.backends.triton_backend import TritonDevice
    from klaraptor.frontends.triton import TritonBuild
    from klaraptor.models.wave_time import FILL, WaveFit

    n, d = len(tuned.configs), len(tuned.key)
    terms = tuple(range(min(n_terms, d)))
    if n_terms % 2:  # the waves' fill as a term too (a grid dimension's way into a wave's time)
        terms = (FILL, *terms)
    b = rng.random(n) * 1e-3
    b[rng.random(n) < 0.1] = np.inf
    g = rng.random((n, len(terms))) * 1e-3
    g[rng.random((n, len(terms))) < 0.3] = 0.0
    fit = WaveFit(tuple(tuned.key), terms, rng.integers(64, 4096, d).astype(float), 4e-3, b, g)
    active = rng.integers(0, 9, n).astype(float)
    tuned._device = TritonDevice("simulated H200", 132, (9, 0), True)
    build = TritonBuild("k", "simulated H200", [], fit, {}, 0, 0.0, True, active)
    tuned._builds[dtypes] = build
    return build


np = pytest.importorskip("numpy")


@pytest.mark.parametrize("grid_kind", ["vectorises", "needs_scalars", "tuple", "pruned"])
def test_fast_choice_equals_the_per_config_model_at_many_keys(interpret, tmp_path, grid_kind):
    """The new-key path (precomputed model, one grid call over all configs) chooses what one
    grid call and one prediction per config choose, at 300 random keys per random model."""
    from klaraptor.triton import autotune

    cases = _cases()
    ns = cases.load_tutorial("matmul.py")
    configs = ns["get_cuda_autotune_config"]()
    prune = None
    if grid_kind == "pruned":
        prune = {"early_config_prune": lambda cs, named, **kw: cs[: 4 + named["K"] % 9]}
    tuned = autotune(
        configs=configs,
        key=["M", "N", "K"],
        store=str(tmp_path / "s.db"),
        progress=False,
        prune_configs_by=prune,
    )(ns["matmul_kernel"])
    a = torch.empty((2, 2), dtype=torch.float16)
    dtypes = ("torch.float16",) * 3
    grids = {
        "vectorises": lambda META: (
            triton.cdiv(META["M"], META["BLOCK_SIZE_M"])
            * triton.cdiv(META["N"], META["BLOCK_SIZE_N"]),
        ),
        "needs_scalars": lambda META: (
            max(1, META["M"] // META["BLOCK_SIZE_M"]),
            math.ceil(META["N"] / META["BLOCK_SIZE_N"]),
        ),
        "tuple": (77, 3),
        "pruned": lambda META: (triton.cdiv(META["M"], META["BLOCK_SIZE_M"]), 2),
    }
    grid = grids[grid_kind]
    rng = np.random.default_rng(7)
    same = 0
    for trial in range(4):
        build = _random_build(tuned, dtypes, rng, n_terms=trial)
        tuned._cache.clear()
        for _ in range(75):
            M, N, K = (int(v) for v in rng.integers(1, 20000, 3))
            args = (a, a, a, M, N, K, 1, 1, 1, 1, 1, 1)
            pred = tuned._choose_per_config(build, (M, N, K), args, {}, grid)
            if not np.isfinite(pred).any() or np.isnan(pred).any():
                continue
            assert tuned.select(*args, grid=grid, ACTIVATION="") is configs[int(np.argmin(pred))]
            # and every config's prediction is the same float (pruned ones aside)
            named = tuned._named(args, {})
            cand = tuned._candidates(named, {})
            fast = build.chooser.predict((M, N, K), tuned._programs_all(grid, named, cand))
            np.testing.assert_array_equal(fast[cand], pred[cand])
            same += 1
    assert same > 200
    if callable(grid):
        (ok,) = tuned._grid_vectorises.values()
        assert ok is (grid_kind in ("vectorises", "pruned"))


def test_grid_dims_are_the_key_values_that_change_the_program_count_alone() -> None:
    from klaraptor.frontends.triton_choice import grid_dims

    # softmax-like: (rows, cols), one program per row, two configs
    D = np.array([(r, c) for r in (1024, 4096) for c in (256, 512) for _ in range(2)], float)
    cfg = np.tile([0, 1], 4)
    assert grid_dims(D, cfg, D[:, 0].copy()) == [0]
    # keys scaled together (a first call's build): no parameter changes alone, none is told
    D2 = np.array([(512, 128), (1024, 256)], float)
    assert grid_dims(D2, np.array([0, 0]), np.array([512.0, 1024.0])) == []


def test_attention_stages1_keeps_the_tutorial_list_but_its_stage_count() -> None:
    """The attention case run on the GPU: the tutorial's configs after its `keep`, at
    num_stages=1 (the stage counts it gives do not compile under Triton 3.6 on the H200)."""
    cases = _cases()
    ns = cases.load_tutorial("fused_attention.py")
    original = list(filter(ns["keep"], ns["configs"]))
    ones = cases.FUSED_ATTENTION_STAGES1.configs(ns)
    assert {c.num_stages for c in original} == {3, 4, 7}
    assert {c.num_stages for c in ones} == {1}
    assert {(tuple(sorted(c.kwargs.items())), c.num_warps) for c in ones} == {
        (tuple(sorted(c.kwargs.items())), c.num_warps) for c in original
    }
    assert len(ones) == 4


def test_online_refinement_times_the_model_s_best_once_per_new_key(interpret, tmp_path) -> None:
    """`refine=k`: on a new key the model's k + 1 best configs are timed on the call itself and
    the fastest kept; the same key later is served from the cache without timing."""
    tuned = _tuned_add(tmp_path, sample=_add_sample, refine=1)
    tuned.build([1000, 3000])
    timed: list[int] = []
    real = tuned._time_config

    def spy(i, *a, **k):
        timed.append(int(i))
        return real(i, *a, **k)

    tuned._time_config = spy
    n = 20000
    x, y = torch.rand(n), torch.rand(n)
    out = torch.full((n,), -1.0)
    grid = lambda META: (triton.cdiv(n, META["BLOCK_SIZE"]),)  # noqa: E731
    tuned[grid](x, y, out, n)
    torch.testing.assert_close(out, x + y)
    assert len(timed) == 2 and len(set(timed)) == 2
    assert tuned.best_config in [ADD_CONFIGS[i] for i in timed]
    tuned[grid](x, y, out, n)
    assert len(timed) == 2  # cached: no timing on the second call
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(SpecError, match="refine"):
            _tuned_add(tmp_path, sample=_add_sample, refine=bad)
    from klaraptor.triton import autotune

    for what in ("warmup", "rep"):
        for bad in (-1, "fast", float("nan"), [1]):
            with pytest.raises(SpecError, match=what):
                autotune(configs=ADD_CONFIGS, key=["n_elements"], **{what: bad})(
                    triton.jit(add_kernel)
                )


def rowloop_kernel(x_ptr, out_ptr, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def _rowloop_sample(N: int):
    x = torch.rand(1, N)
    out = torch.empty(1)
    return (1,), (x, out, x.stride(0), N), {}


# BLOCK 8, 16 and 32 loop N / BLOCK times; 256 runs one masked iteration at every N <= 256
ROWLOOP_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=1) for b in (4, 8, 16, 256)]
ROWLOOP_TRAIN = [16, 32, 64, 128, 256]


def _tuned_rowloop(store, warmup=30, rep=200, **kw):
    from klaraptor.triton import autotune

    # warmup: the interpreter's first launches of a config are slow; rep: a few samples each
    # (this machine's load moves the interpreter's timings by tens of percent)
    return autotune(
        configs=ROWLOOP_CONFIGS,
        key=["N"],
        warmup=warmup,
        rep=rep,
        store=str(store),
        sample=_rowloop_sample,
        progress=False,
        **kw,
    )(triton.jit(rowloop_kernel))


def _times(tuned, build):
    pts = tuned._points(build.kernel, tuned._open_store())
    return sorted(zip(pts.cfg_rows, [d[0] for d in pts.D_rows], pts.t_rows))


def test_flat_configs_make_the_build_add_larger_keys(interpret, tmp_path) -> None:
    """The interpreter's time of the looping configs grows with N (4 to 64 iterations), that
    of BLOCK 256 does not (one iteration at every training N): its growth is unidentified, so
    the build adds N = 512, then 1024 unless it grew at 512, and says so; a reload from the
    store reports the same. The interpreter's timings on a loaded CPU can hide the growth: a
    build whose rule named nothing must then have added nothing, and the next attempt runs."""
    from klaraptor.frontends.triton_extend import ExtensionOutcome

    for attempt in range(3):
        tuned = _tuned_rowloop(tmp_path / f"s{attempt}.db")
        build = tuned.build(ROWLOOP_TRAIN)
        if build.extension is not None:
            break
        assert build.report["growth"]["flat"] == [], _times(tuned, build)
        assert [D["N"] for D in build.sizes] == ROWLOOP_TRAIN
    else:
        pytest.fail(f"3 builds and BLOCK 256 never named flat: {_times(tuned, build)}")
    ext = build.extension
    assert ext.parameter == "N"
    assert ext.checks[0].flat == (3,) and set(ext.checks[0].growing) >= {0, 1, 2}
    added = [a.size["N"] for a in ext.added]
    assert added in ([512], [512, 1024])
    assert ext.added[0].flat_before == (3,) and all(a.measured == 4 for a in ext.added)
    assert len(ext.checks) == len(added) + 1
    if ext.outcome is ExtensionOutcome.CAP:
        assert added == [512, 1024] and ext.still_flat
    else:
        assert ext.outcome is ExtensionOutcome.GREW and ext.still_flat == ()
    assert [D["N"] for D in build.sizes] == ROWLOOP_TRAIN + added
    assert build.measured == 4 * len(build.sizes)
    assert build.report["size_extension"] == ext.to_dict()
    x = torch.rand(1, 3000)
    out = torch.empty(1)
    tuned[(1,)](x, out, x.stride(0), 3000)
    torch.testing.assert_close(out, x.sum(dim=1))
    again = _tuned_rowloop(tmp_path / f"s{attempt}.db")
    again[(1,)](x, out, x.stride(0), 3000)
    (reloaded,) = again._builds.values()
    assert reloaded.from_store and reloaded.extension is not None
    assert reloaded.extension.to_dict() == ext.to_dict()


def test_the_opt_out_measures_the_given_sizes_alone(interpret, tmp_path) -> None:
    """`extend_sizes=False`, on the build or on the tuner: the given sizes and nothing more
    (whatever the growth rule says: it is still reported). A non-bool opt-out is refused."""
    tuned = _tuned_rowloop(tmp_path / "a.db", warmup=0, rep=1)
    build = tuned.build(ROWLOOP_TRAIN, extend_sizes=False)
    assert [D["N"] for D in build.sizes] == ROWLOOP_TRAIN and build.measured == 20
    assert build.extension is None and build.report["size_extension"] is None
    assert build.report["growth"]["parameter"] == "N"
    off = _tuned_rowloop(tmp_path / "b.db", warmup=0, rep=1, extend_sizes=False)
    assert [D["N"] for D in off.build(ROWLOOP_TRAIN).sizes] == ROWLOOP_TRAIN
    for bad in ("no", 0, None):
        with pytest.raises(SpecError, match="extend_sizes"):
            _tuned_rowloop(tmp_path / "c.db", extend_sizes=bad)
        with pytest.raises(SpecError, match="extend_sizes"):
            tuned.build(ROWLOOP_TRAIN, extend_sizes=bad if bad is not None else "off")


def test_the_bench_scores_r_above_the_largest_training_key_used() -> None:
    """bench_triton: where the build added training keys for a parameter, r counts only at the
    workload keys above every training value of it; without added keys, at every key."""
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    from klaraptor.core.types import DataSize
    from klaraptor.frontends.triton_extend import AddedKey, ExtensionOutcome, SizeExtension

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_triton.py"
    if not path.exists():
        pytest.skip("benchmarks/ is not beside the tests (an installed package)")
    spec = importlib.util.spec_from_file_location("bench_triton_under_test", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sizes = [DataSize(["N"], [n]) for n in (256, 512, 768, 1024, 2048, 4096)]
    added = tuple(AddedKey(s, (9,), 12) for s in sizes[4:])
    ext = SizeExtension("N", added, ExtensionOutcome.CAP, ())
    workload = [{"N": 1280 + 256 * i} for i in range(50)]
    scored = bench._scored(workload, SimpleNamespace(extension=ext, sizes=sizes))
    kept = [w["N"] for w in workload if scored(w)]
    assert len(kept) == 38 and min(kept) == 4352
    plain = bench._scored(workload, SimpleNamespace(extension=None, sizes=sizes[:4]))
    assert all(plain(w) for w in workload)


def test_the_added_key_doubles_the_flat_parameter_of_the_largest_training_key() -> None:
    from klaraptor.core.types import DataSize
    from klaraptor.frontends.triton_extend import next_size, scaled_down_keys

    names = ["n_rows", "n_cols"]
    sizes = [DataSize(names, v) for v in ((1024, 256), (4096, 512), (1024, 512), (4096, 256))]
    assert next_size(sizes, "n_cols") == DataSize(names, (4096, 1024))
    assert next_size(sizes, "n_rows") == DataSize(names, (8192, 512))
    assert scaled_down_keys((8192, 1)) == [(512, 1), (1024, 1), (2048, 1), (4096, 1)]


def test_the_chooser_predicts_the_fits_floats_for_every_term_set() -> None:
    """The precomputed chooser (a new key's path) gives WaveFit.predict's floats exactly, with
    the fill term, data terms, configs that hold no program and keys with no program."""
    from klaraptor.frontends.triton_choice import Chooser
    from klaraptor.models.wave_time import FILL, WaveFit, full_waves, wave_fill

    rng = np.random.default_rng(7)
    active = np.array([1.0, 2.0, 0.0, 4.0])
    for terms in [(), (FILL,), (0,), (FILL, 0), (FILL, 0, 1)]:
        fit = WaveFit(
            ("N_CTX", "HEAD_DIM"),
            terms,
            np.array([1024.0, 64.0]),
            0.003,
            rng.random(4),
            rng.random((4, len(terms))),
        )
        chooser = Chooser(fit, active, 132)
        for programs in ([0, 0, 0, 0], [5, 300, 77, 1000], [4096, 8192, 1, 264]):
            p = np.array(programs, dtype=np.int64)
            w = full_waves(p, active, 132)
            want = fit.predict((2048, 64), w, wave_fill(p, w, active * 132))
            got = chooser.predict((2048, 64), p)
            assert np.array_equal(got, want, equal_nan=True), (terms, programs)
