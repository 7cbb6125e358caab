"""The shared prefix cache (engine.kvstore.prefix_cache + its use by engine.sessions.manager): salt isolation, hit
correctness from both tiers, the memory LRU, age expiry on an injected clock, pinned blocks, the
disk budget and the janitor thread, crash consistency at startup, concurrent sessions, temporary
sessions, spill on close and the `amber-engine cache` CLI.

Everything runs on one tiny random-weight model (2 layers, GQA 4/2, 64 wide, context 1024) with
16-token blocks, so a block is 8 KiB in memory and a test needs milliseconds of compute.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerationResult, SamplingParams, TextChunk
from engine.kvstore.blockstore import BlockStore, block_keys
from engine.convert import convert_gguf
from engine.generation.generate import Generator, collect
from engine.kvstore.kvfile import KVShape
from engine.runtime.model import load_model
from engine.kvstore.prefix_cache import PrefixCache
from engine.runtime.runner import Runner
from engine.sessions.manager import SessionManager
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

REPO = Path(__file__).resolve().parents[3]
B = 16                 # block_tokens in these tests
VOCAB_LO = 3           # ids 0..2 are the special tokens (eos among them): prompts avoid them
LOGIT_TOL = 1e-5


# ---- fixtures and helpers ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """(model folder, loaded model): a 2-layer GQA llama, n_embd 64, context 1024, CPU."""
    root = tmp_path_factory.mktemp("prefix_cache_model")
    src = write_tiny_gguf(root / "tiny.gguf", TinyConfig(context_length=1024, seed=42))
    folder = convert_gguf(src.path, root / "tiny")
    return folder, load_model(folder, provider="cpu", threads=1)


@pytest.fixture(scope="session")
def model(tiny):
    return tiny[1]


class FakeClock:
    """An injectable wall clock (starts at the real time so file mtimes stay plausible)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@pytest.fixture
def managers(model):
    """make(state_dir, **kw) -> SessionManager with 16-token blocks; every one is shut down after."""
    made: list[SessionManager] = []

    def make(state: Path, **kw) -> SessionManager:
        kw.setdefault("block_tokens", B)
        m = SessionManager(model, state, **kw)
        made.append(m)
        return m
    yield make
    for m in made:
        if m._writer._thread.is_alive():     # not shut down by the test already
            m.shutdown(timeout=5)


def ids(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(VOCAB_LO, 400, n)]


def greedy(n: int = 6) -> SamplingParams:
    return SamplingParams(greedy=True, max_new_tokens=n)


def run(mgr: SessionManager, sid: str, prompt: list[int], n: int = 6) -> GenerationResult:
    return collect(mgr.generate_tokens(sid, prompt, greedy(n)))


def scratch_tokens(model, prompt: list[int], n: int = 6) -> list[int]:
    """Greedy tokens computed from nothing (no session, no shared cache)."""
    gen = Generator(model)
    return collect(gen.stream(gen.new_cache(), prompt, greedy(n))).token_ids


def scratch_logits(model, prompt: list[int]) -> np.ndarray:
    runner = Runner(model)
    return np.asarray(runner.forward(runner.new_cache(), prompt), np.float64)


def logits_via_cache(model, mgr: SessionManager, prompt: list[int], salt: str | None = None):
    """Loads the prompt's full blocks through the prefix cache into a fresh KVCache, runs the rest;
    returns (last logits, tiers the blocks came from)."""
    runner = Runner(model)
    cache = runner.new_cache()
    n_full = len(prompt) // B
    keys = mgr.store.keys_for(prompt[:n_full * B], salt)
    tiers: list[str] = []

    def take(array, toks, tier):
        cache.append_block(array, toks)
        tiers.append(tier)
    mgr.prefix.load_chain(keys, [prompt[i * B:(i + 1) * B] for i in range(n_full)], take)
    rest = prompt[len(cache):]
    return np.asarray(runner.forward(cache, rest), np.float64), tiers


def block_files(state: Path) -> set[str]:
    root = state / "blocks"
    return {p.stem for p in root.rglob("*.kvb")} if root.is_dir() else set()


def tier(mgr: SessionManager, name: str) -> dict[str, int]:
    return mgr.stats()["cache"][name]


def open_sid(mgr: SessionManager, kind: str | None = None, salt: str | None = None) -> str:
    return mgr.open(None, kind=kind, cache_salt=salt).session_id


def mem_block_bytes(model) -> int:
    kv = model.kv
    return kv.n_layers * 2 * kv.kv_heads * B * kv.head_dim * np.dtype(kv.dtype).itemsize


