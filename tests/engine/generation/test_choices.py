"""A prompt's n choices as one generation (Generator.stream_choices, SessionManager.generate_choices)
on the tiny converted model: the prompt is prefilled once, the choices' steps run as one batch,
greedy choices are the single greedy reply token for token, each choice keeps its own seed, stop
conditions and finish reason, and cancelling stops them all."""
from __future__ import annotations

import threading
import uuid

import pytest

from engine.api import GenerationResult, PrefillProgress, SamplingParams, SessionKind, TextChunk
from engine.generation.generate import Generator, collect
from engine.runtime import batcher as batcher_mod
from engine.sessions.manager import SessionManager

CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three rivers and a bridge."}]


def greedy(max_new_tokens: int = 16, **kw) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=max_new_tokens, **kw)


def sampled(seed: int, max_new_tokens: int = 16) -> SamplingParams:
    return SamplingParams(temperature=1.5, top_p=1.0, top_k=0, repetition_penalty=1.0, seed=seed,
                          max_new_tokens=max_new_tokens)


@pytest.fixture
def patient(monkeypatch):
    """The leader waits for every decode loop (no time-out): which steps are batched does not
    depend on how loaded the machine is."""
    monkeypatch.setattr(batcher_mod, "GATHER_WAIT_S", 60.0)


def run_choices(gen: Generator, prompt: list[int], samplings: list[SamplingParams], cancel=None, cache=None):
    """(events by choice, results by choice, every event in order)."""
    cache = cache if cache is not None else gen.new_cache()
    order = list(gen.stream_choices(cache, prompt, samplings, cancel))
    by_choice: dict[int, list] = {i: [] for i in range(len(samplings))}
    for index, event in order:
        by_choice[index].append(event)
    results = []
    for i in range(len(samplings)):
        assert isinstance(by_choice[i][-1], GenerationResult)
        assert sum(isinstance(e, GenerationResult) for e in by_choice[i]) == 1
        results.append(by_choice[i][-1])
    return by_choice, results, order


def test_greedy_choices_equal_the_single_reply_and_prefill_once(generator, patient):
    prompt = generator.encode_chat(CHAT)
    alone = collect(generator.stream(generator.new_cache(), prompt, greedy(24)))
    batcher = generator.runner.batcher
    assert batcher is not None
    steps, rows = batcher.batched_steps, batcher.batched_rows
    cache = generator.new_cache()
    by_choice, results, order = run_choices(generator, prompt, [greedy(24)] * 3, cache=cache)
    for r in results:
        assert r.token_ids == alone.token_ids and r.text == alone.text
        assert r.figures.finish_reason == alone.figures.finish_reason
        assert r.figures.prompt_tokens == len(prompt)
    # Prefilled once, as choice 0's (its progress only); the others start from a copy.
    assert results[0].figures.prefilled_tokens == len(prompt)
    assert [r.figures.prefilled_tokens for r in results[1:]] == [0, 0]
    assert [r.figures.reused_tokens for r in results[1:]] == [len(prompt)] * 2
    progress = [(i, e) for i, e in order if isinstance(e, PrefillProgress)]
    assert progress and {i for i, _ in progress} == {0}
    assert all(i == 0 for i, e in order[:len(progress)])
    # The choices' steps ran together: 3 rows a batched step (all replies are as long).
    decode_steps = len(alone.token_ids) - (1 if alone.figures.finish_reason == "length" else 0)
    assert batcher.batched_steps - steps == decode_steps > 0
    assert batcher.batched_rows - rows == 3 * decode_steps
    # The cache is choice 0's, as after a single reply.
    single = generator.new_cache()
    collect(generator.stream(single, prompt, greedy(24)))
    assert cache.tokens == single.tokens
    # Each choice's text chunks make its reply.
    for i in range(3):
        assert "".join(e.text for e in by_choice[i] if isinstance(e, TextChunk)) == alone.text


def test_each_choice_ends_on_its_own(generator, patient):
    prompt = generator.encode_chat(CHAT)
    alone = collect(generator.stream(generator.new_cache(), prompt, greedy(20)))
    assert alone.figures.finish_reason == "length" and len(alone.text) > 4
    stop = alone.text[3:5]
    _, results, _ = run_choices(generator, prompt, [greedy(20), greedy(5), greedy(20, stop=[stop]), greedy(12)])
    assert results[0].token_ids == alone.token_ids
    assert results[1].token_ids == alone.token_ids[:5] and results[1].figures.finish_reason == "length"
    assert results[2].figures.finish_reason == "stop" and results[2].text == alone.text[:alone.text.index(stop)]
    assert results[3].token_ids == alone.token_ids[:12] and results[3].figures.generated_tokens == 12
    # Each choice counts its own tokens.
    assert [r.figures.generated_tokens for r in results] == [len(r.token_ids) for r in results]


