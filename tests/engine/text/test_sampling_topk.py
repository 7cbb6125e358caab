"""The narrowed top-k threshold equals the full partition's on every kind of logits, and
the sampler's draws with top-k over a big vocabulary follow the reference warper chain."""
from __future__ import annotations

import numpy as np
import pytest

from engine.text.sampling import ResolvedSampling, Sampler, apply_top_k, softmax, top_k_ids, top_k_threshold


def full_threshold(x: np.ndarray, k: int) -> float:
    n = x.shape[0]
    return float(np.partition(x, n - k)[n - k])


def _cases() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    v = 151936
    normal = (rng.standard_normal(v) * 3).astype(np.float32)
    peaked = normal.copy()
    peaked[rng.choice(v, 7, replace=False)] += 40
    ties = np.round(rng.standard_normal(v)).astype(np.float32)        # a handful of distinct values
    sparse = np.full(v, -np.inf, np.float32)
    sparse[rng.choice(v, 30, replace=False)] = rng.standard_normal(30).astype(np.float32)
    clustered = np.zeros(v, np.float32)
    clustered[:200] = np.arange(200, dtype=np.float32)                 # all the top ids in one row
    odd = (rng.standard_normal(49157) * 2).astype(np.float32)          # not a multiple of the rows
    small = (rng.standard_normal(300)).astype(np.float32)              # too small to narrow
    return [("normal", normal), ("peaked", peaked), ("ties", ties), ("mostly -inf", sparse),
            ("clustered", clustered), ("odd length", odd), ("small", small)]


@pytest.mark.parametrize("name,x", _cases(), ids=[c[0] for c in _cases()])
@pytest.mark.parametrize("k", [1, 2, 50, 640])
def test_threshold_equals_full_partition(name, x, k):
    if k >= x.shape[0]:
        pytest.skip("k covers the vocabulary")
    assert top_k_threshold(x, k) == full_threshold(x, k)
    ids, threshold = top_k_ids(x, k)
    assert threshold == full_threshold(x, k)
    assert np.array_equal(ids, np.flatnonzero(x >= full_threshold(x, k)))


@pytest.mark.parametrize("where", [[5], [49155], [3, 900, 40000]])
def test_nan_logits_rank_as_the_full_partition_ranks_them(where):
    x = (np.random.default_rng(2).standard_normal(49157)).astype(np.float32)
    x[where] = np.nan
    for k in (1, 2, 50):
        a, b = top_k_threshold(x, k), full_threshold(x, k)
        assert a == b or (np.isnan(a) and np.isnan(b))


def test_nan_logits_still_refused():
    x = (np.random.default_rng(1).standard_normal(49152)).astype(np.float32)
    x[[3, 900, 40000]] = np.nan
    assert np.isnan(top_k_threshold(x, 50)) == np.isnan(full_threshold(x, 50))
    s = Sampler(ResolvedSampling(greedy=False, temperature=1.0, top_k=2, top_p=1.0, min_p=0.0,
                                 repetition_penalty=1.0, presence_penalty=0.0, seed=0))
    with pytest.raises(ValueError):
        s.sample(x)


def test_top_k_draws_follow_softmax_of_the_kept_logits():
    rng = np.random.default_rng(9)
    logits = (rng.standard_normal(49152) * 2).astype(np.float32)
    logits[rng.choice(49152, 12, replace=False)] += 6.0
    expected = softmax(apply_top_k(logits / 0.8, 20))
    s = Sampler(ResolvedSampling(greedy=False, temperature=0.8, top_k=20, top_p=1.0, min_p=0.0,
                                 repetition_penalty=1.0, presence_penalty=0.0, seed=4))
    draws = np.array([s.sample(logits) for _ in range(6000)])
    support = np.flatnonzero(expected > 0)
    assert set(draws.tolist()) <= set(support.tolist()) and support.size == 20
    counts = np.bincount(draws, minlength=logits.shape[0])[support]
    e = expected[support] * counts.sum()
    chi = float(((counts - e) ** 2 / e).sum())
    assert chi < 19 + 5 * np.sqrt(38)


@pytest.mark.parametrize("n_hist", [1, 40, 3000, 20000])
def test_penalties_on_a_big_vocabulary(n_hist):
    """The penalised ids are exactly the distinct ids of the history, each penalised once."""
    from engine.text.sampling import _seen_ids, apply_penalties
    rng = np.random.default_rng(n_hist)
    vocab = 151936
    hist = rng.integers(0, vocab, n_hist)
    hist[: n_hist // 2] = hist[0]                 # repeats
    seen = _seen_ids(hist, vocab)
    assert np.array_equal(seen, np.flatnonzero(np.bincount(hist, minlength=vocab)))
    x = (rng.standard_normal(vocab) * 3).astype(np.float32)
    out = apply_penalties(x, hist, repetition_penalty=1.3, presence_penalty=0.5)
    ref = x.copy()
    v = ref[seen]
    ref[seen] = np.where(v > 0, v / 1.3, v * 1.3) - 0.5
    assert np.array_equal(out, ref)
    with pytest.raises(ValueError):
        _seen_ids(np.append(hist, vocab), vocab)