# ---- salt isolation ----------------------------------------------------------------------------
def test_salt_isolation_memory_and_disk(model, managers, tmp_path):
    prompt = ids(5 * B + 3, seed=1)            # 5 full blocks
    mgr = managers(tmp_path)

    a = open_sid(mgr, salt="alice")
    first = run(mgr, a, prompt)
    assert first.figures.cache_tokens_memory == first.figures.cache_tokens_disk == 0
    assert tier(mgr, "memory")["blocks"] == 5

    # Other namespaces never see alice's blocks: another salt, no salt, and the empty salt.
    for salt in ("bob", None, ""):
        before = tier(mgr, "memory")
        r = run(mgr, open_sid(mgr, salt=salt), prompt)
        assert (r.figures.reused_tokens, r.figures.cache_tokens_memory, r.figures.cache_tokens_disk) == (0, 0, 0), salt
        assert r.figures.prefilled_tokens == len(prompt)
        after = tier(mgr, "memory")
        assert after["hits"] == before["hits"], salt
        assert after["misses"] >= before["misses"] + 5, salt
        assert r.token_ids == first.token_ids      # same model, same prompt: same answer

    # 4 namespaces x 5 blocks, none shared
    assert tier(mgr, "memory")["blocks"] == 20
    assert len({k for s in ("alice", "bob", None, "") for k in block_keys(mgr.shape.fingerprint, s, prompt, B)}) == 20

    # The same salt hits every full block.
    hits = tier(mgr, "memory")["hits"]
    r = run(mgr, open_sid(mgr, salt="alice"), prompt)
    assert r.figures.cache_tokens_memory == 5 * B and r.figures.reused_tokens == 5 * B
    assert r.figures.prefilled_tokens == 3
    assert tier(mgr, "memory")["hits"] == hits + 5
    assert r.token_ids == first.token_ids

    # Disk tier, in a new manager: only alice's spilled blocks serve alice.
    mgr.shutdown()
    mgr2 = managers(tmp_path)
    assert tier(mgr2, "disk")["blocks"] == 20 and tier(mgr2, "memory")["blocks"] == 0
    r = run(mgr2, open_sid(mgr2, salt="mallory"), prompt)
    assert (r.figures.cache_tokens_memory, r.figures.cache_tokens_disk) == (0, 0)
    assert tier(mgr2, "disk")["hits"] == 0 and tier(mgr2, "disk")["misses"] == 5
    r = run(mgr2, open_sid(mgr2, salt="alice"), prompt)
    assert r.figures.cache_tokens_disk == 5 * B and r.figures.resume == "disk"
    assert tier(mgr2, "disk")["hits"] == 5
    assert r.token_ids == first.token_ids


# ---- hit correctness ---------------------------------------------------------------------------
def test_hits_give_the_same_logits_and_tokens_as_scratch(model, managers, tmp_path):
    prefix = ids(4 * B, seed=2)
    prompt = prefix + ids(11, seed=3)
    other = prefix + ids(B + 5, seed=4)        # shares the 4 blocks, then a different 5th block
    want = scratch_tokens(model, other)
    want_logits = scratch_logits(model, other)

    mgr = managers(tmp_path)
    run(mgr, open_sid(mgr), prompt)

    # Memory tier.
    got, tiers = logits_via_cache(model, mgr, other)
    assert tiers == ["memory"] * 4
    assert float(np.max(np.abs(got - want_logits))) <= LOGIT_TOL
    r = run(mgr, open_sid(mgr), other)
    assert r.figures.cache_tokens_memory == 4 * B and r.figures.prefilled_tokens == B + 5
    assert r.token_ids == want

    # Disk tier, in a fresh manager (a new process as far as the cache is concerned).
    mgr.shutdown()
    assert len(block_files(tmp_path)) >= 4
    mgr2 = managers(tmp_path)
    got, tiers = logits_via_cache(model, mgr2, other)
    assert tiers[:4] == ["disk"] * 4
    assert float(np.max(np.abs(got - want_logits))) <= LOGIT_TOL

    mgr2.shutdown()
    mgr3 = managers(tmp_path)
    r = run(mgr3, open_sid(mgr3), other)
    assert r.figures.cache_tokens_disk == 5 * B            # the 5th block came from mgr's 2nd session
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    assert r.token_ids == want


def test_cached_block_arrays_equal_freshly_computed_kv(model, managers, tmp_path):
    prompt = ids(3 * B, seed=5)
    runner = Runner(model)
    fresh = runner.new_cache()
    runner.forward(fresh, prompt)
    mgr = managers(tmp_path)
    sid = open_sid(mgr)
    run(mgr, sid, prompt + ids(4, seed=6))
    mgr.close(sid)
    assert mgr.wait_for_saves()
    for i, key in enumerate(mgr.store.keys_for(prompt, None)):
        toks = prompt[i * B:(i + 1) * B]
        want = fresh.export(i * B, (i + 1) * B)
        assert mgr.prefix.get_memory(key).tokens == toks
        assert float(np.max(np.abs(mgr.prefix.get_memory(key).array - want))) <= LOGIT_TOL
        assert float(np.max(np.abs(mgr.store.read(key, toks) - want))) <= LOGIT_TOL


