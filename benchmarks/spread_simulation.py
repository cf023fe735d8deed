"""Simulated releases of a grouped STDDEV on the sample's exact rows (issue 32, DESIGN.md §10):
which estimator would help a spread whose groups differ in scale, or share a heavy tail.

    python -m benchmarks.spread_simulation [--runs 200]

Each estimator is simulated as the release would compute it at the sample's epsilon (0.1, of
which the release gets 0.09), Laplace noise, under the total bound C = 1 that the choice makes for
these queries (each of a patient's n rows weighs 1/n): the median relative error over the groups
and the runs, against the exact STDDEV_POP. Nothing here is released or charged: it reads the raw
sample to tell which mechanism is worth building.

- global: today's variance family at one clamp [0, u] for every group (count, sum and squares
  centred at the range's middle, a third of the epsilon each);
- global+shrink: the same, then each group moved toward the groups' median by at most half its
  noise's 95 % half-width (guarantee/shrinkage.py);
- two-stage: the count and sum at the clamp U give each group's noisy mean m; each group's squares
  are then taken about m, clamped at k × m and divided by their own range, so one patient moves
  the normalised squares by at most C / 2 whatever the group's clamp (not built);
- two-stage by spread: as two-stage, each group's clamp at its noisy mean plus k times its noisy
  stddev from a first release of the variance family at U (not built);
- tail ratio: each group's variance at a low clamp a times one shared factor 1 + X / V, X one
  ungrouped release of the squares and sum between a and the high clamp b (sensitivities C (b² − a²)
  and C (b − a)), V the groups' pooled variance at a (five parts of epsilon; not built);
- tail tested: the tail released per group, the shared factor the median of the groups' own, a
  group's own factor kept where it differs by more than its noise (not built);
- shared tail: each group's variance at [0, u] plus what the clamp cuts below a high clamp h, from
  two ungrouped releases of the excess t = clamp(v, u, h) - u, read per row and given to every
  group alike (not built); gated: the same only when every group's noisy count of rows above the
  values' 90th percentile is within its noise of its share of their total, else the variance at
  [0, u] alone (not built).
"""

from __future__ import annotations

import argparse
import collections
import math

import numpy as np

from . import sample

EPSILON = 0.09  # the release's share of the sample's query_epsilon under auto bounds
QUERIES = {  # name: (column, key, declared upper bound)
    "stay_by_ward": ("length_of_stay", "ward", 30.0),
    "cost_by_diagnosis": ("cost", "diagnosis", 50000.0),
    "cost_by_ward": ("cost", "ward", 50000.0),
    "stay_by_diagnosis": ("length_of_stay", "diagnosis", 30.0),
}


def _rows(con, column: str, key: str):
    rows = con.execute(f"SELECT patient_id, {key}, {column} FROM visits").fetchall()
    n = collections.Counter(p for p, _, _ in rows)
    keys = sorted({k for _, k, _ in rows})
    index = {k: i for i, k in enumerate(keys)}
    g = np.array([index[k] for _, k, _ in rows])
    v = np.array([float(x) for _, _, x in rows])
    w = np.array([1.0 / n[p] for p, _, _ in rows])
    truth = np.array([np.std(v[g == i]) for i in range(len(keys))])
    return g, v, w, truth, len(keys)


def _error(est: np.ndarray, truth: np.ndarray) -> float:
    return float(np.median(np.abs(est - truth) / truth))


def _moments(g, v, w, groups, u):
    """Each group's weighted count, sum and squares of the values clamped to [0, u], centred at u / 2."""
    x = np.clip(v, 0, u)
    return tuple(np.bincount(g, w * t, groups) for t in (np.ones_like(x), x - u / 2, (x - u / 2) ** 2))


def _variances(rng, moments, u, e):
    """One release of the variance family at [0, u], each part at e: the noisy count, the noisy
    centred sum and the variance, clamped to what is possible. The squares are released centred
    at half their range, half^2 / 2, which is added back times the noisy count, as
    guarantee/families._Variance reads them: so the count's noise reaches the squares times
    half^2 / 2 (left out before, which made every estimator here look better than it measures)."""
    cnt, s1, s2 = moments
    half = u / 2
    noisy = cnt + rng.laplace(0, 1 / e, len(cnt))
    n = np.maximum(noisy, 1)
    a = s1 + rng.laplace(0, half / e, len(cnt))
    b = s2 + rng.laplace(0, half * half / 2 / e, len(cnt)) + half * half / 2 * (noisy - cnt)
    return n, a, np.clip(b / n - (a / n) ** 2, 0, half * half)


