"""A schema-1 store written by klaraptor 3a4d02d stays readable: it is migrated on open."""

from __future__ import annotations

import gzip
import json
import sqlite3
import warnings
from pathlib import Path

import pytest

from klaraptor.assemble import load
from klaraptor.core.types import DataSize
from klaraptor.store import SCHEMA_VERSION, Store

DATA = Path(__file__).parents[1] / "data"
KERNEL = "polybench.atax.k1"


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    path = tmp_path / "v1.sqlite"
    path.write_bytes(gzip.decompress((DATA / "store_v1_3a4d02d.sqlite.gz").read_bytes()))
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
    con.close()
    return path


def test_a_3a4d02d_store_is_migrated_and_chooses_as_before(v1_store: Path) -> None:
    expected = json.loads((DATA / "store_v1_3a4d02d.expected.json").read_text())
    with Store(v1_store) as store:
        assert store.schema_version() == SCHEMA_VERSION == 4
        assert store.check() == []
        rec = store.kernel(KERNEL)
        assert rec is not None and rec.data_names == ("N",)
        assert "collect" not in rec.spec and rec.spec["name"] == KERNEL
        (device,) = store.collect_devices(KERNEL)
        facts = store.collect_facts(KERNEL, device)
        assert facts is not None and facts.attributes is not None
        assert facts.attributes.max_threads_per_block == 512 and facts.sync_per_warp == 0.0
        times = store.measurements(KERNEL, device, kind="time")
        assert len(times) == 256 and all(type(m.D) is DataSize for m in times)
        for model, want in expected.items():
            kern = load(KERNEL, store=store, model=model, device=device)
            # The rejected blocks, stored as "[bx, by, bz]" strings by schema 1, are typed now.
            assert len(kern.selector.rejected) == want["rejected"]
            assert all(isinstance(b, tuple) and len(b) == 3 for b in kern.selector.rejected)
            for n in ("2048", "3000", "4096", "5000"):
                s = kern.select(int(n))
                assert [list(s.block), list(s.grid), s.source] == want[n], (model, n)
        history = store.history(KERNEL, device)
        assert any(r.source == "refined" and r.D == {"N": 4096} for r in history)
    # Opening again finds the current schema: nothing to migrate.
    with Store(v1_store) as store:
        assert store.schema_version() == SCHEMA_VERSION


def test_a_malformed_schema_1_build_is_a_clear_error(v1_store: Path) -> None:
    con = sqlite3.connect(v1_store)
    con.execute(
        "UPDATE builds SET payload = ? WHERE id = 1", ('{"report": {"rejected": {"x": 1}}}',)
    )
    con.commit()
    con.close()
    from klaraptor.core.errors import StoreError

    with pytest.raises(StoreError, match=r"rejected block 'x' is not '\[bx, by, bz\]'"):
        Store(v1_store)
    # Refused in the migration's transaction: the file is still schema 1, nothing was lost.
    con = sqlite3.connect(v1_store)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
    assert con.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 352
    con.close()


def test_migration_keys_by_the_gpu_and_keeps_the_driver_in_each_build(v1_store: Path) -> None:
    from klaraptor.device.profile import recorded_profile

    with Store(v1_store) as store:
        # Schema 1 keyed by name, driver and SM clock; now the recorded H200's own key.
        key = recorded_profile("h200").key
        assert store.collect_devices(KERNEL) == [key] and list(store.device_profiles()) == [key]
        assert {b.device for b in store.builds()} == {key}
        rec = store.latest_build(KERNEL)
        assert rec is not None and rec.report["device_driver"] == "580.159.04"
        assert len(store.measurements(KERNEL, key, kind="time")) == 256
        assert store.history(KERNEL, key)
        assert load(KERNEL, store=store, device=key).report.device_driver == "580.159.04"


def test_migration_merges_two_drivers_of_one_gpu(v1_store: Path) -> None:
    """A driver update under schema 1 made a second key; both become one, the newer rows win."""
    old = "NVIDIA H200|driver 580.159.04|1980 MHz"
    new = "NVIDIA H200|driver 590.10|1980 MHz"
    con = sqlite3.connect(v1_store)
    (profile,) = con.execute("SELECT profile FROM device_profiles").fetchone()
    p = json.loads(profile)
    p["driver"] = "590.10"
    con.execute(
        "INSERT INTO device_profiles (key, profile, updated) VALUES (?, ?, ?)",
        (new, json.dumps(p), 2e9),
    )
    con.execute(
        "INSERT INTO measurements (kernel, device, d, bx, by, bz, kind, status, value, reason, "
        "created) SELECT kernel, ?, d, bx, by, bz, kind, status, '{\"median_ms\": 9.0}', reason, "
        "created FROM measurements WHERE device = ? AND kind = 'time' LIMIT 3",
        (new, old),
    )
    con.commit()
    con.close()
    with Store(v1_store) as store:
        (key,) = store.device_profiles()
        assert store.device_profile(key)["driver"] == "590.10"  # the newest profile
        times = store.measurements(KERNEL, key, kind="time")
        assert len(times) == 256 and sum(m.value["median_ms"] == 9.0 for m in times) == 3


def test_a_f0a7cc1_store_gains_program_parameters_and_chooses_as_before(tmp_path: Path) -> None:
    """Schema 3 (f0a7cc1, before program parameters) → 4: every row keeps its data, history and
    measurements get the empty variant, and the builds choose exactly as they did."""
    path = tmp_path / "v3.sqlite"
    path.write_bytes(gzip.decompress((DATA / "store_v3_f0a7cc1.sqlite.gz").read_bytes()))
    con = sqlite3.connect(path)
    before = {
        t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("measurements", "history", "builds", "build_rejected", "kernels")
    }
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)
    con.close()
    expected = json.loads((DATA / "store_v3_f0a7cc1.expected.json").read_text())
    with Store(path) as store:
        assert store.schema_version() == SCHEMA_VERSION == 4
        assert store.check() == []
        after = {
            t: store._read(f"SELECT COUNT(*) FROM {t}")[0][0]  # noqa: SLF001 - counting rows
            for t in before
        }
        assert after == before
        for name, choices in expected.items():
            k = load(name, store=store)
            device = k.device_key
            assert all(not m.params for m in store.measurements(name, device))
            assert all(not h.params for h in store.history(name, device))
            for D, (block, grid) in choices.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sel = k.select(json.loads(D))
                assert list(sel.block) == block and list(sel.grid) == grid
