"""engine.text.detokenize: incremental detokenization on real (in-memory) tokenizers, stop strings."""
from __future__ import annotations

import string

import json
import random

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from engine.text.detokenize import IncrementalDecoder, StopStringMatcher

FFFD = "\ufffd"

CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "def main():\n    return 42  # the answer\n",
    "for i in range(10):\n\tprint(i ** 2)",
    "numbers 12345 and 67890, then 3.14159",
    "你好世界，这是一个测试。",
    "emoji 🎉🚀 are fun 😀",
    "  multiple   spaces\tand tabs",
    "Café déjà vu — naïve façade",
] * 30

TRICKY = [
    "Hello world",
    "你好世界 🎉 and 日本語のテキスト",
    "emoji: 🎉🚀😀 👨‍👩‍👧 🇫🇷 🦀",          # ZWJ family, a flag, an emoji absent from the corpus
    "def f(x):\n    return x ** 2  # ok\n",
    "  two leading spaces and trailing  ",
    "Ünïcödé: e\u0301 ß Ω ش ñ — “quotes” …",
    "12345678901234567890",
    " a",
    "\n\n\t",
]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def byte_level() -> Tokenizer:
    """GPT-2 / SmolLM2-style byte-level BPE with a tiny vocab: multi-byte chars split up."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=350, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _with_byte_fallback_tokens(tok: Tokenizer) -> Tokenizer:
    """Add the 256 `<0xNN>` byte tokens to the vocab as ordinary (non-special) tokens."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    return Tokenizer.from_str(json.dumps(data))


