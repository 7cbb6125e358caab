"""Drivers for the window's MCP tools in GUI tests: set up mcp.json with the test server, wait
for it to connect, answer a call's card, read a reply's tool cards."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from .mcp_server import stdio_config


def write_mcp_json(home: Path, **extra: Any) -> Path:
    path = home / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"test-tools": {**stdio_config(), **extra}}}), encoding="utf-8")
    return path


def wait_connected(qtbot: Any, w: Any, timeout: int = 60000) -> None:
    """Until the test server's tools are listed (a real process started, its tools listed)."""
    qtbot.waitUntil(lambda: len(w.tools.tools()) == 4, timeout=timeout)


def asking_card(w: Any) -> Any:
    bubble = w.chat_view.stream_widget
    if bubble is None:
        return None
    return next((c for c in bubble.tool_calls.cards if c.status == "asking"), None)


def answer(qtbot: Any, w: Any, button: str, timeout: int = 60000) -> Any:
    """Waits for a call's card, then clicks `button` (AllowToolOnce, AllowToolAlways, DenyTool)."""
    qtbot.waitUntil(lambda: asking_card(w) is not None, timeout=timeout)
    card = asking_card(w)
    assert card.expanded and card.ask_row.isVisible()      # the arguments are shown before approval
    qtbot.mouseClick(getattr(card, {"AllowToolOnce": "allow_once", "AllowToolAlways": "allow_always",
                                    "DenyTool": "deny"}[button]), Qt.MouseButton.LeftButton)
    return card


def reply_cards(w: Any) -> list[Any]:
    """The tool cards of the last reply on screen."""
    return list(w.chat_view.widgets[-1].tool_calls.cards)
