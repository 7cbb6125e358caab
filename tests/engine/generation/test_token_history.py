"""Token-exact chat history (engine.generation.history, engine.generation.chat_history) on the tiny converted model.

After any reply (finished, cut at max tokens, stopped by a stop string, cancelled, regenerated,
edited, full of odd characters or stopped after a partial UTF-8 character), the next turn
prefills only the new turn's own tokens plus the template's glue, in memory and after a restart.
The replies are made adversarial by sampling the tiny random-weight model at a high temperature
over its whole byte-level vocabulary: random token sequences, most of them not the canonical
tokenization of their text, many ending inside a multi-byte character.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import ChatMessage, GenerationResult, SamplingParams, SessionKind, TextChunk
from engine.generation.generate import collect
from engine.generation.history import HistoryFormatError, TokenHistory, common_text_prefix
from engine.sessions.manager import SessionManager

B = 16
# The template's glue around a new user turn (both models use ChatML): this before and after it.
GLUE_TEXT = "<|im_end|>\n<|im_start|>user\n" + "<|im_end|>\n<|im_start|>assistant\n"
# Beyond the glue: the reply's last token (never run), what a stop string left of the reply's last
# token, tokenization at the pieces' edges.
SLACK = 6
SYSTEM = "You are brief."
USER_TEXTS = ["Hello!", "What is the capital of France?", "東京は日本の首都です。", "Emoji 🎉🙂👍🏽 please",
              "def main():\n    return 42", "ünïcödé façade naïve", "   spaces   \n\n\ttabs", "and then?"]


class CancelAfter:
    """Cancels after `n` text chunks (the GUI's Stop button, from the consumer's side)."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def is_set(self) -> bool:
        return self.seen >= self.n


def wild(seed: int, max_new: int, stop: list[str] | None = None) -> SamplingParams:
    """Near-uniform sampling over the whole vocabulary: adversarial replies."""
    return SamplingParams(temperature=4.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                          seed=seed, max_new_tokens=max_new, stop=list(stop or []))


def greedy(max_new: int = 8) -> SamplingParams:
    return SamplingParams(greedy=True, max_new_tokens=max_new)


def own_tokens(m: SessionManager, text: str) -> int:
    return len(m.model.tokenizer.encode(text, add_special_tokens=False).ids)


def bound(m: SessionManager, user_text: str) -> int:
    """What a new turn may prefill: its own tokens, the template's glue and a small constant."""
    return own_tokens(m, user_text) + own_tokens(m, GLUE_TEXT) + SLACK


def run(m: SessionManager, s: str, messages: list[ChatMessage], sampling: SamplingParams,
        cancel: CancelAfter | None = None) -> GenerationResult:
    result = None
    for ev in m.generate(s, messages, sampling, cancel):
        if isinstance(ev, TextChunk) and cancel is not None:
            cancel.seen += 1
        if isinstance(ev, GenerationResult):
            result = ev
    assert result is not None
    return result


