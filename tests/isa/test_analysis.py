"""KernelISA: the recorded suite analyses, features, JSON round trip, real NVRTC compiles."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from klaraptor import suite
from klaraptor.core.errors import CompileError
from klaraptor.isa import analysis, compile
from klaraptor.isa.errors import DisassemblyError
from tests.isa.helpers import needs_tools

# Loop nesting read from the CUDA sources in klaraptor/suite/polybench.py (0: no loop).
EXPECTED_DEPTH = {
    "polybench.conv2d.conv2d": 0,
    "polybench.conv3d.conv3d": 0,
    "polybench.corr.k3": 0,
    "polybench.covar.k2": 0,
    "polybench.gramschm.k2": 0,
    "polybench.fdtd2d.k1": 0,
    "polybench.fdtd2d.k2": 0,
    "polybench.fdtd2d.k3": 0,
    "polybench.corr.k4": 2,
    "polybench.covar.k3": 2,
}


@pytest.fixture(scope="module")
def recorded():
    return analysis.load_recorded()


def test_every_suite_kernel_is_recorded_from_its_current_source(recorded):
    for spec in suite.all_specs():
        if spec.params:  # per-variant ISA records come with the program-parameter analysis
            continue
        assert spec.name in recorded, f"{spec.name} is not recorded: run scripts/record_isa.py"
        assert recorded[spec.name].fingerprint == spec.fingerprint(), (
            f"{spec.name} changed since it was recorded: run "
            f"python scripts/record_isa.py {spec.name}"
        )


def test_recorded_provenance():
    prov = analysis.load_recorded_raw()["provenance"]
    for key in ("date", "command", "commit", "arch", "nvrtc", "cuobjdump", "nvdisasm"):
        assert prov.get(key), key
    assert prov["arch"] == "sm_90"


def test_loop_depths_match_the_sources(recorded):
    for name, isa in recorded.items():
        if not name.startswith("polybench."):
            continue
        want = EXPECTED_DEPTH.get(name, 1)
        assert isa.sass_cfg.max_depth == want, name
        assert isa.loop_summary()["ptx_max_depth_with_calls"] == want, name


def test_features_are_complete_and_finite(recorded):
    names = analysis.feature_names()
    assert len(names) > 100
    for name, isa in recorded.items():
        assert list(isa.features) == names, name
        assert all(math.isfinite(v) for v in isa.features.values()), name
        assert isa.features["registers"] > 0
        assert isa.features["sass_total"] == sum(isa.sass_mix().values())
        assert isa.features["reads_memory"] == 1.0
        assert isa.unknown_sass == [] and isa.unknown_ptx == [], name
    assert recorded["polybench.gramschm.k1"].features["dynamic_shared"] == 1.0
    assert recorded["polybench.gemm.gemm"].features["dynamic_shared"] == 0.0
    assert recorded["polybench.gramschm.k1"].features["barriers"] >= 1


def test_block_mix_adds_up(recorded):
    isa = recorded["polybench.corr.k4"]
    total: dict[str, int] = {}
    for counts in isa.block_mix():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    assert total == isa.sass_mix()


def test_instruction_table(recorded):
    isa = recorded["polybench.gemm.gemm"]
    rows = isa.instruction_table()
    assert len(rows) == len(isa.instructions)
    ldg = next(r for r in rows if r["opcode"] == "LDG")
    assert ldg["cls"] == "global_load" and ldg["pipe"] == "lsu" and ldg["space"] == "global"
    assert ldg["write_sb"] is not None and ldg["depth"] == 1
    json.dumps(rows)  # plain values only


def test_json_round_trip(recorded):
    isa = recorded["polybench.corr.k3"]  # subroutines (square root slow path)
    again = analysis.KernelISA.from_dict(json.loads(json.dumps(isa.to_dict())))
    assert again.features == isa.features
    assert again.instruction_table() == isa.instruction_table()
    assert len(again.sass_cfg.roots) > 1


def test_bad_records_are_clear_errors(recorded):
    d = recorded["polybench.gemm.gemm"].to_dict()
    with pytest.raises(analysis.KlaraptorError, match="format 99.*scripts/record_isa.py"):
        analysis.KernelISA.from_dict({**d, "format": 99})
    with pytest.raises(analysis.KlaraptorError, match="malformed"):
        analysis.KernelISA.from_dict({k: v for k, v in d.items() if k != "sass"})
    with pytest.raises(analysis.KlaraptorError, match="scripts/record_isa.py"):
        analysis.load_recorded("/nonexistent/isa.json.gz")


# ---------------------------------------------------------------------------------------------
# Real NVRTC + cuobjdump (skipped without the isa extra)


@needs_tools
@pytest.mark.parametrize("name", ["polybench.gemm.gemm", "polybench.gramschm.k1"])
def test_analyze_matches_the_record(name, recorded):
    spec = suite.get(name)
    isa = analysis.analyze(spec)
    assert isa.options[: len(spec.options)] == spec.options
    assert "-ftz=true" in isa.options
    assert isa.tools["nvrtc"] == compile.nvrtc_version()
    rec = recorded[name]
    if isa.tools["nvrtc"] != rec.tools["nvrtc"]:
        pytest.skip(f"NVRTC {isa.tools['nvrtc']} here, the record used {rec.tools['nvrtc']}")
    assert isa.to_dict()["sass"] == rec.to_dict()["sass"]
    assert isa.features == rec.features


@needs_tools
def test_compile_outputs_and_errors():
    res = compile.compile_source('extern "C" __global__ void k(float* a) { a[0] = 1.0f; }')
    assert res.cubin[:4] == b"\x7fELF" and ".entry k(" in res.ptx and res.arch == "sm_90"
    assert res.options == compile.CUPY_EXTRA_OPTIONS
    plain = compile.compile_source('extern "C" __global__ void k() {}', match_cupy=False)
    assert plain.options == ()
    with pytest.raises(CompileError, match='identifier "y" is undefined') as exc:
        compile.compile_source('extern "C" __global__ void k(float* a) { a[0] = y; }')
    assert "NVRTC log" in str(exc.value) and exc.value.log
    with pytest.raises(CompileError, match="not of the form"):
        compile.compile_source('extern "C" __global__ void k() {}', arch="hopper")
    assert compile.arch_names("90") == ("sm_90", "compute_90")


@needs_tools
def test_mangled_kernel_name_is_explained():
    spec = dataclasses.replace(
        suite.get("polybench.gemm.gemm"),
        name="test.mangled",
        source=(
            "__global__ void mangled(const float* a, const float* b, float* c, float alpha,"
            " float beta, int N) { c[0] = (float)N; }"
        ),
        kernel="mangled",
    )
    with pytest.raises(DisassemblyError, match='extern "C"'):
        analysis.analyze(spec)


@needs_tools
def test_missing_tools_in_analyze(tmp_path):
    with pytest.raises(analysis.KlaraptorError, match="cuobjdump was not found"):
        analysis.analyze(suite.get("polybench.gemm.gemm"), search_dirs=[tmp_path])


def test_analysis_of_a_fixture_without_tools():
    """A KernelISA assembled from committed cuobjdump/NVRTC output: calls followed, features."""
    from klaraptor.isa.sass import parse_res_usage, parse_sass, resources
    from tests.isa.helpers import fixture_text

    isa = analysis.KernelISA(
        name="fixture.widths",
        kernel="widths",
        arch="sm_90",
        options=("--std=c++17",),
        tools={},
        resources=resources(parse_res_usage(fixture_text("widths.res"))["widths"]),
        dynamic_smem=None,
        fingerprint="",
        sass=parse_sass(fixture_text("widths.sass"))["widths"],
        ptx_module=fixture_text("widths.ptx"),
    )
    isa._derive()
    f = isa.features
    assert f["stack_bytes"] == 64 and f["ptx_local_bytes"] == 64 and f["ptx_local_decls"] == 1
    assert f["sass_local_store"] >= 1 and f["sass_local_load"] >= 1
    assert f["sass_global_atomic"] == 1 and f["sass_shared_atomic"] == 1
    assert f["sass_barrier"] == 1 and f["sass_warp"] >= 2 and f["sass_sfu"] >= 1
    assert f["sass_subroutines"] == 1 and f["sass_max_loop_depth"] == 2
    assert f["calls"] == 1 and f["ptx_max_loop_depth_with_calls"] == 2
    helper_loads = [r.depth for r in isa.ptx if r.function != "widths" and r.cls == "load"]
    assert 2 in helper_loads  # the helper's loop (1) inside the caller's loop (1)
    assert f["ptx_shared_static_bytes"] == 128 and f["shared_bytes"] == 1152
    assert f["only_reads_memory"] == 0.0 and f["writes_memory"] == 1.0
