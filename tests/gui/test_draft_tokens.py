"""Long pastes: the draft's size in the model's tokens under the composer before it is sent (a
warning when it will not fit), and the time left while the prompt is read — on the fake engine
and on the real engine over a tiny model."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.gui.draft_tokens import describe
from tests.support.gui import send, wait_idle
from tests.support.tiny_window import make_tiny_model, real_window


def _typed(qtbot, w, text: str) -> int:  # type: ignore[no-untyped-def]
    """Put `text` in the composer; the count it shows once counted."""
    with qtbot.waitSignal(w.draft_tokens.counted, timeout=5000) as sig:
        w.composer.set_text(text)
    return int(sig.args[0])


def test_the_draft_is_counted_and_warns_when_it_does_not_fit(make_window, engine, qtbot):
    engine.context_window = 200
    w = make_window(engine)
    assert not w.composer.tokens.isVisible()
    assert _typed(qtbot, w, "one two three four five") == 5          # the fake: a token a word
    assert w.composer.tokens.isVisible() and w.composer.tokens.text() == "5 tokens"
    assert not w.composer.tokens.property("warn")
    assert _typed(qtbot, w, "word " * 250) == 250
    assert w.composer.tokens.text() == "250 tokens — longer than the model's context window (200)"
    assert w.composer.tokens.property("warn")
    # typing fast: one count for the last text only (debounced), never a stale one shown
    with qtbot.waitSignal(w.draft_tokens.counted, timeout=5000) as sig:
        for n in range(1, 30):
            w.composer.set_text("w " * n)
    assert sig.args[0] == 29 and w.composer.tokens.text() == "29 tokens"
    with qtbot.waitSignal(w.draft_tokens.counted, timeout=5000) as sig:
        w.composer.set_text("   ")
    assert sig.args[0] == -1 and not w.composer.tokens.isVisible()


def test_with_the_chat_on_screen_the_warning_counts_its_context(make_window, engine, qtbot):
    engine.context_window = 120
    engine.reply = "short reply here"
    w = make_window(engine)
    send(qtbot, w, "a " * 60)
    wait_idle(qtbot, w)
    used = w.last_figures["context_used"]
    assert 60 < used < 120
    n = 120 - used + 5
    assert _typed(qtbot, w, "b " * n) == n
    assert w.composer.tokens.text() == \
        f"{n} tokens — with this chat's {used} it exceeds the context window (120)"
    assert w.composer.tokens.property("warn")
    # sent anyway: the count goes with the text
    with qtbot.waitSignal(w.draft_tokens.counted, timeout=5000) as sig:
        send(qtbot, w, "b " * n)
    assert sig.args[0] == -1 and not w.composer.tokens.isVisible()
    # a new chat has no context yet: the same draft fits
    w.new_chat()
    assert _typed(qtbot, w, "b " * n) == n and w.composer.tokens.text() == f"{n} tokens"


def test_an_engine_that_cannot_count_gives_an_estimate() -> None:
    assert describe(1, window=0, chat_tokens=0, exact=True) == ("1 token", False, "")
    text, warn, tip = describe(1234, window=8192, chat_tokens=0, exact=False)
    assert (text, warn) == ("about 1,234 tokens", False) and "Estimated" in tip


@pytest.fixture(scope="module")
def tiny_long(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-long"))


def test_real_engine_counts_with_its_tokenizer_and_shows_the_time_left(make_window, home, qtbot, tiny_long):
    w = real_window(make_window, home, qtbot, tiny_long)
    tokenizer = w.engine.model.tokenizer
    paste = "The quick brown fox jumps over the lazy dog. " * 70
    want = len(tokenizer.encode(paste, add_special_tokens=False).ids)
    assert want > 1200                       # several prefill chunks (512 tokens each)
    assert _typed(qtbot, w, paste) == want
    assert w.composer.tokens.text() == f"{want:,} tokens" and not w.composer.tokens.property("warn")

    seen: list[tuple[int, int, str]] = []

    def note(chat_id: str, done: int, total: int) -> None:
        bubble = w.chat_view.widgets[-1]
        seen.append((done, total, bubble.prefill.label.text()))

    w.replies.prefill.connect(note)
    send(qtbot, w, paste, timeout=120000)
    w.replies.prefill.disconnect(note)
    totals = {t for _, t, _ in seen}
    assert len(totals) == 1 and totals.pop() > want          # the template's tokens too
    middle = [(d, t, text) for d, t, text in seen if 0 < d < t]
    assert middle, seen                                      # reported between chunks
    for done, total, text in middle:
        assert text.startswith(f"Reading prompt… {done:,} / {total:,} tokens, ")
        assert text.endswith(" left") or text.endswith("almost done")
    assert w.status.started.text().startswith("prefilled")
    assert not w.chat_view.widgets[-1].prefill.isVisible()
