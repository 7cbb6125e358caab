"""The chat list model on its own: Qt's model tester, grouping, incremental updates, search."""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from PySide6.QtCore import QPersistentModelIndex, Qt

from app.gui.models.chat_list import (ChatListModel, ChatRow, Header, IdRole, IsHeaderRole,
                                   KvStateRole, PinnedRole, TemporaryRole, build_items,
                                   group_label)

TODAY = datetime.now().astimezone()


def row(i: int, *, days: int = 0, pinned: bool = False, temporary: bool = False,
        kv: str = "none") -> ChatRow:
    return ChatRow(id=f"c{i}", title=f"Chat {i}", pinned=pinned, temporary=temporary,
                   updated_at=(TODAY - timedelta(days=days, minutes=i)).astimezone(timezone.utc),
                   kv_state=kv)


def sample() -> list[ChatRow]:
    return [row(1, pinned=True, kv="disk"), row(2), row(3, days=1), row(4, days=3),
            row(5, days=30), row(6, temporary=True, kv="memory"), row(7, days=2, pinned=True)]


def test_qtmodeltester_over_every_kind_of_change(qtmodeltester):
    model = ChatListModel()
    model.set_rows(sample())
    qtmodeltester.check(model, force_py=True)
    # incremental changes, checked live by the tester (it listens to every signal)
    model.upsert(row(8))
    model.update("c4", pinned=True)
    model.update("c2", title="Renamed", kv_state="memory")
    model.hide("c3")
    model.unhide("c3")
    model.remove("c5")
    model.set_search(["c2", "c1"], {"c2": "…match…"})
    model.set_search(None)
    model.set_rows([row(i) for i in range(200)])  # a big change: a reset
    qtmodeltester.check(model, force_py=True)


def test_groups_pinned_first_then_by_recency():
    items = build_items(sample(), today=TODAY.date())
    labels = [i.label if isinstance(i, Header) else i.id for i in items]
    assert labels == ["Pinned", "c1", "c7", "Today", "c2", "c6", "Yesterday", "c3",
                      "Previous 7 days", "c4", "Older", "c5"]


@pytest.mark.parametrize("days,label", [(0, "Today"), (1, "Yesterday"), (2, "Previous 7 days"),
                                        (7, "Previous 7 days"), (8, "Older"), (400, "Older")])
def test_group_label(days, label):
    today = date(2026, 11, 30)
    when = datetime(2026, 11, 30, 12, tzinfo=timezone.utc).astimezone() - timedelta(days=days)
    assert group_label(when, today) == label


def test_headers_are_not_selectable_and_chats_are_editable():
    model = ChatListModel()
    model.set_rows(sample())
    header = model.index(0, 0)
    assert header.data(IsHeaderRole) is True
    assert header.flags() == Qt.ItemFlag.NoItemFlags
    chat = model.index_of("c1")
    assert chat.flags() & Qt.ItemFlag.ItemIsSelectable
    assert chat.flags() & Qt.ItemFlag.ItemIsEditable
    assert chat.data(PinnedRole) is True and chat.data(KvStateRole) == "disk"
    assert model.index_of("c6").data(TemporaryRole) is True
    assert "Temporary" in model.index_of("c6").data(Qt.ItemDataRole.ToolTipRole)
    assert "on disk" in chat.data(Qt.ItemDataRole.ToolTipRole)


def test_small_changes_keep_persistent_indexes(qtbot):
    model = ChatListModel()
    model.set_rows(sample())
    resets = []
    model.modelReset.connect(lambda: resets.append(1))
    p = QPersistentModelIndex(model.index_of("c3"))
    model.update("c3", pinned=True)          # moves into the Pinned section
    assert not resets
    assert p.isValid() and p.data(IdRole) == "c3"
    assert model.headers()[0] == "Pinned"
    assert model.visible_chat_ids()[:3] == ["c1", "c3", "c7"]
    model.upsert(row(9))                      # a new chat appears under Today
    assert p.data(IdRole) == "c3" and not resets
    model.remove("c2")
    assert p.data(IdRole) == "c3" and not resets


def test_set_data_renames_and_announces(qtbot):
    model = ChatListModel()
    model.set_rows(sample())
    idx = model.index_of("c2")
    with qtbot.waitSignal(model.renameRequested) as sig:
        assert model.setData(idx, "  A   new  title ")
    assert sig.args == ["c2", "A new title"]
    assert model.chat("c2").title == "A new title"
    assert not model.setData(idx, "   ")            # blank titles are refused
    assert not model.setData(model.index(0, 0), "header")


def test_search_is_a_flat_ranked_list_and_hidden_rows_stay_hidden():
    model = ChatListModel()
    model.set_rows(sample())
    model.hide("c4")
    model.set_search(["c5", "c4", "c2"], {"c5": "snippet five"})
    assert model.headers() == ["2 matching chats"]
    assert model.visible_chat_ids() == ["c5", "c2"]
    assert model.chat("c5").snippet == "snippet five"
    model.set_search([])
    assert model.headers() == ["No matching chats"]
    model.set_search(None)
    assert "c4" not in model.visible_chat_ids()
    assert model.chat("c5").snippet == ""


def test_ten_thousand_rows_are_all_listed():
    """Every row once, under its headers (how long it takes: `python -m bench gui`, sidebar_10k)."""
    rows = [row(i, days=i % 40, pinned=i % 500 == 0) for i in range(10_000)]
    items = build_items(rows, today=TODAY.date())
    model = ChatListModel()
    model.set_rows(rows, items)
    assert model.rowCount() == 10_000 + len(model.headers())


def test_incremental_updates_match_a_full_rebuild(qtmodeltester):
    """Random single-row changes (the fast paths) always give the list a rebuild would give."""
    import random

    rng = random.Random(11)
    model = ChatListModel()
    rows = {f"c{i}": row(i, days=rng.choice([0, 0, 1, 3, 9, 40]), pinned=rng.random() < 0.2)
            for i in range(60)}
    model.set_rows(list(rows.values()))
    qtmodeltester.check(model, force_py=True)
    hidden: set[str] = set()
    for step in range(300):
        op = rng.random()
        cid = f"c{rng.randrange(70)}"
        if op < 0.55:
            base = rows.get(cid) or row(int(cid[1:]))
            new = ChatRow(**{**base.__dict__,
                             "pinned": rng.random() < 0.25,
                             "updated_at": (TODAY - timedelta(days=rng.choice([0, 1, 2, 5, 20]),
                                                              minutes=rng.randrange(500))
                                            ).astimezone(timezone.utc),
                             "kv_state": rng.choice(["none", "memory", "disk"])})
            rows[cid] = new
            model.upsert(new)
        elif op < 0.7 and cid in rows:
            model.hide(cid)
            hidden.add(cid)
        elif op < 0.85 and cid in hidden:
            model.unhide(cid)
            hidden.discard(cid)
        elif cid in rows:
            del rows[cid]
            hidden.discard(cid)
            model.remove(cid)
        expected = build_items([r for k, r in rows.items() if k not in hidden])
        assert model._items == expected, f"step {step}"
    qtmodeltester.check(model, force_py=True)
