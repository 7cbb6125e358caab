"""engine.generation.generate / engine.runtime.runner on the tiny converted chat model (and a plain-attention twin):
greedy vs a step-by-step reference loop, split prompts, cancellation, stop strings, UTF-8
streaming, the context window, the figures, prefix reuse, and optimum plain-attention graphs.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.api import GenerationResult, PrefillProgress, SamplingParams, TextChunk
from engine.generation.generate import Generator, collect, common_prefix
from engine.runtime.model import load_model
from engine.runtime.runner import Runner

CACHE_TOL = 5e-4     # one-row vs many-row float32 kernels sum in different orders (see test_convert)
PLAIN_TOL = 1e-3     # plain-attention graph vs GroupQueryAttention graph of the same weights
CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the capital of France?"}]


def greedy(max_new_tokens: int = 16, **kw) -> SamplingParams:
    """Plain argmax decoding: greedy, and no repetition penalty from generation_config.json."""
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=max_new_tokens, **kw)


def random_prompt(n: int, seed: int = 0, vocab: int = 420) -> list[int]:
    """n ordinary token ids (the three special tokens 0..2 left out)."""
    return [int(t) for t in np.random.default_rng(seed).integers(3, vocab, n)]


def reference_greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[int]]:
    """Drives Runner directly: prefill, then argmax one token at a time. Returns (generated, cache tokens)."""
    runner = Runner(model)
    cache = runner.new_cache()
    logits = runner.forward(cache, prompt)
    eos = set(model.eos_token_ids)
    out: list[int] = []
    while len(out) < n:
        token = int(np.argmax(logits))
        if token in eos:
            break
        out.append(token)
        if len(out) == n:
            break
        logits = runner.forward(cache, [token])
    return out, list(cache.tokens)


def events(gen: Generator, cache, prompt, sampling, cancel=None) -> tuple[list[TextChunk], GenerationResult]:
    evs = list(gen.stream(cache, prompt, sampling, cancel))
    assert isinstance(evs[-1], GenerationResult)
    progress = [e for e in evs if isinstance(e, PrefillProgress)]
    chunks = [e for e in evs[:-1] if not isinstance(e, PrefillProgress)]
    assert all(isinstance(e, TextChunk) for e in chunks)
    # Progress comes first (at least the start, unless nothing is computed), then only text.
    assert evs[:len(progress)] == progress
    assert progress or evs[-1].figures.finish_reason == "context_full"
    return chunks, evs[-1]


def fresh(gen: Generator, prompt, sampling) -> GenerationResult:
    return collect(gen.stream(gen.new_cache(), prompt, sampling))


# ---- greedy vs the reference loop ------------------------------------------------------------
def test_common_prefix():
    assert common_prefix([], [1, 2]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 3]) == 3
    assert common_prefix([1, 2, 3], [1, 2]) == 2
    assert common_prefix([1, 2, 3], [1, 9, 3]) == 1
    assert common_prefix([5], [6]) == 0


def test_greedy_is_deterministic_and_equals_reference_loop(tiny_model, generator):
    prompt = generator.encode_chat(CHAT)
    cache = generator.new_cache()
    first = collect(generator.stream(cache, prompt, greedy(24)))
    again = fresh(generator, prompt, greedy(24))
    ref_tokens, ref_cache = reference_greedy(tiny_model, prompt, 24)
    assert first.token_ids == again.token_ids == ref_tokens
    assert len(ref_tokens) == 24 and first.figures.finish_reason == "length"
    assert cache.tokens == ref_cache == prompt + ref_tokens[:-1]
    # The streamed text is the decoded tokens, less the U+FFFD of bytes that make no character.
    assert first.text == tiny_model.tokenizer.decode(first.token_ids).replace("\ufffd", "")


def test_greedy_from_raw_prompt_equals_reference_loop(tiny_model, generator):
    prompt = random_prompt(40, seed=11)
    ref_tokens, _ = reference_greedy(tiny_model, prompt, 12)
    assert fresh(generator, prompt, greedy(12)).token_ids == ref_tokens


# ---- one prompt in two calls -----------------------------------------------------------------
def test_runner_split_prefill_equals_one_call(tiny_model):
    runner = Runner(tiny_model)
    ids = random_prompt(90, seed=1)
    whole = runner.new_cache()
    one = runner.forward(whole, ids)
    split = runner.new_cache()
    runner.forward(split, ids[:37])
    two = runner.forward(split, ids[37:])
    assert split.tokens == whole.tokens == ids
    assert np.max(np.abs(one - two)) <= CACHE_TOL
    assert np.max(np.abs(whole.export(0, 90) - split.export(0, 90))) <= CACHE_TOL


def test_logits_read_from_the_bound_buffer_equal_read_back_outputs(tiny_model):
    """Amber's graphs return last-position logits, which each step writes into a buffer of the
    cache's; the general path (read every output back) gives the same logits, step by step, and
    a returned array is not overwritten by the next step."""
    buffered = Runner(tiny_model)
    assert (buffered._vocab, buffered._last_only) == (tiny_model.session.get_outputs()[0].shape[2], True)
    general = Runner(tiny_model)
    general._vocab = None       # the width unknown: ORT allocates the logits, rebound every step
    ids = random_prompt(40, seed=3)
    ca, cb = buffered.new_cache(), general.new_cache()
    la, lb = buffered.forward(ca, ids), general.forward(cb, ids)
    kept = la.copy()
    for _ in range(5):
        tok = int(np.argmax(la))
        assert np.array_equal(la, lb)
        na, lb = buffered.forward(ca, [tok]), general.forward(cb, [tok])
        assert np.array_equal(kept, la)         # the previous step's array was not overwritten
        la, kept = na, na.copy()
    assert ca.logits_out is not None and cb.logits_out is None


def test_second_prompt_extending_the_first_equals_one_call(generator):
    base = random_prompt(30, seed=2)
    first, second = base[:18], base
    cache = generator.new_cache()
    r1 = collect(generator.stream(cache, first, greedy(1)))
    assert cache.tokens == first and len(r1.token_ids) == 1
    r2 = collect(generator.stream(cache, second, greedy(10)))
    one = fresh(generator, second, greedy(10))
    assert r2.token_ids == one.token_ids
    assert r2.figures.reused_tokens == 18 and r2.figures.prefilled_tokens == 12
    assert r2.figures.resume == "memory"


# ---- cancellation ----------------------------------------------------------------------------
def test_cancel_from_another_thread_stops_within_one_step(generator):
    prompt = generator.encode_chat(CHAT)
    uninterrupted = fresh(generator, prompt, greedy(30))
    assert uninterrupted.figures.finish_reason == "length"

    cancel = threading.Event()
    cache = generator.new_cache()
    stream = generator.stream(cache, prompt, greedy(30), cancel)
    chunks, seen_tokens, result = 0, 0, None
    for event in stream:
        if isinstance(event, GenerationResult):
            result = event
            break
        if isinstance(event, PrefillProgress):
            continue
        chunks += 1
        seen_tokens += len(event.token_ids)
        if chunks == 4:
            setter = threading.Thread(target=cancel.set)
            setter.start()
            setter.join()
    assert result is not None
    assert result.figures.finish_reason == "cancelled"
    assert seen_tokens <= result.figures.generated_tokens <= seen_tokens + 1
    assert result.figures.generated_tokens < 30
    generated = result.token_ids
    assert generated == uninterrupted.token_ids[:len(generated)]
    # The cache holds the prompt and every generated token but the last (never run).
    assert cache.tokens == prompt + generated[:-1]
    assert result.figures.context_used == len(prompt) + len(generated)

    # Continuing from that cache gives what an uninterrupted run gave.
    rest = collect(generator.stream(cache, prompt + generated, greedy(30 - len(generated))))
    assert rest.figures.reused_tokens == len(prompt) + len(generated) - 1
    assert rest.figures.prefilled_tokens == 1
    assert generated + rest.token_ids == uninterrupted.token_ids


def test_cancel_set_before_the_first_token(generator):
    prompt = random_prompt(20, seed=3)
    cancel = threading.Event()
    cancel.set()
    cache = generator.new_cache()
    result = collect(generator.stream(cache, prompt, greedy(30), cancel))
    assert result.figures.finish_reason == "cancelled"
    assert result.figures.generated_tokens <= 1
    assert cache.tokens == prompt + result.token_ids[:-1]


# ---- stop strings ----------------------------------------------------------------------------
def _boundary_stop(chunks: list[TextChunk], full: str, span: int) -> tuple[str, int]:
    """A stop string that starts inside one token's text and ends `span` tokens later, whose first
    occurrence in `full` is exactly there. Returns (stop, its offset)."""
    offsets = np.cumsum([0] + [len(c.text) for c in chunks])
    for i in range(1, len(chunks) - span):
        a, b = chunks[i].text, chunks[i + span].text
        if len(a) < 1 or len(b) < 1 or any(len(c.token_ids) != 1 for c in chunks[i:i + span + 1]):
            continue
        stop = a[-1:] + "".join(c.text for c in chunks[i + 1:i + span]) + b[:1]
        start = int(offsets[i + 1]) - 1
        if "\ufffd" not in stop and full.find(stop) == start:
            return stop, start
    pytest.skip("no usable token boundary in this output")   # pragma: no cover


@pytest.mark.parametrize("span", [1, 2], ids=["two-tokens", "three-tokens"])
def test_stop_string_across_token_boundaries(generator, span):
    prompt = generator.encode_chat(CHAT)
    chunks, full = events(generator, generator.new_cache(), prompt, greedy(40))
    stop, start = _boundary_stop(chunks, full.text, span)
    got_chunks, result = events(generator, generator.new_cache(), prompt, greedy(40, stop=[stop]))
    assert result.figures.finish_reason == "stop"
    assert result.text == full.text[:start]
    assert "".join(c.text for c in got_chunks) == result.text
    assert stop not in result.text and all(stop not in c.text for c in got_chunks)
    # Generation stopped at the token that completed the stop string.
    assert result.token_ids == full.token_ids[:len(result.token_ids)]
    assert len(result.token_ids) < len(full.token_ids)


def test_stop_string_that_never_matches_loses_no_text(generator):
    prompt = generator.encode_chat(CHAT)
    plain = fresh(generator, prompt, greedy(30))
    # Starts like the reply (held back while it could match) but never completes.
    tricky = plain.text[:2] + "\x00never"
    chunks, result = events(generator, generator.new_cache(), prompt, greedy(30, stop=[tricky]))
    assert result.figures.finish_reason == "length"
    assert result.text == plain.text == "".join(c.text for c in chunks)


def test_special_tokens_kept_by_the_sampling_params_are_in_the_reply(generator):
    """A tool-call format's marker may be a special token: SamplingParams.keep_special keeps its text."""
    prompt = generator.encode_chat(CHAT)
    start = generator.model.tokenizer.token_to_id("<|im_start|>")
    forced = greedy(3, logit_bias={start: 100.0})
    assert fresh(generator, prompt, forced).text == ""
    kept = fresh(generator, prompt, greedy(3, logit_bias={start: 100.0}, keep_special=("<|im_start|>",)))
    assert kept.text == "<|im_start|>" * 3 and kept.figures.generated_tokens == 3


