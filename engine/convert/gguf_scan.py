"""A bounded pre-scan of a GGUF file's header, metadata and tensor table.

`gguf.GGUFReader` trusts the file: an array count of 2**60 makes it loop (and allocate) for ever,
because reading past the end of its memory map yields empty views instead of an error. So before
the reader sees a file, this module walks the same structure itself, checking every count and
length against the bytes that are left and against sane model bounds, and never allocating in
proportion to a number read from the file. What it returns (types, counts, the tensor table)
lets `GGUFSource` type-check metadata before asking the reader for values.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from engine.onnx.errors import ModelImportError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# GGUF value types (gguf.GGUFValueType) and their sizes; STRING and ARRAY are variable.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR_SIZES = {UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, UINT32: 4, INT32: 4, FLOAT32: 4, BOOL: 1,
                UINT64: 8, INT64: 8, FLOAT64: 8}
TYPE_NAMES = {UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32",
              INT32: "int32", FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array",
              UINT64: "uint64", INT64: "int64", FLOAT64: "float64"}

# Sane bounds, far above any real model (the largest vocabularies have ~260k tokens, the largest
# tensor tables a few thousand entries) and far below what would exhaust memory in the reader,
# which builds a few Python objects per array element.
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 16
MAX_KEY_BYTES = 1 << 10
MAX_TENSOR_NAME_BYTES = 1 << 10
MAX_STRING_BYTES = 1 << 24          # one metadata string (chat templates are a few tens of KB)
MAX_ARRAY_LEN = 1 << 22             # one metadata array
MAX_ARRAY_TOTAL = 1 << 23           # all metadata arrays together
MAX_DIMS = 4                        # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 44              # one tensor


@dataclass(frozen=True)
class FieldInfo:
    """A metadata value's type as the file declares it (element type and count for arrays)."""
    type: int
    elem_type: int | None = None
    count: int = 1

    def describe(self) -> str:
        if self.type == ARRAY:
            return f"an array of {self.count} {TYPE_NAMES.get(self.elem_type or 0, '?')}"
        return f"a {TYPE_NAMES.get(self.type, '?')}"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    type: GGMLQuantizationType
    offset: int            # absolute, in the file
    n_bytes: int


@dataclass(frozen=True)
class GGUFLayout:
    version: int
    fields: dict[str, FieldInfo]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int


