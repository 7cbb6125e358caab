"""The KV buffers of sessions decoding together: one [slots, kv_heads, capacity, head_dim] tensor
per layer, each session's `KVCache` a contiguous slot of it ([1, kv_heads, capacity, head_dim]).

A batched decode step binds a range of slots as ONE past/present tensor per layer, so the sessions'
one-token steps run as one ONNX Runtime call; a session's own (solo) steps bind its slot view as
they bind any cache. A cache joins when it first decodes in a batch (its valid positions are copied
in, once) and leaves when its reply ends (copied back out to buffers of its own), so a cache is in
the pool only while its owner thread is inside the decode loop: nothing else touches it then.
Every method runs under the batcher's lock (engine.runtime.batcher).
"""
from __future__ import annotations

import weakref

import numpy as np

from engine.runtime.kvcache import MIN_CAPACITY, KVCache
from engine.runtime.model import KVLayout


class KVPool:
    """Slots of batch-shaped KV buffers, handed to the caches that decode together."""

    def __init__(self, layout: KVLayout) -> None:
        self.layout = layout
        self.arena: np.ndarray | None = None      # [2, layers, slots, kv_heads, capacity, head_dim]
        self.slots: list[weakref.ref[KVCache] | None] = []
        self._given: list[list[np.ndarray] | None] = []   # per slot: the key views its cache got
        self.retired: set[int] = set()      # slots a pending snapshot still reads: not reused
        self.generation = 0     # bumped whenever the arena is replaced (bindings over it are stale)

    @property
    def capacity(self) -> int:
        return 0 if self.arena is None else int(self.arena.shape[4])

    def slot_of(self, cache: KVCache) -> int | None:
        """The cache's slot, if its buffers are still that slot (a cache that grew or was cleared
        has buffers of its own again: its slot is then freed here)."""
        for b, ref in enumerate(self.slots):
            if ref is not None and ref() is cache:
                if cache.pool_owner is self:
                    return b
                self._free(b, cache)
                return None
        return None

    def _free(self, b: int, cache: KVCache | None) -> None:
        """Slot b is no longer its cache's; retired while a snapshot of that cache reads it."""
        given = self._given[b]
        if cache is not None and given is not None and cache.guarded(given):
            self.retired.add(b)
        self.slots[b] = None
        self._given[b] = None

    def members(self) -> list[tuple[int, KVCache]]:
        """(slot, cache) of every cache still in the pool; frees the slots of the others."""
        out = []
        for b, ref in enumerate(self.slots):
            cache = ref() if ref is not None else None
            if cache is not None and cache.pool_owner is self:
                out.append((b, cache))
            elif ref is not None:
                self._free(b, cache)
        return out

    def place(self, caches: list[KVCache]) -> list[int]:
        """Puts every cache in a slot (joining ones are copied in), with room for one more position
        each; returns their slots. Grows the arena (slots or capacity) when needed."""
        members = self._compact(self.members())
        joining = [c for c in caches if self.slot_of(c) is None]
        # Room for the next position of everyone in the pool (idle members get a harmless dummy
        # row there), and at least what each joining cache had reserved for its reply.
        need = max([len(c) + 1 for _, c in members] + [max(len(c) + 1, c.capacity) for c in joining])
        free = [b for b, ref in enumerate(self.slots) if ref is None and b not in self.retired]
        if self.arena is None or need > self.capacity or len(joining) > len(free):
            self._grow(need, len(members) + len(joining), members)
            free = [b for b, ref in enumerate(self.slots) if ref is None]
        for cache, b in zip(joining, free, strict=False):
            self._take(b, cache)
        return [self._must_slot(c) for c in caches]

    def _compact(self, members: list[tuple[int, KVCache]]) -> list[tuple[int, KVCache]]:
        """Moves the members above a free slot down into it (their valid positions copied, once),
        so that the sessions decoding together stay one range of consecutive slots: one run a step
        instead of one per range (a chat that ended, a request's choice that stopped early, left a
        hole). A moved-from slot that a pending snapshot still reads is retired, as in `_free`."""
        members = sorted(members, key=lambda m: m[0])
        free = sorted(b for b, ref in enumerate(self.slots) if ref is None and b not in self.retired)
        while free and members and free[0] < members[-1][0]:
            old, cache = members.pop()
            new = free.pop(0)
            given = self._given[old]
            self._take(new, cache)      # copies its valid positions from the old slot
            self.slots[old] = None
            self._given[old] = None
            if given is not None and cache.guarded(given):
                self.retired.add(old)
            else:
                free = sorted(free + [old])
            members = sorted(members + [(new, cache)], key=lambda m: m[0])
        return members

    def _take(self, b: int, cache: KVCache) -> None:
        keys, values = self._views(b)
        self.slots[b] = weakref.ref(cache)
        self._given[b] = keys
        cache.adopt(keys, values, self)     # copies its valid positions into the slot

    def _must_slot(self, cache: KVCache) -> int:
        b = self.slot_of(cache)
        assert b is not None
        return b

    def _grow(self, need: int, n_slots: int, members: list[tuple[int, KVCache]]) -> None:
        """A new arena: capacity at least doubling (as KVCache.reserve), slots as needed; the
        members move into it (their slot numbers stay)."""
        cap = max(-(-need // MIN_CAPACITY) * MIN_CAPACITY, 2 * self.capacity if need > self.capacity else self.capacity)
        slots = max(n_slots, len(self.slots))
        lay = self.layout
        self.arena = np.zeros((2, lay.n_layers, slots, lay.kv_heads, cap, lay.head_dim), lay.dtype)
        self.slots += [None] * (slots - len(self.slots))
        self._given += [None] * (slots - len(self._given))
        self.retired.clear()        # fresh memory; a snapshot keeps the old arena alive itself
        self.generation += 1
        for b, cache in members:
            self._take(b, cache)    # its valid positions, from the old arena

    def _views(self, b: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        assert self.arena is not None
        return ([self.arena[0, i, b:b + 1] for i in range(self.layout.n_layers)],
                [self.arena[1, i, b:b + 1] for i in range(self.layout.n_layers)])

    def layer_range(self, lo: int, hi: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per layer, the (keys, values) of slots [lo, hi) as one contiguous tensor each."""
        assert self.arena is not None
        return [(self.arena[0, i, lo:hi], self.arena[1, i, lo:hi]) for i in range(self.layout.n_layers)]

    def leave(self, cache: KVCache) -> None:
        """The cache's reply ended: its positions move to buffers of its own; the slot is free.
        With no member left, the arena is freed."""
        b = self.slot_of(cache)
        if b is not None:
            cache.rehome()
            self._free(b, cache)
        if not self.members():
            self.arena, self.slots, self._given = None, [], []
            self.retired.clear()
            self.generation += 1
