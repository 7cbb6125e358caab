"""Long chats on the tiny model (context window 512): the overflow policies (stop, truncate_middle,
rolling), what they report, KV reuse of what stays, the CLI's --overflow, and PrefillProgress."""
from __future__ import annotations

import json

import pytest

from engine.api import (ChatMessage, GenerationResult, OverflowPolicy, PrefillProgress, SamplingParams,
                        TextChunk)
from engine.generation.generate import collect
from engine.generation.overflow import fit_messages, reply_room
from engine.sessions.manager import SessionManager

SYSTEM = "You are brief."
MAX_NEW = 16


def long_text(i: int) -> str:
    # Multi-byte text: many tokens per character with the tiny vocabulary.
    return f"Turn {i}: " + "ünïcödé façade 🎉 " * 4


def conversation(pairs: int) -> list[ChatMessage]:
    msgs = [ChatMessage("system", SYSTEM)]
    for i in range(pairs):
        msgs += [ChatMessage("user", f"U{i} " + long_text(i)), ChatMessage("assistant", f"A{i} " + long_text(i))]
    return msgs + [ChatMessage("user", "and the last question?")]


def sampling(policy: OverflowPolicy, max_new: int = MAX_NEW) -> SamplingParams:
    return SamplingParams(greedy=True, max_new_tokens=max_new, overflow=policy.value)


