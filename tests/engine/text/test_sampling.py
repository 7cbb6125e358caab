"""engine.text.sampling: parameter resolution, the masking steps, penalties and the sampler itself."""
from __future__ import annotations

import time

import numpy as np
import pytest

from engine.api import SamplingParams
from engine.text.sampling import (ResolvedSampling, Sampler, apply_min_p, apply_penalties,
                             apply_top_k, apply_top_p, nucleus_indices, resolve_sampling,
                             softmax)

NEG_INF = -np.inf


def settings(**kw) -> ResolvedSampling:
    base = dict(greedy=False, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                repetition_penalty=1.0, presence_penalty=0.0, seed=1234)
    base.update(kw)
    return ResolvedSampling(**base)


def log_probs(*p: float) -> np.ndarray:
    return np.log(np.array(p, dtype=np.float64)).astype(np.float32)


def kept(masked: np.ndarray) -> list[int]:
    return np.flatnonzero(np.isfinite(masked)).tolist()


def chi_square(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    expected = expected_probs * counts.sum()
    nz = expected > 0
    assert counts[~nz].sum() == 0, "drew a token with zero probability"
    return float((((counts[nz] - expected[nz]) ** 2) / expected[nz]).sum())


# ---------------------------------------------------------------- resolve_sampling

def test_resolve_no_config_no_user_values_is_greedy():
    r = resolve_sampling(SamplingParams(), {})
    assert r.greedy
    assert (r.temperature, r.top_k, r.top_p, r.min_p) == (1.0, 50, 1.0, 0.0)
    assert r.repetition_penalty == 1.0 and r.presence_penalty == 0.0 and r.seed is None


def test_resolve_do_sample_false_is_greedy_even_with_config_values():
    r = resolve_sampling(SamplingParams(), {"do_sample": False, "temperature": 0.7})
    assert r.greedy
    assert r.temperature == 0.7


def test_resolve_takes_generation_config_defaults():
    cfg = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
           "repetition_penalty": 1.1, "bos_token_id": 1, "eos_token_id": [2, 3]}
    r = resolve_sampling(SamplingParams(), cfg)
    assert not r.greedy
    assert (r.temperature, r.top_k, r.top_p, r.min_p, r.repetition_penalty) == \
        (0.6, 20, 0.9, 0.05, 1.1)


def test_resolve_missing_config_keys_use_hf_defaults():
    r = resolve_sampling(SamplingParams(), {"do_sample": True, "top_k": None})
    assert not r.greedy
    assert (r.temperature, r.top_k, r.top_p, r.min_p) == (1.0, 50, 1.0, 0.0)


def test_resolve_user_values_win_over_config():
    cfg = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20}
    r = resolve_sampling(SamplingParams(temperature=1.3, top_k=0, seed=7,
                                        presence_penalty=0.5), cfg)
    assert (r.temperature, r.top_k, r.top_p, r.seed, r.presence_penalty) == \
        (1.3, 0, 0.9, 7, 0.5)


def test_resolve_user_sampling_value_enables_sampling_without_do_sample():
    assert not resolve_sampling(SamplingParams(temperature=0.8), {}).greedy
    assert not resolve_sampling(SamplingParams(top_p=0.9), {"do_sample": False}).greedy
    # Penalties and seed alone do not switch greedy decoding off.
    assert resolve_sampling(SamplingParams(repetition_penalty=1.2, seed=3), {}).greedy


def test_resolve_explicit_greedy_and_zero_temperature():
    cfg = {"do_sample": True, "temperature": 0.6}
    assert resolve_sampling(SamplingParams(greedy=True), cfg).greedy
    assert resolve_sampling(SamplingParams(temperature=0.0), cfg).greedy
    assert resolve_sampling(SamplingParams(), {"do_sample": True, "temperature": 0}).greedy


