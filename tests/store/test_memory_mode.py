"""The temporary chats' store: `ConversationStore(in_memory=True)`, the SQLite store on a database
that lives in memory only. Nothing reaches the disk, its one connection serves every thread, and
closing it frees the chats."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from app.store import ConversationStore, StoreError


def _files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_nothing_reaches_the_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work, scratch = tmp_path / "cwd", tmp_path / "scratch"
    work.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(work)
    for var in ("TMPDIR", "SQLITE_TMPDIR"):    # where SQLite would put temporary files
        monkeypatch.setenv(var, str(scratch))
    with ConversationStore(in_memory=True) as store:
        assert store.path == Path(":memory:") and store.backup_path is None
        conv = store.create_conversation(system_prompt="p")
        for i in range(300):                     # enough rows that sorts and FTS work for real
            store.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"word{i} " * 50)
        assert store.search("word7")
        store.duplicate(conv.id)
        assert len(store.export_json(conv.id)["messages"]) == 300
    assert _files_under(work) == [] and _files_under(scratch) == []
    assert not any(name.endswith(("-wal", "-shm", "-journal")) for name in os.listdir(tmp_path))


def test_each_store_is_its_own_database_and_close_frees_it() -> None:
    one, two = ConversationStore(in_memory=True), ConversationStore(in_memory=True)
    try:
        kept = one.create_conversation().id
        assert one.has(kept) and not two.has(kept) and two.list_conversations() == []
    finally:
        two.close()
    one.close()
    with pytest.raises(StoreError) as caught:
        one.list_conversations()
    assert caught.value.reason == "closed"
    with ConversationStore(in_memory=True) as fresh:
        assert fresh.list_conversations() == []


def test_reads_and_writes_from_many_threads_share_the_one_connection() -> None:
    with ConversationStore(in_memory=True) as store:
        ids = [store.create_conversation().id for _ in range(4)]
        failures: list[BaseException] = []
        start = threading.Barrier(len(ids))

        def chat(cid: str) -> None:
            try:
                start.wait()
                for i in range(25):
                    store.add_message(cid, "user", f"message {i}")
                    assert store.active_path(cid)[-1].content == f"message {i}"
                    store.list_conversations()
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=chat, args=(cid,)) for cid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert [len(store.active_path(cid)) for cid in ids] == [25] * 4


def test_a_deleted_temporary_chat_owes_the_engine_nothing() -> None:
    with ConversationStore(in_memory=True) as store:
        cid = store.create_conversation().id
        store.add_message(cid, "user", "hello")
        assert store.delete(cid) is True and not store.has(cid)
        assert store.pending_engine_deletes() == []


def test_an_in_memory_store_takes_no_file() -> None:
    with pytest.raises(ValueError):
        ConversationStore("amber.sqlite3", in_memory=True)
