"""Conversation store benchmark: sidebar listing, appending a message, full-text search.

Builds a database of 10,000 conversations and 200,000 messages in a temporary folder (bulk
insert with raw SQL; the FTS5 triggers index it as it goes), then times the store's own API.
Targets: list <= 50 ms, append <= 5 ms, search <= 100 ms.
"""
from __future__ import annotations

import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from app.store import ConversationStore

CONVERSATIONS = 10_000
MESSAGES_PER_CONVERSATION = 20  # 200,000 messages
VOCABULARY = 5_000
WORDS_PER_MESSAGE = (8, 60)
# A common word, a rarer one, two words together, and a prefix as typed.
QUERIES = ("w0010", "w0900", "w0005 w0100", "w07")


def _words(rng: random.Random) -> list[str]:
    # Zipf-like: a few words are very common, most are rare, as in real text.
    weights = [1.0 / (rank + 1) for rank in range(VOCABULARY)]
    vocab = [f"w{rank:04d}" for rank in range(VOCABULARY)]
    return rng.choices(vocab, weights=weights, k=CONVERSATIONS * MESSAGES_PER_CONVERSATION * 34)


def build(path: Path, seed: int = 6) -> list[str]:
    """Create the schema with the store, then bulk-insert the data; returns conversation ids."""
    ConversationStore(path).close()
    rng = random.Random(seed)
    pool = _words(rng)
    cursor = 0
    base = 1_700_000_000_000_000  # microseconds since the epoch, like the store writes
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(CONVERSATIONS)]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO conversations (id, title, title_locked, pinned, created_at, updated_at, "
        "model_id, model_fingerprint, system_prompt, settings_json, kv_state, kv_bytes) "
        "VALUES (?, ?, 0, ?, ?, ?, 'bench', '', '', '{}', 'none', 0)",
        [(cid, f"Conversation {i} about {pool[i]}", int(i % 50 == 0), base + i, base + i * 7)
         for i, cid in enumerate(ids)])
    message_id = 0
    rows = []
    leaves = []
    for cid in ids:
        parent = None
        for depth in range(MESSAGES_PER_CONVERSATION):
            n = rng.randint(*WORDS_PER_MESSAGE)
            text = " ".join(pool[cursor:cursor + n])
            cursor = (cursor + n) % (len(pool) - WORDS_PER_MESSAGE[1])
            message_id += 1
            rows.append((message_id, cid, parent, depth, "user" if depth % 2 == 0 else "assistant",
                         text, base + message_id))
            parent = message_id
        leaves.append((parent, cid))
    conn.executemany(
        "INSERT INTO messages (id, conversation_id, parent_id, depth, role, content, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany("UPDATE conversations SET current_leaf_id = ? WHERE id = ?", leaves)
    conn.execute("COMMIT")
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("ANALYZE")
    conn.close()
    return ids


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm caches (page cache, statement cache)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run() -> dict[str, float]:
    """Build the database, measure the three figures (medians, ms), print and return them."""
    with tempfile.TemporaryDirectory(prefix="amber-bench-store-") as tmp:
        path = Path(tmp) / "amber.sqlite3"
        start = time.perf_counter()
        ids = build(path)
        build_s = time.perf_counter() - start
        cold = []
        for _ in range(5):  # a fresh store each time: no row objects to reuse yet
            with ConversationStore(path) as store:
                start = time.perf_counter()
                listed = store.list_conversations()
                cold.append((time.perf_counter() - start) * 1000)
                assert len(listed) == CONVERSATIONS
        list_cold_ms = statistics.median(cold)
        with ConversationStore(path) as store:
            # The sidebar refreshes after every change: the steady state the user sees.
            list_ms = _median_ms(store.list_conversations, runs=15)

            target = ids[len(ids) // 2]
            counter = iter(range(10**9))
            append_ms = _median_ms(
                lambda: store.add_message(target, "user", f"appended message {next(counter)} "
                                          "with a few words of text to index"), runs=200)

            per_query = {}
            for query in QUERIES:
                assert store.search(query), query
                per_query[query] = _median_ms(lambda query=query: store.search(query), runs=9)
            search_ms = max(per_query.values())
        results = {
            "store_list_10k_ms": round(list_ms, 2),
            "store_list_10k_first_call_ms": round(list_cold_ms, 2),
            "store_append_ms": round(append_ms, 3),
            "store_search_200k_ms": round(search_ms, 2),
        }
        print(f"store: built {CONVERSATIONS} conversations / "
              f"{CONVERSATIONS * MESSAGES_PER_CONVERSATION} messages in {build_s:.1f} s")
        print(f"store: list {list_ms:.2f} ms (first call {list_cold_ms:.2f} ms; target 50), "
              f"append {append_ms:.3f} ms (target 5), "
              f"search {search_ms:.2f} ms worst of {per_query} (target 100)")
        return results


if __name__ == "__main__":
    print(run())
