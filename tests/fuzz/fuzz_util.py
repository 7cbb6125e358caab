"""Helpers shared by the fuzz targets (a module of its own: `conftest` is not importable by name
when several test folders have one)."""
from __future__ import annotations

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
