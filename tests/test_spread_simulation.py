"""benchmarks/spread_simulation.py's shared tail (DESIGN §10, issue 32): the variance's split at a
clamp that it rests on, and what it gives without noise where the groups share the tail or not."""

from __future__ import annotations

import numpy as np

from benchmarks import spread_simulation as ss


def _groups(tails: list[bool], size: int = 400):
    """Groups of the same log-normal bulk; a group with a tail has a tenth of its values times 20."""
    rng = np.random.default_rng(7)
    base = rng.lognormal(6.5, 0.8, size)
    heavy = base.copy()
    heavy[: size // 10] *= 20
    v = np.concatenate([heavy if t else base for t in tails])
    g = np.repeat(np.arange(len(tails)), size)
    w = np.ones_like(v)
    truth = np.array([np.std(v[g == i]) for i in range(len(tails))])
    return g, v, w, truth


def test_a_clamped_variance_plus_the_tail_terms_is_the_variance_at_the_high_clamp():
    rng = np.random.default_rng(3)
    x, w = rng.lognormal(7, 1.2, 5000), rng.uniform(0.1, 1, 5000)
    u, h = 3000.0, 20000.0
    z, y, t = np.clip(x, 0, u), np.clip(x, 0, h), np.clip(x, u, h) - u

    def mean(a):
        return float(np.sum(w * a) / np.sum(w))

    var_y = mean(y * y) - mean(y) ** 2
    parts = mean(z * z) - mean(z) ** 2 + mean(t * t) - mean(t) ** 2 + 2 * (u - mean(z)) * mean(t)
    assert abs(parts - var_y) <= 1e-9 * var_y


def test_a_shared_tail_restores_what_the_clamp_cuts_and_the_gate_keeps_it_from_one_groups_tail(monkeypatch):
    monkeypatch.setattr(ss, "EPSILON", 1e12)  # no noise: the estimators' own bias
    g, v, w, truth = _groups([True] * 6)
    u, high = float(np.quantile(v, 0.8)), float(v.max())
    rng = np.random.default_rng(1)
    clamped = ss.global_clamp(rng, g, v, w, 6, u, 1)[0]
    assert np.all(clamped < 0.8 * truth)  # the clamp cuts the tail every group shares
    for gate in (None, "means"):
        shared = ss.shared_tail(rng, g, v, w, 6, u, high, 1, gate)[0]
        assert np.allclose(shared, truth, rtol=1e-6)  # every group's tail is the pooled one

    g, v, w, truth = _groups([True] + [False] * 5)  # one group holds the tail
    u = float(np.quantile(v[g == 1], 0.95))
    high = float(v.max())
    ungated = ss.shared_tail(rng, g, v, w, 6, u, high, 1)[0]
    assert np.all(ungated[1:] > 1.5 * truth[1:]) and ungated[0] < truth[0]  # its tail given to all
    gated = ss.shared_tail(rng, g, v, w, 6, u, high, 1, "means")[0]
    assert np.allclose(gated, ss.global_clamp(rng, g, v, w, 6, u, 1)[0])  # the gate: the clamped spread
