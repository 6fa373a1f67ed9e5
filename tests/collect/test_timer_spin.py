"""The spin in front of each timing sample: it grows when the host falls behind and shrinks back
after a one-off slow sample (on the H200, a Numba spin kernel compiled inside the first sample
once left every later sample behind a 20 ms spin: 10 s a point, README example never finished)."""

from __future__ import annotations

from klaraptor.backends.cupy_backend import _MAX_SPIN_US, _MIN_SPIN_US, next_spin_us


def test_the_spin_grows_when_the_host_falls_behind() -> None:
    assert next_spin_us(50.0, 45.0) == 100.0  # doubled
    assert next_spin_us(50.0, 400.0) == 600.0  # 1.5 × what the host took
    assert next_spin_us(10_000.0, 1e6) == _MAX_SPIN_US  # capped


def test_the_spin_stays_while_it_covers_the_host_with_room() -> None:
    assert next_spin_us(1000.0, 500.0) == 1000.0
    assert next_spin_us(1000.0, 250.0) == 1000.0


def test_one_slow_sample_does_not_tax_every_later_one() -> None:
    spin = next_spin_us(_MIN_SPIN_US, 1.2e6)  # a first sample that included a 1.2 s JIT compile
    assert spin == _MAX_SPIN_US
    samples = 0
    while spin > 4 * 30.0 and samples < 50:  # later samples: 30 µs of launches on the host
        spin = next_spin_us(spin, 30.0)
        samples += 1
    assert samples <= 8, samples  # halves per sample: back within a few samples
    assert _MIN_SPIN_US <= spin <= 120.0
    assert next_spin_us(spin, 30.0) == spin  # and settles
