"""Picking the next token from the model's logits.

One small module, in the spirit of nanoGPT's `generate`: resolve the user's `SamplingParams`
against the model's `generation_config.json`, then, once per decoded token:

    logits --(logit bias)--(repetition / presence penalty over the history)--> penalised logits
           --greedy?--> argmax
           --/ temperature --> top-k --> top-p (nucleus) --> min-p --> renormalise --> draw

The order of the warpers is Hugging Face's (temperature, top-k, top-p, min-p), so a model behaves
as its `generation_config.json` intends. The masking steps are small pure functions
(`apply_top_k`, `apply_top_p`, `apply_min_p`) that tests can check directly; `Sampler.sample`
uses the same helpers on a shrinking candidate set so that one call over a 49k vocabulary costs
well under a millisecond (no full sort unless nothing limits the nucleus).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from engine.api import SamplingParams

# Hugging Face `GenerationConfig` defaults, used when generation_config.json omits a key.
HF_DEFAULT_TEMPERATURE = 1.0
HF_DEFAULT_TOP_K = 50
HF_DEFAULT_TOP_P = 1.0
HF_DEFAULT_MIN_P = 0.0           # HF's default is None (disabled); 0.0 means the same here
HF_DEFAULT_REPETITION_PENALTY = 1.0
MAX_LOGIT_BIAS = 100.0           # OpenAI's range; a bias of -100 bans the token outright


# --------------------------------------------------------------------------------------------
# Resolving parameters
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedSampling:
    """Concrete sampling settings. `top_k == 0`, `top_p == 1`, `min_p == 0`,
    `repetition_penalty == 1` and `presence_penalty == 0` each mean "off"."""
    greedy: bool
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    seed: int | None
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()     # (token id, bias) pairs; -100 bans the token


def _number(value: Any, name: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} from {source} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} from {source} must be finite, got {number!r}")
    return number


def _integer(value: Any, name: str, source: str) -> int:
    number = _number(value, name, source)
    if number != int(number):
        raise ValueError(f"{name} from {source} must be a whole number, got {value!r}")
    return int(number)


def resolve_sampling(params: SamplingParams | None,
                     generation_config: Mapping[str, Any] | None = None) -> ResolvedSampling:
    """Merge the user's `params` over the model's `generation_config` (HF keys) and validate.

    Precedence, per field: the user's explicit (non-None) value, else generation_config.json's,
    else Hugging Face's default. Greedy decoding is used when the user asks for it
    (`greedy=True` or `temperature == 0`), or when the model's config does not enable sampling
    (`do_sample` false or absent) and the user set none of temperature/top_k/top_p/min_p.
    Asked-for greedy (`greedy=True` or `temperature == 0`) is the argmax of the model's logits:
    generation_config.json's repetition penalty does not apply, only one the user sets
    explicitly. Greedy by the model's own config keeps the config's penalty (HF applies it).
    Raises `ValueError` naming the bad field and its source.
    """
    params = params if params is not None else SamplingParams()
    config = dict(generation_config or {})

    def pick(field: str, default: Any) -> tuple[Any, str]:
        user = getattr(params, field)
        if user is not None:
            return user, "sampling parameters"
        if config.get(field) is not None:
            return config[field], "generation_config.json"
        return default, "defaults"

    value, src = pick("temperature", HF_DEFAULT_TEMPERATURE)
    temperature = _number(value, "temperature", src)
    if temperature < 0:
        raise ValueError(f"temperature from {src} must be >= 0, got {temperature}")

    value, src = pick("top_k", HF_DEFAULT_TOP_K)
    top_k = _integer(value, "top_k", src)
    if top_k < 0:
        raise ValueError(f"top_k from {src} must be >= 0 (0 disables it), got {top_k}")

    value, src = pick("top_p", HF_DEFAULT_TOP_P)
    top_p = _number(value, "top_p", src)
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p from {src} must be in (0, 1], got {top_p}")

    value, src = pick("min_p", HF_DEFAULT_MIN_P)
    min_p = _number(value, "min_p", src)
    if not 0.0 <= min_p < 1.0:
        raise ValueError(f"min_p from {src} must be in [0, 1), got {min_p}")

    asked_greedy = params.greedy or (params.temperature is not None and params.temperature == 0)
    if asked_greedy and params.repetition_penalty is None:
        value, src = 1.0, "greedy decoding"
    else:
        value, src = pick("repetition_penalty", HF_DEFAULT_REPETITION_PENALTY)
    repetition_penalty = _number(value, "repetition_penalty", src)
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty from {src} must be > 0 (1 disables it), "
                         f"got {repetition_penalty}")

    # Not an HF generation_config key (it is OpenAI's); only the user sets it.
    presence_penalty = 0.0
    if params.presence_penalty is not None:
        presence_penalty = _number(params.presence_penalty, "presence_penalty",
                                   "sampling parameters")

    # OpenAI's too; getattr: SamplingParams-like objects from older callers may lack the field.
    frequency_penalty = 0.0
    if getattr(params, "frequency_penalty", None) is not None:
        frequency_penalty = _number(params.frequency_penalty, "frequency_penalty", "sampling parameters")

    seed = params.seed
    if seed is not None:
        seed = _integer(seed, "seed", "sampling parameters")
        if seed < 0:
            raise ValueError(f"seed from sampling parameters must be >= 0, got {seed}")

    logit_bias = tuple((_integer(t, "logit_bias token id", "sampling parameters"),
                        _number(b, "logit_bias value", "sampling parameters"))
                       for t, b in (getattr(params, "logit_bias", None) or {}).items())
    for token, bias in logit_bias:
        if token < 0 or not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
            raise ValueError(f"logit_bias from sampling parameters maps token ids >= 0 to values in "
                             f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}], got {token}: {bias}")

    user_shaped = any(getattr(params, f) is not None
                      for f in ("temperature", "top_k", "top_p", "min_p"))
    do_sample = bool(config.get("do_sample", False))
    greedy = (params.greedy or temperature == 0.0 or (not do_sample and not user_shaped))

    return ResolvedSampling(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                            min_p=min_p, repetition_penalty=repetition_penalty,
                            presence_penalty=presence_penalty, seed=seed,
                            frequency_penalty=frequency_penalty, logit_bias=logit_bias)


# --------------------------------------------------------------------------------------------
# Pure building blocks (each returns new arrays; inputs are never modified)
# --------------------------------------------------------------------------------------------

def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax in float64 (-inf logits get probability 0)."""
    z: np.ndarray = np.asarray(logits, dtype=np.float64)
    z = z - z.max()
    np.exp(z, out=z)
    z /= z.sum()
    return z


