"""Figures that belong to the chat on screen: prefill progress in the reply bubble,
live figures while streaming, nothing of another chat after a switch, the model that wrote
each reply (kept across a model switch and a restart), and the overflow policies."""
from __future__ import annotations

import itertools
from pathlib import Path

from tests.support.fake_engine import FakeEngine
from tests.support.gui import open_chat, send, wait_idle

from app.gui.models import chat_figures
from app.gui.widgets.turn import LiveTurn, overflow_notice, prefill_text


def test_prefill_progress_shows_in_the_reply_bubble_until_the_first_token(make_window, engine, qtbot):
    engine.hold_prefill = True     # the fake prefill stops half way until released
    engine.prefill_steps = 4
    w = make_window(engine)
    send(qtbot, w, "a long paste " * 50, wait=False)
    qtbot.waitUntil(lambda: w.chat_view.widgets and w.chat_view.widgets[-1].prefill.isVisible(),
                    timeout=5000)
    bubble = w.chat_view.widgets[-1]
    # from the start the bubble says the prompt is being read (never an empty bubble)
    assert bubble.prefill.label.text().startswith("Reading prompt…")
    qtbot.waitUntil(lambda: " / " in bubble.prefill.label.text() and "left" in bubble.prefill.label.text()
                    or "almost done" in bubble.prefill.label.text(), timeout=5000)
    assert bubble.item.pending and bubble.body.toPlainText().strip() in ("", "…")
    done, total = w.stream.live.prefill
    assert total > 50 and done == total * 2 // 4          # two of the fake's four steps
    # tokens read so far, of how many, and (two reports apart: a measured rate) the time left
    counts = f"Reading prompt… {done:,} / {total:,} tokens, "
    assert bubble.prefill.label.text().startswith(counts)
    assert 490 <= bubble.prefill.bar.value() <= 500
    assert w.status.started.text().startswith(counts)   # not the previous turn's
    assert w.status.speed.text() == ""
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        engine.release_prefill.set()
    assert not w.chat_view.widgets[-1].prefill.isVisible()
    assert "prefilled" in w.status.started.text()


def test_live_tokens_and_speed_while_streaming_replace_the_last_turn(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "first")
    assert w.status.speed.text() == "42.5 tok/s"
    engine.delay = 0.03
    engine.reply = " ".join(f"w{i}" for i in range(60))
    send(qtbot, w, "second", wait=False)
    qtbot.waitUntil(lambda: "w10" in w.chat_view.stream_text, timeout=5000)
    text = w.status.started.text()
    assert text.startswith("generating: ") and "prefilled" not in text
    shown = int(text.split(": ")[1].split()[0])
    assert 5 <= shown <= 60
    qtbot.waitUntil(lambda: w.status.speed.text().endswith("tok/s"), timeout=5000)
    assert w.status.speed.text() != "42.5 tok/s"       # measured now, not the last turn's
    assert "tokens" in w.chat_view.widgets[-1].meta.text()
    with qtbot.waitSignal(w.replyFinished, timeout=10000):
        pass
    assert w.status.speed.text() == "42.5 tok/s"


def test_switching_chats_leaves_no_figures_of_the_other_chat(make_window, home, qtbot):
    engine = FakeEngine(home / "state", context_window=8192)
    w = make_window(engine)
    send(qtbot, w, "a pinned chat with some words in it")
    pinned = w.current_id
    w.toggle_pin(pinned)
    qtbot.waitUntil(lambda: w.chat_model.chat(pinned).kv_state == "disk", timeout=5000)
    qtbot.waitUntil(lambda: "tokens on disk" in w.status.kv.text(), timeout=3000)  # pinned: said so
    w.new_chat()
    open_chat(qtbot, w, pinned)
    assert "on disk" in w.status.kv.text() or "in memory" in w.status.kv.text()
    used = w.status.context.text()
    assert used.endswith("/ 8,192 tokens") and not used.startswith("0 ")
    # a new chat: nothing of the pinned one
    w.new_chat()
    assert w.status.kv.text() == "" and w.status.started.text() == "" and w.status.speed.text() == ""
    assert w.status.context.text() == "0 / 8,192 tokens"
    send(qtbot, w, "another chat")
    other = w.current_id
    open_chat(qtbot, w, pinned)
    open_chat(qtbot, w, other)
    wait_idle(qtbot, w)   # every answer of the engine about the sessions has arrived, after the switch
    assert "on disk" not in w.status.kv.text()
    used = w.store.active_path(other)[-1].figures["context_used"]
    assert w.status.context.text() == f"{used:,} / 8,192 tokens"


