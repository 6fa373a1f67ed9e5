"""The waves model (models/wave_time.py) on points generated from its own form and from a
one-wave training set."""

from __future__ import annotations

import numpy as np

from klaraptor.models.wave_time import choose_wave_fit, fit_waves, full_waves


def _points(sizes, b, g, programs_per, active, a=0.004, sms=132, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    D, cfg, W, t = [], [], [], []
    for M, K in sizes:
        for c in range(len(b)):
            w = full_waves(M * programs_per[c], active[c], sms)
            D.append((M, K))
            cfg.append(c)
            W.append(w)
            t.append((a + w * (b[c] + g[c] * K / 4096)) * (1 + noise * rng.standard_normal()))
    return np.array(D, float), np.array(cfg), np.array(W), np.array(t)


def test_recovers_the_ranking_at_larger_sizes() -> None:
    b = np.array([0.010, 0.004, 0.020])
    g = np.array([0.010, 0.030, 0.002])
    per = np.array([8, 2, 32])
    active = np.array([4, 1, 8])
    train = [(m, k) for m in (256, 512, 1024, 2048) for k in (1024, 4096)]
    D, cfg, W, t = _points(train, b, g, per, active, noise=0.01)
    fit = choose_wave_fit(D, cfg, W, t, 3, data_names=("M", "K"))
    assert "K" in fit.report["chosen_terms"]
    for M, K in [(8192, 4096), (16384, 8192), (4096, 2048)]:
        w = full_waves(M * per, active, 132)
        true = 0.004 + w * (b + g * K / 4096)
        pred = fit.predict((M, K), w)
        assert int(np.argmin(pred)) == int(np.argmin(true))
        assert np.allclose(pred, true, rtol=0.1)


def test_one_wave_training_ranks_by_time_per_wave() -> None:
    """Every training point in one wave: launch cost and wave time cannot be told apart; the
    model then charges each further wave what one wave cost in training."""
    t1 = np.array([0.010, 0.008, 0.012])
    D = np.array([[1000.0], [2000.0]]).repeat(3, axis=0)
    cfg = np.tile(np.arange(3), 2)
    t = np.tile(t1, 2)
    fit = fit_waves(D, cfg, np.ones(6), t, 3, data_names=("n",))
    assert fit.a < 0.1 * t1.min()
    w = np.array([4.0, 8.0, 2.0])  # config 1 is fastest per wave but needs the most waves
    assert int(np.argmin(fit.predict((64000,), w))) == int(np.argmin(w * t1))


def test_an_unmeasured_or_unlaunchable_config_is_never_chosen() -> None:
    D = np.array([[1.0], [1.0]])
    fit = fit_waves(
        D, np.array([0, 1]), np.array([1.0, 1.0]), np.array([1.0, 2.0]), 3, data_names=("n",)
    )
    pred = fit.predict((10,), np.array([np.inf, 1.0, 1.0]))
    assert int(np.argmin(pred)) == 1 and not np.isfinite(pred[2])
