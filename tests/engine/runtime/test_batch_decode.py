"""Batched decoding (engine.runtime.batcher, engine.runtime.kvpool) on the tiny converted model:
one GroupQueryAttention run over a batch of sequences of different lengths gives each row the
logits of that sequence run alone, and sessions decoding at once through the batcher produce
exactly the tokens of their solo runs (greedy): finishing early, joining mid-way, prefilling while
others decode, cancelled, failing, pinned and saved."""
from __future__ import annotations

import threading
import uuid

import numpy as np
import onnxruntime as ort
import pytest

from engine.api import GenerationResult, SessionKind, TextChunk
from engine.generation.generate import Generator, collect
from engine.runtime import batcher as batcher_mod
from engine.runtime.kvcache import bind_kv_shared
from engine.runtime.kvpool import KVPool
from engine.sessions.manager import SessionManager
from tests.support.batching import Together, greedy, run_threads, solo_tokens


def prompt(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(500 + seed).integers(3, 420, n)]


@pytest.fixture
def patient(monkeypatch):
    """The leader waits for every session in a decode loop (no time-out), so that which steps are
    batched does not depend on how loaded the machine is."""
    monkeypatch.setattr(batcher_mod, "GATHER_WAIT_S", 60.0)


# ---- the graph itself ---------------------------------------------------------------------------
def test_graph_batch_rows_equal_each_sequence_alone(tiny_model):
    """Batch 3, lengths 5 / 40 / 17, one right-padded mask, shared [3, kvh, cap, hd] buffers."""
    gen = Generator(tiny_model)
    runner, kv = gen.runner, tiny_model.kv
    lens, nxt, cap = [5, 40, 17], [7, 99, 250], 64
    caches, solo = [], []
    for i, n in enumerate(lens):
        c = gen.new_cache()
        runner.forward(c, prompt(n, i))
        caches.append(c)
        alone = gen.new_cache()
        alone.append_block(c.export(0, n), list(c.tokens))
        solo.append((runner.forward(alone, [nxt[i]]), alone))
    arena = np.zeros((2, kv.n_layers, len(lens), kv.kv_heads, cap, kv.head_dim), np.float32)
    for b, c in enumerate(caches):
        for i in range(kv.n_layers):
            arena[0, i, b, :, :lens[b]] = c.keys[i][0, :, :lens[b]]
            arena[1, i, b, :, :lens[b]] = c.values[i][0, :, :lens[b]]
    binding = tiny_model.session.io_binding()
    logits = np.empty((len(lens), 1, runner._vocab), np.float32)
    binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
    bind_kv_shared(binding, kv, [(ort.OrtValue.ortvalue_from_numpy(arena[0, i]),
                                  ort.OrtValue.ortvalue_from_numpy(arena[1, i])) for i in range(kv.n_layers)])
    width = max(lens) + 1
    mask = np.zeros((len(lens), width), np.int64)
    for b, n in enumerate(lens):
        mask[b, :n + 1] = 1
    binding.bind_cpu_input("input_ids", np.asarray(nxt, np.int64)[:, None])
    binding.bind_cpu_input("attention_mask", mask)
    binding.bind_cpu_input("position_ids", np.asarray(lens, np.int64)[:, None])
    tiny_model.session.run_with_iobinding(binding)
    for b, (want, alone) in enumerate(solo):
        np.testing.assert_allclose(logits[b, 0], want, rtol=0, atol=1e-5)
        assert int(np.argmax(logits[b, 0])) == int(np.argmax(want))
        for i in range(kv.n_layers):   # the new position's KV went to that row, where solo puts it
            np.testing.assert_allclose(arena[0, i, b, :, lens[b]], alone.keys[i][0, :, lens[b]], atol=1e-5)
            np.testing.assert_allclose(arena[1, i, b, :, lens[b]], alone.values[i][0, :, lens[b]], atol=1e-5)