# ---- memory tier LRU ---------------------------------------------------------------------------
def _bare_cache(tmp_path: Path, memory_bytes: int, **kw) -> PrefixCache:
    shape = KVShape("f" * 16, "float32", 1, 1, 4)
    return PrefixCache(BlockStore(tmp_path, shape, 4), memory_bytes=memory_bytes, **kw)


def _arr(v: float) -> np.ndarray:
    return np.full((1, 2, 1, 4, 4), v, np.float32)      # 128 bytes


def test_memory_tier_lru_evicts_least_recently_used_and_get_refreshes(tmp_path):
    pc = _bare_cache(tmp_path, memory_bytes=3 * 128)
    for k in "abc":
        pc.put_memory(k, [1, 2, 3, 4], _arr(ord(k)))
    assert pc.stats()["memory"]["blocks"] == 3 and pc.stats()["memory"]["bytes"] == 384

    assert pc.get_memory("a") is not None     # a is now the most recently used
    pc.put_memory("d", [1, 2, 3, 4], _arr(1))
    assert [pc.has_memory(k) for k in "abcd"] == [True, False, True, True]
    assert pc.stats()["memory"]["evictions"] == 1

    pc.put_memory("c", [1, 2, 3, 4], _arr(2))   # putting a present key refreshes it too
    pc.put_memory("e", [1, 2, 3, 4], _arr(3))
    assert [pc.has_memory(k) for k in "acde"] == [False, True, True, True]
    pc.put_memory("f", [1, 2, 3, 4], _arr(4))
    assert [pc.has_memory(k) for k in "cdef"] == [True, False, True, True]
    s = pc.stats()["memory"]
    assert s == {**s, "blocks": 3, "bytes": 384, "evictions": 3}
    assert float(pc.get_memory("c").array[0, 0, 0, 0, 0]) == ord("c")   # the first array is kept

    # A block larger than the whole budget is not cached (and evicts nothing).
    pc.put_memory("big", [1, 2, 3, 4], np.zeros((1, 2, 1, 4, 64), np.float32))
    assert not pc.has_memory("big") and pc.stats()["memory"]["blocks"] == 3


def test_memory_tier_budget_through_sessions(model, managers, tmp_path):
    per_block = mem_block_bytes(model)
    mgr = managers(tmp_path, cache_memory_bytes=4 * per_block)
    p1, p2 = ids(2 * B, seed=7), ids(2 * B, seed=8)
    run(mgr, open_sid(mgr), p1 + [5])
    run(mgr, open_sid(mgr), p2 + [5])
    assert tier(mgr, "memory")["blocks"] == 4
    assert run(mgr, open_sid(mgr), p1 + [6]).figures.cache_tokens_memory == 2 * B    # refreshes p1
    run(mgr, open_sid(mgr), ids(2 * B, seed=9) + [5])                                # evicts p2's
    m = tier(mgr, "memory")
    assert m["blocks"] == 4 and m["bytes"] == 4 * per_block and m["evictions"] == 2
    assert run(mgr, open_sid(mgr), p1 + [7]).figures.cache_tokens_memory == 2 * B
    assert run(mgr, open_sid(mgr), p2 + [7]).figures.cache_tokens_memory == 0


# ---- age expiry --------------------------------------------------------------------------------
def test_age_expiry_with_injected_clock(model, managers, tmp_path):
    clock = FakeClock()
    mgr = managers(tmp_path, cache_max_age_s=3600, clock=clock)
    regular = ids(3 * B, seed=10)
    pinned = ids(2 * B + 4, seed=11)
    r = open_sid(mgr)
    run(mgr, r, regular + [9])
    mgr.close(r)                                   # spills 3 blocks
    p = open_sid(mgr, kind="pinned")
    run(mgr, p, pinned)                            # saves 2 pinned blocks (+ a private tail)
    assert mgr.wait_for_saves()
    regular_keys = set(mgr.store.keys_for(regular, None))
    pinned_keys = set(mgr.store.keys_for(pinned[:2 * B], None))
    assert block_files(tmp_path) == regular_keys | pinned_keys

    clock.advance(3500)
    assert mgr.cache_gc() == {"expired": 0, "evicted": 0}
    assert block_files(tmp_path) == regular_keys | pinned_keys

    clock.advance(200)                             # 3700 s since the writes
    mgr.cache_gc()
    d = tier(mgr, "disk")
    assert d["expirations"] == 3 and d["evictions"] == 0
    assert block_files(tmp_path) == pinned_keys
    assert d["blocks"] == 2 and d["bytes"] == d["pinned_bytes"] > 0
    assert not any(mgr.prefix.has_disk(k) for k in regular_keys)
    assert mgr.cache_gc() == {"expired": 0, "evicted": 0}     # pinned ones never expire


