"""Numba front-end on the CPU: argument inference, binding, build keys, errors, the worker's view.

Numba kernels run in Numba's CUDA simulator here (tests/frontends/conftest.py), which executes
them thread by thread in Python: sizes stay around a thousand elements. The builds launched
from are made from REAL H200 measurements of the CUDA C++ twin of `scale` (Kernel Tuner files,
tests/data/kernel_tuner/) imported under the Numba kernel's spec: these tests check loading,
selecting and launching, not the model. tests/frontends/test_frontends_gpu.py measures Numba
kernels on a GPU.
"""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # noqa: E402
from numba.core import types  # noqa: E402

import klaraptor  # noqa: E402
from klaraptor.assemble import build  # noqa: E402
from klaraptor.backends.cupy_backend import CupyBackend  # noqa: E402
from klaraptor.backends.numba_backend import NumbaBackend, numba_cuda  # noqa: E402
from klaraptor.collect.collector import CollectOptions  # noqa: E402
from klaraptor.collect.worker import backend_name, make_backend  # noqa: E402
from klaraptor.core.errors import (  # noqa: E402
    BuildError,
    CollectError,
    DataSizeError,
    KlaraptorError,
    MissingDependencyError,
    SpecError,
)
from klaraptor.frontends.kernel_tuner import import_kernel_tuner  # noqa: E402
from klaraptor.frontends.numba import (  # noqa: E402
    NumbaKernelSpec,
    SignatureError,
    numba_types,
    signature_problems,
)
from klaraptor.store import Store  # noqa: E402

KT = Path(__file__).parents[1] / "data" / "kernel_tuner"
ROOT = Path(__file__).parents[2]


def scale_body(x, y, n):  # noqa: ANN001 - a Numba kernel
    i = cuda.grid(1)
    if i < n:
        y[i] = 2.0 * x[i]


def tuned(store: Store, h200, kernel=None, **kw):  # noqa: ANN001, ANN201
    kw.setdefault("on_missing", "default")
    return klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)", store=store, device=h200, **kw)(
        kernel or cuda.jit(scale_body)
    )


def call_default(t, *args):  # noqa: ANN001, ANN201
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t(*args)
    return [str(w.message) for w in caught]


def vectors(n: int, dtype=np.float32):  # noqa: ANN001, ANN201
    x = cuda.to_device(np.linspace(0.0, 1.0, n, dtype=dtype))
    return x, cuda.to_device(np.zeros(n, dtype=dtype))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "s.sqlite")


def test_numba_first_call_infers_arguments(store: Store, h200) -> None:  # noqa: ANN001
    t = tuned(store, h200)
    x, y = vectors(300)
    msgs = call_default(t, x, y, 300)
    assert any("no build of scale" in m and "(256, 1, 1)" in m for m in msgs), msgs
    np.testing.assert_array_equal(y.copy_to_host(), 2.0 * x.copy_to_host())
    spec = t.spec
    assert isinstance(spec, NumbaKernelSpec) and spec.kernel == "scale_body" and spec.dim == 1
    assert spec.make_args.describe() == [
        f"float32[n] (C order, from {type(x).__module__.split('.')[0]}.{type(x).__name__})",
        f"float32[n] (C order, from {type(x).__module__.split('.')[0]}.{type(x).__name__})",
        "int n",
    ]
    # At another size the factory makes arguments Numba types exactly as the bound signature.
    made = spec.make_args(spec.size(64), np.random.default_rng(0))
    assert made[0].shape == (64,) and made[2] == 64 and type(made[2]) is int
    assert numba_types(made, t.__wrapped__) == spec.argtypes
    assert spec.argtypes == (
        types.Array(types.float32, 1, "C"),
        types.Array(types.float32, 1, "C"),
        types.int64,
    )


def test_numba_tuned_launch_equals_plain_launch_with_its_block(store: Store, h200) -> None:  # noqa: ANN001
    t = tuned(store, h200, default_block=(128, 1, 1))
    x, y = vectors(500)
    call_default(t, x, y, np.int32(500))
    grid, block, smem = t.plan_for(x, y, np.int32(500))
    assert (grid, block, smem) == ((4, 1, 1), (128, 1, 1), 0)
    _, y_plain = vectors(500)
    cuda.jit(scale_body)[grid, block](x, y_plain, np.int32(500))
    assert y.copy_to_host().tobytes() == y_plain.copy_to_host().tobytes()