@pytest.fixture
def managers(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    made: list[SessionManager] = []

    def make(state: Path | None = None) -> SessionManager:
        m = SessionManager(tiny_model, state or tmp_path / "state", block_tokens=B)
        made.append(m)
        return m
    yield make
    for m in made:
        m.shutdown(timeout=5)


# ---- the property ------------------------------------------------------------------------------
TURN = st.fixed_dictionaries({
    "user": st.sampled_from(USER_TEXTS),
    "seed": st.integers(0, 2**31 - 1),
    "max_new": st.integers(1, 24),                        # cut at max tokens, often mid-character
    "stop": st.sampled_from([[], ["e"], ["a", "th"], [" "], ["\n"], ["\ufffd"]]),
    "cancel_after": st.none() | st.integers(0, 6),        # Stop pressed after n chunks
    "restart": st.booleans(),                              # the app restarts before the next turn
})


# Random examples on a developer's machine (a failure prints the blob to replay it), the same fixed
# examples in CI so that a clean run is reproducible: one rare example failed once and could not be
# reproduced over 39 further seeds (2026-12-01).
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=bool(os.environ.get("CI")), print_blob=True)
@given(turns=st.lists(TURN, min_size=2, max_size=5), pinned=st.booleans())
def test_next_turn_prefills_only_its_own_tokens(tiny_model, tmp_path_factory, turns, pinned):
    state = tmp_path_factory.mktemp("state")
    s = str(uuid.uuid4())
    kind = SessionKind.PINNED if pinned else SessionKind.REGULAR
    m = SessionManager(tiny_model, state, block_tokens=B)
    try:
        m.open(s, kind)
        messages = [ChatMessage("system", SYSTEM)]
        for i, t in enumerate(turns):
            messages.append(ChatMessage("user", t["user"]))
            cancel = CancelAfter(t["cancel_after"]) if t["cancel_after"] is not None else None
            r = run(m, s, messages, wild(t["seed"], t["max_new"], t["stop"]), cancel)
            f = r.figures
            assert f.prompt_tokens == f.reused_tokens + f.prefilled_tokens
            if i:
                limit = bound(m, t["user"])
                assert f.prefilled_tokens <= limit, (i, f, r.text)
                assert f.fallback_reason is None
            # What the GUI keeps of the reply: the streamed text (cancelled: what was shown).
            messages.append(ChatMessage("assistant", r.text))
            if t["restart"] and pinned:
                assert m.wait_for_saves()
                m.shutdown()
                m = SessionManager(tiny_model, state, block_tokens=B)
                m.open(s)
    finally:
        m.shutdown()


# ---- the same, spelled out ---------------------------------------------------------------------
def test_odd_reply_cut_mid_character_resumes_after_a_restart_without_prefill(managers, tmp_path):
    m = managers()
    s = m.open(None, "pinned").session_id
    messages = [ChatMessage("system", SYSTEM), ChatMessage("user", "東京は日本の首都です。")]
    # Find a seed whose reply is not the canonical tokenization of its text (the case that forced
    # re-prefills) and ends inside a character.
    for seed in range(200):
        r = run(m, s, messages, wild(seed, 9))
        ids = m.model.tokenizer.encode(r.text, add_special_tokens=False).ids
        if ids != r.token_ids and m.model.tokenizer.decode(r.token_ids).endswith("\ufffd"):
            break
    else:
        pytest.fail("no adversarial reply in 200 seeds")
    turn1 = r
    assert "\ufffd" not in turn1.text       # the broken character is not in the text the GUI keeps
    assert m.wait_for_saves()
    m.shutdown()

    m2 = managers()
    m2.open(s)
    messages += [ChatMessage("assistant", turn1.text), ChatMessage("user", "and then?")]
    r2 = run(m2, s, messages, greedy())
    assert r2.figures.resume == "disk"
    assert r2.figures.prefilled_tokens <= bound(m2, "and then?")
    # The prompt is the held ids: turn 1's prompt and every reply token, then the new turn.
    history = m2._open[s].history            # white-box: the ids the session holds
    assert list(history.ids[:turn1.figures.prompt_tokens + len(turn1.token_ids)]) == \
        m2.generator.encode_chat(messages[:2]) + turn1.token_ids