def apply_penalties(logits: np.ndarray, history: Sequence[int] | np.ndarray,
                    repetition_penalty: float = 1.0, presence_penalty: float = 0.0) -> np.ndarray:
    """Penalise every token id that occurs in `history` (prompt + generated so far).

    Repetition penalty as in CTRL / Hugging Face: positive logits are divided by the penalty,
    negative ones multiplied (so a penalty > 1 always makes a seen token less likely).
    Presence penalty (OpenAI style) then subtracts a constant, once per distinct seen token.
    """
    out = np.array(logits, dtype=np.float32, copy=True)
    _penalise_inplace(out, _seen_ids(history, out.shape[0]), repetition_penalty,
                      presence_penalty)
    return out


def apply_frequency_penalty(logits: np.ndarray, history: Sequence[int] | np.ndarray,
                            frequency_penalty: float) -> np.ndarray:
    """OpenAI's frequency penalty: subtracts `frequency_penalty` times each id's count in `history`."""
    out = np.array(logits, dtype=np.float32, copy=True)
    h = np.asarray(history, dtype=np.int64)
    _seen_ids(h, out.shape[0])     # range check
    out -= frequency_penalty * np.bincount(h, minlength=out.shape[0]).astype(np.float32)
    return out


_TOPK_ROWS = 8


def top_k_threshold(logits: np.ndarray, k: int) -> float:
    """The k-th largest logit: top-k keeps every logit >= it (ties at the edge all stay, as HF).

    A partition of the whole vocabulary costs ~0.1-0.25 ms per token at 49k-152k ids, so it is
    narrowed first: view the logits as 8 rows and take each column's maximum (one vectorised
    pass); the k-th largest column maximum is a lower bound of the k-th largest logit (k columns
    reach it), so only the logits at or above it (at most ~8k of them) need partitioning."""
    return top_k_ids(logits, k)[1]


