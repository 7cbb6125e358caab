"""Log-probabilities of sampled tokens, and each token's bytes, for OpenAI's `logprobs`.

The log-probabilities are those of the model itself: the log-softmax of its raw logits, before
temperature, penalties, logit bias or truncation (top-k/top-p/min-p) shape what is drawn from.
That is vLLM's default (`raw_logprobs`); they say how likely the model found each token, and
they are the same whatever the sampling settings.
"""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache

import numpy as np
from tokenizers import Tokenizer

from engine.api import TokenLogprob
from engine.text.sampling import top_k_ids

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")     # SentencePiece's byte fallback
UNLIKELY = -9999.0     # OpenAI's value for a token too unlikely to have one (a -inf logit): JSON has no -inf


def _finite(logprob: float) -> float:
    return logprob if logprob >= UNLIKELY else UNLIKELY      # NaN too


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """`token`'s log-probability under `logits` (vocab,) and the `top` most likely ids, best first
    (ties by lower id); never below `UNLIKELY`. About 0.2 ms at 49k ids: float32 sums in float64,
    and the top from the sampler's narrowed partition, not a sort of the vocabulary."""
    z = np.asarray(logits, dtype=np.float32)
    peak = float(z.max())
    log_total = peak + math.log(float(np.exp(z - peak).sum(dtype=np.float64)))
    best: list[tuple[int, float]] = []
    if top > 0:
        ids = top_k_ids(z, min(top, z.shape[0]))[0]          # every id tied at the edge too
        ids = ids[np.lexsort((ids, -z[ids]))][:top]
        best = [(int(i), _finite(float(z[i]) - log_total)) for i in ids]
    return TokenLogprob(int(token), _finite(float(z[token]) - log_total), best)


@lru_cache(maxsize=1)
def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the printable character standing for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class TokenBytes:
    """A tokenizer's tokens as the bytes they stand for in the text (byte-level BPE: GPT-2's
    alphabet; SentencePiece: `▁` is a space and `<0xNN>` one byte; added tokens: their content)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
        self.byte_level = "ByteLevel" in json.dumps(decoder)
        self.added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}

    def __call__(self, token_id: int) -> bytes:
        if token_id in self.added:
            return self.added[token_id].encode()
        piece = self.tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if self.byte_level:
            table = _gpt2_byte_decoder()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
            return piece.encode()
        byte = _BYTE_TOKEN.fullmatch(piece)
        if byte:
            return bytes([int(byte.group(1), 16)])
        return piece.replace("\u2581", " ").encode()

    def text(self, token_id: int) -> str:
        """The token as text; bytes that are part of a character only (a split UTF-8 sequence)
        are written as `\\xNN` escapes, as OpenAI's API writes them."""
        return self(token_id).decode("utf-8", "backslashreplace")
