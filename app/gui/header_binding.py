"""The chat on screen, above and below it: the header's title and state (pinned, temporary),
the temporary and save notices, the empty state, the window's title, and whether the composer
can send (no model yet; queued while another chat's reply streams; Stop while this one does)."""
from __future__ import annotations

from typing import Any, Callable

from .controllers.chats import ChatsController
from .controllers.engine import EngineController
from .controllers.replies import RepliesController
from .widgets.chat_area import ChatArea


class HeaderBinding:
    def __init__(self, chats: ChatsController, engines: EngineController, replies: RepliesController,
                 area: ChatArea, *, window_title: Callable[[str], Any]):
        self.chats, self.engines, self.replies, self.area = chats, engines, replies, area
        self.window_title = window_title

    def update(self) -> None:
        chats, area = self.chats, self.area
        cur, draft = chats.current_id, chats.draft
        temporary = chats.is_temporary(cur) or bool(draft and draft.temporary)
        row = chats.model.chat(cur) if cur else None
        title = row.title if row is not None else ("New temporary chat" if temporary else "New chat")
        sub = ("Temporary chat" if row.temporary else ("Pinned" if row.pinned else "")) if row else ""
        area.header.show_chat(title, sub, settings_enabled=row is not None and not row.temporary)
        area.header.show_state(pinned=bool(row and row.pinned), temporary=temporary,
                               can_pin=row is not None and not row.temporary,
                               can_switch_temporary=row is None and draft is not None)
        area.temp_notice.setVisible(temporary)
        area.save_notice.show_for(cur)
        area.empty.set_temporary(temporary)
        self.window_title(f"{title} — Amber")

    def update_composer(self) -> None:
        composer, stream, error = self.area.composer, self.replies.stream, self.engines.error
        if self.engines.engine is None:
            reason = error and f"No model: {error}" or "Loading the model…"
            composer.set_ready(False, reason)
        elif stream is not None and not stream.stopped and stream.chat_id != self.chats.target_id:
            composer.set_ready(True)
            composer.send_btn.setToolTip("Send (Enter) — queued until the reply in the other "
                                         "chat is done")
        else:
            composer.set_ready(True)
        composer.set_generating(self.replies.streaming(self.chats.target_id))
