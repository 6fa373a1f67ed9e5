"""The bad-input suite: every input a user can get wrong, the error it must give, and a phrase
its message must contain (issue 15).

Each table row is (id, the input, the expected error class, the phrase). CLI rows run the real
`klaraptor` entry point (in-process; a sample again in a subprocess) and check the exit code
documented for the class (README "Exit codes"), the phrase on stderr and that no traceback
appears. API rows run Python calls: the public API, specs, annotated files, store files and sizes.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import klaraptor
from klaraptor.cli import main
from klaraptor.cli.common import EXIT_USAGE, exit_code
from klaraptor.core.errors import (
    BuildError,
    CollectError,
    DataSizeError,
    KlaraptorError,
    SpecError,
    StoreError,
)
from klaraptor.frontends.annotated import read_annotated
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import KernelRecord, Measurement, Store
from tests import helpers as hs

ATAX = "polybench.atax.k1"
GEMM = "polybench.gemm.gemm"
DATA = Path(__file__).parent / "data"


class Usage(Exception):
    """Stands for argparse's refusal of a command line (exit code 2, usage on stderr)."""


# -- the files the inputs name ------------------------------------------------------------------

MODULE = '''
from klaraptor.spec import DataParam, KernelSpec

SRC = r"""extern "C" __global__ void add(const float* a, float* b, int rows, int cols) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < cols && y < rows) b[y * cols + x] = a[y * cols + x] + 1.0f;
}"""


def make_args(D, rng):
    import cupy as cp
    import numpy as np

    n = D["rows"] * D["cols"]
    return cp.ones(n, cp.float32), cp.empty(n, cp.float32), np.int32(D["rows"]), np.int32(D["cols"])


SPEC = KernelSpec(name="my.add", source=SRC, kernel="add",
                  data=(DataParam("rows", arg=2), DataParam("cols", arg=3)), dim=2,
                  grid=("ceil(cols / bx)", "ceil(rows / by)", "1"), make_args=make_args,
                  meta={"train_sizes": [{"rows": 256, "cols": 512}, {"rows": 512, "cols": 512}]})
NOSIZES = KernelSpec(name="my.nosizes", source=SRC, kernel="add",
                     data=(DataParam("rows", arg=2), DataParam("cols", arg=3)), dim=2,
                     grid=("ceil(cols / bx)", "ceil(rows / by)", "1"), make_args=make_args)
NOT_A_SPEC = 42
'''

GOOD_CU = """#define TWO 2
#pragma kernel_info_size_param_idx_k = 2;
#pragma kernel_info_dim_k = 1;
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = TWO * x[i];
}
"""
GOOD_CFG = 'grid = ("ceil(n / bx)", "1", "1")\narrays = {"x": "n", "y": "n"}\n'


def _cu(tmp: Path, name: str, cu: str, cfg: str | None = GOOD_CFG) -> Path:
    path = tmp / f"{name}.cu"
    path.write_text(cu)
    if cfg is not None:
        (tmp / f"{name}.k.py").write_text(cfg)
    return path


def _edit(src: Path, dst: Path, *sql: str, params: tuple[Any, ...] = ()) -> Path:
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    for stmt in sql:
        con.execute(stmt, params if "?" in stmt else ())
    con.commit()
    con.close()
    return dst


@dataclass
class Ctx:
    tmp: Path
    store: Path  # a good store: recorded builds of atax.k1, gemm.gemm, srad.k1 and synthetic.mn
    files: dict[str, Path]