@pytest.mark.parametrize(
    "rule", ["n", "x.shape[0]", "len(x)", "x.size", 2, lambda x, y, n: n, "y.shape[-1]"]
)
def test_numba_data_rules_read_the_same_size(store: Store, h200, rule) -> None:  # noqa: ANN001
    t = klaraptor.tune(
        data={"n": rule}, grid="ceil(n / bx)", store=store, device=h200, on_missing="default"
    )(cuda.jit(scale_body))
    x, y = vectors(70)
    call_default(t, x, y, 70)
    assert t.plan_for(x, y, 70) == ((1, 1, 1), (256, 1, 1), 0)
    assert dict(t.spec.read_data((x, y, 70))) == {"n": 70}


@pytest.mark.parametrize(
    ("data", "grid", "message"),
    [
        ({"n": "m"}, "ceil(n / bx)", "'m' is not a parameter of scale_body(x, y, n)"),
        ({"n": "z.shape[0]"}, "ceil(n / bx)", "'z' is not a parameter"),
        ({"n": lambda x, n: n}, "ceil(n / bx)", "must accept the 3 arguments"),
        ({"n": 5}, "ceil(n / bx)", "argument 5 does not exist"),
        ({"n": "x[0]"}, "ceil(n / bx)", "cannot read 'x[0]'"),
        ({}, "ceil(n / bx)", "at least one data parameter"),
        ({"n": "n"}, "ceil(m / bx)", "names m, which is neither a data parameter (n) nor"),
        ({"n": "n"}, "ceil(n / bx", "is not an expression"),
        ({"n": "n"}, 42, "grid must be an expression"),
    ],
)
def test_numba_bad_rules_are_refused_at_decoration(data, grid, message) -> None:  # noqa: ANN001
    with pytest.raises(SpecError) as e:
        klaraptor.tune(data=data, grid=grid)(cuda.jit(scale_body))
    assert message in str(e.value)


def test_numba_dimensionality_comes_from_the_grid_rule(store: Store, h200) -> None:  # noqa: ANN001
    def add2(a, b, rows, cols):  # noqa: ANN001
        i, j = cuda.grid(2)
        if i < rows and j < cols:
            b[i, j] = a[i, j] + 1.0

    t = klaraptor.tune(
        data={"rows": "a.shape[0]", "cols": "a.shape[1]"},
        grid=("ceil(rows / bx)", "ceil(cols / by)"),
        store=store,
        device=h200,
        on_missing="default",
    )(cuda.jit(add2))
    a = cuda.to_device(np.arange(40 * 24, dtype=np.float64).reshape(40, 24))
    b = cuda.to_device(np.zeros((40, 24)))
    call_default(t, a, b, 40, 24)
    assert t.spec.dim == 2 and t.plan_for(a, b, 40, 24) == ((2, 3, 1), (32, 8, 1), 0)
    np.testing.assert_array_equal(b.copy_to_host(), a.copy_to_host() + 1.0)
    assert t.spec.make_args.describe()[0] == f"float64[rows, cols] (C order, from {_origin(a)})"


def _origin(a) -> str:  # noqa: ANN001
    return f"{type(a).__module__.split('.')[0]}.{type(a).__name__}"


def test_numba_signature_mismatch_is_refused(store: Store, h200) -> None:  # noqa: ANN001
    t = tuned(store, h200)
    x, y = vectors(100)
    call_default(t, x, y, 100)
    x64, y64 = vectors(200, np.float64)
    with pytest.raises(SignatureError) as e:
        t(x64, y64, 200)
    text = str(e.value)
    assert "is bound to (array(float32, 1d, C), array(float32, 1d, C), int64)" in text
    assert "argument 0 (x) is array(float64, 1d, C)" in text and "argument 1 (y)" in text
    # A size the kernel was not written for fails on the size, not on the launch.
    with pytest.raises(DataSizeError):
        t(x, y, 0)


