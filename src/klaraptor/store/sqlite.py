"""The Store: one SQLite file holding everything klaraptor measures and builds.

Tables (schema.py): `kernels` (name → fingerprint, data names, spec description),
`collect_facts` and `truth_decisions` (per kernel and GPU), `device_profiles`, `measurements`
(one row per (kernel, device, D, block, kind), upserted), `builds` (helper program and report)
with `build_rejected`, and `history` (the selector's choices per D, upserted). Reads and writes
go through the typed records of records.py.

Many processes may share one file: the journal is WAL (readers never block the writer), every
write is an explicit `BEGIN IMMEDIATE` transaction retried while another process holds the write
lock, and each connection belongs to one process (it is reopened after a fork or unpickling).
The file is marked with `PRAGMA application_id` and a `meta.schema_version`, so a foreign or
newer file is refused with a message naming it instead of being silently modified; an older one
is migrated (schema.MIGRATIONS) in the transaction that opens it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from klaraptor.core.errors import KlaraptorError, StoreError
from klaraptor.core.types import Block, Config, DataSize, ParamValues
from klaraptor.device.profile import DeviceProfile
from klaraptor.store.connection import HINT, StoreFile
from klaraptor.store.records import (
    HISTORY_SOURCES,
    MEASUREMENT_STATUSES,
    BuildInfo,
    BuildRecord,
    CollectFacts,
    HistoryRow,
    KernelRecord,
    Measurement,
    StaticFeatures,
    StatModelRecord,
    TruthDecision,
    dumps,
    now,
    opt_float,
    params_from_text,
    params_text,
)


def _inserted_id(cursor: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just wrote (typed `int | None` for statements that insert
    nothing)."""
    if cursor.lastrowid is None:
        raise StoreError("an INSERT wrote no row")
    return cursor.lastrowid


def _as_int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise StoreError(f"{what} must be an integer, got {x!r}")
    return int(x.__index__())


def _triple(b: Iterable[Any], what: str) -> tuple[int, int, int]:
    t = tuple(_as_int(v, what) for v in b)
    if len(t) != 3:
        raise StoreError(f"{what} must have three entries (x, y, z), got {t!r}")
    return t  # type: ignore[return-value]


def _canon_d(D: Any, names: tuple[str, ...], kernel: str) -> str:
    """D as canonical JSON (a compact list of ints ordered as the kernel's data names)."""
    if type(D) is not DataSize:
        raise StoreError(f"{kernel}: D must be a DataSize (KernelSpec.size(...)), got {D!r}")
    if D.names != names:
        raise StoreError(
            f"{kernel}: D={D} names {list(D.names)}, but the kernel's data parameters are "
            f"{list(names)}"
        )
    return json.dumps(list(D.values()), separators=(",", ":"))


_NEWEST = "created DESC, id DESC LIMIT 1"  # the order that reads the newest row only


