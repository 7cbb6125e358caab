"""The draft's size before it is sent: “1,234 tokens” under the composer, counted with the
model's own tokenizer off the UI thread (debounced while typing), and a warning when it will not
fit the context window — alone, or with the chat on screen."""
from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal, SignalInstance

from .controllers.engine import EngineController
from .tasks import TaskRunner
from .widgets.composer import Composer

DEBOUNCE_MS = 300
CHARS_PER_TOKEN = 4        # a rough estimate, only where the engine cannot count (a remote server)


def describe(tokens: int, *, window: int, chat_tokens: int, exact: bool) -> tuple[str, bool, str]:
    """What the composer says of a draft of `tokens`: (text, warn, tooltip)."""
    count = f"{tokens:,} token{'s' if tokens != 1 else ''}"
    if not exact:
        count = f"about {count}"
    tip = "" if exact else "Estimated: the server does not count tokens for Amber"
    if window and tokens >= window:
        return (f"{count} — longer than the model's context window ({window:,})", True,
                "The model cannot read all of it: shorten the message or load a model with a larger "
                "context window")
    if window and chat_tokens and chat_tokens + tokens > window:
        return (f"{count} — with this chat's {chat_tokens:,} it exceeds the context window "
                f"({window:,})", True,
                "Older messages will be left out to make room (see this chat's settings)")
    return count, False, tip


class DraftTokens(QObject):
    counted = Signal(int)      # the draft's count, once shown (-1: nothing to count)

    def __init__(self, composer: Composer, engines: EngineController, tasks: TaskRunner, *,
                 figures: Callable[[], dict[str, Any] | None], chat_loaded: SignalInstance,
                 reply_finished: SignalInstance, parent: QObject | None = None):
        """`figures()`: the chat on screen's last figures (None for a new chat); the draft is
        counted again when `chat_loaded` or `reply_finished` fire (another chat, a longer one)."""
        super().__init__(parent)
        self.composer, self.engines, self.tasks, self.figures = composer, engines, tasks, figures
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self.count)
        self.busy = False          # a count is running (one at a time: a long paste is slow)
        self.again = False         # ... and the draft changed meanwhile
        composer.edit.textChanged.connect(self.timer.start)
        engines.ready.connect(lambda _engine: self.count())     # another tokenizer
        engines.loadStarted.connect(lambda: self.composer.show_tokens(""))
        chat_loaded.connect(lambda _chat_id: self.timer.start())      # another chat's context
        reply_finished.connect(lambda _chat_id: self.timer.start())   # the chat grew

    def count(self) -> None:
        text, engine = self.composer.text(), self.engines.engine
        if not text.strip() or engine is None:
            self.composer.show_tokens("")
            self.counted.emit(-1)
            return
        if self.busy:
            self.again = True
            return
        self.busy = True

        def work() -> tuple[int, bool]:
            n = engine.count_tokens(text)
            return (n, True) if n is not None else (max(1, round(len(text) / CHARS_PER_TOKEN)), False)

        self.tasks.run_task(work, lambda result: self._done(text, *result), self._failed)

    def _done(self, text: str, tokens: int, exact: bool) -> None:
        self.busy = False
        if self.again or text != self.composer.text():
            self.again = False
            self.count()             # the draft changed while it was counted
            return
        text_, warn, tip = describe(tokens, window=self.engines.context_window,
                                    chat_tokens=self._chat_tokens(), exact=exact)
        self.composer.show_tokens(text_, warn=warn, tip=tip)
        self.counted.emit(tokens)

    def _failed(self, exc: BaseException) -> None:
        self.busy = False
        self.composer.show_tokens("")
        if self.again:
            self.again = False
            self.count()

    def _chat_tokens(self) -> int:
        """The context the chat on screen used at its last reply (0 for a new chat)."""
        return int((self.figures() or {}).get("context_used") or 0)
