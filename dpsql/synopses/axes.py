"""Each dimension's structure for measuring and least squares: pure functions of its size.

An axis of n cells carries a chain of block sizes 1 = s_0 < s_1 < ... < s_L = n, each dividing
the next: the blocks of size s_k are the n / s_k runs of s_k consecutive cells. A plain
dimension has the chain (1, n): its cells and its total. A bucketed dimension measured with a
hierarchy (a tree over its buckets) has intermediate levels too, e.g. (1, 2, 4, 12) for twelve
ten-year age bands: pairs, fours, and the total.

Block sums at size s_k, B_k, have Gram matrix B_k^T B_k = J_k (all-ones s_k x s_k blocks on the
diagonal). Every J_k of one chain is diagonal in one orthonormal basis: the subspaces
W_l = {constant on blocks of s_l, summing to zero within each block of s_{l+1}} (W_L: the
constants), on which J_k is s_k if k <= l and 0 otherwise. A measurement that releases, per
dimension, the block sums of the levels K_i (a marginal: {0} where it keeps the dimension, {L}
where it sums it; a tree: the intermediate levels) and every combination of them across
dimensions, has Gram matrix prod_i (sum over k in K_i of J_k), diagonal in the product basis with
eigenvalue prod_i e_i(l_i), e_i(l) = sum over k in K_i, k <= l of s_k. So least squares is a
diagonal solve in that basis, and the variance of a query that sums the cells q = (x) q_i is
exactly sum over level tuples l of prod_i ||P_{W_l_i} q_i||^2 / lambda_l.
Each combination of levels is a partition of the cube (every cell in exactly one block), so one
person moves each by at most the cube's L1 sensitivity: a measurement of P partitions has L1
sensitivity P times the cube's.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class Axis:
    blocks: tuple[int, ...]  # s_0 = 1 < ... < s_L = the dimension's cells (s_0 = s_1 = 1 for one cell)

    @property
    def size(self) -> int:
        return self.blocks[-1]

    @property
    def top(self) -> int:
        return len(self.blocks) - 1

    @property
    def tree(self) -> bool:
        return len(self.blocks) > 2


def flat(n: int) -> Axis:
    """A dimension measured by its cells and its total only."""
    return Axis((1, n))


def chains(n: int) -> list[Axis]:
    """The hierarchies considered over n buckets: powers of a branching b (2..8) while they
    divide n, then n; and n's prime factors, smallest first and largest first."""
    out = []
    for b in range(2, 9):
        s, blocks = b, [1]
        while s < n and n % s == 0:
            blocks.append(s)
            s *= b
        out.append(tuple(blocks) + (n,))
    primes, rest, p = [], n, 2
    while rest > 1 and p * p <= rest:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    if rest > 1:
        primes.append(rest)
    for order in (primes, primes[::-1]):
        out.append(tuple(itertools.accumulate(order, lambda a, b: a * b, initial=1)))
    kept = {c for c in out if len(c) > 2 and c[-1] == n}
    return [Axis(c) for c in sorted(kept)]


def measured(axis: Axis, keep: bool) -> tuple[int, ...]:
    """A marginal's levels along the axis: its cells (keep) or its total."""
    return (0,) if keep else (axis.top,)


def internal(axis: Axis) -> tuple[int, ...]:
    """A tree's levels: the intermediate block sizes (the cells and the total are marginals')."""
    return tuple(range(1, axis.top))


def factor(axis: Axis, levels: tuple[int, ...]) -> np.ndarray:
    """e(l) for every level l: the eigenvalue of sum over k in levels of J_k on W_l."""
    return np.array([sum(axis.blocks[k] for k in levels if k <= lv) for lv in range(axis.top + 1)], dtype=float)


def eigenvalues(precision: dict[tuple[tuple[int, ...], ...], float], axes: tuple[Axis, ...]) -> np.ndarray:
    """lambda over level tuples (an array of shape (L_i + 1)_i) of the measurements' Gram matrix;
    a measurement is its levels per dimension, `precision` its values' 1 / variance."""
    lam = np.zeros(tuple(a.top + 1 for a in axes))
    for levels, w in precision.items():
        term = np.array(w)
        for a, ks in zip(axes, levels):
            term = np.multiply.outer(term, factor(a, ks))
        lam = lam + term
    return lam


def partitions(levels: tuple[tuple[int, ...], ...]) -> int:
    """How many partitions of the cube a measurement releases (its L1 sensitivity's multiple)."""
    return math.prod(len(ks) for ks in levels)


def coefficients(axis: Axis, q: np.ndarray) -> np.ndarray:
    """||P_{W_l} q||^2 for every level l of the axis (q: the weights a query gives its cells)."""
    norms = [float(np.sum(np.asarray(q, dtype=float).reshape(-1, s).sum(axis=1) ** 2)) / s for s in axis.blocks]
    out = [norms[lv] - norms[lv + 1] for lv in range(axis.top)] + [norms[-1]]
    return np.maximum(np.array(out), 0.0)


def picks(axis: Axis, cells) -> np.ndarray:
    """The 0/1 weights of a query that sums these cells of the axis."""
    q = np.zeros(axis.size)
    q[np.asarray(list(cells), dtype=int)] = 1.0
    return q


def variance(lam: np.ndarray, axes: tuple[Axis, ...], queries: list[np.ndarray]) -> float:
    """The least-squares estimate's variance for the query summing (x)_i queries[i]."""
    c = np.array(1.0)
    for a, q in zip(axes, queries):
        c = np.multiply.outer(c, coefficients(a, q))
    live = c > 1e-12 * max(1.0, float(c.max()))
    if np.any(lam[live] <= 0):
        return math.inf
    return float(np.sum(c[live] / lam[live]))


@lru_cache(maxsize=256)
def basis(axis: Axis) -> tuple[np.ndarray, np.ndarray]:
    """An orthonormal basis of the axis (rows) and each vector's level: the eigenvectors of
    sum_k C_k (C_k averaging over blocks of s_k), which is l + 1 on W_l."""
    n = axis.size
    m = np.zeros((n, n))
    for s in axis.blocks:
        m += np.kron(np.eye(n // s), np.full((s, s), 1.0 / s))
    values, vectors = np.linalg.eigh(m)
    return vectors.T, np.rint(values).astype(int) - 1


def block_sums(cube: np.ndarray, axis: int, s: int) -> np.ndarray:
    """Sums of runs of s consecutive cells along one axis of the cube."""
    shape = cube.shape
    return cube.reshape(shape[:axis] + (shape[axis] // s, s) + shape[axis + 1 :]).sum(axis=axis + 1)


def released(cube: np.ndarray, axes: tuple[Axis, ...], levels: tuple[tuple[int, ...], ...]) -> dict[tuple, np.ndarray]:
    """Every partition a measurement releases (one level per dimension) -> its block sums."""
    out = {}
    for combo in itertools.product(*levels):
        part = cube
        for i, (a, k) in enumerate(zip(axes, combo)):
            part = block_sums(part, i, a.blocks[k])
        out[combo] = part
    return out


def spread(values: np.ndarray, axes: tuple[Axis, ...], combo: tuple[int, ...]) -> np.ndarray:
    """B^T y for one partition: every cell gets its block's value."""
    out = np.asarray(values, dtype=float)
    for i, (a, k) in enumerate(zip(axes, combo)):
        out = np.repeat(out, a.blocks[k], axis=i)
    return out