# ---- the pool -----------------------------------------------------------------------------------
def test_pool_keeps_contents_through_join_growth_and_leave(tiny_model):
    gen = Generator(tiny_model)
    runner = gen.runner
    pool = KVPool(tiny_model.kv)
    caches = []
    for i, n in enumerate([10, 30]):
        c = gen.new_cache()
        runner.forward(c, prompt(n, i))
        caches.append(c)
    before = [c.export(0, len(c)) for c in caches]
    slots = pool.place(caches)
    assert sorted(slots) == [0, 1] and all(c.pool_owner is pool for c in caches)
    for c, want in zip(caches, before, strict=True):
        np.testing.assert_array_equal(c.export(0, len(c)), want)
    # A third cache that reserved more than the pool holds: the arena grows, everyone keeps its KV.
    third = gen.new_cache()
    third.reserve(pool.capacity + 100)
    runner.forward(third, prompt(8, 5))
    want3 = third.export(0, 8)
    pool.place([third])
    assert pool.capacity >= third.capacity and len(pool.slots) == 3
    for c, want in zip(caches, before, strict=True):
        np.testing.assert_array_equal(c.export(0, len(c)), want)
    np.testing.assert_array_equal(third.export(0, 8), want3)
    # Leaving: the cache has buffers of its own again, as large as it had reserved.
    pool.leave(caches[0])
    assert caches[0].pool_owner is None and caches[0].capacity >= 10
    np.testing.assert_array_equal(caches[0].export(0, 10), before[0])
    # A member that outgrows the pool (reserve) leaves its slot by itself.
    caches[1].reserve(pool.capacity + 1)
    assert caches[1].pool_owner is None and pool.slot_of(caches[1]) is None
    np.testing.assert_array_equal(caches[1].export(0, 30), before[1])
    pool.leave(third)
    assert pool.arena is None and pool.slots == []


# ---- sessions decoding together -----------------------------------------------------------------
def test_concurrent_streams_give_solo_tokens_and_are_batched(tiny_model, patient):
    """Four streams of different prompt lengths and reply lengths (one ends early)."""
    specs = [(12, 24), (60, 24), (3, 6), (33, 18)]
    prompts = [prompt(n, i) for i, (n, _) in enumerate(specs)]
    want = [solo_tokens(tiny_model, p, m) for p, (_, m) in zip(prompts, specs, strict=True)]
    gen = Generator(tiny_model)
    got: list[list[int] | None] = [None] * len(specs)
    caches = [gen.new_cache() for _ in specs]
    together = Together(gen.runner, caches)

    def worker(i: int):
        def run():
            try:
                got[i] = collect(gen.stream(caches[i], prompts[i], greedy(specs[i][1]))).token_ids
            finally:
                together.release(caches[i])
        return run
    run_threads([worker(i) for i in range(len(specs))])
    assert got == want
    b = gen.runner.batcher
    assert b is not None and b.batched_steps > 0 and b.batched_rows > b.batched_steps
    assert b.pool.arena is None        # every cache left the pool when its reply ended


def test_switched_off_takes_turns_with_the_same_tokens(tiny_model, patient):
    prompts = [prompt(9, 1), prompt(21, 2)]
    want = [solo_tokens(tiny_model, p, 12) for p in prompts]
    gen = Generator(tiny_model)
    gen.runner.batch_decode = False
    got: list[list[int] | None] = [None, None]

    def worker(i: int):
        def run():
            got[i] = collect(gen.stream(gen.new_cache(), prompts[i], greedy(12))).token_ids
        return run
    run_threads([worker(0), worker(1)])
    assert got == want and gen.runner.batcher.batched_steps == 0


