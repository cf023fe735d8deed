"""From noisy marginals to one consistent cube: weighted least squares, then non-negativity.

Everything here is post-processing of the noisy measurements (no data, no privacy cost). Every
answer of a synopsis is a sum of cells of the one cube this returns, so totals and their
breakdowns agree exactly across every query answered from it.

Least squares uses the Gram matrix's eigenstructure (strategy.py): the solution of
(A^T W A) x = A^T W y is sum_T P_T(A^T W y) / lambda_T, where P_T keeps, per dimension, the
mean-free part (i in T) or the mean (i not in T). In an orthonormal basis per dimension whose
first vector is the constant one, A^T W A is diagonal: no cube-sized matrix is ever formed.

Non-negativity (counts, and sums of values bounded below by 0): the cube nearest the
least-squares one in the estimator's own metric (A^T W A, so well-measured marginals such as
the total move least) among cubes with no negative cell, by accelerated projected gradient
(FISTA). The intervals stay those of the least-squares estimator (its exact variance): the
projection moves an estimate towards the feasible set, which for a true count >= 0 does not
move it further from the truth in that metric, but its exact distribution is not tracked.
"""

from __future__ import annotations

import numpy as np

ITERATIONS = 3000
TOLERANCE = 1e-6  # of the largest cell: cells are rounded to whole numbers after


def expand(values: np.ndarray, mask: int, sizes: tuple[int, ...]) -> np.ndarray:
    """A marginal (its array over the dimensions in `mask`) as the cube A_m^T y: every cell
    of the cube gets its marginal cell's value."""
    shape = tuple(n if mask >> i & 1 else 1 for i, n in enumerate(sizes))
    return np.broadcast_to(values.reshape(shape), sizes)


def marginal(cube: np.ndarray, mask: int) -> np.ndarray:
    """The marginal of `cube` over the dimensions in `mask` (sums over the others)."""
    k = cube.ndim
    out = cube.sum(axis=tuple(i for i in range(k) if not mask >> i & 1))
    return np.asarray(out)


def _basis(n: int) -> np.ndarray:
    """An orthonormal n x n matrix whose first row is the constant vector (the mean) and whose
    other rows span the mean-free vectors."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(n), np.eye(n)[:, 1:]]))
    return q.T


def _transform(v: np.ndarray, bases: list[np.ndarray], inverse: bool = False) -> np.ndarray:
    for i, h in enumerate(bases):
        v = np.moveaxis(np.tensordot(h.T if inverse else h, v, axes=([1], [i])), 0, i)
    return v


def _diagonal(weights: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """weights[T] at every basis vector of subspace T (T: the dimensions where it is mean-free)."""
    t = np.zeros(sizes, dtype=int)
    for i, n in enumerate(sizes):
        shape = [1] * len(sizes)
        shape[i] = n
        t = t + (np.arange(n) > 0).astype(int).reshape(shape) * (1 << i)
    return weights[t]


def _apply(v: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """sum_T weights[T] * P_T v: diagonal in the per-dimension (mean, mean-free) basis."""
    bases = [_basis(n) for n in v.shape]
    return _transform(_diagonal(weights, v.shape) * _transform(v, bases), bases, inverse=True)


def least_squares(
    noisy: dict[int, np.ndarray], precision: dict[int, float], lam: np.ndarray, sizes: tuple[int, ...]
) -> np.ndarray:
    """The weighted least-squares cube from the noisy marginals (mask -> array)."""
    rhs = np.zeros(sizes)
    for m, y in noisy.items():
        rhs = rhs + precision[m] * expand(np.asarray(y, dtype=float), m, sizes)
    inverse = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), 0.0)
    return _apply(rhs, inverse)


def non_negative(x: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """argmin over z >= 0 of (z - x)^T M (z - x), M = sum_T lam_T P_T; FISTA from max(x, 0)."""
    if np.all(x >= 0):
        return x.copy()
    bases = [_basis(n) for n in x.shape]
    diagonal = _diagonal(lam, x.shape)
    step = 1.0 / float(np.max(lam))
    z = np.maximum(x, 0.0)
    y, t = z, 1.0
    for _ in range(ITERATIONS):
        grad = _transform(diagonal * _transform(y - x, bases), bases, inverse=True)
        z_next = np.maximum(y - step * grad, 0.0)
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        y = z_next + (t - 1) / t_next * (z_next - z)
        moved = float(np.max(np.abs(z_next - z)))
        z, t = z_next, t_next
        if moved <= TOLERANCE * max(1.0, float(np.max(np.abs(z)))):
            break
    return z


def rounded(x: np.ndarray) -> np.ndarray:
    """Whole numbers, the total kept (rounded): each cell floored, then the cells with the
    largest remainders get one more until the total is reached. Integer cells make every sum of
    cells exact in floating point too, so a total and its breakdown are equal to the last digit."""
    floor = np.floor(x)
    target = int(round(float(x.sum())))
    missing = target - int(floor.sum())
    flat = floor.ravel()
    if missing > 0:
        order = np.argsort(-(x.ravel() - flat), kind="stable")
        flat[order[:missing]] += 1
    return flat.reshape(x.shape)
