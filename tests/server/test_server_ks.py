"""The two-sample KS test used by the timing test, checked against brute force and known values."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from tests.support.ks import _asymptotic_p, _exact_p, ks_2samp, ks_statistic


def test_statistic_of_simple_samples():
    assert ks_statistic([1, 2, 3], [1, 2, 3]) == 0
    assert ks_statistic([1, 2, 3], [4, 5, 6]) == 1
    assert ks_statistic([1, 2, 3, 4], [3, 4, 5, 6]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        ks_statistic([], [1])


def test_fully_separated_samples_have_the_smallest_p():
    # Only the two splits with all of one sample below the other give D = 1: p = 2 / C(10, 5).
    d, p = ks_2samp([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert d == 1 and p == pytest.approx(2 / math.comb(10, 5))
    assert ks_2samp([1, 2, 3], [1, 2, 3]) == (0.0, 1.0)


@pytest.mark.parametrize("n, m, seed", [(4, 5, 0), (5, 5, 1), (3, 7, 2), (6, 4, 3)])
def test_exact_p_equals_the_permutation_distribution(n, m, seed):
    rng = random.Random(seed)
    a = [rng.random() for _ in range(n)]
    b = [rng.random() + 0.3 for _ in range(m)]
    d, p = ks_2samp(a, b)
    pooled = a + b
    splits = list(itertools.combinations(range(n + m), n))
    extreme = 0
    for idx in splits:
        chosen = set(idx)
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(n + m) if i not in chosen]
        extreme += ks_statistic(x, y) >= d - 1e-9
    assert p == pytest.approx(extreme / len(splits))


def test_asymptotic_p_is_close_to_exact_for_larger_samples():
    for d in (0.2, 0.3, 0.4):
        # D is discrete (steps of 1/40): the exact p includes the atom at d, the limit does not.
        assert _asymptotic_p(d, 40, 40) == pytest.approx(_exact_p(d, 40, 40), abs=0.06)


def test_same_distribution_rarely_rejects_and_shifted_always_does():
    rng = random.Random(5)
    same = sum(ks_2samp([rng.gauss(0, 1) for _ in range(15)], [rng.gauss(0, 1) for _ in range(15)])[1] < 0.05
               for _ in range(200))
    assert same < 25                      # ~5% expected (fewer: the exact test is conservative)
    assert all(ks_2samp([rng.gauss(0, 1) for _ in range(15)], [rng.gauss(3, 1) for _ in range(15)])[1] < 0.05
               for _ in range(20))
