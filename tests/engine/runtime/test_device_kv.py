"""KV on the device, run for real on a CPU: `KVCache(device=STAGED)` keeps its KV in
OrtValues that are separate allocations (copied to and from host arrays exactly as on CUDA), so the
device code paths run here: a pinned save copies the KV in the writer thread from a snapshot while
the chat goes on generating; writes that would overwrite a pending snapshot's positions wait for
it; resume and host changes upload into the buffers already bound (same OrtValues, same binding);
closing a temporary chat frees its device buffers.

Uses 16-token blocks (as test_sessions.py): 40 prompt tokens + 8 generated = 47 positions.
"""
from __future__ import annotations

import gc
import json
import threading
import time
import uuid
import weakref
from pathlib import Path

import numpy as np
import pytest

from engine.api import SamplingParams, SessionKind
from engine.generation.generate import Generator, collect
from engine.kvstore.kvfile import read_kv_file
from engine.runtime import kvcache as kvcache_mod
from engine.runtime.kvcache import STAGED, KVCache, KVSnapshot, SnapshotLost, live_device_buffers
from engine.runtime.model import KVLayout
from engine.runtime.runner import Runner
from engine.sessions.manager import SessionManager

B = 16
WRITER = "amber-kv-writer"


def greedy(n: int = 8) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)


def prompt(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(100 + seed).integers(3, 420, n)]


P1, EXTRA, EXTRA2 = prompt(40, 1), prompt(12, 2), prompt(9, 3)


def sid() -> str:
    return str(uuid.uuid4())


def wait_until(cond, what: str, limit: float = 60.0) -> None:
    """Polls `cond` (a state another thread reaches); fails, never hangs, if it never does."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


class Transfers:
    """Records (thread name, kind) of every KV copy (KVCache.transfer_hook)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, kind: str, nbytes: int) -> None:
        with self._lock:
            self.log.append((threading.current_thread().name, kind))

    def on(self, thread: str) -> list[str]:
        with self._lock:
            return [k for t, k in self.log if t == thread]

    def clear(self) -> None:
        with self._lock:
            self.log.clear()


@pytest.fixture
def transfers(monkeypatch) -> Transfers:
    rec = Transfers()
    monkeypatch.setattr(KVCache, "transfer_hook", rec)
    return rec


@pytest.fixture
def managers(tiny_model, tmp_path, monkeypatch):
    """managers(device=STAGED, state_dir=...) -> a SessionManager whose caches use `device`."""
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    made: list[SessionManager] = []

    def make(device: str = STAGED, state_dir: Path | None = None) -> SessionManager:
        m = SessionManager(tiny_model, state_dir or tmp_path / "state", block_tokens=B)
        m.generator.runner.kv_device = device
        made.append(m)
        return m
    yield make
    for m in made:
        m.shutdown(timeout=5)


class Gate:
    """Holds the writer thread (white-box, as a busy disk would) until opened; `started` is set
    once the writer reached it, i.e. every job queued before it is done."""

    def __init__(self, m: SessionManager) -> None:
        self.started, self._open = threading.Event(), threading.Event()
        m._writer.submit(self._hold)

    def _hold(self) -> None:
        self.started.set()
        self._open.wait(120)

    def open(self) -> None:
        self._open.set()


def saved_kv(m: SessionManager, state: Path, session_id: str) -> tuple[list[int], np.ndarray]:
    """What the manifest on disk names: its tokens and their KV read back from blocks and tail."""
    man = json.loads((state / "sessions" / f"{session_id}.json").read_text())
    tokens, parts = man["tokens"], []
    for i, key in enumerate(man["blocks"]):
        parts.append(m.store.read(key, tokens[i * B:(i + 1) * B]))
    tail_toks = tokens[len(man["blocks"]) * B:]
    if tail_toks:
        parts.append(read_kv_file(state / "tails" / man["tail"], m.shape, tail_toks))
    return tokens, np.concatenate(parts, axis=3)


def cache_of(m: SessionManager, session_id: str) -> KVCache:
    cache = m._open[session_id].cache     # white-box: the KV contents
    assert cache is not None
    return cache


# ---- the cache alone ---------------------------------------------------------------------------
LAYOUT = KVLayout(n_layers=2, kv_heads=2, head_dim=4, dtype=np.float32,
                  past_names=[("pk0", "pv0"), ("pk1", "pv1")], present_names=[("k0", "v0"), ("k1", "v1")],
                  shared_buffer=True)