def test_asked_for_greedy_is_the_argmax_without_the_configs_penalty():
    cfg = {"do_sample": True, "temperature": 0.7, "repetition_penalty": 1.1}
    for params in (SamplingParams(greedy=True), SamplingParams(temperature=0.0)):
        r = resolve_sampling(params, cfg)
        assert r.greedy and r.repetition_penalty == 1.0 and r.presence_penalty == 0.0
    # A penalty the user sets explicitly still applies.
    assert resolve_sampling(SamplingParams(greedy=True, repetition_penalty=1.2), cfg).repetition_penalty == 1.2
    # Greedy because the model's own config does not sample: the config's penalty is the model's default.
    assert resolve_sampling(SamplingParams(), {"repetition_penalty": 1.1}).repetition_penalty == 1.1
    # Sampling keeps the config's penalty.
    assert resolve_sampling(SamplingParams(), cfg).repetition_penalty == 1.1


def test_resolve_none_params_means_defaults():
    assert resolve_sampling(None, None).greedy


@pytest.mark.parametrize("params, cfg, message", [
    (SamplingParams(temperature=-0.1), {}, "temperature"),
    (SamplingParams(top_p=0.0), {}, "top_p"),
    (SamplingParams(top_p=1.01), {}, "top_p"),
    (SamplingParams(top_k=-1), {}, "top_k"),
    (SamplingParams(top_k=2.5), {}, "top_k"),
    (SamplingParams(min_p=1.0), {}, "min_p"),
    (SamplingParams(min_p=-0.1), {}, "min_p"),
    (SamplingParams(repetition_penalty=0.0), {}, "repetition_penalty"),
    (SamplingParams(temperature=float("nan")), {}, "temperature"),
    (SamplingParams(seed=-1), {}, "seed"),
    (SamplingParams(), {"temperature": -1}, "generation_config.json"),
    (SamplingParams(), {"top_p": "0.9"}, "top_p"),
    (SamplingParams(), {"top_k": True}, "top_k"),
])
def test_resolve_validation_errors(params, cfg, message):
    with pytest.raises(ValueError, match=message):
        resolve_sampling(params, cfg)


def test_resolve_accepts_integral_float_top_k_and_boundaries():
    r = resolve_sampling(SamplingParams(top_k=40.0, top_p=1.0, min_p=0.0, temperature=0.0), {})
    assert r.top_k == 40 and isinstance(r.top_k, int)


# ---------------------------------------------------------------- masks

def test_top_k_mask():
    logits = np.array([1.0, 5.0, 3.0, 2.0, 4.0], dtype=np.float32)
    out = apply_top_k(logits, 2)
    assert kept(out) == [1, 4]
    assert out[1] == 5.0 and out[4] == 4.0          # kept values unchanged
    assert out.dtype == np.float32
    assert kept(apply_top_k(logits, 0)) == [0, 1, 2, 3, 4]
    assert kept(apply_top_k(logits, 99)) == [0, 1, 2, 3, 4]
    assert logits.tolist() == [1.0, 5.0, 3.0, 2.0, 4.0]  # input untouched


def test_top_k_keeps_ties_at_the_edge_like_hf():
    assert kept(apply_top_k(np.array([1.0, 3.0, 3.0, 2.0]), 1)) == [1, 2]


def test_top_p_mask():
    logits = log_probs(0.5, 0.3, 0.15, 0.05)
    assert kept(apply_top_p(logits, 0.01)) == [0]        # at least one token
    assert kept(apply_top_p(logits, 0.45)) == [0]
    assert kept(apply_top_p(logits, 0.7)) == [0, 1]      # 0.5 + 0.3 reaches 0.7
    assert kept(apply_top_p(logits, 0.85)) == [0, 1, 2]
    assert kept(apply_top_p(logits, 0.99)) == [0, 1, 2, 3]
    assert kept(apply_top_p(logits, 1.0)) == [0, 1, 2, 3]


def test_top_p_order_independent_of_position():
    logits = log_probs(0.05, 0.15, 0.5, 0.3)
    assert kept(apply_top_p(logits, 0.7)) == [2, 3]