def test_age_counts_from_last_use_not_from_write(model, managers, tmp_path):
    clock = FakeClock()
    prompt = ids(2 * B, seed=12)
    mgr = managers(tmp_path, cache_max_age_s=3600, clock=clock)
    s = open_sid(mgr)
    run(mgr, s, prompt + [4])
    mgr.close(s)
    mgr.shutdown()

    clock.advance(3000)
    mgr2 = managers(tmp_path, cache_max_age_s=3600, clock=clock)
    assert run(mgr2, open_sid(mgr2), prompt + [5]).figures.cache_tokens_disk == 2 * B   # a use at +3000
    clock.advance(1000)                              # +4000 since the write, +1000 since the use
    assert mgr2.cache_gc()["expired"] == 0
    assert mgr2.store.keys_for(prompt, None)[0] in block_files(tmp_path)
    clock.advance(2700)
    assert mgr2.cache_gc()["expired"] == 2
    assert block_files(tmp_path) == set()
    assert tier(mgr2, "disk")["expirations"] == 2


# ---- pinned blocks -----------------------------------------------------------------------------
def test_pinned_blocks_survive_clear_eviction_and_expiry(model, managers, tmp_path):
    clock = FakeClock()
    kw = dict(cache_disk_bytes=1, cache_max_age_s=60, clock=clock)   # everything unpinned must go
    mgr = managers(tmp_path, **kw)
    pinned = ids(4 * B + 7, seed=13)
    p = open_sid(mgr, kind="pinned")
    first = run(mgr, p, pinned)
    for seed in (14, 15):
        s = open_sid(mgr)
        run(mgr, s, ids(2 * B, seed=seed) + [3])
        mgr.close(s)
    assert mgr.wait_for_saves()
    pinned_keys = set(mgr.store.keys_for(pinned[:4 * B], None))
    assert pinned_keys <= block_files(tmp_path)

    # Eviction: the budget is one byte, unpinned blocks go, pinned ones stay.
    mgr.cache_gc()
    assert block_files(tmp_path) == pinned_keys
    d = tier(mgr, "disk")
    assert d["evictions"] == 4 and d["blocks"] == 4 and d["pinned_bytes"] == d["bytes"] > 1

    # Expiry.
    clock.advance(10 * 60)
    mgr.cache_gc()
    assert block_files(tmp_path) == pinned_keys and tier(mgr, "disk")["expirations"] == 0

    # Clear.
    assert mgr.clear_cache() == 0
    assert block_files(tmp_path) == pinned_keys
    m, d = tier(mgr, "memory"), tier(mgr, "disk")
    assert m["blocks"] == m["bytes"] == 0
    assert d["blocks"] == 4 and d["pinned_bytes"] == d["bytes"]

    # Resume from disk in a new manager (whose startup sweep is just as strict).
    mgr.shutdown()
    clock.advance(10 * 60)
    mgr2 = managers(tmp_path, **kw)
    assert block_files(tmp_path) == pinned_keys
    mgr2.open(p)
    more = pinned + first.token_ids + ids(3, seed=16)
    r = run(mgr2, p, more)
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    assert r.figures.prefilled_tokens == len(more) - (len(pinned) + len(first.token_ids) - 1)
    assert r.token_ids == scratch_tokens(model, more)


# ---- disk budget and the janitor ---------------------------------------------------------------
def _disk_block_bytes(mgr: SessionManager) -> int:
    sizes = {mgr.store.size(k) for k in block_files(mgr.state_dir)}
    assert len(sizes) == 1, sizes
    return sizes.pop()


def _fill(mgr: SessionManager, seeds: range, blocks: int = 3) -> None:
    for seed in seeds:
        s = open_sid(mgr)
        run(mgr, s, ids(blocks * B, seed=seed) + [7], n=1)
        mgr.close(s)


def test_disk_budget_after_gc(model, managers, tmp_path):
    probe = managers(tmp_path / "probe")
    _fill(probe, range(100, 101), blocks=1)
    assert probe.wait_for_saves()
    size = _disk_block_bytes(probe)

    budget = 5 * size + size // 2
    mgr = managers(tmp_path / "state", cache_disk_bytes=budget)
    _fill(mgr, range(200, 208))                      # 24 blocks written
    assert mgr.wait_for_saves()
    mgr.cache_gc()
    d = tier(mgr, "disk")
    assert d["bytes"] <= budget + size and d["bytes"] == len(block_files(mgr.state_dir)) * size
    assert d["evictions"] >= 24 - 6
    # The most recently written survive (their last use is the newest).
    assert set(mgr.store.keys_for(ids(3 * B, seed=207), None)) <= block_files(mgr.state_dir)


def test_janitor_thread_corrects_an_overrun_by_itself(model, managers, tmp_path):
    """No cache_gc() call: the janitor thread alone brings the disk tier back under its budget.
    (How soon is a benchmark figure, not a test assertion: a bound fails on a loaded machine.)"""
    probe = managers(tmp_path / "probe")
    _fill(probe, range(100, 101), blocks=1)
    assert probe.wait_for_saves()
    size = _disk_block_bytes(probe)

    budget = 4 * size
    mgr = managers(tmp_path / "state", cache_disk_bytes=budget)
    _fill(mgr, range(300, 306))                      # 18 blocks, no cache_gc() anywhere
    assert mgr.wait_for_saves()
    written = time.monotonic()
    seen = []
    while True:
        d = tier(mgr, "disk")
        seen.append(d["bytes"])
        # Both: under load the spills may land after wait_for_saves, and bytes are small then too.
        if (d["bytes"] <= budget + size and d["evictions"] >= 18 - 5) or time.monotonic() - written > 60:
            break
        time.sleep(0.02)
    assert d["bytes"] <= budget + size, seen
    assert d["evictions"] >= 18 - 5
    assert len(block_files(mgr.state_dir)) * size == d["bytes"]