def filled(device: str, n: int = 40, seed: int = 0) -> tuple[KVCache, np.ndarray]:
    cache = KVCache(LAYOUT, device=device)
    block = np.random.default_rng(seed).standard_normal((2, 2, 2, n, 4)).astype(np.float32)
    cache.append_block(block, list(range(n)))
    cache.ort_values()          # on a device: uploaded, the host staging dropped
    return cache, block


@pytest.mark.parametrize("device", ["cpu", STAGED])
def test_a_snapshot_outlives_growth_and_clear(device) -> None:
    """Reallocation and clear never wait: the snapshot keeps the old buffers until it is copied."""
    cache, block = filled(device)
    snap = cache.snapshot()
    cache.reserve(5000)
    cache.clear()
    assert cache.capacity == 0 and cache.binding is None
    np.testing.assert_array_equal(snap.export(0, 40), block)
    np.testing.assert_array_equal(snap.export(16, 40), block[:, :, :, 16:])
    snap.release()


@pytest.mark.parametrize("device", ["cpu", STAGED])
def test_overwriting_a_pending_snapshot_waits_for_its_copy(device) -> None:
    """Truncate + new KV below the snapshot's end (an edit): the write waits until the copy is made;
    writes past the end (a normal decode step) never wait."""
    cache, block = filled(device)
    snap = cache.snapshot()
    cache.append_block(np.ones((2, 2, 2, 3, 4), np.float32), [1, 2, 3])    # past the end: no wait
    cache.ort_values()
    assert cache.waiting == 0
    cache.truncate(20)
    done = threading.Event()

    def edit() -> None:
        cache.append_block(np.full((2, 2, 2, 10, 4), 7.0, np.float32), list(range(10)))
        cache.ort_values()
        done.set()
    t = threading.Thread(target=edit)
    t.start()
    wait_until(lambda: cache.waiting == 1, "the edit waits for the snapshot")
    assert not done.is_set()
    np.testing.assert_array_equal(snap.export(0, 40), block)    # intact
    snap.release()
    t.join(60)
    assert done.is_set()
    got = cache.export(0, 30)
    np.testing.assert_array_equal(got[:, :, :, :20], block[:, :, :, :20])
    assert (got[:, :, :, 20:] == 7.0).all()


def test_a_snapshot_left_too_long_is_dropped_not_waited_for_forever(monkeypatch) -> None:
    monkeypatch.setattr(kvcache_mod, "SNAPSHOT_WAIT_S", 0.05)
    cache, _ = filled(STAGED)
    snap = cache.snapshot()
    cache.truncate(10)
    cache.append_block(np.zeros((2, 2, 2, 5, 4), np.float32), list(range(5)))
    cache.ort_values()        # went ahead after the wait
    with pytest.raises(SnapshotLost, match="changed before it was copied"):
        snap.export(0, 40)


OPS = ["append", "truncate", "snapshot", "check", "upload", "download", "reserve", "clear"]
WEIGHTS = [0.3, 0.12, 0.15, 0.12, 0.12, 0.07, 0.07, 0.05]


def _check_one(snaps: list[tuple[KVSnapshot, np.ndarray]], i: int, outcomes: dict[str, int], seed: int) -> None:
    snap, want = snaps.pop(i % len(snaps))
    try:
        got = snap.export(0, snap.n)
    except SnapshotLost:
        outcomes["lost"] += 1
        return
    finally:
        snap.release()
    np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")
    outcomes["exact"] += 1


