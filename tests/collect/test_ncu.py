"""ncu.py on real captured Nsight Compute output (tests/data, made on an H200 by ncu_target.py)."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from klaraptor.collect import ncu
from klaraptor.core.errors import CollectError
from klaraptor.core.metrics import RAW_METRICS

DATA = Path(__file__).parents[1] / "data"
RAW = (DATA / "ncu_raw.csv").read_text()
RAW_NVTX = (DATA / "ncu_raw_nvtx.csv").read_text()


def target_points() -> dict[int, ncu.ProfiledPoint]:
    """The launches of tests/data/ncu_target.py: even p → mv_row, odd p → conv2."""
    out = {}
    for p in range(8):
        n = 256 * (1 + p % 4)
        if p % 2 == 0:
            bx = 32 * (1 + p % 8)
            out[p] = ncu.ProfiledPoint(p, (bx, 1, 1), (-(-n // bx), 1, 1), {"n": n})
        else:
            by = 1 + p % 8
            out[p] = ncu.ProfiledPoint(p, (16, by, 1), (-(-n // 16), -(-n // by), 1), {"n": n})
    return out


# ---------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize("text", [RAW, RAW_NVTX], ids=["plain", "nvtx"])
def test_parse_rows_and_kernel_names(text: str) -> None:
    rows = ncu.parse_raw_csv(text)
    assert len(rows) == 8  # the LAUNCHED and ==PROF== lines around the CSV are ignored
    assert [ncu.kernel_name(r) for r in rows] == ["mv_row", "conv2"] * 4
    assert [r["ID"] for r in rows] == list(range(8))
    for name in RAW_METRICS:
        assert name in rows[0], name


def test_nvtx_ids() -> None:
    assert [ncu.point_id(r) for r in ncu.parse_raw_csv(RAW_NVTX)] == list(range(8))
    assert ncu.parse_raw_csv(RAW_NVTX)[3]["Kernel Name"] == "kp:3/conv2"
    assert [ncu.point_id(r) for r in ncu.parse_raw_csv(RAW)] == [None] * 8


def test_id_from_nvtx_column_when_the_name_is_not_renamed() -> None:
    row = ncu.parse_raw_csv(RAW_NVTX)[5]
    row["Kernel Name"] = "conv2"
    assert ncu.point_id(row) == 5


def test_thousands_separators_and_base_units() -> None:
    r0 = ncu.parse_raw_csv(RAW)[0]
    assert r0["sm__cycles_elapsed.avg"] == pytest.approx(34071.64)
    assert r0["launch__persisting_l2_cache_size"] == 11_796_480
    assert r0["smsp__inst_executed.sum"] == 7768
    assert r0["dram__bytes_read.sum"] == 268_544
    assert r0["gpu__time_duration.sum"] == 16_864  # unit "ns": unchanged
    assert r0["device__attribute_clock_rate"] == 1_980_000
    assert isinstance(r0["smsp__warps_launched.sum"], int)
    assert r0["launch__func_cache_config"] == "CachePreferNone"


def test_block_and_grid_columns() -> None:
    rows = ncu.parse_raw_csv(RAW_NVTX)
    pts = target_points()
    for r in rows:
        p = pts[ncu.point_id(r)]
        assert ncu.row_block(r) == p.block
        assert ncu.row_grid(r) == p.grid
    assert rows[0]["Block Size"] == (32, 1, 1)
    assert rows[5]["Grid Size"] == (32, 86, 1)
    # The launch__*_dim columns give the same answer when the summary columns are absent.
    r = dict(rows[5])
    del r["Block Size"], r["Grid Size"]
    assert ncu.row_block(r) == (16, 6, 1) and ncu.row_grid(r) == (32, 86, 1)


def test_scaled_units_and_na() -> None:
    text = textwrap.dedent(
        """\
        ==PROF== Connected to process 1 (/usr/bin/python3)
        "ID","Process ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum","dram__bytes_read.sum","smsp__inst_executed.sum","x.ratio"
        "","","","","","usecond","Kbyte","Kinst","%"
        some app output in the middle
        "0","7","kp:0/k","(64, 1, 1)","(2, 1, 1)","1.50","2.25","1,200","n/a"
        """
    )
    (row,) = ncu.parse_raw_csv(text)
    assert row["gpu__time_duration.sum"] == pytest.approx(1500.0)  # µs → ns
    assert row["dram__bytes_read.sum"] == pytest.approx(2250.0)  # Kbyte → byte
    assert row["smsp__inst_executed.sum"] == pytest.approx(1_200_000)
    assert row["x.ratio"] is None


def test_truncated_output_keeps_complete_rows() -> None:
    lines = RAW_NVTX.splitlines()
    last = max(i for i, ln in enumerate(lines) if ln.startswith('"7"'))
    cut = "\n".join(lines[:last]) + "\n" + lines[last][: len(lines[last]) // 2]
    rows = ncu.parse_raw_csv(cut)
    assert [ncu.point_id(r) for r in rows] == list(range(7))
    header = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    assert ncu.parse_raw_csv("\n".join(lines[: header + 2])) == []  # header + units only
    assert ncu.parse_raw_csv(lines[header][:500]) == []  # a header cut short
    assert ncu.parse_raw_csv("") == []


# ---------------------------------------------------------------------------------------------
# Mapping rows to points


def test_map_rows_verifies_block_and_grid() -> None:
    rows = ncu.parse_raw_csv(RAW_NVTX)
    pts = target_points()
    mv = ncu.map_rows(rows, {i: p for i, p in pts.items() if i % 2 == 0}, "mv_row")
    assert sorted(mv.rows) == [0, 2, 4, 6]
    assert len(mv.ignored) == 4 and all("conv2" in s for s in mv.ignored)
    assert mv.rows[2]["smsp__warps_launched.sum"] == 24
    conv = ncu.map_rows(rows, {i: p for i, p in pts.items() if i % 2 == 1}, "conv2")
    assert sorted(conv.rows) == [1, 3, 5, 7]


def test_map_rows_mismatch_names_the_point() -> None:
    pts = target_points()
    pts[2] = ncu.ProfiledPoint(2, (64, 1, 1), (12, 1, 1), {"n": 768})
    with pytest.raises(CollectError, match=r"point 2 \(D=\{'n': 768\}\).*block \(64, 1, 1\)"):
        ncu.map_rows(ncu.parse_raw_csv(RAW_NVTX), pts, "mv_row")
    pts = target_points()
    pts[4] = ncu.ProfiledPoint(4, (160, 1, 1), (3, 1, 1), {"n": 256})  # wrong grid only
    with pytest.raises(CollectError, match="point 4"):
        ncu.map_rows(ncu.parse_raw_csv(RAW_NVTX), pts, "mv_row")


def test_map_rows_unknown_and_duplicate_ids() -> None:
    rows = ncu.parse_raw_csv(RAW_NVTX)
    pts = target_points()
    del pts[6]
    with pytest.raises(CollectError, match="no point of this batch has id 6"):
        ncu.map_rows(rows, pts, "mv_row")
    dup = dict(rows[0])
    dup["ID"] = 99
    with pytest.raises(CollectError, match="two launches"):
        ncu.map_rows([rows[0], dup], target_points(), "mv_row")


def test_rows_without_nvtx_are_ignored() -> None:
    m = ncu.map_rows(ncu.parse_raw_csv(RAW), target_points(), "mv_row")
    assert m.rows == {}
    assert len(m.ignored) == 8


def test_raw_values_keep_metrics_and_launch_columns() -> None:
    row = ncu.parse_raw_csv(RAW_NVTX)[0]
    raw = ncu.raw_values(row)
    assert set(RAW_METRICS) <= set(raw)
    assert raw["launch__registers_per_thread"] == 30
    assert "device__attribute_clock_rate" not in raw
    json.dumps(raw)  # storable as is


# ---------------------------------------------------------------------------------------------
# Metric names, command line


QUERY_EXCERPT = """\
Chip gh100
---------------------------------------------- --------------- --------------- ------------------
Metric Name                                    Metric Type     Metric Unit     Metric Description
---------------------------------------------- --------------- --------------- ------------------
CTC.TriageCompute.ctc__rx_bytes                Counter         byte            # of bytes of CTC
FBSP.TriageCompute.dramc__read_throughput      Throughput      %               DRAMC Read Throughput
                                                                               activity