def top_k_ids(logits: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """(ascending ids of every logit >= the k-th largest, that k-th largest): top-k's survivors,
    as `np.flatnonzero(logits >= top_k_threshold(logits, k))`, from one pass over the vocabulary."""
    n = logits.shape[0]
    m = n // _TOPK_ROWS
    if m >= 4 * k:
        col_max = logits[:m * _TOPK_ROWS].reshape(_TOPK_ROWS, m).max(axis=0)
        # NaN anywhere: the full partition, which ranks it as numpy does.
        if not (np.isnan(col_max).any() or np.isnan(logits[m * _TOPK_ROWS:]).any()):
            bound = np.partition(col_max, m - k)[m - k]
            cand = np.flatnonzero(logits >= bound)
            if cand.shape[0] >= k:
                values = logits[cand]
                c = cand.shape[0]
                threshold = np.partition(values, c - k)[c - k]
                return cand[values >= threshold], float(threshold)
    threshold = np.partition(logits, n - k)[n - k]
    return np.flatnonzero(logits >= threshold), float(threshold)


def apply_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Mask (set to -inf) all but the `k` largest logits. `k == 0` or `k >= vocab` keeps all."""
    logits = np.asarray(logits)
    if k <= 0 or k >= logits.shape[0]:
        return logits.copy()
    return np.where(logits >= top_k_threshold(logits, k), logits, -np.inf).astype(logits.dtype)


def nucleus_indices(probs: np.ndarray, p: float, candidates: np.ndarray | None = None
                    ) -> np.ndarray:
    """Indices of the nucleus: the most probable tokens whose mass first reaches `p` of the
    total (always at least one), most probable first.

    `probs` may be unnormalised weights (the cut is taken at `p * probs.sum()`). `candidates`
    optionally restricts the search to a most-probable subset (e.g. what min-p kept); the cut
    still uses the full total, so the result is the shorter of the two prefixes. Without
    `candidates` the search grows a partial top-m (64, 256, ...) until its mass reaches the
    cut, so a peaked distribution never pays for a full sort of the vocabulary.
    """
    n = probs.shape[0]
    cut = p * float(probs.sum(dtype=np.float64))
    if candidates is not None:
        order = candidates[np.argsort(-probs[candidates])]
        return order[:_nucleus_size(probs[order], cut)]
    m = min(n, 64)
    while True:
        head = np.argpartition(probs, n - m)[n - m:] if m < n else np.arange(n)
        head = head[np.argsort(-probs[head])]
        size = _nucleus_size(probs[head], cut)
        if size < m or m == n:
            return head[:size]
        m = min(n, m * 4)


def _nucleus_size(sorted_probs: np.ndarray, cut: float) -> int:
    """How many of these (descending) weights the nucleus keeps; all of them if their mass
    never reaches `cut`. Token i stays iff the mass strictly before it is < cut, which is HF's
    rule (drop the tail whose cumulative mass is <= 1 - top_p)."""
    cumulative = np.cumsum(sorted_probs, dtype=np.float64)
    first_reaching = int(np.searchsorted(cumulative, cut, side="left"))
    return min(first_reaching + 1, int(sorted_probs.shape[0]))


def apply_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    """Mask all logits outside the nucleus of mass `p` (top-p). `p >= 1` keeps all."""
    logits = np.asarray(logits)
    if p >= 1.0:
        return logits.copy()
    keep = nucleus_indices(softmax(logits), p)
    out = np.full_like(logits, -np.inf)
    out[keep] = logits[keep]
    return out


def apply_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Mask tokens whose probability is below `min_p` times the most likely token's. 0 keeps all."""
    logits = np.asarray(logits)
    if min_p <= 0.0:
        return logits.copy()
    probs = softmax(logits)
    return np.where(probs >= min_p * probs.max(), logits, -np.inf).astype(logits.dtype)


# --------------------------------------------------------------------------------------------
# The sampler
# --------------------------------------------------------------------------------------------

class Sampler:
    """Draws token ids from logits with one `ResolvedSampling` and its own seeded RNG.

    Each non-greedy `sample` consumes exactly one uniform draw, so the same seed, logits and
    history give the same token sequence. Greedy sampling never touches the RNG.
    """

    def __init__(self, settings: ResolvedSampling):
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)  # seed None -> fresh OS entropy
        self._bias_ids = np.array([t for t, _ in settings.logit_bias], dtype=np.int64)
        self._bias = np.array([-np.inf if b <= -MAX_LOGIT_BIAS else b for _, b in settings.logit_bias],
                              dtype=np.float32)

    def sample(self, logits: np.ndarray, history: Sequence[int] | np.ndarray = ()) -> int:
        """One token id from `logits` (vocab,), penalising the ids in `history` (prompt +
        generated so far; pass an int ndarray for speed). `logits` is never modified."""
        s = self.settings
        x = np.asarray(logits)
        if x.ndim != 1 or x.shape[0] == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {x.shape}")
        vocab = x.shape[0]

        # 0. Logit bias, added to the model's logits (OpenAI's order); -100 is a ban, not a nudge.
        if self._bias_ids.size:
            if self._bias_ids.max() >= vocab:
                raise ValueError(f"logit_bias names token id {int(self._bias_ids.max())}; the vocabulary "
                                 f"has {vocab}")
            x = np.array(x, dtype=np.float32, copy=True)
            x[self._bias_ids] += self._bias

        # 1. Penalties over every token seen so far (prompt + generated). One copy, if any.
        if (s.repetition_penalty != 1.0 or s.presence_penalty != 0.0) and len(history):
            x = np.array(x, dtype=np.float32, copy=True)
            _penalise_inplace(x, _seen_ids(history, vocab), s.repetition_penalty,
                              s.presence_penalty)
        if s.frequency_penalty != 0.0 and len(history):
            x = apply_frequency_penalty(x, history, s.frequency_penalty)

        # 2. Greedy: the argmax, no randomness.
        if s.greedy:
            return int(np.argmax(x))

        # 3. Top-k first, on the raw logits: dividing by T > 0 keeps the order, so the set is
        #    the same and everything after works on ~k values instead of the whole vocabulary.
        ids = None
        if 0 < s.top_k < vocab:
            ids = top_k_ids(x, s.top_k)[0]
            x = x[ids]

        # 4. Temperature, then unnormalised probabilities exp(z - max): the best token weighs
        #    exactly 1.0. float32 is plenty here; masses are summed in float64 below.
        w = np.divide(x, s.temperature, dtype=np.float32)
        peak = w.max()
        if not np.isfinite(peak):
            raise ValueError("logits have no finite maximum (all -inf, or NaN)")
        w -= peak
        np.exp(w, out=w)

        # 5. Top-p and min-p each keep a most-probable prefix; together, the shorter one.
        #    Min-p is a cheap threshold (p >= min_p * p_max, and p_max weighs 1.0), so it
        #    narrows what the nucleus search sorts. Top-p uses the post-top-k mass, as in HF.
        keep = None
        if s.min_p > 0.0:
            keep = np.flatnonzero(w >= s.min_p)
        if s.top_p < 1.0:
            keep = nucleus_indices(w, s.top_p, keep)

        # 6. Renormalise over what is left and draw with one uniform number (inverse CDF).
        j = _draw(w if keep is None else w[keep], self.rng.random())
        if keep is not None:
            j = int(keep[j])
        return int(ids[j]) if ids is not None else j


