"""Fuzzing the conversation store's open and read paths with damaged real SQLite files.

Property: opening a damaged database and reading everything in it (sidebar, every
conversation's path, exports, search) succeeds, or ends in a `StoreError` (with a known reason)
or a `NotFoundError`; never another exception or a hang. A file refused at open is left
byte-for-byte as it was (the message says "Amber has not changed it").
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store import ConversationStore, NotFoundError, StoreError
from tests.support.bounded import run_bounded
from fuzz_util import scaled

PAGE = 4096
REASONS = {"locked", "read_only", "corrupt", "newer", "migration_failed", "io", "closed"}


class Blob(bytes):
    def __repr__(self) -> str:
        return f"<SQLite file, {len(self)} bytes>"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-store")


@pytest.fixture(scope="module")
def base(work) -> bytes:
    path = work / "base.sqlite3"
    with ConversationStore(path) as store:
        for n in range(3):
            c = store.create_conversation(title=f"chat {n} ünïcode")
            for i in range(12):
                store.add_message(c.id, "user" if i % 2 == 0 else "assistant", f"message {i} of chat {n} " * 20)
    return Blob(path.read_bytes())


@st.composite
def damage(draw, size: int):
    edits = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["byte", "byte", "byte", "u32", "page", "cut"]))
        page = draw(st.integers(0, size // PAGE - 1))
        offset = draw(st.integers(0, PAGE - 1))
        if kind == "byte":
            edits.append((kind, page * PAGE + offset, draw(st.integers(0, 255))))
        elif kind == "u32":
            edits.append((kind, page * PAGE + offset,
                          draw(st.sampled_from([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, size // PAGE + 1, 2]))))
        elif kind == "page":
            edits.append((kind, page * PAGE, draw(st.binary(min_size=16, max_size=16))))
        else:
            edits.append((kind, max(PAGE, page * PAGE), 0))
    return edits


def apply(data: bytes, edits) -> bytes:
    out = bytearray(data)
    for kind, pos, value in edits:
        if pos >= len(out):
            continue
        if kind == "byte":
            out[pos] = value
        elif kind == "u32" and pos + 4 <= len(out):
            out[pos:pos + 4] = struct.pack(">I", value)     # SQLite's integers are big-endian
        elif kind == "page":
            out[pos:pos + PAGE] = (value * (PAGE // len(value)))[:len(out) - pos]
        elif kind == "cut":
            del out[pos:]
    return bytes(out)


def read_everything(path: Path, opened: list[bool]) -> None:
    with ConversationStore(path, busy_timeout_ms=200) as store:
        opened.append(True)
        for row in store.list_conversations():
            try:
                store.active_path(row.id)
                store.export_json(row.id)
                store.export_markdown(row.id)
            except NotFoundError:
                pass       # damaged ids: a row listed under an id its index does not find
        store.search("message")


@settings(max_examples=scaled(0.5))
@given(data=st.data())
def test_damaged_database_opens_or_is_refused(work, base, data):
    edits = data.draw(damage(len(base)))
    path = work / "damaged.sqlite3"
    for extra in work.glob("damaged.sqlite3*"):
        extra.unlink()
    damaged = apply(base, edits)
    path.write_bytes(damaged)
    opened: list[bool] = []
    try:
        run_bounded(lambda: read_everything(path, opened), seconds=60, max_mb=192)
    except StoreError as exc:
        assert exc.reason in REASONS and str(path) in str(exc), exc
        if not opened and "has not changed it" in str(exc):   # refused at open: untouched
            assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(damaged).digest()