def reference_top_p(logits: np.ndarray, p: float) -> list[int]:
    """HF's TopPLogitsWarper, literally: sort ascending, drop cumulative mass <= 1 - p."""
    probs = softmax(logits)
    order = np.argsort(probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    remove = cumulative <= 1 - p
    remove[-1] = False
    return sorted(order[~remove].tolist())


@pytest.mark.parametrize("scale", [0.5, 3.0, 8.0])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.97])
def test_top_p_matches_hf_reference_on_a_big_vocab(scale, p):
    rng = np.random.default_rng(int(scale * 100 + p * 1000))
    logits = (rng.standard_normal(6000) * scale).astype(np.float32)
    assert kept(apply_top_p(logits, p)) == reference_top_p(logits, p)


def test_nucleus_indices_with_candidates_takes_the_shorter_prefix():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    assert nucleus_indices(probs, 0.9, np.array([0, 1])).tolist() == [0, 1]
    assert nucleus_indices(probs, 0.6, np.array([2, 0, 1])).tolist() == [0, 1]
    assert nucleus_indices(probs, 0.9).tolist() == [0, 1, 2]


def test_min_p_mask():
    logits = log_probs(0.5, 0.3, 0.15, 0.05)
    assert kept(apply_min_p(logits, 0.2)) == [0, 1, 2]    # threshold 0.1
    assert kept(apply_min_p(logits, 0.5)) == [0, 1]       # threshold 0.25
    assert kept(apply_min_p(logits, 0.99)) == [0]
    assert kept(apply_min_p(logits, 0.0)) == [0, 1, 2, 3]


# ---------------------------------------------------------------- penalties

def test_repetition_penalty_divides_positive_multiplies_negative():
    logits = np.array([2.0, -2.0, 1.0, 0.5], dtype=np.float32)
    out = apply_penalties(logits, [0, 1, 1], repetition_penalty=2.0)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 0.5])
    assert logits.tolist() == [2.0, -2.0, 1.0, 0.5]


def test_presence_penalty_subtracts_once_per_seen_token():
    logits = np.array([2.0, -2.0, 1.0, 0.5], dtype=np.float32)
    out = apply_penalties(logits, np.array([0, 1, 1, 1]), presence_penalty=0.5)
    np.testing.assert_allclose(out, [1.5, -2.5, 1.0, 0.5])
    both = apply_penalties(logits, [3], repetition_penalty=2.0, presence_penalty=1.0)
    np.testing.assert_allclose(both, [2.0, -2.0, 1.0, -0.75])


def test_penalty_rejects_out_of_range_history():
    with pytest.raises(ValueError, match="outside"):
        apply_penalties(np.zeros(4, np.float32), [4], repetition_penalty=1.5)
    with pytest.raises(ValueError, match="outside"):
        apply_penalties(np.zeros(4, np.float32), [-1], repetition_penalty=1.5)


def test_greedy_is_argmax_and_penalty_changes_it():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    assert Sampler(settings(greedy=True)).sample(logits, [0, 1]) == 1
    penalised = Sampler(settings(greedy=True, repetition_penalty=1.2))
    assert penalised.sample(logits, [0, 1]) == 2           # 3.0 / 1.2 = 2.5 < 2.9
    assert penalised.sample(logits, []) == 1               # nothing seen, nothing penalised
    assert logits.tolist() == pytest.approx([0.1, 3.0, 2.9, -1.0])


def test_greedy_on_big_random_logits():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(49152).astype(np.float32)
    assert Sampler(settings(greedy=True)).sample(logits, ()) == int(np.argmax(logits))


# ---------------------------------------------------------------- sampling distribution

def test_same_seed_same_sequence_different_seed_different():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(1000).astype(np.float32)

    def run(seed):
        s = Sampler(settings(seed=seed, temperature=1.5, top_p=0.95))
        return [s.sample(logits, ()) for _ in range(50)]

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_frequencies_match_softmax_with_temperature():
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0], dtype=np.float32)
    t = 0.7
    s = Sampler(settings(temperature=t, seed=2024))
    n = 20000
    counts = np.bincount([s.sample(logits, ()) for _ in range(n)], minlength=8)
    expected = softmax(logits / t)
    # 7 degrees of freedom: the 99.9% quantile of chi-square is 24.3.
    assert chi_square(counts, expected) < 24.3