def test_joining_midway_with_a_long_prefill(tiny_model, patient):
    """B starts (a 300-token prefill, solo) while A is decoding, then decodes in A's batches."""
    a_prompt, b_prompt = prompt(10, 3), prompt(300, 4)
    want_a, want_b = solo_tokens(tiny_model, a_prompt, 40), solo_tokens(tiny_model, b_prompt, 20)
    gen = Generator(tiny_model)
    batcher = gen.runner.batcher
    a_started = threading.Event()
    b_cache = gen.new_cache()
    got: dict[str, list[int]] = {}

    def run_a():
        for n, event in enumerate(gen.stream(gen.new_cache(), a_prompt, greedy(40))):
            if isinstance(event, TextChunk) and n > 5 and not a_started.is_set():
                a_started.set()
                # A's reader pauses until B decodes (its steps then join A's), as a slow reader would.
                for _ in range(6000):
                    if batcher.is_decoding(b_cache):
                        break
                    threading.Event().wait(0.01)
            if isinstance(event, GenerationResult):
                got["a"] = event.token_ids
        a_started.set()

    def run_b():
        assert a_started.wait(60)
        got["b"] = collect(gen.stream(b_cache, b_prompt, greedy(20))).token_ids
    run_threads([run_a, run_b])
    assert got == {"a": want_a, "b": want_b}
    assert gen.runner.batcher.batched_steps > 0


def test_cancelling_one_leaves_the_others_exact(tiny_model, patient):
    prompts = [prompt(14, 6), prompt(25, 7), prompt(8, 8)]
    want = [solo_tokens(tiny_model, p, 30) for p in prompts]
    gen = Generator(tiny_model)
    cancel = threading.Event()
    got: dict[int, GenerationResult] = {}
    caches = [gen.new_cache() for _ in prompts]
    together = Together(gen.runner, caches)

    def worker(i: int):
        def run():
            chunks = 0
            try:
                for event in gen.stream(caches[i], prompts[i], greedy(30), cancel if i == 1 else None):
                    if isinstance(event, TextChunk) and i == 1:
                        chunks += 1
                        if chunks == 5:
                            cancel.set()
                    if isinstance(event, GenerationResult):
                        got[i] = event
            finally:
                together.release(caches[i])
        return run
    run_threads([worker(i) for i in range(3)])
    assert got[0].token_ids == want[0] and got[2].token_ids == want[2]
    assert got[1].figures.finish_reason == "cancelled"
    assert got[1].token_ids == want[1][:len(got[1].token_ids)] and len(got[1].token_ids) < 30


def test_an_error_in_one_step_fails_only_that_session(tiny_model, patient):
    """A batch whose run fails is retried row by row: the bad step raises in its own thread."""
    gen = Generator(tiny_model)
    runner = gen.runner
    good, bad = gen.new_cache(), gen.new_cache()
    runner.forward(good, prompt(11, 9))
    runner.forward(bad, prompt(7, 10))
    reference = gen.new_cache()
    reference.append_block(good.export(0, 11), list(good.tokens))
    want = runner.forward(reference, [42])
    out: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def step(name, cache, token):
        def run():
            with runner.decoding(cache):
                barrier.wait()
                try:
                    out[name] = runner.forward(cache, [token])
                except Exception as exc:   # noqa: BLE001 - what the test checks
                    out[name] = exc
        return run
    run_threads([step("good", good, 42), step("bad", bad, 10 ** 9)])   # a token id past the vocabulary
    assert isinstance(out["bad"], Exception)
    np.testing.assert_allclose(out["good"], want, rtol=0, atol=1e-5)
    assert len(good) == 12 and len(bad) == 7


