"""What a chat turn needs to use MCP tools: the tools offered (their schemas for the template),
the model's tool-call format (engine.text.tool_calls), the user's approval of each call, and
running it on its server. Plain Python: the turn runs on a worker thread and waits for the user's
answer on an `Approval`, which the window answers from the UI thread."""
from __future__ import annotations

import enum
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.api import CancelToken
from engine.text.tool_calls import FORMATS, ToolCall, ToolFormat

from .mcp_client import McpServerError, McpTool, ToolResult, call_tool
from .mcp_config import McpServerConfig

MAX_TOOL_ROUNDS = 8          # model -> tools -> model ... at most this many times in one turn
APPROVAL_POLL_S = 0.1        # how often a waiting turn looks at its cancel token


class Decision(str, enum.Enum):
    ONCE = "once"        # run this call
    ALWAYS = "always"    # run it, and every later call of this tool without asking
    DENY = "deny"        # do not run it; the model is told so


# What became of a call (stored with the reply, shown in its folded card).
DONE, FAILED, DENIED, UNKNOWN, CANCELLED = "done", "failed", "denied", "unknown", "cancelled"


def tool_format(name: str | None) -> ToolFormat | None:
    """The engine's `capabilities.tool_format` as the format that parses the model's calls."""
    return next((f for f in FORMATS if f.name == name), None)


@dataclass(frozen=True)
class ProposedCall:
    """A call the model wrote: its id, tool, server, arguments (an object, or None when the model's
    text was not a JSON object: `arguments_text` holds what it wrote)."""

    id: str
    name: str
    server: str | None
    arguments: dict[str, Any] | None
    arguments_text: str

    def record(self, status: str, result: str) -> dict[str, Any]:
        """The call as stored with the reply (app.store.rows.MessageRow.tool_steps)."""
        return {"id": self.id, "name": self.name, "server": self.server,
                "arguments": self.arguments if self.arguments is not None else self.arguments_text,
                "status": status, "result": result}


class Approval:
    """One call waiting for the user: the worker waits on it, the window decides it."""

    def __init__(self, call: ProposedCall) -> None:
        self.call = call
        self.decision: Decision | None = None
        self._event = threading.Event()

    def decide(self, decision: Decision) -> None:   # any thread (the UI's)
        if self.decision is None:
            self.decision = Decision(decision)
            self._event.set()

    def wait(self, cancel: CancelToken) -> Decision | None:
        """The user's decision; None when the turn is cancelled first."""
        while not self._event.wait(APPROVAL_POLL_S):
            if cancel.is_set():
                return None
        return self.decision


Caller = Callable[[McpServerConfig, str, dict[str, Any]], ToolResult]


@dataclass
class Toolbox:
    """The tools of the enabled servers as one turn offers them, in the model's format."""

    fmt: ToolFormat
    tools: list[McpTool]
    servers: dict[str, McpServerConfig]
    always: set[tuple[str, str]] = field(default_factory=set)   # (server, tool) run without asking
    caller: Caller = call_tool

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools]

    def proposed(self, call: ToolCall) -> ProposedCall:
        tool = next((t for t in self.tools if t.name == call.name), None)
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            args = None
        return ProposedCall(call.id, call.name, tool.server if tool else None,
                            args if isinstance(args, dict) else None, call.arguments)

    def allowed(self, call: ProposedCall) -> bool:
        """Approved for good (this window's "always", or the server's alwaysAllow list)."""
        if call.server is None:
            return False
        server = self.servers.get(call.server)
        return (call.server, call.name) in self.always or (server is not None and call.name in server.always_allow)

    def run(self, call: ProposedCall) -> tuple[str, str]:
        """Runs an approved call: (status, the text the model is given)."""
        if call.server is None or call.server not in self.servers:
            return UNKNOWN, f"There is no tool named {call.name!r}."
        if call.arguments is None:
            return FAILED, f"The arguments were not a JSON object: {call.arguments_text[:200]}"
        try:
            result = self.caller(self.servers[call.server], call.name, call.arguments)
        except McpServerError as exc:
            return FAILED, str(exc)
        return (FAILED if result.is_error else DONE), result.text


def denied_text(call: ProposedCall) -> str:
    return f"The user did not allow the call of {call.name}."
