"""KVCache buffers: sized tightly at first, then grown geometrically, contents kept."""
from __future__ import annotations

import numpy as np

from engine.runtime.kvcache import MIN_CAPACITY, KVCache
from engine.runtime.model import KVLayout

LAYOUT = KVLayout(n_layers=2, kv_heads=2, head_dim=4, dtype=np.float32,
                  past_names=[("pk0", "pv0"), ("pk1", "pv1")], present_names=[("k0", "v0"), ("k1", "v1")],
                  shared_buffer=True)


def test_first_reserve_is_tight_and_growth_at_least_doubles() -> None:
    cache = KVCache(LAYOUT)
    cache.reserve(2560 + 1)
    assert cache.capacity == 2560 + MIN_CAPACITY            # rounded up, not the next power of two
    cache.reserve(3000)
    assert cache.capacity == 2 * (2560 + MIN_CAPACITY)       # then geometric: few copies per chat
    cache.reserve(20000)
    assert cache.capacity == 20224                          # a jump past double takes just what it needs


def test_growing_keeps_the_valid_positions() -> None:
    cache = KVCache(LAYOUT)
    rng = np.random.default_rng(1)
    block = rng.standard_normal((2, 2, 2, 300, 4)).astype(np.float32)
    cache.append_block(block, list(range(300)))
    cache.reserve(5000)
    np.testing.assert_array_equal(cache.export(0, 300), block)


def test_buffers_are_contiguous_views_of_one_allocation() -> None:
    """ORT binds each layer's buffer by address: every one must be C-contiguous and distinct."""
    cache = KVCache(LAYOUT, capacity=256)
    arrays = cache.keys + cache.values
    assert all(a.flags.c_contiguous and a.shape == (1, 2, 256, 4) for a in arrays)
    starts = {a.__array_interface__["data"][0] for a in arrays}
    assert len(starts) == 4
    arrays[0][...] = 1.0
    assert not any(a.any() for a in arrays[1:])