def test_sessions_through_the_manager_pinned_and_saved(tiny_model, tmp_path, patient):
    """Three chats generating at once through the SessionManager (one pinned) give the tokens of
    sequential runs; afterwards the caches are ordinary ones, and the pinned one resumes from disk."""
    prompts = [prompt(20, 11), prompt(45, 12), prompt(6, 13)]
    want = [solo_tokens(tiny_model, p, 16) for p in prompts]
    mgr = SessionManager(tiny_model, tmp_path / "state", block_tokens=16)
    ids = [mgr.open(str(uuid.uuid4()), kind=k).session_id
           for k in (SessionKind.PINNED, SessionKind.REGULAR, SessionKind.TEMPORARY)]
    got: list[list[int] | None] = [None] * 3
    for sid in ids:   # white-box: the caches made up front, so that Together can hold them
        mgr._open[sid].cache = mgr.generator.new_cache()
    caches = [mgr._open[sid].cache for sid in ids]
    together = Together(mgr.generator.runner, caches)

    def worker(i: int):
        def run():
            try:
                got[i] = collect(mgr.generate_tokens(ids[i], prompts[i], greedy(16))).token_ids
            finally:
                together.release(caches[i])
        return run
    try:
        run_threads([worker(i) for i in range(3)])
        assert got == want
        assert mgr.generator.runner.batcher.batched_steps > 0
        for sid in ids:
            cache = mgr._open[sid].cache      # white-box: a normal KVCache again
            assert cache is not None and cache.pool_owner is None
        assert mgr.wait_for_saves(30)
        assert mgr.info(ids[0]).save_error is None
        history = prompts[0] + got[0]
    finally:
        mgr.shutdown()
    # The pinned chat after a restart: its KV is read from disk and the next turn matches a fresh run.
    nxt = history + [5, 6, 7]
    mgr2 = SessionManager(tiny_model, tmp_path / "state", block_tokens=16)
    try:
        mgr2.open(ids[0])
        result = collect(mgr2.generate_tokens(ids[0], nxt, greedy(8)))
        assert result.figures.reused_tokens >= len(history) - 1
        assert result.token_ids == solo_tokens(tiny_model, nxt, 8)
    finally:
        mgr2.shutdown()


def test_sessions_stepped_in_turn_by_one_thread_do_not_wait_for_each_other(tiny_model, patient):
    """The API server's single-thread scheduler and the GUI step several streams from ONE thread:
    a leader must not wait for sessions that thread drives (it would hang here, GATHER_WAIT_S
    being a minute)."""
    prompts = [prompt(10, 20), prompt(30, 21), prompt(5, 22)]
    want = [solo_tokens(tiny_model, p, 15) for p in prompts]
    gen = Generator(tiny_model)
    got: list[list[int] | None] = [None] * 3

    def round_robin():
        streams = [gen.stream(gen.new_cache(), p, greedy(15)) for p in prompts]
        live = list(range(3))
        while live:
            for i in list(live):
                try:
                    event = next(streams[i])
                except StopIteration:
                    live.remove(i)
                    continue
                if isinstance(event, GenerationResult):
                    got[i] = event.token_ids
    run_threads([round_robin])
    assert got == want


def test_a_much_longer_cache_steps_alone_while_the_others_batch(tiny_model, patient):
    """A slot is as long as the pool's longest member: a cache with far more room than the others
    (here 2048 positions against 256) stays out of the batch rather than lengthen every slot."""
    prompts = [prompt(12, 30), prompt(18, 31), prompt(15, 32)]
    want = [solo_tokens(tiny_model, p, 20) for p in prompts]
    gen = Generator(tiny_model)
    caches = [gen.new_cache() for _ in prompts]
    caches[2].reserve(2048)
    together = Together(gen.runner, caches)
    got: list[list[int] | None] = [None] * 3

    def worker(i: int):
        def run():
            try:
                got[i] = collect(gen.stream(caches[i], prompts[i], greedy(20))).token_ids
            finally:
                together.release(caches[i])
        return run
    run_threads([worker(i) for i in range(3)])
    assert got == want
    b = gen.runner.batcher
    assert b.batched_steps > 0 and b.batched_rows == 2 * b.batched_steps
    assert caches[2].capacity == 2048 and caches[0].capacity < 2048