# ---- UTF-8 streaming -------------------------------------------------------------------------
UTF8_TEXT = "Emoji 😀🎉👍🏽 and 漢字, 東京は日本の首都です。你好，世界！ 𝄞 done"


class _Scripted:
    """Stands in for engine.generation.reply.Sampler: emits a fixed token script, then EOS."""
    script: list[int] = []
    eos = 2

    def __init__(self, settings) -> None:
        self.i = 0

    def sample(self, logits, history=()) -> int:
        self.i += 1
        return self.script[self.i - 1] if self.i <= len(self.script) else self.eos


def test_utf8_streaming_never_emits_broken_characters(generator, tiny_model, monkeypatch):
    tok = tiny_model.tokenizer
    ids = tok.encode(UTF8_TEXT, add_special_tokens=False).ids
    assert tok.decode(ids) == UTF8_TEXT
    # Precondition: some characters really are split over several byte tokens.
    assert sum("\ufffd" in tok.decode([i]) for i in ids) >= 4
    _Scripted.script, _Scripted.eos = ids, tiny_model.eos_token_ids[0]
    monkeypatch.setattr("engine.generation.reply.Sampler", _Scripted)
    chunks, result = events(generator, generator.new_cache(), generator.encode_chat(CHAT),
                            greedy(len(ids) + 5))
    assert result.figures.finish_reason == "eos"
    assert result.token_ids == ids
    assert all("\ufffd" not in c.text and c.text for c in chunks)
    assert "".join(c.text for c in chunks) == result.text == UTF8_TEXT
    assert sum(len(c.token_ids) for c in chunks) <= len(ids)
    assert len(chunks) > 10      # streamed, not one blob at the end