dram__bytes_read                               Counter         byte            # of bytes read
sm__warps_active                               Counter         warp            cumulative # of warps
smsp__inst_executed                            Counter         inst            # of warp instructions
==PROF== Note that these metrics must be appended with a valid suffix before profiling them.
"""


def test_parse_query_metrics() -> None:
    names = ncu.parse_query_metrics(QUERY_EXCERPT)
    assert names == {
        "ctc__rx_bytes",
        "dramc__read_throughput",
        "dram__bytes_read",
        "sm__warps_active",
        "smsp__inst_executed",
    }


def test_validate_metrics_drops_unknown_names() -> None:
    avail = {ncu.base_name(m) for m in RAW_METRICS}
    kept, dropped = ncu.validate_metrics(
        [*RAW_METRICS, "smsp__inst_executed_op_barrier.sum"], avail
    )
    assert kept == list(RAW_METRICS)
    assert dropped == ["smsp__inst_executed_op_barrier.sum"]
    assert ncu.base_name("sm__warps_active.avg.pct_of_peak_sustained_active") == "sm__warps_active"


def test_build_command() -> None:
    cmd = ncu.build_command("/x/ncu", ["a.sum", "b.avg"], "/tmp/log.csv", ["python3", "t.py"])
    assert cmd[0] == "/x/ncu" and cmd[-2:] == ["python3", "t.py"]
    for flag in ("--csv", "--nvtx", "--profile-from-start", "--target-processes"):
        assert flag in cmd
    assert cmd[cmd.index("--page") + 1] == "raw"
    assert cmd[cmd.index("--print-nvtx-rename") + 1] == "kernel"
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b.avg"
    assert cmd[cmd.index("--log-file") + 1] == "/tmp/log.csv"
    assert cmd[cmd.index("--cache-control") + 1] == "all"  # the collection's counters: cold L2
    warm = ncu.build_command("/x/ncu", ["a.sum"], "/tmp/l", ["t"], cache_control="none")
    assert warm[warm.index("--cache-control") + 1] == "none"
    with pytest.raises(CollectError):
        ncu.build_command("/x/ncu", [], "/tmp/l", ["t"])
    with pytest.raises(CollectError, match="cache_control"):
        ncu.build_command("/x/ncu", ["a.sum"], "/tmp/l", ["t"], cache_control="some")


def test_find_ncu_explicit_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert ncu.find_ncu(str(tmp_path / "no-ncu")) is None
    monkeypatch.setenv("KLARAPTOR_NCU", str(tmp_path / "nope"))
    assert ncu.find_ncu() is None


# ---------------------------------------------------------------------------------------------
# run_batch with a stand-in ncu executable (real processes, the captured CSV as output)

FAKE_NCU = """\
#!{python}
import shutil, subprocess, sys, time
args = sys.argv[1:]
i = args.index("--log-file")
log, target = args[i + 1], args[i + 2:]
mode = {mode!r}
if mode == "hang":
    time.sleep(3600)
