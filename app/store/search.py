"""Full-text search over titles and message text (SQLite FTS5, bm25-ranked, with snippets)."""
from __future__ import annotations

import json
import re

from sqlalchemy import Connection, text

from .rows import SNIPPET_CLOSE, SNIPPET_OPEN, SearchHit

SNIPPET_ELLIPSIS = "\u2026"
SNIPPET_TOKENS = 12
# A title match says more about a conversation than one word somewhere in its messages.
TITLE_WEIGHT = 2.0

_WORD = re.compile(r"\w+", re.UNICODE)


def match_expression(query: str) -> str | None:
    """Turn what the user typed into a safe FTS5 query: all words, the last one as a prefix."""
    # Quoting every word means FTS5 syntax (AND, NEAR, quotes, column filters) typed by the
    # user is searched for literally instead of raising a syntax error.
    words = _WORD.findall(query)
    if not words:
        return None
    terms = [f'"{w}"' for w in words]
    if not query[-1:].isspace():  # still typing the last word: match it as a prefix
        terms[-1] += "*"
    return " ".join(terms)


# When a query matches more messages than this (a word as common as "the"), only the most
# recent ones are ranked: bm25 costs a few microseconds per matching row, and the search must
# stay well under 100 ms on 200,000 messages. Finding the cut-off itself costs ~1 ms.
RANK_WINDOW = 16_000

_WINDOW_FLOOR = text("""
    SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q
    ORDER BY rowid DESC LIMIT 1 OFFSET :offset
""")

# The best `k` messages (one bm25 pass), then their conversations: joining only the top k
# rows instead of every match keeps common words cheap.
_MESSAGE_HITS = text("""
    WITH top AS MATERIALIZED (
        SELECT rowid AS mid, bm25(messages_fts) AS score
        FROM messages_fts WHERE messages_fts MATCH :q AND rowid >= :floor
        ORDER BY score LIMIT :k
    )
    SELECT m.conversation_id AS cid, top.mid AS mid, top.score AS score
    FROM top JOIN messages m ON m.id = top.mid
    ORDER BY top.score
""")

_TITLE_HITS = text(f"""
    SELECT c.id AS cid, bm25(conversations_fts) AS score,
           highlight(conversations_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}') AS snippet
    FROM conversations_fts JOIN conversations c ON c.pk = conversations_fts.rowid
    WHERE conversations_fts MATCH :q
    ORDER BY score
    LIMIT :n
""")

_SNIPPET = text(f"""
    SELECT snippet(messages_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '{SNIPPET_ELLIPSIS}',
                   {SNIPPET_TOKENS}) AS snippet
    FROM messages_fts WHERE messages_fts MATCH :q AND rowid = :mid
""")


def search(conn: Connection, query: str, limit: int = 50) -> list[SearchHit]:
    """Conversations matching `query`, best first: bm25 of the best message plus the title's."""
    expr = match_expression(query)
    if expr is None or limit <= 0:
        return []
    pool = limit * 2  # each list is cut before merging; a margin keeps near-misses in the race
    scores: dict[str, float] = {}
    best_message: dict[str, int] = {}
    title_snippet: dict[str, str] = {}
    # bm25() is "lower is better" and negative; ranks are flipped so that higher is better.
    for cid, (mid, score) in _best_messages(conn, expr, pool).items():
        scores[cid] = score
        best_message[cid] = mid
    for row in conn.execute(_TITLE_HITS, {"q": expr, "n": pool}):
        scores[row.cid] = scores.get(row.cid, 0.0) + TITLE_WEIGHT * -row.score
        title_snippet[row.cid] = row.snippet
    ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)[:limit]
    if not ranked:
        return []
    titles = dict(conn.execute(
        text("SELECT id, title FROM conversations WHERE id IN (SELECT value FROM json_each(:ids))"),
        {"ids": json.dumps([cid for cid, _ in ranked])},
    ).all())
    hits = []
    for cid, rank in ranked:
        snippet = None
        if cid in best_message:
            snippet = conn.execute(_SNIPPET, {"q": expr, "mid": best_message[cid]}).scalar()
        if snippet is None:
            snippet = title_snippet.get(cid, titles.get(cid, ""))
        hits.append(SearchHit(conversation_id=cid, title=titles.get(cid, ""), snippet=snippet,
                              rank=rank))
    return hits


def _best_messages(conn: Connection, expr: str, want: int) -> dict[str, tuple[int, float]]:
    """Up to `want` conversations, best first, each with its best message and score."""
    floor = conn.execute(_WINDOW_FLOOR, {"q": expr, "offset": RANK_WINDOW - 1}).scalar() or 0
    k = max(want * 8, 200)
    while True:
        best: dict[str, tuple[int, float]] = {}
        rows = conn.execute(_MESSAGE_HITS, {"q": expr, "floor": floor, "k": k}).all()
        for row in rows:  # ordered by score: the first row of a conversation is its best
            if row.cid not in best:
                best[row.cid] = (row.mid, -row.score)  # bm25 is negative, lower is better
        # The top k messages hold the exact top conversations as long as they name enough
        # distinct ones; if not (a few long chats match a lot), look further.
        if len(best) >= want or len(rows) < k:
            return dict(list(best.items())[:want])
        k *= 4