class _Cursor:
    """Little-endian reads from a buffer, each checked against the bytes that remain."""

    def __init__(self, buf: mmap.mmap | bytes, name: str) -> None:
        self.buf, self.name, self.pos, self.size = buf, name, 0, len(buf)

    def fail(self, what: str) -> ModelImportError:
        return ModelImportError(f"{self.name}: corrupt GGUF file ({what})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise ModelImportError(f"{self.name}: truncated GGUF file ({what} at byte {self.pos} "
                                   f"needs {n} bytes, {self.size - self.pos} are left)")

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = struct.unpack_from("<I", self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        return int(v)

    def text(self, what: str, limit: int) -> str:
        n = self.u64(f"{what} length")
        if n > limit:
            raise self.fail(f"{what} is {n} bytes long, more than {limit}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def skip_string(self, what: str) -> None:
        n = self.u64(f"{what} length")
        if n > MAX_STRING_BYTES:
            raise self.fail(f"{what} is {n} bytes long, more than {MAX_STRING_BYTES}")
        self.need(n, what)
        self.pos += n


def _value(cur: _Cursor, key: str, vtype: int, budget: list[int]) -> FieldInfo:
    """Skips one metadata value, checking it; returns its declared type."""
    if vtype in SCALAR_SIZES:
        cur.need(SCALAR_SIZES[vtype], f"metadata {key}")
        cur.pos += SCALAR_SIZES[vtype]
        return FieldInfo(vtype)
    if vtype == STRING:
        cur.skip_string(f"metadata {key}")
        return FieldInfo(vtype)
    if vtype != ARRAY:
        raise cur.fail(f"metadata {key} has unknown value type {vtype}")
    etype = cur.u32(f"metadata {key} element type")
    count = cur.u64(f"metadata {key} element count")
    if etype == ARRAY:
        raise cur.fail(f"metadata {key} is an array of arrays, which Amber does not read")
    if etype not in SCALAR_SIZES and etype != STRING:
        raise cur.fail(f"metadata {key} has unknown element type {etype}")
    if count > MAX_ARRAY_LEN:
        raise cur.fail(f"metadata {key} declares {count} elements, more than {MAX_ARRAY_LEN}")
    budget[0] += count
    if budget[0] > MAX_ARRAY_TOTAL:
        raise cur.fail(f"metadata arrays declare more than {MAX_ARRAY_TOTAL} elements in all")
    if etype == STRING:
        # Each string needs at least its 8-byte length: reject impossible counts before looping.
        cur.need(count * 8, f"metadata {key} ({count} strings)")
        for i in range(count):
            cur.skip_string(f"metadata {key}[{i}]")
    else:
        cur.need(count * SCALAR_SIZES[etype], f"metadata {key} ({count} values)")
        cur.pos += count * SCALAR_SIZES[etype]
    return FieldInfo(ARRAY, etype, count)


def _header(cur: _Cursor) -> tuple[int, int, int]:
    cur.need(24, "header")
    if bytes(cur.buf[0:4]) != GGUF_MAGIC:
        raise ModelImportError(f"{cur.name}: not a GGUF file (it does not start with 'GGUF')")
    cur.pos = 4
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in SUPPORTED_VERSIONS:
            raise ModelImportError(f"{cur.name}: big-endian GGUF files are not supported")
        raise ModelImportError(f"{cur.name}: GGUF version {version} is not supported "
                               f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    if n_kv > MAX_KV:
        raise cur.fail(f"{n_kv} metadata entries, more than {MAX_KV}")
    if n_tensors > MAX_TENSORS:
        raise cur.fail(f"{n_tensors} tensors, more than {MAX_TENSORS}")
    # The smallest entry: an 8-byte key length, a 4-byte type and a 1-byte value (and for a
    # tensor: name length, dimension count, type and offset).
    cur.need(n_kv * 13 + n_tensors * 24, f"{n_kv} metadata entries and {n_tensors} tensors")
    return version, n_tensors, n_kv


def _tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int, int]:
    name = cur.text("tensor name", MAX_TENSOR_NAME_BYTES)
    n_dims = cur.u32(f"tensor {name} dimension count")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(f"tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS} are valid)")
    dims = tuple(cur.u64(f"tensor {name} dimensions") for _ in range(n_dims))
    raw_type = cur.u32(f"tensor {name} type")
    rel = cur.u64(f"tensor {name} offset")
    try:
        ttype = GGMLQuantizationType(raw_type)
        block, type_size = GGML_QUANT_SIZES[ttype]
    except (ValueError, KeyError):
        raise cur.fail(f"tensor {name} has unknown type {raw_type}") from None
    n_elements = 1
    for d in dims:
        if d < 1:
            raise cur.fail(f"tensor {name} has an empty dimension {list(dims)}")
        n_elements *= d
    if n_elements > MAX_ELEMENTS:
        raise cur.fail(f"tensor {name} declares {n_elements} elements")
    if dims[0] % block:
        raise cur.fail(f"tensor {name} of type {ttype.name} has rows of {dims[0]}, not a multiple of {block}")
    return name, dims, ttype, rel, n_elements * type_size // block


def scan_gguf(path: Path) -> GGUFLayout:
    """Checks the structure of the GGUF file at `path`; raises `ModelImportError` naming the cause."""
    name = path.name
    size = path.stat().st_size
    if size < 4:
        raise ModelImportError(f"{name}: not a GGUF file (it does not start with 'GGUF')")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ModelImportError(f"{name}: not a GGUF file (it does not start with 'GGUF')")
        if size < 24:
            raise ModelImportError(f"{name}: truncated GGUF file (the header needs 24 bytes, the file has {size})")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _scan(_Cursor(buf, name), size)


def _scan(cur: _Cursor, size: int) -> GGUFLayout:
    version, n_tensors, n_kv = _header(cur)
    fields: dict[str, FieldInfo] = {}
    budget = [0]
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = cur.text("metadata key", MAX_KEY_BYTES)
        if key in fields:
            raise cur.fail(f"metadata key {key} appears twice")
        vtype = cur.u32(f"metadata {key} type")
        start = cur.pos
        fields[key] = _value(cur, key, vtype, budget)
        if key == "general.alignment":
            if vtype != UINT32:
                raise cur.fail(f"general.alignment is {fields[key].describe()}, not a uint32")
            (alignment,) = struct.unpack_from("<I", cur.buf, start)
            if alignment == 0 or alignment & (alignment - 1) or alignment > 1 << 20:
                raise cur.fail(f"general.alignment {alignment} is not a power of two up to 2^20")
    raw_tensors = []
    names: set[str] = set()
    for _ in range(n_tensors):
        info = _tensor_info(cur)
        if info[0] in names:
            raise cur.fail(f"tensor {info[0]} appears twice")
        names.add(info[0])
        raw_tensors.append(info)
    data_offset = cur.pos + (-cur.pos % alignment)
    tensors = []
    for tname, dims, ttype, rel, n_bytes in raw_tensors:
        if rel % alignment:
            raise cur.fail(f"tensor {tname} data offset {rel} is not a multiple of the alignment {alignment}")
        end = data_offset + rel + n_bytes
        if end > size:
            raise ModelImportError(f"{cur.name}: truncated GGUF file (tensor {tname} needs {end} bytes, "
                                   f"file has {size})")
        tensors.append(TensorInfo(tname, dims, ttype, data_offset + rel, n_bytes))
    return GGUFLayout(version=version, fields=fields, tensors=tensors, data_offset=data_offset, file_size=size)