def global_clamp(rng, g, v, w, groups, u, runs, shrink=False):
    e, half = EPSILON / 3, u / 2
    moments = _moments(g, v, w, groups, u)
    out = []
    for _ in range(runs):
        n, a, var = _variances(rng, moments, u, e)
        sd = np.sqrt(var)
        if shrink:  # the variance's half-width at 1 - 0.05/3 (the squares' and the sum's), as a stddev's
            h = np.log(60) * (half * half / 2 + 2 * np.abs(a / n) * half) / e / n
            width = (np.sqrt(var + h) - np.sqrt(np.maximum(var - h, 0))) / 2
            sd = sd + np.clip(np.median(sd) - sd, -width / 2, width / 2)
        out.append(sd)
    return np.array(out)


def two_stage(rng, g, v, w, groups, u, k, runs):
    e = EPSILON / 3
    centre, half = u / 2, u / 2
    x = np.clip(v, 0, u)
    cnt, s1 = np.bincount(g, w, groups), np.bincount(g, w * (x - centre), groups)
    out = []
    for _ in range(runs):
        n = np.maximum(cnt + rng.laplace(0, 1 / e, groups), 1)
        m = np.clip(centre + (s1 + rng.laplace(0, half / e, groups)) / n, 0, u)
        out.append(_second_stage(rng, g, v, w, groups, m, np.clip(k * m, 0, u), n, e))
    return np.array(out)


def two_stage_spread(rng, g, v, w, groups, u, k, runs):
    """The variance family at [0, u] (four parts of epsilon), then each group's squares about its
    noisy mean m, clamped at m + k times its noisy stddev and divided by their own range, the fourth
    part (as two_stage, its clamp scaled by each group's first-stage spread; not built)."""
    e = EPSILON / 4
    moments = _moments(g, v, w, groups, u)
    out = []
    for _ in range(runs):
        n, a, var = _variances(rng, moments, u, e)
        m = np.clip(u / 2 + a / n, 0, u)
        out.append(_second_stage(rng, g, v, w, groups, m, np.clip(m + k * np.sqrt(var), 0, u), n, e))
    return np.array(out)


def _second_stage(rng, g, v, w, groups, m, ug, n, e):
    """Each group's stddev from its squares about its noisy mean m, the values clamped at its own
    ug and the squares divided by their range (so one unit moves them by at most 1/2), noised at e."""
    r = np.maximum(np.maximum((ug - m) ** 2, m**2), 1e-9)
    sq = np.bincount(g, w * ((np.clip(v, 0, ug[g]) - m[g]) ** 2 / r[g] - 0.5), groups)
    sq = sq + rng.laplace(0, 0.5 / e, groups)
    return np.sqrt(np.clip((sq + 0.5 * n) * r / n, 0, None))


def tail_ratio(rng, g, v, w, groups, low, high, runs):
    e = EPSILON / 5
    moments = _moments(g, v, w, groups, low)
    x, y = np.clip(v, 0, low), np.clip(v, 0, high)
    tail_sq, tail_sum = float(np.sum(w * (y * y - x * x))), float(np.sum(w * (y - x)))
    out = []
    for _ in range(runs):
        n, a, var = _variances(rng, moments, low, e)
        total = float(np.sum(n))
        mean_low = float(np.sum(a)) / total + low / 2
        t2 = tail_sq + rng.laplace(0, (high * high - low * low) / e)
        t1 = tail_sum + rng.laplace(0, (high - low) / e)
        pooled = max(float(np.sum(var * n)) / total, 1e-9)
        extra = t2 / total - ((mean_low + t1 / total) ** 2 - mean_low**2)
        out.append(np.sqrt(var * max(1 + extra / pooled, 1.0)))
    return np.array(out)