def test_frequencies_follow_the_hf_warper_chain():
    """The fast sampler draws from exactly temperature -> top-k -> top-p -> min-p."""
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal(300) * 2).astype(np.float32)
    cfg = dict(temperature=0.8, top_k=40, top_p=0.9, min_p=0.02)
    z = logits / cfg["temperature"]
    z = apply_top_k(z, cfg["top_k"])
    z = apply_top_p(z, cfg["top_p"])
    z = apply_min_p(z, cfg["min_p"])
    expected = softmax(z)
    s = Sampler(settings(seed=99, **cfg))
    counts = np.bincount([s.sample(logits, ()) for _ in range(20000)], minlength=300)
    support = expected > 0
    assert counts[~support].sum() == 0
    dof = int(support.sum()) - 1
    assert chi_square(counts, expected) < dof + 5 * np.sqrt(2 * dof)


def test_penalties_feed_into_sampling():
    logits = np.array([1.0, 1.0], dtype=np.float32)
    s = Sampler(settings(presence_penalty=5.0, seed=1))
    draws = [s.sample(logits, [0]) for _ in range(200)]
    assert draws.count(1) > 190          # exp(-5) ~ 0.7% chance for token 0


def test_big_vocab_draw_matches_distribution():
    """49k tokens exercises the two-level (block) inverse CDF, with zero-weight tokens."""
    rng = np.random.default_rng(3)
    vocab = 49152
    logits = np.full(vocab, NEG_INF, dtype=np.float32)
    hot = rng.choice(vocab, size=24, replace=False)
    logits[hot] = rng.standard_normal(24).astype(np.float32)
    s = Sampler(settings(seed=8))
    draws = np.array([s.sample(logits, ()) for _ in range(5000)])
    assert set(draws.tolist()) <= set(hot.tolist())
    counts = np.bincount(draws, minlength=vocab)[hot]
    assert chi_square(counts, softmax(logits[hot])) < 23 + 5 * np.sqrt(46)


def test_big_vocab_full_distribution_binned():
    rng = np.random.default_rng(4)
    vocab = 49152
    logits = (rng.standard_normal(vocab) * 2).astype(np.float32)
    s = Sampler(settings(seed=9, temperature=0.9))
    draws = np.array([s.sample(logits, ()) for _ in range(6000)])
    bins = 16
    counts = np.bincount(draws * bins // vocab, minlength=bins)
    expected = softmax(logits / 0.9).reshape(bins, -1).sum(axis=1)
    assert chi_square(counts, expected) < 15 + 5 * np.sqrt(30)


def test_top_k_one_is_argmax_and_rng_still_reproducible():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal(5000).astype(np.float32)
    s = Sampler(settings(top_k=1))
    assert {s.sample(logits, ()) for _ in range(20)} == {int(np.argmax(logits))}


def test_sampler_does_not_modify_logits_and_checks_input():
    logits = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    s = Sampler(settings(repetition_penalty=1.5, presence_penalty=1.0, top_k=2, top_p=0.9,
                         min_p=0.1, temperature=0.5))
    s.sample(logits, [0, 1, 2])
    assert logits.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="1-D"):
        s.sample(np.zeros((2, 3), np.float32), ())
    with pytest.raises(ValueError, match="finite"):
        Sampler(settings()).sample(np.full(4, NEG_INF, np.float32), ())


def test_sampler_is_fast_on_a_49k_vocab():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(49152) * 3).astype(np.float32)
    history = rng.integers(0, 49152, 4000)
    configs = [settings(greedy=True, repetition_penalty=1.1),
               settings(temperature=0.7, top_k=50, top_p=0.9, repetition_penalty=1.1),
               settings(temperature=0.7, top_p=0.95),
               settings(temperature=0.7, min_p=0.05),
               settings(temperature=1.0)]
    for cfg in configs:
        s = Sampler(cfg)
        s.sample(logits, history)
        start = time.perf_counter()
        for _ in range(50):
            s.sample(logits, history)
        per_call = (time.perf_counter() - start) / 50
        assert per_call < 0.005, (cfg, per_call)   # ~0.1-0.4 ms on a laptop core


