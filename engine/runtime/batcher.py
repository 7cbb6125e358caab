"""Batched decoding: sessions decoding at the same moment run their one-token steps as ONE
ONNX Runtime call over a batch (GroupQueryAttention takes per-sequence lengths), instead of taking
turns on the CPU's cores. A step reads every weight whatever the batch, so 4 rows cost far less
than 4 steps (about 1.6-1.8x one row's for the default model here: docs/benchmarks/concurrency.md).

The rendezvous is leader/follower: a thread whose session wants a step queues it; once every
session in its decode loop has queued one (or after `GATHER_WAIT_S`, or `GATHER_FRACTION` of the
last run if longer, when one is slow: its consumer has not pulled the next token, its thread got
no core), one of the waiting threads runs the batch for everyone queued and each thread gets its
row's logits back. Sampling stays in each session's thread. A batch of one is an ordinary solo
step. Prefill stays solo. The KV of a batch: engine.runtime.kvpool.

One thread may queue several rows at once (`step_rows`: a request's `n` choices, copies of one
prefilled prompt): they count as that thread's one queued step and always run in the same batch.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import onnxruntime as ort

from engine.runtime.kvcache import KVCache, bind_kv_shared
from engine.runtime.kvpool import KVPool
from engine.runtime.model import LoadedModel, ModelRunError, ort_failures

_ORT_FAILURES = ort_failures()

SoloStep = Callable[[KVCache, list[int]], np.ndarray]

# How long the first session ready waits for the others before running without them. Sessions in
# step get their logits together and queue again within a millisecond or two (sampling, the
# detokenizer); a session whose consumer is slow costs the others at most this much per step.
GATHER_WAIT_S = 0.004
# ... or this share of the last run's duration, if longer: on a loaded machine a woken thread can
# take longer than 4 ms to get a core, and a step missed means a batch of one plus one of three.
GATHER_FRACTION = 0.25


class _Request:
    __slots__ = ("cache", "token", "thread", "logits", "error", "done")

    def __init__(self, cache: KVCache, token: int, thread: int) -> None:
        self.cache, self.token, self.thread = cache, token, thread
        self.logits: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = False


class DecodeBatcher:
    """Gathers concurrent one-token steps of one runner's sessions into batched runs."""

    def __init__(self, model: LoadedModel, vocab: int, feeds_positions: bool, solo_step: SoloStep) -> None:
        """`solo_step(cache, [token])`: the runner's ordinary step (a batch of one, and the retry)."""
        self.model, self.session = model, model.session
        self.vocab, self.feeds_positions, self.solo_step = vocab, feeds_positions, solo_step
        self.pool = KVPool(model.kv)
        self._cv = threading.Condition()
        self._pending: list[_Request] = []
        self._running = False
        self._idle_since = 0.0      # monotonic time the last run ended
        self._last_run_s = 0.0      # how long it took
        self._decoding: dict[int, int] = {}     # id(cache) -> nesting count, while in a decode loop
        # id(cache) -> the thread that last stepped it. Sessions stepped in turn by ONE thread (the
        # API server's scheduler, a GUI worker) cannot wait for each other: a leader waits only for
        # sessions of other threads than those already queued.
        self._threads: dict[int, int] = {}
        # (arena generation, lo, hi) -> (IOBinding, its logits buffer, what the bound OrtValues refer
        # to without owning it: the arena's layers, the arena, the ids and positions buffers).
        self._bindings: dict[tuple[int, int, int], tuple[Any, np.ndarray, Any]] = {}
        self._cols = np.zeros((1, 0), np.int64)    # 0, 1, ..., pool capacity - 1: the mask's columns
        self.batched_steps = 0      # runs of more than one row (figures for the bench and tests)
        self.batched_rows = 0

    @contextmanager
    def decoding(self, cache: KVCache) -> Iterator[None]:
        """Marks `cache` as in a decode loop (its steps may be batched); on exit it leaves the pool."""
        with self._cv:
            self._decoding[id(cache)] = self._decoding.get(id(cache), 0) + 1
            self._threads[id(cache)] = threading.get_ident()
        try:
            yield
        finally:
            with self._cv:
                left = self._decoding[id(cache)] - 1
                if left:
                    self._decoding[id(cache)] = left
                else:
                    del self._decoding[id(cache)]
                    self._threads.pop(id(cache), None)
                    self.pool.leave(cache)
                    if self.pool.arena is None:
                        self._bindings.clear()      # they hold the freed arena's buffers
                self._cv.notify_all()      # a leader waiting for this session stops waiting

    def is_decoding(self, cache: KVCache) -> bool:
        return id(cache) in self._decoding

    def step(self, cache: KVCache, token: int) -> np.ndarray:
        """One decode step of `cache`, batched with whatever other sessions step now."""
        return self.step_rows([cache], [token])[0]

    def step_rows(self, caches: list[KVCache], tokens: list[int]) -> list[np.ndarray]:
        """One decode step of each of `caches` (rows one thread steps together: a request's
        choices), in one batch with each other and with whatever other sessions step now."""
        me = threading.get_ident()
        reqs = [_Request(cache, token, me) for cache, token in zip(caches, tokens, strict=True)]
        head = reqs[0]
        with self._cv:
            for cache in caches:
                self._threads[id(cache)] = me
            # No notify: queueing changes no other thread's condition. A step that completes the
            # gathering is led by the thread queueing it (the check below), and the others wait
            # for their rows (woken once, when the run ends: 1.0 wake-ups a token, not ~1.8).
            self._pending.extend(reqs)
            queued = time.monotonic()
            batch: list[_Request] | None = None
            while not head.done:
                if not self._running and head in self._pending:
                    # The wait counts from when a batch could start (the last run's end), not from
                    # queueing: a step queued during a run would otherwise lead alone right after it.
                    wait = max(GATHER_WAIT_S, GATHER_FRACTION * self._last_run_s)
                    left = max(queued, self._idle_since) + wait - time.monotonic()
                    # Every thread in a decode loop has queued its rows (a thread has one call
                    # queued at a time, whatever its number of rows).
                    ready = len({r.thread for r in self._pending}) >= len(set(self._threads.values()))
                    if ready or left <= 0:
                        batch, self._pending = self._pending, []
                        self._running = True
                        break
                    # Only the oldest queued step keeps the deadline (it is the first to expire and
                    # takes every queued step with it); the others sleep until a run ends, instead
                    # of waking in the middle of it (a woken thread takes a core from that run).
                    self._cv.wait(left if self._pending[0].thread == me else None)
                else:
                    self._cv.wait()
        if batch is not None:
            t0 = time.monotonic()
            try:
                self._run(batch)
            finally:
                with self._cv:
                    self._running = False
                    self._idle_since = time.monotonic()
                    self._last_run_s = self._idle_since - t0
                    for r in batch:
                        if r.logits is None and r.error is None:    # the leader was interrupted
                            r.error = RuntimeError("the batched decode step did not complete")
                        r.done = True
                    self._cv.notify_all()
        for r in reqs:
            if r.error is not None:
                raise r.error
        out = []
        for r in reqs:
            assert r.logits is not None
            out.append(r.logits)
        return out

    # ---- the leader's side ---------------------------------------------------------------------
    def _run(self, batch: list[_Request]) -> None:
        together, alone = self._split(batch)
        if len(together) > 1:
            try:
                self._run_batched(together)
            except Exception:   # noqa: BLE001 - each row not done again on its own: only a bad one fails
                alone = [r for r in together if r.logits is None] + alone
        else:
            alone = batch
        for r in alone:
            try:
                r.logits = self.solo_step(r.cache, [r.token])
            except Exception as exc:   # noqa: BLE001 - raised in that session's own thread
                r.error = exc

    def _split(self, batch: list[_Request]) -> tuple[list[_Request], list[_Request]]:
        """(rows for the batch, rows stepped alone). Every slot of the pool is as long as its longest
        member: a cache needing more than twice what the pool (or the shortest cache joining with
        it) holds steps alone, so that one long chat does not make every slot that long."""
        with self._cv:
            in_pool = {id(c) for _, c in self.pool.members()}
            need = {id(r.cache): max(len(r.cache) + 1, r.cache.capacity) for r in batch}
            joining = [need[id(r.cache)] for r in batch if id(r.cache) not in in_pool]
            base = self.pool.capacity if in_pool else min(joining, default=0)
            alone = [r for r in batch if id(r.cache) not in in_pool and need[id(r.cache)] > 2 * base]
        return [r for r in batch if r not in alone], alone

    def _run_batched(self, batch: list[_Request]) -> None:
        with self._cv:      # the pool's layout changes only under the lock (leave() takes it too)
            slots = self.pool.place([r.cache for r in batch])
            by_slot = dict(zip(slots, batch, strict=True))
            # One run per range of consecutive slots that all step now: a slot not stepping (a
            # session that missed this step, a free or retired slot) is never written.
            runs: list[list[int]] = []
            for b in sorted(by_slot):
                if runs and runs[-1][-1] == b - 1:
                    runs[-1].append(b)
                else:
                    runs.append([b])
            bound = [(run, self._binding(run[0], run[-1] + 1)) for run in runs]
        for r in batch:
            r.cache.before_step()   # waits only when a pending snapshot needs what the step overwrites
        for run, (binding, logits, hold) in bound:   # noqa: B007 - `hold` keeps the bound buffers alive
            ids, pos = hold[2], hold[3]     # bound once with the binding: written in place
            for i, b in enumerate(run):
                ids[i, 0] = by_slot[b].token
                pos[i, 0] = len(by_slot[b].cache)
            # right-padded: row i sees positions 0..pos[i]; the width changes every step (rebound)
            binding.bind_cpu_input("attention_mask", (self._cols[:, :int(pos.max()) + 1] <= pos).astype(np.int64))
            try:
                self.session.run_with_iobinding(binding)
            except _ORT_FAILURES as exc:
                raise ModelRunError(self.model.graph, exc) from None
            for i, b in enumerate(run):
                r = by_slot[b]
                r.logits = logits[i, 0].copy()
                r.cache.tokens.append(r.token)
        self.batched_steps += 1
        self.batched_rows += len(batch)

    def _binding(self, lo: int, hi: int) -> tuple[Any, np.ndarray, Any]:
        """An IOBinding with slots [lo, hi) of the pool bound as past and present (kept while the
        pool's arena stays) and a logits buffer of that batch's shape."""
        key = (self.pool.generation, lo, hi)
        found = self._bindings.get(key)
        if found is not None:
            return found
        self._bindings = {k: v for k, v in self._bindings.items() if k[0] == self.pool.generation}
        kv = self.model.kv
        binding = self.session.io_binding()
        logits = np.empty((hi - lo, 1, self.vocab), np.float32)
        binding.bind_ortvalue_output(self.model.logits_name, ort.OrtValue.ortvalue_from_numpy(logits))
        layers = self.pool.layer_range(lo, hi)
        bind_kv_shared(binding, kv, [(ort.OrtValue.ortvalue_from_numpy(k), ort.OrtValue.ortvalue_from_numpy(v))
                                     for k, v in layers])
        # The token ids and positions: buffers of this batch's shape bound once (the OrtValues refer to
        # their memory, which each step overwrites), instead of two bind_cpu_input calls a step.
        ids = np.zeros((hi - lo, 1), np.int64)
        pos = np.zeros((hi - lo, 1), np.int64)
        binding.bind_ortvalue_input("input_ids", ort.OrtValue.ortvalue_from_numpy(ids))
        if self.feeds_positions:
            binding.bind_ortvalue_input("position_ids", ort.OrtValue.ortvalue_from_numpy(pos))
        if self._cols.shape[1] < self.pool.capacity:
            self._cols = np.arange(self.pool.capacity, dtype=np.int64)[None, :]
        self._bindings[key] = (binding, logits, (layers, self.pool.arena, ids, pos))
        return self._bindings[key]