def test_many_writers_never_leave_the_disk_over_budget(model, managers, tmp_path):
    """Several threads each running and closing sessions; after they stop and one janitor pass the
    budget holds, and the index agrees with the folder."""
    probe = managers(tmp_path / "probe")
    _fill(probe, range(100, 101), blocks=1)
    assert probe.wait_for_saves()
    size = _disk_block_bytes(probe)
    budget = 6 * size
    mgr = managers(tmp_path / "state", cache_disk_bytes=budget)
    errors: list[BaseException] = []

    def worker(base: int) -> None:
        try:
            _fill(mgr, range(base, base + 4), blocks=2)
        except BaseException as exc:    # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(1000 + 10 * i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert mgr.wait_for_saves()
    mgr.cache_gc()
    d = tier(mgr, "disk")
    assert d["bytes"] <= budget + size
    assert block_files(mgr.state_dir) == set(mgr.prefix._disk)     # the index agrees with the folder


# ---- crash consistency -------------------------------------------------------------------------
def test_block_written_but_never_indexed_is_found_after_restart(model, managers, tmp_path):
    prompt = ids(3 * B + 2, seed=20)
    runner = Runner(model)
    fresh = runner.new_cache()
    runner.forward(fresh, prompt)

    mgr = managers(tmp_path)
    mgr.open(None)
    keys = mgr.store.keys_for(prompt, None)
    # A save wrote the first two blocks (atomically) and the process died before any index update.
    for i in range(2):
        BlockStore(tmp_path, mgr.shape, B).write(keys[i], prompt[i * B:(i + 1) * B], fresh.export(i * B, (i + 1) * B))
    # Crash leftovers: an interrupted write's temp file, and garbage named like blocks.
    blocks = tmp_path / "blocks"
    tmp_file = blocks / keys[2][:2] / f".{keys[2]}.kvb.4242.tmp"
    tmp_file.parent.mkdir(parents=True, exist_ok=True)
    tmp_file.write_bytes(b"half a block")
    garbage = [blocks / "ab" / ("ab" + "0" * 38 + ".kvb"), blocks / keys[2][:2] / f"{keys[2]}.kvb"]
    for g in garbage:
        g.parent.mkdir(parents=True, exist_ok=True)
        g.write_bytes(b"" if g.stem == keys[2] else os.urandom(300))
    mgr.shutdown()

    mgr2 = managers(tmp_path)
    rep = mgr2.startup_report
    assert rep["temp_files"] >= 1 and rep["stray_blocks"] == 2
    assert not tmp_file.exists() and [g.name for g in garbage if g.exists()] == [], rep
    assert block_files(tmp_path) == set(keys[:2])
    d = tier(mgr2, "disk")
    assert d["blocks"] == 2 and d["bytes"] == sum(mgr2.store.size(k) for k in keys[:2])
    assert all(mgr2.prefix.has_disk(k) for k in keys[:2])

    r = run(mgr2, open_sid(mgr2), prompt)
    assert r.figures.cache_tokens_disk == 2 * B and r.figures.prefilled_tokens == B + 2
    assert tier(mgr2, "disk")["hits"] == 2
    assert r.token_ids == scratch_tokens(model, prompt)


@pytest.mark.parametrize("where", ["cd/notakey.kvb", "garbage.kvb"])
def test_garbage_kvb_files_anywhere_in_the_block_folder_are_removed_at_startup(model, managers, tmp_path, where):
    mgr = managers(tmp_path)
    mgr.shutdown()
    garbage = tmp_path / "blocks" / where
    garbage.parent.mkdir(parents=True, exist_ok=True)
    garbage.write_bytes(os.urandom(300))
    mgr2 = managers(tmp_path)
    assert not garbage.exists(), mgr2.startup_report


def test_damaged_block_is_a_miss_and_leaves_the_index_consistent(model, managers, tmp_path):
    prompt = ids(3 * B + 1, seed=21)
    mgr = managers(tmp_path)
    s = open_sid(mgr)
    run(mgr, s, prompt)
    mgr.close(s)
    mgr.shutdown()
    keys = BlockStore(tmp_path, mgr.shape, B).keys_for(prompt, None)
    path = BlockStore(tmp_path, mgr.shape, B).path(keys[1])
    path.write_bytes(path.read_bytes()[:-100])        # a valid header, a short payload

    mgr2 = managers(tmp_path)
    assert mgr2.prefix.has_disk(keys[1])               # looks like a block until it is read
    r = run(mgr2, open_sid(mgr2), prompt)
    assert r.figures.cache_tokens_disk == B and r.figures.prefilled_tokens == 2 * B + 1
    assert r.token_ids == scratch_tokens(model, prompt)
    assert not path.exists() and not mgr2.prefix.has_disk(keys[1])
    assert tier(mgr2, "disk")["blocks"] == len(block_files(tmp_path))


