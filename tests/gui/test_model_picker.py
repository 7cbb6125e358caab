"""The model picker in the window: its popup lists the models whole (up to PICKER_ROWS rows, then
it scrolls), also when the list grows while the popup is open (the models are listed in the
background: an early click used to leave a popup sized for the shorter list, a row and a half)."""
from __future__ import annotations

import pytest

from app.gui.widgets.chat_header import PICKER_ROWS


@pytest.mark.parametrize("imported", [4, 30])
def test_the_picker_popup_shows_every_model_up_to_a_screenful(qtbot, make_window, engine, imported):
    listed: list[str] = []
    w = make_window(engine, model_lister=lambda: list(listed))
    picker = w.model_picker
    qtbot.waitUntil(lambda: picker.count() == 1)          # the default model only, so far
    picker.showPopup()
    view = picker.view()
    qtbot.waitUntil(lambda: view.isVisible())
    listed.extend(f"Model-{i:02d}" for i in range(imported))
    w.refresh_models()                                    # the list arrives while it is open
    qtbot.waitUntil(lambda: picker.count() == imported + 1)
    row = view.sizeHintForRow(0)
    shown = min(picker.count(), PICKER_ROWS)
    assert row > 0
    qtbot.waitUntil(lambda: view.viewport().height() >= shown * row)
    assert view.window().height() >= view.viewport().height()
    picker.hidePopup()

    picker.setCurrentIndex(picker.count() - 1)            # opened again on the last model
    picker.showPopup()
    qtbot.waitUntil(lambda: view.isVisible())
    assert view.viewport().height() >= shown * row
    picker.hidePopup()
