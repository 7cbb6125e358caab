"""What the user does to replies from the window: send, stop, regenerate, edit and resend. A
turn in a pinned chat made with another model waits for that model (`ModelChoice`)."""
from __future__ import annotations

from typing import Any

from .controllers.replies import RepliesController
from .model_choice import ModelChoice
from .widgets.chat_view import ChatView
from .widgets.composer import Composer


class ReplyActions:
    def __init__(self, replies: RepliesController, models: ModelChoice, chat_view: ChatView, composer: Composer):
        self.replies, self.models, self.chat_view, self.composer = replies, models, chat_view, composer

    def send(self, text: str) -> None:
        choice = self.models.pinned_elsewhere()
        if choice is None:
            self.replies.send(text)
        elif self.models.switch_for_pinned(choice):
            self.replies.enqueue(text)     # sent once the chat's model is loaded
        else:
            self.composer.set_text(text)

    def stop(self) -> None:
        self.replies.stop()

    def regenerate(self, message_id: Any) -> None:
        def run() -> None:
            w = self.chat_view.widget_for(message_id)
            self.replies.regenerate(w.item if w is not None else None)
        self.models.on_own_model(run)

    def regenerate_last(self) -> None:
        ws = self.chat_view.widgets
        if ws and ws[-1].item.role == "assistant":
            self.regenerate(ws[-1].item.id)

    def edit(self, message_id: Any, text: str) -> None:
        def run() -> None:
            w = self.chat_view.widget_for(message_id)
            self.replies.edit(w.item if w is not None else None, text)
        self.models.on_own_model(run)