def test_numba_signature_rules() -> None:
    f32c = types.Array(types.float32, 1, "C")
    assert signature_problems((f32c, types.int32), (f32c, types.int64)) == []
    assert signature_problems((types.Array(types.float32, 1, "A"),), (f32c,)) == []
    assert signature_problems((f32c,), (types.Array(types.float32, 1, "F"),), ("x",)) == [
        "argument 0 (x) is array(float32, 1d, F), the signature declares array(float32, 1d, C)"
    ]
    assert "2 arguments given, the signature has 1" in signature_problems((f32c,), (f32c, f32c))[0]
    assert signature_problems((f32c,), (types.Array(types.float32, 2, "C"),))
    assert signature_problems((types.int32,), (f32c,))


def test_numba_builds_are_keyed_by_source_options_and_grid(store: Store, h200) -> None:  # noqa: ANN001
    def twice(x, y, n):  # noqa: ANN001
        i = cuda.grid(1)
        if i < n:
            y[i] = 2.0 * x[i]

    def thrice(x, y, n):  # noqa: ANN001
        i = cuda.grid(1)
        if i < n:
            y[i] = 3.0 * x[i]

    x, y = vectors(64)
    names = {}
    for label, kernel, grid in [
        ("twice", cuda.jit(twice), "ceil(n / bx)"),
        ("twice again", cuda.jit(twice), "ceil(n / bx)"),
        ("thrice", cuda.jit(thrice), "ceil(n / bx)"),
        ("other grid", cuda.jit(twice), "ceil((n + 1) / bx)"),
    ]:
        t = klaraptor.tune(
            data={"n": "n"}, grid=grid, store=store, device=h200, on_missing="default"
        )(kernel)
        call_default(t, x, y, 64)
        names[label] = t.name
    assert names["twice"] == names["twice again"]
    assert len({names["twice"], names["thrice"], names["other grid"]}) == 3
    assert names["twice"].startswith("numba.tests.frontends.test_numba.test_numba_builds_are_")
    if not getattr(numba.config, "ENABLE_CUDASIM", False):  # real Numba: options key builds too
        t = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)", on_missing="default")(
            cuda.jit(fastmath=True)(twice)
        )
        call_default(t, x, y, 64)
        assert t.name != names["twice"]


def _scale_build(store: Store, h200, t) -> klaraptor.Kernel:  # noqa: ANN001
    """A time_fit build of `t`'s spec from the H200 Kernel Tuner files of its C++ twin."""
    sizes = []
    for n in (1048576, 4194304, 16777216):
        path = KT / f"scale_n{n}.cache.json"
        rep = import_kernel_tuner(path, t.spec, store=store, device=h200, kernel_name="scale")
        sizes += rep.sizes
    return build(t.spec, sizes, model="time_fit", store=store, device=h200, collect_data=False)


def test_numba_launches_with_the_block_its_build_chooses(store: Store, h200) -> None:  # noqa: ANN001
    first = tuned(store, h200, kernel=cuda.jit(scale_body))
    x, y = vectors(640)
    call_default(first, x, y, 640)
    kern = _scale_build(store, h200, first)
    # A new process's view: the same kernel tuned again finds the build in the store.
    again = tuned(store, h200, kernel=cuda.jit(scale_body), on_missing="build")
    y2 = cuda.to_device(np.zeros(640, np.float32))
    again(x, y2, 640)
    assert again.kernel is not None and again.name == first.name
    sel = kern.select(640)
    assert again.plan_for(x, y2, 640) == (sel.grid, sel.block, 0)
    _, y_plain = vectors(640)
    cuda.jit(scale_body)[sel.grid, sel.block](x, y_plain, 640)
    assert y2.copy_to_host().tobytes() == y_plain.copy_to_host().tobytes()
    # Another size: one more select, then the dict lookup.
    sel2 = kern.select(1000)
    x3, y3 = vectors(1000)
    again(x3, y3, 1000)
    assert again.plan_for(x3, y3, 1000) == (sel2.grid, sel2.block, 0)
    assert len(again._plans) == 2