@pytest.mark.parametrize("device", ["cpu", STAGED])
def test_a_snapshot_exports_what_it_saw_or_says_it_cannot(device, monkeypatch) -> None:
    """300 seeded random sequences of cache operations (one thread: a conflicting write waits
    briefly, then drops the snapshot): each snapshot exports exactly the KV at the time it was
    taken, or raises SnapshotLost; never other KV. The cache itself always holds what was written."""
    monkeypatch.setattr(kvcache_mod, "SNAPSHOT_WAIT_S", 0.001)
    outcomes = {"exact": 0, "lost": 0}
    for seed in range(300):
        rng = np.random.default_rng(seed)
        cache = KVCache(LAYOUT, device=device)
        ref = np.zeros((2, 2, 2, 0, 4), np.float32)
        snaps: list[tuple[KVSnapshot, np.ndarray]] = []
        for _ in range(30):
            op = rng.choice(OPS, p=WEIGHTS)
            if op == "append":
                n = int(rng.integers(1, 40))
                if len(cache) + n <= 300:
                    block = rng.standard_normal((2, 2, 2, n, 4)).astype(np.float32)
                    cache.append_block(block, list(range(n)))
                    ref = np.concatenate([ref, block], axis=3)
            elif op == "truncate":
                cache.truncate(int(rng.integers(0, len(cache) + 1)))
                ref = ref[:, :, :, :len(cache)]
            elif op == "reserve":
                cache.reserve(int(rng.integers(0, 600)))
            elif op == "upload":
                cache.ort_values()
            elif op == "download":
                assert len(cache.keys) == 2        # on a device: a download into host staging
            elif op == "clear":
                cache.clear()
                ref = ref[:, :, :, :0]
            elif op == "snapshot":
                snaps.append((cache.snapshot(), ref.copy()))
            elif op == "check" and snaps:
                _check_one(snaps, int(rng.integers(0, 10)), outcomes, seed)
        while snaps:
            _check_one(snaps, 0, outcomes, seed)
        np.testing.assert_array_equal(cache.export(0, len(cache)), ref, err_msg=f"seed {seed}")
    assert outcomes["exact"] > 100 and outcomes["lost"] > 10, outcomes     # both paths were taken


# ---- the runner over a staged cache ------------------------------------------------------------
def run_steps(runner: Runner, cache: KVCache, first: list[int], n: int) -> tuple[list[int], np.ndarray]:
    logits = runner.forward(cache, first)
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        logits = runner.forward(cache, [out[-1]])
    return out, logits


def test_staged_cache_generates_what_the_cpu_cache_does(tiny_model) -> None:
    runner = Runner(tiny_model)
    cpu, staged = runner.new_cache(), KVCache(tiny_model.kv, device=STAGED)
    before = live_device_buffers()
    a, la = run_steps(runner, cpu, P1, 8)
    b, lb = run_steps(runner, staged, P1, 8)
    assert a == b and np.array_equal(la, lb)
    assert live_device_buffers() == before + 2 * tiny_model.kv.n_layers
    assert staged._keys is None          # between steps the device copy is the only one
    np.testing.assert_array_equal(staged.export(0, len(staged)), cpu.export(0, len(cpu)))


def test_loading_into_bound_buffers_keeps_them_and_the_binding(tiny_model, transfers) -> None:
    """KV put on the host (an edit reusing a shared prefix, a resume) goes up into the same device
    buffers, once; the binding stays; the continuation is a fresh prefill's."""
    runner = Runner(tiny_model)
    runner.kv_device = STAGED
    cache = runner.new_cache()
    run_steps(runner, cache, P1, 4)
    bound, binding = list(cache._ort_values or []), cache.binding
    prefix = cache.export(0, 32)             # two blocks, as the prefix cache would hold them
    cache.truncate(0)
    cache.append_block(prefix[:, :, :, :16], P1[:16])
    cache.append_block(prefix[:, :, :, 16:], P1[16:32])
    transfers.clear()
    tokens, _ = run_steps(runner, cache, P1[32:], 8)
    assert cache._ort_values is not None
    assert all(x is y for pair_a, pair_b in zip(cache._ort_values, bound, strict=True)
               for x, y in zip(pair_a, pair_b, strict=True))
    assert cache.binding is binding
    assert transfers.on("MainThread").count("upload") == 2 * tiny_model.kv.n_layers    # once per buffer
    want, _ = run_steps(Runner(tiny_model), KVCache(tiny_model.kv), P1, 8)     # a fresh prefill, on CPU
    assert tokens == want


