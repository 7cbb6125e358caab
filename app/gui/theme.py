"""Light and dark themes following the system, and the icons in `resources/icons`.

Icons are single-colour SVGs drawn with `currentColor`; `icon(name)` renders them in the theme's
text colour (or any colour), cached.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QObject, QRectF, QSize, Qt, Signal, SignalInstance
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QApplication

from engine.config import settings

from .models import palette
from .models.palette import DARK, LIGHT, Theme, current  # noqa: F401 - the themes, where they were


def resources_dir() -> Path:
    override = settings().resources
    if override:
        return override
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[2]))
    return base / "resources"


def system_prefers_dark() -> bool:
    override = settings().theme
    if override is not None:
        return override == "dark"
    app = QGuiApplication.instance()
    if app is None:
        return False
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


class _State(QObject):
    changed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.connected = False
        self.choice = "system"     # the theme setting: system | light | dark


_state = _State()


def set_choice(choice: str) -> None:
    """The theme setting: "system" follows the system's changes; "light"/"dark" stay put."""
    _state.choice = choice if choice in ("system", "light", "dark") else "system"


def choice() -> str:
    return _state.choice


def changed_signal() -> SignalInstance:
    return _state.changed


def palette_for(t: Theme) -> QPalette:
    p = QPalette()
    c = QColor
    cr = QPalette.ColorRole
    p.setColor(cr.Window, c(t.window))
    p.setColor(cr.WindowText, c(t.text))
    p.setColor(cr.Base, c(t.base))
    p.setColor(cr.AlternateBase, c(t.surface))
    p.setColor(cr.ToolTipBase, c(t.surface))
    p.setColor(cr.ToolTipText, c(t.text))
    p.setColor(cr.PlaceholderText, c(t.muted))
    p.setColor(cr.Text, c(t.text))
    p.setColor(cr.Button, c(t.surface))
    p.setColor(cr.ButtonText, c(t.text))
    p.setColor(cr.BrightText, c(t.danger))
    p.setColor(cr.Highlight, c(t.selection))
    p.setColor(cr.HighlightedText, c(t.text))
    p.setColor(cr.Link, c(t.accent))
    p.setColor(cr.Mid, c(t.border))
    p.setColor(cr.Midlight, c(t.border))
    p.setColor(cr.Light, c(t.surface))
    p.setColor(cr.Dark, c(t.border))
    for role in (cr.Text, cr.WindowText, cr.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, c(t.muted))
    return p


def stylesheet(t: Theme) -> str:
    path = resources_dir() / "styles" / "amber.qss"
    try:
        template = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    for key in sorted(t.__dict__, key=len, reverse=True):  # @accent_text before @accent
        template = template.replace("@" + key, str(t.__dict__[key]))
    return template


def apply(app: QApplication, t: Theme | None = None) -> Theme:
    """Apply `t` (default: the system's preference) to the application and announce it."""
    t = t or (DARK if system_prefers_dark() else LIGHT)
    if QApplication.style().name().lower() != "fusion":
        app.setStyle("Fusion")
    app.setPalette(palette_for(t))
    app.setStyleSheet(stylesheet(t))
    palette.set_current(t)
    icon.cache_clear()
    if not _state.connected:
        _state.connected = True
        QGuiApplication.styleHints().colorSchemeChanged.connect(
            lambda *_: apply(app) if _state.choice == "system" else None)
    _state.changed.emit(t)
    return t


@lru_cache(maxsize=256)
def _svg_bytes(name: str) -> bytes:
    return (resources_dir() / "icons" / f"{name}.svg").read_bytes()


@lru_cache(maxsize=512)
def icon(name: str, color: str | None = None, size: int = 20) -> QIcon:
    """The icon `name` drawn in `color` (default: the theme's text colour)."""
    from PySide6.QtSvg import QSvgRenderer  # noqa: PLC0415

    try:
        data = _svg_bytes(name).replace(b"currentColor", (color or current().text).encode())
    except OSError:
        return QIcon()
    renderer = QSvgRenderer(QByteArray(data))
    result = QIcon()
    for scale in (1, 2):
        pm = QPixmap(QSize(size * scale, size * scale))
        pm.setDevicePixelRatio(scale)
        pm.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pm)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter, QRectF(0, 0, size, size))
        painter.end()
        result.addPixmap(pm)
    return result


def app_icon() -> QIcon:
    path = resources_dir() / "icons" / "amber.svg"
    return QIcon(str(path)) if path.exists() else QIcon()
