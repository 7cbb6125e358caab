"""Running sessions' decode steps together on the tiny converted model: greedy settings, a
solo run's tokens (the batcher off), and threads started so that their first steps meet."""
from __future__ import annotations

import threading

from engine.api import SamplingParams
from engine.generation.generate import Generator, collect


def greedy(n: int) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)


def solo_tokens(model, ids: list[int], n: int) -> list[int]:
    gen = Generator(model)
    gen.runner.batch_decode = False
    return collect(gen.stream(gen.new_cache(), ids, greedy(n))).token_ids


class Together:
    """Marks the caches as decoding before their threads start, so that the first decode steps
    wait for all of them (with `patient`): batching then does not depend on thread timing. Each
    thread calls `release(cache)` when its stream is over."""

    def __init__(self, runner, caches) -> None:
        self._held = {id(c): runner.decoding(c) for c in caches}
        for cm in self._held.values():
            cm.__enter__()

    def release(self, cache) -> None:
        self._held.pop(id(cache)).__exit__(None, None, None)


def run_threads(targets) -> None:
    errors: list[BaseException] = []

    def wrap(fn):
        def inner():
            try:
                fn()
            except BaseException as exc:   # noqa: BLE001 - reported by the test
                errors.append(exc)
        return inner
    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a generation hung"
    if errors:
        raise errors[0]