def _sentencepiece_like(style: str) -> Tokenizer:
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if style == "metaspace":      # Mistral / newer Llama-style tokenizer.json
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Sequence([
            decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first")])
    else:                         # Llama-2 tokenizer.json: normalizer + Strip decoder
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([
            decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
            decoders.Strip(" ", 1, 0)])
    # A small alphabet: CJK and emoji are left to the byte-fallback tokens.
    # The alphabet is fixed (ASCII only) so that CJK and emoji always fall back to bytes; letting
    # the trainer pick the most frequent characters made that depend on hash-map order (flaky).
    alphabet = ["▁"] + sorted(set(string.ascii_letters + string.digits + string.punctuation))
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=len(alphabet), initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return _with_byte_fallback_tokens(tok)


@pytest.fixture(scope="module", params=["metaspace", "llama2"])
def sentencepiece(request) -> Tokenizer:
    return _sentencepiece_like(request.param)


def stream(tok: Tokenizer, ids, prompt_tail=(), **kw) -> list[str]:
    dec = IncrementalDecoder(tok, prompt_tail, **kw)
    chunks = [dec.push(i) for i in ids]
    chunks.append(dec.flush())
    return chunks


def assert_clean(chunks: list[str]) -> None:
    for c in chunks:
        assert FFFD not in c, chunks


# ---------------------------------------------------------------- byte-level BPE

def test_byte_level_tokenizer_really_splits_characters(byte_level):
    """Precondition: the test tokenizer splits multi-byte characters over several tokens."""
    ids = byte_level.encode("你好 🎉", add_special_tokens=False).ids
    assert len(ids) > 3
    assert any(FFFD in byte_level.decode([i]) for i in ids)


@pytest.mark.parametrize("text", TRICKY)
def test_byte_level_stream_equals_decode(byte_level, text):
    ids = byte_level.encode(text, add_special_tokens=False).ids
    tail = byte_level.encode("<|im_start|>assistant\n").ids
    chunks = stream(byte_level, ids, tail)
    assert_clean(chunks)
    assert "".join(chunks) == byte_level.decode(ids) == text
    assert chunks[-1] == ""       # nothing left for flush on complete text


def test_byte_level_emits_each_character_as_soon_as_complete(byte_level):
    ids = byte_level.encode("a🎉b", add_special_tokens=False).ids
    dec = IncrementalDecoder(byte_level)
    out = [dec.push(i) for i in ids]
    assert out[0] == "a"
    assert "".join(out) == "a🎉b"
    # The emoji's text appears exactly at the token that completes it.
    assert [c for c in out if c] == ["a", "🎉", "b"]


def test_byte_level_keeps_leading_space_of_first_token(byte_level):
    ids = byte_level.encode(" Hello world", add_special_tokens=False).ids
    tail = byte_level.encode("<|im_start|>assistant:").ids
    chunks = stream(byte_level, ids, tail)
    first = next(c for c in chunks if c)
    assert first.startswith(" ")
    assert "".join(chunks) == " Hello world"


def test_special_tokens_are_skipped_by_default(byte_level):
    end = byte_level.token_to_id("<|im_end|>")
    ids = byte_level.encode("Hi 🎉", add_special_tokens=False).ids
    gen = ids[:2] + [end] + ids[2:] + [end]
    chunks = stream(byte_level, gen)
    assert "".join(chunks) == byte_level.decode(gen, skip_special_tokens=True) == "Hi 🎉"
    assert "".join(stream(byte_level, gen, skip_special_tokens=False)) == \
        byte_level.decode(gen, skip_special_tokens=False)


def test_special_tokens_named_to_keep_keep_their_text(byte_level):
    """A tool-call format's marker may be a special token: its text stays in the reply."""
    start, end = byte_level.token_to_id("<|im_start|>"), byte_level.token_to_id("<|im_end|>")
    ids = byte_level.encode("Hi", add_special_tokens=False).ids
    dec = IncrementalDecoder(byte_level, keep_special=("<|im_start|>",))
    assert "".join(dec.push(i) for i in [start, *ids, end]) + dec.flush() == "<|im_start|>Hi"


def test_flush_drops_an_incomplete_tail(byte_level):
    """A reply cut (at the token limit) inside an emoji ends before it, not with U+FFFD."""
    ids = byte_level.encode("ok 🎉", add_special_tokens=False).ids
    cut = ids[:-1]                                 # the emoji's last byte never comes
    assert byte_level.decode(cut).endswith(FFFD)   # precondition: the cut is mid-character
    dec = IncrementalDecoder(byte_level)
    out = "".join(dec.push(i) for i in cut)
    assert dec.pending
    assert out + dec.flush() == "ok "
    assert dec.flush() == ""


def test_flush_keeps_complete_text_held_with_an_incomplete_tail(sentencepiece):
    """Byte-fallback pieces: a complete character and a broken one held together at the end."""
    ids = sentencepiece.encode("a 你🎉").ids
    cut = ids[:-2]                                 # 🎉 is four <0xNN> tokens; two of them come
    assert sentencepiece.decode(cut).endswith(FFFD)
    chunks = stream(sentencepiece, cut)
    assert_clean(chunks)
    assert "".join(chunks) == "a 你"


def test_orphan_bytes_inside_a_reply_are_dropped(byte_level):
    """A model that starts a character and goes on with another: its stray bytes give no U+FFFD."""
    emoji = byte_level.encode("🎉", add_special_tokens=False).ids
    assert len(emoji) > 1
    ids = (byte_level.encode("a", add_special_tokens=False).ids + emoji[:1]
           + byte_level.encode("b 你好", add_special_tokens=False).ids)
    assert FFFD in byte_level.decode(ids)          # precondition: the bytes are broken
    chunks = stream(byte_level, ids)
    assert_clean(chunks)
    assert "".join(chunks) == "ab 你好"


def test_decoder_output_is_independent_of_chunking_on_random_text(byte_level):
    rng = random.Random(0)
    alphabet = "ab c\n你好🎉🚀éß 1 2\t{}"
    for _ in range(30):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        ids = byte_level.encode(text, add_special_tokens=False).ids
        chunks = stream(byte_level, ids)
        assert_clean(chunks)
        assert "".join(chunks) == text


# ---------------------------------------------------------------- SentencePiece style

def test_sentencepiece_tokenizer_uses_byte_fallback(sentencepiece):
    tokens = sentencepiece.encode("你好 🎉").tokens
    assert "<0xE4>" in tokens and "<0xF0>" in tokens


@pytest.mark.parametrize("text", TRICKY)
def test_sentencepiece_stream_keeps_first_space_with_prompt_tail(sentencepiece, text):
    """The model's first token "▁Hello" means " Hello" after a prompt: the space is kept."""
    tail = sentencepiece.encode("Question: hi Answer:").ids
    ids = sentencepiece.encode(text).ids
    if text.startswith((" ", "\n")):
        # Leading whitespace is normalised differently by each style; the general contract:
        # the stream is exactly what the generated ids add to the prompt's text.
        chunks = stream(sentencepiece, ids, tail)
        assert_clean(chunks)
        prompt = sentencepiece.decode(tail)
        assert prompt + "".join(chunks) == sentencepiece.decode(tail + ids)
        return
    assert sentencepiece.id_to_token(ids[0]).startswith("▁")
    chunks = stream(sentencepiece, ids, tail)
    assert_clean(chunks)
    expected = " " + sentencepiece.decode(ids)
    assert "".join(chunks) == expected
    assert next(c for c in chunks if c).startswith(" ")
    # ... which is exactly what the generated ids add to the prompt's text.
    full = sentencepiece.decode(tail + ids)
    assert full == sentencepiece.decode(tail) + expected


def test_sentencepiece_first_space_kept_after_special_token(sentencepiece):
    """A prompt ending in a special token (BOS, <|im_start|>...) still gives left context."""
    bos = sentencepiece.token_to_id("<s>")
    ids = sentencepiece.encode("Hello 你好 🎉 world").ids
    chunks = stream(sentencepiece, ids, [bos])
    assert_clean(chunks)
    assert "".join(chunks) == " Hello 你好 🎉 world"


def test_sentencepiece_without_prompt_tail_matches_plain_decode(sentencepiece):
    ids = sentencepiece.encode("Hello 你好 🎉 world").ids
    chunks = stream(sentencepiece, ids)
    assert_clean(chunks)
    assert "".join(chunks) == sentencepiece.decode(ids) == "Hello 你好 🎉 world"


def test_sentencepiece_lone_space_tokens_are_not_lost(sentencepiece):
    ids = sentencepiece.encode("a 你 b  🎉").ids
    tail = sentencepiece.encode("x").ids
    assert "".join(stream(sentencepiece, ids, tail)) == " " + sentencepiece.decode(ids)


# ---------------------------------------------------------------- stop strings

def feed_all(matcher: StopStringMatcher, chunks) -> tuple[str, bool]:
    out, stopped = [], False
    for c in chunks:
        text, stopped = matcher.feed(c)
        out.append(text)
        if stopped:
            break
    if not stopped:
        out.append(matcher.flush())
    return "".join(out), stopped


def test_stop_in_one_chunk():
    m = StopStringMatcher(["<|user|>"])
    assert m.feed("Hello<|user|>more") == ("Hello", True)
    assert m.matched == "<|user|>"
    assert m.feed("anything") == ("", True)
    assert m.flush() == ""


def test_stop_split_across_chunks():
    m = StopStringMatcher(["<|user|>"])
    assert m.feed("Hel") == ("Hel", False)
    assert m.feed("lo <|us") == ("lo ", False)        # "<|us" held back
    assert m.feed("er|> rest") == ("", True)
    assert m.stopped


def test_partial_match_that_is_not_a_stop_is_emitted():
    m = StopStringMatcher(["###"])
    assert m.feed("a#") == ("a", False)
    assert m.feed("#") == ("", False)
    assert m.feed("b") == ("##b", False)
    assert not m.stopped


def test_partial_match_at_end_of_stream_is_flushed():
    m = StopStringMatcher(["\nUser:"])
    assert m.feed("done\nUs") == ("done", False)
    assert m.flush() == "\nUs"


def test_earliest_stop_wins_and_overlapping_partials():
    assert StopStringMatcher(["END", "ND!"]).feed("xEND!") == ("x", True)
    m = StopStringMatcher(["abcd", "bce"])
    assert m.feed("abc") == ("", False)                # prefix of both
    assert m.feed("e") == ("a", True)
    assert m.matched == "bce"


def test_no_stops_passes_through():
    m = StopStringMatcher([])
    assert m.feed("abc") == ("abc", False)
    assert StopStringMatcher(["", "x"]).feed("ab") == ("ab", False)


@pytest.mark.parametrize("seed", range(20))
def test_stop_matching_is_independent_of_chunking(seed):
    rng = random.Random(seed)
    stops = ["</s>", "\n\nUser", "xyz"]
    text = "".join(rng.choice(["a", "b", "<", "/", "s", ">", "\n", "U", "ser", "x", "y", "z",
                               "你", "🎉"]) for _ in range(60))
    cuts = sorted(rng.sample(range(1, len(text)), k=min(10, len(text) - 1)))
    chunks = [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)], strict=True)]
    positions = [p for p in (text.find(s) for s in stops) if p >= 0]
    expected = text[:min(positions)] if positions else text
    assert feed_all(StopStringMatcher(stops), chunks) == (expected, bool(positions))
    assert feed_all(StopStringMatcher(stops), list(text)) == (expected, bool(positions))


def test_decoder_and_stop_matcher_together(byte_level):
    ids = byte_level.encode("Answer: 42 🎉\nUser: next question", add_special_tokens=False).ids
    dec = IncrementalDecoder(byte_level)
    stop = StopStringMatcher(["\nUser:"])
    shown, stopped = [], False
    for i in ids:
        text, stopped = stop.feed(dec.push(i))
        shown.append(text)
        if stopped:
            break
    assert stopped
    assert "".join(shown) == "Answer: 42 🎉"