def test_regenerate_and_edit_compute_only_what_follows_the_shared_prefix(managers):
    m = managers()
    s = m.open(None, "regular").session_id
    msgs = [ChatMessage("system", SYSTEM)]
    prompts = []
    for seed, text in enumerate(["Hello!", "What is the capital of France?", "Emoji 🎉 please"]):
        msgs.append(ChatMessage("user", text))
        r = run(m, s, msgs, wild(seed, 12, ["e"]))
        prompts.append(r.figures.prompt_tokens)
        msgs.append(ChatMessage("assistant", r.text))

    # Regenerate the last reply: the whole prompt is held; one token is recomputed for its logits.
    regen = run(m, s, msgs[:-1], wild(99, 12))
    assert regen.figures.prompt_tokens == prompts[-1]
    assert regen.figures.prefilled_tokens == 1

    # Edit the second user message and resend: everything up to the first reply is kept.
    edited = msgs[:3] + [ChatMessage("user", "What is the capital of Spain, then?")]
    e = run(m, s, edited, wild(5, 12))
    assert e.figures.prefilled_tokens <= bound(m, edited[-1].content)
    assert e.figures.reused_tokens >= prompts[0]

    # Back to the original branch: its first turn is still shared, its second is tokenized again.
    back = run(m, s, msgs[:4], wild(6, 4))
    assert back.figures.prefilled_tokens <= bound(m, msgs[3].content)


def test_first_turn_prompt_is_the_canonical_rendering(managers):
    m = managers()
    s = m.open(None, "temporary").session_id
    msgs = [ChatMessage("system", SYSTEM), ChatMessage("user", "Hello!")]
    r = run(m, s, msgs, greedy())
    assert r.figures.prompt_tokens == len(m.generator.encode_chat(msgs))
    assert r.figures.reused_tokens == 0


def test_cli_chat_mode_keeps_the_history_token_exact(managers):
    m = managers()
    s = m.open(None, "pinned").session_id
    r1 = collect(m.chat(s, "東京は日本の首都です。", system=SYSTEM, sampling=wild(3, 7)))
    r2 = collect(m.chat(s, "and then?", sampling=greedy()))
    assert r2.figures.prefilled_tokens <= bound(m, "and then?")
    assert m.transcript(s)[2] == {"role": "assistant", "content": r1.text}


def test_a_special_token_inside_a_reply_stays_in_the_held_ids(managers):
    """A reply with a special token in it (SmolLM2 has 17: <jupyter_code>, <filename>, ...): the
    text the caller gets back skips it, the held ids keep it, and the next turn still matches."""
    from engine.api import GenerationFigures
    from engine.generation.history import reply_marks
    m = managers()
    planner = m.planner
    tok = m.model.tokenizer
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello!"}]
    job = planner.prepare(msgs, greedy())
    plan = planner.plan(job, TokenHistory(), None, GenerationFigures())
    words = tok.encode(" the capital", add_special_tokens=False).ids
    reply = words[:1] + [1] + words[1:]                  # <|im_start|> in the middle, not EOS
    text, _ = reply_marks(tok, plan.ids[-8:], reply)
    assert text == tok.decode(reply, skip_special_tokens=True)     # what GenerationResult.text says
    history = planner.record(TokenHistory(), plan, reply)
    nxt = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": "and then?"}]
    plan2 = planner.plan(planner.prepare(nxt, greedy()), history, None, GenerationFigures())
    assert plan2.ids[:len(plan.ids) + len(reply)] == plan.ids + reply
    assert len(plan2.prompt.suffix_ids) <= own_tokens(m, GLUE_TEXT) + own_tokens(m, "and then?")


# ---- saved history: untrusted input -------------------------------------------------------------
def test_a_damaged_saved_history_falls_back_to_tokenizing_the_conversation(managers, tmp_path):
    m = managers()
    s = m.open(None, "pinned").session_id
    msgs = [ChatMessage("system", SYSTEM), ChatMessage("user", "Hello!")]
    r = run(m, s, msgs, wild(1, 6))
    assert m.wait_for_saves()
    m.shutdown()
    manifest = tmp_path / "state" / "sessions" / f"{s}.json"
    data = json.loads(manifest.read_text())
    assert data["history"]["ids"][:r.figures.prompt_tokens] == m.generator.encode_chat(msgs)
    data["history"]["ids"][0] = 10**9           # outside the vocabulary
    manifest.write_text(json.dumps(data))

    m2 = managers()
    m2.open(s)
    assert m2._open[s].history == TokenHistory()
    r2 = run(m2, s, msgs + [ChatMessage("assistant", r.text), ChatMessage("user", "and then?")], greedy())
    assert r2.figures.finish_reason in ("eos", "length")
    assert r2.figures.resume == "disk"           # the KV still serves the shared prefix


