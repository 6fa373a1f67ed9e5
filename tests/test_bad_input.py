"""The bad-input suite: every input a user can get wrong, the error it must give, and a phrase
its message must contain (issue 15).

Each table row is (id, the input, the expected error class, the phrase). CLI rows run the real
`klaraptor` entry point (in-process; a sample again in a subprocess) and check the exit code
documented for the class (README "Exit codes"), the phrase on stderr and that no traceback
appears. API rows run Python calls: the public API, specs, annotated files, store files and sizes.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
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
SPEC1D = KernelSpec(name="my.k", source='extern "C" __global__ void k(const float* x, float* y, int n) { }',
                    kernel="k", data=(DataParam("n", arg=2),), dim=1, grid=("ceil(n / bx)", "1", "1"),
                    make_args=make_args)
EMPTYLIST = []
BIGSIZES = KernelSpec(name="my.bigsizes", source=SRC, kernel="add",
                      data=(DataParam("rows", arg=2), DataParam("cols", arg=3)), dim=2,
                      grid=("ceil(cols / bx)", "ceil(rows / by)", "1"), make_args=make_args,
                      meta={"train_sizes": "big"})
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
    # issue 38: companion files, comments, directories named like files
    f["cu_dir"] = tmp / "adir.cu"
    f["cu_dir"].mkdir()
    f["cu_upper"] = tmp / "UPPER.CU"
    f["cu_cfg_dir"] = _cu(tmp, "cfgdir", GOOD_CU, None)
    (tmp / "cfgdir.k.py").mkdir()
    f["cu_grid_twice"] = _cu(tmp, "gridtwice", GOOD_CU, GOOD_CFG + 'grid = ("n", "1", "1")\n')
    f["cu_arrays_name"] = _cu(
        tmp, "arrname", GOOD_CU, GOOD_CFG.replace('"y": "n"}', '"y": "n", "z": "n"}')
    )
    f["cu_arrays_size"] = _cu(tmp, "arrsize", GOOD_CU, GOOD_CFG.replace('"y": "n"', '"y": "m"'))
    f["cu_sizes_empty"] = _cu(tmp, "sizesempty", GOOD_CU, GOOD_CFG + "sizes = []\n")
    f["cu_sizes_twice"] = _cu(tmp, "sizestwice", GOOD_CU, GOOD_CFG + "sizes = [256, 512, 256]\n")
    f["cu_block"] = _cu(tmp, "bigblock", GOOD_CU, GOOD_CFG + "default_block = [2048, 1, 1]\n")
    commented = GOOD_CU.replace("#pragma kernel_info_size", "/* #pragma kernel_info_size").replace(
        "dim_k = 1;\n", "dim_k = 1; */\n"
    )
    f["cu_comment"] = _cu(tmp, "comment", commented)
    (tmp / "badinput_mod.py").write_text(MODULE)
    (tmp / "syntaxerr_mod.py").write_text("SPEC = (\n")
    (tmp / "raising_mod.py").write_text("raise RuntimeError('boom in user module')\n")
    f["kt_zero"] = _kt_file(tmp, _spec_1d(), time_ms=0.0)
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
    ("explain_limit_word", ("explain", GEMM, "4096", "--limit", "many"), Usage, "argument --limit: 'many' is not an integer"),
    ("export_lang", ("export", GEMM, "--lang", "java"), Usage, "invalid choice"),
    # build
    ("build_unknown_target", ("build", "polybench.nothing"), KlaraptorError, "unknown kernel 'polybench.nothing'"),
    ("build_no_gpu", ("build", GEMM), CollectError, "no CUDA GPU"),
    ("build_sizes_twice", ("build", GEMM, "--sizes", "1024,1024", "--dry-run"), KlaraptorError, "--sizes gives N=1024 twice"),
    ("build_sizes_word", ("build", GEMM, "--sizes", "256,big", "--dry-run"), DataSizeError, "'big' is not an integer"),
    ("build_sizes_zero", ("build", GEMM, "--sizes", "0,256", "--dry-run"), DataSizeError, "outside its range"),
    ("build_sizes_empty", ("build", GEMM, "--sizes", ",", "--dry-run"), KlaraptorError, "--sizes is empty"),
    ("build_sizes_name", ("build", GEMM, "--sizes", "M=256", "--dry-run"), DataSizeError, "unknown ['M']"),
    ("build_model", ("build", GEMM, "--model", "nosuch", "--dry-run"), Usage, "invalid choice: 'nosuch'"),
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
    ("explain_limit_negative", ("explain", GEMM, "4096", "--limit", "-3"), Usage, "argument --limit: must be at least 1, got -3"),
    ("explain_limit_zero", ("explain", GEMM, "4096", "--limit", "0"), Usage, "argument --limit: must be at least 1, got 0"),
    ("explain_size", ("explain", GEMM, "N=0"), DataSizeError, "outside its range"),
    ("explain_unknown", ("explain", "gemm", "4096"), BuildError, "unknown kernel 'gemm'"),
    ("show_unknown", ("show", "polybench.atax.k9"), BuildError, "did you mean 'polybench.atax.k1'"),
    ("show_model", ("show", ATAX, "--model", "time_fit"), BuildError, "has no build with model 'time_fit'"),
    ("export_no_dir", ("export", GEMM, "-o", "/nonexistent/dir/x.h"), Usage, "the directory /nonexistent/dir does not exist"),
    ("export_unknown", ("export", "polybench.gem", "--lang", "python"), BuildError, "unknown kernel"),
    ("export_to_dir", ("export", GEMM, "-o", "{dir}"), Usage, "is a directory; name a file in it"),
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
    ("demo_plot", ("demo", "--recorded", "--plot", "/nonexistent/dir/x.png"), Usage, "does not exist"),
    ("bench_collect", ("bench", "collect"), CollectError, "needs a CUDA GPU"),
    ("bench_report_out", ("bench", "report", "--out", "{text}/x"), KlaraptorError, "cannot create the directory"),
    ("bench_export_provenance", ("bench", "export", "--out", "{tmp}/x.json.gz", "--provenance", "{tmp}/none.json"), KlaraptorError, "--provenance"),
    ("bench_export_bad_json", ("bench", "export", "--out", "{tmp}/x.json.gz", "--provenance", "{text}"), KlaraptorError, "not valid JSON"),
    ("import_unknown", ("import-recorded", "--kernels", "polybench.gem"), KlaraptorError, "names no recorded kernel"),
    ("import_jobs", ("import-recorded", "--jobs", "0"), Usage, "argument --jobs: must be at least 1, got 0"),
    ("import_model", ("import-recorded", "--model", "nosuch"), KlaraptorError, "unknown model 'nosuch'"),
    ("import_store_dir", ("--store", "{dir}", "import-recorded", "--kernels", ATAX), StoreError, "is a directory"),
    # issue 38: option values are checked by argparse before any work (usage errors, exit 2)
    ("store_empty_path", ("--store", "", "list"), Usage, "argument --store: is empty"),
    ("select_kernel_empty", ("select", "", "4096"), Usage, "argument kernel: is empty"),
    ("export_output_empty", ("export", GEMM, "-o", ""), Usage, "argument -o/--output: is empty"),
    ("device_recorded_empty", ("device", "--recorded", ""), Usage, "argument --recorded: is empty"),
    ("demo_plot_empty", ("demo", "--recorded", "--plot", ""), Usage, "argument --plot: is empty"),
    ("demo_plot_hidden", ("demo", "--recorded", "--plot", "{tmp}/.png"), Usage, "give a file name with an image suffix"),
    ("demo_plot_format", ("demo", "--recorded", "--plot", "{tmp}/x.xyz"), Usage, "format 'xyz' is not one matplotlib writes"),
    ("demo_plot_dir", ("demo", "--recorded", "--plot", "{dir}"), Usage, "is a directory; name a file in it"),
    ("build_budget_zero", ("build", GEMM, "--budget", "0", "--dry-run"), Usage, "argument --budget: must be a number >= 1"),
    ("build_prior_keep_alone", ("build", GEMM, "--prior-keep", "3", "--dry-run"), KlaraptorError, "--prior-keep K needs --prior MODEL, one of"),
    ("build_prior_keep_zero", ("build", GEMM, "--prior", "snowpack", "--prior-keep", "0", "--dry-run"), Usage, "argument --prior-keep: must be at least 1, got 0"),
    ("build_prior_model", ("build", GEMM, "--prior", "snowpack", "--model", "time_fit", "--dry-run"), KlaraptorError, "--prior orders a budgeted build's sweep"),
    ("build_prior_unknown", ("build", GEMM, "--prior", "nope", "--dry-run"), KlaraptorError, "unknown prior 'nope': a prior is a model that ranks candidates without measuring (saake, snowpack)"),
    ("build_gpus_zero", ("build", GEMM, "--gpus", "0"), Usage, "argument --gpus: must be at least 1, got 0"),
    ("build_dask_timeout", ("build", GEMM, "--dask", "tcp://127.0.0.1:1", "--dask-timeout", "-1"), Usage, "argument --dask-timeout: must be greater than 0"),
    ("build_dask_address", ("build", GEMM, "--dask", "notaurl", "--dask-timeout", "3"), KlaraptorError, "'notaurl' is not a Dask scheduler address"),
    ("bench_report_jobs", ("bench", "report", "--recorded", "--jobs", "0", "--out", "{tmp}/rep"), Usage, "argument --jobs: must be at least 1, got 0"),
    ("bench_collect_budget", ("bench", "collect", "--budget", "nan"), Usage, "argument --budget: must be a finite number"),
    ("bench_saake_kernels", ("bench", "saake", "--kernels", "nosuch", "--out", "{tmp}/sk"), KlaraptorError, "--kernels 'nosuch' names no recorded kernel"),
    ("prune_keep_zero", ("prune", "--keep", "0"), Usage, "argument --keep: must be at least 1, got 0"),
    ("prune_unknown", ("prune", "nosuch.k"), KlaraptorError, "no build of kernel 'nosuch.k'"),
    ("rm_unknown", ("rm", "polybench.gemm.gem"), BuildError, "did you mean 'polybench.gemm.gemm'"),
    # issue 38: a user's module that fails to import is the user's error, with its own message
    ("build_module_no_name", ("build", ":SPEC", "--dry-run"), KlaraptorError, "give module:ATTR"),
    ("build_module_syntax", ("build", "syntaxerr_mod:SPEC", "--dry-run"), KlaraptorError, "module 'syntaxerr_mod' has a syntax error at"),
    ("build_module_raises", ("build", "raising_mod:SPEC", "--dry-run"), KlaraptorError, "importing module 'raising_mod' raised RuntimeError: boom in user module"),
    ("build_module_empty_list", ("build", "badinput_mod:EMPTYLIST", "--dry-run"), KlaraptorError, "is an empty list: it names no kernel"),
    ("build_meta_sizes_word", ("build", "badinput_mod:BIGSIZES", "--dry-run"), DataSizeError, "meta['train_sizes'] must be a list"),
    ("build_cu_upper", ("build", "{cu_upper}", "--dry-run"), SpecError, "UPPER.CU: no such .cu file"),
    ("build_cu_dir", ("build", "{cu_dir}", "--dry-run"), SpecError, "is a directory, not a .cu file"),
    ("build_cu_cfg_dir", ("build", "{cu_cfg_dir}", "--dry-run"), SpecError, "cfgdir.k.py: is a directory"),
    ("build_cu_sizes_empty", ("build", "{cu_sizes_empty}", "--dry-run"), SpecError, "'sizes' is empty"),
    ("build_cu_sizes_twice", ("build", "{cu_sizes_twice}", "--dry-run"), SpecError, "'sizes' gives [256] more than once"),
    ("build_cu_comment", ("build", "{cu_comment}", "--dry-run"), SpecError, "no '#pragma kernel_info_size_param_idx"),
    ("build_cu_block", ("build", "{cu_block}", "--dry-run"), SpecError, "has 2048 threads; CUDA allows at most 1024"),
    # issue 38: Kernel Tuner files
    ("import_kt_zero", ("--store", "{tmp}/ktz.sqlite", "import-kt", "{kt_zero}", "badinput_mod:SPEC1D", "--profile", "h200"), KlaraptorError, "a launch takes time"),
    ("export_kt_no_dir", ("export-kt", GEMM, "-o", "/nonexistent/dir/x.json"), Usage, "the directory /nonexistent/dir does not exist"),
    ("export_kt_dir", ("export-kt", GEMM, "-o", "{dir}"), Usage, "is a directory; name a file in it"),
    ("export_kt_unmeasured", ("export-kt", "polybench.mvt.k1", "-o", "{tmp}/mvt.json"), KlaraptorError, "has no measurements in"),
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


def _kt_file(tmp: Path, spec: KernelSpec, time_ms: float = 0.01, **header: Any) -> Path:
    """A Kernel Tuner cache written as Kernel Tuner lays it out (one configuration)."""
    head = {"device_name": "NVIDIA H200", "kernel_name": spec.kernel, "problem_size": 4096,
            "tune_params_keys": ["block_size_x"], "objective": ["time"], **header}  # fmt: skip
    keys = head["tune_params_keys"]
    record = {**dict.fromkeys(keys, 32), "time": time_ms, "times": [time_ms] * 3}
    path = tmp / f"kt_{spec.kernel}_{len(keys)}_{time_ms:g}.json"
    path.write_text(json.dumps({**head, "cache": {",".join(["32"] * len(keys)): record}}))
    return path


def _kt_import(ctx: Ctx, spec: KernelSpec, time_ms: float = 0.01, **header: Any) -> Any:
    """Import a Kernel Tuner cache written as Kernel Tuner lays it out (one configuration)."""
    from klaraptor.device.profile import recorded_profile
    from klaraptor.frontends.kernel_tuner import import_kernel_tuner

    path = _kt_file(ctx.tmp, spec, time_ms, **header)
    store = Store(ctx.tmp / "kt.sqlite")
    return import_kernel_tuner(path, spec, store=store, device=recorded_profile("h200"))


def _edited(name: str) -> KernelSpec:
    """A suite kernel's spec with its source edited (a new version of it)."""
    from klaraptor import suite

    spec = suite.get(name)
    return dataclasses.replace(spec, source=spec.source + "\n// edited\n")


