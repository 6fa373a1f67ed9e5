"""SAAKE on the compiled variants of a kernel with program parameters (issue 37): each variant's
SASS (defines or a template instance), its emulation without counters, and the moves of the
bottleneck-driven search over (parameters, block)."""

from __future__ import annotations

import math

import pytest

from klaraptor import suite
from klaraptor_bench.saake_params import _neighbours, _timed_until
from tests.isa.helpers import needs_tools


@needs_tools
def test_a_template_variant_is_compiled_as_its_instance() -> None:
    from klaraptor.isa.analysis import analyze

    spec = suite.get("tunables.sgemm.sgemm")
    small, large = (
        analyze(spec, strict=False, variant=pv) for pv in (spec.variants()[0], spec.variants()[-1])
    )
    assert small.kernel.startswith("_Z5sgemmILi1ELi1E") and large.kernel.startswith(
        "_Z5sgemmILi8ELi8E"
    )
    # An 8 x 8 register tile is much more code than 1 x 1, and a different fingerprint.
    assert len(large.instructions) > len(small.instructions)
    assert small.fingerprint != large.fingerprint


@needs_tools
def test_a_define_variant_is_emulated_from_its_sass_alone() -> None:
    from klaraptor.core.types import KernelAttributes
    from klaraptor.device.profile import recorded_profile
    from klaraptor.models.saake.emulator import KernelEmulator

    spec = suite.get("tunables.stencil2d.stencil2d")
    attrs = KernelAttributes(32, 0, 0, 0, 1024, 232448)
    blocks = [(32, 4, 1), (64, 4, 1)]
    cycles = {}
    for cy in (1, 4):
        pv = next(p for p in spec.variants() if p["CY"] == cy)
        em = KernelEmulator.from_variant(
            spec, pv, recorded_profile("h200"), attrs, blocks, [spec.size(1024)]
        )
        assert em.trip_source == "parameters" and em.variant == {"CY": cy}
        cycles[cy] = em.cycles((1024,), 0)
        assert math.isfinite(cycles[cy]) and cycles[cy] > 0
    # Four rows a thread (CY=4) launch a quarter of the blocks: the emulated times differ.
    assert cycles[1] != pytest.approx(cycles[4], rel=1e-3)


def test_the_search_moves_one_parameter_or_one_block_dimension() -> None:
    spec = suite.get("tunables.transpose.transpose_tiles")  # TILE (16, 32, 64), RPT (1..8)
    space = {
        ("TILE=32,RPT=4", (32, 8, 1)),
        ("TILE=16,RPT=4", (32, 8, 1)),
        ("TILE=64,RPT=4", (32, 8, 1)),
        ("TILE=32,RPT=2", (32, 8, 1)),
        ("TILE=32,RPT=8", (32, 8, 1)),
        ("TILE=32,RPT=4", (32, 4, 1)),
        ("TILE=32,RPT=4", (16, 8, 1)),
        ("TILE=32,RPT=1", (32, 8, 1)),  # two values away: not a neighbour
        ("TILE=16,RPT=2", (32, 8, 1)),  # two parameters changed: not a neighbour
    }
    got = set(_neighbours(spec, ("TILE=32,RPT=4", (32, 8, 1)), space))
    assert got == {
        ("TILE=16,RPT=4", (32, 8, 1)),
        ("TILE=64,RPT=4", (32, 8, 1)),
        ("TILE=32,RPT=2", (32, 8, 1)),
        ("TILE=32,RPT=8", (32, 8, 1)),
        ("TILE=32,RPT=4", (32, 4, 1)),
        ("TILE=32,RPT=4", (16, 8, 1)),
    }


def test_timed_until_counts_configurations_and_their_seconds() -> None:
    truth = {("a", (1, 1, 1)): (2.0, 0.5), ("b", (1, 1, 1)): (1.01, 0.25)}
    order = [("a", (1, 1, 1)), ("b", (1, 1, 1))]
    assert _timed_until(order, truth, 1.0, 0.02) == (2, 0.75)
    assert _timed_until(order[:1], truth, 1.0, 0.02) == (None, 0.5)


def test_a_missing_or_malformed_extract_is_named(tmp_path) -> None:  # noqa: ANN001
    from klaraptor.core.errors import KlaraptorError
    from klaraptor_bench.saake_params import load_recorded

    with pytest.raises(KlaraptorError, match="extract_tunables_recorded"):
        load_recorded(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(KlaraptorError, match="is not JSON"):
        load_recorded(bad)
    bad.write_text("{}")
    with pytest.raises(KlaraptorError, match="no 'kernels'"):
        load_recorded(bad)