# ---- concurrency -------------------------------------------------------------------------------
def test_pinned_sessions_sharing_blocks_while_one_is_deleted(model, managers, tmp_path):
    shared = ids(6 * B, seed=30)
    pa, pb = shared + ids(B + 3, seed=31), shared + ids(B + 5, seed=32)
    mgr = managers(tmp_path)
    a, b = open_sid(mgr, kind="pinned"), open_sid(mgr, kind="pinned")
    run(mgr, a, pa)
    rb = run(mgr, b, pb)
    assert rb.figures.cache_tokens_memory == 6 * B
    assert mgr.wait_for_saves()
    shared_keys = mgr.store.keys_for(shared, None)
    a_only = mgr.store.keys_for(pa, None)[6:]
    assert set(shared_keys) | set(a_only) <= block_files(tmp_path)

    b_more = pb + rb.token_ids + ids(20, seed=33)
    in_flight, deleted = threading.Event(), threading.Event()
    out: dict[str, object] = {}

    def generate_b() -> None:
        try:
            for ev in mgr.generate_tokens(b, b_more, greedy(24)):
                if isinstance(ev, TextChunk) and not in_flight.is_set():
                    in_flight.set()
                    assert deleted.wait(10)            # A is deleted while B is mid-generation
                if isinstance(ev, GenerationResult):
                    out["result"] = ev
        except BaseException as exc:    # noqa: BLE001 - reported below
            out["error"] = exc
    t = threading.Thread(target=generate_b)
    t.start()
    assert in_flight.wait(10)
    mgr.delete(a)
    deleted.set()
    t.join(30)
    assert "error" not in out, out.get("error")
    res = out["result"]
    assert res.token_ids == scratch_tokens(model, b_more, 24)
    assert mgr.wait_for_saves()

    files = block_files(tmp_path)
    assert set(shared_keys) <= files                      # still B's
    assert not (set(a_only) & files)                      # A's own blocks went with A
    assert not (tmp_path / "sessions" / f"{a}.json").exists()
    assert all(mgr.prefix.has_disk(k) for k in shared_keys)

    # B keeps working, and resumes from disk afterwards.
    b_next = b_more + res.token_ids + ids(4, seed=34)
    assert run(mgr, b, b_next).figures.prefilled_tokens == len(b_next) - (len(b_more) + len(res.token_ids) - 1)
    assert mgr.wait_for_saves()
    mgr.shutdown()
    mgr2 = managers(tmp_path)
    mgr2.open(b)
    info = mgr2.info(b)
    assert info.kind.value == "pinned" and info.kv_bytes_disk > 0
    b_last = b_next + ids(5, seed=35)
    r = run(mgr2, b, b_last)
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    assert r.figures.prefilled_tokens < 2 * B
    assert r.token_ids == scratch_tokens(model, b_last)


def _manifest_blocks(state: Path, sid: str) -> set[str]:
    return set(json.loads((state / "sessions" / f"{sid}.json").read_text())["blocks"])


def test_delete_racing_another_pinned_sessions_first_save_keeps_the_shared_blocks(model, managers, tmp_path,
                                                                                  monkeypatch):
    shared = ids(4 * B, seed=70)
    mgr = managers(tmp_path)
    a, b = open_sid(mgr, kind="pinned"), open_sid(mgr, kind="pinned")
    run(mgr, a, shared + ids(5, seed=71))
    assert mgr.wait_for_saves()
    keys = mgr.store.keys_for(shared, None)
    assert set(keys) <= block_files(tmp_path)
    pb = shared + ids(7, seed=72)
    real_remove, hooked = mgr.store.remove, []

    started: list[threading.Thread] = []

    def remove(key: str) -> None:
        if not started:      # the interleaving: B generates and saves right as A's blocks go
            t = threading.Thread(target=lambda: hooked.append(run(mgr, b, pb)))
            started.append(t)
            t.start()
            t.join(0.5)      # it must not be able to reference a block that is being removed
        real_remove(key)
    monkeypatch.setattr(mgr.store, "remove", remove)
    mgr.delete(a)
    started[0].join()
    assert mgr.wait_for_saves()
    monkeypatch.undo()
    assert hooked and hooked[0].figures.cache_tokens_memory == 4 * B
    assert _manifest_blocks(tmp_path, b) <= block_files(tmp_path)
    mgr.shutdown()
    mgr2 = managers(tmp_path)
    mgr2.open(b)
    r = run(mgr2, b, pb + hooked[0].token_ids + [9])
    assert r.figures.fallback_reason is None and r.figures.resume == "disk"