@pytest.mark.parametrize("bad", [
    None, [], {"ids": [1], "text": 3, "marks": [[0, 0]]},
    {"ids": [1, 2], "text": "ab", "marks": [[0, 0], [3, 1]]},       # mark past the ids
    {"ids": [1, 2], "text": "ab", "marks": [[0, 0], [2, 1], [1, 2]]},   # out of order
    {"ids": [1, 2], "text": "ab", "marks": [[1, 1]]},               # not starting at 0
    {"ids": [1, True], "text": "ab", "marks": [[0, 0]]},            # a bool is not an id
    {"ids": [-1], "text": "a", "marks": [[0, 0]]},
])
def test_history_validation_names_the_problem(bad):
    with pytest.raises(HistoryFormatError):
        TokenHistory.from_json(bad, vocab_size=420)


def test_history_round_trips_and_matches_the_longest_mark():
    h = TokenHistory().extend((0, 0), [5, 6, 7], "abc", [(1, 1), (2, 2)])
    assert TokenHistory.from_json(json.loads(json.dumps(h.to_json())), 420) == h
    assert h.match("abcdef") == (3, 3)
    assert h.match("abX") == (2, 2)
    assert h.match("zzz") == (0, 0)
    assert common_text_prefix("abcd", "abXd") == 2 and common_text_prefix("", "a") == 0


# ---- the real default model --------------------------------------------------------------------
@pytest.mark.slow
def test_default_model_history_is_token_exact_in_memory_and_after_a_restart(default_model_dir, tmp_path):
    from engine.runtime.model import load_model
    model = load_model(default_model_dir, provider="cpu")
    state = tmp_path / "state"
    m = SessionManager(model, state)
    s = m.open(None, "pinned").session_id
    msgs = [ChatMessage("system", "You are a helpful assistant."),
            ChatMessage("user", "Write a short poem about Paris, with emoji.")]
    # Defaults from the model's generation_config.json, seeded, cut at the limit; a seed whose reply
    # is not the canonical tokenization of its text. The "\n\n" token is favoured: the tokenizer
    # spells a blank line before a word "\n" + "\n", so a reply using it is off the canonical form.
    # Without the bias, whether any of 30 seeds writes such a reply depends on the CPU's rounding.
    blank_line = model.tokenizer.encode("\n\n", add_special_tokens=False).ids
    assert len(blank_line) == 1
    for seed in range(30):
        r1 = run(m, s, msgs, SamplingParams(seed=seed, max_new_tokens=80, logit_bias={blank_line[0]: 8.0}))
        if model.tokenizer.encode(r1.text, add_special_tokens=False).ids != r1.token_ids:
            break
    else:
        pytest.fail("no reply in 30 seeds was off the canonical tokenization")
    assert r1.figures.finish_reason == "length"
    msgs += [ChatMessage("assistant", r1.text), ChatMessage("user", "Now one about Rome.")]
    r2 = run(m, s, msgs, SamplingParams(seed=2, max_new_tokens=24, stop=[","]))
    assert r2.figures.prefilled_tokens <= bound(m, "Now one about Rome.")
    assert m.wait_for_saves()
    m.shutdown()

    m = SessionManager(model, state)
    try:
        m.open(s)
        msgs += [ChatMessage("assistant", r2.text), ChatMessage("user", "Thanks! 🎉")]
        r3 = run(m, s, msgs, SamplingParams(greedy=True, max_new_tokens=8))
        assert r3.figures.resume == "disk" and r3.figures.fallback_reason is None
        assert r3.figures.prefilled_tokens <= bound(m, "Thanks! 🎉")
    finally:
        m.shutdown()
