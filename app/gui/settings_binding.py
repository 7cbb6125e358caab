"""The settings dialogs from the window: Amber's (what changed applies: the theme, the tools, a
new engine when an engine option changed) and a chat's (its system prompt and overrides, stored
off the UI thread); Clear cache."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from PySide6.QtWidgets import QWidget

from .api_binding import ApiBinding
from .controllers.chats import ChatsController
from .controllers.engine import EngineController
from .controllers.tools import ToolsController
from .preferences import Preferences
from .settings import Settings
from .tasks import TaskRunner
from .window_view import apply_theme_choice


def engine_options(s: Settings) -> tuple[Any, ...]:
    """The settings that take a new engine to apply."""
    return (s.provider, s.memory_budget_mb, s.disk_budget_mb, s.cache_max_age_days, s.kv_store)


class SettingsBinding:
    def __init__(self, parent: QWidget, prefs: Preferences, home: Path, api: ApiBinding, tools: ToolsController,
                 engines: EngineController, chats: ChatsController, tasks: TaskRunner, *,
                 tools_changed: Callable[[], Any], reload_engine: Callable[[], Any],
                 report: Callable[[BaseException], Any]):
        """`tools_changed()`: the tools setting changed; `reload_engine()`: stop the reply and load
        the engine again (an engine option changed); `report(exc)`: a failure, in the status bar."""
        self.parent, self.prefs, self.home, self.api, self.tools = parent, prefs, home, api, tools
        self.engines, self.chats, self.tasks = engines, chats, tasks
        self.tools_changed, self.reload_engine, self.report = tools_changed, reload_engine, report
        self.at_api = False     # the next settings dialog opens at the API server
        self.dialog: Any = None
        self.chat_dialog: Any = None

    def open(self) -> None:
        from .dialogs.settings_dialog import SettingsDialog  # noqa: PLC0415

        dlg = SettingsDialog(self.prefs.settings, self.home, parent=self.parent, server=self.api.server(),
                             tools=self.tools)
        dlg.clearCacheRequested.connect(self.clear_cache)
        self.dialog = dlg
        if self.at_api and dlg.server_panel is not None:
            dlg.server_panel.enabled.setFocus()
        self.at_api = False
        if dlg.exec():
            old = self.prefs.settings
            new = self.prefs.settings = dlg.result_settings()
            # the API server's switch acts at once, not on OK: keep what it stored meanwhile
            new.api_server, new.api_port, new.api_key = old.api_server, old.api_port, old.api_key
            self.prefs.save()
            if old.theme != new.theme:
                apply_theme_choice(new.theme)
            if old.mcp_tools != new.mcp_tools:
                self.tools_changed()
            if engine_options(old) != engine_options(new):
                self.reload_engine()

    def open_at_api(self) -> None:
        """The settings, at the API server's switch (the status bar's indicator)."""
        self.at_api = True
        self.open()

    def open_chat(self) -> None:
        chat_id, store = self.chats.current_id, self.chats.store
        if chat_id is None or self.chats.is_temporary(chat_id) or store is None:
            return
        from .dialogs.settings_dialog import ChatSettingsDialog  # noqa: PLC0415

        def loaded(detail: Any) -> None:
            dlg = ChatSettingsDialog(detail, self.prefs.settings, parent=self.parent)
            self.chat_dialog = dlg
            if dlg.exec():
                prompt, overrides = dlg.values()
                self.tasks.run_task(lambda: store.update_settings(
                    chat_id, system_prompt=prompt, settings=overrides), None, self.report)

        self.tasks.run_task(lambda: store.get_conversation(chat_id), loaded, self.report)

    def clear_cache(self) -> None:
        pinned = {r.id for r in self.chats.model.all_chats() if r.pinned}
        self.engines.clear_cache(pinned, self.report)