def tail_tested(rng, g, v, w, groups, low, high, runs):
    """The tail ratio with a test of whether the tail is shared: the tail's squares and sum between
    the low and the high clamp released per group (a patient's weights sum to C over the groups, so
    the ungrouped sensitivities hold); the shared factor is the median of the groups' own factors,
    and a group keeps its own where it differs from that by more than its noise's half-width at
    1 - 0.05 / groups (not built)."""
    e = EPSILON / 5
    moments = _moments(g, v, w, groups, low)
    x, y = np.clip(v, 0, low), np.clip(v, 0, high)
    tail_sq, tail_sum = np.bincount(g, w * (y * y - x * x), groups), np.bincount(g, w * (y - x), groups)
    b2, b1 = (high * high - low * low) / e, (high - low) / e
    out = []
    for _ in range(runs):
        n, a, var = _variances(rng, moments, low, e)
        mean_low, var = a / n + low / 2, np.maximum(var, 1e-9)
        t2, t1 = tail_sq + rng.laplace(0, b2, groups), tail_sum + rng.laplace(0, b1, groups)
        own = np.maximum(1 + (t2 / n - ((mean_low + t1 / n) ** 2 - mean_low**2)) / var, 1.0)
        shared = float(np.median(own))
        width = np.log(20 * groups) * (b2 + 2 * np.abs(mean_low + t1 / n) * b1) / n / var
        out.append(np.sqrt(var * np.where(np.abs(own - shared) > width, own, shared)))
    return np.array(out)


