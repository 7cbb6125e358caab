"""Turning a stream of token ids into a stream of text, safely.

`IncrementalDecoder` emits text as tokens arrive without ever emitting broken UTF-8 and
without losing leading spaces; `StopStringMatcher` cuts the stream at a stop string even when
the stop string is split across chunks.

Why not just `tokenizer.decode([token_id])` per token?
  * A multi-byte character is often split over several tokens (byte-level BPE pieces,
    SentencePiece `<0xE4>` byte-fallback tokens). Each piece alone decodes to U+FFFD.
  * SentencePiece / Metaspace decoders strip the leading space of the *first* token they see,
    so "▁world" decodes to "world" on its own but to " world" after other text.

The prefix-offset technique (vLLM's incremental detokenizer, HF's TextStreamer) handles both:
keep a small window of recent ids; decode the window, and decode the window without the new ids
(the "prefix"); the new text is what the first has beyond the second. The window always starts
with already-emitted tokens, so the decoder never sees a new token in first position and never
strips its space. While the decoded window ends with U+FFFD (an incomplete byte sequence) we
emit nothing and wait for the next token. For the very first generated token, the left context
is the tail of the prompt: pass it as `prompt_tail`.

U+FFFD never reaches the stream: it is what bytes that never make a character decode to (a reply
cut at the token limit inside an emoji, a model that starts a character and goes on with
another), and a half character is no text. The incomplete tail at the end of generation and
such orphan bytes inside it are dropped; a model writing the replacement character itself is
indistinguishable from them and loses it too.
"""
from __future__ import annotations

from typing import Sequence

from tokenizers import Tokenizer

REPLACEMENT_CHAR = "\ufffd"

# How many prompt tokens to keep as left context (vLLM uses 5 before the read offset).
PROMPT_CONTEXT_TOKENS = 5


class IncrementalDecoder:
    """Streams the text of generated token ids, one id at a time.

    `prompt_tail`: the last few prompt token ids (more are fine; only the last
    `PROMPT_CONTEXT_TOKENS` are used). They are context only, never emitted. Special tokens in
    it are kept as context, which is what preserves the first generated token's leading space
    when the prompt ends with a special token (e.g. `<|im_start|>assistant\\n` or `[/INST]`).

    The concatenation of everything `push` and `flush` return equals the text the generated
    ids add after the prompt, `decode(tail + ids)` minus `decode(tail)` (decoded keeping
    special tokens in the tail), less its U+FFFD characters (broken bytes, see above). For
    byte-level BPE that is just `decode(ids)`. Without a prompt tail it is `decode(ids)`
    exactly, including a SentencePiece tokenizer's stripping of the first token's space.

    With `skip_special_tokens` (the default), generated special tokens (EOS, `<|im_end|>`, ...)
    produce no text, like `tokenizer.decode(ids, skip_special_tokens=True)`, except those named in
    `keep_special` (a tool-call format's markers, such as Mistral's `[TOOL_CALLS]`).
    """

    def __init__(self, tokenizer: Tokenizer, prompt_tail: Sequence[int] = (), *,
                 skip_special_tokens: bool = True, keep_special: Sequence[str] = ()):
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._special_ids = frozenset(
            token_id for token_id, added in tokenizer.get_added_tokens_decoder().items()
            if added.special and added.content not in keep_special)
        tail = list(prompt_tail)[-PROMPT_CONTEXT_TOKENS:] if PROMPT_CONTEXT_TOKENS else []
        self._ids: list[int] = [int(t) for t in tail]
        # _ids[_prefix:_read] were already emitted (context); _ids[_read:] are pending.
        self._prefix = 0
        self._read = len(self._ids)
        self._prefix_text = self._decode(self._ids)

    def _decode(self, ids: Sequence[int]) -> str:
        # Specials are decoded (not skipped) so that context specials keep their place at the
        # start of the window; generated specials never enter the window when skipping.
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def push(self, token_id: int) -> str:
        """Add one generated id; return the text it completes (often "", never broken UTF-8)."""
        token_id = int(token_id)
        if self._skip_special and token_id in self._special_ids:
            return ""
        self._ids.append(token_id)
        text = self._decode(self._ids[self._prefix:])
        if len(text) <= len(self._prefix_text) or text.endswith(REPLACEMENT_CHAR):
            return ""   # nothing new yet, or a character still missing bytes: hold back
        return self._emit(text)

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    @property
    def pending(self) -> bool:
        """Some pushed ids have not produced their text yet (a character still missing bytes)."""
        return self._read < len(self._ids)

    def flush(self) -> str:
        """At the end of generation: the complete characters still held back; the bytes of a
        character that never completed are dropped (a reply cut inside an emoji ends before it)."""
        if self._read == len(self._ids):
            return ""
        text = self._decode(self._ids[self._prefix:])
        return self._emit(text) if len(text) > len(self._prefix_text) else self._advance("")

    def _emit(self, text: str) -> str:
        return self._advance(text[len(self._prefix_text):].replace(REPLACEMENT_CHAR, ""))

    def _advance(self, new_text: str) -> str:
        # The tokens just emitted become the next window's left context; drop older ones.
        self._ids = self._ids[self._read:]
        self._prefix, self._read = 0, len(self._ids)
        self._prefix_text = self._decode(self._ids)
        return new_text


class StopStringMatcher:
    """Cuts a text stream at the first stop string, across chunk boundaries.

    `feed(chunk)` returns `(safe_text, stopped)`: the text that can be shown now, and whether a
    stop string has matched. Text that could still become the start of a stop string is held
    back until the next chunk decides it; the stop string and everything after it are never
    returned. `flush()` returns the held-back text at the end of the stream (no stop matched).
    """

    def __init__(self, stop: Sequence[str] | None):
        self.stops = [s for s in (stop or ()) if s]   # an empty stop string would match anywhere
        self.matched: str | None = None               # the stop string that matched, if any
        self._held = ""
        self._longest = max((len(s) for s in self.stops), default=0)

    @property
    def stopped(self) -> bool:
        return self.matched is not None

    def feed(self, text: str) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        if not self.stops:
            return text, False
        buffer = self._held + text
        # Earliest complete match wins (on a tie, the longer stop string).
        best: tuple[int, int, str] | None = None
        for s in self.stops:
            i = buffer.find(s)
            if i >= 0 and (best is None or (i, -len(s)) < (best[0], best[1])):
                best = (i, -len(s), s)
        if best is not None:
            self.matched = best[2]
            self._held = ""
            return buffer[:best[0]], True
        hold = self._partial_suffix(buffer)
        self._held = buffer[len(buffer) - hold:] if hold else ""
        return buffer[:len(buffer) - hold], False

    def _partial_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of `buffer` that is a proper prefix of a stop string."""
        for n in range(min(self._longest - 1, len(buffer)), 0, -1):
            tail = buffer[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0

    def flush(self) -> str:
        held, self._held = self._held, ""
        return "" if self.stopped else held
