"""`klaraptor search KERNEL D=...` (issue 37 item 4): bad input gets a message and exit code 2;
with the CUDA toolkit, the walk is printed step by step, emulated and not measured."""

from __future__ import annotations

import json

import pytest

from klaraptor.backends.cupy_backend import gpu_problem
from klaraptor.cli import main
from tests.isa.helpers import needs_tools

TRANSPOSE = "tunables.transpose.transpose_tiles"


def run(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("tunables.nope", "N=4096"), "no suite kernel named 'tunables.nope'"),
        (("polybench.gemm.gemm", "N=4096"), "has no program parameters"),
        ((TRANSPOSE, "N=abc"), "'abc' is not an integer"),
        ((TRANSPOSE, "M=4096"), "unknown ['M']"),
        ((TRANSPOSE, "N=4096", "--device", "nope"), "no recorded device profile 'nope'"),
    ],
)
def test_bad_input_is_a_message_not_a_traceback(capsys, argv, message) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", *argv)
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


@needs_tools
def test_search_prints_the_path_and_why(capsys) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", TRANSPOSE, "N=1024")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "GPU emulated: recorded profile 'h200'"
    assert "0. TILE=32, RPT=4, block (32, 8, 1):" in out and "bottleneck:" in out
    assert "stop:" in out and "cuobjdump -res-usage" in out
    assert lines[-1].startswith("chosen: ") and lines[-1].endswith("emulated, not measured")
    rc, out, _ = run(capsys, "search", TRANSPOSE, "N=1024", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["emulated_not_measured"] and doc["steps"][-1]["moved_to"] is None


def test_measure_zero_is_a_usage_error(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as exc:
        main(["search", TRANSPOSE, "N=4096", "--measure", "0"])
    assert exc.value.code == 2
    assert "argument --measure: must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.skipif(gpu_problem() is None, reason="a GPU is here")
def test_measure_without_a_gpu_stops_at_once_with_a_message(capsys) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", TRANSPOSE, "N=1024", "--measure", "3")
    assert rc != 0 and rc != 1 and out == ""  # a KlaraptorError's exit code, not an internal one
    assert "klaraptor search --measure" in err and "needs a CUDA GPU" in err
    assert "without it the search runs on emulated times alone" in err
    assert "Traceback" not in err
