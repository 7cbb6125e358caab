"""kill -9 of a process in the middle of writing leaves a consistent database."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.store import ConversationStore

from .helpers import raw

REPO = Path(__file__).resolve().parents[2]

# Writes as fast as it can: single messages (one transaction each) and duplicates (one
# transaction inserting a conversation and all its messages).
WRITER = """
import sys, uuid
from app.store import ConversationStore
store = ConversationStore(sys.argv[1])
run = uuid.uuid4().hex[:8]  # titles unique across runs: "<run> chat <i>"
print("ready", flush=True)
i = 0
while True:
    c = store.create_conversation()
    store.rename(c.id, f"{run} chat {i}")
    for k in range(8):
        store.add_message(c.id, "user" if k % 2 == 0 else "assistant", f"msg {k} " + "w " * 500)
    store.duplicate(c.id)
    store.delete(c.id) if i % 3 == 2 else None
    i += 1
"""

# Holds a write transaction open, half done, until it is killed.
STUCK = """
import sys, time
from sqlalchemy import text
from app.store import ConversationStore
store = ConversationStore(sys.argv[1])
c = store.create_conversation()
store.rename(c.id, "stuck")
def half_done(session):
    for k in range(20):
        session.execute(text("INSERT INTO messages (conversation_id, depth, role, content, "
                             "created_at) VALUES (:c, 0, 'user', 'half written', 0)"), {"c": c.id})
    session.flush()
    print("inside", flush=True)
    time.sleep(60)
store._writer.run(half_done)
"""


def spawn(script: str, db: Path) -> subprocess.Popen[str]:
    """Start `script` on `db` and wait for its first line (it is ready, or mid-transaction)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(db)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(proc.stderr.read() if proc.stderr else "child died")
    return proc


def kill9(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def check_consistent(db: Path) -> int:
    """Assert the invariants; returns how many whole duplicates were checked."""
    conn = raw(db)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    for table in ("messages_fts", "conversations_fts"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    conn.close()
    with ConversationStore(db) as store:  # and the store opens it and agrees
        convs = store.list_conversations()
        by_title: dict[str, list[str]] = {}
        for row in reversed(convs):  # oldest first
            by_title.setdefault(row.title, []).append(row.id)
            detail = store.get_conversation(row.id)
            path = store.active_path(row.id)
            # The leaf always points at the newest message of a chain, never at nothing.
            assert (detail.current_leaf_id is None) == (path == [])
            assert [m.depth for m in path] == list(range(len(path)))
        pairs = 0
        for title, ids in by_title.items():
            assert len(ids) <= 2, title
            if len(ids) == 2:  # a duplicate is written whole or not at all
                assert len(store.active_path(ids[1])) == 8, title
                pairs += 1
        return pairs


def test_kill_during_writes_leaves_consistent_database(tmp_path: Path) -> None:
    db = tmp_path / "amber.sqlite3"
    rng = random.Random(1234)
    pairs = 0
    for _ in range(4):
        proc = spawn(WRITER, db)
        time.sleep(rng.uniform(0.2, 0.7))
        kill9(proc)
        pairs += check_consistent(db)
    assert pairs > 0  # the writers got far enough for the invariants to mean something


def test_kill_inside_a_transaction_rolls_it_back(tmp_path: Path) -> None:
    db = tmp_path / "amber.sqlite3"
    proc = spawn(STUCK, db)  # returns once the child printed "inside"
    kill9(proc)
    check_consistent(db)
    conn = raw(db)
    assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    assert conn.execute("SELECT title FROM conversations").fetchall() == [("stuck",)]
