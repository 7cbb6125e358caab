"""Byte-level GGUF crafting for the importer's hostile-input tests (and the fuzz targets).

`write_tiny_gguf` only writes well-formed files; these helpers take such a file apart and put it
back with any field changed to anything, including what no writer would produce: an array count
of 2**60, a nested array, a string where an integer belongs. Independent of `engine.convert`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
          BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}


@dataclass
class KV:
    """One metadata entry: its key, declared type and the raw bytes of its value."""
    key: str
    type: int
    raw: bytes


@dataclass
class GGUFParts:
    version: int
    n_tensors: int
    kvs: list[KV]
    infos: bytes         # the tensor table, as it was
    data: bytes          # the tensor data (after the alignment padding)
    alignment: int = 32

    def get(self, key: str) -> KV:
        return next(kv for kv in self.kvs if kv.key == key)

    def set(self, key: str, vtype: int, raw: bytes) -> "GGUFParts":
        """Replaces (or appends) an entry; `to_bytes` re-pads, so the tensors stay valid."""
        for kv in self.kvs:
            if kv.key == key:
                kv.type, kv.raw = vtype, raw
                return self
        self.kvs.append(KV(key, vtype, raw))
        return self

    def drop(self, key: str) -> "GGUFParts":
        self.kvs = [kv for kv in self.kvs if kv.key != key]
        return self

    def to_bytes(self, n_kv: int | None = None) -> bytes:
        out = [b"GGUF", struct.pack("<IQQ", self.version, self.n_tensors, len(self.kvs) if n_kv is None else n_kv)]
        for kv in self.kvs:
            out += [string(kv.key), struct.pack("<I", kv.type), kv.raw]
        out.append(self.infos)
        head = b"".join(out)
        return head + b"\0" * (-len(head) % self.alignment) + self.data


def string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def scalar(vtype: int, value: object) -> bytes:
    return struct.pack(SCALAR[vtype], value)


def array(etype: int, values: list, count: int | None = None) -> bytes:
    """An array value; `count` may lie about how many elements follow."""
    body = b"".join(string(v) if etype == STRING else scalar(etype, v) for v in values)
    return struct.pack("<IQ", etype, len(values) if count is None else count) + body


def _skip_value(data: bytes, pos: int, vtype: int) -> int:
    if vtype in SCALAR:
        return pos + struct.calcsize(SCALAR[vtype])
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", data, pos)
        return pos + 8 + n
    assert vtype == ARRAY
    etype, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    for _ in range(count):
        pos = _skip_value(data, pos, etype)
    return pos


def parse(data: bytes) -> GGUFParts:
    """Splits a well-formed GGUF into its header entries and the rest."""
    assert data[:4] == b"GGUF"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    kvs = []
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + klen].decode("utf-8")
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        end = _skip_value(data, pos, vtype)
        kvs.append(KV(key, vtype, data[pos:end]))
        pos = end
    start = pos
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + nlen
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    align = next((struct.unpack("<I", kv.raw)[0] for kv in kvs if kv.key == "general.alignment"), 32)
    return GGUFParts(version, n_tensors, kvs, data[start:pos], data[pos + (-pos % align):], align)