def test_choices_left_after_one_ends_still_step_as_one_run(generator, patient, monkeypatch):
    """A choice that ends early leaves a hole in the batch pool's slots; the ones still decoding move
    down into it, so every later step is still ONE ONNX Runtime run."""
    prompt = generator.encode_chat(CHAT)
    batcher = generator.runner.batcher
    runs = []
    real = batcher.session.run_with_iobinding

    def counted(binding, *a, **k):
        runs.append(binding)
        return real(binding, *a, **k)
    monkeypatch.setattr(batcher.session, "run_with_iobinding", counted)
    alone = collect(generator.stream(generator.new_cache(), prompt, greedy(20)))
    assert alone.figures.finish_reason == "length"
    runs.clear()
    _, results, _ = run_choices(generator, prompt, [greedy(20), greedy(5), greedy(20), greedy(9)])
    assert [len(r.token_ids) for r in results] == [20, 5, 20, 9]
    assert all(r.token_ids == alone.token_ids[:len(r.token_ids)] for r in results)
    # One prefill run, then one run per decode step (19 steps for the longest choice).
    assert len(runs) == 1 + 19


def test_seeded_choices_are_reproducible_and_each_its_own(generator, patient):
    prompt = generator.encode_chat(CHAT)
    seeds = [11, 12, 13, 14]
    _, first, _ = run_choices(generator, prompt, [sampled(s) for s in seeds])
    _, again, _ = run_choices(generator, prompt, [sampled(s) for s in seeds])
    assert [r.token_ids for r in again] == [r.token_ids for r in first]
    assert len({tuple(r.token_ids) for r in first}) > 1      # each choice its own draw
    # A choice draws as a single reply with its seed does.
    solo = collect(generator.stream(generator.new_cache(), prompt, sampled(seeds[2])))
    assert first[2].token_ids == solo.token_ids


def test_cancel_stops_every_choice(generator):
    prompt = generator.encode_chat(CHAT)
    cancel = threading.Event()
    results: dict[int, GenerationResult] = {}
    texts = 0
    for index, event in generator.stream_choices(generator.new_cache(), prompt, [greedy(200)] * 3, cancel):
        if isinstance(event, TextChunk):
            texts += 1
            if texts == 4:
                cancel.set()
        elif isinstance(event, GenerationResult):
            results[index] = event
    assert sorted(results) == [0, 1, 2]
    assert all(r.figures.finish_reason == "cancelled" for r in results.values())
    assert all(r.figures.generated_tokens < 10 for r in results.values())


def test_bad_choice_sampling_fails_before_any_work(generator):
    with pytest.raises(ValueError):
        list(generator.stream_choices(generator.new_cache(), [5, 6, 7], [greedy(4), SamplingParams(top_p=3.0)]))
    with pytest.raises(ValueError):
        list(generator.stream_choices(generator.new_cache(), [5, 6, 7], []))


@pytest.mark.parametrize("kind", [SessionKind.TEMPORARY, SessionKind.REGULAR, SessionKind.PINNED])
def test_session_manager_prefills_once_and_keeps_choice_zero(tiny_model, tmp_path, kind, patient):
    m = SessionManager(tiny_model, tmp_path / "state", block_tokens=16)
    try:
        prompt = m.encode_chat(CHAT)
        sid = str(uuid.uuid4())
        m.open(sid, kind)
        before = m.stats()["prefilled_tokens"]
        events = list(m.generate_choices(sid, prompt, [greedy(10), greedy(6), sampled(3, 10)]))
        results = {i: e for i, e in events if isinstance(e, GenerationResult)}
        assert sorted(results) == [0, 1, 2]
        assert m.stats()["prefilled_tokens"] - before == len(prompt)
        assert results[1].token_ids == results[0].token_ids[:6]
        # The session holds the prompt and choice 0's reply (as after generate_tokens).
        other = str(uuid.uuid4())
        m.open(other, SessionKind.TEMPORARY)
        single = [e for e in m.generate_tokens(other, prompt, greedy(10)) if isinstance(e, GenerationResult)][0]
        assert single.token_ids == results[0].token_ids
        assert m.info(sid).tokens == m.info(other).tokens
        if kind == SessionKind.PINNED:
            assert m.wait_for_saves()
            m.close(sid)
            m.open(sid)
            assert m.info(sid).kv_location.value == "disk" and m.info(sid).tokens == m.info(other).tokens
    finally:
        m.shutdown()


def test_choices_on_device_caches_equal_the_cpu_ones(generator):
    """KV kept on the device (`STAGED`: the CUDA code path, run for real on a CPU): the copies of
    the prompt's KV are device caches too, stepped in turn (no batcher there), with the same tokens."""
    from engine.runtime.kvcache import STAGED
    prompt = generator.encode_chat(CHAT)
    want = [greedy(12), greedy(5), sampled(8, 12)]
    _, on_cpu, _ = run_choices(generator, prompt, want)
    generator.runner.kv_device = STAGED
    try:
        cache = generator.new_cache()
        assert cache.on_device
        _, staged, _ = run_choices(generator, prompt, want, cache=cache)
    finally:
        generator.runner.kv_device = "cpu"
    assert [r.token_ids for r in staged] == [r.token_ids for r in on_cpu]
    assert staged[0].figures.prefilled_tokens == len(prompt)