def test_janitor_racing_a_pinned_save_keeps_the_pinned_blocks(model, managers, tmp_path, monkeypatch):
    clock = FakeClock()
    mgr = managers(tmp_path, cache_max_age_s=60, clock=clock)
    prompt = ids(3 * B + 2, seed=73)
    r = open_sid(mgr)
    run(mgr, r, prompt)
    mgr.close(r)
    assert mgr.wait_for_saves()
    assert set(mgr.store.keys_for(prompt, None)) == block_files(tmp_path)
    p = open_sid(mgr, kind="pinned")
    pp = prompt + ids(3, seed=74)
    real_remove, hooked = mgr.store.remove, []

    started: list[threading.Thread] = []

    def remove(key: str) -> None:
        if not started:      # the janitor decided the block is unpinned; a pinned save races it
            t = threading.Thread(target=lambda: hooked.append(run(mgr, p, pp)))
            started.append(t)
            t.start()
            t.join(0.5)
        real_remove(key)
    monkeypatch.setattr(mgr.store, "remove", remove)
    clock.advance(120)          # the spilled blocks are past max age
    mgr.cache_gc()
    started[0].join()
    assert mgr.wait_for_saves()
    monkeypatch.undo()
    assert hooked and hooked[0].figures.cache_tokens_memory == 3 * B
    assert _manifest_blocks(tmp_path, p) <= block_files(tmp_path)


# ---- temporary sessions ------------------------------------------------------------------------
def _tiers(mgr: SessionManager) -> tuple:
    c = mgr.stats()["cache"]
    return (c["memory"]["blocks"], c["memory"]["bytes"], c["disk"]["blocks"], c["disk"]["bytes"])


def test_temporary_session_reads_memory_tier_blocks_but_adds_none(model, managers, tmp_path):
    prompt = ids(3 * B, seed=40)
    mgr = managers(tmp_path)
    r = open_sid(mgr)
    run(mgr, r, prompt + [3])
    mgr.close(r)
    assert mgr.wait_for_saves()
    before, files = _tiers(mgr), block_files(tmp_path)
    assert before[0] == 3 and before[2] == 3

    t = open_sid(mgr, kind="temporary")
    longer = prompt + ids(3 * B + 2, seed=41)            # 3 shared blocks + 3 new full ones
    res = run(mgr, t, longer, n=8)
    assert res.figures.cache_tokens_memory == 3 * B
    res2 = run(mgr, t, longer + res.token_ids + ids(B, seed=42), n=4)   # a second turn
    assert res2.figures.reused_tokens > 0
    assert _tiers(mgr) == before
    mgr.close(t)
    assert mgr.wait_for_saves()
    mgr.cache_gc()
    assert _tiers(mgr) == before and block_files(tmp_path) == files
    assert not (tmp_path / "sessions" / f"{t}.json").exists()


def test_temporary_session_reading_the_disk_tier_adds_nothing_to_memory(model, managers, tmp_path):
    prompt = ids(3 * B, seed=43)
    mgr = managers(tmp_path)
    r = open_sid(mgr)
    run(mgr, r, prompt + [3])
    mgr.close(r)
    mgr.shutdown()

    mgr2 = managers(tmp_path)
    before, files = _tiers(mgr2), block_files(tmp_path)
    assert before[0] == 0 and before[2] == 3
    t = open_sid(mgr2, kind="temporary")
    res = run(mgr2, t, prompt + ids(2 * B, seed=44))
    assert res.figures.cache_tokens_disk == 3 * B
    mgr2.close(t)
    assert mgr2.wait_for_saves()
    assert block_files(tmp_path) == files
    assert _tiers(mgr2) == before


# ---- regular sessions spill on close -----------------------------------------------------------
def test_regular_session_close_spills_and_a_new_manager_reuses_them(model, managers, tmp_path):
    prompt = ids(5 * B + 9, seed=50)
    mgr = managers(tmp_path)
    s = open_sid(mgr)
    first = run(mgr, s, prompt)
    assert mgr.wait_for_saves()
    assert tier(mgr, "disk")["blocks"] == 0 and block_files(tmp_path) == set()   # memory only so far
    mgr.close(s)
    assert mgr.wait_for_saves()
    keys = mgr.store.keys_for(prompt, None)
    assert len(keys) == 5 and block_files(tmp_path) == set(keys)
    assert tier(mgr, "disk")["blocks"] == 5 and all(mgr.prefix.has_disk(k) for k in keys)
    mgr.shutdown()

    mgr2 = managers(tmp_path)
    assert tier(mgr2, "disk")["blocks"] == 5
    follow = prompt + first.token_ids + ids(6, seed=51)
    r = run(mgr2, open_sid(mgr2), follow)
    assert r.figures.cache_tokens_disk == 5 * B and r.figures.cache_tokens_memory == 0
    assert r.figures.resume == "disk" and r.figures.reused_tokens == 5 * B
    assert r.token_ids == scratch_tokens(model, follow)
    assert tier(mgr2, "memory")["blocks"] >= 5          # read blocks are promoted, then published