def _export_t4(ctx: Ctx, path: str) -> Any:
    from klaraptor import suite
    from klaraptor.frontends.kernel_tuner import export_t4

    return export_t4(Store(ctx.store), suite.get(GEMM), _device(ctx), path)


def _connect(address: str, **kw: Any) -> Any:
    from klaraptor.collect.dask.cluster import connect

    return connect(address, **kw)


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
    # issue 38: one validation layer for the public API's arguments (klaraptor.core.validate)
    ("load_name_int", "klaraptor.load(123)", lambda c: klaraptor.load(123, store=Store(c.store)), KlaraptorError, "the kernel name must be a string such as 'polybench.gemm.gemm', got int 123"),
    ("load_name_none", "klaraptor.load(None)", lambda c: klaraptor.load(None, store=Store(c.store)), KlaraptorError, "got NoneType None"),
    ("load_store_path", "load(name, store='/nonexistent/x.sqlite')", lambda c: klaraptor.load(GEMM, store=str(c.files["missing"])), StoreError, "there is no klaraptor store"),
    ("load_store_int", "load(name, store=42)", lambda c: klaraptor.load(GEMM, store=42), StoreError, "store= must be a klaraptor.store.Store or the path of one, got int 42"),
    ("load_model_int", "load(name, model=5)", lambda c: _load(c, model=5), KlaraptorError, "model= must be a string, got int 5"),
    ("load_spec_unrelated", "load(name, spec=<an unrelated spec>)", lambda c: _load(c, GEMM, spec=_spec_1d()), BuildError, "the spec is that of kernel 'my.k', not of 'polybench.gemm.gemm'"),
    ("load_spec_stale", "load(name, spec=<same name, edited source>)", lambda c: _load(c, ATAX, spec=_edited(ATAX)), BuildError, "was made from another version of its spec"),
    ("load_spec_type", "load(name, spec='x')", lambda c: _load(c, ATAX, spec="x"), SpecError, "spec= must be a klaraptor.KernelSpec"),
    ("launcher_refine_text", "k.launcher(refine='4')", lambda c: _load(c).launcher(refine="4"), KlaraptorError, "refine must be an integer, got str '4'"),
    ("launcher_refine_bool", "k.launcher(refine=True)", lambda c: _load(c).launcher(refine=True), KlaraptorError, "refine must be an integer, got bool True"),
    ("launcher_refine_negative", "k.launcher(refine=-1)", lambda c: _load(c).launcher(refine=-1), KlaraptorError, "refine must be at least 0"),
    ("plan_sizes_int", "klaraptor.plan(spec, 256)", lambda c: klaraptor.plan(_spec_1d(), 256), DataSizeError, "the training sizes must be a list such as [256, 512, 1024]"),
    ("plan_sizes_text", "klaraptor.plan(spec, '256')", lambda c: klaraptor.plan(_spec_1d(), "256"), DataSizeError, "a string is not a list"),
    ("plan_sizes_dict", "klaraptor.plan(spec, {'n': 256})", lambda c: klaraptor.plan(_spec_1d(), {"n": 256}), DataSizeError, "got a mapping"),
    ("plan_spec_none", "klaraptor.plan(None, [256])", lambda c: klaraptor.plan(None, [256]), SpecError, "spec must be a klaraptor.KernelSpec, got NoneType None"),
    ("plan_spec_name", "klaraptor.plan('polybench.gemm.gemm', [256])", lambda c: klaraptor.plan(GEMM, [256]), SpecError, "klaraptor.suite.get('polybench.gemm.gemm')"),
    *[(f"plan_budget_{i}", f"klaraptor.plan(spec, [256], budget={b!r})", lambda c, b=b: klaraptor.plan(_spec_1d(), [256], budget=b), BuildError, "budget must be a number >= 1")
      for i, b in enumerate((0.5, -1, "2", math.nan, math.inf, 0, True))],
    ("build_budget_text", "klaraptor.build(spec, [256], budget='2')", lambda c: klaraptor.build(_spec_1d(), [256], budget="2"), BuildError, "budget must be a number >= 1 (a multiple of tune-once's measurement cost) or None"),
    ("build_budget_bool", "klaraptor.build(spec, [256], budget=True)", lambda c: klaraptor.build(_spec_1d(), [256], budget=True), BuildError, "got bool True"),
    ("build_store_int", "klaraptor.build(spec, [256], store=42)", lambda c: klaraptor.build(_spec_1d(), [256], store=42), StoreError, "store= must be"),
    ("build_model_int", "klaraptor.build(spec, [256], model=5)", lambda c: klaraptor.build(_spec_1d(), [256], model=5), KlaraptorError, "model must be a string"),
    ("plan_prior_keep", "klaraptor.plan(spec, sizes, prior='snowpack', prior_keep=0)", lambda c: klaraptor.plan(_spec_1d(), [256, 512], prior="snowpack", prior_keep=0), BuildError, "prior_keep must be at least 1"),
    ("meta_sizes_word", "meta={'train_sizes': 'big'}", lambda c: klaraptor.plan(_mk(meta={"train_sizes": "big"})(c)), DataSizeError, "my.k: meta['train_sizes'] must be a list"),
    ("spec_hi_c_type", "DataParam('n', arg=2, hi=2**40) on a C int n", _mk(data=(DataParam("n", arg=2, hi=2**40),)), SpecError, "a C int holds at most 2147483647"),
    ("spec_block_threads", "default_block=(2048, 1, 1)", _mk(default_block=(2048, 1, 1)), SpecError, "(2048, 1, 1) has 2048 threads; CUDA allows at most 1024 per block"),
    ("spec_block_z", "default_block=(1, 1, 128)", _mk(dim=3, default_block=(1, 1, 128)), SpecError, "block dimension z is 128; CUDA allows 64"),
    ("spec_block_product", "default_block=(64, 32, 1)", _mk(dim=2, default_block=(64, 32, 1)), SpecError, "has 2048 threads; CUDA allows at most 1024"),
    ("tune_constraints_int", "tune(constraints=5)", lambda c: _tune_numba(constraints=5), SpecError, "tune(constraints=...) must be a list such as ['bx <= n'], got int 5"),
    ("tune_constraints_text", "tune(constraints='bx <= n')", lambda c: _tune_numba(constraints="bx <= n"), SpecError, "a string is not a list"),
    ("tune_outputs_int", "tune(outputs=5)", lambda c: _tune_numba(outputs=5), SpecError, "tune(outputs=...) must be a list"),
    ("tune_name", "tune(name='bad name!')", lambda c: _tune_numba(name="bad name!"), SpecError, "'bad name!' is not a dotted identifier"),
    ("tune_sizes_word", "tune(sizes='big')", lambda c: _tune_numba(sizes="big"), DataSizeError, "tune(sizes=...) must be a list"),
    ("tune_data_reserved", "tune(data={'bx': 'n'})", lambda c: _tune_numba(data={"bx": "n"}), SpecError, "data 'bx': the name 'bx' is reserved"),
    ("tune_default_block", "tune(default_block=(2048, 1, 1))", lambda c: _tune_numba(default_block=(2048, 1, 1)), SpecError, "has 2048 threads; CUDA allows at most 1024"),
    ("tune_dim", "tune(dim=4)", lambda c: _tune_numba(dim=4), SpecError, "tune(dim=...) must be at most 3"),
    ("tune_store_int", "tune(store=42)", lambda c: _tune_numba(store=42), StoreError, "store= must be"),
    ("cu_upper", "a missing UPPER.CU", lambda c: read_annotated(c.files["cu_upper"]), SpecError, "no such .cu file"),
    ("cu_dir", "a directory named x.cu", lambda c: read_annotated(c.files["cu_dir"]), SpecError, "is a directory, not a .cu file"),
    ("cu_cfg_dir", "a companion .k.py that is a directory", lambda c: read_annotated(c.files["cu_cfg_dir"]), SpecError, "is a directory; the per-kernel config must be a file"),
    ("cu_grid_twice", "a companion assigning grid twice", lambda c: read_annotated(c.files["cu_grid_twice"]), SpecError, "'grid' is assigned again (first at line 1)"),
    ("cu_arrays_name", "arrays naming a non-existent argument", lambda c: read_annotated(c.files["cu_arrays_name"]), SpecError, "'arrays' names 'z', which is not one of the kernel's pointer arguments (x, y)"),
    ("cu_arrays_size", "an element count over a non-existent size", lambda c: read_annotated(c.files["cu_arrays_size"]), SpecError, "is not an element count over the size parameter 'n'"),
    ("cu_sizes_empty", "sizes = []", lambda c: read_annotated(c.files["cu_sizes_empty"]), SpecError, "'sizes' is empty"),
    ("cu_sizes_twice", "sizes = [256, 512, 256]", lambda c: read_annotated(c.files["cu_sizes_twice"]), SpecError, "'sizes' gives [256] more than once"),
    ("cu_comment", "pragmas inside a /* */ comment", lambda c: read_annotated(c.files["cu_comment"]), SpecError, "no '#pragma kernel_info_size_param_idx"),
    ("cu_block", "a companion default_block = [2048, 1, 1]", lambda c: read_annotated(c.files["cu_block"]), SpecError, "has 2048 threads"),
    ("kt_zero_times", "a Kernel Tuner file whose times are all zero", lambda c: _kt_import(c, _spec_1d(), time_ms=0.0), KlaraptorError, "its time is 0.0 ms: a launch takes time"),
    ("kt_export_no_dir", "export_t4 to /nonexistent/dir/x.json", lambda c: _export_t4(c, "/nonexistent/dir/x.json"), KlaraptorError, "the directory /nonexistent/dir does not exist"),
    ("dask_address", "distributed.cluster.connect('notaurl')", lambda c: _connect("notaurl"), KlaraptorError, "'notaurl' is not a Dask scheduler address"),
    ("dask_timeout", "connect(address, timeout_s=-1)", lambda c: _connect("tcp://127.0.0.1:1", timeout_s=-1), KlaraptorError, "must be greater than 0"),
    ("store_path_int", "Store(42)", lambda c: Store(42), StoreError, "a store's path must be a str or a Path, got int 42"),
    ("store_path_empty", "Store('')", lambda c: Store(""), StoreError, "a store's path is empty"),
    ("store_timeout", "Store(path, timeout='x')", lambda c: Store(c.tmp / "t.sqlite", timeout="x"), StoreError, "the store's timeout (seconds) must be a number"),
    ("plan_device_name", "klaraptor.plan(spec, sizes, device='h200')", lambda c: klaraptor.plan(_spec_1d(), [256], device="h200"), KlaraptorError, "recorded_profile('h200')"),
    ("plan_space", "klaraptor.plan(spec, sizes, space='x')", lambda c: klaraptor.plan(_spec_1d(), [256], space="x"), KlaraptorError, "space= must be a ConfigSpace"),
    ("build_device_name", "klaraptor.build(spec, sizes, device='h200')", lambda c: klaraptor.build(_spec_1d(), [256], device="h200"), KlaraptorError, "device= must be a DeviceProfile"),
    ("build_fit", "klaraptor.build(spec, sizes, fit=5)", lambda c: klaraptor.build(_spec_1d(), [256], fit=5), KlaraptorError, "fit= must be a FitOptions"),
    ("build_collect_data", "klaraptor.build(spec, sizes, collect_data='no')", lambda c: klaraptor.build(_spec_1d(), [256], collect_data="no"), KlaraptorError, "collect_data= must be True or False, got str 'no'"),
    ("load_force", "klaraptor.load(name, force='yes')", lambda c: _load(c, force="yes"), KlaraptorError, "force= must be True or False"),
    ("tune_device_name", "tune(device='h200')", lambda c: _tune_numba(device="h200"), KlaraptorError, "tune(device=...) must be a DeviceProfile"),
    ("store_delete_keep", "store.delete_builds(keep=-1)", lambda c: Store(c.store).delete_builds(keep=-1), StoreError, "keep must be an integer >= 0"),
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