def test_numba_online_refinement_times_the_band_and_keeps_the_fastest(store: Store, h200) -> None:  # noqa: ANN001
    """refine=k through the Numba front-end: the first calls of a size launch the model's choice
    and its band's candidates (each a real launch, timed: under the simulator, which runs a launch
    before it returns, by the host clock; on a GPU by Numba's events), then the fastest is pinned
    and kept in the store for the next process."""
    first = tuned(store, h200, kernel=cuda.jit(scale_body))
    x, y = vectors(640)
    call_default(first, x, y, 640)
    kern = _scale_build(store, h200, first)
    n = 640
    chosen = kern.select(n).block
    expected = [chosen, *(b for b in kern.selector.refine_blocks(n, 4) if b != chosen)]
    assert len(expected) >= 2, expected  # the scale build's band holds several blocks here
    t = tuned(store, h200, kernel=cuda.jit(scale_body), on_missing="build", refine=4)
    used = []
    for _ in expected:
        x, y = vectors(n)
        used.append(t.plan_for(x, y, n)[1])
        assert t.plan_source(x, y, n) == "model"
        t(x, y, n)
        np.testing.assert_array_equal(y.copy_to_host(), 2.0 * x.copy_to_host())
    assert used == expected
    x, y = vectors(n)
    t(x, y, n)  # the host clock's timings are complete: this call pins the fastest
    np.testing.assert_array_equal(y.copy_to_host(), 2.0 * x.copy_to_host())
    pinned = t.plan_for(x, y, n)[1]
    sel = t.kernel.select(n)
    assert t.plan_source(x, y, n) == "refined" and sel.block == pinned and pinned in expected
    assert sel.measured_ms is not None and sel.measured_ms > 0
    # A new process's view: the same kernel tuned again starts from the refined block.
    again = tuned(store, h200, kernel=cuda.jit(scale_body), on_missing="build")
    again(x, y, n)
    assert again.plan_source(x, y, n) == "refined" and again.plan_for(x, y, n)[1] == pinned


def test_numba_build_failure_is_not_silent(store: Store, h200) -> None:  # noqa: ANN001
    """With on_missing='build' and no measurements to build from (no GPU here), every call
    says why; none falls back to an unbuilt launch."""
    if not getattr(numba.config, "ENABLE_CUDASIM", False):
        pytest.skip("on a GPU the build succeeds (test_frontends_gpu.py)")
    t = tuned(store, h200, on_missing="build", sizes=[32, 64])
    x, y = vectors(128)
    for _ in range(2):
        with pytest.raises(BuildError, match="collect first"):
            t(x, y, 128)
        assert t.kernel is None and t.spec is None


def test_numba_calls_inside_a_collection_worker_are_refused(
    store: Store, h200, monkeypatch
) -> None:  # noqa: ANN001
    monkeypatch.setenv("KLARAPTOR_COLLECTION_WORKER", "1")
    t = tuned(store, h200)
    x, y = vectors(32)
    with pytest.raises(CollectError, match="if __name__ == '__main__'"):
        t(x, y, 32)


def test_numba_missing_dependency_names_the_extra(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(MissingDependencyError, match=r"klaraptor\[numba\]"):
        numba_cuda()


def test_numba_backend_has_the_cupy_backend_methods() -> None:
    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(fn).parameters)
            for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")
        }

    cupy_methods, numba_methods = public(CupyBackend), public(NumbaBackend)
    for name, params in cupy_methods.items():
        assert name in numba_methods, name
        assert numba_methods[name] == params, name
    spec = NumbaKernelSpec(
        name="t.k",
        source="def k(x): pass",
        kernel="k",
        data=(klaraptor.DataParam("n", arg=1),),
        dim=1,
        grid=("ceil(n / bx)", "1", "1"),
        make_args=lambda D, rng: (),
        numba_kernel=cuda.jit(scale_body),
        argtypes=(types.int64,),
    )
    assert backend_name(spec, CollectOptions()) == "numba"
    assert backend_name(spec, CollectOptions(backend="cupy")) == "cupy"
    assert isinstance(make_backend("numba"), NumbaBackend)
    with pytest.raises(CollectError, match="unknown GPU backend 'opencl'"):
        backend_name(spec, CollectOptions(backend="opencl"))
    with pytest.raises(SpecError, match="needs argtypes"):
        NumbaKernelSpec(
            name="t.k",
            source="x",
            kernel="k",
            data=(klaraptor.DataParam("n", arg=1),),
            dim=1,
            grid=("1", "1", "1"),
            make_args=lambda D, rng: (),
            numba_kernel=cuda.jit(scale_body),
        )