def test_frequency_penalty_subtracts_once_per_occurrence():
    from engine.text.sampling import apply_frequency_penalty
    logits = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    out = apply_frequency_penalty(logits, np.array([1, 1, 1, 3]), 0.5)
    assert out.tolist() == [1.0, 0.5, 3.0, 3.5]
    assert logits.tolist() == [1.0, 2.0, 3.0, 4.0]
    r = resolve_sampling(SamplingParams(frequency_penalty=2.0, greedy=True), {})
    # Greedy picks id 3 without the penalty; three occurrences of 3 push it below id 2.
    assert Sampler(r).sample(logits, np.array([3, 3, 3])) == 2
    with pytest.raises(ValueError, match="frequency_penalty"):
        resolve_sampling(SamplingParams(frequency_penalty=float("nan")), {})


# ---------------------------------------------------------------- logit bias and logprobs

def test_logit_bias_adds_to_the_logits_and_minus_100_bans():
    logits = np.array([3.0, 2.5, 0.0, -1.0], np.float32)
    greedy = resolve_sampling(SamplingParams(greedy=True, logit_bias={0: -100}))
    assert Sampler(greedy).sample(logits) == 1
    assert Sampler(resolve_sampling(SamplingParams(greedy=True, logit_bias={3: 5.0}))).sample(logits) == 3
    # a ban holds for sampling too, even at a high temperature and with a bias that would outweigh 100
    banned = Sampler(settings(logit_bias=((0, -100.0), (1, -100.0)), temperature=50.0))
    assert {banned.sample(logits) for _ in range(300)} == {2, 3}
    assert logits.tolist() == [3.0, 2.5, 0.0, -1.0]        # never modified
    with pytest.raises(ValueError, match="vocabulary"):
        Sampler(resolve_sampling(SamplingParams(greedy=True, logit_bias={4: 1.0}))).sample(logits)
    for bad in ({0: 101.0}, {-1: 1.0}, {0: float("nan")}, {0: "x"}):
        with pytest.raises(ValueError, match="logit_bias"):
            resolve_sampling(SamplingParams(logit_bias=bad))


def test_token_logprob_is_the_log_softmax_and_its_top():
    from engine.text.logprobs import token_logprob
    logits = np.array([1.0, 3.0, 2.0, 3.0, -np.inf], np.float32)
    entry = token_logprob(logits, 2, 3)
    with np.errstate(divide="ignore"):      # the -inf logit's probability is 0
        want = np.log(softmax(logits))
    assert entry.token_id == 2 and entry.logprob == pytest.approx(want[2])
    assert [t for t, _ in entry.top] == [1, 3, 2]           # ties by the lower id
    assert [lp for _, lp in entry.top] == pytest.approx([want[1], want[3], want[2]])
    assert token_logprob(logits, 4, 0).logprob == -9999.0 and token_logprob(logits, 4, 0).top == []
    assert len(token_logprob(logits, 0, 20).top) == 5


def test_token_bytes_of_byte_level_and_sentencepiece_tokenizers():
    from tests.support.tiny_gguf import trained_tokenizer
    from engine.text.logprobs import TokenBytes
    tok = trained_tokenizer()
    token_bytes = TokenBytes(tok)
    ids = tok.encode(" héllo wörld", add_special_tokens=False).ids
    assert b"".join(token_bytes(i) for i in ids) == " héllo wörld".encode()
    assert token_bytes(0) == tok.id_to_token(0).encode()       # a special token: its content
    from tokenizers import Tokenizer, decoders, models
    spm = Tokenizer(models.BPE({"<0xC3>": 0, "<0xA9>": 1, "▁the": 2}, [], byte_fallback=True))
    spm.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback()])
    token_bytes = TokenBytes(spm)
    assert [token_bytes(i) for i in range(3)] == [b"\xc3", b"\xa9", b" the"]
    assert token_bytes.text(0) == "\\xc3"