def test_bad_input_issue_38_neighbours_are_accepted(
    ctx: Ctx, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Valid inputs next to issue 38's refused ones get the right result."""
    from klaraptor import suite

    k = _load(ctx)
    assert k.select(np.array(4096)) == k.select(4096)  # a 0-d array is its scalar
    assert k.select(np.int64(4096)) == k.select(4096)
    # The spec that was built is accepted (its fingerprint matches the stored one).
    assert _load(ctx, ATAX, spec=suite.get(ATAX)).spec is not None
    # A path is a store.
    assert klaraptor.load(ATAX, store=str(ctx.store)).name == ATAX
    # Sizes as a tuple, a generator, a NumPy array.
    spec = _spec_1d()
    assert len(klaraptor.plan(spec, (256, 512), budget=None)) > 0
    assert len(klaraptor.plan(spec, (s for s in (256, 512)), budget=None)) > 0
    assert len(klaraptor.plan(spec, np.array([256, 512]), budget=None)) > 0
    # A per-configuration model measures every point whatever the budget: its plan says so.
    assert klaraptor.plan(spec, [256, 512], budget=2, model="time_fit").plan is None
    # A C short bounds D: the default range narrows to what the argument holds.
    short = _mk(source=SRC3.replace("int n", "short n"))(ctx)
    assert short.data[0].hi == 2**15 - 1
    assert (
        _mk(source=SRC3.replace("int n", "long n"), data=(DataParam("n", arg=2, hi=2**40),))(ctx)
        .data[0]
        .hi
        == 2**40
    )
    # Comments are no code: a commented-out conflicting pragma, comment markers inside strings.
    cu = _cu(
        tmp_path,
        "cmt",
        GOOD_CU + "/* #pragma kernel_info_dim_k = 2; */\n// #pragma kernel_info_dim_k = 3;\n",
    )
    assert [s.name for s in read_annotated(cu)] == ["cmt.k"]
    assert _mk(
        source='extern "C" __global__ void k(const float* x, float* y, int n) { const char* s = "/*"; }'
    )(ctx)
    # export-kt to a missing directory creates none.
    monkeypatch.chdir(ctx.tmp)
    rc, _, _ = _run(
        ["--store", str(ctx.store), "export-kt", GEMM, "-o", str(tmp_path / "no" / "x.json")],
        capsys,
    )
    assert rc == 2 and not (tmp_path / "no").exists()
    # --model time_fit with a budget: the dry run shows the full collection build() makes.
    rc, out, _ = _run(["build", GEMM, "--model", "mwp_cwp", "--budget", "2", "--dry-run"], capsys)
    assert rc == 0 and "--budget does not apply" in out and "full collection" in out
    assert "budgeted plan" not in out


def test_bad_input_warnings_are_klaraptor_warnings() -> None:
    """A grid rule over by with dim=1, and on_missing='default', warn with KlaraptorWarning."""
    from klaraptor.core.errors import KlaraptorWarning
    from klaraptor.store import Store as S

    with pytest.warns(KlaraptorWarning, match=r"grid\[1\] 'ceil\(n / by\)' uses by, but dim=1"):
        _mk(grid=("ceil(n / bx)", "ceil(n / by)", "1"))(None)  # type: ignore[arg-type]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tuned = _tune_numba(on_missing="default", store=S(Path(tmp) / "t.sqlite"))
        x = np.ones(1024, np.float32)
        with pytest.warns(KlaraptorWarning, match="launching with the default block"):
            tuned.plan_for(x, np.empty_like(x), np.int32(1024))


def test_bad_input_reprs_are_short(ctx: Ctx) -> None:
    k = _load(ctx, GEMM)
    text = repr(k)
    assert (
        text.startswith("<klaraptor.Kernel polybench.gemm.gemm: model")
        and "candidate blocks" in text
    )
    plan = klaraptor.plan(_spec_1d(), [256, 512])
    assert repr(plan).startswith("<BuildPlan my.k:") and len(repr(plan)) < 200
