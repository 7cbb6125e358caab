"""Token-exact conversation history: the token ids a session holds are the source of truth.

Re-rendering a conversation as text and re-tokenizing it each turn does not give back the ids
the session computed: a model's own reply is often not the canonical tokenization of its text
(odd characters, a reply stopped mid-word or after a partial UTF-8 character, a stop string cut
off, a reply cut at the token limit). Every such turn would force a re-prefill of everything
after the first difference.

`TokenHistory` keeps the ids the session holds (`ids`), the template text they stand for
(`text`), and marks: pairs (tokens, chars) where `ids[:tokens]` stands exactly for
`text[:chars]`. A new turn renders the whole conversation with the chat template (so any
template works), finds the longest mark whose text is a prefix of that rendering, keeps the
held ids up to it and tokenizes only the rest: the new user turn and the template's glue
(what transformers' incremental templating and llama.cpp's token-level prefix matching do).
Edit-and-resend and regenerate diverge from the held text at some message: the ids up to the
last mark before the divergence stay, only the rest is tokenized.

Marks sit at the end of each prompt and after every token of a reply at which its text is
complete (no UTF-8 character pending), so a reply the caller kept only in part (cancelled,
stopped) still matches up to where it was kept.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tokenizers import Tokenizer

from engine.text.detokenize import PROMPT_CONTEXT_TOKENS, IncrementalDecoder

# Bounds on what a manifest may claim (untrusted input): a history is never longer than this.
MAX_HISTORY_TOKENS = 1 << 22


class HistoryFormatError(ValueError):
    """A saved token history is malformed; the message says how."""


def common_text_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n            # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class TokenHistory:
    """Immutable: every turn makes a new one, so a reference is a snapshot (for saving)."""
    ids: tuple[int, ...] = ()
    text: str = ""
    marks: tuple[tuple[int, int], ...] = ((0, 0),)   # (tokens, chars), both increasing

    def match(self, rendered: str) -> tuple[int, int]:
        """The longest mark (tokens, chars) whose text is a prefix of `rendered`."""
        lcp = common_text_prefix(self.text, rendered)
        chars = [c for _, c in self.marks]
        i = bisect.bisect_right(chars, lcp) - 1
        return self.marks[max(i, 0)]

    def extend(self, keep: tuple[int, int], new_ids: Sequence[int], new_text: str,
               inner_marks: Sequence[tuple[int, int]] = ()) -> "TokenHistory":
        """The history up to mark `keep`, then `new_ids` standing for `new_text`. `inner_marks`
        are (tokens, chars) offsets inside the new part where it is exact too."""
        n, c = keep
        marks = [m for m in self.marks if m[0] <= n and m[1] <= c]
        base_n, base_c = n, c
        for dn, dc in inner_marks:
            if 0 < dn <= len(new_ids) and 0 <= dc <= len(new_text):
                marks.append((base_n + dn, base_c + dc))
        marks.append((base_n + len(new_ids), base_c + len(new_text)))
        return TokenHistory(ids=self.ids[:n] + tuple(int(t) for t in new_ids),
                            text=self.text[:c] + new_text, marks=_clean_marks(marks))

    # ---- persistence (a manifest field) ------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "text": self.text, "marks": [list(m) for m in self.marks]}

    @classmethod
    def from_json(cls, data: Any, vocab_size: int) -> "TokenHistory":
        """Validates everything (a manifest is untrusted); HistoryFormatError names the problem."""
        if not isinstance(data, dict):
            raise HistoryFormatError("the token history is not an object")
        ids, text, marks = data.get("ids"), data.get("text"), data.get("marks")
        if not isinstance(ids, list) or not isinstance(text, str) or not isinstance(marks, list):
            raise HistoryFormatError("the token history lacks ids, text or marks")
        if len(ids) > MAX_HISTORY_TOKENS or len(marks) > len(ids) + 1:
            raise HistoryFormatError("the token history is too long")
        if not all(type(t) is int and 0 <= t < vocab_size for t in ids):
            raise HistoryFormatError("the token history has ids outside the vocabulary")
        out: list[tuple[int, int]] = []
        for m in marks:
            if not (isinstance(m, list) and len(m) == 2 and all(type(v) is int for v in m)):
                raise HistoryFormatError("a token history mark is not a pair of integers")
            n, c = m
            if not (0 <= n <= len(ids) and 0 <= c <= len(text)) or (out and (n <= out[-1][0] or c < out[-1][1])):
                raise HistoryFormatError("the token history's marks are out of order or range")
            out.append((n, c))
        if not out or out[0] != (0, 0):
            raise HistoryFormatError("the token history's marks do not start at 0")
        return cls(ids=tuple(ids), text=text, marks=tuple(out))


def _clean_marks(marks: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for n, c in sorted(set(marks)):
        if out and (n == out[-1][0] or c < out[-1][1]):
            continue
        out.append((n, c))
    if not out or out[0] != (0, 0):
        out.insert(0, (0, 0))
    return tuple(out)


@dataclass
class PromptPlan:
    """The prompt for one turn and how it was made."""
    ids: list[int]
    text: str                        # the template rendering it stands for
    keep: tuple[int, int]            # the history mark it starts from
    suffix_ids: list[int] = field(default_factory=list)
    exact: bool = True               # False: the suffix did not round-trip; fully re-tokenized


def plan_prompt(history: TokenHistory, rendered: str,
                encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]) -> PromptPlan:
    """Held ids up to the longest matching mark, plus the tokenization of the rest of `rendered`.

    The rest is tokenized on its own, which for byte-level BPE tokenizers always decodes back to
    the same text. A tokenizer that changes text at the start of a piece (SentencePiece's dummy
    prefix space) would not: then the whole rendering is tokenized as one (the canonical prompt,
    which the caller's token-level prefix matching still reuses as far as it agrees).
    """
    keep = history.match(rendered)
    n, c = keep
    suffix = rendered[c:]
    suffix_ids = encode(suffix) if suffix else []
    if n and suffix and decode(suffix_ids) != suffix:
        ids = encode(rendered)
        return PromptPlan(ids=ids, text=rendered, keep=(0, 0), suffix_ids=ids, exact=False)
    return PromptPlan(ids=list(history.ids[:n]) + suffix_ids, text=rendered, keep=keep,
                      suffix_ids=suffix_ids)


def reply_marks(tokenizer: Tokenizer, prompt_tail: Sequence[int], reply_ids: Sequence[int]
                ) -> tuple[str, list[tuple[int, int]]]:
    """The text of `reply_ids` as the generator streamed it (special tokens add no text, as in
    `GenerationResult.text`), and the (tokens, chars) offsets inside it at which the text of the
    first tokens is settled: it is a prefix of the whole text (no character still being built)."""
    decoder = IncrementalDecoder(tokenizer, prompt_tail=prompt_tail)
    pieces: list[str] = []
    chars = 0
    marks: list[tuple[int, int]] = []
    held: list[int] = []     # positions where the decoder was waiting for more bytes
    for i, token in enumerate(reply_ids, start=1):
        piece = decoder.push(int(token))
        pieces.append(piece)
        chars += len(piece)
        if decoder.pending:
            held.append(i)
        else:
            marks.append((i, chars))
    pieces.append(decoder.flush())
    text = "".join(pieces)
    if held:
        # Bytes that never become a character (a random reply, one cut mid-character) decode to
        # U+FFFD for good: the prefix there is settled too when its decoding starts the text.
        specials = decoder.special_ids
        tail = [int(t) for t in prompt_tail][-PROMPT_CONTEXT_TOKENS:]
        base = tokenizer.decode(tail, skip_special_tokens=False)
        for j in held:
            ids = tail + [int(t) for t in reply_ids[:j] if int(t) not in specials]
            decoded = tokenizer.decode(ids, skip_special_tokens=False)
            if decoded.startswith(base) and text.startswith(decoded[len(base):]):
                marks.append((j, len(decoded) - len(base)))
        marks.sort()
    return text, marks
