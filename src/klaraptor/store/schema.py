"""The store's SQLite schema, and the migrations that bring older files up to it.

Version 1 (klaraptor ≤ 3a4d02d) kept collection facts and ground-truth decisions as nested JSON
inside each kernel's summary, and a build's rejected blocks as `"[bx, by, bz]"` strings inside
its payload, and keyed everything per GPU by name, driver and SM clock. Version 2 gives each its
own table and keys by what changes performance (`DeviceProfile.key`: model, SMs, clocks, memory
size), with the driver recorded in each build's report; `migrate_1_to_2` moves the data over in
the same write transaction that opens the file. Version 3 adds the tables of statistical models
(`kernel_features`, `stat_models`: SNOWPACK's static features and fitted models). Version 4 adds
program parameters: a measurement, a history row and a build's refused configuration name their
compiled variant (`params`, "ITEMS=4,TILE=16", empty without parameters).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

from klaraptor.core.errors import StoreError
from klaraptor.store.records import CollectFacts, dumps

APPLICATION_ID = 0x4B4C5250  # "KLRP" in the SQLite header: marks a klaraptor store
SCHEMA_VERSION = 4

SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE kernels (
    name        TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    data_names  TEXT NOT NULL,
    spec        TEXT NOT NULL,
    updated     REAL NOT NULL
);
CREATE TABLE collect_facts (
    kernel  TEXT NOT NULL,
    device  TEXT NOT NULL,
    facts   TEXT NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (kernel, device)
);
CREATE TABLE truth_decisions (
    kernel     TEXT NOT NULL,
    device     TEXT NOT NULL,
    d          TEXT NOT NULL,
    measure    INTEGER NOT NULL,
    estimate_s REAL NOT NULL,
    reason     TEXT NOT NULL,
    decided    TEXT NOT NULL,
    PRIMARY KEY (kernel, device, d)
);
CREATE TABLE device_profiles (
    key     TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE measurements (
    id      INTEGER PRIMARY KEY,
    kernel  TEXT NOT NULL,
    device  TEXT NOT NULL,
    d       TEXT NOT NULL,
    bx      INTEGER NOT NULL,
    by      INTEGER NOT NULL,
    bz      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    status  TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'rejected')),
    value   TEXT NOT NULL,
    reason  TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    params  TEXT NOT NULL DEFAULT '',
    UNIQUE (kernel, device, d, params, bx, by, bz, kind)
);
CREATE INDEX measurements_by_kind ON measurements (kernel, device, kind, status);
CREATE TABLE builds (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel  TEXT NOT NULL,
    device  TEXT NOT NULL,
    model   TEXT NOT NULL,
    created REAL NOT NULL,
    helper  TEXT NOT NULL,
    report  TEXT NOT NULL
);
CREATE INDEX builds_latest ON builds (kernel, device, model, created);
CREATE TABLE build_rejected (
    build_id INTEGER NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    bx       INTEGER NOT NULL,
    by       INTEGER NOT NULL,
    bz       INTEGER NOT NULL,
    reason   TEXT NOT NULL,
    params   TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (build_id, params, bx, by, bz)
);
CREATE TABLE history (
    id           INTEGER PRIMARY KEY,
    kernel       TEXT NOT NULL,
    device       TEXT NOT NULL,
    model        TEXT NOT NULL,
    d            TEXT NOT NULL,
    bx           INTEGER NOT NULL,
    by           INTEGER NOT NULL,
    bz           INTEGER NOT NULL,
    gx           INTEGER NOT NULL,
    gy           INTEGER NOT NULL,
    gz           INTEGER NOT NULL,
    predicted_ms REAL,
    measured_ms  REAL,
    source       TEXT NOT NULL CHECK (source IN ('model', 'refined', 'history')),
    created      REAL NOT NULL,
    params       TEXT NOT NULL DEFAULT '',
    UNIQUE (kernel, device, model, d)
);
CREATE TABLE kernel_features (
    kernel   TEXT NOT NULL,
    arch     TEXT NOT NULL,
    version  TEXT NOT NULL,
    features TEXT NOT NULL,
    source   TEXT NOT NULL,
    updated  REAL NOT NULL,
    PRIMARY KEY (kernel, arch, version)
);
CREATE TABLE stat_models (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT NOT NULL,
    device          TEXT NOT NULL,
    feature_version TEXT NOT NULL,
    sklearn_version TEXT NOT NULL,
    created         REAL NOT NULL,
    info            TEXT NOT NULL,
    blob            BLOB NOT NULL
);
CREATE INDEX stat_models_latest ON stat_models (name, device, created);
"""

