"""Which model a chat runs with: the picker (saying what a switch costs first), switching, the
notice above a chat made with another model than the one loaded, and a pinned chat's turns, which
wait for its own model (asked first: its saved KV is valid for that model only)."""
from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import SignalInstance

from .controllers.chats import ChatsController
from .controllers.engine import EngineController
from .controllers.replies import RepliesController
from .models import model_switch
from .settings import Settings
from .widgets.chat_header import ChatHeader
from .widgets.model_notice import ModelNotice

Ask = Callable[[str, str], bool]


class ModelChoice:
    def __init__(self, engines: EngineController, chats: ChatsController, replies: RepliesController,
                 header: ChatHeader, notice: ModelNotice, *, settings: Callable[[], Settings],
                 save_settings: Callable[[], Any], load_engine: Callable[[], Any], confirm_switch: Ask,
                 engine_ready: SignalInstance):
        """`confirm_switch(title, text)`: the user agrees to switch; `engine_ready` fires once a
        model is loaded and the window shows it."""
        self.engines, self.chats, self.replies = engines, chats, replies
        self.picker, self.notice = header.model_picker, notice
        self.settings, self.save_settings, self.load_engine = settings, save_settings, load_engine
        self.confirm_switch, self.engine_ready = confirm_switch, engine_ready
        self.chat_models: dict[str, str | None] = {}   # each chat's model (`Settings.model` values)
        self.kept_model: dict[str, str] = {}   # chat -> the loaded model it was told to go on with
        header.modelPicked.connect(self.on_picked)
        notice.switchRequested.connect(self.switch)
        notice.keepRequested.connect(self.keep)
        replies.turnStarted.connect(self.on_turn_started)

    def pick(self, choice: str) -> None:
        """As if `choice` were picked in the picker: say what switching costs, then switch."""
        self.on_picked(self.picker.findData(choice))

    def on_picked(self, index: int) -> None:
        name = self.picker.itemData(index) or ""
        if index < 0 or name == self.settings().model:
            return
        if self.engines.engine is not None and not self.confirm_switch(
                f"Switch to {self.name(name)}?", self.cost(name)):
            self.picker.setCurrentIndex(max(0, self.picker.findData(self.settings().model)))
            return
        self.switch(name)

    def switch(self, choice: str) -> None:
        """Load another model (a `Settings.model` value); the one loaded is unloaded."""
        if choice == self.settings().model and (self.engines.engine is not None or self.engines.loading):
            return
        self.replies.stop()
        self.settings().model = choice
        self.save_settings()
        self.picker.setCurrentIndex(max(0, self.picker.findData(choice)))
        self.notice.hide()
        self.load_engine()

    def name(self, choice: str) -> str:
        i = self.picker.findData(choice)
        return model_switch.model_label(choice, self.picker.itemText(i) if i >= 0 else None)

    def cost(self, choice: str) -> str:
        """What switching to `choice` costs, in words (said before switching)."""
        in_memory = sum(1 for r in self.chats.model.all_chats() if r.kv_state == "memory" and not r.pinned)
        loaded = self.engines.choice if self.engines.choice is not None else self.settings().model
        stream = self.replies.stream
        replying = stream is not None and not stream.stopped
        return model_switch.switch_cost(self.name(choice), self.name(loaded), in_memory, replying=replying)

    def _chat_elsewhere(self) -> str | None:
        """The model the chat on screen was made with, if another (available) one is loaded."""
        cid, loaded = self.chats.current_id, self.engines.choice
        choice = self.chat_models.get(cid) if cid else None
        if cid is None or choice is None or loaded is None or choice == loaded \
                or self.kept_model.get(cid) == loaded or self.picker.findData(choice) < 0:
            return None
        return choice

    def pinned_elsewhere(self) -> str | None:
        cid = self.chats.current_id
        row = self.chats.model.chat(cid) if cid else None
        return self._chat_elsewhere() if row is not None and row.pinned else None

    def update_notice(self) -> None:
        """Offer the chat's own model when another is loaded (saying what switching costs)."""
        choice, cid = self._chat_elsewhere(), self.chats.current_id
        if choice is None or cid is None:
            self.notice.hide()
            return
        row = self.chats.model.chat(cid)
        loaded = self.name(self.engines.choice or "")
        name = self.name(choice)
        self.notice.show_for(cid, choice, model_switch.chat_notice(
            name, loaded, self.cost(choice), pinned=bool(row and row.pinned)), name, loaded)

    def keep(self, chat_id: str) -> None:
        if self.engines.choice is not None:
            self.kept_model[chat_id] = self.engines.choice
        self.update_notice()

    def on_turn_started(self, chat_id: str, *_: Any) -> None:
        if self.engines.choice is not None:
            self.chat_models[chat_id] = self.engines.choice     # the chat goes on with this model
        self.update_notice()

    def learn(self, chat_id: str, store: Any, tasks: Any) -> None:
        """Read which model the chat was made with (once per chat), off the UI thread."""
        if store is None or chat_id in self.chat_models:
            return

        def known(detail: Any) -> None:
            self.chat_models[chat_id] = model_switch.recorded_choice(detail.model_choice, detail.model_id)
            self.update_notice()
        tasks.run_task(lambda: store.get_conversation(chat_id), known, lambda exc: None)

    def switch_for_pinned(self, choice: str) -> bool:
        """A pinned chat's saved KV is valid for its own model only (a turn with another would
        replace it): switch to that model, if the user agrees to what it costs."""
        name = self.name(choice)
        if not self.confirm_switch(f"Switch to {name}?", (
                f"This pinned chat was made with {name}; its saved context is valid only for "
                f"that model. {self.cost(choice)}")):
            return False
        self.switch(choice)
        return True

    def on_own_model(self, action: Callable[[], None]) -> None:
        """Run `action` (a turn in the chat on screen) now, or, in a pinned chat made with another
        model, once that model is loaded (asked first)."""
        choice = self.pinned_elsewhere()
        if choice is None:
            action()
            return
        chat_id = self.chats.current_id

        def done(*_: Any) -> None:     # once, on the next load's outcome (failed: nothing runs)
            self.engine_ready.disconnect(done)
            self.engines.failed.disconnect(done)
            if self.engines.engine is not None and self.chats.current_id == chat_id \
                    and self.engines.choice == choice:
                action()
        self.engine_ready.connect(done)
        self.engines.failed.connect(done)
        if not self.switch_for_pinned(choice):
            done()
