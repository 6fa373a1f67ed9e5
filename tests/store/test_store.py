"""Store: concurrency, resume after interruption, corruption, schema versions, round trips."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sqlite3
import time
from pathlib import Path

import pytest

from klaraptor.core.errors import StoreError
from klaraptor.core.types import DataSize
from klaraptor.store import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    HistoryRow,
    KernelRecord,
    Measurement,
    Store,
    default_store_path,
)
from klaraptor.store import schema as schema_mod

DEV = "NVIDIA H200|driver 580.159.04|1980 MHz"
# The data parameter names of the kernels these tests write.
NAMES = {"k": ("N",), "keep": ("N",), "resume": ("N",), "conc": ("W", "I"), "th": ("T", "I")}


def size(kernel: str, *values: int) -> DataSize:
    return DataSize(NAMES[kernel], values)


def opened(path: str | Path, *kernels: str) -> Store:
    """A store with `kernels` registered (measurements need their data names)."""
    s = Store(path)
    for k in kernels or ("k",):
        s.put_kernel(KernelRecord(k, "fp", NAMES[k]))
    return s


def _m(i: int, kernel: str = "k", status: str = "ok", kind: str = "time") -> Measurement:
    return Measurement(
        kernel=kernel,
        device=DEV,
        D=size(kernel, 256 * (1 + i // 64)),
        block=(32 * (1 + i % 32), 1 + (i // 32) % 2, 1),
        kind=kind,
        status=status,
        value={"median_ms": 0.01 * i, "spread": 0.001, "repeats": 7},
    )


# -- workers for multiprocessing (top-level: spawn pickles them by name) ----------------------


def _writer(path: str, worker: int, n: int, batch: int) -> None:
    s = opened(path, "conc")
    ms = [
        Measurement("conc", DEV, size("conc", worker, i), (32, 1, 1), "time", "ok", {"i": i})
        for i in range(n)
    ]
    half = n // 2
    for m in ms[:half]:  # one transaction per point, as the collector does
        s.put_measurement(m)
    for k in range(half, n, batch):  # and batched
        s.put_measurements(ms[k : min(n, k + batch)])
    s.close()


def _slow_writer(path: str, points: list[tuple[int, int]], started: mp.Event) -> None:
    s = opened(path, "resume")
    for j, (d, bx) in enumerate(points):
        s.put_measurement(
            Measurement("resume", DEV, size("resume", d), (bx, 1, 1), "time", "ok", {"j": j})
        )
        if j == 20:
            started.set()
        time.sleep(0.002)
    s.close()


# -- concurrency --------------------------------------------------------------------------------


def test_two_processes_write_concurrently_and_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite")
    Store(path).close()  # create once so both children race on writes, not on creation
    ctx = mp.get_context("spawn")
    n = 2000
    procs = [ctx.Process(target=_writer, args=(path, w, n, 100)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with Store(path) as s:
        assert s.count_measurements("conc") == 2 * n
        keys = s.measured_keys("conc", DEV, "time")
        assert keys == {(size("conc", w, i), (32, 1, 1)) for w in range(2) for i in range(n)}
        assert s.check() == []


def test_concurrent_creation_of_a_fresh_store(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh.sqlite")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 50, 10)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with Store(path) as s:
        assert s.count_measurements() == 150
        assert s.schema_version() == SCHEMA_VERSION


def test_threads_share_one_store(tmp_path: Path) -> None:
    import threading

    s = opened(tmp_path / "t.sqlite", "th")

    def work(t: int) -> None:
        for i in range(100):
            s.put_measurement(
                Measurement("th", DEV, size("th", t, i), (64, 1, 1), "time", "ok", {})
            )

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert s.count_measurements("th") == 400
    s.close()


# -- resume ---------------------------------------------------------------------------------------


def test_resume_after_close(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    points = [_m(i) for i in range(200)]
    s = opened(path)
    for m in points[:100]:
        s.put_measurement(m)
    s.close()

    s = Store(path)
    done = s.measured_keys("k", DEV, "time")
    assert done == {(m.D, m.block) for m in points[:100]}
    todo = [m for m in points if (m.D, m.block) not in done]
    assert todo == points[100:]
    assert s.put_measurements(todo) == 100
    assert s.count_measurements("k") == 200
    s.close()


def test_resume_after_a_killed_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "killed.sqlite")
    Store(path).close()
    points = [(256 * (1 + i // 32), 32 * (1 + i % 32)) for i in range(2000)]
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    p = ctx.Process(target=_slow_writer, args=(path, points, started))
    p.start()
    assert started.wait(60)
    time.sleep(0.05)
    p.kill()  # SIGKILL: no cleanup, the WAL file is left behind
    p.join(10)
    assert p.exitcode != 0

    s = Store(path)
    rows = s.measurements("resume", DEV, "time")
    done = s.measured_keys("resume", DEV, "time")
    # Points are committed one by one in order: what survived is exactly a prefix.
    assert len(done) == len(rows) >= 21
    assert [r.value["j"] for r in rows] == list(range(len(rows)))
    assert done == {(size("resume", d), (bx, 1, 1)) for d, bx in points[: len(done)]}
    before = {(r.D, r.block): r.created for r in rows}

    # Second pass: only the rest is written, the committed points are untouched.
    todo = [(d, bx) for d, bx in points if (size("resume", d), (bx, 1, 1)) not in done]
    assert len(todo) == len(points) - len(done)
    s.put_measurements(
        Measurement("resume", DEV, size("resume", d), (bx, 1, 1), "time", "ok", {"j": -1})
        for d, bx in todo
    )
    after = s.measurements("resume", DEV, "time")
    assert len(after) == len(points)
    assert all(before[r.D, r.block] == r.created for r in after if (r.D, r.block) in before)
    assert s.check() == []
    s.close()


def test_measured_keys_counts_ok_and_failed_but_not_rejected(tmp_path: Path) -> None:
    with opened(tmp_path / "s.sqlite") as s:
        s.put_measurements([_m(0, status="ok"), _m(1, status="failed"), _m(2, status="rejected")])
        s.put_measurement(_m(3, kind="ncu"))
        assert s.measured_keys("k", DEV, "time") == {(_m(i).D, _m(i).block) for i in (0, 1)}
        assert s.measured_keys("k", DEV, "ncu") == {(_m(3).D, _m(3).block)}


def test_put_measurements_is_all_or_nothing(tmp_path: Path) -> None:
    with opened(tmp_path / "s.sqlite") as s:
        bad = _m(5)
        bad.value = {"x": object()}  # not JSON-serialisable
        with pytest.raises(StoreError):
            s.put_measurements([_m(0), _m(1), bad])
        assert s.count_measurements() == 0
        with pytest.raises(StoreError, match="status"):
            s.put_measurement(_m(0, status="weird"))


# -- corruption, foreign files, versions ------------------------------------------------------------


def test_random_bytes_file(tmp_path: Path) -> None:
    path = tmp_path / "noise.sqlite"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError, match="not an SQLite database") as err:
        Store(path)
    assert str(path) in str(err.value)


def test_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(StoreError, match=str(path)):
        Store(path)


def test_truncated_store(tmp_path: Path) -> None:
    path = tmp_path / "trunc.sqlite"
    with opened(path) as s:
        s.put_measurements(_m(i) for i in range(3000))
    data = path.read_bytes()
    assert len(data) > 8 * 4096
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="truncated") as err:
        Store(path)
    assert str(path) in str(err.value)


def test_store_truncated_inside_the_header(tmp_path: Path) -> None:
    path = tmp_path / "tiny.sqlite"
    Store(path).close()
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(StoreError, match=str(path)):
        Store(path)


def test_damaged_pages_are_reported_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "damaged.sqlite"
    with opened(path) as s:
        s.put_measurements(_m(i) for i in range(3000))
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for p in range(2, len(data) // page):  # scribble over every page but the schema page
        data[p * page : p * page + 64] = os.urandom(64)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=str(path)):
        with Store(path) as s:
            s.measurements("k", DEV)


def test_foreign_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not created by klaraptor") as err:
        Store(path)
    assert str(path) in str(err.value)
    assert path.read_bytes() == before  # refused without touching it


def test_foreign_application_id(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA application_id = 1234")
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="another program") as err:
        Store(path)
    assert str(path) in str(err.value)


def test_directory_path(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory") as err:
        Store(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer klaraptor") as err:
        Store(path)
    assert str(path) in str(err.value)


def test_migration_hook_runs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.sqlite"
    with opened(path) as s:
        s.put_measurement(_m(0))
    calls: list[int] = []

    def v1_to_v2(con: sqlite3.Connection) -> None:
        calls.append(1)
        con.execute("ALTER TABLE measurements ADD COLUMN note TEXT")

    monkeypatch.setattr(schema_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(schema_mod.MIGRATIONS, SCHEMA_VERSION, v1_to_v2)
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION + 1
        assert s.count_measurements() == 1
    with Store(path) as s:  # already migrated: the hook does not run again
        pass
    assert calls == [1]


def test_missing_migration_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.sqlite"
    Store(path).close()
    monkeypatch.setattr(schema_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match="no migration"):
        Store(path)


def test_file_is_marked_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_closed_store_refuses_use(tmp_path: Path) -> None:
    s = Store(tmp_path / "s.sqlite")
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.kernels()


# -- paths ------------------------------------------------------------------------------------------


def test_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KLARAPTOR_HOME", str(tmp_path / "kh"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "kh" / "klaraptor.sqlite"
    monkeypatch.delenv("KLARAPTOR_HOME")
    assert default_store_path() == tmp_path / "xdg" / "klaraptor" / "klaraptor.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".cache" / "klaraptor" / "klaraptor.sqlite"
    s = Store()  # creates the parent directories
    assert s.path.exists()
    s.close()


def test_pickled_store_reopens_in_the_receiver(tmp_path: Path) -> None:
    s = Store(tmp_path / "p.sqlite")
    s.put_kernel(KernelRecord("a", "f", ("N",)))
    t = pickle.loads(pickle.dumps(s))
    assert t.kernel("a").fingerprint == "f"
    t.close()
    s.close()


# -- round trips ------------------------------------------------------------------------------------


def test_kernels_round_trip(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as s:
        assert s.kernel("x") is None
        s.put_kernel(
            KernelRecord("polybench.gemm", "abc", ("N",), {"dim": 2, "grid": ["ceil(N / bx)"]})
        )
        s.put_kernel(KernelRecord("a.b", "f1", ("M", "N")))
        s.put_kernel(KernelRecord("a.b", "f2", ("M", "N"), {"v": 2}))  # upsert
        k = s.kernel("polybench.gemm")
        assert k is not None
        assert (k.name, k.fingerprint, k.data_names, k.spec) == (
            "polybench.gemm",
            "abc",
            ("N",),
            {"dim": 2, "grid": ["ceil(N / bx)"]},
        )
        assert [(k.name, k.fingerprint) for k in s.kernels()] == [
            ("a.b", "f2"),
            ("polybench.gemm", "abc"),
        ]
        assert s.data_names("a.b") == ("M", "N")
        with pytest.raises(StoreError, match="put_kernel takes a KernelRecord"):
            s.put_kernel({"name": "x"})  # type: ignore[arg-type]


def test_collect_facts_and_truth_decisions_round_trip(tmp_path: Path) -> None:
    from klaraptor.core.types import KernelAttributes
    from klaraptor.store import CollectFacts, TruthDecision

    attrs = KernelAttributes(40, 1024, 0, 0, 768, 49152)
    with opened(tmp_path / "s.sqlite") as s:
        assert s.collect_facts("k", DEV) is None
        facts = CollectFacts("NVIDIA H200", attrs, 2, 2.0, "static count", "ok", "", "today")
        s.put_collect_facts("k", DEV, facts)
        assert s.collect_facts("k", DEV) == facts
        assert s.collect_devices("k") == [DEV]
        dec = TruthDecision(size("k", 4096), True, 12.5, "within the budget", "today")
        s.put_truth_decisions("k", DEV, [dec])
        assert s.truth_decisions("k", DEV) == {size("k", 4096): dec}
        with pytest.raises(StoreError, match="not registered"):
            s.put_collect_facts("unknown", DEV, facts)


def test_device_profiles_round_trip(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as s:
        assert s.device_profile(DEV) is None
        prof = {"name": "NVIDIA H200", "cc": [9, 0], "mem_latency_dram_cycles": None}
        s.put_device_profile(DEV, prof)
        assert s.device_profile(DEV) == prof
        s.put_device_profile(DEV, {**prof, "sm_count": 132})
        assert s.device_profiles() == {DEV: {**prof, "sm_count": 132}}


def test_measurements_round_trip(tmp_path: Path) -> None:
    import numpy as np

    with Store(tmp_path / "s.sqlite") as s:
        s.put_kernel(KernelRecord("k", "fp", ("M", "N")))
        mn = DataSize(("M", "N"), (1024, 512))
        m = Measurement(
            "k",
            DEV,
            mn,
            (np.int32(32), 8, 1),
            "ncu",
            "ok",
            {"inst": np.float64(1.5), "arr": np.arange(3), "nan": float("nan")},
            reason="",
            created=123.0,
        )
        s.put_measurement(m)
        f = Measurement("k", DEV, mn, (64, 4, 1), "time", "failed", {}, "launch timeout")
        s.put_measurement(f)
        got = s.measurements("k", DEV, kind="ncu")
        assert len(got) == 1
        g = got[0]
        assert (g.D, g.block, g.kind, g.status, g.created) == (
            mn,
            (32, 8, 1),
            "ncu",
            "ok",
            123.0,
        )
        assert g.value["inst"] == 1.5 and g.value["arr"] == [0, 1, 2]
        assert g.value["nan"] != g.value["nan"]
        assert s.measurements("k", DEV, status="failed")[0].reason == "launch timeout"
        assert len(s.measurements("k", DEV)) == 2
        assert s.measurements("k", "other") == []
        # upsert: same key replaces the row
        s.put_measurement(Measurement("k", DEV, mn, (64, 4, 1), "time", "ok", {"t": 1}))
        assert [x.status for x in s.measurements("k", DEV, kind="time")] == ["ok"]
        with pytest.raises(StoreError, match="must be a DataSize"):
            s.put_measurement(Measurement("k", DEV, (1024, 512), (1, 1, 1), "time", "ok", {}))  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="kernel's data parameters are"):
            s.put_measurement(
                Measurement("k", DEV, DataSize(("N",), (3,)), (1, 1, 1), "time", "ok", {})
            )
        with pytest.raises(StoreError, match="three entries"):
            s.put_measurement(Measurement("k", DEV, mn, (1, 1), "time", "ok", {}))  # type: ignore[arg-type]


def test_builds_round_trip(tmp_path: Path) -> None:
    with opened(tmp_path / "s.sqlite") as s:
        assert s.latest_build("k") is None
        b1 = s.put_build("k", DEV, "mwp_cwp", {"fits": [1, 2]}, {"r": 1}, {(1024, 1, 1): "regs"})
        b2 = s.put_build("k", DEV, "volkov", {}, {"r": 2})
        b3 = s.put_build("k", "other", "mwp_cwp", {}, {"r": 3})
        assert b1 < b2 < b3
        assert s.latest_build("k").id == b3
        latest = s.latest_build("k", DEV)
        assert latest is not None
        assert (latest.id, latest.model, latest.report, latest.rejected) == (
            b2,
            "volkov",
            {"r": 2},
            {},
        )
        first = s.latest_build("k", DEV, "mwp_cwp")
        assert first.helper == {"fits": [1, 2]} and first.rejected == {(1024, 1, 1): "regs"}
        assert s.latest_build("k", model="nope") is None
        assert [b.id for b in s.builds()] == [b3, b2, b1]
        assert not hasattr(s.builds("k")[0], "helper")
        assert s.builds("zzz") == []


def test_history_round_trip(tmp_path: Path) -> None:
    with opened(tmp_path / "s.sqlite") as s:
        n4, n8 = size("k", 4096), size("k", 8192)
        rows = [
            HistoryRow(n4, (256, 1, 1), (16, 1, 1), 0.5, created=1.0),
            HistoryRow(n8, (128, 1, 1), (64, 1, 1), float("inf"), source="model", created=2.0),
        ]
        assert s.record_history("k", DEV, "mwp_cwp", rows) == 2
        s.record_history("k", DEV, "volkov", [HistoryRow(n4, (64, 1, 1), (64, 1, 1), 0.4)])
        h = s.history("k", DEV, "mwp_cwp")
        assert [(r.D, r.block, r.grid, r.predicted_ms, r.source, r.model) for r in h] == [
            (n4, (256, 1, 1), (16, 1, 1), 0.5, "model", "mwp_cwp"),
            (n8, (128, 1, 1), (64, 1, 1), float("inf"), "model", "mwp_cwp"),
        ]
        # upsert per (kernel, device, model, D): refinement replaces the model's choice
        s.record_history(
            "k",
            DEV,
            "mwp_cwp",
            [HistoryRow(n4, (512, 1, 1), (8, 1, 1), 0.5, 0.45, "refined", 3.0)],
        )
        h = s.history("k", DEV, "mwp_cwp")
        assert len(h) == 2
        assert (
            h[-1].block == (512, 1, 1) and h[-1].measured_ms == 0.45 and h[-1].source == "refined"
        )
        assert len(s.history("k", DEV)) == 3
        with pytest.raises(StoreError, match="source"):
            s.record_history(
                "k", DEV, "m", [HistoryRow(size("k", 1), (1, 1, 1), (1, 1, 1), 1.0, source="guess")]
            )


def test_delete_kernel(tmp_path: Path) -> None:
    with opened(tmp_path / "s.sqlite", "k", "keep") as s:
        s.put_measurements([_m(0), _m(1), _m(2, kernel="keep")])
        s.put_build("k", DEV, "m", {}, {}, {(32, 1, 1): "why"})
        s.record_history("k", DEV, "m", [HistoryRow(size("k", 1), (32, 1, 1), (1, 1, 1), 1.0)])
        assert s.delete_kernel("k") == 6
        assert s.kernel("k") is None and s.latest_build("k") is None
        assert s.history("k", DEV) == [] and s.measurements("k", DEV) == []
        assert s.count_measurements() == 1 and s.kernel("keep") is not None
