"""The chat list: a `QAbstractListModel` over plain `ChatRow`s (never ORM objects).

Display items are section headers (Pinned, Today, Yesterday, Previous 7 days, Older, or a search
result count) and chat rows. `build_items` is pure Python and runs on a worker thread for big
lists; the model applies small changes as inserts / removes / moves (so selection and an open
editor survive) and big ones as a reset.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from PySide6.QtCore import QAbstractListModel, QByteArray, QModelIndex, QPersistentModelIndex, Qt, Signal

IdRole = Qt.ItemDataRole.UserRole + 1
IsHeaderRole = Qt.ItemDataRole.UserRole + 2
PinnedRole = Qt.ItemDataRole.UserRole + 3
TemporaryRole = Qt.ItemDataRole.UserRole + 4
KvStateRole = Qt.ItemDataRole.UserRole + 5
SavingRole = Qt.ItemDataRole.UserRole + 6
SnippetRole = Qt.ItemDataRole.UserRole + 7
RowRole = Qt.ItemDataRole.UserRole + 8
BusyRole = Qt.ItemDataRole.UserRole + 9

_ROOT = QModelIndex()   # the invalid index: Qt's default parent (never modified)
KV_LABELS = {"disk": "KV cache on disk", "memory": "KV cache in memory", "none": "No KV cache"}


def kv_tip(state: str, size: int) -> str:
    """The tooltip's word on where the model's memory of this chat (its KV cache) is."""
    mb = f" ({size / 1e6:.1f} MB)" if size else ""
    if state == "disk":
        return f"Saved on disk{mb}: replies start at once, even after a restart"
    if state == "memory":
        return f"Held in memory{mb}: the next reply starts at once"
    return "Not loaded: the next reply reads the whole chat first"


@dataclass(frozen=True)
class ChatRow:
    id: str
    title: str
    pinned: bool = False
    temporary: bool = False
    updated_at: datetime = datetime.fromtimestamp(0, timezone.utc)
    kv_state: str = "none"          # none | memory | disk
    kv_bytes: int = 0
    saving: bool = False            # a pin is writing the KV to disk
    busy: bool = False              # a reply is being generated
    snippet: str = ""               # search result context

    @classmethod
    def from_store(cls, row: Any, *, temporary: bool = False) -> "ChatRow":
        return cls(id=row.id, title=row.title or "New chat", pinned=bool(row.pinned),
                   temporary=temporary, updated_at=row.updated_at,
                   kv_state=getattr(row, "kv_state", "none") or "none",
                   kv_bytes=int(getattr(row, "kv_bytes", 0) or 0))


@dataclass(frozen=True)
class Header:
    label: str

    @property
    def key(self) -> tuple[str, str]:
        return ("h", self.label)


Item = ChatRow | Header


def _key(item: Item) -> tuple[str, str]:
    return ("h", item.label) if isinstance(item, Header) else ("c", item.id)


SECTIONS = ("Pinned", "Today", "Yesterday", "Previous 7 days", "Older")


class Grouper:
    """Which recency section a time falls in, by comparing with local midnights (fast)."""

    def __init__(self, today: date | None = None):
        today = today or datetime.now().astimezone().date()
        midnight = datetime(today.year, today.month, today.day).astimezone()
        self.today = today
        self.t_today = midnight.timestamp()
        self.t_yesterday = (midnight - timedelta(days=1)).timestamp()
        self.t_week = (midnight - timedelta(days=7)).timestamp()

    def label(self, updated_at: datetime) -> str:
        ts = updated_at.timestamp()
        if ts >= self.t_today:
            return "Today"
        if ts >= self.t_yesterday:
            return "Yesterday"
        if ts >= self.t_week:
            return "Previous 7 days"
        return "Older"

    def section(self, row: "ChatRow") -> str:
        return "Pinned" if row.pinned else self.label(row.updated_at)


def group_label(updated_at: datetime, today: date) -> str:
    return Grouper(today).label(updated_at)


def order_key(row: "ChatRow") -> tuple[float, str]:
    """Order inside a section: most recently updated first (ties by id, so it is total)."""
    return (-row.updated_at.timestamp(), row.id)


def build_items(rows: Iterable[ChatRow], *, today: date | None = None,
                search_order: Sequence[str] | None = None) -> list[Item]:
    """Headers + rows in display order. With `search_order`, a flat ranked list of the hits."""
    rows = list(rows)
    if search_order is not None:
        by_id = {r.id: r for r in rows}
        hits = [by_id[i] for i in search_order if i in by_id]
        n = len(hits)
        label = "No matching chats" if n == 0 else f"{n} matching chat{'s' if n != 1 else ''}"
        return [Header(label), *hits]
    g = Grouper(today)
    keyed = sorted(((SECTIONS.index(g.section(r)), order_key(r), r) for r in rows),
                   key=lambda t: (t[0], t[1]))
    items: list[Item] = []
    current = -1
    for sec, _key, r in keyed:
        if sec != current:
            items.append(Header(SECTIONS[sec]))
            current = sec
        items.append(r)
    return items


class ChatListModel(QAbstractListModel):
    """Rows are `Header`s and `ChatRow`s; only chat rows are selectable / editable."""

    renameRequested = Signal(str, str)  # chat id, new title

    RESET_THRESHOLD = 64  # apply bigger changes as a model reset

    def __init__(self, parent: Any = None):
        super().__init__(parent)
        self._items: list[Item] = []
        self._rows: dict[str, ChatRow] = {}      # all known chats (also those filtered out)
        self._hidden: set[str] = set()           # deleted, waiting for the undo to expire
        self._search: list[str] | None = None    # ranked ids while a search is active
        self._snippets: dict[str, str] = {}
        self.saving_ids: set[str] = set()        # chats whose KV is being written (a spinner)

    # --- Qt model API ------------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(self._items)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._items):
            return None
        item = self._items[index.row()]
        if role == RowRole:
            return item
        if isinstance(item, Header):
            if role == Qt.ItemDataRole.DisplayRole:
                return item.label
            if role == IsHeaderRole:
                return True
            return None
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return item.title
        if role == Qt.ItemDataRole.ToolTipRole:
            tip = item.title
            if item.temporary:
                tip += "\nTemporary chat — discarded when closed"
            tip += "\n" + kv_tip(item.kv_state, item.kv_bytes)
            if item.saving:
                tip += "\nSaving KV cache to disk…"
            if item.snippet:
                tip += "\n…" + item.snippet + "…"
            return tip
        if role == Qt.ItemDataRole.AccessibleTextRole:
            parts = [item.title]
            if item.pinned:
                parts.append("pinned")
            if item.temporary:
                parts.append("temporary")
            parts.append(KV_LABELS.get(item.kv_state, ""))
            return ", ".join(parts)
        if role == IdRole:
            return item.id
        if role == IsHeaderRole:
            return False
        if role == PinnedRole:
            return item.pinned
        if role == TemporaryRole:
            return item.temporary
        if role == KvStateRole:
            return item.kv_state
        if role == SavingRole:
            return item.saving
        if role == SnippetRole:
            return item.snippet
        if role == BusyRole:
            return item.busy
        return None

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        if not index.isValid() or not 0 <= index.row() < len(self._items):
            return Qt.ItemFlag.NoItemFlags
        if isinstance(self._items[index.row()], Header):
            return Qt.ItemFlag.NoItemFlags
        return (Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
                | Qt.ItemFlag.ItemIsEditable | Qt.ItemFlag.ItemNeverHasChildren)

    def setData(self, index: QModelIndex | QPersistentModelIndex, value: Any,
                role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or not index.isValid():
            return False
        item = self._items[index.row()]
        title = " ".join(str(value or "").split())
        if isinstance(item, Header) or not title or title == item.title:
            return False
        self.upsert(replace(item, title=title))
        self.renameRequested.emit(item.id, title)
        return True

    def roleNames(self) -> dict[int, QByteArray]:
        names = dict(super().roleNames())
        names.update({role: QByteArray(name) for role, name in (
            (IdRole, b"chatId"), (IsHeaderRole, b"isHeader"), (PinnedRole, b"pinned"),
            (TemporaryRole, b"temporary"), (KvStateRole, b"kvState"),
            (SavingRole, b"saving"), (SnippetRole, b"snippet"), (BusyRole, b"busy"))})
        return names

    # --- queries -----------------------------------------------------------------------------
    def row_of(self, chat_id: str) -> int:
        for i, item in enumerate(self._items):
            if isinstance(item, ChatRow) and item.id == chat_id:
                return i
        return -1

    def index_of(self, chat_id: str) -> QModelIndex:
        r = self.row_of(chat_id)
        return self.index(r, 0) if r >= 0 else QModelIndex()

    def chat(self, chat_id: str) -> ChatRow | None:
        return self._rows.get(chat_id)

    def chat_at(self, row: int) -> ChatRow | None:
        if 0 <= row < len(self._items) and isinstance(self._items[row], ChatRow):
            return self._items[row]  # type: ignore[return-value]
        return None

    def visible_chat_ids(self) -> list[str]:
        return [i.id for i in self._items if isinstance(i, ChatRow)]

    def all_chats(self) -> list[ChatRow]:
        return list(self._rows.values())

    def headers(self) -> list[str]:
        return [i.label for i in self._items if isinstance(i, Header)]

    @property
    def searching(self) -> bool:
        return self._search is not None

    # --- updates -----------------------------------------------------------------------------
    def set_rows(self, rows: Sequence[ChatRow], items: list[Item] | None = None) -> None:
        """Replace every chat. `items` may be precomputed with `build_items` off the UI thread
        (then this is one cheap model reset, whatever the number of chats)."""
        self._rows = {r.id: r for r in rows}
        self.saving_ids = {r.id for r in rows if r.saving}
        if items is not None and self._search is None and not self._hidden:
            self.beginResetModel()
            self._items = list(items)
            self.endResetModel()
        else:
            self._refresh()

    def upsert(self, row: ChatRow) -> None:
        old = self._rows.get(row.id)
        if old is not None and row.snippet == "" and old.snippet:
            row = replace(row, snippet=old.snippet)
        self._rows[row.id] = row
        if row.saving:
            self.saving_ids.add(row.id)
        else:
            self.saving_ids.discard(row.id)
        if self._search is not None or row.id in self._hidden:
            self._refresh()
            return
        g = Grouper()
        idx = self.row_of(row.id)
        if idx >= 0:
            cur = self._items[idx]
            if g.section(cur) == g.section(row) and self._fits(idx, row):  # type: ignore[arg-type]
                self._items[idx] = row
                mi = self.index(idx, 0)
                self.dataChanged.emit(mi, mi)
                return
            self._move(idx, row, g)
            return
        self._insert_sorted(row, g)

    def update(self, chat_id: str, **changes: Any) -> ChatRow | None:
        row = self._rows.get(chat_id)
        if row is None:
            return None
        row = replace(row, **changes)
        self.upsert(row)
        return row

    def remove(self, chat_id: str) -> None:
        self._hidden.discard(chat_id)
        self.saving_ids.discard(chat_id)
        if self._rows.pop(chat_id, None) is not None:
            self._drop(chat_id)

    def hide(self, chat_id: str) -> None:
        self._hidden.add(chat_id)
        self._drop(chat_id)

    def unhide(self, chat_id: str) -> None:
        self._hidden.discard(chat_id)
        row = self._rows.get(chat_id)
        if row is None:
            return
        if self._search is not None:
            self._refresh()
        elif self.row_of(chat_id) < 0:
            self._insert_sorted(row, Grouper())

    # --- single-row changes without rebuilding the list (10,000 chats stay cheap) ------------
    def _drop(self, chat_id: str) -> None:
        if self._search is not None:
            self._refresh()
            return
        idx = self.row_of(chat_id)
        if idx >= 0:
            self._remove_at(idx)

    def _fits(self, idx: int, row: ChatRow) -> bool:
        k = order_key(row)
        prev = self._items[idx - 1] if idx > 0 else None
        nxt = self._items[idx + 1] if idx + 1 < len(self._items) else None
        if isinstance(prev, ChatRow) and order_key(prev) > k:
            return False
        if isinstance(nxt, ChatRow) and order_key(nxt) < k:
            return False
        return True

    def _remove_at(self, idx: int) -> None:
        first = idx
        if (idx > 0 and isinstance(self._items[idx - 1], Header)
                and (idx + 1 == len(self._items) or isinstance(self._items[idx + 1], Header))):
            first = idx - 1  # the section is empty now: its header goes too
        self.beginRemoveRows(QModelIndex(), first, idx)
        del self._items[first: idx + 1]
        self.endRemoveRows()

    def _header_slot(self, label: str) -> tuple[int, int]:
        """(index of the section's header or -1, where to insert it if missing)."""
        rank = SECTIONS.index(label)
        for i, it in enumerate(self._items):
            if isinstance(it, Header):
                if it.label == label:
                    return i, i
                if it.label in SECTIONS and SECTIONS.index(it.label) > rank:
                    return -1, i
        return -1, len(self._items)

    def _move(self, idx: int, row: ChatRow, g: Grouper) -> None:
        """Move a chat to its new place with beginMoveRows, so selection and persistent
        indexes follow it; section headers appear and disappear around it."""
        items = self._items
        label = g.section(row)
        header_at, slot = self._header_slot(label)
        if header_at < 0:
            self.beginInsertRows(QModelIndex(), slot, slot)
            items.insert(slot, Header(label))
            self.endInsertRows()
            header_at = slot
            if slot <= idx:
                idx += 1
        k = order_key(row)
        pos = header_at + 1
        while pos < len(items) and isinstance(at := items[pos], ChatRow) and (
                pos == idx or order_key(at) < k):
            pos += 1
        if pos not in (idx, idx + 1):
            self.beginMoveRows(QModelIndex(), idx, idx, QModelIndex(), pos)
            item = items.pop(idx)
            items.insert(pos if pos < idx else pos - 1, item)
            self.endMoveRows()
            idx = pos if pos < idx else pos - 1
        items[idx] = row
        mi = self.index(idx, 0)
        self.dataChanged.emit(mi, mi)
        for i in range(len(items) - 1, -1, -1):  # drop headers of sections left empty
            if isinstance(items[i], Header) and (i + 1 == len(items) or isinstance(items[i + 1], Header)):
                self.beginRemoveRows(QModelIndex(), i, i)
                del items[i]
                self.endRemoveRows()

    def _insert_sorted(self, row: ChatRow, g: Grouper) -> None:
        label = g.section(row)
        rank = SECTIONS.index(label)
        items = self._items
        header_at = -1
        insert_header_at = len(items)
        for i, it in enumerate(items):
            if isinstance(it, Header):
                if it.label == label:
                    header_at = i
                    break
                if it.label in SECTIONS and SECTIONS.index(it.label) > rank:
                    insert_header_at = i
                    break
        if header_at < 0:
            self.beginInsertRows(QModelIndex(), insert_header_at, insert_header_at + 1)
            items[insert_header_at:insert_header_at] = [Header(label), row]
            self.endInsertRows()
            return
        k = order_key(row)
        pos = header_at + 1
        while pos < len(items) and isinstance(at := items[pos], ChatRow) and order_key(at) < k:
            pos += 1
        self.beginInsertRows(QModelIndex(), pos, pos)
        items.insert(pos, row)
        self.endInsertRows()

    def set_search(self, ranked_ids: Sequence[str] | None, snippets: dict[str, str] | None = None
                   ) -> None:
        self._search = list(ranked_ids) if ranked_ids is not None else None
        snips = snippets or {}
        self._rows = {k: v if v.snippet == snips.get(k, "") else replace(v, snippet=snips.get(k, ""))
                      for k, v in self._rows.items()}
        self._refresh()

    def _refresh(self) -> None:
        rows = (r for r in self._rows.values() if r.id not in self._hidden)
        self._apply(build_items(rows, search_order=self._search))

    def _apply(self, new: list[Item]) -> None:
        old = self._items
        old_keys = [_key(i) for i in old]
        new_keys = [_key(i) for i in new]
        if old_keys == new_keys:
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                if a != b:
                    self._items[i] = b
                    idx = self.index(i, 0)
                    self.dataChanged.emit(idx, idx)
            return
        new_set = set(new_keys)
        old_set = set(old_keys)
        if (len(old_set - new_set) + len(new_set - old_set) > self.RESET_THRESHOLD
                or len(old_keys) != len(old_set) or len(new_keys) != len(new_set)):
            self.beginResetModel()
            self._items = list(new)
            self.endResetModel()
            return
        # 1. removals (from the end so indices stay valid)
        for i in range(len(old) - 1, -1, -1):
            if old_keys[i] not in new_set:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self._items[i]
                self.endRemoveRows()
        # 2. reorder the survivors into their new relative order
        cur_keys = [_key(i) for i in self._items]
        order = {k: n for n, k in enumerate(new_keys)}
        wanted = sorted(cur_keys, key=order.__getitem__)
        if wanted != cur_keys:
            self.layoutAboutToBeChanged.emit()
            new_pos = {k: n for n, k in enumerate(wanted)}
            persistent = self.persistentIndexList()
            self._items.sort(key=lambda it: order[_key(it)])
            moved_to = []
            for p in persistent:
                k = cur_keys[p.row()] if 0 <= p.row() < len(cur_keys) else None
                moved_to.append(self.index(new_pos[k], 0) if k is not None else QModelIndex())
            self.changePersistentIndexList(persistent, moved_to)
            self.layoutChanged.emit()
        # 3. insertions
        for i, item in enumerate(new):
            if i >= len(self._items) or _key(self._items[i]) != new_keys[i]:
                self.beginInsertRows(QModelIndex(), i, i)
                self._items.insert(i, item)
                self.endInsertRows()
        # 4. changed data
        for i, item in enumerate(new):
            if self._items[i] != item:
                self._items[i] = item
                idx = self.index(i, 0)
                self.dataChanged.emit(idx, idx)
