"""The tools a reply called, in its bubble: one card per call, folded to a line (“add · test-tools
— done”) that opens to the arguments and the result. A call waiting for the user's approval shows
three buttons on its card: Allow once, Always allow <tool>, Deny.

Widgets get plain dicts (the records `app.tools.toolbox.ProposedCall.record` makes and the store
keeps): {"id", "name", "server", "arguments", "status", "result"}."""
from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

STATUS_WORDS = {"done": "done", "failed": "failed", "denied": "denied by you", "unknown": "no such tool",
                "cancelled": "stopped", "asking": "waiting for your approval", "running": "running…"}
ONCE, ALWAYS, DENY = "once", "always", "deny"      # app.tools.toolbox.Decision values


def arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, indent=2)


class ToolCallCard(QFrame):
    """One call: a fold toggle with its name, server and status; details under it, folded."""

    decided = Signal(str, str)     # call id, ONCE / ALWAYS / DENY

    def __init__(self, call: dict[str, Any], parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ToolCallCard")
        self.call = dict(call)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("ToolCallToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.toggled.connect(self._on_toggled)
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.details = QLabel(self)
        self.details.setObjectName("ToolCallDetails")
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.PlainText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setStyleSheet("QLabel#ToolCallDetails { font-family: monospace; border-left: 2px solid gray;"
                                   " padding-left: 8px; }")
        self.details.hide()
        lay.addWidget(self.details)
        self.ask_row = QWidget(self)
        row = QHBoxLayout(self.ask_row)
        row.setContentsMargins(0, 0, 0, 0)
        self.allow_once = QPushButton("Allow once")
        self.allow_always = QPushButton(f"Always allow {call.get('name', '')}")
        self.deny = QPushButton("Deny")
        for button, decision, name in ((self.allow_once, ONCE, "AllowToolOnce"),
                                       (self.allow_always, ALWAYS, "AllowToolAlways"), (self.deny, DENY, "DenyTool")):
            button.setObjectName(name)
            button.clicked.connect(lambda _=False, d=decision: self._decide(d))
            row.addWidget(button)
        row.addStretch(1)
        self.ask_row.hide()
        lay.addWidget(self.ask_row)
        self._show()

    @property
    def status(self) -> str:
        return str(self.call.get("status", ""))

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def ask(self) -> None:
        """Waits for the user: the buttons show, the arguments too (they are what is approved)."""
        self.call["status"] = "asking"
        self.ask_row.show()
        self.toggle.setChecked(True)
        self._show()
        self.allow_once.setFocus()

    def finish(self, record: dict[str, Any]) -> None:
        """The call ended: its result, folded."""
        self.call = dict(record)
        self.ask_row.hide()
        self.toggle.setChecked(False)
        self._show()

    def _decide(self, decision: str) -> None:
        self.ask_row.hide()
        self.call["status"] = "denied" if decision == DENY else "running"
        self._show()
        self.decided.emit(str(self.call.get("id", "")), decision)

    def _show(self) -> None:
        c = self.call
        server = f" · {c['server']}" if c.get("server") else ""
        title = f"Tool call: {c.get('name', '?')}{server} — {STATUS_WORDS.get(self.status, self.status)}"
        self.toggle.setText(title)
        self.toggle.setAccessibleName(title)
        text = f"Arguments:\n{arguments_text(c.get('arguments', {}))}"
        if "result" in c and self.status not in ("asking", "running"):
            text += f"\n\nResult:\n{c['result']}"
        self.details.setText(text)

    def _on_toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.details.setVisible(on)


class ToolCallsPanel(QWidget):
    """A reply's tool calls, round by round (the text the model wrote with them, then their cards)."""

    decided = Signal(str, str)     # call id, decision

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ToolCallsPanel")
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 2)
        self.lay.setSpacing(2)
        self.cards: list[ToolCallCard] = []
        self.steps: list[dict[str, Any]] | None = None    # what set_steps shows (None: a live reply's)
        self.hide()

    def set_steps(self, steps: list[dict[str, Any]] | None) -> None:
        """A stored reply's rounds (the same ones again: nothing changes, folds stay as they are)."""
        if steps == self.steps:
            return
        self.steps = steps
        while self.lay.count():
            item = self.lay.takeAt(0)
            old = item.widget() if item is not None else None
            if old is not None:
                old.deleteLater()
        self.cards = []
        for step in steps or []:
            if step.get("text"):
                note = QLabel(str(step["text"]), self)
                note.setObjectName("ToolRoundText")
                note.setWordWrap(True)
                note.setTextFormat(Qt.TextFormat.PlainText)
                self.lay.addWidget(note)
                note.show()
            for call in step.get("calls", []):
                self._add(call)
        self.setVisible(bool(self.cards))

    def _add(self, call: dict[str, Any]) -> ToolCallCard:
        card = ToolCallCard(call, self)
        card.decided.connect(self.decided)
        self.lay.addWidget(card)
        card.show()      # now, not when the layout's queued show runs
        self.cards.append(card)
        self.show()
        return card

    def card(self, call_id: str) -> ToolCallCard | None:
        return next((c for c in self.cards if c.call.get("id") == call_id), None)

    def ask(self, call: dict[str, Any]) -> ToolCallCard:
        card = self.card(str(call.get("id"))) or self._add(call)
        card.ask()
        return card

    def ran(self, record: dict[str, Any]) -> None:
        card = self.card(str(record.get("id"))) or self._add(record)
        card.finish(record)
