"""From noisy marginals to one consistent cube: weighted least squares, then non-negativity.

Everything here is post-processing of the noisy measurements (no data, no privacy cost). Every
answer of a synopsis is a sum of cells of the one cube this returns, so totals and their
breakdowns agree exactly across every query answered from it.

Least squares uses the Gram matrix's eigenstructure (axes.py): in the product of each
dimension's orthonormal basis (its levels W_l: for a plain dimension the mean and the mean-free
vectors; a hierarchy adds one level per block size), A^T W A is diagonal, so the solution of
(A^T W A) x = A^T W y is three small transforms and a division: no cube-sized matrix is formed.

Non-negativity (counts, and sums of values bounded below by 0): the cube nearest the
least-squares one in the estimator's own metric (A^T W A, so well-measured marginals such as
the total move least) among cubes with no negative cell, by accelerated projected gradient
(FISTA). The intervals stay those of the least-squares estimator (its exact variance): the
projection moves an estimate towards the feasible set, which for a true count >= 0 does not
move it further from the truth in that metric, but its exact distribution is not tracked.
"""

from __future__ import annotations

import numpy as np

from .axes import Axis, basis

ITERATIONS = 3000
TOLERANCE = 1e-6  # of the largest cell: cells are rounded to whole numbers after


def marginal(cube: np.ndarray, mask: int) -> np.ndarray:
    """The marginal of `cube` over the dimensions in `mask` (sums over the others)."""
    k = cube.ndim
    out = cube.sum(axis=tuple(i for i in range(k) if not mask >> i & 1))
    return np.asarray(out)


def _transform(v: np.ndarray, bases: list[np.ndarray], inverse: bool = False) -> np.ndarray:
    for i, h in enumerate(bases):
        v = np.moveaxis(np.tensordot(h.T if inverse else h, v, axes=([1], [i])), 0, i)
    return v


def _diagonal(lam: np.ndarray, axes: tuple[Axis, ...]) -> np.ndarray:
    """lambda at every vector of the product basis (its level along each dimension)."""
    return lam[np.ix_(*[basis(a)[1] for a in axes])]


def _apply(v: np.ndarray, diagonal: np.ndarray, axes: tuple[Axis, ...]) -> np.ndarray:
    """The operator diagonal in the product basis with these values, applied to v."""
    bases = [basis(a)[0] for a in axes]
    return _transform(diagonal * _transform(v, bases), bases, inverse=True)


def least_squares(rhs: np.ndarray, lam: np.ndarray, axes: tuple[Axis, ...]) -> np.ndarray:
    """The weighted least-squares cube: the solution of (A^T W A) x = rhs, rhs = A^T W y (the
    noisy measurements spread over their cells and weighted), lam the Gram's eigenvalues."""
    d = _diagonal(lam, axes)
    return _apply(np.asarray(rhs, dtype=float), np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0), axes)


def non_negative(x: np.ndarray, lam: np.ndarray, axes: tuple[Axis, ...]) -> np.ndarray:
    """argmin over z >= 0 of (z - x)^T M (z - x), M = A^T W A; FISTA from max(x, 0)."""
    if np.all(x >= 0):
        return x.copy()
    diagonal = _diagonal(lam, axes)
    step = 1.0 / float(np.max(lam))
    z = np.maximum(x, 0.0)
    y, t = z, 1.0
    for _ in range(ITERATIONS):
        grad = _apply(y - x, diagonal, axes)
        z_next = np.maximum(y - step * grad, 0.0)
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        y = z_next + (t - 1) / t_next * (z_next - z)
        moved = float(np.max(np.abs(z_next - z)))
        z, t = z_next, t_next
        if moved <= TOLERANCE * max(1.0, float(np.max(np.abs(z)))):
            break
    return z


def from_masks(lam: np.ndarray, k: int) -> np.ndarray:
    """Eigenvalues indexed by subspace mask (bit i: mean-free along i; strategy.eigenvalues) as
    the level-indexed array of plain axes (level 0: mean-free, 1: the mean)."""
    out = np.zeros((2,) * k)
    for levels in np.ndindex(*out.shape):
        out[levels] = lam[sum(1 << i for i, lv in enumerate(levels) if lv == 0)]
    return out


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
