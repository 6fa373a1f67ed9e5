"""SAAKE's per-region sensitivity (the paper's Tables 4-5), source lines from line information,
and the names `explain` and the demo print."""

from __future__ import annotations

import numpy as np
import pytest

from klaraptor.models.saake.emulate import RegionScale
from klaraptor.models.saake.names import NAMES, SMEM_NAMES, resource_name, smem_kind
from klaraptor.models.saake.ops import RESOURCES
from klaraptor.models.saake.regions import code_regions, parse_line_info
from klaraptor.models.saake.sensitivity import analyse, analyse_regions, format_sensitivity
from tests.isa.helpers import needs_tools

KERNEL = "polybench.atax.k1"


@pytest.fixture(scope="module")
def emulator(recorded, tmp_path_factory):  # noqa: ANN001, ANN201
    from klaraptor import suite
    from klaraptor.assemble import make_job
    from klaraptor.models.saake.emulator import KernelEmulator

    store = recorded.to_store(tmp_path_factory.mktemp("regions") / "s.sqlite", kernels=[KERNEL])
    spec = suite.get(KERNEL)
    job = make_job(
        spec, store, recorded.profile(), [spec.size(n) for n in spec.meta["train_sizes"]]
    )
    yield KernelEmulator.from_job(job)
    store.close()


NVDISASM_G = """
//--------------------- .text.other               --------------------------
	.section	.text.other,"ax",@progbits
	//## File "k.cu", line 3
        /*0000*/                   MOV R1, c[0x0][0x28] ;
//--------------------- .text.nbody               --------------------------
	.section	.text.nbody,"ax",@progbits
nbody:
	//## File "k.cu", line 4
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "k.cu", line 7
        /*0010*/                   S2R R3, SR_CTAID.X ;
        /*00a0*/              @!P0 LDC.64 R8, c[0x0][0x210] ;
.L_x_6:
        /*00c0*/              @!P0 LDG.E.128.CONSTANT R4, desc[UR10][R8.64] ;
"""


def test_every_resource_has_a_name_and_a_meaning() -> None:
    for r in RESOURCES:
        n = resource_name(r)
        assert n.name.isidentifier() and len(n.meaning) > 20, r
    assert resource_name("smem", 0.0).name == "l1"  # no shared-memory instruction
    assert resource_name("smem", 1.0).name == "shared_memory"
    assert resource_name("smem", 0.5).name == "l1_shared"
    assert smem_kind(None) == "both"
    names = [n.name for n in (*NAMES.values(), *SMEM_NAMES.values())]
    assert len(names) == len(set(names))


def test_nvdisasm_line_information_is_read_per_kernel() -> None:
    got = parse_line_info(NVDISASM_G, "nbody")
    assert got == {0x0: ("LDC", 4), 0x10: ("S2R", 7), 0xA0: ("LDC", 7), 0xC0: ("LDG", 7)}


def test_a_region_of_every_instruction_is_the_whole_kernel(emulator) -> None:  # noqa: ANN001
    """Scaling a parameter in a region that holds every instruction is scaling it everywhere;
    in a region of none it changes nothing."""
    em = emulator
    j = em.candidates.index((256, 1, 1))
    D = (1024,)
    every = frozenset(range(len(em.isa.instructions)))
    base = em.cycles(D, j)
    for r, kind in (("smem", "gap"), ("l2", "lat"), ("l2", "gap"), ("imad", "lat")):
        whole = em.cycles(D, j, em.params.scaled(r, kind, 1.2))
        assert em.cycles(D, j, region=RegionScale(every, r, kind, 1.2)) == pytest.approx(whole)
        assert em.cycles(D, j, region=RegionScale(frozenset(), r, kind, 1.2)) == base


def test_the_per_region_analysis_names_a_loop(emulator) -> None:  # noqa: ANN001
    em = emulator
    j = em.candidates.index((256, 1, 1))
    regs = code_regions(em.isa, em.classes)
    assert [r.kind for r in regs].count("outside loops") == 1 and len(regs) >= 2
    assert not set.intersection(*(set(r.ops) for r in regs))  # a partition
    s = analyse(em, (1024,), j)
    assert not s.regions  # off by default
    analyse_regions(em, (1024,), j, s)
    assert len(s.regions) == len(regs)
    reg, r, kind, e = s.region_bottleneck()
    # atax k1 walks a row per thread: its loop, not the code around it, holds the time.
    assert reg.region.kind == "loop" and e > 0.3
    # Elasticities of the kernel's time: a region's cannot much exceed the whole kernel's.
    whole = max(max(by.values()) for by in s.elasticity.values())
    assert e <= whole * 1.1 + 0.02
    text = format_sensitivity(s)
    assert "by code region" in text and "region bottleneck:" in text
    assert s.to_dict()["region_bottleneck"]["region"] == reg.region.name


def test_explain_names_the_l1_of_a_kernel_without_shared_memory(emulator) -> None:  # noqa: ANN001
    em = emulator
    j = em.candidates.index((256, 1, 1))
    assert em.shared_share((1024,), j) == 0.0  # atax k1 has no shared-memory instruction
    s = analyse(em, (1024,), j)
    assert "smem" not in s.headline() and "shared_memory" not in format_sensitivity(s)
    assert s.name("smem") == "l1"
    dem = em.demand_by_op((1024,), j)
    assert dem.shape == (len(em.isa.instructions), len(RESOURCES)) and np.all(dem >= 0)


@needs_tools
def test_regions_map_to_source_lines_where_line_information_exists(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from klaraptor import suite
    from klaraptor.models.saake.isa_source import kernel_isa
    from klaraptor.models.saake.regions import line_map
    from klaraptor.models.saake.tripcounts import count_classes

    monkeypatch.setenv("KLARAPTOR_HOME", str(tmp_path))
    spec = suite.get("patterns.nbody.nbody")
    isa, _ = kernel_isa(spec)
    lm = line_map(spec, isa)
    assert lm.status == "ok" and len(lm.lines) > 100
    assert list(tmp_path.glob("isa/*-lines.json"))  # cached
    regs = code_regions(isa, count_classes(isa), lm.lines, spec.source)
    inner = max((r for r in regs if r.kind == "loop"), key=lambda r: r.depth)
    assert inner.depth == 2 and inner.source.startswith("for (int k = 0; k < m; ++k)")
    assert "line" in inner.label()
