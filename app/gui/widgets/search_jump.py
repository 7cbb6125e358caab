"""Open a chat at a search match: scroll to the first message that matches, select the words."""
from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtGui import QTextCursor


def query_terms(query: str) -> list[str]:
    """The words of a search query (FTS operators and quotes dropped), longest first."""
    words = re.findall(r"\w+", query or "")
    words = [w for w in words if w.upper() not in ("AND", "OR", "NOT", "NEAR")]
    return sorted(dict.fromkeys(words), key=len, reverse=True)   # stable: query order


class SearchJump:
    """After a chat opened from a search hit has loaded, scroll its view to the first matching
    message and select the match there (the selection is the highlight)."""

    def __init__(self, view: Any):
        self.view = view
        self.query = ""
        self.matched: Any = None      # the message widget jumped to (tests, screenshots)
        view.loaded.connect(self._on_loaded)

    def jump_when_loaded(self, query: str) -> None:
        self.query = query
        if not self.view.loading:
            self._on_loaded()

    def _on_loaded(self) -> None:
        query, self.query = self.query, ""
        if query:
            self.jump(query)

    def jump(self, query: str) -> Any:
        self.matched = None
        terms = query_terms(query)
        if not terms:
            return None
        for w in self.view.widgets:
            text = w.item.content.lower()
            term = next((t for t in terms if t.lower() in text), None)
            if term is None:
                continue
            doc = w.body.document()
            found = doc.find(term, 0)   # case-insensitive by default
            if not found.isNull():
                w.body.setTextCursor(found)
            else:
                w.body.setTextCursor(QTextCursor(doc))
            self.view.stick_to_bottom = False
            self.matched = w
            self._scroll(w)
            QTimer.singleShot(0, lambda: self._scroll(w))   # once the new widgets are laid out
            return w
        return None


    def _scroll(self, w: Any) -> None:
        import shiboken6  # noqa: PLC0415

        if self.matched is w and shiboken6.isValid(w):
            self.view.stick_to_bottom = False
            self.view.ensureWidgetVisible(w, 0, 40)


__all__ = ["SearchJump", "query_terms"]