def test_utf8_stop_string_inside_multibyte_run(generator, tiny_model, monkeypatch):
    tok = tiny_model.tokenizer
    ids = tok.encode(UTF8_TEXT, add_special_tokens=False).ids
    _Scripted.script, _Scripted.eos = ids, tiny_model.eos_token_ids[0]
    monkeypatch.setattr("engine.generation.reply.Sampler", _Scripted)
    chunks, result = events(generator, generator.new_cache(), generator.encode_chat(CHAT),
                            greedy(len(ids) + 5, stop=["🎉👍"]))
    assert result.figures.finish_reason == "stop"
    assert result.text == "Emoji 😀"
    assert "".join(c.text for c in chunks) == "Emoji 😀"


def test_eos_keeps_every_reply_token_in_the_cache(generator, tiny_model, monkeypatch):
    script = tiny_model.tokenizer.encode(" Paris.", add_special_tokens=False).ids
    _Scripted.script, _Scripted.eos = script, tiny_model.eos_token_ids[0]
    monkeypatch.setattr("engine.generation.reply.Sampler", _Scripted)
    prompt = generator.encode_chat(CHAT)
    cache = generator.new_cache()
    result = collect(generator.stream(cache, prompt, greedy(20)))
    assert result.figures.finish_reason == "eos" and result.text == " Paris."
    assert result.token_ids == script and result.figures.generated_tokens == len(script)
    # The last reply token was run (that is how EOS was sampled); the EOS token itself was not.
    assert cache.tokens == prompt + script
    assert result.figures.context_used == len(prompt) + len(script)