@pytest.fixture(scope="module")
def ctx(recorded_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Ctx:
    tmp = tmp_path_factory.mktemp("bad_input")
    good = tmp / "good.sqlite"
    shutil.copy(recorded_home / "klaraptor.sqlite", good)
    # A two-parameter kernel (a hand-written helper) for sizes with names.
    spec, helper = hs.mn_spec(), hs.mn_helper()
    with Store(good) as s:
        s.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
        report = {"sizes": [{"M": 256, "N": 256}, {"M": 512, "N": 1024}], "model": "mn"}
        s.put_build(spec.name, hs.profile().key, "mn", helper.to_dict(), report)
        device = s.builds(ATAX)[0].device
    f: dict[str, Path] = {}
    f["missing"] = tmp / "nowhere" / "k.sqlite"
    f["empty"] = tmp / "empty.sqlite"
    f["empty"].write_bytes(b"")
    f["text"] = tmp / "notes.sqlite"
    f["text"].write_text("these are my notes, not a database\n" * 20)
    raw = good.read_bytes()
    f["short"] = tmp / "short.sqlite"
    f["short"].write_bytes(raw[:60])
    f["truncated"] = tmp / "truncated.sqlite"
    f["truncated"].write_bytes(raw[: len(raw) // 3])
    f["corrupt"] = tmp / "corrupt.sqlite"
    rng = np.random.default_rng(0)
    f["corrupt"].write_bytes(raw[:100] + rng.integers(0, 256, len(raw) - 100, np.uint8).tobytes())
    f["dir"] = tmp / "a_directory"
    f["dir"].mkdir()
    f["foreign"] = tmp / "foreign.sqlite"
    con = sqlite3.connect(f["foreign"])
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    f["foreign_app"] = tmp / "foreign_app.sqlite"
    con = sqlite3.connect(f["foreign_app"])
    con.execute("PRAGMA application_id = 1234")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    f["newer"] = _edit(
        good, tmp / "newer.sqlite", "UPDATE meta SET value = '99' WHERE key = 'schema_version'"
    )
    f["no_version"] = _edit(
        good, tmp / "no_version.sqlite", "DELETE FROM meta WHERE key = 'schema_version'"
    )
    f["helper_json"] = _edit(
        good,
        tmp / "helper_json.sqlite",
        f"UPDATE builds SET helper = '{{not json' WHERE kernel = '{ATAX}'",
    )
    f["helper_fields"] = _edit(
        good,
        tmp / "helper_fields.sqlite",
        f"UPDATE builds SET helper = json_remove(helper, '$.kernel') WHERE kernel = '{ATAX}'",
    )
    f["helper_list"] = _edit(
        good,
        tmp / "helper_list.sqlite",
        f"UPDATE builds SET helper = '[1, 2]' WHERE kernel = '{ATAX}'",
    )
    f["helper_program"] = _edit(
        good,
        tmp / "helper_program.sqlite",
        f"UPDATE builds SET helper = json_set(helper, '$.model', json('{{\"x\": 1}}')) WHERE kernel = '{ATAX}'",
    )
    f["report_sizes"] = _edit(
        good,
        tmp / "report_sizes.sqlite",
        f"UPDATE builds SET report = json_set(report, '$.sizes', json('[\"N=abc\"]')) WHERE kernel = '{ATAX}'",
    )
    f["names"] = _edit(
        good, tmp / "names.sqlite", f"UPDATE kernels SET data_names = '5' WHERE name = '{ATAX}'"
    )
    f["history_d"] = _edit(
        good,
        tmp / "history_d.sqlite",
        "INSERT INTO history (kernel, device, model, d, bx, by, bz, gx, gy, gz, predicted_ms, "
        "measured_ms, source, created) SELECT kernel, device, model, '[1, 2]', 32, 1, 1, 1, 1, 1, "
        f"NULL, 0.5, 'refined', 0 FROM builds WHERE kernel = '{ATAX}'",
    )
    f["measure_d"] = _edit(
        good,
        tmp / "measure_d.sqlite",
        f"UPDATE measurements SET d = 'x' WHERE id = (SELECT MIN(id) FROM measurements WHERE kernel = '{ATAX}')",
    )
    f["facts"] = _edit(
        good,
        tmp / "facts.sqlite",
        'UPDATE collect_facts SET facts = \'{"attributes": {"num_regs": 1}}\'',
    )
    f["profile"] = _edit(good, tmp / "profile.sqlite", "UPDATE device_profiles SET profile = '[1]'")
    v1 = tmp / "v1_bad.sqlite"
    v1.write_bytes(gzip.decompress((DATA / "store_v1_3a4d02d.sqlite.gz").read_bytes()))
    f["v1_bad"] = _edit(
        v1, tmp / "v1_bad2.sqlite", "UPDATE builds SET payload = '{oops' WHERE id = 1"
    )
    f["v1_profile"] = _edit(
        v1, tmp / "v1_profile.sqlite", 'UPDATE device_profiles SET profile = \'{"name": "x"}\''
    )
    # Annotated files.
    f["cu_none"] = _cu(tmp, "none", "__global__ void k(int n) {}\n", None)
    f["cu_nodim"] = _cu(tmp, "nodim", GOOD_CU.replace("#pragma kernel_info_dim_k = 1;\n", ""))
    f["cu_word"] = _cu(tmp, "word", GOOD_CU.replace("dim_k = 1;", "dim_k = two;"))
    f["cu_float"] = _cu(tmp, "flt", GOOD_CU.replace("idx_k = 2;", "idx_k = 2.5;"))
    f["cu_novalue"] = _cu(tmp, "novalue", GOOD_CU.replace("dim_k = 1;", "dim_k;"))
    f["cu_conflict"] = _cu(tmp, "conflict", GOOD_CU + "#pragma kernel_info_dim_k = 2;\n")
    f["cu_index"] = _cu(tmp, "index", GOOD_CU.replace("idx_k = 2;", "idx_k = 5;"))
    f["cu_pointer"] = _cu(tmp, "pointer", GOOD_CU.replace("idx_k = 2;", "idx_k = 0;"))
    f["cu_noglobal"] = _cu(tmp, "noglobal", GOOD_CU.replace("__global__", "__device__"))
    f["cu_type"] = _cu(tmp, "ctype", GOOD_CU.replace("const float* x", "const half* x"))
    f["cu_dim4"] = _cu(tmp, "dim4", GOOD_CU.replace("dim_k = 1;", "dim_k = 4;"))
    f["cu_nocfg"] = _cu(tmp, "nocfg", GOOD_CU, None)
    f["cu_syntax"] = _cu(tmp, "syntax", GOOD_CU, "grid = (\n")
    f["cu_key"] = _cu(tmp, "key", GOOD_CU, GOOD_CFG + "colour = 3\n")
    f["cu_literal"] = _cu(tmp, "literal", GOOD_CU, GOOD_CFG + "sizes = list(range(3))\n")
    f["cu_grid"] = _cu(
        tmp, "grid", GOOD_CU, 'grid = "ceil(n / bx)"\narrays = {"x": "n", "y": "n"}\n'
    )
    f["cu_arrays"] = _cu(
        tmp, "arrays", GOOD_CU, 'grid = ("ceil(n / bx)", "1", "1")\narrays = {"x": "n"}\n'
    )
    f["cu_arrays_type"] = _cu(
        tmp, "arrtype", GOOD_CU, 'grid = ("ceil(n / bx)", "1", "1")\narrays = ["x", "y"]\n'
    )
    f["cu_scalars"] = _cu(tmp, "scalars", GOOD_CU.replace("int n)", "int n, float a)"))
    f["cu_sizes"] = _cu(tmp, "sizes", GOOD_CU, GOOD_CFG + 'sizes = ["big"]\n')
    f["cu_missing"] = tmp / "missing.cu"
    f["cu_no_sizes"] = _cu(tmp, "nosizes", GOOD_CU)
    (tmp / "badinput_mod.py").write_text(MODULE)
    return Ctx(tmp, good, {**f, "device": Path(device)})


# -- the CLI table ------------------------------------------------------------------------------
# argv words may name {store}, {tmp} or {<file>} from the context; the store is --store {store}
# unless the row gives its own --store.
# fmt: off
CLI: list[tuple[str, tuple[str, ...], type[BaseException], str]] = [
    # command line itself
    ("no_command", (), Usage, "the following arguments are required"),
    ("unknown_command", ("frobnicate",), Usage, "invalid choice"),
    ("select_without_size", ("select", GEMM), Usage, "the following arguments are required: D"),
    ("explain_limit_word", ("explain", GEMM, "4096", "--limit", "many"), Usage, "invalid int value"),
    ("export_lang", ("export", GEMM, "--lang", "java"), Usage, "invalid choice"),
    # build
    ("build_unknown_target", ("build", "polybench.nothing"), KlaraptorError, "unknown kernel 'polybench.nothing'"),
    ("build_no_gpu", ("build", GEMM), CollectError, "no CUDA GPU"),
    ("build_sizes_twice", ("build", GEMM, "--sizes", "1024,1024", "--dry-run"), KlaraptorError, "--sizes gives N=1024 twice"),
    ("build_sizes_word", ("build", GEMM, "--sizes", "256,big", "--dry-run"), DataSizeError, "'big' is not an integer"),
    ("build_sizes_zero", ("build", GEMM, "--sizes", "0,256", "--dry-run"), DataSizeError, "outside its range"),
    ("build_sizes_empty", ("build", GEMM, "--sizes", ",", "--dry-run"), KlaraptorError, "--sizes is empty"),
    ("build_sizes_name", ("build", GEMM, "--sizes", "M=256", "--dry-run"), DataSizeError, "unknown ['M']"),
    ("build_model", ("build", GEMM, "--model", "nosuch", "--dry-run"), KlaraptorError, "unknown model 'nosuch'"),
    ("build_module_missing", ("build", "no_such_module:SPEC", "--dry-run"), KlaraptorError, "cannot import 'no_such_module:SPEC'"),
    ("build_module_attr", ("build", "badinput_mod:MISSING", "--dry-run"), KlaraptorError, "has no attribute 'MISSING'"),
    ("build_module_not_spec", ("build", "badinput_mod:NOT_A_SPEC", "--dry-run"), KlaraptorError, "is not a KernelSpec"),
    ("build_multi_unnamed", ("build", "badinput_mod:SPEC", "--sizes", "512", "--dry-run"), DataSizeError, "gives no names"),
    ("build_multi_missing", ("build", "badinput_mod:SPEC", "--sizes", "rows=512", "--dry-run"), DataSizeError, "missing ['cols']"),
    ("build_no_sizes", ("build", "badinput_mod:NOSIZES", "--dry-run"), BuildError, "no training sizes given"),
    ("build_cu_missing", ("build", "{cu_missing}", "--dry-run"), SpecError, "no such .cu file"),
    ("build_cu_word", ("build", "{cu_word}", "--dry-run"), SpecError, "'two' is not an integer"),
    ("build_cu_conflict", ("build", "{cu_conflict}", "--dry-run"), SpecError, "conflicting pragmas for kernel 'k'"),
    ("build_cu_no_sizes", ("build", "{cu_no_sizes}", "--dry-run"), BuildError, "no training sizes given"),
    # select
    ("select_unknown", ("select", "polybench.gemm.gem", "4096"), BuildError, "did you mean 'polybench.gemm.gemm'"),
    ("select_unknown_far", ("select", "zzz", "4096"), BuildError, "unknown kernel 'zzz'"),
    ("select_not_built", ("select", "polybench.mvt.k1", "4096"), BuildError, "no build of kernel 'polybench.mvt.k1'"),
    ("select_zero", ("select", GEMM, "N=0"), DataSizeError, "outside its range"),
    ("select_negative", ("select", GEMM, "N=-4"), DataSizeError, "outside its range"),
    ("select_huge", ("select", GEMM, "N=99999999999"), DataSizeError, "outside its range"),
    ("select_word", ("select", GEMM, "N=abc"), DataSizeError, "not an integer"),
    ("select_fraction", ("select", GEMM, "4096.5"), DataSizeError, "not an integer"),
    ("select_name", ("select", GEMM, "M=4096"), DataSizeError, "unknown ['M']"),
    ("select_twice", ("select", GEMM, "N=1", "N=2"), DataSizeError, "N is given twice"),
    ("select_no_value", ("select", GEMM, "N="), DataSizeError, "is not NAME=VALUE"),
    ("select_two_numbers", ("select", GEMM, "4096", "8192"), DataSizeError, "not an integer"),
    ("select_model", ("select", GEMM, "4096", "--model", "mwp_cwp"), BuildError, "has no build with model 'mwp_cwp'"),
    ("select_device", ("select", GEMM, "4096", "--device", "NVIDIA A100|108 SMs|1410 MHz|mem 1215 MHz|40 GiB"), BuildError, "was built on"),
    ("select_multi_unnamed", ("select", "synthetic.mn", "512"), DataSizeError, "gives no names"),
    ("select_multi_missing", ("select", "synthetic.mn", "M=512"), DataSizeError, "missing ['N']"),
    ("select_multi_range", ("select", "synthetic.mn", "M=512", "N=0"), DataSizeError, "outside its range"),
    # explain, show, export
    ("explain_limit_negative", ("explain", GEMM, "4096", "--limit", "-3"), KlaraptorError, "--limit must be a positive number"),
    ("explain_limit_zero", ("explain", GEMM, "4096", "--limit", "0"), KlaraptorError, "--limit must be a positive number"),
    ("explain_size", ("explain", GEMM, "N=0"), DataSizeError, "outside its range"),
    ("explain_unknown", ("explain", "gemm", "4096"), BuildError, "unknown kernel 'gemm'"),
    ("show_unknown", ("show", "polybench.atax.k9"), BuildError, "did you mean 'polybench.atax.k1'"),
    ("show_model", ("show", ATAX, "--model", "time_fit"), BuildError, "has no build with model 'time_fit'"),
    ("export_no_dir", ("export", GEMM, "-o", "/nonexistent/dir/x.h"), KlaraptorError, "does not exist"),
    ("export_unknown", ("export", "polybench.gem", "--lang", "python"), BuildError, "unknown kernel"),
    ("export_to_dir", ("export", GEMM, "-o", "{dir}"), KlaraptorError, "cannot write"),
    # list and store files, through every read-only command
    ("list_missing", ("--store", "{missing}", "list"), StoreError, "there is no klaraptor store"),
    ("select_missing", ("--store", "{missing}", "select", GEMM, "4096"), StoreError, "import-recorded"),
    ("list_empty", ("--store", "{empty}", "list"), StoreError, "the file is empty"),
    ("select_empty", ("--store", "{empty}", "select", GEMM, "4096"), StoreError, "the file is empty"),
    ("list_text", ("--store", "{text}", "list"), StoreError, "not an SQLite database"),
    ("list_short", ("--store", "{short}", "list"), StoreError, "truncated (60 bytes"),
    ("list_truncated", ("--store", "{truncated}", "list"), StoreError, "the file is truncated"),
    ("show_truncated", ("--store", "{truncated}", "show", GEMM), StoreError, "the file is truncated"),
    ("list_corrupt", ("--store", "{corrupt}", "list"), StoreError, "corrupt"),
    ("select_corrupt", ("--store", "{corrupt}", "select", GEMM, "4096"), StoreError, "corrupt"),
    ("list_dir", ("--store", "{dir}", "list"), StoreError, "is a directory"),
    ("list_foreign", ("--store", "{foreign}", "list"), StoreError, "was not created by klaraptor"),
    ("list_foreign_app", ("--store", "{foreign_app}", "list"), StoreError, "another program's SQLite database"),
    ("list_newer", ("--store", "{newer}", "list"), StoreError, "written by a newer klaraptor"),
    ("export_newer", ("--store", "{newer}", "export", GEMM), StoreError, "upgrade klaraptor"),
    ("list_no_version", ("--store", "{no_version}", "list"), StoreError, "has no schema_version"),
    ("select_helper_json", ("--store", "{helper_json}", "select", ATAX, "4096"), StoreError, "is not valid JSON"),
    ("show_helper_fields", ("--store", "{helper_fields}", "show", ATAX), StoreError, "is malformed (KeyError: 'kernel')"),
    ("explain_helper_list", ("--store", "{helper_list}", "explain", ATAX, "4096"), StoreError, "must be JSON objects"),
    ("export_helper_program", ("--store", "{helper_program}", "export", ATAX), StoreError, "is malformed"),
    ("select_report_sizes", ("--store", "{report_sizes}", "select", ATAX, "4096"), StoreError, "is malformed"),
    ("select_data_names", ("--store", "{names}", "select", ATAX, "4096"), StoreError, "data names of kernel"),
    ("select_history_d", ("--store", "{history_d}", "select", ATAX, "4096"), StoreError, "the stored size of a history row"),
    ("list_v1_bad", ("--store", "{v1_bad}", "list"), StoreError, "cannot migrate: build 1"),
    ("list_v1_profile", ("--store", "{v1_profile}", "list"), StoreError, "cannot migrate the device profile"),
    # device, demo, bench, import-recorded
    ("device_no_gpu", ("device",), CollectError, "no CUDA GPU"),
    ("device_recorded", ("device", "--recorded", "a100"), KlaraptorError, "no recorded device profile 'a100'"),
    ("demo_gpu", ("demo", "--gpu"), CollectError, "no CUDA GPU here for `demo --gpu`"),
    ("demo_plot", ("demo", "--recorded", "--plot", "/nonexistent/dir/x.png"), KlaraptorError, "does not exist"),
    ("bench_collect", ("bench", "collect"), CollectError, "needs a CUDA GPU"),
    ("bench_report_out", ("bench", "report", "--out", "{text}/x"), KlaraptorError, "cannot create the directory"),
    ("bench_export_provenance", ("bench", "export", "--out", "{tmp}/x.json.gz", "--provenance", "{tmp}/none.json"), KlaraptorError, "--provenance"),
    ("bench_export_bad_json", ("bench", "export", "--out", "{tmp}/x.json.gz", "--provenance", "{text}"), KlaraptorError, "not valid JSON"),
    ("import_unknown", ("import-recorded", "--kernels", "polybench.gem"), KlaraptorError, "names no recorded kernel"),
    ("import_jobs", ("import-recorded", "--jobs", "0"), KlaraptorError, "--jobs must be at least 1"),
    ("import_model", ("import-recorded", "--model", "nosuch"), KlaraptorError, "unknown model 'nosuch'"),
    ("import_store_dir", ("--store", "{dir}", "import-recorded", "--kernels", ATAX), StoreError, "is a directory"),
]
# fmt: on


def _argv(ctx: Ctx, words: tuple[str, ...]) -> list[str]:
    names = {
        "store": str(ctx.store),
        "tmp": str(ctx.tmp),
        **{k: str(v) for k, v in ctx.files.items()},
    }
    out = [w.format(**names) if "{" in w else w for w in words]
    return out if "--store" in out else ["--store", str(ctx.store), *out]


def _expected_rc(error: type[BaseException]) -> int:
    return EXIT_USAGE if error is Usage else exit_code(error)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(("case", "words", "error", "phrase"), CLI, ids=[c[0] for c in CLI])
def test_bad_input_cli(
    ctx: Ctx,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    words: tuple[str, ...],
    error: type[BaseException],
    phrase: str,
) -> None:
    monkeypatch.chdir(ctx.tmp)  # module:ATTR targets import from here
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    rc, _, err = _run(_argv(ctx, words), capsys)
    text = " ".join(err.split())
    assert rc == _expected_rc(error) and rc != 0, (rc, err)
    assert phrase in text, err
    assert "Traceback" not in err


# A sample of the table run as a user runs it: a process of its own, exit status and stderr.
SUBPROCESS = ["build_no_gpu", "select_unknown", "select_word", "list_corrupt", "show_helper_fields",
              "export_no_dir", "explain_limit_negative", "build_cu_conflict", "unknown_command"]  # fmt: skip


@pytest.mark.parametrize("case", SUBPROCESS)
def test_bad_input_cli_process(ctx: Ctx, case: str) -> None:
    _, words, error, phrase = next(c for c in CLI if c[0] == case)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "300"}
    p = subprocess.run(
        [sys.executable, "-m", "klaraptor.cli", *_argv(ctx, words)],
        capture_output=True,
        text=True,
        cwd=ctx.tmp,
        env=env,
        timeout=120,
    )
    assert p.returncode == _expected_rc(error), p.stderr
    assert phrase in " ".join(p.stderr.split()) and "Traceback" not in p.stderr


def test_bad_input_cli_internal_error_is_one_line(
    ctx: Ctx, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (an exception that is no KlaraptorError) still gives a message and exit code 1."""
    import klaraptor.cli.commands as commands

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(commands, "size_text", broken)
    rc, _, err = _run(["--store", str(ctx.store), "select", GEMM, "4096"], capsys)
    assert rc == 1 and "internal error (ZeroDivisionError" in err and "Traceback" not in err
    monkeypatch.setenv("KLARAPTOR_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["--store", str(ctx.store), "select", GEMM, "4096"])


def test_bad_input_read_only_commands_create_nothing(
    ctx: Ctx, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLARAPTOR_HOME", str(tmp_path / "home"))
    for words in (("list",), ("select", GEMM, "4096"), ("explain", GEMM, "4096"), ("show", GEMM),
                  ("export", GEMM)):  # fmt: skip
        rc, _, err = _run(list(words), capsys)
        assert rc == exit_code(StoreError) and "there is no klaraptor store" in err
    with pytest.raises(StoreError, match="there is no klaraptor store"):
        klaraptor.load(GEMM)
    assert not (tmp_path / "home").exists()


# -- the Python table -----------------------------------------------------------------------------

SRC3 = 'extern "C" __global__ void k(const float* x, float* y, int n) { }'


def _mk(**kw: Any) -> Callable[[Ctx], Any]:
    """A KernelSpec with the README's fields, some overridden."""

    def make(ctx: Ctx) -> Any:
        fields: dict[str, Any] = {
            "name": "my.k",
            "source": SRC3,
            "kernel": "k",
            "data": (DataParam("n", arg=2),),
            "dim": 1,
            "grid": ("ceil(n / bx)", "1", "1"),
            "make_args": lambda D, rng: (),
        }
        fields.update(kw)
        return KernelSpec(**fields)

    return make


def _spec_1d() -> KernelSpec:
    return _mk()(None)  # type: ignore[arg-type]


def _spec_2d() -> KernelSpec:
    return hs.mn_spec()


def _load(ctx: Ctx, name: str = ATAX, key: str = "store", **kw: Any) -> Any:
    return klaraptor.load(name, store=Store(ctx.files.get(key, ctx.store), must_exist=True), **kw)


def _store_of(key: str) -> Callable[[Ctx], Store]:
    return lambda ctx: Store(ctx.files[key], must_exist=True)


def _device(ctx: Ctx) -> str:
    return str(ctx.files["device"])


def _numba_scale() -> Any:
    """A numba.cuda.jit kernel (numba imported here: tests/frontends/conftest.py may first pick
    the CUDA simulator; either way nothing below launches it)."""
    from numba import cuda

    def scale(x, y, n):  # noqa: ANN001 - a Numba kernel
        i = cuda.grid(1)
        if i < n:
            y[i] = 2.0 * x[i]

    return cuda.jit(scale)


def _tune_numba(**kw: Any) -> Any:
    return klaraptor.tune(**{"data": {"n": "n"}, "grid": "ceil(n / bx)", **kw})(_numba_scale())


def _kt_import(ctx: Ctx, spec: KernelSpec, **header: Any) -> Any:
    """Import a Kernel Tuner cache written as Kernel Tuner lays it out (one configuration)."""
    from klaraptor.device.profile import recorded_profile
    from klaraptor.frontends.kernel_tuner import import_kernel_tuner

    head = {"device_name": "NVIDIA H200", "kernel_name": spec.kernel, "problem_size": 4096,
            "tune_params_keys": ["block_size_x"], "objective": ["time"], **header}  # fmt: skip
    keys = head["tune_params_keys"]
    record = {**dict.fromkeys(keys, 32), "time": 0.01, "times": [0.01]}
    path = ctx.tmp / f"kt_{spec.kernel}_{len(keys)}.json"
    path.write_text(json.dumps({**head, "cache": {",".join(["32"] * len(keys)): record}}))
    store = Store(ctx.tmp / "kt.sqlite")
    return import_kernel_tuner(path, spec, store=store, device=recorded_profile("h200"))


_SPEC_NM = _mk(
    data=(DataParam("n", arg=2), DataParam("m", arg=2)), dim=2,
    grid=("ceil(n / bx)", "ceil(m / by)", "1"),
)  # fmt: skip


# fmt: off
API: list[tuple[str, str, Callable[[Ctx], Any], type[KlaraptorError], str]] = [
    # the public API
    ("load_unknown", "klaraptor.load('polybench.gem')", lambda c: _load(c, "polybench.gem"), BuildError, "did you mean"),
    ("load_not_built", "klaraptor.load('rodinia.nw.diagonal')", lambda c: _load(c, "rodinia.nw.diagonal"), BuildError, "no build of kernel"),
    ("load_model", "load(..., model='mwp_cwp') of a time_fit build", lambda c: _load(c, GEMM, model="mwp_cwp"), BuildError, "has no build with model"),
    ("load_device", "load(..., device='other GPU')", lambda c: _load(c, device="NVIDIA T4|40 SMs|1590 MHz|mem 5001 MHz|15 GiB"), BuildError, "pass force=True"),
    ("load_missing", "klaraptor.load on a missing store", lambda c: _load(c, key="missing"), StoreError, "there is no klaraptor store"),
    ("load_helper_json", "a build whose helper is invalid JSON", lambda c: _load(c, key="helper_json"), StoreError, "is not valid JSON"),
    ("load_helper_fields", "a build payload without 'kernel'", lambda c: _load(c, key="helper_fields"), StoreError, "KeyError: 'kernel'"),
    ("select_text", "k.select('abc')", lambda c: _load(c).select("abc"), DataSizeError, "'abc' is not an integer"),
    ("select_bool", "k.select(True)", lambda c: _load(c).select(True), DataSizeError, "must be an integer, got True"),
    ("select_bytes", "k.select(b'4096')", lambda c: _load(c).select(b"4096"), DataSizeError, "is bytes"),
    ("select_float", "k.select(4096.5)", lambda c: _load(c).select(4096.5), DataSizeError, "must be an integer"),
    ("select_none", "k.select(None)", lambda c: _load(c).select(None), DataSizeError, "must be an integer"),
    ("select_list", "k.select([1, 2])", lambda c: _load(c).select([1, 2]), DataSizeError, "has 2 values"),
    ("select_dict", "k.select({'M': 1})", lambda c: _load(c).select({"M": 1}), DataSizeError, "unknown ['M']"),
    ("select_array", "k.select(np.array([0]))", lambda c: _load(c).select(np.array([0])), DataSizeError, "outside its range"),
    ("explain_text", "k.explain('N=x')", lambda c: _load(c).explain("N=x"), DataSizeError, "not an integer"),
    ("tuned_without_spec", "k.tuned() of a build without its spec", lambda c: _load(c, "synthetic.mn").tuned(1), KlaraptorError, "launching needs the KernelSpec"),
    ("plan_empty", "klaraptor.plan(spec, [])", lambda c: klaraptor.plan(_spec_1d(), []), BuildError, "list of training sizes is empty"),
    ("plan_twice", "klaraptor.plan(spec, [256, 256])", lambda c: klaraptor.plan(_spec_1d(), [256, 256]), BuildError, "given twice"),
    ("plan_none", "klaraptor.plan(spec) without meta['train_sizes']", lambda c: klaraptor.plan(_spec_1d()), BuildError, "no training sizes given"),
    ("plan_size", "klaraptor.plan(spec, [0])", lambda c: klaraptor.plan(_spec_1d(), [0]), DataSizeError, "outside its range"),
    ("build_no_gpu", "klaraptor.build(spec, sizes) with no GPU and no device", lambda c: klaraptor.build(_spec_1d(), [256], store=Store(c.tmp / "b.sqlite"), collect_data=False ), BuildError, "no GPU to collect on"),
    ("store_put_kernel", "store.put_kernel('x')", lambda c: Store(c.store).put_kernel("x"), StoreError, "takes a KernelRecord"),
    ("store_unregistered", "a measurement of an unregistered kernel", lambda c: Store(c.store).put_measurement(Measurement("nope.k", "d", _spec_1d().size(1), (32, 1, 1), "time", "ok", {}) ), StoreError, "is not registered"),
    ("store_raw_d", "a measurement whose D is a tuple", lambda c: Store(c.store).put_measurement(Measurement(ATAX, "d", (1,), (32, 1, 1), "time", "ok", {}) ), StoreError, "D must be a DataSize"),
    ("store_status", "a measurement with status 'great'", lambda c: Store(c.store).put_measurement(Measurement(ATAX, "d", _load(c).spec.size(1), (32, 1, 1), "time", "great", {}) ), StoreError, "status must be one of"),
    ("store_block", "a measurement with a 2-entry block", lambda c: Store(c.store).put_measurement(Measurement(ATAX, "d", _load(c).spec.size(1), (32, 1), "time", "ok", {}) ), StoreError, "three entries"),
    # store files through the Store API
    ("store_dir", "Store(a directory)", lambda c: Store(c.files["dir"]), StoreError, "is a directory"),
    ("store_empty", "Store(an empty file)", lambda c: Store(c.files["empty"]), StoreError, "the file is empty"),
    ("store_text", "Store(a text file)", lambda c: Store(c.files["text"]), StoreError, "not an SQLite database"),
    ("store_truncated", "Store(a truncated file)", lambda c: Store(c.files["truncated"]), StoreError, "truncated"),
    ("store_corrupt", "Store(a corrupt file)", lambda c: Store(c.files["corrupt"]).builds(), StoreError, "corrupt"),
    ("store_foreign", "Store(another program's database)", lambda c: Store(c.files["foreign"]), StoreError, "not created by klaraptor"),
    ("store_newer", "Store(a schema-99 store)", lambda c: Store(c.files["newer"]), StoreError, "newer klaraptor"),
    ("store_measure_d", "stored measurement D 'x'", lambda c: _store_of("measure_d")(c).measurements(ATAX, _device(c)), StoreError, "the stored record of a measurement"),
    ("store_facts", "stored facts without attributes fields", lambda c: _store_of("facts")(c).collect_facts(ATAX, _device(c)), StoreError, "malformed"),
    ("store_profile", "a stored device profile '[1]'", lambda c: _store_of("profile")(c).device_profiles(), StoreError, "is not a JSON object"),
    ("store_names", "stored data names '5'", lambda c: _store_of("names")(c).kernel(ATAX), StoreError, "data names of kernel"),
    ("store_history_d", "a stored history D of two values", lambda c: _store_of("history_d")(c).history(ATAX, _device(c)), StoreError, "not 1 integers"),
    # specs
    ("spec_arg_outside", "DataParam(arg=9) on a 3-parameter kernel", _mk(data=(DataParam("n", arg=9),)), SpecError, "argument 9 does not exist: the kernel has 3 parameters"),
    ("spec_shape_outside", "DataParam(shape_of=(5, 0)) on a 3-parameter kernel", _mk(data=(DataParam("n", shape_of=(5, 0)),)), SpecError, "argument 5 does not exist"),
    ("spec_outputs_outside", "outputs=(7,) on a 3-parameter kernel", _mk(outputs=(7,)), SpecError, "argument 7 does not exist"),
    ("spec_name", "name='my kernel'", _mk(name="my kernel"), SpecError, "is not a dotted identifier"),
    ("spec_kernel", "kernel='nosuch'", _mk(kernel="nosuch"), SpecError, "no __global__ function named 'nosuch'"),
    ("spec_source", "source=''", _mk(source=""), SpecError, "source: is empty"),
    ("spec_dim", "dim=4", _mk(dim=4), SpecError, "must be 1, 2 or 3"),
    ("spec_grid_len", "grid with two entries", _mk(grid=("n", "1")), SpecError, "must be three expression strings"),
    ("spec_grid_var", "grid over an unknown name", _mk(grid=("ceil(m / bx)", "1", "1")), SpecError, "unknown name 'm'"),
    ("spec_grid_syntax", "grid 'ceil(n / )'", _mk(grid=("ceil(n / )", "1", "1")), SpecError, "grid[0]"),
    ("spec_no_data", "data=()", _mk(data=()), SpecError, "needs at least one DataParam"),
    ("spec_reserved", "DataParam('bx')", _mk(data=(DataParam("bx", arg=2),), grid=("1", "1", "1")), SpecError, "is reserved"),
    ("spec_duplicate", "two DataParams named n", _mk(data=(DataParam("n", arg=2), DataParam("n", arg=1))), SpecError, "duplicate data parameter name"),
    ("spec_two_reads", "DataParam with arg and reader", _mk(data=(DataParam("n", arg=2, reader=len),)), SpecError, "give exactly one of arg / shape_of / reader"),
    ("spec_range", "DataParam(lo=5, hi=1)", _mk(data=(DataParam("n", arg=2, lo=5, hi=1),)), SpecError, "lo 5 > hi 1"),
    ("spec_make_args", "make_args=3", _mk(make_args=3), SpecError, "must be callable"),
    ("spec_make_args_arity", "make_args=lambda D: ()", _mk(make_args=lambda D: ()), SpecError, "must accept (D, rng)"),
    ("spec_reference", "a reference without outputs", _mk(reference=lambda D, h: {}), SpecError, "a reference is given but no output"),
    ("spec_rtol", "rtol=0", _mk(rtol=0), SpecError, "must be a finite number > 0"),
    ("spec_block_zero", "default_block=(0, 1, 1)", _mk(default_block=(0, 1, 1)), SpecError, "dimensions must be >= 1"),
    ("spec_block_dim", "default_block=(32, 2, 1) with dim=1", _mk(default_block=(32, 2, 1)), SpecError, "uses dimensions beyond dim=1"),
    ("spec_constraint", "constraints=['bx <= q']", _mk(constraints=("bx <= q",)), SpecError, "unknown name 'q'"),
    ("spec_smem", "dynamic_smem=64", _mk(dynamic_smem=64), SpecError, "must be an expression string"),
    # annotated files
    ("cu_none", "a .cu file without pragmas", lambda c: read_annotated(c.files["cu_none"]), SpecError, "no '#pragma kernel_info_size_param_idx"),
    ("cu_nodim", "no kernel_info_dim pragma", lambda c: read_annotated(c.files["cu_nodim"]), SpecError, "lacks '#pragma kernel_info_dim_k"),
    ("cu_word", "kernel_info_dim_k = two;", lambda c: read_annotated(c.files["cu_word"]), SpecError, "the value 'two' is not an integer"),
    ("cu_float", "kernel_info_size_param_idx_k = 2.5;", lambda c: read_annotated(c.files["cu_float"]), SpecError, "the value '2.5' is not an integer"),
    ("cu_novalue", "kernel_info_dim_k;", lambda c: read_annotated(c.files["cu_novalue"]), SpecError, "has no value"),
    ("cu_conflict", "kernel_info_dim_k = 1 and = 2", lambda c: read_annotated(c.files["cu_conflict"]), SpecError, "line 3 sets kernel_info_dim to 1, line 8 to 2"),
    ("cu_index", "kernel_info_size_param_idx_k = 5 of 3", lambda c: read_annotated(c.files["cu_index"]), SpecError, "index 5 is outside its 3 parameters"),
    ("cu_pointer", "the size parameter is a pointer", lambda c: read_annotated(c.files["cu_pointer"]), SpecError, "is not an integer size"),
    ("cu_noglobal", "an annotated __device__ function", lambda c: read_annotated(c.files["cu_noglobal"]), SpecError, "has no __global__ definition"),
    ("cu_type", "a half* parameter", lambda c: read_annotated(c.files["cu_type"]), SpecError, "kernel 'k': parameter 'x': unsupported type 'half'"),
    ("cu_dim4", "kernel_info_dim_k = 4", lambda c: read_annotated(c.files["cu_dim4"]), SpecError, "must be 1, 2 or 3"),
    ("cu_nocfg", "no <stem>.<K>.py config", lambda c: read_annotated(c.files["cu_nocfg"]), SpecError, "missing per-kernel config"),
    ("cu_syntax", "a config with a syntax error", lambda c: read_annotated(c.files["cu_syntax"]), SpecError, "not valid Python syntax"),
    ("cu_key", "a config key 'colour'", lambda c: read_annotated(c.files["cu_key"]), SpecError, "unknown key 'colour'"),
    ("cu_literal", "a config value list(range(3))", lambda c: read_annotated(c.files["cu_literal"]), SpecError, "must be a literal"),
    ("cu_grid", "grid = 'ceil(n / bx)'", lambda c: read_annotated(c.files["cu_grid"]), SpecError, "'grid' must be three expression strings"),
    ("cu_arrays", "arrays without y", lambda c: read_annotated(c.files["cu_arrays"]), SpecError, "'arrays' lacks the element count of pointer argument 'y'"),
    ("cu_arrays_type", "arrays = ['x', 'y']", lambda c: read_annotated(c.files["cu_arrays_type"]), SpecError, "'arrays' must be a dict"),
    ("cu_scalars", "a float argument without scalars", lambda c: read_annotated(c.files["cu_scalars"]), SpecError, "'scalars' lacks a value for argument 'a'"),
    ("cu_sizes", "sizes = ['big']", lambda c: read_annotated(c.files["cu_sizes"]), SpecError, "'sizes' must be integers"),
    ("cu_missing", "a .cu path that does not exist", lambda c: read_annotated(c.files["cu_missing"]), SpecError, "no such .cu file"),
    # sizes
    ("size_text", "spec.size('abc')", lambda c: _spec_1d().size("abc"), DataSizeError, "not an integer"),
    ("size_name", "spec.size('M=5')", lambda c: _spec_1d().size("M=5"), DataSizeError, "unknown ['M']"),
    ("size_twice", "spec.size('n=1,n=2')", lambda c: _spec_1d().size("n=1,n=2"), DataSizeError, "n is given twice"),
    ("size_zero", "spec.size(0)", lambda c: _spec_1d().size(0), DataSizeError, "outside its range [1, 2147483647]"),
    ("size_int32", "spec.size(2**31)", lambda c: _spec_1d().size(2**31), DataSizeError, "outside its range"),
    ("size_fraction", "spec.size(1.5)", lambda c: _spec_1d().size(1.5), DataSizeError, "must be an integer"),
    ("size_empty", "spec.size('')", lambda c: _spec_1d().size(""), DataSizeError, "is not an integer"),
    ("size_multi_int", "a 2-parameter spec.size(512)", lambda c: _spec_2d().size(512), DataSizeError, "ambiguous"),
    ("size_multi_text", "a 2-parameter spec.size('512')", lambda c: _spec_2d().size("512"), DataSizeError, "gives no names"),
    ("size_multi_tuple", "a 2-parameter spec.size((1,))", lambda c: _spec_2d().size((1,)), DataSizeError, "has 1 values"),
    ("size_multi_dict", "a 2-parameter spec.size({'M': 1})", lambda c: _spec_2d().size({"M": 1}), DataSizeError, "missing ['N']"),
    ("size_read_args", "spec.read_data(a call with 2 arguments)", lambda c: _spec_1d().read_data((1, 2)), SpecError, "the call has 2 arguments"),
    # front-ends (klaraptor.tune) and Kernel Tuner files
    ("tune_grid_name", "klaraptor.tune(grid='ceil(m / bx)') with data n only", lambda c: _tune_numba(grid="ceil(m / bx)"), SpecError, "names m, which is neither a data parameter (n) nor a block dimension"),
    ("tune_data_name", "klaraptor.tune(data={'n': 'size'}) on scale(x, y, n)", lambda c: _tune_numba(data={"n": "size"}), SpecError, "'size' is not a parameter of scale(x, y, n)"),
    ("tune_on_missing", "klaraptor.tune(on_missing='ask')", lambda c: _tune_numba(on_missing="ask"), SpecError, "on_missing must be one of"),
    ("tune_plain_function", "@klaraptor.tune above a plain Python function", lambda c: klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)")(lambda x, y, n: None), SpecError, "is a plain Python function"),
    ("kt_no_block", "a Kernel Tuner cache without block_size_x/y/z", lambda c: _kt_import(c, _spec_1d(), tune_params_keys=["threads"]), KlaraptorError, "no block dimensions"),
    ("kt_problem_size", "a Kernel Tuner problem_size [512, 256] for data n, m", lambda c: _kt_import(c, _SPEC_NM(c), problem_size=[512, 256]), KlaraptorError, "cannot map data parameter 'n'"),
]
# fmt: on


@pytest.mark.parametrize(("case", "what", "call", "error", "phrase"), API, ids=[c[0] for c in API])
def test_bad_input_api(
    ctx: Ctx,
    case: str,
    what: str,
    call: Callable[[Ctx], Any],
    error: type[KlaraptorError],
    phrase: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(error) as exc:
        call(ctx)
    assert phrase in " ".join(str(exc.value).split()), (what, str(exc.value))


def test_bad_input_suite_is_big_enough() -> None:
    assert len(CLI) + len(API) >= 80
    commands = {w for _, words, _, _ in CLI for w in words[:3] if not w.startswith(("-", "{"))}
    for command in ("build", "select", "explain", "list", "show", "export", "device", "demo",
                    "bench", "import-recorded"):  # fmt: skip
        assert command in commands, command


# -- what must not be an error ------------------------------------------------------------------


def test_bad_input_neighbours_are_accepted(ctx: Ctx, tmp_path: Path) -> None:
    """The inputs next to the refused ones: identical duplicate pragmas, text sizes, names."""
    cu = _cu(tmp_path, "same", GOOD_CU + "#pragma kernel_info_dim_k = 1;\n")
    assert [s.name for s in read_annotated(cu)] == ["same.k"]
    k = _load(ctx)
    assert k.select("4096") == k.select(4096) == k.select("N=4096")
    assert k.select(4096.0).D.values() == (4096,)
    assert _spec_2d().size("M=512,N=1024") == _spec_2d().size({"N": 1024, "M": 512})
    assert json.dumps(k.select(4096).grid)