WORKER_SCRIPT = textwrap.dedent(
    """
    import json, pickle, sys
    import numpy as np
    from numba import cuda
    import klaraptor
    from klaraptor.frontends.inference import InferredArgs, describe_args
    from klaraptor.collect.worker import Point
    from klaraptor.collect.jobfile import write_job, _main_info

    @klaraptor.tune(data={"n": lambda a, b, n: n}, grid="ceil(n / bx)")
    @cuda.jit
    def blocksum(a, b, n):
        s = cuda.shared.array(256, dtype=np.float32)
        i = cuda.grid(1)
        s[cuda.threadIdx.x] = a[i] if i < n else 0.0
        cuda.syncthreads()
        if cuda.threadIdx.x == 0 and i < n:
            b[cuda.blockIdx.x] = s[0]

    ad = blocksum._adapter
    args = (np.zeros(512, np.float32), np.zeros(2, np.float32), 512)
    ad.bind(args)
    info = describe_args(args, {"n": 512}, ad.param_names)
    spec = ad.make_spec(name="t.blocksum", data=blocksum._params, dim=1, grid=blocksum._grid,
                        make_args=InferredArgs(info, "numba"))
    body = pickle.dumps((spec, [], None), protocol=pickle.HIGHEST_PROTOCOL)
    write_job(sys.argv[1], mode="time", spec=spec, points=[], options=None, events=sys.argv[2])
    print(json.dumps({"main": _main_info(body), "kernel": spec.kernel}))
    """
)

READER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from numba import cuda
    from klaraptor.backends.cupy_backend import count_barriers
    from klaraptor.backends.numba_backend import _ENTRY
    from klaraptor.collect.ncu import kernel_matches
    from klaraptor.collect.jobfile import read_body, read_header
    with open(sys.argv[1], "rb") as fh:
        job = read_body(fh, read_header(fh))
    spec = job.spec
    ptx, _ = cuda.compile_ptx(spec.numba_kernel.py_func, spec.argtypes, cc=(9, 0))
    entry = _ENTRY.findall(ptx)[0]
    print(json.dumps({"type": type(spec).__name__, "argtypes": [str(t) for t in spec.argtypes],
                      "barriers": count_barriers(ptx, entry), "matches": kernel_matches(entry, spec.kernel),
                      "shape": spec.make_args.describe(), "fingerprint": spec.fingerprint()}))
    """
)


def test_numba_spec_travels_to_a_collection_worker(tmp_path: Path) -> None:
    """A NumbaKernelSpec made in a user's script (here a __main__ with a lambda data rule)
    reaches a fresh process through a real job file, without re-running the script, and its
    bound signature compiles there (PTX through NVVM, no GPU needed) with one barrier."""
    pytest.importorskip("numba.cuda")
    # PYTHONPATH kept after src: the GPU harness's NumPy shim (scripts/device_env) lives there.
    pythonpath = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "PYTHONPATH": pythonpath}
    script = tmp_path / "user_script.py"
    script.write_text(WORKER_SCRIPT)
    reader = tmp_path / "reader.py"
    reader.write_text(READER_SCRIPT)
    job = tmp_path / "j.job"
    made = subprocess.run(
        [sys.executable, str(script), str(job), str(tmp_path / "ev")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert '"main": null' in made.stdout and '"kernel": "blocksum"' in made.stdout
    read = subprocess.run(
        [sys.executable, str(reader), str(job)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    if read.returncode != 0 and "NVVM" in read.stderr:
        pytest.skip(f"no NVVM here to compile Numba PTX: {read.stderr.splitlines()[-1]}")
    assert read.returncode == 0, read.stderr[-3000:]
    out = read.stdout
    assert (
        '"type": "NumbaKernelSpec"' in out and '"barriers": 1' in out and '"matches": true' in out
    )
    assert '"argtypes": ["array(float32, 1d, C)", "array(float32, 1d, C)", "int64"]' in out
    assert "float32[n]" in out and "float32[2]" in out


def test_numba_unpicklable_user_make_args_is_reported(store: Store, h200) -> None:  # noqa: ANN001
    """An explicit make_args must travel to the worker; a lambda cannot, and the error says so
    before any GPU work."""
    from klaraptor.collect.jobfile import write_job

    t = tuned(store, h200, make_args=lambda D, rng: ())
    x, y = vectors(32)
    call_default(t, x, y, 32)
    with pytest.raises(KlaraptorError, match="cannot be sent to the collection worker"):
        write_job(
            store.path.parent / "j",
            mode="time",
            spec=t.spec,
            points=[],
            options=None,
            events=store.path.parent / "e",
        )


PICKLE_BY_VALUE = """
import pickle
from numba import cuda
from klaraptor.collect.jobfile import imports_main