@pytest.fixture
def manager(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    m = SessionManager(tiny_model, tmp_path / "state", block_tokens=16)
    yield m
    m.shutdown(timeout=5)


def held_text(m: SessionManager, sid: str) -> str:
    return m._open[sid].history.text   # white-box: the template text the session's ids stand for


def test_the_conversation_is_over_the_window(manager):
    assert len(manager.generator.encode_chat(conversation(8))) > manager.context_window


def test_stop_refuses_the_turn_as_before(manager):
    s = manager.open(None, "temporary").session_id
    r = collect(manager.generate(s, conversation(8), sampling(OverflowPolicy.STOP)))
    assert r.figures.finish_reason == "context_full" and r.token_ids == []
    assert r.figures.dropped_messages == 0 and r.figures.dropped_tokens == 0


def test_truncate_middle_keeps_the_system_prompt_and_the_latest_turns(manager):
    m, window = manager, manager.context_window
    s = m.open(None, "regular").session_id
    warm = collect(m.generate(s, conversation(0), sampling(OverflowPolicy.TRUNCATE_MIDDLE)))
    msgs = conversation(8)
    full = len(m.generator.encode_chat(msgs))
    r = collect(m.generate(s, msgs, sampling(OverflowPolicy.TRUNCATE_MIDDLE)))
    f = r.figures
    assert f.finish_reason in ("eos", "length") and r.token_ids
    assert f.dropped_messages > 0 and f.dropped_messages % 2 == 0     # whole user/assistant pairs
    assert f.dropped_tokens > 0 and f.prompt_tokens == full - f.dropped_tokens
    assert f.prompt_tokens + reply_room(window, MAX_NEW) <= window
    text = held_text(m, s)
    assert text.startswith(m.generator.template.render([msgs[0]], add_generation_prompt=False))
    assert "U0 " not in text and "A0 " not in text and "and the last question?" in text
    kept_users = [msg.content for msg in msgs[1 + f.dropped_messages:] if msg.role == "user"]
    assert all(u in text for u in kept_users)
    # The system prompt's KV stays: only what follows it is computed.
    system_tokens = len(m.generator.encode_chat([msgs[0]])) - len(m.generator.encode_chat([]))
    assert f.reused_tokens >= system_tokens > 0
    assert warm.figures.prompt_tokens > f.reused_tokens

    # The next turn keeps the same cut (it still fits): only the new turn is computed.
    msgs2 = msgs + [ChatMessage("assistant", r.text), ChatMessage("user", "and one more?")]
    r2 = collect(m.generate(s, msgs2, sampling(OverflowPolicy.TRUNCATE_MIDDLE)))
    assert r2.figures.dropped_messages == f.dropped_messages
    own = len(m.model.tokenizer.encode("and one more?").ids)
    assert r2.figures.prefilled_tokens <= own + 24

    # Many turns later the cut moves on, with room to spare; the conversation goes on.
    msgs3 = conversation(12)
    r3 = collect(m.generate(s, msgs3, sampling(OverflowPolicy.TRUNCATE_MIDDLE)))
    assert r3.figures.finish_reason in ("eos", "length")
    assert r3.figures.dropped_messages > f.dropped_messages
    assert r3.figures.prompt_tokens + reply_room(window, MAX_NEW) <= window
    assert held_text(m, s).startswith(m.generator.template.render([msgs[0]], add_generation_prompt=False))


def test_rolling_keeps_only_the_latest_turns(manager):
    m = manager
    s = m.open(None, "temporary").session_id
    msgs = conversation(8)
    r = collect(m.generate(s, msgs, sampling(OverflowPolicy.ROLLING)))
    f = r.figures
    assert f.finish_reason in ("eos", "length") and r.token_ids
    assert f.dropped_messages % 2 == 1       # the system message and whole pairs
    text = held_text(m, s)
    assert SYSTEM not in text and "U0 " not in text and "and the last question?" in text
    assert f.prompt_tokens + reply_room(m.context_window, MAX_NEW) <= m.context_window


@pytest.mark.parametrize("policy", list(OverflowPolicy))
def test_a_last_message_longer_than_the_window_is_context_full_for_every_policy(manager, policy):
    s = manager.open(None, "temporary").session_id
    msgs = [ChatMessage("system", SYSTEM), ChatMessage("user", long_text(0) * 12)]
    r = collect(manager.generate(s, msgs, sampling(policy)))
    assert r.figures.finish_reason == "context_full" and r.token_ids == []
    # The session still works afterwards.
    ok = collect(manager.generate(s, conversation(0), sampling(policy)))
    assert ok.figures.finish_reason in ("eos", "length")


def test_an_unknown_policy_is_refused_before_anything_runs(manager):
    s = manager.open(None, "temporary").session_id
    with pytest.raises(ValueError, match="unknown overflow policy 'middle'"):
        manager.generate(s, conversation(0), SamplingParams(overflow="middle"))


# ---- the policy on its own ----------------------------------------------------------------------
def _msgs(roles: str) -> list[dict]:
    names = {"s": "system", "u": "user", "a": "assistant"}
    return [{"role": names[r], "content": f"{r}{i}"} for i, r in enumerate(roles)]


def test_fit_messages_cuts_at_a_user_message_and_is_sticky():
    msgs = _msgs("suauauau")
    measure = lambda kept: 10 * len(kept)        # noqa: E731 - 10 tokens a message
    fit = fit_messages(msgs, OverflowPolicy.TRUNCATE_MIDDLE, window=80, room=20, measure=measure)
    # Budget 60, less a slack of 10 when the cut moves: at most 5 messages, cut at a user message.
    assert [m["content"] for m in fit.messages] == ["s0", "u5", "a6", "u7"]
    assert fit.dropped_messages == 4 and fit.start == 5
    # A later turn: a cut that still fits is kept (sticky) rather than moved.
    more = msgs + [{"role": "assistant", "content": "a8"}, {"role": "user", "content": "u9"}]
    assert fit_messages(more, OverflowPolicy.TRUNCATE_MIDDLE, window=100, room=20, measure=measure,
                        sticky_start=3).start == 3
    assert fit_messages(more, OverflowPolicy.TRUNCATE_MIDDLE, window=100, room=20, measure=measure).start == 5
    roll = fit_messages(msgs, OverflowPolicy.ROLLING, window=80, room=20, measure=measure)
    assert roll.messages[0]["role"] == "user" and all(m["role"] != "system" for m in roll.messages)
    assert fit_messages(msgs, OverflowPolicy.STOP, 80, 20, measure).dropped_messages == 0


# ---- prefill progress ---------------------------------------------------------------------------
def test_prefill_progress_is_sent_at_the_start_and_between_chunks(manager, monkeypatch):
    monkeypatch.setattr("engine.generation.generate.PREFILL_CHUNK", 16)
    s = manager.open(None, "temporary").session_id
    msgs = conversation(2)
    events = list(manager.generate(s, msgs, sampling(OverflowPolicy.STOP, 4)))
    result = events[-1]
    assert isinstance(result, GenerationResult)
    total = result.figures.prefilled_tokens
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    assert total > 32
    assert [(p.done, p.total) for p in progress] == [(d, total) for d in range(0, total, 16)] + [(total, total)]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextChunk))
    assert all(isinstance(e, PrefillProgress) for e in events[:len(progress)]) and first_text >= len(progress)
    assert collect(iter(events)) is result


# ---- CLI ------------------------------------------------------------------------------------------
def test_cli_overflow_option(run_cli, tiny_dir, tmp_path):
    proc = run_cli("generate", "--model", tiny_dir, "--chat", "hi", "--greedy", "--max-tokens", "4",
                   "--overflow", "rolling", "--json", "--state-dir", tmp_path / "s")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1           # --json: one object, no progress lines
    data = json.loads(lines[0])
    assert data["dropped_messages"] == 0 and data["dropped_tokens"] == 0 and data["generated_tokens"] > 0
    bad = run_cli("generate", "--model", tiny_dir, "--chat", "hi", "--overflow", "middle")
    assert bad.returncode == 2 and "invalid choice: 'middle'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
