"""Fuzzing the GGUF reader and importer: mutated real tiny GGUFs and generated metadata.

Property: reading (GGUFSource + spec + tokenizer files) or converting a damaged or generated
GGUF ends in success or in one `ModelImportError` line; never another exception, never a hang
(SIGALRM), never more than a bounded amount of traced memory.
"""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import gguf_bytes as gb
from tests.support.bounded import run_bounded
from fuzz_util import scaled
from engine.convert import ModelImportError, convert_gguf
from engine.convert.gguf_source import GGUFSource
from engine.convert.tokenizer import build_tokenizer_files
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

CFG = TinyConfig(n_layers=1, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=64, vocab_size=300)
MAX_MB = 96           # traced memory for one tiny file (a correct read needs a few MiB)
SECONDS = 30          # "for ever", for a file of a few hundred KiB


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-gguf")


class Blob(bytes):
    """The base file's bytes, shown short in Hypothesis's failure reports."""

    def __repr__(self) -> str:
        return f"<tiny GGUF, {len(self)} bytes>"


@pytest.fixture(scope="module")
def base(work) -> bytes:
    return Blob(write_tiny_gguf(work / "base.gguf", CFG).path.read_bytes())


def _header_end(data: bytes) -> int:
    """Where the tensor data starts: mutations mostly land before it, where the parsing is."""
    parts = gb.parse(data)
    return len(data) - len(parts.data)


def read_all(path: Path) -> None:
    src = GGUFSource(path)
    src.spec()
    build_tokenizer_files(src)


def check(fn) -> None:
    try:
        run_bounded(fn, seconds=SECONDS, max_mb=MAX_MB)
    except ModelImportError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, repr(msg)


# ---- mutations of a real file ----------------------------------------------------------------------
@st.composite
def mutations(draw, size: int, header: int):
    """A list of edits: byte overwrites (mostly in the header), 64-bit overwrites with extreme
    values (counts, lengths), cut-offs, insertions and deletions."""
    edits = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["byte", "byte", "u64", "u32", "cut", "insert", "delete"]))
        limit = header if draw(st.integers(0, 9)) else size
        pos = draw(st.integers(0, max(limit - 1, 0)))
        if kind == "byte":
            edits.append(("byte", pos, draw(st.integers(0, 255))))
        elif kind in ("u64", "u32"):
            extreme = st.sampled_from([0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 60, 2 ** 63, 2 ** 64 - 1])
            bits = 64 if kind == "u64" else 32
            edits.append((kind, pos, draw(st.one_of(extreme, st.integers(0, 2 ** bits - 1))) % 2 ** bits))
        elif kind == "cut":
            edits.append(("cut", pos, 0))
        elif kind == "insert":
            edits.append(("insert", pos, draw(st.binary(min_size=1, max_size=16))))
        else:
            edits.append(("delete", pos, draw(st.integers(1, 64))))
    return edits


def apply(data: bytes, edits) -> bytes:
    out = bytearray(data)
    for kind, pos, value in edits:
        pos = min(pos, len(out))
        if kind == "byte" and pos < len(out):
            out[pos] = value
        elif kind in ("u64", "u32"):
            width = 8 if kind == "u64" else 4
            if pos + width <= len(out):
                out[pos:pos + width] = struct.pack("<Q" if width == 8 else "<I", value)
        elif kind == "cut":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = value
        elif kind == "delete":
            del out[pos:pos + value]
    return bytes(out)


@given(data=st.data())
def test_mutated_gguf_is_read_or_refused(work, base, data):
    edits = data.draw(mutations(len(base), _header_end(base)))
    path = work / "mutated.gguf"
    path.write_bytes(apply(base, edits))
    check(lambda: read_all(path))


@settings(max_examples=scaled(0.2))
@given(data=st.data())
def test_mutated_gguf_converts_or_is_refused(work, base, data):
    """The whole import (weights, graph, files) on a damaged file; nothing half-made is left."""
    edits = data.draw(mutations(len(base), _header_end(base)))
    path = work / "mutated-full.gguf"
    path.write_bytes(apply(base, edits))
    dest = work / "out"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        check(lambda: convert_gguf(path, dest))
    finally:
        leftovers = [p.name for p in work.iterdir() if ".partial" in p.name]
        shutil.rmtree(dest, ignore_errors=True)
    assert not leftovers


