"""The selector's history is never lost: rows from a short-lived Kernel, from `select --json`, from
a closed store, and from a process killed with SIGTERM (whatever SIGTERM did before klaraptor)."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import klaraptor
from klaraptor.cli import main
from klaraptor.store import Store

ATAX = "polybench.atax.k1"


@pytest.fixture
def store_path(recorded_home: Path, tmp_path: Path) -> Path:
    path = tmp_path / "k.sqlite"
    shutil.copy(recorded_home / "klaraptor.sqlite", path)
    return path


def recorded_sizes(path: Path) -> set[int]:
    with Store(path, must_exist=True) as s:
        device = s.builds(ATAX)[0].device
        return {row.D["N"] for row in s.history(ATAX, device)}


def test_history_of_a_short_lived_kernel_is_written(store_path: Path) -> None:
    # The reproduction: the Kernel is gone before the process ends.
    f = lambda: klaraptor.load(ATAX, store=Store(store_path)).select(5000)  # noqa: E731
    f()
    gc.collect()
    assert 5000 in recorded_sizes(store_path)


def test_history_survives_closing_the_store(store_path: Path) -> None:
    store = Store(store_path)
    kern = klaraptor.load(ATAX, store=store)
    kern.select(5001)
    store.close()
    del kern
    gc.collect()
    assert 5001 in recorded_sizes(store_path)


def test_history_of_a_process_that_exits(store_path: Path) -> None:
    code = f"""
        import klaraptor
        from klaraptor.store import Store
        k = klaraptor.load({ATAX!r}, store=Store({str(store_path)!r}))
        for n in (3001, 3002, 3003):
            k.select(n)
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=120)
    assert {3001, 3002, 3003} <= recorded_sizes(store_path)


def test_history_of_select_json(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", str(store_path), "select", ATAX, "N=7777", "--json"]) == 0
    assert '"block"' in capsys.readouterr().out
    assert 7777 in recorded_sizes(store_path)


SIGTERM_SCRIPT = """
import os, signal, sys, time
import klaraptor
from klaraptor.store import Store

before = sys.argv[2]
marker = sys.argv[3]
if before == "handler":
    def previous(signum, frame):
        open(marker, "w").write("previous handler ran")
        sys.exit(0)
    signal.signal(signal.SIGTERM, previous)
elif before == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
k = klaraptor.load({kernel!r}, store=Store(sys.argv[1]))
for n in (6001, 6002, 6003, 6004, 6005):
    k.select(n)  # 5 rows: fewer than a batch, so they are still pending
print("ready", flush=True)
while True:
    time.sleep(0.05)
    if before == "ignore" and os.path.exists(marker + ".stop"):
        break
"""


@pytest.mark.parametrize("before", ["default", "handler", "ignore"])
def test_history_of_a_process_killed_with_sigterm(
    store_path: Path, tmp_path: Path, before: str
) -> None:
    script = tmp_path / "victim.py"
    script.write_text(SIGTERM_SCRIPT.format(kernel=ATAX))
    marker = tmp_path / "marker"
    p = subprocess.Popen(
        [sys.executable, str(script), str(store_path), before, str(marker)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        if before == "ignore":
            # The handler wrote the rows and returned: the process lives on, as it asked.
            deadline = time.monotonic() + 30
            while recorded_sizes(store_path) < set(range(6001, 6006)):
                assert time.monotonic() < deadline, "the rows were not written"
                time.sleep(0.05)
            assert p.poll() is None
            marker.with_name("marker.stop").write_text("")
            assert p.wait(timeout=30) == 0
        else:
            rc = p.wait(timeout=60)
            # The previous behaviour follows the flush: death by SIGTERM, or the old handler.
            assert rc == (-signal.SIGTERM if before == "default" else 0)
            assert marker.exists() == (before == "handler")
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    assert set(range(6001, 6006)) <= recorded_sizes(store_path)