# ---- sessions ----------------------------------------------------------------------------------
def test_pinned_save_during_generation_copies_in_the_writer(tiny_model, managers, tmp_path, transfers):
    """The writer is held while the chat generates two more turns; the first save, copied later in
    the writer, holds the KV as it was when taken; the generating thread never copied the KV; the
    resumed chat continues as one that never stopped, without re-prefilling."""
    state = tmp_path / "state"
    m = managers()
    s = sid()
    m.open(s, SessionKind.PINNED)
    gate1 = Gate(m)
    t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids        # save 1 taken, not copied
    transfers.clear()
    KVCache.transfer_hook = None
    at_snapshot = cache_of(m, s).export(0, 47)        # the test's own look (a download, not recorded)
    KVCache.transfer_hook = transfers
    gate2 = Gate(m)
    p2 = P1 + t1 + EXTRA
    r2 = collect(m.generate_tokens(s, p2, greedy()))                  # keeps writing into the same buffers
    assert r2.figures.reused_tokens == 47 and cache_of(m, s).waiting == 0
    gen_copies = transfers.on("MainThread")
    assert "download" not in gen_copies and "export" not in gen_copies, gen_copies

    gate1.open()
    gate2.started.wait(60)                    # save 1 is on disk, save 2 not yet
    tokens, kv = saved_kv(m, state, s)
    assert tokens == (P1 + t1)[:47]
    np.testing.assert_array_equal(kv, at_snapshot)
    assert "download" in transfers.on(WRITER)
    gate2.open()
    assert m.wait_for_saves(60) and m.info(s).save_error is None
    n2 = len(cache_of(m, s))
    assert saved_kv(m, state, s)[0] == (p2 + r2.token_ids)[:n2]
    assert "download" not in transfers.on("MainThread")
    m.shutdown()

    live = managers(device="cpu", state_dir=tmp_path / "live")        # a chat that never stopped
    other = sid()
    live.open(other, SessionKind.TEMPORARY)
    assert collect(live.generate_tokens(other, P1, greedy())).token_ids == t1
    assert collect(live.generate_tokens(other, p2, greedy())).token_ids == r2.token_ids
    p3 = p2 + r2.token_ids + EXTRA2
    never = collect(live.generate_tokens(other, p3, greedy()))

    m = managers()
    m.open(s)
    r3 = collect(m.generate_tokens(s, p3, greedy()))
    f = r3.figures
    assert f.resume == "disk" and f.fallback_reason is None
    assert f.reused_tokens == n2 and f.prefilled_tokens == len(p3) - n2
    assert r3.token_ids == never.token_ids


@pytest.mark.parametrize("device", ["cpu", STAGED])
def test_regenerate_waits_for_the_pending_save_then_both_are_right(tiny_model, managers, tmp_path, device):
    """A regenerate (truncate below the save's end, then new KV) while the save is not copied yet:
    the generation waits for the copy; the save holds the old KV, the reply is a fresh one's."""
    state = tmp_path / "state"
    m = managers(device=device)
    s = sid()
    m.open(s, SessionKind.PINNED)
    gate1 = Gate(m)
    t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
    cache = cache_of(m, s)
    at_snapshot = cache.export(0, 47)
    gate2 = Gate(m)
    edited = P1[:30] + EXTRA                   # the user edited the end of the first message
    out: dict[str, object] = {}
    t = threading.Thread(target=lambda: out.setdefault("r", collect(m.generate_tokens(s, edited, greedy()))))
    t.start()
    wait_until(lambda: cache.waiting == 1, "the regenerate waits for the save's copy")
    assert t.is_alive()
    gate1.open()
    t.join(60)
    assert not t.is_alive()
    gate2.started.wait(60)
    tokens, kv = saved_kv(m, state, s)
    assert tokens == (P1 + t1)[:47]
    np.testing.assert_array_equal(kv, at_snapshot)
    gate2.open()
    r = out["r"]
    ref = managers(device="cpu", state_dir=tmp_path / "ref")
    other = sid()
    ref.open(other, SessionKind.TEMPORARY)
    assert r.figures.reused_tokens == 30                            # type: ignore[attr-defined]
    assert r.token_ids == collect(ref.generate_tokens(other, edited, greedy())).token_ids  # type: ignore[attr-defined]
    assert m.wait_for_saves(60) and m.info(s).save_error is None


def test_closing_and_evicting_with_a_save_pending_keep_the_save_right(tiny_model, managers, tmp_path):
    """Close frees the cache at once without waiting; the pending snapshot keeps the device buffers
    until the writer has copied them, and then they are gone."""
    state = tmp_path / "state"
    m = managers()
    s = sid()
    m.open(s, SessionKind.PINNED)
    gate = Gate(m)
    t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
    cache = cache_of(m, s)
    bufs = [weakref.ref(x) for pair in cache._ort_values or [] for x in pair]
    at_snapshot = cache.export(0, 47)
    m.close(s)                            # no wait (the writer is held)
    gc.collect()
    assert all(b() is not None for b in bufs)       # the snapshot still holds them
    gate.open()
    assert m.wait_for_saves(60)
    gc.collect()
    assert all(b() is None for b in bufs)           # copied, then freed
    tokens, kv = saved_kv(m, state, s)
    assert tokens == (P1 + t1)[:47]
    np.testing.assert_array_equal(kv, at_snapshot)

    # The memory budget skips a session whose save is pending, and evicts it once saved.
    m.open(s)
    m.memory_budget = 0
    gate = Gate(m)
    collect(m.generate_tokens(s, P1 + t1 + EXTRA, greedy()))
    other = sid()
    m.open(other, SessionKind.REGULAR)
    collect(m.generate_tokens(other, EXTRA, greedy(2)))
    assert m._open[s].cache is not None                # pending: kept
    gate.open()
    assert m.wait_for_saves(60)
    collect(m.generate_tokens(other, EXTRA + EXTRA2, greedy(2)))
    assert m._open[s].cache is None                    # now evicted
    assert m.info(s).save_error is None