def shared_tail(rng, g, v, w, groups, u, high, runs, gate=None, recover=False, tail=0.3):
    """Var(clamp(v, 0, h)) = Var(z) + E[t^2] - E[t]^2 + 2 (u - E[z]) E[t] for z = clamp(v, 0, u) and
    t = clamp(v, u, h) - u (t > 0 only where z = u): each group's Var(z) and E[z] from today's
    family at [0, u] with the shrinkage, E[t^2] and E[t] per row from two ungrouped releases of
    sum w t^2 and sum w t over the groups' noisy total count (sensitivities C (h - u)^2 and C (h - u):
    centred at u, (h - u)^2 is a third of h^2 - u^2 at h = 2u), the same for every group. Not built.

    gate None: the tail always added (half the epsilon each to the bulk's three parts and the
    tail's two). "counts": first 0.15 of the epsilon releases each group's count of rows above the
    values' 90th percentile q and of those below it (a unit's rows weigh C over both; q exact here,
    from the profile in a build); the tail is added only when each group's count above q is within
    its noise's half-width at 1 - 0.05 / groups (plus twice its square root) of its rows' share of
    their total above q, and where it is not the bulk gets the other 0.85. "means": the bulk at
    1 - `tail`, the tail at `tail` (0.3), and the tail added only when every group's released clamped mean is within
    its own half-width at 1 - 0.05 / groups of the groups' median (post-processing of the bulk's
    release: free); `recover`: where it is not, the tail's 0.3 releases the bulk again and the
    two are combined by inverse variance (epsilon^2 weights), an adaptive choice within one part."""
    share = {None: (0.5, 0.5, 0.0), "counts": (0.5, 0.35, 0.15), "means": (1 - tail, tail, 0.0)}[gate]
    moments = _moments(g, v, w, groups, u)
    t = np.clip(v, u, high) - u
    sq, lin = float(np.sum(w * t * t)), float(np.sum(w * t))
    q = np.quantile(v, 0.9)
    above, below = np.bincount(g, w * (v > q), groups), np.bincount(g, w * (v <= q), groups)
    half = u / 2
    out = []
    for _ in range(runs):
        e, shared = EPSILON * share[0] / 3, True
        if gate == "counts":
            scale = 1 / (EPSILON * share[2])
            counts, rest = above + rng.laplace(0, scale, groups), below + rng.laplace(0, scale, groups)
            expected = (counts + rest) * float(np.sum(counts)) / float(np.sum(counts + rest))
            slack = np.log(groups / 0.05) * scale + 2 * np.sqrt(np.maximum(expected, 0))
            shared = not np.any(np.abs(counts - expected) > slack)
            e = e if shared else EPSILON * (1 - share[2]) / 3
        n, a, var = _variances(rng, moments, u, e)
        mean = np.clip(half + a / n, 0, u)
        if gate == "means":
            width = np.log(2 * groups / 0.05) * (half + np.abs(mean - half)) / e / n
            shared = bool(np.all(np.abs(mean - np.median(mean)) <= width))
            if not shared and recover:
                e2 = EPSILON * share[1] / 3
                n2, a2, var2 = _variances(rng, moments, u, e2)
                weight = e * e / (e * e + e2 * e2)
                n, a = weight * n + (1 - weight) * n2, weight * a + (1 - weight) * a2
                var, e = weight * var + (1 - weight) * var2, math.hypot(e, e2)
        h = np.log(60) * (half * half / 2 + 2 * np.abs(a / n) * half) / e / n
        sd = np.sqrt(var)
        width = (np.sqrt(var + h) - np.sqrt(np.maximum(var - h, 0))) / 2
        var = (sd + np.clip(np.median(sd) - sd, -width / 2, width / 2)) ** 2
        if not shared:
            out.append(np.sqrt(var))
            continue
        et, total = EPSILON * share[1] / 2, float(np.sum(n))
        t2 = max(sq + rng.laplace(0, (high - u) ** 2 / et), 0.0) / total
        t1 = max(lin + rng.laplace(0, (high - u) / et), 0.0) / total
        out.append(np.sqrt(np.maximum(var + t2 - t1 * t1 + 2 * (u - mean) * t1, 0)))
    return np.array(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    con = sample.truth_connection()
    for name, (column, key, upper) in QUERIES.items():
        rng = np.random.default_rng(1)
        g, v, w, truth, groups = _rows(con, column, key)
        clamps = [upper / 2**i for i in range(6)]
        print(f"{name}: exact stddev {np.round(np.sort(truth), 2).tolist()}")
        for shrink in (False, True):
            found = {
                round(u, 1): _error(global_clamp(rng, g, v, w, groups, u, args.runs, shrink), truth) for u in clamps
            }
            print(f"  global{'+shrink' if shrink else ''}: " + ", ".join(f"{u}: {e:.1%}" for u, e in found.items()))
        for u in clamps[:4]:
            found = {k: _error(two_stage(rng, g, v, w, groups, u, k, args.runs), truth) for k in (3, 5, 8, 12, 20)}
            print(f"  two-stage U={round(u, 1)}: " + ", ".join(f"k {k}: {e:.1%}" for k, e in found.items()))
            found = {k: _error(two_stage_spread(rng, g, v, w, groups, u, k, args.runs), truth) for k in (2, 3, 4, 6)}
            print(f"  two-stage by spread U={round(u, 1)}: " + ", ".join(f"k {k}: {e:.1%}" for k, e in found.items()))
        lows = [upper / 2**i for i in (3, 4, 5)]
        for low in lows:
            found = {
                round(h, 1): _error(tail_ratio(rng, g, v, w, groups, low, h, args.runs), truth) for h in clamps[:3]
            }
            print(f"  tail ratio low={round(low, 1)}: " + ", ".join(f"high {h}: {e:.1%}" for h, e in found.items()))
        for low in lows:
            found = {
                round(h, 1): _error(tail_tested(rng, g, v, w, groups, low, h, args.runs), truth) for h in clamps[:3]
            }
            print(f"  tail tested low={round(low, 1)}: " + ", ".join(f"high {h}: {e:.1%}" for h, e in found.items()))
        for u in clamps[1:3]:
            found = {
                t: _error(shared_tail(rng, g, v, w, groups, u, min(2 * u, upper), args.runs, "means", tail=t), truth)
                for t in (0.1, 0.15, 0.2, 0.3)
            }
            print(
                f"  shared tail gated by means U={round(u, 1)} high={round(min(2 * u, upper), 1)}: "
                + ", ".join(f"tail share {t}: {e:.1%}" for t, e in found.items())
            )
        for gate, recover in ((None, False), ("counts", False), ("means", False), ("means", True)):
            for u in clamps[1:5]:
                found = {
                    round(h, 1): _error(shared_tail(rng, g, v, w, groups, u, h, args.runs, gate, recover), truth)
                    for h in clamps[:3]
                    if h > u
                }
                how = {None: "", "counts": " gated by counts", "means": " gated by means"}[gate]
                print(
                    f"  shared tail{how}{' recovered' if recover else ''} U={round(u, 1)}: "
                    + ", ".join(f"high {h}: {e:.1%}" for h, e in found.items())
                )


if __name__ == "__main__":
    main()
