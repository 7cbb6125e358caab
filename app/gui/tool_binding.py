"""MCP tools in the window, driven by the controllers' signals: each call the model makes is asked
on a card in the streaming reply (the turn waits for the answer), its result shown folded when it
ran; the composer says which tools the next reply may call, or why none. A chat left while its
turn waits is asked again when it is opened."""
from __future__ import annotations

from typing import Any, Callable

from ..tools.toolbox import Approval, Decision
from .controllers.chats import ChatsController
from .controllers.engine import EngineController
from .controllers.replies import RepliesController
from .controllers.tools import CONNECTED, ToolsController
from .settings import Settings
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.status import StatusBar


def tools_words(enabled: bool, format_name: str | None, tools: int, servers: int, remote: bool) -> str:
    """The composer's line about tools ("" when no MCP server is set up)."""
    if not enabled or servers == 0:
        return ""
    if format_name is None:
        where = "this server's models" if remote else "this model (its chat template has no tool-call format)"
        return f"Tools are unavailable for {where}"
    return f"{tools} tool{'s' if tools != 1 else ''} available" if tools else "No MCP server connected"


class ToolBinding:
    def __init__(self, replies: RepliesController, chats: ChatsController, engines: EngineController,
                 tools: ToolsController, chat_view: ChatView, composer: Composer, status: StatusBar,
                 settings: Callable[[], Settings]) -> None:
        self.replies, self.chats, self.engines, self.tools = replies, chats, engines, tools
        self.chat_view, self.composer, self.status, self.settings = chat_view, composer, status, settings
        self.asking: dict[str, list[Approval]] = {}       # chat id -> calls waiting for the user
        self.ran: dict[str, list[dict[str, Any]]] = {}     # chat id -> this turn's finished calls
        replies.turnStarted.connect(self.on_turn_started)
        replies.toolAsked.connect(self.on_asked)
        replies.toolRan.connect(self.on_ran)
        chats.messagesLoaded.connect(self.on_messages)
        tools.changed.connect(self.update_state)
        tools.fileProblem.connect(lambda text: status.set_message(text))
        engines.ready.connect(lambda _engine: self.update_state())

    def _streaming_here(self, chat_id: str) -> Any:
        """The streaming bubble when `chat_id`'s reply is the one on screen."""
        if chat_id != self.chats.current_id or not self.replies.streaming(chat_id):
            return None
        return self.chat_view.stream_widget

    def on_turn_started(self, chat_id: str, *_: Any) -> None:
        self.asking.pop(chat_id, None)
        self.ran.pop(chat_id, None)

    def on_asked(self, chat_id: str, approval: Approval) -> None:
        self.asking.setdefault(chat_id, []).append(approval)
        self._ask(chat_id, approval)
        self.status.set_message(f"The model asks to run {approval.call.name}: allow or deny it in the reply")

    def _ask(self, chat_id: str, approval: Approval) -> None:
        bubble = self._streaming_here(chat_id)
        if bubble is None:
            return
        card = bubble.tool_calls.ask(approval.call.record("asking", ""))
        card.decided.connect(lambda _id, decision: self.decide(chat_id, approval, decision))
        self.chat_view.scroll_to_bottom()

    def decide(self, chat_id: str, approval: Approval, decision: str) -> None:
        chosen = Decision(decision)
        if chosen is Decision.ALWAYS and approval.call.server is not None:
            self.tools.remember_always(approval.call.server, approval.call.name)
        approval.decide(chosen)
        waiting = self.asking.get(chat_id, [])
        if approval in waiting:
            waiting.remove(approval)
        self.status.set_message("")

    def on_ran(self, chat_id: str, record: dict[str, Any]) -> None:
        self.ran.setdefault(chat_id, []).append(record)
        self.asking[chat_id] = [a for a in self.asking.get(chat_id, []) if a.call.id != record.get("id")]
        bubble = self._streaming_here(chat_id)
        if bubble is not None:
            bubble.tool_calls.ran(record)

    def on_messages(self, chat_id: str, *_: Any) -> None:
        """A chat opened again while its reply streams: its calls so far, and what still waits."""
        bubble = self._streaming_here(chat_id)
        if bubble is None:
            return
        for record in self.ran.get(chat_id, []):
            bubble.tool_calls.ran(record)
        for approval in self.asking.get(chat_id, []):
            self._ask(chat_id, approval)

    def toolbox(self) -> Any:
        """The MCP tools the next turn offers the loaded model (None: none, or it takes none)."""
        engine = self.engines.engine
        return self.tools.toolbox(engine.capabilities.tool_format) if engine is not None else None

    def update_state(self) -> None:
        tools, composer = self.tools, self.composer
        engine = self.engines.engine
        caps = engine.capabilities if engine is not None else None
        servers = [s for s in tools.config.servers if s.enabled]
        text = tools_words(self.settings().mcp_tools, caps.tool_format if caps is not None else None,
                           len(tools.tools()), len(servers), bool(caps and caps.remote)) if caps else ""
        composer.tools.setText(text)
        composer.tools.setVisible(bool(text))
        connected = sum(1 for s in servers if tools.status.get(s.name) and tools.status[s.name].state == CONNECTED)
        composer.tools.setToolTip(f"{connected} of {len(servers)} MCP servers connected" if servers else "")
