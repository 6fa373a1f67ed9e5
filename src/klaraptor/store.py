"""The Store: one SQLite file holding everything klaraptor measures and builds.

Tables: `kernels` (name → fingerprint, summary), `device_profiles`, `measurements` (one row per
(kernel, device, D, block, kind), upserted), `builds` (fits, helper program, report as JSON),
`history` (the selector's choices per D, upserted).

Many processes may share one file: the journal is WAL (readers never block the writer), every
write is an explicit `BEGIN IMMEDIATE` transaction retried while another process holds the write
lock, and each connection belongs to one process (it is reopened after a fork or unpickling).
The file is marked with `PRAGMA application_id` and a `meta.schema_version`, so a foreign or
newer file is refused with a message naming it instead of being silently modified.
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klaraptor.errors import StoreError

APPLICATION_ID = 0x4B4C5250  # "KLRP" in the SQLite header: marks a klaraptor store
SCHEMA_VERSION = 1
# MIGRATIONS[v] upgrades a store from schema v to v + 1 inside the open write transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}

MEASUREMENT_STATUSES = ("ok", "failed", "rejected")
HISTORY_SOURCES = ("model", "refined", "history")

_SQLITE_MAGIC = b"SQLite format 3\x00"
_HINT = (
    "move the file away or point klaraptor at another store "
    "(set KLARAPTOR_HOME or pass a different path)"
)

_SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE kernels (
    name        TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    summary     TEXT NOT NULL,
    updated     REAL NOT NULL
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
    UNIQUE (kernel, device, d, bx, by, bz, kind)
);
CREATE INDEX measurements_by_kind ON measurements (kernel, device, kind, status);
CREATE TABLE builds (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel  TEXT NOT NULL,
    device  TEXT NOT NULL,
    model   TEXT NOT NULL,
    created REAL NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX builds_latest ON builds (kernel, device, model, created);
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
    UNIQUE (kernel, device, model, d)
);
"""


def default_store_path() -> Path:
    """`$KLARAPTOR_HOME/klaraptor.sqlite`, else `$XDG_CACHE_HOME/klaraptor/…`, else `~/.cache/…`."""
    home = os.environ.get("KLARAPTOR_HOME")
    if home:
        return Path(home).expanduser() / "klaraptor.sqlite"
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache"
    return base / "klaraptor" / "klaraptor.sqlite"


# ---------------------------------------------------------------------------------------------
# Records


def _now() -> float:
    return time.time()


@dataclass
class Measurement:
    """One measured (or refused) point: kernel × device × D × block × kind.

    `D` is ordered as the spec's `data_names`; `value` is a JSON-safe dict (e.g.
    `{"median_ms": 0.12, "spread": 0.01}` for kind 'time', the raw counters for 'ncu').
    """

    kernel: str
    device: str
    D: tuple[int, ...]
    block: tuple[int, int, int]
    kind: str
    status: str
    value: dict[str, Any]
    reason: str = ""
    created: float = field(default_factory=_now)


@dataclass
class HistoryRow:
    """One selector decision for a data size D (the invocation history)."""

    D: tuple[int, ...]
    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    predicted_ms: float | None
    measured_ms: float | None = None
    source: str = "model"
    created: float = field(default_factory=_now)
    model: str = ""


# ---------------------------------------------------------------------------------------------
# Canonical encodings


def _json_default(obj: Any) -> Any:
    # NumPy scalars and arrays reach the store from the collector and the fitter.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _dumps(obj: Any) -> str:
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store a value that is not JSON-serialisable: {exc}") from exc


def _as_int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise StoreError(f"{what} must be an integer, got {x!r}")
    return int(x.__index__())


def _canon_d(D: Iterable[Any]) -> str:
    """D as canonical JSON: a compact list of ints, so equal sizes give equal keys."""
    if isinstance(D, (str, bytes, Mapping)):
        raise StoreError(f"D must be a tuple of ints ordered as the spec's data names, got {D!r}")
    return json.dumps([_as_int(v, "a data parameter") for v in D], separators=(",", ":"))


def _triple(b: Iterable[Any], what: str) -> tuple[int, int, int]:
    t = tuple(_as_int(v, what) for v in b)
    if len(t) != 3:
        raise StoreError(f"{what} must have three entries (x, y, z), got {t!r}")
    return t  # type: ignore[return-value]


def _opt_float(x: Any) -> float | None:
    if x is None:
        return None
    f = float(x)
    return None if math.isnan(f) else f