# ---- the context window ----------------------------------------------------------------------
def test_prompt_filling_the_context_window(tiny_model, generator):
    window = tiny_model.context_window
    assert window == 512
    for n in (window, window + 40):
        cache = generator.new_cache()
        chunks, result = events(generator, cache, random_prompt(n, seed=4), greedy(8))
        assert chunks == []
        assert result.figures.finish_reason == "context_full"
        assert result.token_ids == [] and result.text == ""
        assert result.figures.prompt_tokens == n and result.figures.context_window == window
        assert len(cache) == 0


def test_generation_reaching_the_context_window(tiny_model, generator):
    window = tiny_model.context_window
    prompt = random_prompt(window - 7, seed=5)
    cache = generator.new_cache()
    result = collect(generator.stream(cache, prompt, greedy(50)))
    assert result.figures.finish_reason == "context_full"
    assert result.figures.generated_tokens == 7 == len(result.token_ids)
    assert result.figures.context_used == window
    assert cache.tokens == prompt + result.token_ids[:-1]
    # The next turn does not fit at all: told so, nothing computed, no crash.
    again = collect(generator.stream(cache, prompt + result.token_ids, greedy(5)))
    assert again.figures.finish_reason == "context_full" and again.token_ids == []


# ---- figures ---------------------------------------------------------------------------------
def test_every_figure_is_filled_and_adds_up(tiny_model, generator):
    cache = generator.new_cache()
    prompt = generator.encode_chat(CHAT)
    r = collect(generator.stream(cache, prompt, greedy(12)))
    f = r.figures
    assert f.prompt_tokens == len(prompt) == f.reused_tokens + f.prefilled_tokens
    assert f.reused_tokens == 0 and f.resume == "none"
    assert f.generated_tokens == len(r.token_ids) == 12
    assert f.context_used == f.prompt_tokens + f.generated_tokens
    assert f.context_window == 512
    assert f.provider == "CPU" == tiny_model.provider_short
    assert f.finish_reason == "length"
    assert 0 < f.prefill_ms <= f.ttft_ms < 60_000
    assert 0 < f.decode_tokens_per_s < 1e7
    assert f.resume_ms == 0.0 and f.fallback_reason is None
    assert set(f.to_dict()) >= {"prompt_tokens", "reused_tokens", "prefilled_tokens", "generated_tokens",
                                "ttft_ms", "prefill_ms", "decode_tokens_per_s", "provider", "finish_reason",
                                "resume", "context_used", "context_window"}
    # A follow-up on the same cache: reused from memory, and the figures still add up.
    p2 = prompt + r.token_ids + random_prompt(5, seed=6)
    r2 = collect(generator.stream(cache, p2, greedy(4)))
    g = r2.figures
    assert g.resume == "memory" and g.reused_tokens == len(prompt) + 11
    assert g.prompt_tokens == g.reused_tokens + g.prefilled_tokens == len(p2)
    assert g.prefilled_tokens == 6