def test_float16_store_disk_tier_round_trip(model, managers, tmp_path):
    """With the float16 KV store the disk tier holds half-size blocks, and a new manager reuses
    them (as float16 roundings of the KV computed in memory)."""
    prompt = ids(5 * B + 9, seed=52)
    lossless = managers(tmp_path / "lossless")
    s0 = open_sid(lossless)
    run(lossless, s0, prompt)
    lossless.close(s0)
    mgr = managers(tmp_path / "half", kv_store="float16")
    s = open_sid(mgr)
    first = run(mgr, s, prompt)
    want = mgr._open[s].cache.export(0, 5 * B)
    mgr.close(s)
    assert lossless.wait_for_saves() and mgr.wait_for_saves()
    keys = mgr.store.keys_for(prompt, None)
    assert set(keys).isdisjoint(lossless.store.keys_for(prompt, None))    # separate namespaces
    half = sum(mgr.store.size(k) for k in keys)
    full = sum(lossless.store.size(k) for k in lossless.store.keys_for(prompt, None))
    assert 0.45 * full < half < 0.55 * full
    mgr.shutdown()

    mgr2 = managers(tmp_path / "half", kv_store="float16")
    s2 = open_sid(mgr2)
    r = run(mgr2, s2, prompt + first.token_ids + ids(6, seed=53))
    assert r.figures.cache_tokens_disk == 5 * B and r.figures.resume == "disk"
    got = mgr2._open[s2].cache.export(0, 5 * B)
    assert np.array_equal(got, want.astype(np.float16).astype(np.float32))


def test_evicted_regular_session_spills_to_the_disk_tier(model, managers, tmp_path):
    prompt = ids(4 * B + 1, seed=52)
    mgr = managers(tmp_path, memory_budget_bytes=1)     # every idle regular session is evicted
    run(mgr, open_sid(mgr), prompt)
    run(mgr, open_sid(mgr), ids(B + 1, seed=53))
    assert mgr.wait_for_saves()
    assert set(mgr.store.keys_for(prompt, None)) <= block_files(tmp_path)
    assert mgr.stats()["evictions"] >= 1


# ---- CLI ---------------------------------------------------------------------------------------
def _cli(tiny, state: Path, action: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "engine", "cache", action, "--state-dir", str(state),
                           "--model", str(tiny[0])], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_cli_cache_stats_gc_clear(tiny, model, tmp_path):
    # The CLI runs with the default block size, so the state is made with it too.
    mgr = SessionManager(model, tmp_path)
    bt = mgr.block_tokens
    try:
        r = mgr.open(None).session_id
        run(mgr, r, ids(bt + 3, seed=60), n=1)
        mgr.close(r)                                    # 1 unpinned block
        p = mgr.open(None, kind="pinned").session_id
        run(mgr, p, ids(2 * bt + 3, seed=61), n=1)      # 2 pinned blocks
        assert mgr.wait_for_saves()
        pinned_keys = set(mgr.store.keys_for(ids(2 * bt + 3, seed=61), None))
    finally:
        mgr.shutdown()
    assert len(block_files(tmp_path)) == 3

    stats = _cli(tiny, tmp_path, "stats")
    d = stats["cache"]["disk"]
    assert stats["block_tokens"] == bt and d["blocks"] == 3 and 0 < d["pinned_bytes"] < d["bytes"]
    assert set(stats["cache"]["memory"]) >= {"bytes", "blocks", "hits", "misses", "evictions"}
    assert isinstance(stats["startup"], dict)

    gc = _cli(tiny, tmp_path, "gc")
    assert gc["expired"] == 0 and gc["evicted"] == 0 and "startup" in gc

    from engine.cli import main
    assert main(["cache", "clear", "--state-dir", str(tmp_path), "--model", str(tiny[0])]) == 0
    assert block_files(tmp_path) == pinned_keys

    stats = _cli(tiny, tmp_path, "stats")
    assert stats["cache"]["disk"]["blocks"] == 2
    assert stats["cache"]["disk"]["pinned_bytes"] == stats["cache"]["disk"]["bytes"]
    clear = _cli(tiny, tmp_path, "clear")
    assert clear == {"removed_blocks": 0}
    assert block_files(tmp_path) == pinned_keys


# ---- settings reach the cache ------------------------------------------------------------------
def test_gui_settings_reach_the_prefix_cache(tiny, tmp_path):
    from app.gui.backend import open_engine
    from app.gui.settings import Settings
    engine = open_engine(tiny[0], tmp_path, Settings(provider="cpu", disk_budget_mb=7, cache_max_age_days=3,
                                                     kv_store="float16"))
    try:
        assert engine.prefix.disk_budget == 7 * 1024 * 1024
        assert engine.prefix.max_age_s == 3 * 86400
        assert engine.stats()["kv_store_dtype"] == "float16"
    finally:
        engine.shutdown()
