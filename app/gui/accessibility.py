"""Screen-reader support: names for controls, announcements, the accessible-tree walk, and the
WCAG contrast arithmetic the theme is checked with.

- `name(widget, text, description)` sets the accessible name (and description) in one call.
- `announce(widget, text)` tells assistive technology about something that happened (a reply
  finished, an error): a QAccessibleAnnouncementEvent (Qt ≥ 6.8), polite unless `assertive`.
  Streaming replies announce once, when they finish — never per token.
- `walk(root)` / `unnamed_controls(root)` go over a window's QAccessible tree (what a screen reader
  sees): tests/gui/test_accessibility.py fails on any interactive element without a name.
- `contrast_ratio`, `parse_qss` and `stylesheet_pairs` compute WCAG 2.x contrast for the colour
  pairs a Qt style sheet declares.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAccessible, QAccessibleAnnouncementEvent, QAccessibleInterface, QColor
from PySide6.QtWidgets import QWidget

Role = QAccessible.Role
# Roles a user operates (and so must hear a name for). Containers, text and graphics are not here.
INTERACTIVE_ROLES = {
    Role.PushButton, Role.CheckBox, Role.RadioButton, Role.ComboBox, Role.EditableText, Role.SpinBox,
    Role.Slider, Role.Dial, Role.List, Role.Tree, Role.Table, Role.PageTab, Role.ButtonMenu,
    Role.ButtonDropDown, Role.ButtonDropGrid, Role.Link, Role.MenuItem, Role.ListItem, Role.TreeItem,
    Role.Cell, Role.HotkeyField, Role.ProgressBar,
}


def name(widget: QWidget, text: str, description: str = "") -> QWidget:
    """Sets `widget`'s accessible name (and description); returns it, for chaining."""
    widget.setAccessibleName(text)
    if description:
        widget.setAccessibleDescription(description)
    return widget


class _Announcer(QObject):
    """Every announcement also goes out as a signal: the tests (and a log) can follow them."""
    announced = Signal(str)


announcer = _Announcer()


def announce(widget: QWidget, text: str, assertive: bool = False) -> None:
    """Has the screen reader speak `text` (e.g. "Reply finished: …"), attached to `widget`."""
    text = " ".join(text.split())
    if not text:
        return
    event = QAccessibleAnnouncementEvent(widget, text)
    event.setPoliteness(QAccessible.AnnouncementPoliteness.Assertive if assertive
                        else QAccessible.AnnouncementPoliteness.Polite)
    QAccessible.updateAccessibility(event)
    announcer.announced.emit(text)


ANNOUNCE_CHARS = 300     # the start of a reply; the rest is read from its bubble


def reply_announcement(text: str, *, error: str | None = None, stopped: bool = False,
                       elsewhere: str | None = None) -> str:
    """What to say when a streamed reply ends (once per reply, never per token). `elsewhere`:
    the title of the chat it finished in, when that is not the open one."""
    if error:
        return f"Reply failed: {error}"
    if elsewhere is not None:
        return f"Reply finished in {elsewhere or 'another chat'}"
    if stopped:
        return "Reply stopped"
    text = " ".join(text.split())
    if len(text) > ANNOUNCE_CHARS:
        text = text[:ANNOUNCE_CHARS].rsplit(" ", 1)[0] + " …"
    return f"Reply finished: {text}" if text else "Reply finished (empty)"


@dataclass
class Node:
    """One element of the accessible tree."""
    role: QAccessible.Role
    name: str
    description: str
    focusable: bool
    invisible: bool
    path: str                       # "MainWindow/Sidebar/…": where it is, for failure messages
    depth: int
    obj: QObject | None = field(default=None, repr=False)

    @property
    def interactive(self) -> bool:
        return self.focusable or self.role in INTERACTIVE_ROLES


def _label(iface: QAccessibleInterface) -> str:
    obj = iface.object()
    ident = obj.objectName() if obj is not None and obj.objectName() else ""
    kind = type(obj).__name__ if obj is not None else "item"
    return f"{kind}#{ident}" if ident else kind


def walk(root: QWidget, max_nodes: int = 20000) -> Iterator[Node]:
    """The accessible tree under `root`, depth first (visible elements only; bounded)."""
    top = QAccessible.queryAccessibleInterface(root)
    if top is None:
        return
    stack: list[tuple[QAccessibleInterface, str, int]] = [(top, _label(top), 0)]
    seen = 0
    while stack and seen < max_nodes:
        iface, path, depth = stack.pop()
        if not iface.isValid():
            continue
        seen += 1
        state = iface.state()
        node = Node(iface.role(), iface.text(QAccessible.Text.Name) or "",
                    iface.text(QAccessible.Text.Description) or "", bool(state.focusable),
                    bool(state.invisible), path, depth, iface.object())
        if node.invisible:
            continue
        yield node
        children = [iface.child(i) for i in range(iface.childCount())]
        for child in reversed([c for c in children if c is not None]):
            stack.append((child, f"{path}/{_label(child)}", depth + 1))


def unnamed_controls(root: QWidget) -> list[Node]:
    """Interactive elements under `root` a screen reader would read without a name."""
    return [n for n in walk(root) if n.interactive and not n.name.strip()]


# --- WCAG contrast --------------------------------------------------------------------------

def relative_luminance(color: str | QColor) -> float:
    """WCAG 2.x relative luminance of an sRGB colour."""
    c = QColor(color)
    if not c.isValid():
        raise ValueError(f"not a colour: {color!r}")

    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())