def scale(x, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = 2.0 * x[i]

body = pickle.dumps(cuda.jit(scale))
again = pickle.loads(body)
assert type(again).__name__ == "CUDADispatcher", type(again)
assert again.py_func.__code__.co_code == scale.__code__.co_code
print("by value" if not imports_main(body) else "by reference")
"""


def test_pickled_numba_dispatcher_is_rebuilt_by_value() -> None:
    """A real (not simulated) dispatcher defined in a script's __main__ travels to a collection
    worker by value: the worker need not re-run the script. Dispatchers are made without a GPU,
    so this runs Numba itself in a process without the simulator."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    p = subprocess.run([sys.executable, "-c", PICKLE_BY_VALUE], capture_output=True, text=True,
                       env=env, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "by value"


def test_numba_backend_launches_times_and_checks(tmp_path: Path) -> None:
    """The backend the collection worker uses, on the kernels' own terms (the simulator here,
    the GPU there): launch, host copies, NaN poisoning and the output check, the context probe,
    and the event timer (with a tiny clock so the simulator's spin stays short)."""
    from klaraptor.backends.numba_backend import NumbaCompiled

    be = NumbaBackend()
    kernel = cuda.jit(scale_body)
    fn = NumbaCompiled(kernel, (), "scale_body")
    x, y = vectors(64)
    args = (x, y, 64)
    be.launch(fn, (1, 1, 1), (64, 1, 1), args)
    be.synchronize("first launch")
    host = be.to_host(args)
    np.testing.assert_array_equal(host[1], 2.0 * host[0])
    assert host[2] == 64
    good = be.check_outputs(
        lambda a: be.launch(fn, (1, 1, 1), (64, 1, 1), a),
        args,
        {1: 2.0 * host[0]},
        poison_indices=(1,),
        rtol=1e-6,
    )
    assert good["ok"] and good["max_rel_err"] == 0.0
    half = be.check_outputs(  # half the outputs left unwritten: NaN from the poisoning
        lambda a: be.launch(fn, (1, 1, 1), (32, 1, 1), a),
        args,
        {1: 2.0 * host[0]},
        poison_indices=(1,),
        rtol=1e-6,
    )
    assert not half["ok"] and np.isnan(half["max_rel_err"])
    assert be.context_alive()
    be.free_memory()
    timer = be.timer(0.001)
    stats = timer.measure(
        lambda: be.launch(fn, (1, 1, 1), (64, 1, 1), args),
        warmup=1,
        min_time_ms=0.0,
        min_repeats=2,
        max_repeats=2,
        max_wall_s=5.0,
    )
    assert stats["repeats"] == 2 and stats["inner"] >= 1 and not stats["flush_l2"]


def test_numba_wrong_argument_count_is_a_clear_error(store: Store, h200) -> None:  # noqa: ANN001
    t = tuned(store, h200)
    x, y = vectors(64)
    call_default(t, x, y, 64)
    with pytest.raises(SpecError, match="data parameter 'n' is argument 2, but the call has 2"):
        t(x, y)


def test_numba_launch_on_a_given_stream(store: Store, h200) -> None:  # noqa: ANN001
    t = tuned(store, h200)
    x, y = vectors(96)
    call_default(t, x, y, 96)
    y2 = cuda.to_device(np.zeros(96, np.float32))
    s = cuda.stream()
    t(x, y2, 96, stream=s)
    s.synchronize()
    assert y2.copy_to_host().tobytes() == y.copy_to_host().tobytes()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(t)
