"""The store under several handles per process, and stores that are not plain writable files.

The first test is the regression test of the data loss found at f0a7cc1: opening a second
`Store` in a process used to open and close the database file outside SQLite, which on POSIX drops
every lock the process's other connections held on it, so a concurrent writer corrupted the file
or lost committed rows."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from klaraptor.core.errors import StoreError
from klaraptor.store import Store

PROCESSES = 6
WRITES = 60


def _handles_and_writes(path: str, worker: int, n: int) -> None:
    """Three live handles; before every write a fourth opens and the oldest closes."""
    handles = [Store(path) for _ in range(3)]
    for j in range(n):
        handles.append(Store(path))
        handles.pop(0).close()
        handles[j % 3].put_device_profile(f"w{worker}-{j}", {"j": j})
    for h in handles:
        h.close()


def _one_writer(path: str, n: int) -> None:
    with Store(path) as s:
        for j in range(n):
            s.put_device_profile(f"writer-{j}", {"j": j})


def test_several_handles_per_process_with_a_writer_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite")
    Store(path).close()
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_handles_and_writes, args=(path, w, WRITES)) for w in range(PROCESSES)
    ]
    procs.append(ctx.Process(target=_one_writer, args=(path, 4 * WRITES)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT count(*) FROM device_profiles").fetchone()[0]
    finally:
        conn.close()
    assert rows == PROCESSES * WRITES + 4 * WRITES


def test_the_store_file_is_never_opened_outside_sqlite(tmp_path: Path) -> None:
    """The class of the bug, checked at its root: no Store operation opens the database file
    through Python (only stat, and SQLite itself)."""
    path = tmp_path / "s.sqlite"
    Store(path).close()
    opened: list[str] = []

    def audit(event: str, args: tuple) -> None:
        if event == "open" and args and str(args[0]).startswith(str(path)):
            opened.append(str(args[0]))

    code = textwrap.dedent(
        f"""
        import sys
        from klaraptor.store import Store
        seen = []
        def audit(event, args):
            if event == "open" and args and str(args[0]) == {str(path)!r}:
                seen.append(args)
        sys.addaudithook(audit)
        a = Store({str(path)!r}); b = Store({str(path)!r}); c = Store({str(path)!r})
        b.put_device_profile("k", {{"x": 1}}); a.kernels(); c.close(); b.close(); a.close()
        print(len(seen))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_a_fifo_at_the_store_path_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"a FIFO \(named pipe\), not a regular file"):
        Store(fifo)
    assert time.monotonic() - t0 < 5


def test_a_character_device_is_not_called_an_empty_file() -> None:
    with pytest.raises(StoreError, match="a character device, not a regular file"):
        Store("/dev/null")


def test_klaraptor_home_naming_a_file_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("KLARAPTOR_HOME", str(home))
    for must_exist in (False, True):
        with pytest.raises(StoreError, match=f"KLARAPTOR_HOME={home} names a file"):
            Store(must_exist=must_exist)


def test_a_store_opened_read_only_serves_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path) as s:
        s.put_device_profile("k", {"x": 1})
    with Store(path, read_only=True) as ro:
        assert ro.read_only and "read_only=True" in (ro.read_only_cause or "")
        assert ro.device_profile("k") == {"x": 1}
        with pytest.raises(StoreError, match="read-only .* nothing can be written"):
            ro.put_device_profile("k2", {"x": 2})


def test_a_store_in_a_read_only_directory_is_opened_read_only() -> None:
    """As a user who cannot write the directory or the file (root drops to nobody in a child,
    since root bypasses permissions; pytest's own tmp_path is private to root)."""
    with tempfile.TemporaryDirectory() as tmp:
        _read_only_directory(Path(tmp))


def _read_only_directory(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    path = d / "s.sqlite"
    with Store(path) as s:
        s.put_device_profile("k", {"x": 1})
    # No -wal/-shm left behind: the reader must open the file as it is.
    for extra in ("-wal", "-shm"):
        Path(str(path) + extra).unlink(missing_ok=True)
    path.chmod(0o444)
    d.chmod(0o555)
    tmp_path.chmod(0o755)
    code = textwrap.dedent(
        f"""
        import os, sys
        from klaraptor.store import Store
        from klaraptor.core.errors import StoreError
        if os.geteuid() == 0:  # everything is imported: drop to a user without write access
            os.setgid(65534); os.setuid(65534)
        s = Store({str(path)!r})
        print("read_only", s.read_only, s.read_only_cause)
        print("profile", s.device_profile("k"))
        try:
            s.put_device_profile("k2", {{}})
        except StoreError as e:
            print("refused", e)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/"
        )
    finally:
        d.chmod(0o755)
    assert out.returncode == 0, out.stderr
    assert "read_only True" in out.stdout and "not writable" in out.stdout
    assert "profile {'x': 1}" in out.stdout
    assert "refused" in out.stdout and "read-only" in out.stdout


def _hold_exclusive(path: str, ready: mp.Event, release: mp.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("INSERT INTO meta (key, value) VALUES ('held', '1')")
    ready.set()
    release.wait(60)
    conn.execute("ROLLBACK")
    conn.close()


def test_a_locked_store_says_locked_and_by_whom(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_exclusive, args=(str(path), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(StoreError) as err:
            Store(path, timeout=0.5).kernels()
        text = str(err.value)
        assert "locked" in text and "corrupt" not in text
        assert "0.5 s" in text
        if Path("/proc/locks").exists():
            assert f"pid {holder.pid}" in text
    finally:
        release.set()
        holder.join(30)