rc = subprocess.call(target)
text = open({csv!r}).read()
if mode == "truncate":
    text = text[: text.index('"kp:5/conv2"')]
open(log, "w").write(text)
print("==PROF== Disconnected")
sys.exit(rc)
"""

FAKE_TARGET = """\
import json, os, sys, time
with open(sys.argv[1], "a") as fh:
    fh.write(json.dumps({"event": "ready", "pid": os.getpid()}) + "\\n")
    for i in range(8):
        fh.write(json.dumps({"event": "launched", "id": i}) + "\\n")
        fh.flush()
        if i == 3 and len(sys.argv) > 2:
            time.sleep(3600)  # a launch that never returns
"""


def fake_ncu(tmp_path: Path, mode: str) -> str:
    exe = tmp_path / f"ncu-{mode}"
    exe.write_text(
        FAKE_NCU.format(python=sys.executable, mode=mode, csv=str(DATA / "ncu_raw_nvtx.csv"))
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "target.py").write_text(FAKE_TARGET)
    return str(exe)


def run(tmp_path: Path, mode: str, **kw: object) -> ncu.BatchResult:
    pts = {i: p for i, p in target_points().items() if i % 2 == 1}
    seen: list[int] = []
    hang = ["hang"] if kw.get("target_hangs") else []
    res = ncu.run_batch(
        fake_ncu(tmp_path, mode),
        list(RAW_METRICS),
        pts,
        "conv2",
        lambda events: [sys.executable, str(tmp_path / "target.py"), str(events), *hang],
        workdir=tmp_path / "work",
        stall_timeout_s=kw.get("stall", 30.0),  # type: ignore[arg-type]
        startup_timeout_s=kw.get("startup", 30.0),  # type: ignore[arg-type]
        env=dict(os.environ),
        on_launched=seen.append,
    )
    res.ignored.append(f"seen={seen}")
    return res


def test_run_batch_maps_the_rows(tmp_path: Path) -> None:
    res = run(tmp_path, "ok")
    assert res.error == "", res.error
    assert sorted(res.rows) == [1, 3, 5, 7]
    assert res.missing == [] and res.launched == 8
    assert res.rows[3]["smsp__warps_launched.sum"] == 32_768
    assert "seen=[0, 1, 2, 3, 4, 5, 6, 7]" in res.ignored
    assert res.command[res.command.index("--metrics") + 1] == ",".join(RAW_METRICS)


def test_run_batch_truncated_log_reports_missing_points(tmp_path: Path) -> None:
    res = run(tmp_path, "truncate")
    assert sorted(res.rows) == [1, 3]
    assert res.missing == [5, 7]
    assert "no rows for 2 of 4 points" in res.error


def test_run_batch_kills_a_stalled_ncu(tmp_path: Path) -> None:
    res = run(tmp_path, "hang", startup=1.0)
    assert res.rows == {} and res.missing == [1, 3, 5, 7]
    assert "no progress for 1 s" in res.error
    assert res.wall_s < 20


def test_a_stalled_worker_is_killed_so_ncu_reports(tmp_path: Path) -> None:
    res = run(tmp_path, "ok", stall=1.0, target_hangs=True)
    assert "no progress for 1 s after 4 of 4 points" in res.error
    assert "killed the worker; ncu reported" in res.error
    assert sorted(res.rows) == [1, 3, 5, 7]  # the stand-in ncu reports every row it has


def test_run_batch_missing_executable(tmp_path: Path) -> None:
    res = ncu.run_batch(
        str(tmp_path / "absent-ncu"),
        list(RAW_METRICS),
        target_points(),
        "conv2",
        lambda events: ["true"],
        workdir=tmp_path / "w",
        stall_timeout_s=5,
    )
    assert res.rows == {} and "cannot start" in res.error
    assert not math.isnan(res.wall_s)
