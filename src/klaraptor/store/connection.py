"""The store's file: opening it safely, refusing foreign or damaged files, creating it whole,
migrating older schemas, and the write transactions every change goes through."""

from __future__ import annotations

import math
import os
import random
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from klaraptor.core.errors import StoreError
from klaraptor.core.paths import home_path
from klaraptor.store import schema
from klaraptor.store.records import now

_SQLITE_MAGIC = b"SQLite format 3\x00"
HINT = (
    "move the file away or point klaraptor at another store "
    "(set KLARAPTOR_HOME or pass a different path)"
)
_HINT = HINT
_S = TypeVar("_S", bound="StoreFile")
_T = TypeVar("_T")


def default_store_path() -> Path:
    """`$KLARAPTOR_HOME/klaraptor.sqlite`, else `$XDG_CACHE_HOME/klaraptor/…`, else `~/.cache/…`."""
    return home_path("klaraptor.sqlite")


def _is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


# The store files this process holds SQLite connections to, by (device, inode), with how many.
# The raw header is read (to name a truncation) only for a file with none: closing a descriptor
# of a file drops every POSIX lock the process holds on it, its connections' locks included.
_CONNECTED: dict[tuple[int, int], int] = {}
_CONNECTED_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_CONNECTED.clear)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _read_only_cause(path: Path) -> str | None:
    """Why this process cannot write the store at `path` (None when it can). `os.access`
    answers for permissions, immutable files (EPERM) and read-only mounts (EROFS) alike."""
    if not os.access(path, os.W_OK):
        return f"the file {path} is not writable by this user (permissions, or it is immutable)"
    # WAL mode writes the -wal and -shm files beside the store.
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return f"its directory {path.parent} is not writable by this user"
    return None