def test_bad_sampling_values_raise_before_any_work(generator):
    cache = generator.new_cache()
    with pytest.raises(ValueError, match="temperature"):
        collect(generator.stream(cache, [5, 6, 7], SamplingParams(temperature=-1.0)))
    with pytest.raises(ValueError, match="empty"):
        collect(generator.stream(cache, [], greedy(3)))
    assert len(cache) == 0


# ---- reuse of the longest common prefix ------------------------------------------------------
def test_new_turn_prefills_only_new_tokens_regenerate_and_edit_truncate(generator):
    cache = generator.new_cache()
    p1 = generator.encode_chat(CHAT)
    r1 = collect(generator.stream(cache, p1, greedy(10)))
    held = list(cache.tokens)

    turn2 = CHAT + [{"role": "assistant", "content": r1.text}, {"role": "user", "content": "And Spain?"}]
    p2 = generator.encode_chat(turn2)
    assert p2[:len(p1)] == p1
    r2 = collect(generator.stream(cache, p2, greedy(10)))
    reused = common_prefix(held, p2)
    assert reused >= len(p1)
    assert r2.figures.reused_tokens == reused
    assert r2.figures.prefilled_tokens == len(p2) - reused
    assert r2.token_ids == fresh(generator, p2, greedy(10)).token_ids

    # Regenerate the first reply: the cache is cut back to the first prompt (less one token,
    # since logits need one new token) and gives the same reply again.
    again = collect(generator.stream(cache, p1, greedy(10)))
    assert again.figures.reused_tokens == len(p1) - 1 and again.figures.prefilled_tokens == 1
    assert again.token_ids == r1.token_ids
    assert cache.tokens == p1 + r1.token_ids[:-1]

    # Edit the user message: only the shared prefix survives.
    edited = [CHAT[0], {"role": "user", "content": "What is the capital of Italy?"}]
    pe = generator.encode_chat(edited)
    shared = common_prefix(p1, pe)
    assert 0 < shared < len(p1)
    re = collect(generator.stream(cache, pe, greedy(10)))
    assert re.figures.reused_tokens == shared
    assert re.figures.prefilled_tokens == len(pe) - shared
    assert re.token_ids == fresh(generator, pe, greedy(10)).token_ids
    assert cache.tokens == pe + re.token_ids[:-1]