def test_each_reply_keeps_the_model_that_wrote_it(make_window, home, qtbot):
    engines = {"": FakeEngine(home / "state", model_name="Small-135M"),
               "Big-7B": FakeEngine(home / "state", model_name="Big-7B", context_window=8192)}
    w = make_window(engines[""], engine_factory=lambda md, sd, s: engines[s.model])
    send(qtbot, w, "hello small")
    assert w.chat_view.widgets[-1].role_label.text() == "Small-135M"
    # switch the model: the old reply keeps its label, the next reply gets the new one
    w.settings.model = "Big-7B"
    with qtbot.waitSignal(w.engineReady, timeout=5000):
        w.load_engine()
    assert w.chat_view.widgets[1].role_label.text() == "Small-135M"
    assert w.status.context.text().endswith("/ 8,192 tokens")
    assert "memory" not in w.status.kv.text()      # the old engine's KV went with it
    assert w.chat_model.chat(w.current_id).kv_state == "none"
    assert not w.status.context.text().startswith("0 ")      # the chat's own figure, not 0
    send(qtbot, w, "hello big")
    labels = [mw.role_label.text() for mw in w.chat_view.widgets if mw.item.role == "assistant"]
    assert labels == ["Small-135M", "Big-7B"]
    assert [m.model_name for m in w.store.active_path(w.current_id)] == \
        [None, "Small-135M", None, "Big-7B"]
    # reopened (from the store), the labels are the stored ones
    chat = w.current_id
    w.new_chat()
    open_chat(qtbot, w, chat)
    labels = [mw.role_label.text() for mw in w.chat_view.widgets if mw.item.role == "assistant"]
    assert labels == ["Small-135M", "Big-7B"]


def test_temporary_chats_keep_the_model_too(make_window, engine, qtbot):
    w = make_window(engine)
    w.new_chat(temporary=True)
    send(qtbot, w, "temp hello")
    assert [m.model_name for m in w.temp.active_path(w.current_id)] == [None, "Fake-Model-135M"]


def _chat_turns(w, qtbot, n: int) -> None:
    for i in range(n):
        send(qtbot, w, f"turn {i} " + "padding " * 20)


def test_overflow_default_truncates_the_middle_and_says_so(make_window, home, qtbot):
    engine = FakeEngine(home / "state", context_window=120, reply="ok " * 10)
    w = make_window(engine)
    _chat_turns(w, qtbot, 4)
    sampling = engine.called("generate")[-1][2]
    assert sampling.overflow == "truncate_middle"
    last = w.store.active_path(w.current_id)[-1]
    assert last.figures["dropped_messages"] > 0
    # the system prompt stays with truncate_middle
    assert engine.prompts[-1][0].role == "system"
    assert len(engine.prompts[-1]) < len(engine.generations[-1])
    bubble = w.chat_view.widgets[-1]
    assert not bubble.overflow_label.isHidden()
    assert "left out to fit the context window" in bubble.overflow_label.text()
    assert bubble.overflow_label.text() == overflow_notice(last.figures)
    # an earlier reply that fitted shows no notice
    assert w.chat_view.widgets[1].overflow_label.isHidden()
    # the notice comes back with the chat
    chat = w.current_id
    w.new_chat()
    open_chat(qtbot, w, chat)
    assert not w.chat_view.widgets[-1].overflow_label.isHidden()


def test_overflow_per_chat_setting_wins_over_the_default(make_window, home, qtbot):
    engine = FakeEngine(home / "state", context_window=120, reply="ok " * 10)
    w = make_window(engine)
    w.settings.overflow = "rolling"
    send(qtbot, w, "first turn")
    assert engine.called("generate")[-1][2].overflow == "rolling"
    w.store.update_settings(w.current_id, settings={"overflow": "stop"})
    _chat_turns(w, qtbot, 4)
    assert engine.called("generate")[-1][2].overflow == "stop"
    last = w.store.active_path(w.current_id)[-1]
    assert last.figures["finish_reason"] == "context_full" and last.figures["dropped_messages"] == 0
    assert "context full" in w.chat_view.widgets[-1].meta.text()


def test_rolling_window_drops_the_system_prompt_first(make_window, home, qtbot):
    engine = FakeEngine(home / "state", context_window=120, reply="ok " * 10)
    w = make_window(engine)
    w.settings.overflow = "rolling"
    _chat_turns(w, qtbot, 4)
    assert engine.generations[-1][0].role == "system"      # asked for, but left out
    assert engine.prompts[-1][0].role != "system"
    assert not w.chat_view.widgets[-1].overflow_label.isHidden()


