"""One title function: a long first message's sidebar title is the store's from the first
moment, and stays when the reply ends (saved and temporary chats alike)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.store.titles import chat_title
from tests.support.gui import send, wait_idle

LONG = ("Could you help me plan a long weekend in the mountains for a family of five, with two "
        "grandparents who cannot walk far?\nSecond line with more detail.")


@pytest.mark.parametrize("temporary", [False, True])
def test_long_first_message_title_never_changes(make_window: Any, engine: Any, qtbot: Any,
                                                temporary: bool) -> None:
    w = make_window(engine)
    if temporary:
        w.new_chat(temporary=True)
    send(qtbot, w, LONG, wait=False)
    cid = w.current_id
    first = w.chat_model.chat(cid).title
    assert first == chat_title(LONG) and len(first) <= 60 and "Second line" not in first
    qtbot.waitUntil(lambda: w.stream is None, timeout=10000)
    wait_idle(qtbot, w)
    store = w.temp if temporary else w.store
    assert store.path.name == (":memory:" if temporary else "amber.sqlite3")   # a temporary chat: never on disk
    assert store.get_conversation(cid).title == first
    assert w.chat_model.chat(cid).title == first
    assert [type(m.id) for m in store.active_path(cid)] == [int, int]


def test_the_window_module_loads_no_sqlalchemy() -> None:
    """The window imports the store's rows at start; SQLAlchemy waits until the SQLite store opens
    on a worker thread, or the first temporary chat (a fresh interpreter: this one has it loaded)."""
    code = ("import sys\nimport app.gui.main_window\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2], env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