# ---- optimum plain-attention graphs ----------------------------------------------------------
def test_load_model_tells_gqa_from_standard_attention(tiny_model, plain_model):
    assert tiny_model.attention == "gqa" and tiny_model.kv.shared_buffer
    assert plain_model.attention == "standard" and not plain_model.kv.shared_buffer
    for m in (tiny_model, plain_model):
        assert (m.kv.n_layers, m.kv.kv_heads, m.kv.head_dim, m.kv.dtype) == (2, 2, 16, np.float32)
        assert m.kv.past_names[1] == ("past_key_values.1.key", "past_key_values.1.value")
        assert m.kv.present_names[0] == ("present.0.key", "present.0.value")
        assert m.kv.bytes_per_token == 2 * 2 * 2 * 16 * 4
        assert {"input_ids", "attention_mask", "position_ids"} <= m.input_names
    assert plain_model.fingerprint != tiny_model.fingerprint
    assert plain_model.eos_token_ids == tiny_model.eos_token_ids


def test_plain_layout_comes_from_the_session_not_config(plain_dir, tmp_path):
    """config.json without head counts: the graph's declared KV shape is enough."""
    import json
    import shutil
    folder = tmp_path / "plain-noconfig"
    shutil.copytree(plain_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    for key in ("num_key_value_heads", "head_dim", "num_hidden_layers"):
        cfg.pop(key, None)
    cfg["num_attention_heads"] = 1    # would give kv_heads 1 / head_dim 64 if config were used
    (folder / "config.json").write_text(json.dumps(cfg))
    m = load_model(folder, provider="cpu", threads=1)
    assert (m.kv.n_layers, m.kv.kv_heads, m.kv.head_dim) == (2, 2, 16)


def test_plain_graph_outputs_every_position(plain_model):
    sess = plain_model.session
    feed = {"input_ids": np.array([[5, 6, 7]], np.int64), "attention_mask": np.ones((1, 3), np.int64),
            "position_ids": np.arange(3, dtype=np.int64)[None]}
    for k, v in plain_model.kv.past_names:
        feed[k] = feed[v] = np.zeros((1, 2, 0, 16), np.float32)
    logits, present = sess.run(["logits", "present.0.key"], feed)
    assert logits.shape == (1, 3, 420) and present.shape == (1, 2, 3, 16)


def test_plain_and_gqa_graphs_agree(tiny_model, plain_model):
    ra, rb = Runner(tiny_model), Runner(plain_model)
    ca, cb = ra.new_cache(), rb.new_cache()
    prompt = random_prompt(60, seed=8)
    la, lb = ra.forward(ca, prompt), rb.forward(cb, prompt)
    worst = float(np.max(np.abs(la - lb)))
    assert la.std() > 0.3
    tokens = []
    for _ in range(20):
        token = int(np.argmax(la))
        assert token == int(np.argmax(lb))
        tokens.append(token)
        la, lb = ra.forward(ca, [token]), rb.forward(cb, [token])
        worst = max(worst, float(np.max(np.abs(la - lb))))
    assert worst <= PLAIN_TOL, worst
    assert cb.keys[0].shape == (1, 2, 80, 16)      # plain cache: exactly the tokens it holds
    assert ca.capacity >= 80
    assert np.max(np.abs(ca.export(0, 80) - cb.export(0, 80))) <= PLAIN_TOL
    # The full generation loop gives the same tokens on both.
    ga, gb = Generator(tiny_model), Generator(plain_model)
    p = ga.encode_chat(CHAT)
    assert p == gb.encode_chat(CHAT)
    assert fresh(ga, p, greedy(20)).token_ids == fresh(gb, p, greedy(20)).token_ids == reference_greedy(
        plain_model, p, 20)[0]


def test_plain_cache_truncate_and_continue(plain_model):
    """Regenerate on a plain graph: truncation slices the exact-size buffers."""
    gen = Generator(plain_model)
    cache = gen.new_cache()
    prompt = random_prompt(30, seed=9)
    r1 = collect(gen.stream(cache, prompt, greedy(8)))
    again = collect(gen.stream(cache, prompt, greedy(8)))
    assert again.figures.reused_tokens == 29 and again.token_ids == r1.token_ids
    assert cache.keys[0].shape[2] == len(cache) == 30 + 7


@pytest.mark.slow
def test_greedy_on_the_default_model_is_the_argmax_despite_its_configs_penalty(default_model_dir):
    """SmolLM2's generation_config.json asks for repetition_penalty 1.1; `greedy=True` is the argmax."""
    from engine.runtime.model import load_model
    model = load_model(default_model_dir, provider="cpu")
    assert model.generation_config.get("repetition_penalty") == 1.1
    gen = Generator(model)
    prompt = gen.encode_chat([{"role": "user", "content": "List the days of the week, one per line."}])
    got = collect(gen.stream(gen.new_cache(), prompt, SamplingParams(greedy=True, max_new_tokens=48)))
    ref, _ = reference_greedy(model, prompt, 48)
    assert got.token_ids == ref
    # The config's penalty would change this reply (so the test can tell the two apart).
    penalised = collect(gen.stream(gen.new_cache(), prompt,
                                   SamplingParams(greedy=True, repetition_penalty=1.1, max_new_tokens=48)))
    assert penalised.token_ids != ref


def test_logprobs_travel_with_their_text_and_equal_the_raw_logits(tiny_model, generator):
    prompt = generator.encode_chat(CHAT)
    chunks, full = events(generator, generator.new_cache(), prompt, greedy(24, logprobs=3))
    assert [e for c in chunks for e in c.logprobs] == full.logprobs
    assert [e.token_id for e in full.logprobs] == full.token_ids       # every reply token, EOS none
    want, _ = reference_greedy(tiny_model, prompt, 24)
    assert full.token_ids == want
    runner = Runner(tiny_model)
    cache = runner.new_cache()
    logits = runner.forward(cache, prompt)
    for token, entry in zip(want, full.logprobs, strict=True):
        z = np.asarray(logits, np.float64)
        logsm = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        assert entry.logprob == pytest.approx(logsm[token], abs=CACHE_TOL)
        assert [t for t, _ in entry.top] == list(np.argsort(-logsm, kind="stable")[:3])
        assert entry.top[0] == (token, entry.logprob)       # greedy: the best one
        logits = runner.forward(cache, [token])
    # Without logprobs, none; a stop string drops the logprobs of the tokens it swallowed.
    plain_chunks, plain = events(generator, generator.new_cache(), prompt, greedy(24))
    assert plain.logprobs == [] and all(c.logprobs == [] for c in plain_chunks)
    assert [c.text for c in plain_chunks] == [c.text for c in chunks]
    stop, start = _boundary_stop(plain_chunks, plain.text, 1)
    cut_chunks, cut = events(generator, generator.new_cache(), prompt, greedy(24, stop=[stop], logprobs=0))
    assert cut.text == plain.text[:start]
    assert [e for c in cut_chunks for e in c.logprobs] == cut.logprobs
    assert len(cut.logprobs) < len(cut.token_ids) and all(e.top == [] for e in cut.logprobs)
    assert [e.token_id for e in cut.logprobs] == cut.token_ids[:len(cut.logprobs)]


def test_logit_bias_in_the_generation(generator):
    prompt = generator.encode_chat(CHAT)
    base = fresh(generator, prompt, greedy(6))
    banned = fresh(generator, prompt, greedy(6, logit_bias={base.token_ids[0]: -100}))
    assert banned.token_ids[0] != base.token_ids[0]
    forced = fresh(generator, prompt, greedy(5, logit_bias={77: 100}))
    assert forced.token_ids == [77] * 5
