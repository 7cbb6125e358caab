"""Fuzzing the KV file reader (engine.kvstore.kvfile): mutated real files and generated headers. The
property: the payload read back exactly, or one KVFileError with a reason; never another
exception, a hang or an unbounded allocation (the header length is capped, the payload is read
into the caller's buffer of the expected size)."""
from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_util import byte_mutations, mutate

from engine.kvstore.kvfile import (FORMAT_VERSION, MAGIC, KVFileError, KVShape, looks_like_kv_file, read_kv_file,
                                   write_kv_file)

SHAPE = KVShape("fp:test", "float32", 2, 2, 4)
FUZZ = settings(deadline=None)       # examples and health checks: the profile (tests/fuzz/conftest.py)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=25)


def payload(tokens: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((SHAPE.n_layers, 2, SHAPE.kv_heads, tokens, SHAPE.head_dim)).astype(np.float32)


def read_or_reason(path: Path, tokens: list[int]):
    assert isinstance(looks_like_kv_file(path), bool)
    try:
        return read_kv_file(path, SHAPE, tokens)
    except KVFileError as exc:
        assert str(exc).startswith(path.name)
        return None


mutations = byte_mutations(max_size=6)


@FUZZ
@given(mutations, st.integers(1, 20), st.integers(0, 10))
def test_mutated_real_kv_files(ops, n_tokens, seed):
    tokens = list(range(5, 5 + n_tokens))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.kvb"
        expected = payload(n_tokens, seed)
        write_kv_file(path, SHAPE, tokens, expected, {"key": "k"})
        raw = path.read_bytes()
        damaged = mutate(raw, ops)
        path.write_bytes(damaged)
        got = read_or_reason(path, tokens)
        if got is not None:
            # Accepted only when what it holds is exactly what was written (header bytes that the
            # reader does not interpret, such as padding or an unknown key, may differ).
            assert np.array_equal(got, expected)


@FUZZ
@given(st.dictionaries(st.sampled_from(["version", "fingerprint", "dtype", "layers", "kv_heads", "head_dim",
                                        "tokens", "token_ids", "xxh3"]), json_values, max_size=5),
       json_values, st.integers(0, 300), st.booleans())
def test_generated_headers(changes, other, extra_bytes, header_is_object):
    tokens = [1, 2, 3]
    base = {"version": FORMAT_VERSION, "fingerprint": SHAPE.fingerprint, "dtype": SHAPE.dtype,
            "layers": SHAPE.n_layers, "kv_heads": SHAPE.kv_heads, "head_dim": SHAPE.head_dim,
            "tokens": 3, "token_ids": tokens, "xxh3": 0}
    header = json.dumps({**base, **changes} if header_is_object else other).encode()
    prefix = MAGIC + struct.pack("<I", len(header)) + header
    prefix += b"\0" * (-len(prefix) % 64)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.kvt"
        path.write_bytes(prefix + bytes(extra_bytes))
        assert read_or_reason(path, tokens) is None        # no valid checksum: never accepted


@FUZZ
@given(st.integers(0, 2 ** 32 - 1), st.binary(max_size=64))
def test_header_lengths(n, rest):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.kvb"
        path.write_bytes(MAGIC + struct.pack("<I", n) + rest)
        assert read_or_reason(path, [1]) is None