# ---- generated metadata -------------------------------------------------------------------------------
KEYS = ["general.architecture", "general.name", "general.alignment", "llama.block_count", "llama.context_length",
        "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.attention.key_length", "llama.rope.dimension_count",
        "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "llama.vocab_size",
        "llama.rope.scaling.type", "llama.rope.scaling.factor", "tokenizer.ggml.model", "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.scores",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
        "tokenizer.chat_template"]
NUMBERS = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 16, 64, 300, 2 ** 31, 2 ** 32 - 1, 2 ** 63]),
                    st.integers(0, 2 ** 64 - 1))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([0.0, -1.0, 1e-6]))
SMALL_TEXT = st.one_of(st.sampled_from(["llama", "qwen2", "gpt2", "none", "linear", "yarn", ""]),
                       st.text(max_size=12))


@st.composite
def values(draw) -> tuple[int, bytes]:
    """(type, raw bytes) for one metadata value: well-typed, mistyped, or lying about its size."""
    vtype = draw(st.sampled_from([gb.UINT8, gb.INT8, gb.UINT16, gb.INT16, gb.UINT32, gb.INT32, gb.FLOAT32,
                                  gb.BOOL, gb.STRING, gb.ARRAY, gb.UINT64, gb.INT64, gb.FLOAT64, 13, 2 ** 32 - 1]))
    if vtype in (gb.FLOAT32, gb.FLOAT64):
        return vtype, gb.scalar(vtype, draw(FLOATS))
    if vtype in gb.SCALAR:
        fmt = gb.SCALAR[vtype]
        width = struct.calcsize(fmt)
        n = draw(NUMBERS) % (2 ** (8 * width))
        return vtype, n.to_bytes(width, "little")
    if vtype == gb.STRING:
        body = draw(SMALL_TEXT).encode("utf-8", "surrogatepass")
        length = draw(st.one_of(st.just(len(body)), NUMBERS))
        return vtype, struct.pack("<Q", length % 2 ** 64) + body
    if vtype == gb.ARRAY:
        etype = draw(st.sampled_from([gb.UINT8, gb.INT32, gb.UINT32, gb.FLOAT32, gb.STRING, gb.ARRAY, gb.BOOL,
                                      gb.UINT64, 13]))
        n = draw(st.integers(0, 40))
        if etype == gb.STRING:
            items = draw(st.lists(SMALL_TEXT, min_size=n, max_size=n))
            body = b"".join(gb.string(t.encode("utf-8", "surrogatepass")) for t in items)
        elif etype in gb.SCALAR:
            body = draw(st.binary(min_size=n * struct.calcsize(gb.SCALAR[etype]),
                                  max_size=n * struct.calcsize(gb.SCALAR[etype])))
        else:
            body = draw(st.binary(max_size=64))
        count = draw(st.one_of(st.just(n), NUMBERS))
        return vtype, struct.pack("<IQ", etype, count % 2 ** 64) + body
    return vtype, draw(st.binary(max_size=16))


@given(changes=st.lists(st.tuples(st.one_of(st.sampled_from(KEYS), st.text(max_size=20)), values()),
                        min_size=1, max_size=6),
       drops=st.lists(st.sampled_from(KEYS), max_size=3),
       header=st.tuples(st.sampled_from([3, 3, 3, 2, 1, 0x03000000, 2 ** 32 - 1]), st.one_of(st.none(), NUMBERS)))
def test_generated_metadata_is_read_or_refused(work, base, changes, drops, header):
    parts = gb.parse(base)
    for key in drops:
        parts.drop(key)
    for key, (vtype, raw) in changes:
        parts.set(key, vtype, raw)
    version, n_tensors = header
    parts.version = version
    if n_tensors is not None:
        parts.n_tensors = n_tensors % 2 ** 64
    path = work / "generated.gguf"
    path.write_bytes(parts.to_bytes())
    check(lambda: read_all(path))