def test_an_abandoned_managed_stream_leaves_the_pool_before_its_lock_is_released(tiny_model, tmp_path, patient):
    """A reader that stops mid-reply (the GUI closing a chat, a client gone) closes the stream:
    the session's cache is an ordinary one again at once, and the other session goes on."""
    mgr = SessionManager(tiny_model, tmp_path / "state", block_tokens=16)
    a, b = (mgr.open(kind=SessionKind.TEMPORARY).session_id for _ in range(2))
    for sid in (a, b):   # white-box: made up front, so that A's reader can watch B's
        mgr._open[sid].cache = mgr.generator.new_cache()
    b_cache = mgr._open[b].cache
    batcher = mgr.generator.runner.batcher
    b_prompt = prompt(16, 41)
    want_b = solo_tokens(tiny_model, b_prompt, 30)
    got: dict[str, object] = {}
    a_decoding = threading.Event()

    def run_a():
        stream = mgr.generate_tokens(a, prompt(9, 40), greedy(60))
        chunks = 0
        for event in stream:
            if isinstance(event, TextChunk):
                chunks += 1
                if chunks == 1:
                    a_decoding.set()            # B starts now, and A reads on once B decodes too
                    for _ in range(6000):
                        if batcher.is_decoding(b_cache):
                            break
                        threading.Event().wait(0.01)
                if chunks == 8:
                    break
        stream.close()
        cache = mgr._open[a].cache
        got["a_left"] = cache is not None and cache.pool_owner is None and not batcher.is_decoding(cache)

    def run_b():
        assert a_decoding.wait(60)
        got["b"] = collect(mgr.generate_tokens(b, b_prompt, greedy(30))).token_ids
    try:
        run_threads([run_a, run_b])
        assert got == {"a_left": True, "b": want_b}
        assert batcher.batched_steps > 0 and batcher.pool.arena is None
    finally:
        mgr.shutdown()


def test_a_slot_a_pending_snapshot_reads_is_not_handed_to_another_cache(tiny_model):
    """A save taken during a batched reply (KVSnapshot: copied later on the writer thread) reads the
    cache's slot views: when that cache leaves, its slot is retired, so a cache joining next cannot
    overwrite what the save still has to copy."""
    gen = Generator(tiny_model)
    runner = gen.runner
    pool = KVPool(tiny_model.kv)
    a, b, c = gen.new_cache(), gen.new_cache(), gen.new_cache()
    for i, cache in enumerate((a, b, c)):
        runner.forward(cache, prompt(20 + i, 50 + i))
    want = a.export(0, len(a))
    pool.place([a, b])
    snap = a.snapshot()          # reads a's slot views, not a copy
    slot_a, views = pool.slot_of(a), a.keys
    pool.leave(a)
    assert slot_a in pool.retired and a.pool_owner is None
    pool.place([c])              # no free slot but the retired one: a fresh arena
    assert not any(np.shares_memory(mine, old) for mine in c.keys for old in views)
    np.testing.assert_array_equal(snap.export(0, snap.n), want)
    snap.release()
    np.testing.assert_array_equal(a.export(0, len(a)), want)


def test_members_move_down_into_a_hole_keeping_their_kv_and_a_snapshots_slot(tiny_model):
    """A member leaving from the middle of the pool: the member above it moves down into its slot
    at the next placement (the sessions decoding together stay one range of slots, one run a step),
    with its KV; a snapshot still reading the moved member's old slot keeps it (retired)."""
    gen = Generator(tiny_model)
    runner = gen.runner
    pool = KVPool(tiny_model.kv)
    caches = [gen.new_cache() for _ in range(4)]
    for i, cache in enumerate(caches):
        runner.forward(cache, prompt(12 + i, 70 + i))
    want = [c.export(0, len(c)) for c in caches]
    assert pool.place(caches) == [0, 1, 2, 3]
    pool.leave(caches[1])
    snap = caches[3].snapshot()          # reads slot 3's views
    slots = pool.place([caches[0], caches[2], caches[3]])
    assert sorted(slots) == [0, 1, 2] and pool.slot_of(caches[3]) == 1
    assert 3 in pool.retired
    for c, w in zip(caches, want, strict=True):
        np.testing.assert_array_equal(c.export(0, len(c)), w)
    np.testing.assert_array_equal(snap.export(0, snap.n), want[3])
    snap.release()
    # Without a snapshot the moved-from slot is free again.
    pool.leave(caches[0])
    assert sorted(pool.place([caches[2], caches[3]])) == [0, 1] and 2 not in pool.retired
    for c in (caches[2], caches[3]):
        np.testing.assert_array_equal(c.export(0, len(c)), want[caches.index(c)])
