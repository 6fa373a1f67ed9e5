"""The `klaraptor` command line on a store built from the recorded H200 data (CPU)."""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path

import pytest

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.cli import main
from klaraptor.suite.recorded import load_recorded

KERNEL = "polybench.atax.k1"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:  # noqa: ANN001
    data = load_recorded()
    path = tmp_path_factory.mktemp("cli") / "k.sqlite"
    store = data.to_store(path, kernels=[KERNEL])
    spec = suite.get(KERNEL)
    build(
        spec,
        [{"N": n} for n in spec.meta["train_sizes"]],
        model="time_fit",
        store=store,
        device=data.profile(),
        collect_data=False,
    )
    store.close()
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_select_explain_show_list(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "--store", str(store_path), "select", KERNEL, "N=4096", "--json")
    assert rc == 0
    sel = json.loads(out)
    assert (
        sel["D"] == [4096]
        and sel["grid"] == [-(-4096 // sel["block"][0]), 1, 1]
        and len(sel["topk"]) == 4
    )
    rc, out, _ = run(capsys, "--store", str(store_path), "explain", KERNEL, "4096", "--limit", "5")
    assert rc == 0 and "rank" in out and "pred ms" in out
    rc, out, _ = run(capsys, "--store", str(store_path), "show", KERNEL)
    assert rc == 0 and "time_ms" in out and "32 candidate blocks" in out
    rc, out, _ = run(capsys, "--store", str(store_path), "list")
    assert rc == 0 and KERNEL in out and "time_fit" in out


def test_export_c_compiles_and_agrees(store_path: Path, capsys, tmp_path: Path) -> None:  # noqa: ANN001
    hdr = tmp_path / "atax.h"
    assert (
        run(capsys, "--store", str(store_path), "export", KERNEL, "--lang", "c", "-o", str(hdr))[0]
        == 0
    )
    src = tmp_path / "use.c"
    src.write_text(
        f'#include "{hdr}"\nint best(const long *D, int *g, int *b) {{ return klaraptor_polybench_atax_k1_best(D, g, b); }}\n'
    )
    lib = tmp_path / "libuse.so"
    subprocess.run(
        [
            "cc",
            "-std=c99",
            "-O2",
            "-Wall",
            "-Werror",
            "-ffp-contract=off",
            "-shared",
            "-fPIC",
            "-o",
            str(lib),
            str(src),
            "-lm",
        ],
        check=True,
    )
    fn = ctypes.CDLL(str(lib)).best
    D = (ctypes.c_long * 1)(100000)  # outside the spec's range: refused, as the selector does
    assert fn(D, (ctypes.c_int * 3)(), (ctypes.c_int * 3)()) == -1
    for n in (2048, 3000, 8192, 46340):
        D = (ctypes.c_long * 1)(n)
        g, b = (ctypes.c_int * 3)(), (ctypes.c_int * 3)()
        assert fn(D, g, b) == 0
        rc, out, err = run(capsys, "--store", str(store_path), "select", KERNEL, str(n), "--json")
        assert rc == 0, err
        sel = json.loads(out)
        assert list(b) == sel["block"] and list(g) == sel["grid"]
    pyfile = tmp_path / "atax.py"
    assert (
        run(
            capsys,
            "--store",
            str(store_path),
            "export",
            KERNEL,
            "--lang",
            "python",
            "-o",
            str(pyfile),
        )[0]
        == 0
    )
    ns: dict = {}
    exec(pyfile.read_text(), ns)
    grid, block = ns["best"]((8192,))
    assert (
        list(block)
        == json.loads(
            run(capsys, "--store", str(store_path), "select", KERNEL, "8192", "--json")[1]
        )["block"]
    )


def test_forcing_a_build_from_another_gpu_warns(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, err = run(
        capsys,
        "--store",
        str(store_path),
        "select",
        KERNEL,
        "4096",
        "--device",
        "NVIDIA A100|driver 1|1400 MHz",
        "--force",
    )
    assert rc == 0 and "block" in out and "forced" in " ".join(err.split())


def test_dry_run_lists_points(capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "build", "polybench.gemm.gemm", "--sizes", "256,512", "--dry-run")
    assert rc == 0 and "51 feasible" in out and "N=512" in out
    assert "153 points to measure" not in out  # the budgeted plan times a part of them


def test_annotated_file_dry_run(capsys) -> None:  # noqa: ANN001
    cu = Path(__file__).resolve().parents[2] / "examples" / "annotated" / "matvec.cu"
    rc, out, _ = run(capsys, "build", str(cu), "--dry-run")
    assert rc == 0 and "matvec.mv_rows" in out and "matvec.transpose" in out


# -- output for humans (issue 15) -----------------------------------------------------------------


def test_list_shows_dates_and_show_sensible_digits(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "--store", str(store_path), "list")
    assert rc == 0 and re.search(rf"{KERNEL}\s+time_fit\s+20\d\d-\d\d-\d\d \d\d:\d\d", out)
    assert not re.search(r"\b1[5-9]\d{8}\.\d", out)  # no raw epoch seconds
    rc, out, _ = run(capsys, "--store", str(store_path), "show", KERNEL)
    assert rc == 0 and "held-out relative error: median" in out and "%" in out
    assert not re.search(r"\d\.\d{5,}", out), out  # no 16-digit floats


def test_piped_output_is_not_wrapped(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "--store", str(store_path), "explain", KERNEL, "N=4096")
    rows = [line for line in out.splitlines() if line.count(" | ") > 3]
    assert rc == 0 and len(rows) > 30 and max(map(len, rows)) > 70
    assert len({row.count(" | ") for row in rows}) == 1  # every row whole on its line


def test_help_shows_defaults(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: auto)" in out
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "(default: klaraptor-demo.png)" in " ".join(capsys.readouterr().out.split())


def test_select_gives_grid_then_block_and_says_it_extrapolates(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "--store", str(store_path), "select", KERNEL, "N=4096")
    sel = json.loads(run(capsys, "--store", str(store_path), "select", KERNEL, "4096", "--json")[1])
    assert rc == 0
    grid, block = tuple(sel["grid"]), tuple(sel["block"])
    assert f"grid {grid} block {block}" in out
    assert "extrapolating: N=4096 is 2.67× the largest training size N=1536" in " ".join(
        err.split()
    )
    assert sel["extrapolated"] == "N=4096 is 2.67× the largest training size N=1536"
    rc, _, err = run(capsys, "--store", str(store_path), "select", KERNEL, "1024")
    assert rc == 0 and "extrapolating" not in err  # a training size


@pytest.fixture
def tie_store(tmp_path: Path) -> Path:
    """A hand-written two-parameter helper with a wide tie band (tests/helpers.mn_helper)."""
    from klaraptor.store import KernelRecord, Store
    from tests import helpers as hs

    path = tmp_path / "tie.sqlite"
    spec, helper = hs.mn_spec(), hs.mn_helper(band=0.5)
    with Store(path) as s:
        s.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
        s.put_build(spec.name, "dev", "mn", helper.to_dict(), {"sizes": [], "model": "mn"})
    return path


def test_select_shows_the_tie_band_when_a_runner_up_is_faster(tie_store: Path, capsys) -> None:  # noqa: ANN001
    from tests import helpers as hs

    helper = hs.mn_helper(band=0.5)
    faster = None
    for m in (64, 100, 300, 512, 1000, 2048):
        for n in (64, 128, 500, 1024, 3000):
            _, ms, _ = helper.choose(helper.data_schema.parse({"M": m, "N": n}), 4)
            if any(t < ms[0] for t in ms[1:]):
                faster = (m, n)
                break
        if faster:
            break
    assert faster is not None
    m, n = faster
    rc, out, _ = run(
        capsys, "--store", str(tie_store), "select", "synthetic.mn", f"M={m}", f"N={n}"
    )
    text = " ".join(out.split())
    assert rc == 0 and "tied" in out and "within 50.000% of the fastest" in text
    assert "highest predicted occupancy wins" in text
    rc, out, _ = run(
        capsys, "--store", str(tie_store), "select", "synthetic.mn", f"M={m}", f"N={n}", "--json"
    )
    sel = json.loads(out)
    assert sel["tie_band"] == 0.5 and sel["tied"][0] and len(sel["tied"]) == len(sel["topk"])


def test_import_recorded_builds_once(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    store = tmp_path / "r.sqlite"
    rc, out, _ = run(
        capsys,
        "--store",
        str(store),
        "import-recorded",
        "--kernels",
        "polybench.atax.k2",
        "--jobs",
        "1",
    )
    assert rc == 0 and "built polybench.atax.k2" in out
    rc, out, _ = run(
        capsys, "--store", str(store), "import-recorded", "--kernels", "polybench.atax.k2"
    )
    assert rc == 0 and "1 kernels already built" in out and "built polybench" not in out
    rc, out, err = run(capsys, "--store", str(store), "select", "polybench.atax.k2", "N=2048")
    assert rc == 0 and "NVIDIA H200" in err  # the recorded build, used with a warning


def test_recorded_demo_explains_its_columns_and_plots(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from rich.console import Console

    from klaraptor.cli import demo
    from klaraptor.store import Store

    plot, store = tmp_path / "demo.png", tmp_path / "demo.sqlite"
    console = Console(width=200, force_terminal=False)
    rc = demo.run(gpu=False, console=console, kernels=[KERNEL], store_path=str(store), plot=plot)
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for word in ("default r", "within 5%", "mean S%", "klaraptor_topk", "occ", "tune_once"):
        assert word in out, word
    # The legends explain exactly the columns and methods printed, no others.
    for gone in ("within noise", "mean Error%", "klaraptor_top4"):
        assert gone not in out, gone
    summary = out.split("Summary")[0].split("pairs over")[-1]
    for term, _ in demo.SUMMARY_COLUMNS:
        for word in term.split(", "):
            assert word in summary, word
    with Store(store) as s:  # the demo kept its build
        assert {b.kernel for b in s.builds()} == {KERNEL}
        n = len(s.builds())
    # Run again: it replaces its builds rather than adding to them.
    rc = demo.run(gpu=False, console=console, kernels=[KERNEL], store_path=str(store), plot=plot)
    assert rc == 0 and "replacing 2 from an earlier run" in " ".join(
        capsys.readouterr().out.split()
    )
    with Store(store) as s:
        assert len(s.builds()) == n


# -- the first hour of a new user (issue 38) -------------------------------------------------------


def test_every_option_has_help_and_the_top_level_help_names_every_command(capsys) -> None:  # noqa: ANN001
    import argparse

    from klaraptor.cli.main import make_parser

    missing, commands = [], []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    commands.append(name)
                    walk(sub, [*path, name])
            elif not action.help and action.dest != "help":
                missing.append(" ".join([*path, *(action.option_strings or [action.dest])]))

    walk(make_parser(), ["klaraptor"])
    assert not missing, missing
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name in ("import-kt", "export-kt", "import-recorded", "prune", "rm", "--version"):
        assert name in out, name
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("klaraptor 0.")


@pytest.fixture
def recorded_store(recorded_home: Path, tmp_path: Path) -> Path:
    """A copy of the session's recorded store (auto and scaling builds), to write to."""
    import shutil

    path = tmp_path / "r.sqlite"
    shutil.copy(recorded_home / "klaraptor.sqlite", path)
    return path


def test_list_shows_one_row_per_build_sorted_and_prune_deletes_superseded(
    recorded_store: Path,
    capsys,  # noqa: ANN001
) -> None:
    from klaraptor.store import Store

    s = str(recorded_store)
    rc, out, _ = run(capsys, "--store", s, "list")
    rows = [line.split()[0] for line in out.splitlines()[1:] if line.startswith(("poly", "rodi"))]
    assert rc == 0 and rows == sorted(rows) and len(rows) == len(set(rows))  # auto merged in
    assert (
        "polybench.gemm.gemm" in rows and "scaling (auto)" in out and "built with model auto" in out
    )
    # A second build of a kernel supersedes the first: list still shows one row, prune deletes it.
    with Store(recorded_store) as store:
        b = store.latest_build("polybench.gemm.gemm", model="scaling")
        assert b is not None
        store.put_build(b.kernel, b.device, "scaling", b.helper, b.report)
        n = len(store.builds())
    rc, out, _ = run(capsys, "--store", s, "list")
    assert rc == 0 and out.count("polybench.gemm.gemm ") == 1 and "1 older builds" in out
    rc, out, _ = run(capsys, "--store", s, "prune", "--dry-run")
    assert rc == 0 and "would delete 1 superseded builds" in out
    rc, out, _ = run(capsys, "--store", s, "prune")
    assert rc == 0 and "deleted 1 superseded builds of 1 kernels" in out
    with Store(recorded_store) as store:
        assert len(store.builds()) == n - 1
    rc, out, _ = run(capsys, "--store", s, "rm", "polybench.gemm.gemm", "--model", "auto")
    assert rc == 0 and "deleted 1 builds of polybench.gemm.gemm" in out
    rc, out, _ = run(capsys, "--store", s, "list", "--all")
    assert rc == 0 and "polybench.gemm.gemm        auto" not in out


def test_show_explains_unscored_models_and_prints_held_out_errors(
    recorded_store: Path,
    capsys,  # noqa: ANN001
) -> None:
    rc, out, _ = run(capsys, "--store", str(recorded_store), "show", "polybench.gemm.gemm")
    text = " ".join(out.split())
    assert rc == 0 and "r=nan" not in text
    assert (
        "mwp_cwp not scored: polybench.gemm.gemm: no training point has hardware counters" in text
    )
    assert "held out: fitted at the sizes up to 768, scored at 1536" in text
    assert re.search(r"relative times error \d+(\.\d+)?% \(centred log error\)", text)


def test_explain_warns_once_and_repeats_no_column(recorded_store: Path, capsys) -> None:  # noqa: ANN001
    rc, out, err = run(
        capsys, "--store", str(recorded_store), "explain", "polybench.gemm.gemm", "4096"
    )
    assert rc == 0 and err.count("extrapolating") == 1 and "ExtrapolationWarning" not in err
    head = out.splitlines()[1].split(" | ")
    assert len(head) == len(set(head)) and "time_ms" not in head  # pred ms says it


def test_device_recorded_is_concise(capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "device", "--recorded", "h200")
    lines = out.splitlines()
    assert rc == 0 and len(lines) < 70 and max(map(len, lines)) < 160, (
        len(lines),
        max(map(len, lines)),
    )
    rc, full, _ = run(capsys, "device", "--recorded", "h200", "--full")
    assert rc == 0 and len(full.splitlines()) > len(lines) and "↳" in full


def test_the_demo_names_a_command_that_runs(monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    """After `make demo`, `.venv/bin/klaraptor` is not on the PATH: the demo's hint names it."""
    import sys

    from klaraptor.cli.demo import klaraptor_command

    script = tmp_path / ".venv" / "bin" / "klaraptor"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [".venv/bin/klaraptor", "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert klaraptor_command() == ".venv/bin/klaraptor"
    monkeypatch.setenv("PATH", str(script.parent))
    assert klaraptor_command() == "klaraptor"


def test_ctrl_c_during_import_recorded_prints_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the pool workers ignore it, the command stops
    them and says so in one line (exit 130), and no worker outlives it."""
    import os
    import signal
    import sys
    import time

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", "klaraptor.cli", "--store", str(tmp_path / "c.sqlite"),
            "import-recorded", "--jobs", "2", "--kernels", "polybench"]  # fmt: skip
    # A runner started in the background (`make test &`) passes SIGINT on ignored, and a Python
    # that starts with SIGINT ignored never raises KeyboardInterrupt: give the command the
    # default disposition, as a terminal would.
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    assert p.stdout is not None
    line = p.stdout.readline()  # "building 30 kernels ..." once the pool exists
    assert line.startswith("building"), line
    time.sleep(1.0)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    time.sleep(0.5)
    left = []
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            if os.getpgid(int(pid)) == p.pid:
                left.append(pid)
        except OSError:
            pass
    assert not left, left


def test_import_recorded_workers_die_when_it_is_killed(tmp_path: Path) -> None:
    """SIGKILL of import-recorded (no handler can run) still leaves no pool worker behind: each
    worker dies with its parent (PR_SET_PDEATHSIG on Linux)."""
    import os
    import signal
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux's")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", "klaraptor.cli", "--store", str(tmp_path / "k.sqlite"),
            "import-recorded", "--jobs", "2", "--kernels", "polybench"]  # fmt: skip
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)  # fmt: skip
    assert p.stdout is not None
    line = p.stdout.readline()  # once the pool exists
    assert line.startswith("building"), line
    time.sleep(1.0)

    def group() -> list[int]:
        out = []
        for pid in (d for d in os.listdir("/proc") if d.isdigit()):
            try:
                if os.getpgid(int(pid)) == p.pid and int(pid) != p.pid:
                    out.append(int(pid))
            except OSError:
                pass
        return out

    workers = group()
    assert workers, "the pool had started no worker"
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while group() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group(), group()
