"""The model picker in the window: its popup lists the models whole (a sensible number of rows,
then it scrolls), never a clipped row and a half."""
from __future__ import annotations

import pytest

from app.gui.widgets.chat_header import PICKER_ROWS


@pytest.mark.parametrize("imported", [2, 30])
def test_the_picker_popup_shows_every_model_up_to_a_screenful(qtbot, make_window, engine, imported):
    names = [f"Model-{i:02d}" for i in range(imported)]
    w = make_window(engine, model_lister=lambda: names)
    picker = w.model_picker
    qtbot.waitUntil(lambda: picker.count() == imported + 1)
    w.model_picker.setCurrentIndex(picker.count() - 1)     # the last one chosen: the popup still lists all
    picker.showPopup()
    view = picker.view()
    qtbot.waitUntil(lambda: view.isVisible())
    row = view.sizeHintForRow(0)
    assert row > 0
    shown = min(picker.count(), PICKER_ROWS)
    # the list's visible area holds at least `shown` whole rows
    assert view.viewport().height() >= shown * row, (view.viewport().height(), row)
    assert view.window().height() >= view.viewport().height()
    picker.hidePopup()
    qtbot.waitUntil(lambda: not view.isVisible())
