"""`klaraptor search KERNEL D=...` (issue 37 item 4): bad input gets a message and exit code 2;
with the CUDA toolkit, the walk is printed step by step, emulated and not measured."""

from __future__ import annotations

import json

import pytest

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
