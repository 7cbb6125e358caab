"""The light and dark themes' colours, and the one in use (read by the Markdown rendering on
worker threads; `app.gui.theme.apply` sets it and applies it to the application)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Theme:
    name: str
    window: str
    base: str           # chat background
    sidebar: str
    surface: str        # assistant bubble / cards
    user_bubble: str
    text: str
    muted: str
    accent: str
    accent_text: str
    border: str
    code_bg: str
    selection: str
    danger: str
    pygments_style: str

    @property
    def dark(self) -> bool:
        return self.name == "dark"


# Text colours meet WCAG AA (4.5:1) on every background they are drawn on, selection included
# (tests/gui/test_accessibility.py computes it from the style sheet and the palette): hence the
# darker light accent (white button text on it; links) and muted/danger, and the darker dark selection.
LIGHT = Theme("light", window="#f6f5f3", base="#ffffff", sidebar="#f1efec", surface="#f7f6f4",
              user_bubble="#fdf0dc", text="#1f1d1a", muted="#67625b", accent="#ad4f08",
              accent_text="#ffffff", border="#e3dfd9", code_bg="#f6f8fa", selection="#fbe3bd",
              danger="#b13a0a", pygments_style="friendly")
DARK = Theme("dark", window="#1b1a18", base="#201f1d", sidebar="#171614", surface="#2a2826",
             user_bubble="#3a2f20", text="#ece9e4", muted="#b0a99f", accent="#f59e0b",
             accent_text="#1b1a18", border="#34312d", code_bg="#161514", selection="#4a3719",
             danger="#fb923c", pygments_style="monokai")


_current: list[Theme] = [LIGHT]


def current() -> Theme:
    return _current[0]


def set_current(t: Theme) -> None:
    _current[0] = t
