"""A one-token step's inputs bound by address (engine.runtime.runner): the
same logits bits as binding fresh arrays every step, through prompts between decode steps,
truncation and growth of the cache; returned logits never change while held."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.runtime.kvcache import KVCache
from engine.runtime.model import load_model
from engine.runtime.runner import Runner


class _FreshInputs(Runner):
    """The step as before: new input arrays bound by copy every step."""

    def _bind_decode_inputs(self, cache: KVCache, binding: Any, token: int) -> None:
        for name, value in self._inputs(cache, [token]).items():
            binding.bind_cpu_input(name, value)


@pytest.fixture(scope="module")
def runners(tiny_dir) -> tuple[Runner, Runner]:
    model = load_model(tiny_dir, provider="cpu", threads=1)
    assert model.kv.shared_buffer      # the IOBinding path this is about
    return Runner(model), _FreshInputs(model)


def _script(runner: Runner) -> list[np.ndarray]:
    """Decode steps, a prompt in between, a truncation, and growth past the first reservation."""
    cache = runner.new_cache()
    cache.reserve(24)
    out = [runner.forward(cache, list(range(3, 23)))]
    tok = int(np.argmax(out[-1]))
    for step in range(40):          # 20 + 40 positions: past the 24 reserved, and the mask's first size
        if step == 10:
            out.append(runner.forward(cache, [5, 6, 7, tok]))    # a prompt between decode steps
        elif step == 25:
            cache.truncate(len(cache) - 9)                        # back: a shorter mask
            out.append(runner.forward(cache, [tok]))
        else:
            out.append(runner.forward(cache, [tok]))
        tok = int(np.argmax(out[-1]))
    return out


def test_bound_inputs_give_the_bits_of_fresh_arrays(runners) -> None:
    bound, fresh = runners
    a, b = _script(bound), _script(fresh)
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert np.array_equal(x, y), f"step {i} differs"


def test_two_caches_keep_their_own_inputs(runners) -> None:
    """Two sessions' caches stepped in turn (each has its own input cells)."""
    bound, fresh = runners
    c1, c2 = bound.new_cache(), bound.new_cache()
    r1, r2 = fresh.new_cache(), fresh.new_cache()
    t1 = t2 = 0
    for c, r, prompt in ((c1, r1, [4, 9, 2]), (c2, r2, [8, 1, 6, 3, 3])):
        assert np.array_equal(bound.forward(c, prompt), fresh.forward(r, prompt))
    for _ in range(12):
        x1, y1 = bound.forward(c1, [t1]), fresh.forward(r1, [t1])
        x2, y2 = bound.forward(c2, [t2]), fresh.forward(r2, [t2])
        assert np.array_equal(x1, y1) and np.array_equal(x2, y2)
        t1, t2 = int(np.argmax(x1)), int(np.argmax(x2))


def test_returned_logits_stay_as_returned_while_held(runners) -> None:
    bound, _ = runners
    cache = bound.new_cache()
    held = [bound.forward(cache, [1, 2, 3])]
    snap = [held[0].copy()]
    tok = 0
    for _ in range(8):
        held.append(bound.forward(cache, [tok]))
        snap.append(held[-1].copy())
        tok = int(np.argmax(held[-1]))
    assert len({id(x) for x in held}) == len(held)      # every held array is its own
    for x, s in zip(held, snap, strict=True):
        assert np.array_equal(x, s)
    view = held[-1][:4]        # a view keeps its base from being reused
    before = view.copy()
    del held, snap
    for _ in range(4):
        bound.forward(cache, [tok])
    assert np.array_equal(view, before)