def test_temporary_close_frees_the_device_buffers(tiny_model, managers):
    m = managers()
    gc.collect()
    before = live_device_buffers()
    for i in range(5):
        s = sid()
        m.open(s, SessionKind.TEMPORARY)
        collect(m.generate_tokens(s, prompt(20, 10 + i), greedy(4)))
        cache = cache_of(m, s)
        assert live_device_buffers() == before + 2 * tiny_model.kv.n_layers
        binding = weakref.ref(cache.binding)
        m.close(s)
        del cache
        gc.collect()
        assert live_device_buffers() == before and binding() is None


def test_resume_uploads_once_into_buffers_sized_for_the_turn(tiny_model, managers, transfers):
    m = managers()
    s = sid()
    m.open(s, SessionKind.PINNED)
    t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
    assert m.wait_for_saves(60)
    m.shutdown()
    m = managers()
    m.open(s)
    transfers.clear()
    r = collect(m.generate_tokens(s, P1 + t1 + EXTRA, greedy(8)))
    assert r.figures.resume == "disk" and r.figures.reused_tokens == 47
    assert transfers.on("MainThread").count("upload") == 2 * tiny_model.kv.n_layers
    assert "download" not in transfers.on("MainThread")


def test_float16_variant_saves_and_resumes_on_a_staged_cache(tiny_dir, tmp_path):
    """The GPU variant's float16 KV through the device paths: same tokens as its CPU cache, saved
    as float16 (its own dtype) and resumed losslessly."""
    from engine.runtime.model import load_model
    fp16 = load_model(tiny_dir, provider="cpu", threads=1, variant="fp16")
    assert fp16.kv.dtype == np.float16
    runner = Runner(fp16)
    a, la = run_steps(runner, runner.new_cache(), P1, 8)
    b, lb = run_steps(runner, KVCache(fp16.kv, device=STAGED), P1, 8)
    assert a == b and np.array_equal(la, lb)

    state = tmp_path / "state"
    m = SessionManager(fp16, state, block_tokens=B)
    m.generator.runner.kv_device = STAGED
    try:
        s = sid()
        m.open(s, SessionKind.PINNED)
        t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
        at_save = cache_of(m, s).export(0, 47)
        assert m.wait_for_saves(60) and m.info(s).save_error is None
        tokens, kv = saved_kv(m, state, s)
        assert kv.dtype == np.float16 and tokens == (P1 + t1)[:47]
        np.testing.assert_array_equal(kv, at_save)
        m.close(s)
        p2 = P1 + t1 + EXTRA
        m.open(s)
        r = collect(m.generate_tokens(s, p2, greedy()))
        assert r.figures.resume == "disk" and r.figures.reused_tokens == 47
        want = collect(Generator(fp16).stream(KVCache(fp16.kv), p2, greedy())).token_ids
        assert r.token_ids == want
    finally:
        m.shutdown(timeout=5)


def test_a_regular_device_chat_shares_its_blocks_from_the_writer(tiny_model, managers, transfers):
    """A regular chat's full blocks reach the prefix cache's memory tier from a snapshot copied in
    the writer; another chat then reuses them (uploaded into its own buffers)."""
    m = managers()
    a = sid()
    m.open(a, SessionKind.REGULAR)
    collect(m.generate_tokens(a, P1, greedy()))
    assert "download" not in transfers.on("MainThread") and "export" not in transfers.on("MainThread")
    assert m.wait_for_saves(60)
    assert "download" in transfers.on(WRITER)
    b = sid()
    m.open(b, SessionKind.TEMPORARY)
    r = collect(m.generate_tokens(b, P1[:32] + EXTRA, greedy()))
    assert r.figures.cache_tokens_memory == 2 * B
    ref = managers(device="cpu", state_dir=m.state_dir.parent / "ref")
    c = sid()
    ref.open(c, SessionKind.TEMPORARY)
    assert r.token_ids == collect(ref.generate_tokens(c, P1[:32] + EXTRA, greedy())).token_ids