def lock_holders(path: Path) -> list[str]:
    """Processes holding POSIX locks on `path`, from /proc/locks (Linux; empty elsewhere).

    Reads the kernel's lock table, never the file: opening the file would drop this process's
    own locks on it."""
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in table.splitlines():
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters carry "->")
        if "->" in fields or len(fields) < 6 or fields[5] != ident:
            continue
        pid = int(fields[4]) if fields[4].isdigit() else 0
        if pid and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            cmd = ""
        out.append(f"pid {pid}" + (f" ({cmd[:80]})" if cmd else ""))
    return out


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
        read_only: bool = False,
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise StoreError(
                f"a store's path must be a str or a Path, got {type(path).__name__} {path!r}"
            )
        if path is not None and not str(path).strip():
            raise StoreError("a store's path is empty; give the path of a file, or None")
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise StoreError(
                f"the store's timeout (seconds) must be a number, got {type(timeout).__name__} "
                f"{timeout!r}"
            )
        if not (math.isfinite(timeout) and timeout >= 0):
            raise StoreError(f"the store's timeout (seconds) must be >= 0, got {timeout!r}")
        self.timeout = float(timeout)
        # Why this store is opened read-only (None: read-write). Found when the file cannot be
        # written (permissions, immutable, read-only mount), or asked for with read_only=True.
        self._read_only_cause: str | None = "opened with read_only=True" if read_only else None
        self._forced_read_only = read_only
        if must_exist and not self.path.exists():
            self._check_parent()
            raise StoreError(
                f"there is no klaraptor store at {self.path}: build a kernel first "
                "(`klaraptor build`), or create the recorded H200 builds with "
                "`klaraptor import-recorded`; --store or KLARAPTOR_HOME pick another file"
            )
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._closed = False
        self._needs_immutable = False
        self._file: tuple[int, int] | None = None
        self._names: dict[str, tuple[str, ...]] = {}
        # Open now so a bad path fails at construction, not at the first write of a long build.
        with self._lock:
            self._connection()

    @property
    def read_only(self) -> bool:
        """True when this store can be read but not written; `read_only_cause` says why."""
        return self._read_only_cause is not None

    @property
    def read_only_cause(self) -> str | None:
        return self._read_only_cause

    # -- pickling / forking: a connection never crosses a process boundary -------------------

    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "timeout": self.timeout,
            "closed": self._closed,
            "read_only": self._forced_read_only,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.timeout = state["timeout"]
        self._forced_read_only = bool(state.get("read_only", False))
        self._read_only_cause = "opened with read_only=True" if self._forced_read_only else None
        self._lock = threading.RLock()
        self._conn = None
        self._pid = -1
        self._closed = state["closed"]
        self._needs_immutable = False
        self._file = None
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
                if self._file is not None:
                    with _CONNECTED_LOCK:
                        left = _CONNECTED.get(self._file, 1) - 1
                        if left > 0:
                            _CONNECTED[self._file] = left
                        else:
                            _CONNECTED.pop(self._file, None)
            self._conn = None
            self._file = None
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
        conn = self._open(immutable=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._validate(conn)
        except StoreError:
            conn.close()
            if not (self.read_only and self._needs_immutable):
                raise
            # A read-only WAL store whose -shm file cannot be made: read it as immutable
            # (nobody can write it from here either, so there is nothing to see change).
            conn = self._open(immutable=True)
            try:
                self._validate(conn)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._pid = os.getpid()
        self._file = _file_id(self.path)
        if self._file is not None:
            with _CONNECTED_LOCK:
                _CONNECTED[self._file] = _CONNECTED.get(self._file, 0) + 1
        return conn

    def _open(self, *, immutable: bool) -> sqlite3.Connection:
        self._needs_immutable = False
        try:
            if self.read_only:
                uri = (
                    self.path.resolve().as_uri()
                    + "?mode=ro"
                    + ("&immutable=1" if immutable else "")
                )
                conn = sqlite3.connect(
                    uri,
                    uri=True,
                    timeout=self.timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(
                    str(self.path),
                    timeout=self.timeout,
                    isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                    check_same_thread=False,  # shared between threads under self._lock
                )
        except sqlite3.Error as exc:
            raise self._err("cannot open the file", exc) from exc
        return conn

    def _check_file(self) -> None:
        """Name what is wrong with the path before SQLite opens it, from `stat` alone.

        The file itself is never opened here: on POSIX, closing *any* descriptor of a file drops
        every lock the process holds on it, those of this process's other SQLite connections
        included, and a store that loses its locks under concurrent writers is corrupted. What
        the header says (foreign database, truncation, application id) is read through SQLite
        in `_validate`."""
        p = self.path
        try:
            st = os.stat(p)
        except FileNotFoundError:
            self._check_parent()
            self._create()
            return
        except NotADirectoryError:
            self._check_parent()
            raise  # _check_parent names the culprit; this line is not reached
        except OSError as exc:
            raise self._err("cannot read the file", exc) from exc
        if stat.S_ISDIR(st.st_mode):
            raise StoreError(
                f"klaraptor store {p} is a directory; pass the path of a file inside it, "
                f"e.g. {p / 'klaraptor.sqlite'}"
            )
        if not stat.S_ISREG(st.st_mode):
            raise self._err(
                f"this is {_file_kind(st.st_mode)}, not a regular file, so it cannot hold a "
                f"klaraptor store; {_HINT}"
            )
        if st.st_size == 0:
            # klaraptor never leaves an empty file behind (stores are created whole, below).
            raise self._err(
                "the file is empty, not a klaraptor store; delete it to start a new store there"
            )
        if st.st_size < 100:
            raise self._err(
                f"the file is truncated ({st.st_size} bytes, less than SQLite's 100-byte "
                f"header), or is not an SQLite database; {_HINT}"
            )
        if not self._forced_read_only:
            self._read_only_cause = _read_only_cause(p)

    def _check_parent(self) -> None:
        """Say which component of the path is a file where a directory must be (for example
        KLARAPTOR_HOME set to a file)."""
        for parent in self.path.parents:
            if parent.exists() or parent.is_symlink():
                if not parent.is_dir():
                    home = os.environ.get("KLARAPTOR_HOME")
                    culprit = (
                        f"KLARAPTOR_HOME={home} names a file"
                        if home and Path(home).expanduser() == parent
                        else f"{parent} is a file"
                    )
                    raise StoreError(
                        f"klaraptor store {self.path} cannot exist: {culprit}, not a directory; "
                        "point KLARAPTOR_HOME at a directory, or pass --store with a file path"
                    )
                return

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
        if app_id not in (0, schema.APPLICATION_ID):
            raise self._err(
                f"this is another program's SQLite database (application_id {app_id:#x}), "
                f"not a klaraptor store; {_HINT}"
            )
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
        started = time.monotonic()
        try:
            self._retry(lambda: self._check_length(conn))
            state = self._retry(lambda: self._state(conn))
            if state != "ready":
                if self.read_only:
                    todo = "initialising" if state == "empty" else "a schema migration"
                    raise self._err(
                        f"the store needs {todo} but is read-only ({self._read_only_cause}); "
                        "open it once where it can be written"
                    )
                # journal_mode must change outside a transaction; it persists in the file.
                self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
                self._transaction_on(conn, self._initialise_or_migrate)
            if not self.read_only:
                # WAL + NORMAL: a commit survives a crash of the process (what resume needs);
                # only a power loss may drop the last commits, and fsync per measured point
                # would be wasted.
                conn.execute("PRAGMA synchronous = NORMAL")
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._diagnose(exc, time.monotonic() - started) from exc

    def _diagnose(self, exc: sqlite3.DatabaseError, waited: float) -> StoreError:
        """The error SQLite gave while opening, in words that name the cause."""
        code = getattr(exc, "sqlite_errorname", "") or ""
        msg = str(exc).lower()
        if _is_locked(exc):
            return self._locked(waited, exc)
        if code == "SQLITE_NOTADB" or "not a database" in msg:
            return self._err(f"the file is not an SQLite database; {_HINT}")
        if self.read_only and (
            code.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY"))
            or "unable to open" in msg
            or "readonly" in msg
        ):
            self._needs_immutable = True
            return self._err(f"cannot read the read-only store ({self._read_only_cause})", exc)
        truncated = self._truncation()
        if truncated:
            return self._err(f"{truncated}; {_HINT}")
        return self._err(f"the file is corrupt or unreadable; {_HINT}", exc)

    def _truncation(self) -> str | None:
        """On the error path, whether the raw header says the file is truncated. Read only when
        this process holds no connection to the file (see _CONNECTED); otherwise None."""
        ident = _file_id(self.path)
        with _CONNECTED_LOCK:
            if ident is None or _CONNECTED.get(ident):
                return None
            try:
                size = os.stat(self.path).st_size
                with open(self.path, "rb") as fh:
                    header = fh.read(100)
            except OSError:
                return None
        if len(header) < 100 or header[24:28] != header[92:96]:
            return None  # the in-header page count is valid only when these agree
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        n_pages = int.from_bytes(header[28:32], "big")
        if n_pages and size < n_pages * page_size:
            return f"the file is truncated ({size} bytes, the header says {n_pages * page_size})"
        return None

    def _locked(self, waited: float, exc: BaseException) -> StoreError:
        holders = lock_holders(self.path)
        who = ", ".join(holders) if holders else "another process (the holder is not known)"
        return self._err(
            f"the store is locked: {who} held it for the {waited:.1f} s this process waited "
            f"(timeout {self.timeout:g} s); wait for that process to finish, or pass another "
            "store",
            exc,
        )

    def _check_length(self, conn: sqlite3.Connection) -> None:
        """A file shorter than the page count its header claims is truncated. SQLite reads the
        header; the size comes from stat. With a -wal file beside it, a checkpoint may be
        extending the file right now, so the check would race: SQLite's own corruption errors
        cover that case."""
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists():
            return
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        n_pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = os.stat(self.path).st_size
        if n_pages * page_size > size and not wal.exists():
            raise self._err(
                f"the file is truncated ({size} bytes, the header says "
                f"{n_pages * page_size}); {_HINT}"
            )

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

    def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run body in one write transaction (all or nothing, durable once it returns)."""
        if self.read_only:
            raise self._err(
                f"the store is read-only ({self._read_only_cause}): it can be listed, selected "
                "from, explained and exported, but nothing can be written to it"
            )
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
            return self._locked(self.timeout, exc)
        return self._err(f"database error; the file may be corrupt; {_HINT}", exc)

    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        return int(self._read("SELECT value FROM meta WHERE key = 'schema_version'")[0][0])

    def check(self) -> list[str]:
        """Run SQLite's integrity check; returns the problems found (empty when healthy)."""
        rows = self._read("PRAGMA integrity_check")
        return [] if rows == [("ok",)] else [r[0] for r in rows]