_BLOCK = 256


def _draw(weights: np.ndarray, u: float) -> int:
    """Index i with probability weights[i] / sum(weights), for a uniform u in [0, 1).

    Inverse CDF. A cumsum over 49k values is slow in numpy, so big arrays go in two levels:
    pick a block of 256 by its (vectorised) sum, then the token inside that block.
    """
    n = weights.shape[0]
    if n <= 4 * _BLOCK:
        cdf = np.cumsum(weights, dtype=np.float64)
        g = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    else:
        starts = np.arange(0, n, _BLOCK)
        block_cdf = np.cumsum(np.add.reduceat(weights, starts, dtype=np.float64))
        target = u * block_cdf[-1]
        b = min(int(np.searchsorted(block_cdf, target, side="right")), starts.shape[0] - 1)
        target -= block_cdf[b - 1] if b else 0.0
        inner = np.cumsum(weights[starts[b]:starts[b] + _BLOCK], dtype=np.float64)
        g = int(starts[b]) + min(int(np.searchsorted(inner, target, side="right")),
                                 inner.shape[0] - 1)
    # Rounding can land just past the end (u * total == total); clamp, and never return a
    # zero-weight token: step back to the nearest one with weight (the max weighs 1.0).
    g = min(g, int(n) - 1)
    while g > 0 and weights[g] == 0.0:
        g -= 1
    return g


def _seen_ids(history: Sequence[int] | np.ndarray, vocab: int) -> np.ndarray:
    """Distinct token ids in `history`, checked to lie in [0, vocab)."""
    h = np.asarray(history, dtype=np.int64)
    if h.min() < 0 or h.max() >= vocab:
        raise ValueError(f"history has token ids outside [0, {vocab}): "
                         f"{int(h.min())}..{int(h.max())}")
    seen = np.zeros(vocab, dtype=bool)   # a mask is ~10x faster than np.unique here
    seen[h] = True
    return np.flatnonzero(seen)


def _penalise_inplace(x: np.ndarray, seen: np.ndarray, repetition_penalty: float,
                      presence_penalty: float) -> None:
    if seen.size == 0:
        return
    values = x[seen]
    if repetition_penalty != 1.0:
        values = np.where(values > 0, values / repetition_penalty, values * repetition_penalty)
    if presence_penalty != 0.0:
        values = values - presence_penalty
    x[seen] = values
