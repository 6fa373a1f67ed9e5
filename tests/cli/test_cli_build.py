"""`klaraptor build`'s budget options on the CPU: the dry run shows the plan, bad budgets are
refused with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from klaraptor.cli import main
from klaraptor.suite.recorded import load_recorded


def run(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_dry_run_shows_the_budgeted_plan(capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "build", "polybench.gemm.gemm", "--dry-run")
    assert rc == 0 and "budgeted plan" in out and "1.5 × tune-once" in out
    assert "N=1536" in out and "N=768" in out and "N=512" not in out


def test_dry_run_without_budget_lists_every_size(capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "build", "polybench.gemm.gemm", "--budget", "none", "--dry-run")
    assert rc == 0 and "full collection" in out and "N=512" in out


def test_dry_run_on_a_store_with_measurements_prices_the_plan(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "r.sqlite"
    load_recorded().to_store(path, kernels=["polybench.atax.k1"]).close()
    rc, out, _ = run(capsys, "--store", str(path), "build", "polybench.atax.k1", "--dry-run")
    assert rc == 0 and "executed over the store's measurements" in out and "tune-once's" in out


@pytest.mark.parametrize("bad", ["0.5", "abc", "-1", "nan", "0", ""])
def test_a_bad_budget_is_refused(capsys, bad: str) -> None:  # noqa: ANN001
    # argparse refuses it: a usage error, exit code 2, before any work
    with pytest.raises(SystemExit) as exc:
        main(["build", "polybench.gemm.gemm", "--budget", bad, "--dry-run"])
    err = " ".join(capsys.readouterr().err.split())
    assert exc.value.code == 2 and "argument --budget: must be a number >= 1" in err