class Store(StoreFile):
    """The SQLite store: typed records in, typed records out (see records.py)."""

    # -- kernels --------------------------------------------------------------------------------

    def put_kernel(self, record: KernelRecord) -> None:
        """Insert or replace a kernel's identity (fingerprint, data names, spec description)."""
        if not isinstance(record, KernelRecord):
            raise StoreError(f"put_kernel takes a KernelRecord, got {type(record).__name__}")
        row = (
            record.name,
            record.fingerprint,
            dumps(list(record.data_names)),
            dumps(dict(record.spec)),
            float(record.updated),
        )
        self._write(
            lambda c: c.execute(
                "INSERT INTO kernels (name, fingerprint, data_names, spec, updated) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, data_names = excluded.data_names, "
                "spec = excluded.spec, updated = excluded.updated",
                row,
            )
        )
        self._names[record.name] = tuple(record.data_names)

    def kernel(self, name: str) -> KernelRecord | None:
        """The kernel's record, or None if the store does not know it."""
        rows = self._read(
            "SELECT name, fingerprint, data_names, spec, updated FROM kernels WHERE name = ?",
            (name,),
        )
        return self._kernel_row(rows[0]) if rows else None

    def kernels(self) -> list[KernelRecord]:
        """All kernels, sorted by name."""
        rows = self._read(
            "SELECT name, fingerprint, data_names, spec, updated FROM kernels ORDER BY name"
        )
        return [self._kernel_row(r) for r in rows]

    def _kernel_row(self, r: tuple[Any, ...]) -> KernelRecord:
        what = f"kernel {r[0]!r}"
        names, spec = self._json(r[2], what), self._json(r[3], what)
        if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
            raise self._err(f"the stored data names of {what} are malformed ({names!r}); {HINT}")
        if not isinstance(spec, dict):
            raise self._err(f"the stored spec of {what} is not a JSON object; {HINT}")
        return KernelRecord(r[0], r[1], tuple(names), spec, r[4])

    def _size(self, text: str, names: tuple[str, ...], what: str) -> DataSize:
        """A stored D (a JSON list of ints ordered as `names`) as a DataSize."""
        values = self._json(text, what)
        if not (
            isinstance(values, list)
            and len(values) == len(names)
            and all(type(v) is int for v in values)
        ):
            raise self._err(
                f"the stored size of {what} is {text!r}, not {len(names)} integers "
                f"({', '.join(names)}); {HINT}"
            )
        return DataSize(names, values)

    def _json(self, text: str, what: str) -> Any:
        try:
            return json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise self._err(
                f"the stored record of {what} is not valid JSON ({exc}); {HINT}"
            ) from None

    def data_names(self, kernel: str) -> tuple[str, ...]:
        """The data parameter names of a registered kernel (what orders its stored D)."""
        names = self._names.get(kernel)
        if names is None:
            rec = self.kernel(kernel)
            if rec is None:
                raise StoreError(
                    f"kernel {kernel!r} is not registered in {self.path}; store its KernelRecord "
                    "(put_kernel) before its measurements, builds or history"
                )
            names = self._names[kernel] = rec.data_names
        return names

    def delete_kernel(self, name: str) -> int:
        """Delete a kernel with everything stored about it; returns the rows deleted."""

        def body(c: sqlite3.Connection) -> int:
            n = c.execute(
                "DELETE FROM build_rejected WHERE build_id IN "
                "(SELECT id FROM builds WHERE kernel = ?)",
                (name,),
            ).rowcount
            for table, col in (
                ("measurements", "kernel"),
                ("builds", "kernel"),
                ("history", "kernel"),
                ("collect_facts", "kernel"),
                ("truth_decisions", "kernel"),
                ("kernel_features", "kernel"),
                ("kernels", "name"),
            ):
                n += c.execute(f"DELETE FROM {table} WHERE {col} = ?", (name,)).rowcount
            return n

        self._names.pop(name, None)
        return self._write(body)

    # -- what collection learned, per GPU ----------------------------------------------------

    def put_collect_facts(self, kernel: str, device: str, facts: CollectFacts) -> None:
        """Insert or replace the collection facts of a kernel on a GPU."""
        self.data_names(kernel)
        row = (kernel, device, dumps(facts.to_dict()), now())
        self._write(
            lambda c: c.execute(
                "INSERT INTO collect_facts (kernel, device, facts, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (kernel, device) DO UPDATE SET facts = excluded.facts, "
                "updated = excluded.updated",
                row,
            )
        )

    def collect_facts(self, kernel: str, device: str) -> CollectFacts | None:
        rows = self._read(
            "SELECT facts FROM collect_facts WHERE kernel = ? AND device = ?", (kernel, device)
        )
        if not rows:
            return None
        what = f"the collection facts of {kernel!r} on {device!r}"
        try:
            return CollectFacts.from_dict(self._json(rows[0][0], what))
        except StoreError:
            raise
        except KlaraptorError as exc:
            raise self._err(f"{what} are malformed ({exc}); {HINT}") from None

    def collect_devices(self, kernel: str) -> list[str]:
        """The GPUs a kernel was collected on."""
        rows = self._read(
            "SELECT device FROM collect_facts WHERE kernel = ? ORDER BY device", (kernel,)
        )
        return [r[0] for r in rows]

    def put_truth_decisions(
        self, kernel: str, device: str, decisions: Iterable[TruthDecision]
    ) -> None:
        names = self.data_names(kernel)
        rows = [
            (
                kernel,
                device,
                _canon_d(d.D, names, kernel),
                int(bool(d.measure)),
                float(d.estimate_s),
                d.reason,
                d.decided,
            )
            for d in decisions
        ]
        self._write(
            lambda c: c.executemany(
                "INSERT INTO truth_decisions (kernel, device, d, measure, estimate_s, reason, "
                "decided) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kernel, device, d) DO UPDATE "
                "SET measure = excluded.measure, estimate_s = excluded.estimate_s, "
                "reason = excluded.reason, decided = excluded.decided",
                rows,
            )
        )

    def truth_decisions(self, kernel: str, device: str) -> dict[DataSize, TruthDecision]:
        names = self.data_names(kernel)
        rows = self._read(
            "SELECT d, measure, estimate_s, reason, decided FROM truth_decisions "
            "WHERE kernel = ? AND device = ?",
            (kernel, device),
        )
        out = {}
        for d, measure, est, reason, decided in rows:
            D = self._size(d, names, f"a truth decision of {kernel!r}")
            out[D] = TruthDecision(D, bool(measure), float(est), reason, decided)
        return out

    # -- device profiles ------------------------------------------------------------------------

    def put_device_profile(self, key: str, profile: Mapping[str, Any]) -> None:
        """Insert or replace the profile (a JSON-safe dict) cached under `key`."""
        profile_json = dumps(dict(profile))
        self._write(
            lambda c: c.execute(
                "INSERT INTO device_profiles (key, profile, updated) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET profile = excluded.profile, "
                "updated = excluded.updated",
                (key, profile_json, now()),
            )
        )

    def device_profile(self, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT profile FROM device_profiles WHERE key = ?", (key,))
        return self._object(rows[0][0], f"device profile {key!r}") if rows else None

    def cached_profile(self, key: str) -> DeviceProfile | None:
        """The device profile cached under `key` (see DeviceProfile.key), or None."""
        data = self.device_profile(key)
        return None if data is None else DeviceProfile.from_dict(data)

    def save_profile(self, profile: DeviceProfile) -> None:
        """Cache a device profile under its key."""
        self.put_device_profile(profile.key, profile.to_dict())

    def device_profiles(self) -> dict[str, dict[str, Any]]:
        """All cached profiles, key → profile dict."""
        rows = self._read("SELECT key, profile FROM device_profiles ORDER BY key")
        return {k: self._object(p, f"device profile {k!r}") for k, p in rows}

    def _object(self, text: str, what: str) -> dict[str, Any]:
        value = self._json(text, what)
        if not isinstance(value, dict):
            raise self._err(f"the stored {what} is not a JSON object; {HINT}")
        return value

    # -- measurements ---------------------------------------------------------------------------

    def _measurement_row(self, m: Measurement) -> tuple[Any, ...]:
        if m.status not in MEASUREMENT_STATUSES:
            raise StoreError(
                f"measurement status must be one of {MEASUREMENT_STATUSES}, got {m.status!r}"
            )
        if not m.kind:
            raise StoreError("measurement kind must be a non-empty string")
        return (
            m.kernel,
            m.device,
            _canon_d(m.D, self.data_names(m.kernel), m.kernel),
            *_triple(m.block, "block"),
            m.kind,
            m.status,
            dumps(dict(m.value)),
            m.reason or "",
            float(m.created),
            params_text(m.params),
        )

    _PUT_MEASUREMENT = (
        "INSERT INTO measurements (kernel, device, d, bx, by, bz, kind, status, value, reason, "
        "created, params) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (kernel, device, d, params, bx, by, bz, kind) DO UPDATE SET "
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

    def _read_where(
        self, sql: str, args: Sequence[Any], order: str, **equal: str | None
    ) -> list[tuple[Any, ...]]:
        """The rows of `sql` (a SELECT ending in a WHERE clause over `args`) whose columns in
        `equal` also hold the given values (a None value: any), ordered by `order`."""
        values = list(args)
        for column, value in equal.items():
            if value is not None:
                sql += f" AND {column} = ?"
                values.append(value)
        return self._read(f"{sql} ORDER BY {order}", values)

    def measurements(
        self,
        kernel: str,
        device: str,
        kind: str | None = None,
        status: str | None = None,
    ) -> list[Measurement]:
        """Points of one kernel on one device, optionally of one kind / status, oldest first."""
        sql = (
            "SELECT d, bx, by, bz, kind, status, value, reason, created, params "
            "FROM measurements WHERE kernel = ? AND device = ?"
        )
        rows = self._read_where(sql, (kernel, device), "id", kind=kind, status=status)
        if not rows:
            return []
        names = self.data_names(kernel)
        return [
            Measurement(
                kernel=kernel,
                device=device,
                D=self._size(r[0], names, f"a measurement of {kernel!r}"),
                block=(r[1], r[2], r[3]),
                kind=r[4],
                status=r[5],
                value=self._object(r[6], f"a measurement of {kernel!r}"),
                reason=r[7],
                created=r[8],
                params=params_from_text(r[9]),
            )
            for r in rows
        ]

    def measured_keys(self, kernel: str, device: str, kind: str) -> set[tuple[DataSize, Block]]:
        """(D, block) pairs already done (status ok or failed) of a kernel without program
        parameters: what a resumed build skips (`measured_configs` for every kernel)."""
        return {
            (D, c.block) for D, c in self.measured_configs(kernel, device, kind) if not c.params
        }

    def measured_configs(self, kernel: str, device: str, kind: str) -> set[tuple[DataSize, Config]]:
        """(D, configuration) pairs already done (status ok or failed): what a resumed build
        skips."""
        rows = self._read(
            "SELECT d, params, bx, by, bz FROM measurements WHERE kernel = ? AND device = ? "
            "AND kind = ? AND status IN ('ok', 'failed')",
            (kernel, device, kind),
        )
        if not rows:
            return set()
        names = self.data_names(kernel)
        what = f"a measurement of {kernel!r}"
        return {
            (self._size(d, names, what), Config(params_from_text(p), (bx, by, bz)))
            for d, p, bx, by, bz in rows
        }

    def count_measurements(self, kernel: str | None = None) -> int:
        """Number of measurement rows (of one kernel, or all)."""
        if kernel is None:
            return int(self._read("SELECT COUNT(*) FROM measurements")[0][0])
        return int(
            self._read("SELECT COUNT(*) FROM measurements WHERE kernel = ?", (kernel,))[0][0]
        )

    # -- builds ---------------------------------------------------------------------------------

    def put_build(
        self,
        kernel: str,
        device: str,
        model: str,
        helper: Mapping[str, Any],
        report: Mapping[str, Any],
        rejected: Mapping[Block | Config, str] | None = None,
    ) -> int:
        """Record a build (helper program, report, configurations refused at build: keyed by
        block, or by Config for a kernel with program parameters); returns its id."""
        helper_json, report_json = dumps(dict(helper)), dumps(dict(report))
        rej = []
        for key, why in (rejected or {}).items():
            pv, b = (key.params, key.block) if isinstance(key, Config) else (ParamValues.NONE, key)
            rej.append((*_triple(b, "rejected block"), str(why), params_text(pv)))

        def body(c: sqlite3.Connection) -> int:
            build_id = _inserted_id(
                c.execute(
                    "INSERT INTO builds (kernel, device, model, created, helper, report) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (kernel, device, model, now(), helper_json, report_json),
                )
            )
            c.executemany(
                "INSERT INTO build_rejected (build_id, bx, by, bz, reason, params) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(build_id, *r) for r in rej],
            )
            return build_id

        return int(self._write(body))

    def latest_build(
        self, kernel: str, device: str | None = None, model: str | None = None
    ) -> BuildRecord | None:
        """The newest build of a kernel (optionally for one device / model), or None."""
        sql = (
            "SELECT id, kernel, device, model, created, helper, report FROM builds WHERE kernel = ?"
        )
        rows = self._read_where(sql, (kernel,), _NEWEST, device=device, model=model)
        if not rows:
            return None
        r = rows[0]
        what = f"build {r[0]} of {kernel!r}"
        rejected: dict[Block | Config, str] = {}
        for bx, by, bz, why, p in self._read(
            "SELECT bx, by, bz, reason, params FROM build_rejected WHERE build_id = ? "
            "ORDER BY params, bx, by, bz",
            (r[0],),
        ):
            key: Block | Config = (
                (bx, by, bz) if not p else Config(params_from_text(p), (bx, by, bz))
            )
            rejected[key] = why
        helper, report = self._json(r[5], what), self._json(r[6], what)
        if not isinstance(helper, dict) or not isinstance(report, dict):
            raise self._err(f"{what} is malformed (helper and report must be JSON objects)")
        return BuildRecord(r[0], r[1], r[2], r[3], r[4], helper, report, rejected)

    def delete_builds(
        self,
        kernel: str | None = None,
        *,
        device: str | None = None,
        model: str | None = None,
        keep: int = 0,
        dry_run: bool = False,
    ) -> list[BuildInfo]:
        """Delete builds (of one kernel / device / model when named), keeping the newest `keep`
        of each (kernel, device, model); returns the builds deleted (or that would be, with
        `dry_run`). `latest_build` serves the newest of each, so `keep=1` deletes only builds
        no lookup reaches. Measurements and history stay."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise StoreError(f"keep must be an integer >= 0, got {keep!r}")
        where, params = [], []
        for col, value in (("kernel", kernel), ("device", device), ("model", model)):
            if value is not None:
                where.append(f"{col} = ?")
                params.append(value)
        cond = f"WHERE {' AND '.join(where)}" if where else ""
        # Rank each (kernel, device, model)'s builds newest first, as latest_build orders them.
        ranked = (
            "SELECT id, kernel, device, model, created, ROW_NUMBER() OVER (PARTITION BY kernel, "
            f"device, model ORDER BY created DESC, id DESC) AS age FROM builds {cond}"
        )
        sql = f"SELECT id, kernel, device, model, created FROM ({ranked}) WHERE age > ?"
        doomed = [BuildInfo(*r) for r in self._read(sql + " ORDER BY kernel, id", [*params, keep])]
        if dry_run or not doomed:
            return doomed
        ids = [(b.id,) for b in doomed]

        def body(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM build_rejected WHERE build_id = ?", ids)
            c.executemany("DELETE FROM builds WHERE id = ?", ids)

        self._write(body)
        return doomed

    def builds(self, kernel: str | None = None) -> list[BuildInfo]:
        """Builds, newest first (without their helper programs)."""
        cols = "SELECT id, kernel, device, model, created FROM builds"
        if kernel is None:
            rows = self._read(f"{cols} ORDER BY created DESC, id DESC")
        else:
            rows = self._read(f"{cols} WHERE kernel = ? ORDER BY created DESC, id DESC", (kernel,))
        return [BuildInfo(*r) for r in rows]

    # -- statistical models (SNOWPACK) ----------------------------------------------------------

    def put_static_features(self, rec: StaticFeatures) -> None:
        """Insert or replace a kernel's static features (per arch and feature-set version)."""
        if not isinstance(rec, StaticFeatures):
            raise StoreError(f"put_static_features takes StaticFeatures, got {type(rec).__name__}")
        row = (rec.kernel, rec.arch, rec.version, dumps(rec.features), rec.source, rec.updated)
        self._write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO kernel_features (kernel, arch, version, features, source, "
                "updated) VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    def static_features(self, kernel: str, arch: str, version: str) -> StaticFeatures | None:
        """A kernel's static features of exactly this arch and feature-set version, or None."""
        rows = self._read(
            "SELECT features, source, updated FROM kernel_features "
            "WHERE kernel = ? AND arch = ? AND version = ?",
            (kernel, arch, version),
        )
        if not rows:
            return None
        feats = self._json(rows[0][0], f"the static features of {kernel!r}")
        if not isinstance(feats, dict):
            raise self._err(f"the static features of {kernel!r} are not a JSON object")
        return StaticFeatures(
            kernel, arch, version, {str(k): float(v) for k, v in feats.items()}, rows[0][1],
            rows[0][2],
        )  # fmt: skip

    def static_feature_versions(self, kernel: str) -> list[str]:
        """The feature-set versions the store holds for a kernel (any arch)."""
        rows = self._read(
            "SELECT DISTINCT version FROM kernel_features WHERE kernel = ? ORDER BY version",
            (kernel,),
        )
        return [r[0] for r in rows]

    def put_stat_model(
        self,
        name: str,
        device: str,
        feature_version: str,
        sklearn_version: str,
        info: Mapping[str, Any],
        blob: bytes,
    ) -> int:
        """Record a fitted statistical model; returns its id (the newest is the one used)."""
        row = (name, device, feature_version, sklearn_version, now(), dumps(dict(info)), blob)
        return self._write(
            lambda c: _inserted_id(
                c.execute(
                    "INSERT INTO stat_models (name, device, feature_version, sklearn_version, "
                    "created, info, blob) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
            )
        )

    def latest_stat_model(self, name: str, device: str | None = None) -> StatModelRecord | None:
        """The newest statistical model of that name (optionally for one device), or None."""
        sql = (
            "SELECT id, name, device, feature_version, sklearn_version, created, info, blob "
            "FROM stat_models WHERE name = ?"
        )
        rows = self._read_where(sql, (name,), _NEWEST, device=device)
        if not rows:
            return None
        r = rows[0]
        info = self._json(r[6], f"statistical model {r[0]} ({name!r})")
        return StatModelRecord(r[0], r[1], r[2], r[3], r[4], r[5], dict(info or {}), bytes(r[7]))

    # -- invocation history ---------------------------------------------------------------------

    def _history_row(self, kernel: str, device: str, model: str, row: HistoryRow) -> tuple:
        if not isinstance(row, HistoryRow):
            raise StoreError(f"history rows must be HistoryRow, got {type(row).__name__}")
        if row.source not in HISTORY_SOURCES:
            raise StoreError(f"history source must be one of {HISTORY_SOURCES}, got {row.source!r}")
        return (
            kernel,
            device,
            model,
            _canon_d(row.D, self.data_names(kernel), kernel),
            *_triple(row.block, "block"),
            *_triple(row.grid, "grid"),
            opt_float(row.predicted_ms),
            opt_float(row.measured_ms),
            row.source,
            float(row.created),
            params_text(row.params),
        )

    def record_history(
        self, kernel: str, device: str, model: str, rows: Iterable[HistoryRow]
    ) -> int:
        """Upsert the selector's decisions (one per D) in one transaction; returns how many."""
        data = [self._history_row(kernel, device, model, r) for r in rows]
        if data:
            self._write(
                lambda c: c.executemany(
                    "INSERT INTO history (kernel, device, model, d, bx, by, bz, gx, gy, gz, "
                    "predicted_ms, measured_ms, source, created, params) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (kernel, device, model, d) DO UPDATE SET "
                    "bx = excluded.bx, by = excluded.by, bz = excluded.bz, gx = excluded.gx, "
                    "gy = excluded.gy, gz = excluded.gz, predicted_ms = excluded.predicted_ms, "
                    "measured_ms = excluded.measured_ms, source = excluded.source, "
                    "created = excluded.created, params = excluded.params",
                    data,
                )
            )
        return len(data)

    def history(self, kernel: str, device: str, model: str | None = None) -> list[HistoryRow]:
        """Recorded decisions of a kernel on a device (optionally one model), oldest first."""
        sql = (
            "SELECT d, bx, by, bz, gx, gy, gz, predicted_ms, measured_ms, source, created, model, "
            "params FROM history WHERE kernel = ? AND device = ?"
        )
        rows = self._read_where(sql, (kernel, device), "created, id", model=model)
        if not rows:
            return []
        names = self.data_names(kernel)
        return [
            HistoryRow(
                D=self._size(r[0], names, f"a history row of {kernel!r}"),
                block=(r[1], r[2], r[3]),
                grid=(r[4], r[5], r[6]),
                predicted_ms=r[7],
                measured_ms=r[8],
                source=r[9],
                created=r[10],
                model=r[11],
                params=params_from_text(r[12]),
            )
            for r in rows
        ]