def test_overflow_choice_in_the_chat_settings_dialog(make_window, engine, qtbot):
    from app.gui.dialogs.settings_dialog import ChatSettingsDialog, SettingsDialog

    w = make_window(engine)
    send(qtbot, w, "hi")
    detail = w.store.get_conversation(w.current_id)
    dlg = ChatSettingsDialog(detail, w.settings)
    assert dlg.overflow.currentData() == ""          # "use the default"
    dlg.overflow.setCurrentIndex(dlg.overflow.findData("stop"))
    prompt, overrides = dlg.values()
    assert overrides["overflow"] == "stop"
    assert chat_figures.overflow_policy(overrides, w.settings) == "stop"
    dlg.overflow.setCurrentIndex(dlg.overflow.findData(""))
    assert "overflow" not in dlg.values()[1]
    sd = SettingsDialog(w.settings, Path(w.home))
    sd.overflow.setCurrentIndex(sd.overflow.findData("rolling"))
    assert sd.result_settings().overflow == "rolling"


def test_the_time_left_counts_with_the_cost_that_grows_along_the_prompt() -> None:
    """A token further into the context costs more (attention reads every earlier one): with
    seconds per token = 2 ms + 3 µs·position and a first chunk that also warms up, the estimate
    is the true time left once three chunks are measured — a flat rate would say half of it."""
    def cost(p0: int, p1: int) -> float:
        return 0.002 * (p1 - p0) + 0.000003 * (p1 * p1 - p0 * p0) / 2

    total, now = 7670, [0.0]
    live = LiveTurn(clock=lambda: now[0])
    ends = list(range(0, total, 512)) + [total]
    live.on_prefill(0, total)
    for i, (p0, p1) in enumerate(itertools.pairwise(ends)):
        now[0] += cost(p0, p1) + (1.5 if i == 0 else 0.0)
        live.on_prefill(p1, total)
        truth = cost(p1, total)
        eta = live.prefill_eta()
        assert eta is not None
        if i >= 3 and p1 < total:
            assert abs(eta - truth) <= 0.02 * truth, (p1, eta, truth)
            flat = (now[0] / p1) * (total - p1)
            assert flat < 0.8 * truth          # what a rate from the average would have said
    assert live.prefill_eta() == 0.0


def test_live_turn_and_texts() -> None:
    now = [100.0]
    live = LiveTurn(clock=lambda: now[0])
    assert live.summary() == "Waiting for the first token…"
    live.on_prefill(0, 7670)
    assert live.summary() == prefill_text(0, 7670) == "Reading prompt… 0 / 7,670 tokens"   # no rate yet
    now[0] += 10.0
    live.on_prefill(512, 7670)                 # 51.2 tokens/s: 7,158 left, about 140 s
    assert live.summary() == "Reading prompt… 512 / 7,670 tokens, about 2 min left"
    now[0] += 20.0
    live.on_prefill(2048, 7670)                # 2,048 in 30 s: 5,622 left at 68.3/s, about 82 s
    assert live.summary() == "Reading prompt… 2,048 / 7,670 tokens, about 1 min left"
    now[0] += 40.0                             # no report for 40 s: the estimate counts down
    assert live.summary() == "Reading prompt… 2,048 / 7,670 tokens, about 40 s left"
    now[0] += 50.0
    assert live.summary().endswith("almost done")
    live.on_prefill(7670, 7670)
    assert live.summary() == "Read the prompt (7,670 tokens); the reply starts…"
    assert prefill_text(3, 10, 7.4) == "Reading prompt… 3 / 10 tokens, about 7 s left"
    assert prefill_text(3, 10, 47.0) == "Reading prompt… 3 / 10 tokens, about 45 s left"
    assert prefill_text(3, 10, 600.0) == "Reading prompt… 3 / 10 tokens, about 10 min left"
    live.on_chunk(1)
    assert live.decoding and live.tokens_per_s() is None
    assert overflow_notice({"dropped_messages": 1, "dropped_tokens": 40}) == \
        "1 older message (40 tokens) left out to fit the context window"
    assert overflow_notice({"dropped_messages": 0}) == "" and overflow_notice(None) == ""
    assert chat_figures.kv_text(None) == ""


def test_counts_are_singular_for_one():
    from app.gui.models.turn_figures import count, overflow_notice, short_figures
    from app.gui.widgets.status import how_started

    assert how_started({"prefilled_tokens": 1, "prefill_ms": 3}) == "prefilled 1 token in 3 ms"
    assert how_started({"reused_tokens": 1, "resume": "memory"}) == "reused 1 token from memory"
    assert how_started({"prefilled_tokens": 2048, "prefill_ms": 4200}) == "prefilled 2,048 tokens in 4.2 s"
    assert short_figures({"generated_tokens": 1}) == "1 token"
    assert overflow_notice({"dropped_messages": 1, "dropped_tokens": 1}) == \
        "1 older message (1 token) left out to fit the context window"
    assert count(0) == "0 tokens"
