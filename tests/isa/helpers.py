"""Shared helpers of the tests/test_isa_*.py files."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "isa"


@functools.cache
def tools_problem() -> str | None:
    """None when NVRTC, cuobjdump and nvdisasm are usable here, else why not."""
    from klaraptor.core.errors import KlaraptorError
    from klaraptor.isa import compile, tools

    try:
        compile.nvrtc_version()
        for name in tools.TOOLS:
            tools.find_tool(name)
    except KlaraptorError as exc:
        return f"the isa extra is not usable here (pip install 'klaraptor[isa]'): {exc}"
    return None


needs_tools = pytest.mark.skipif(
    tools_problem() is not None, reason=str(tools_problem()) if tools_problem() else ""
)


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()
