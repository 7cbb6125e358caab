"""Helpers shared by the fuzz targets (a module of its own: `conftest` is not importable by name
when several test folders have one)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st


def scaled(fraction: float, minimum: int = 5) -> int:
    """max_examples for an expensive target: a fraction of the active profile's."""
    return max(minimum, int(settings().max_examples * fraction))


def byte_mutations(max_size: int) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """Up to `max_size` edits of a file's bytes, applied by `mutate`."""
    return st.lists(st.tuples(st.sampled_from(["flip", "set", "delete", "insert", "truncate"]),
                              st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=max_size)


def mutate(raw: bytes, ops: Any) -> bytes:
    """`raw` with the edits applied in order (positions wrap around the current length)."""
    data = bytearray(raw)
    for op, pos, byte in ops:
        if not data:
            break
        i = pos % len(data)
        if op == "flip":
            data[i] ^= 1 << (byte % 8)
        elif op == "set":
            data[i] = byte
        elif op == "delete":
            del data[i]
        elif op == "insert":
            data.insert(i, byte)
        else:
            del data[i:]
    return bytes(data)


def loads_and_generates_or_is_refused(folder: Path) -> None:
    """The model folder loads and generates two tokens, or is refused with one line; within a
    bounded time and traced memory."""
    from engine.api import SamplingParams
    from engine.generation.generate import Generator
    from engine.runtime.model import ModelLoadError, load_model
    from tests.support.bounded import run_bounded

    def load_and_generate() -> None:
        try:
            model = load_model(folder, provider="cpu", threads=1)
        except ModelLoadError as exc:
            assert str(exc) and "\n" not in str(exc), repr(str(exc))
            return
        gen = Generator(model)
        events = list(gen.stream(gen.new_cache(), [1, 2, 3], SamplingParams(max_new_tokens=2, seed=1)))
        assert events
    run_bounded(load_and_generate, seconds=60, max_mb=192)