TABLES = frozenset(re.findall(r"CREATE TABLE (\w+)", SCHEMA))


def create(conn: sqlite3.Connection) -> None:
    """Create every table of the current schema (inside the caller's transaction)."""
    for stmt in SCHEMA.split(";"):
        if stmt.strip():
            conn.execute(stmt)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(f"cannot migrate: {what} is not valid JSON ({exc})") from None


_TRIPLE = re.compile(r"^\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")


_LEGACY_KEY = re.compile(r"^(?P<name>.*)\|driver (?P<driver>.*)\|(?P<clock>\d+) MHz$")


def _device_keys(conn: sqlite3.Connection) -> tuple[dict[str, str], dict[str, str]]:
    """Schema-1 device key → current key, and → driver. The stored profiles give both; a key
    without a profile keeps its text and gives its driver from the old format."""
    import warnings

    from klaraptor.core.errors import KlaraptorError
    from klaraptor.device.profile import DeviceProfile, with_known_memory_size

    keys: dict[str, str] = {}
    drivers: dict[str, str] = {}
    # Oldest first, so that where two drivers of one GPU meet under one key the newest wins.
    rows = conn.execute(
        "SELECT key, profile, updated FROM device_profiles ORDER BY updated, key"
    ).fetchall()
    conn.execute("DELETE FROM device_profiles")
    for old, text, updated in rows:
        data = with_known_memory_size(_loads(text, f"the device profile {old!r}"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # fields a newer writer added: not ours to judge
                profile = DeviceProfile.from_dict(data)
        except KlaraptorError as exc:
            raise StoreError(f"cannot migrate the device profile {old!r}: {exc}") from None
        keys[old] = profile.key
        drivers[old] = profile.driver
        conn.execute(
            "INSERT OR REPLACE INTO device_profiles (key, profile, updated) VALUES (?, ?, ?)",
            (profile.key, dumps(profile.to_dict()), updated),
        )
    for table in ("measurements", "builds_v1", "history"):
        for (device,) in conn.execute(f"SELECT DISTINCT device FROM {table}").fetchall():
            m = _LEGACY_KEY.match(device)
            if device not in drivers and m is not None:
                drivers[device] = m.group("driver")
    return keys, drivers


def migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Schema 1 → 2: nested summary JSON and block strings become rows of their own tables;
    device keys lose the driver, which each build's report keeps as `device_driver`."""
    conn.execute("ALTER TABLE kernels RENAME TO kernels_v1")
    conn.execute("ALTER TABLE builds RENAME TO builds_v1")
    conn.execute("DROP INDEX IF EXISTS builds_latest")
    for stmt in SCHEMA.split(";"):
        name = re.search(r"CREATE (?:TABLE|INDEX) (\w+)", stmt)
        if name and name.group(1) in (
            "kernels",
            "collect_facts",
            "truth_decisions",
            "builds",
            "builds_latest",
            "build_rejected",
        ):
            conn.execute(stmt)
    keys, drivers = _device_keys(conn)
    rows = conn.execute("SELECT name, fingerprint, summary, updated FROM kernels_v1").fetchall()
    for name, fingerprint, summary_json, updated in rows:
        summary = _loads(summary_json, f"the summary of kernel {name!r}")
        collect = summary.pop("collect", None) or {}
        truth = summary.pop("truth", None) or {}
        names = [str(d["name"]) for d in summary.get("data", []) if isinstance(d, dict)]
        conn.execute(
            "INSERT INTO kernels (name, fingerprint, data_names, spec, updated) "
            "VALUES (?, ?, ?, ?, ?)",
            (name, fingerprint, dumps(names), dumps(summary), updated),
        )
        for device, entry in collect.items():
            facts = CollectFacts.from_dict(entry)
            conn.execute(
                "INSERT OR REPLACE INTO collect_facts (kernel, device, facts, updated) "
                "VALUES (?, ?, ?, ?)",
                (name, keys.get(device, device), dumps(facts.to_dict()), updated),
            )
        for device, decisions in truth.items():
            for n, dec in decisions.items():
                conn.execute(
                    "INSERT OR REPLACE INTO truth_decisions (kernel, device, d, measure, "
                    "estimate_s, reason, decided) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        keys.get(device, device),
                        dumps([int(n)]),
                        int(bool(dec.get("measure"))),
                        float(dec.get("estimate_s", float("nan"))),
                        str(dec.get("reason", "")),
                        str(dec.get("decided", "")),
                    ),
                )
    rows = conn.execute(
        "SELECT id, kernel, device, model, created, payload FROM builds_v1 ORDER BY id"
    ).fetchall()
    for build_id, kernel, device, model, created, payload_json in rows:
        payload = _loads(payload_json, f"build {build_id} of {kernel!r}")
        if not isinstance(payload, dict):
            raise StoreError(f"cannot migrate build {build_id} of {kernel!r}: not a JSON object")
        report = dict(payload.get("report") or {})
        rejected = report.pop("rejected", None) or {}
        if device in drivers:
            report.setdefault("device_driver", drivers[device])
        conn.execute(
            "INSERT INTO builds (id, kernel, device, model, created, helper, report) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                build_id,
                kernel,
                keys.get(device, device),
                model,
                created,
                dumps(payload.get("helper") or {}),
                dumps(report),
            ),
        )
        for text, why in rejected.items():
            m = _TRIPLE.match(str(text))
            if m is None:
                raise StoreError(
                    f"cannot migrate build {build_id} of {kernel!r}: rejected block {text!r} "
                    "is not '[bx, by, bz]'"
                )
            conn.execute(
                "INSERT INTO build_rejected (build_id, bx, by, bz, reason) VALUES (?, ?, ?, ?, ?)",
                (build_id, *(int(g) for g in m.groups()), str(why)),
            )
    # Oldest key first: where two drivers' rows meet under one key, the newer driver's win.
    for old, new in keys.items():
        if old != new:
            for table in ("measurements", "history"):
                conn.execute(
                    f"UPDATE OR REPLACE {table} SET device = ? WHERE device = ?", (new, old)
                )
    conn.execute("DROP TABLE kernels_v1")
    conn.execute("DROP TABLE builds_v1")


def migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """Schema 2 → 3: the tables of statistical models (SNOWPACK): static kernel features and
    fitted models. Nothing existing changes."""
    for stmt in SCHEMA.split(";"):
        name = re.search(r"CREATE (?:TABLE|INDEX) (\w+)", stmt)
        if name and name.group(1) in ("kernel_features", "stat_models", "stat_models_latest"):
            conn.execute(stmt)


def _rebuild(conn: sqlite3.Connection, table: str, columns: str) -> None:
    """Recreate `table` with the current schema's definition (SQLite cannot change a key in
    place), copying `columns` over; its indexes are made again."""
    conn.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
    for stmt in SCHEMA.split(";"):
        m = re.search(r"CREATE (?:TABLE|INDEX) (\w+)(?: ON (\w+))?", stmt)
        if m and (m.group(1) == table or m.group(2) == table):
            if m.group(2) == table:
                conn.execute(f"DROP INDEX IF EXISTS {m.group(1)}")
            conn.execute(stmt)
    conn.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}_old")
    conn.execute(f"DROP TABLE {table}_old")


def migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Schema 3 → 4: program parameters. Measurements and a build's refused configurations get
    `params` in their key, history rows a `params` column; every existing row is of a kernel
    without parameters (params '')."""
    _rebuild(
        conn,
        "measurements",
        "id, kernel, device, d, bx, by, bz, kind, status, value, reason, created",
    )
    _rebuild(conn, "build_rejected", "build_id, bx, by, bz, reason")
    conn.execute("ALTER TABLE history ADD COLUMN params TEXT NOT NULL DEFAULT ''")


# MIGRATIONS[v] upgrades a store from schema v to v + 1 inside the open write transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: migrate_1_to_2,
    2: migrate_2_to_3,
    3: migrate_3_to_4,
}