def contrast_ratio(fg: str | QColor, bg: str | QColor) -> float:
    """(L1 + 0.05) / (L2 + 0.05), from 1 (same colour) to 21 (black on white)."""
    a, b = sorted((relative_luminance(fg), relative_luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


@dataclass(frozen=True)
class Rule:
    selector: str                   # one selector of the rule, e.g. "#Toast QLabel" or "QToolButton:hover"
    decls: dict[str, str]

    @property
    def base(self) -> str:
        """The selector without pseudo-states (`QToolButton:hover` -> `QToolButton`)."""
        return re.sub(r"(?<!:):(?!:)[\w-]+", "", self.selector).strip()

    @property
    def states(self) -> set[str]:
        return set(re.findall(r"(?<!:):(?!:)([\w-]+)", self.selector))

    @property
    def context(self) -> str:
        """The selector's ancestor part (`#Toast QLabel` -> `#Toast`), '' for a simple one."""
        parts = re.split(r"\s*>\s*|\s+", self.base)
        return " ".join(parts[:-1]) if len(parts) > 1 else ""


def parse_qss(text: str) -> list[Rule]:
    """The rules of a Qt style sheet, one per selector (comments removed; no nesting in QSS)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    rules: list[Rule] = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
        decls: dict[str, str] = {}
        for decl in body.split(";"):
            if ":" in decl:
                key, value = decl.split(":", 1)
                decls[key.strip().lower()] = value.strip()
        for sel in selectors.split(","):
            if sel.strip():
                rules.append(Rule(" ".join(sel.split()), decls))
    return rules


def _colour(value: str | None) -> str | None:
    """The colour a `background`/`color` value paints, None for none/transparent/gradients."""
    if not value:
        return None
    token = value.split()[0]
    if token.lower() in ("transparent", "none"):
        return None
    c = QColor(token)
    return token if c.isValid() and c.alpha() == 255 else None


def _background(rule: Rule) -> str | None:
    return _colour(rule.decls.get("background") or rule.decls.get("background-color"))


@dataclass(frozen=True)
class Pair:
    where: str
    fg: str
    bg: str

    @property
    def ratio(self) -> float:
        return contrast_ratio(self.fg, self.bg)


def stylesheet_pairs(qss: str, default_bg: str, containers: list[str] | None = None) -> list[Pair]:
    """Every (text colour, background) pair the style sheet sets up.

    A rule's text colour is paired with its own opaque background; else with its base
    selector's (`QToolButton:hover` takes `QToolButton`'s colour and its own background); else
    with its ancestor selector's (`#Toast QLabel` sits on `#Toast`); else — text on a transparent
    widget, which may sit on any surface — with `default_bg` and every one of `containers`
    (default: the opaque backgrounds of the sheet's simple rules that set no text colour, other
    than buttons and bars, which draw icons or chunks, and containers whose text has rules of its
    own, like `#Toast`).
    selection-color pairs with selection-background-color. `:disabled` rules are left out: WCAG
    1.4.3 exempts inactive controls.
    """
    rules = parse_qss(qss)
    by_base: dict[str, list[Rule]] = {}
    for r in rules:
        by_base.setdefault(r.base, []).append(r)
    # A container whose text has rules of its own (`#Toast QLabel`) is covered by those.
    coloured_contexts = {r.context for r in rules if r.context and "color" in r.decls}
    if containers is None:
        # (buttons and bars here draw icons or chunks, not text: #SendButton, #ContextBar)
        containers = [bg for r in rules if not r.states and not r.context and "::" not in r.selector
                      and "color" not in r.decls and not re.search(r"Button|Bar|Scroll", r.selector)
                      and r.base not in coloured_contexts and (bg := _background(r))]
    surfaces = list(dict.fromkeys([default_bg, *containers]))

    def plain_bg(selector: str) -> str | None:
        for r in reversed(by_base.get(selector, [])):
            if not r.states and _background(r):
                return _background(r)
        return None

    def plain_fg(selector: str) -> str | None:
        for r in reversed(by_base.get(selector, [])):
            if not r.states and _colour(r.decls.get("color")):
                return _colour(r.decls.get("color"))
        return None

    pairs: list[Pair] = []
    for r in rules:
        if "disabled" in r.states:
            continue
        sel_fg, sel_bg = _colour(r.decls.get("selection-color")), _colour(r.decls.get("selection-background-color"))
        if sel_fg and sel_bg:
            pairs.append(Pair(f"{r.selector} (selection)", sel_fg, sel_bg))
        fg = _colour(r.decls.get("color"))
        own_bg = _background(r)
        if fg is None and own_bg is not None and r.states:
            fg = plain_fg(r.base)               # a state that changes only the background
        if fg is None:
            continue
        bg = own_bg or (plain_bg(r.base) if r.states else None)
        if bg is None and "::" in r.base:       # QMenu::item sits on QMenu
            bg = plain_bg(r.base.split("::")[0])
        ctx = r.context
        while bg is None and ctx:
            bg = plain_bg(ctx)
            ctx = Rule(ctx, {}).context
        if bg is not None:
            pairs.append(Pair(r.selector, fg, bg))
        else:
            pairs += [Pair(f"{r.selector} (on {s})", fg, s) for s in surfaces]
    return list(dict.fromkeys(pairs))
