"""The MWP-CWP model: DESIGN.md's worked example, guards, the metric mapping, code generation and
the model registry."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from klaraptor.core.errors import KlaraptorError
from klaraptor.device.occupancy import arch_params
from klaraptor.models import KERNEL_QUANTITIES, available_models, get_model, register_model
from klaraptor.models.mwp_cwp import MODEL_HARDWARE, OUTPUTS, MwpCwpModel
from klaraptor.program import Program, const, var

# Hong & Kim's example hardware (DESIGN.md): 1 GHz, 80 GB/s, 16 SMs, Mem_LD 420,
# Departure_del_uncoal 10, issue 4 cycles. Departure_del_coal is unused (no coalesced access).
EXAMPLE_HW = {
    "hw_clock_ghz": 1.0,
    "hw_mem_bw_gbs": 80.0,
    "hw_n_sm": 16.0,
    "hw_mem_ld": 420.0,
    "hw_dep_del_coal": 4.0,
    "hw_dep_del_uncoal": 10.0,
    "hw_issue_cycles": 4.0,
}


def constant(name: str, value: float) -> Program:
    return Program(name, [], [("value", const(value))], ["value"])


def example(**metric_overrides: float) -> dict[str, np.ndarray]:
    """The worked example: 27 compute + 6 uncoalesced memory instructions (32 transactions each),
    6 syncs, 128 threads per block, 80 blocks. Load_bytes_per_warp = 128 (32 threads x 4-byte
    words, Hong & Kim's value): BW_per_warp = 128/730 GB/s, so MWP_peak_BW = 80 / (0.175 x 16)
    = 28.5 does not bind and MWP = Mem_L / Departure_delay = 730/320 = 2.28.

    The 5 active blocks per SM are NOT forced: they come out of the occupancy sub-program with the
    CC 9.0 (H200) architecture parameters, because 88 registers per thread allot 2816 registers
    per warp, 5 warps per 16384-register sub-partition, so 20 warps = 5 blocks of 4 warps.
    """
    metrics = {
        "inst_per_warp": 33.0,  # 27 + 6: Comp_cycles = 4 x 33 = 132
        "coal_mem_per_warp": 0.0,
        "uncoal_mem_per_warp": 6.0,
        "uncoal_per_mw": 32.0,
        "load_bytes_per_warp": 128.0,
        "sync_per_warp": 6.0,
        **metric_overrides,
    }
    kernel = {"blocks": 80.0, "threads": 128.0, "regs": 88.0, "smem": 0.0}
    model = MwpCwpModel()
    subs = {k: constant(k, v) for k, v in {**kernel, **metrics}.items()}
    prog = model.program([]).bind(subs)
    hw = {**EXAMPLE_HW, **arch_params((9, 0)).hw_inputs()}
    return prog.evaluate(**hw)


def test_mwp_cwp_worked_example() -> None:
    out = {k: float(v) for k, v in example().items()}
    assert out["active_blocks"] == 5.0 and out["n_warps"] == 20.0  # from occupancy, see example()
    assert out["mem_l"] == 730.0
    assert out["departure_delay"] == 320.0
    assert out["mwp"] == pytest.approx(2.28, abs=0.01) and out["mwp"] == 730.0 / 320.0
    assert out["cwp"] == 20.0  # (4380 + 132) / 132 = 34.2, capped at N = 20
    assert out["comp_cycles"] == 132.0
    assert out["mem_cycles"] == 4380.0
    assert out["rep"] == 1.0  # 80 blocks / (5 x 16 SMs)
    assert out["case"] == 2.0  # CWP >= MWP
    # 4380 x 20 / 2.28 = 38400, plus 132/6 x 1.28 = 28.2; sync 320 x 1.28 x 6 x 5 = 12300.
    assert out["exec_cycles"] == pytest.approx(38_428.2, abs=0.1)
    assert out["sync_cycles"] == pytest.approx(12_300.0, rel=1e-12)
    assert out["cycles"] == pytest.approx(50_728.2, abs=0.1)
    assert round(out["exec_cycles"], -2) == 38_400 and round(out["cycles"], -2) == 50_700


def test_load_bytes_within_the_bandwidth_bound_do_not_change_the_example() -> None:
    # Up to 1600 bytes per warp access MWP_peak_BW stays above 2.28 (e.g. 32 sectors x 32 B).
    assert float(example(load_bytes_per_warp=1024.0)["cycles"]) == float(example()["cycles"])
    # Far above it, bandwidth binds: MWP = 80 / (4096/730 x 16) = 0.89.
    assert float(example(load_bytes_per_warp=4096.0)["mwp"]) == pytest.approx(
        80 / (4096 / 730 * 16)
    )


def test_cases_one_and_three_and_guards() -> None:
    # Single-transaction accesses: Mem_L = 420, Departure_delay = 10, MWP = min(42, N) = N = 20.
    fast_mem = {"uncoal_per_mw": 1.0, "load_bytes_per_warp": 4.0}
    # Little compute: CWP = (2520 + 28) / 28 = 91 -> N as well: case 1.
    starved = example(inst_per_warp=7.0, **fast_mem)
    assert float(starved["mwp"]) == float(starved["cwp"]) == 20.0 and float(starved["case"]) == 1.0
    assert float(starved["exec_cycles"]) == pytest.approx(2520 + 28 + 28 / 6 * 19)
    # More compute: CWP = (2520 + 240) / 240 = 11.5 < MWP and Comp < Mem: case 3.
    mem_bound = example(inst_per_warp=60.0, **fast_mem)
    assert float(mem_bound["case"]) == 3.0
    assert float(mem_bound["exec_cycles"]) == 420.0 + 240.0 * 20
    # No memory instructions: case 3 with Mem_L = 0, i.e. Comp_cycles x N x #Rep.
    none = example(uncoal_mem_per_warp=0.0, load_bytes_per_warp=0.0)
    assert float(none["case"]) == 3.0 and float(none["exec_cycles"]) == 132.0 * 20 * 1.0
    assert math.isfinite(float(none["cycles"]))


def test_a_block_that_cannot_launch_predicts_inf() -> None:
    model = MwpCwpModel()
    prog = model.program(["regs_in"]).bind(
        {
            **{
                k: constant(k, v)
                for k, v in {"blocks": 80.0, "threads": 1024.0, "smem": 0.0}.items()
            },
            "regs": Program("regs", ["regs_in"], [("r", var("regs_in"))], ["r"]),
            **{m: constant(m, 1.0) for m in model.metrics},
        }
    )
    hw = {**EXAMPLE_HW, **arch_params((9, 0)).hw_inputs()}
    out = prog.evaluate(regs_in=np.array([32.0, 65.0]), **hw)
    assert out["active_blocks"].tolist() == [2.0, 0.0]
    assert math.isfinite(out["cycles"][0]) and out["cycles"][1] == math.inf


def test_template_interface() -> None:
    model = get_model("mwp_cwp")
    assert model.name == "mwp_cwp" and "mwp_cwp" in available_models()
    prog = model.program(["N", "bx", "by", "bz", "cfg"])
    assert prog.outputs == OUTPUTS and prog.outputs[0] == "cycles"
    assert set(prog.unbound_calls()) == {*KERNEL_QUANTITIES, *model.metrics}
    assert set(MODEL_HARDWARE) <= set(prog.inputs) and all(h in prog.inputs for h in model.hardware)
    assert prog.inputs[:5] == ("N", "bx", "by", "bz", "cfg")
    with pytest.raises(KlaraptorError, match="clash"):
        model.program(["N", "mwp"])
    with pytest.raises(KlaraptorError, match="unknown model"):
        get_model("nope")


def test_register_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import klaraptor.models as models

    # The registration is undone after the test: a model left registered joins every later
    # test's automatic model selection.
    monkeypatch.setattr(models, "_FACTORIES", dict(models._FACTORIES))
    register_model("mwp_cwp_8", lambda: MwpCwpModel(coalesced_max_sectors=8))
    assert "mwp_cwp_8" in available_models()
    assert get_model("mwp_cwp_8").coalesced_max_sectors == 8.0


def test_point_values_classify_by_sectors_per_request() -> None:
    model = MwpCwpModel()
    derived = {
        "inst_per_warp": 40.0,
        "gld_per_warp": 3.0,
        "gst_per_warp": 1.0,
        "gld_sectors_per_req": 16.0,  # strided loads: uncoalesced, 16 transactions each
        "gst_sectors_per_req": 4.0,  # coalesced 4-byte stores
        "l2_sectors_per_warp": 52.0,
        "sync_per_warp": 2.0,
    }
    v = model.point_values(derived, (8, 8, 1), 64, 2)
    assert v == {
        "inst_per_warp": 40.0,
        "coal_mem_per_warp": 1.0,
        "uncoal_mem_per_warp": 3.0,
        "uncoal_per_mw": 16.0,
        "load_bytes_per_warp": 32 * 52.0 / 4.0,
        "sync_per_warp": 2.0,
    }
    no_mem = {
        **derived,
        "gld_per_warp": 0.0,
        "gst_per_warp": 0.0,
        "gld_sectors_per_req": 0.0,
        "l2_sectors_per_warp": 0.0,
    }
    w = model.point_values(no_mem, (32, 1, 1), 32, 1)
    assert (
        w["uncoal_per_mw"] == 1.0
        and w["load_bytes_per_warp"] == 0.0
        and w["coal_mem_per_warp"] == 0.0
    )
    with pytest.raises(KlaraptorError, match="needs the derived metrics"):
        model.point_values({"inst_per_warp": 1.0}, (32, 1, 1), 32, 1)


def test_template_generates_code_that_agrees() -> None:
    model = MwpCwpModel()
    subs = {
        k: constant(k, v)
        for k, v in {"blocks": 80.0, "threads": 128.0, "regs": 88.0, "smem": 0.0}.items()
    }
    subs.update(
        {m: constant(m, v) for m, v in zip(model.metrics, (33.0, 0.0, 6.0, 32.0, 128.0, 6.0))}
    )
    prog = model.program([]).bind(subs)
    hw = {**EXAMPLE_HW, **arch_params((9, 0)).hw_inputs()}
    want = prog.evaluate(**hw)
    ns: dict = {}
    exec(compile(prog.to_python(), "<mwp_cwp>", "exec"), ns)
    got = ns["mwp_cwp"](**hw)
    assert got == tuple(float(want[o]) for o in prog.outputs)
    fn = prog.specialize(hw)
    assert {k: float(v) for k, v in fn().items()} == {k: float(v) for k, v in want.items()}
    c_source = prog.to_c()
    assert "double kp_mwp_cwp(" in c_source


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_template_c_code_agrees(tmp_path: Path) -> None:
    model = MwpCwpModel()
    subs = {k: constant(k, v) for k, v in {"blocks": 80.0, "smem": 0.0}.items()}
    subs["threads"] = Program("threads", ["bx"], [("t", var("bx"))], ["t"])
    subs["regs"] = Program("regs", ["bx"], [("r", 88.0 - var("bx") / 32)], ["r"])
    subs.update(
        {m: constant(m, v) for m, v in zip(model.metrics, (33.0, 1.0, 6.0, 32.0, 128.0, 6.0))}
    )
    prog = model.program(["bx"]).bind(subs)
    src = tmp_path / "model.c"
    src.write_text(prog.to_c())
    lib = tmp_path / "model.so"
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]
    res = subprocess.run(
        ["cc", *flags, "-o", str(lib), str(src), "-lm"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    fn = ctypes.CDLL(str(lib)).kp_mwp_cwp
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_double] * len(prog.inputs) + [ctypes.POINTER(ctypes.c_double)]
    hw = {**EXAMPLE_HW, **arch_params((9, 0)).hw_inputs()}
    bx = np.array([32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])
    want = prog.evaluate(bx=bx, **hw)
    for i, b in enumerate(bx):
        out = (ctypes.c_double * len(prog.outputs))()
        fn(*[b if n == "bx" else hw[n] for n in prog.inputs], out)
        assert list(out) == [float(want[o][i]) for o in prog.outputs]
