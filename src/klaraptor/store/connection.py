"""The store's file: opening it safely, refusing foreign or damaged files, creating it whole,
migrating older schemas, and the write transactions every change goes through."""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from klaraptor.errors import StoreError
from klaraptor.store import schema
from klaraptor.store.records import now

_SQLITE_MAGIC = b"SQLite format 3\x00"
HINT = (
    "move the file away or point klaraptor at another store "
    "(set KLARAPTOR_HOME or pass a different path)"
)
_HINT = HINT
_S = TypeVar("_S", bound="StoreFile")


def default_store_path() -> Path:
    """`$KLARAPTOR_HOME/klaraptor.sqlite`, else `$XDG_CACHE_HOME/klaraptor/…`, else `~/.cache/…`."""
    home = os.environ.get("KLARAPTOR_HOME")
    if home:
        return Path(home).expanduser() / "klaraptor.sqlite"
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache"
    return base / "klaraptor" / "klaraptor.sqlite"


def _is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


class StoreFile:
    """One SQLite store file: opening, validation, creation, migration and transactions.

    Safe to share between threads of a process and between processes; `Store` adds the
    typed reads and writes."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout: float = 30.0,
        must_exist: bool = False,
    ) -> None:
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self.timeout = float(timeout)
        if must_exist and not self.path.exists():
            raise StoreError(
                f"there is no klaraptor store at {self.path}: build a kernel first "
                "(`klaraptor build`), or create the recorded H200 builds with "
                "`klaraptor import-recorded`; --store or KLARAPTOR_HOME pick another file"
            )
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._closed = False
        self._names: dict[str, tuple[str, ...]] = {}
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
        self._names = {}

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @property
    def closed(self) -> bool:
        return self._closed

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
            self._create()
            return
        try:
            size = p.stat().st_size
            with open(p, "rb") as fh:
                header = fh.read(100)
        except OSError as exc:
            raise self._err("cannot read the file", exc) from exc
        if size == 0:
            # klaraptor never leaves an empty file behind (stores are created whole, below).
            raise self._err(
                "the file is empty, not a klaraptor store; delete it to start a new store there"
            )
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
        if app_id not in (0, schema.APPLICATION_ID):
            raise self._err(
                f"this is another program's SQLite database (application_id {app_id:#x}), "
                f"not a klaraptor store; {_HINT}"
            )

    def _create(self) -> None:
        """Create a new store whole: initialise it under a temporary name, then link it into
        place, so no process ever sees a half-made file (if another process wins the race,
        its store is used and ours is discarded)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._err("cannot create its directory", exc) from exc
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.new")
        try:
            conn = sqlite3.connect(str(tmp), isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                self._transaction_on(conn, self._initialise_or_migrate)
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process created it first: use theirs
            except OSError:  # no hard links on this filesystem
                if not self.path.exists():
                    os.replace(tmp, self.path)
        except (OSError, sqlite3.Error) as exc:
            raise self._err("cannot create a new store", exc) from exc
        finally:
            for leftover in (
                tmp,
                tmp.with_name(tmp.name + "-wal"),
                tmp.with_name(tmp.name + "-shm"),
            ):
                leftover.unlink(missing_ok=True)

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
        if app_id != schema.APPLICATION_ID or "meta" not in tables:
            raise self._err(
                f"this SQLite database was not created by klaraptor (application_id "
                f"{app_id:#x}, tables {sorted(tables)}); {_HINT}"
            )
        version = self._schema_version(conn)
        if version > schema.SCHEMA_VERSION:
            raise self._err(
                f"schema version {version} was written by a newer klaraptor (this one supports "
                f"up to {schema.SCHEMA_VERSION}); upgrade klaraptor or use another store"
            )
        return "old" if version < schema.SCHEMA_VERSION else "ready"

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
            conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
            schema.create(conn)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(schema.SCHEMA_VERSION)),
                    ("created", str(now())),
                    ("creator", "klaraptor"),
                ],
            )
        elif state == "old":
            version = self._schema_version(conn)
            while version < schema.SCHEMA_VERSION:
                migrate = schema.MIGRATIONS.get(version)
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
