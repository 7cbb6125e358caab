"""A chat's title made by the loaded model from its first exchange.

`make_title(engine, user, reply)` asks the model in a side session of its own (a new temporary
session, closed at once: the chat's own session and KV are not touched, nothing is written to
disk) for a short title, and `clean_title` turns the answer into one: one line, no quotes or
Markdown, bounded — or None when the answer is empty or garbage (the caller keeps the title it
has). Runs on a worker thread; knows nothing of Qt.
"""
from __future__ import annotations

import re
import unicodedata
import uuid
from typing import Any

from app.store.titles import title_from_message
from engine.api import (CancelToken, ChatEngine, ChatMessage, GenerationResult, OverflowPolicy,
                        SamplingParams, SessionKind)

MAX_TITLE_CHARS = 60           # what the sidebar shows whole in its usual width
MAX_NEW_TOKENS = 24            # a title, not a sentence: the side session stays short
USER_CHARS = 1500              # how much of the exchange the model reads (a 100 s paste is not
REPLY_CHARS = 300              # read again for its title: its start says what it is about)
SHORT_QUESTION_CHARS = 25      # a first message shorter than this says too little on its own

ASK = "Give a short title (3 to 6 words)"

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?:chat\s+)?(?:title|subject|topic)\s*[:\-\u2013\u2014]\s*", re.IGNORECASE)
_WRAP = "\"'`*_#>~“”‘’«»„「」『』"
_ECHO = ("user:", "assistant:", "system:", "give a short title", "here is the start", "here's a",
         "here is a", "the answer")
_REFUSAL = ("i'm ", "i am ", "i cannot", "i can't", "as an ai", "sorry", "hello", "sure", "of course",
            "certainly")     # the model talking, not naming


def title_prompt(user: str, reply: str) -> list[ChatMessage]:
    """The side session's one message. The first message names the chat; the reply is shown too
    when that message is short ("hi", "help me with this"). Measured on the default model
    (SmolLM2-135M), a reply shown next to a real question pulls the title towards the reply."""
    question = _clip(user, USER_CHARS)
    if len(user.strip()) >= SHORT_QUESTION_CHARS:
        return [ChatMessage("user", f"{ASK} for a chat that starts with this question:\n\n{question}\n\n"
                                    "Reply with the title only.")]
    return [ChatMessage("user", f"Here is the start of a chat.\n\nUser: {question}\nAssistant: "
                                f"{_clip(reply, REPLY_CHARS)}\n\n{ASK} for this chat. Reply with the title only.")]


def clean_title(raw: str, limit: int = MAX_TITLE_CHARS) -> str | None:
    """The title in the model's answer: its first line without quotes, Markdown, a “Title:” label
    or final punctuation, cut at a word boundary; None when nothing title-like is left."""
    text = _THINK.sub("", raw or "")
    if "<think>" in text.lower():          # still thinking when the tokens ran out
        return None
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = _LABEL.sub("", line)
    previous = None
    while previous != line:
        previous = line
        line = line.strip().strip(_WRAP).strip()
        line = _LABEL.sub("", line)
        line = line.rstrip(".,;:!?\u3002").strip()
    line = " ".join(line.split())
    if not _looks_like_a_title(line):
        return None
    return title_from_message(line, limit)


def _looks_like_a_title(line: str) -> bool:
    if not line or "\ufffd" in line:
        return False
    if any(unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs") for c in line):
        return False
    low = line.lower()
    if low.startswith(_ECHO) or low.startswith(_REFUSAL) or low in ("title", "untitled", "new chat"):
        return False
    letters = sum(1 for c in line if c.isalpha())
    # mostly words: a run of symbols or digits is not a title
    return letters >= 2 and letters >= 0.5 * sum(1 for c in line if not c.isspace())


def make_title(engine: ChatEngine, user: str, reply: str, cancel: CancelToken | None = None) -> str | None:
    """Ask `engine` for a title of the exchange in a temporary side session; the cleaned title,
    or None (empty, garbage, cancelled). Engine errors propagate."""
    sid = str(uuid.uuid4())
    sampling = SamplingParams(greedy=True, max_new_tokens=MAX_NEW_TOKENS,
                              overflow=OverflowPolicy.TRUNCATE_MIDDLE.value)
    engine.open(sid, SessionKind.TEMPORARY)
    try:
        result: Any = None
        for event in engine.generate(sid, title_prompt(user, reply), sampling, cancel):
            if isinstance(event, GenerationResult):
                result = event
    finally:
        engine.close(sid)
    if result is None or (cancel is not None and cancel.is_set()):
        return None
    return clean_title(result.text)


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " …"