# ---------------------------------------------------------------------------------------------
# The store


def _is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


class Store:
    """The SQLite store. Safe to share between threads of a process and between processes."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, timeout: float = 30.0
    ) -> None:
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._closed = False
        # Open now so a bad path fails at construction, not at the first write of a long build.
        with self._lock:
            self._connection()

    # -- pickling / forking: a connection never crosses a process boundary -------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "timeout": self.timeout, "closed": self._closed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.timeout = state["timeout"]
        self._lock = threading.RLock()
        self._conn = None
        self._pid = -1
        self._closed = state["closed"]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def close(self) -> None:
        """Close this process's connection. The Store cannot be used afterwards."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
            self._closed = True

    # -- opening and validation --------------------------------------------------------------

    def _err(self, what: str, exc: BaseException | None = None) -> StoreError:
        detail = f" ({exc})" if exc is not None else ""
        return StoreError(f"klaraptor store {self.path}: {what}{detail}")

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise self._err("the store is closed")
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection inherited through fork belongs to the parent: drop it without closing.
        self._conn = None
        self._check_file()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._err("cannot create its directory", exc) from exc
        try:
            conn = sqlite3.connect(
                str(self.path),
                timeout=self.timeout,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # shared between threads under self._lock
            )
        except sqlite3.Error as exc:
            raise self._err("cannot open the file", exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._validate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._pid = os.getpid()
        return conn

    def _check_file(self) -> None:
        """Look at the raw header before SQLite does, to name what is wrong with the file."""
        p = self.path
        if p.is_dir():
            raise StoreError(
                f"klaraptor store {p} is a directory; pass the path of a file inside it, "
                f"e.g. {p / 'klaraptor.sqlite'}"
            )
        if not p.exists():
            return
        try:
            size = p.stat().st_size
            with open(p, "rb") as fh:
                header = fh.read(100)
        except OSError as exc:
            raise self._err("cannot read the file", exc) from exc
        if size == 0:
            return  # a fresh, empty file: we initialise it
        if not header.startswith(_SQLITE_MAGIC[: min(len(header), 16)]):
            raise self._err(f"the file is not an SQLite database; {_HINT}")
        if size < 100:
            raise self._err(f"the file is truncated ({size} bytes, no full header); {_HINT}")
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        n_pages = int.from_bytes(header[28:32], "big")
        # The in-header page count is valid when the change counter matches "version valid for".
        # With a -wal file present a checkpoint may be extending the file right now, so the
        # check would race; SQLite's own corruption errors cover that case.
        wal = p.with_name(p.name + "-wal")
        if (
            header[24:28] == header[92:96]
            and n_pages
            and size < n_pages * page_size
            and not wal.exists()
        ):
            raise self._err(
                f"the file is truncated ({size} bytes, the header says "
                f"{n_pages * page_size}); {_HINT}"
            )
        app_id = int.from_bytes(header[68:72], "big")
        if app_id not in (0, APPLICATION_ID):
            raise self._err(
                f"this is another program's SQLite database (application_id {app_id:#x}), "
                f"not a klaraptor store; {_HINT}"
            )

    def _inspect(self, conn: sqlite3.Connection) -> tuple[int, set[str]]:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return app_id, tables

    def _schema_version(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            raise self._err(f"the meta table has no schema_version: the store is damaged; {_HINT}")
        try:
            return int(row[0])
        except ValueError as exc:
            raise self._err(f"bad schema_version {row[0]!r}; {_HINT}") from exc

    def _state(self, conn: sqlite3.Connection) -> str:
        """'ready', 'empty' (initialise), 'old' (migrate); raises on a foreign or newer file."""
        app_id, tables = self._inspect(conn)
        if app_id == 0 and not tables:
            return "empty"
        if app_id != APPLICATION_ID or "meta" not in tables:
            raise self._err(
                f"this SQLite database was not created by klaraptor (application_id "
                f"{app_id:#x}, tables {sorted(tables)}); {_HINT}"
            )
        version = self._schema_version(conn)
        if version > SCHEMA_VERSION:
            raise self._err(
                f"schema version {version} was written by a newer klaraptor (this one supports "
                f"up to {SCHEMA_VERSION}); upgrade klaraptor or use another store"
            )
        return "old" if version < SCHEMA_VERSION else "ready"

    def _validate(self, conn: sqlite3.Connection) -> None:
        try:
            state = self._retry(lambda: self._state(conn))
            if state != "ready":
                # journal_mode must change outside a transaction; it persists in the file.
                self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
                self._transaction_on(conn, self._initialise_or_migrate)
            # WAL + NORMAL: a commit survives a crash of the process (what resume needs); only a
            # power loss may drop the last commits, and fsync per measured point would be wasted.
            conn.execute("PRAGMA synchronous = NORMAL")
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._err(f"the file is corrupt or unreadable; {_HINT}", exc) from exc

    def _initialise_or_migrate(self, conn: sqlite3.Connection) -> None:
        # Re-check under the write lock: another process may have done it meanwhile.
        state = self._state(conn)
        if state == "empty":
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("created", str(_now())),
                    ("creator", "klaraptor"),
                ],
            )
        elif state == "old":
            version = self._schema_version(conn)
            while version < SCHEMA_VERSION:
                migrate = MIGRATIONS.get(version)
                if migrate is None:
                    raise self._err(f"no migration from schema version {version}; {_HINT}")
                migrate(conn)
                version += 1
                conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),)
                )

    # -- transactions --------------------------------------------------------------------------

    def _retry(self, fn: Callable[[], Any]) -> Any:
        """Run fn, retrying while another process holds a lock that busy_timeout did not absorb."""
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.05)

    def _transaction_on(
        self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], Any]
    ) -> Any:
        def attempt() -> Any:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return self._retry(attempt)

    def _write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run body in one write transaction (all or nothing, durable once it returns)."""
        with self._lock:
            conn = self._connection()
            try:
                return self._transaction_on(conn, body)
            except sqlite3.DatabaseError as exc:
                raise self._wrap(exc) from exc

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            conn = self._connection()
            try:
                return self._retry(lambda: conn.execute(sql, tuple(params)).fetchall())
            except sqlite3.DatabaseError as exc:
                raise self._wrap(exc) from exc

    def _wrap(self, exc: sqlite3.DatabaseError) -> StoreError:
        if _is_locked(exc):
            return self._err(
                f"the database stayed locked for more than {self.timeout:g} s; another process "
                "holds a long write transaction",
                exc,
            )
        return self._err(f"database error; the file may be corrupt; {_HINT}", exc)

    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        return int(self._read("SELECT value FROM meta WHERE key = 'schema_version'")[0][0])

    def check(self) -> list[str]:
        """Run SQLite's integrity check; returns the problems found (empty when healthy)."""
        rows = self._read("PRAGMA integrity_check")
        return [] if rows == [("ok",)] else [r[0] for r in rows]

    # -- kernels --------------------------------------------------------------------------------

    def put_kernel(self, name: str, fingerprint: str, summary: Mapping[str, Any]) -> None:
        """Insert or replace a kernel's fingerprint and summary."""
        summary_json = _dumps(dict(summary))
        self._write(
            lambda c: c.execute(
                "INSERT INTO kernels (name, fingerprint, summary, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET fingerprint = excluded.fingerprint, "
                "summary = excluded.summary, updated = excluded.updated",
                (name, fingerprint, summary_json, _now()),
            )
        )

    def kernel(self, name: str) -> dict[str, Any] | None:
        """`{"name", "fingerprint", "summary", "updated"}` or None if unknown."""
        rows = self._read(
            "SELECT name, fingerprint, summary, updated FROM kernels WHERE name = ?", (name,)
        )
        return self._kernel_row(rows[0]) if rows else None

    def kernels(self) -> list[dict[str, Any]]:
        """All kernels, sorted by name."""
        rows = self._read("SELECT name, fingerprint, summary, updated FROM kernels ORDER BY name")
        return [self._kernel_row(r) for r in rows]

    @staticmethod
    def _kernel_row(r: tuple[Any, ...]) -> dict[str, Any]:
        return {"name": r[0], "fingerprint": r[1], "summary": json.loads(r[2]), "updated": r[3]}

    def delete_kernel(self, name: str) -> int:
        """Delete a kernel with its measurements, builds and history; returns rows deleted."""

        def body(c: sqlite3.Connection) -> int:
            n = 0
            for table, col in (
                ("measurements", "kernel"),
                ("builds", "kernel"),
                ("history", "kernel"),
                ("kernels", "name"),
            ):
                n += c.execute(f"DELETE FROM {table} WHERE {col} = ?", (name,)).rowcount
            return n

        return self._write(body)

    # -- device profiles ------------------------------------------------------------------------

    def put_device_profile(self, key: str, profile: Mapping[str, Any]) -> None:
        """Insert or replace the profile (a JSON-safe dict) cached under `key`."""
        profile_json = _dumps(dict(profile))
        self._write(
            lambda c: c.execute(
                "INSERT INTO device_profiles (key, profile, updated) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET profile = excluded.profile, "
                "updated = excluded.updated",
                (key, profile_json, _now()),
            )
        )

    def device_profile(self, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT profile FROM device_profiles WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None

    def device_profiles(self) -> dict[str, dict[str, Any]]:
        """All cached profiles, key → profile dict."""
        rows = self._read("SELECT key, profile FROM device_profiles ORDER BY key")
        return {k: json.loads(p) for k, p in rows}

    # -- measurements ---------------------------------------------------------------------------

    @staticmethod
    def _measurement_row(m: Measurement) -> tuple[Any, ...]:
        if m.status not in MEASUREMENT_STATUSES:
            raise StoreError(
                f"measurement status must be one of {MEASUREMENT_STATUSES}, got {m.status!r}"
            )
        if not m.kind:
            raise StoreError("measurement kind must be a non-empty string")
        return (
            m.kernel,
            m.device,
            _canon_d(m.D),
            *_triple(m.block, "block"),
            m.kind,
            m.status,
            _dumps(dict(m.value)),
            m.reason or "",
            float(m.created),
        )

    _PUT_MEASUREMENT = (
        "INSERT INTO measurements (kernel, device, d, bx, by, bz, kind, status, value, reason, "
        "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (kernel, device, d, bx, by, bz, kind) DO UPDATE SET "
        "status = excluded.status, value = excluded.value, reason = excluded.reason, "
        "created = excluded.created"
    )

    def put_measurement(self, m: Measurement) -> None:
        """Upsert one point; committed (durable) when this returns, so a crash keeps it."""
        row = self._measurement_row(m)
        self._write(lambda c: c.execute(self._PUT_MEASUREMENT, row))

    def put_measurements(self, ms: Iterable[Measurement]) -> int:
        """Upsert many points in one transaction (all or none); returns how many."""
        rows = [self._measurement_row(m) for m in ms]
        if rows:
            self._write(lambda c: c.executemany(self._PUT_MEASUREMENT, rows))
        return len(rows)

    def measurements(
        self,
        kernel: str,
        device: str,
        kind: str | None = None,
        status: str | None = None,
    ) -> list[Measurement]:
        """Points of one kernel on one device, optionally of one kind / status, oldest first."""
        sql = (
            "SELECT kernel, device, d, bx, by, bz, kind, status, value, reason, created "
            "FROM measurements WHERE kernel = ? AND device = ?"
        )
        params: list[Any] = [kernel, device]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY id"
        return [
            Measurement(
                kernel=r[0],
                device=r[1],
                D=tuple(json.loads(r[2])),
                block=(r[3], r[4], r[5]),
                kind=r[6],
                status=r[7],
                value=json.loads(r[8]),
                reason=r[9],
                created=r[10],
            )
            for r in self._read(sql, params)
        ]

    def measured_keys(
        self, kernel: str, device: str, kind: str
    ) -> set[tuple[tuple[int, ...], tuple[int, int, int]]]:
        """(D, block) pairs already done (status ok or failed): what a resumed build skips."""
        rows = self._read(
            "SELECT d, bx, by, bz FROM measurements WHERE kernel = ? AND device = ? AND kind = ? "
            "AND status IN ('ok', 'failed')",
            (kernel, device, kind),
        )
        return {(tuple(json.loads(d)), (bx, by, bz)) for d, bx, by, bz in rows}

    def count_measurements(self, kernel: str | None = None) -> int:
        """Number of measurement rows (of one kernel, or all)."""
        if kernel is None:
            return int(self._read("SELECT COUNT(*) FROM measurements")[0][0])
        return int(
            self._read("SELECT COUNT(*) FROM measurements WHERE kernel = ?", (kernel,))[0][0]
        )

    # -- builds ---------------------------------------------------------------------------------

    def put_build(self, kernel: str, device: str, model: str, payload: Mapping[str, Any]) -> int:
        """Record a build (fits, helper program, report); returns its id."""
        payload_json = _dumps(dict(payload))
        return int(
            self._write(
                lambda c: (
                    c.execute(
                        "INSERT INTO builds (kernel, device, model, created, payload) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (kernel, device, model, _now(), payload_json),
                    ).lastrowid
                )
            )
        )

    @staticmethod
    def _build_row(r: tuple[Any, ...], with_payload: bool = True) -> dict[str, Any]:
        out = {"id": r[0], "kernel": r[1], "device": r[2], "model": r[3], "created": r[4]}
        if with_payload:
            out["payload"] = json.loads(r[5])
        return out

    def latest_build(
        self, kernel: str, device: str | None = None, model: str | None = None
    ) -> dict[str, Any] | None:
        """The newest build of a kernel (optionally for one device / model), or None."""
        sql = "SELECT id, kernel, device, model, created, payload FROM builds WHERE kernel = ?"
        params: list[Any] = [kernel]
        if device is not None:
            sql += " AND device = ?"
            params.append(device)
        if model is not None:
            sql += " AND model = ?"
            params.append(model)
        rows = self._read(sql + " ORDER BY created DESC, id DESC LIMIT 1", params)
        return self._build_row(rows[0]) if rows else None

    def builds(
        self, kernel: str | None = None, *, with_payload: bool = False
    ) -> list[dict[str, Any]]:
        """Builds, newest first: `{"id", "kernel", "device", "model", "created"}` (+ "payload")."""
        cols = "id, kernel, device, model, created" + (", payload" if with_payload else "")
        if kernel is None:
            rows = self._read(f"SELECT {cols} FROM builds ORDER BY created DESC, id DESC")
        else:
            rows = self._read(
                f"SELECT {cols} FROM builds WHERE kernel = ? ORDER BY created DESC, id DESC",
                (kernel,),
            )
        return [self._build_row(r, with_payload) for r in rows]

    # -- invocation history ---------------------------------------------------------------------

    @staticmethod
    def _history_row(kernel: str, device: str, model: str, row: Any) -> tuple[Any, ...]:
        if isinstance(row, Mapping):
            row = HistoryRow(**{k: v for k, v in row.items() if k != "model"})
        if not isinstance(row, HistoryRow):
            raise StoreError(
                f"history rows must be HistoryRow or mappings, got {type(row).__name__}"
            )
        if row.source not in HISTORY_SOURCES:
            raise StoreError(f"history source must be one of {HISTORY_SOURCES}, got {row.source!r}")
        return (
            kernel,
            device,
            model,
            _canon_d(row.D),
            *_triple(row.block, "block"),
            *_triple(row.grid, "grid"),
            _opt_float(row.predicted_ms),
            _opt_float(row.measured_ms),
            row.source,
            float(row.created),
        )

    def record_history(
        self, kernel: str, device: str, model: str, rows: Iterable[HistoryRow | Mapping[str, Any]]
    ) -> int:
        """Upsert the selector's decisions (one per D) in one transaction; returns how many."""
        data = [self._history_row(kernel, device, model, r) for r in rows]
        if data:
            self._write(
                lambda c: c.executemany(
                    "INSERT INTO history (kernel, device, model, d, bx, by, bz, gx, gy, gz, "
                    "predicted_ms, measured_ms, source, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (kernel, device, model, d) DO UPDATE SET "
                    "bx = excluded.bx, by = excluded.by, bz = excluded.bz, gx = excluded.gx, "
                    "gy = excluded.gy, gz = excluded.gz, predicted_ms = excluded.predicted_ms, "
                    "measured_ms = excluded.measured_ms, source = excluded.source, "
                    "created = excluded.created",
                    data,
                )
            )
        return len(data)

    def history(self, kernel: str, device: str, model: str | None = None) -> list[HistoryRow]:
        """Recorded decisions of a kernel on a device (optionally one model), oldest first."""
        sql = (
            "SELECT d, bx, by, bz, gx, gy, gz, predicted_ms, measured_ms, source, created, model "
            "FROM history WHERE kernel = ? AND device = ?"
        )
        params: list[Any] = [kernel, device]
        if model is not None:
            sql += " AND model = ?"
            params.append(model)
        return [
            HistoryRow(
                D=tuple(json.loads(r[0])),
                block=(r[1], r[2], r[3]),
                grid=(r[4], r[5], r[6]),
                predicted_ms=r[7],
                measured_ms=r[8],
                source=r[9],
                created=r[10],
                model=r[11],
            )
            for r in self._read(sql + " ORDER BY created, id", params)
        ]
