"""The two-sample Kolmogorov–Smirnov test (scipy is not a dependency): statistic and two-sided p.

Exact p-value for small samples (counting the lattice paths that stay inside the band, as
scipy.stats.ks_2samp(method="exact") does), the asymptotic Kolmogorov distribution otherwise.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Sequence

EXACT_LIMIT = 10_000     # n * m up to this: exact


def ks_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """sup |F_a(x) - F_b(x)| over the pooled sample."""
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    if not n or not m:
        raise ValueError("both samples must be non-empty")
    return max(abs(bisect_right(xs, v) / n - bisect_right(ys, v) / m) for v in xs + ys)


def _exact_p(d: float, n: int, m: int) -> float:
    """P(D >= d) under H0: 1 - (paths from (0,0) to (n,m) with |i/n - j/m| < d) / C(n+m, n)."""
    eps = 1e-9       # D takes values k/lcm(n, m): compare with a tolerance
    inside = lambda i, j: abs(i / n - j / m) < d - eps     # noqa: E731
    row = [0] * (m + 1)
    for j in range(m + 1):
        row[j] = 1 if inside(0, j) and (j == 0 or row[j - 1]) else 0
    for i in range(1, n + 1):
        new = [0] * (m + 1)
        for j in range(m + 1):
            if inside(i, j):
                new[j] = row[j] + (new[j - 1] if j else 0)
        row = new
    return min(1.0, max(0.0, 1.0 - row[m] / math.comb(n + m, n)))


def _asymptotic_p(d: float, n: int, m: int) -> float:
    en = math.sqrt(n * m / (n + m))
    lam = (en + 0.12 + 0.11 / en) * d          # Stephens' correction (Numerical Recipes)
    if lam < 1e-3:
        return 1.0
    total = sum(2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, total))


def ks_2samp(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(D, two-sided p-value)."""
    d = ks_statistic(a, b)
    n, m = len(a), len(b)
    if d == 0:
        return 0.0, 1.0
    p = _exact_p(d, n, m) if n * m <= EXACT_LIMIT else _asymptotic_p(d, n, m)
    return d, p
