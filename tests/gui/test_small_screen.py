"""Everything fits a 1366×768 laptop screen: the main window's minimum and first size, the
Settings dialog (its OK / Cancel reachable; the pages scroll instead of growing), and every other
dialog the window opens."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QDialogButtonBox, QScrollArea

from tests.support.gui import send

# A 1366×768 screen less a 48 px taskbar and a 32 px title bar.
ROOM = QSize(1366, 768 - 48 - 32)


def fits(size: QSize) -> bool:
    return size.width() <= ROOM.width() and size.height() <= ROOM.height()


def assert_fits(dlg: Any) -> None:
    assert fits(dlg.minimumSizeHint()), dlg.minimumSizeHint()
    assert fits(dlg.sizeHint()), dlg.sizeHint()
    assert fits(dlg.minimumSize()), dlg.minimumSize()
    assert fits(dlg.size()), dlg.size()


def test_main_window_fits_a_laptop_screen(make_window, engine):
    w = make_window(engine)
    assert fits(w.minimumSize()) and fits(w.minimumSizeHint())
    w.resize(ROOM)
    assert w.size() == ROOM      # nothing in it asks for more


def test_settings_fits_and_its_buttons_are_on_screen(make_window, engine, qtbot):
    from app.gui.dialogs.settings_dialog import SettingsDialog

    w = make_window(engine)
    dlg = SettingsDialog(w.settings, w.home, parent=w, server=w.api_server())
    assert_fits(dlg)
    dlg.resize(dlg.width(), ROOM.height())
    dlg.show()
    qtbot.waitExposed(dlg)
    buttons = dlg.findChild(QDialogButtonBox)
    bottom = buttons.mapTo(dlg, buttons.rect().bottomLeft()).y()
    assert buttons.isVisible() and bottom <= dlg.height() <= ROOM.height()
    # every setting is on some page; a page longer than the dialog scrolls rather than grows it
    pages = [dlg.tabs.widget(i) for i in range(dlg.tabs.count())]
    assert [dlg.tabs.tabText(i) for i in range(dlg.tabs.count())] == ["Chats", "Engine", "API server",
                                                                        "General"]
    assert all(isinstance(p, QScrollArea) for p in pages)
    for widget in (dlg.system_prompt, dlg.sampling, dlg.overflow, dlg.provider, dlg.clear_btn,
                   dlg.server_panel, dlg.theme, dlg.folder_label):
        assert any(p.isAncestorOf(widget) for p in pages)
    dlg.reject()


def test_settings_on_a_short_screen_keeps_its_buttons(make_window, engine, qtbot):
    """Squeezed to its minimum, the Chats page scrolls and OK / Cancel stay in the dialog."""
    from app.gui.dialogs.settings_dialog import SettingsDialog

    w = make_window(engine)
    dlg = SettingsDialog(w.settings, w.home, parent=w, server=w.api_server())
    dlg.show()
    qtbot.waitExposed(dlg)
    dlg.resize(dlg.width(), 360)
    qtbot.waitUntil(lambda: dlg.height() == 360)
    page = dlg.tabs.currentWidget()
    assert page.verticalScrollBar().maximum() > 0
    buttons = dlg.findChild(QDialogButtonBox)
    assert buttons.mapTo(dlg, buttons.rect().bottomLeft()).y() <= dlg.height()
    dlg.reject()


def test_every_other_dialog_fits(make_window, engine, qtbot, tmp_path):
    from app.gui.dialogs.model_library import ModelLibraryDialog
    from app.gui.dialogs.remote_dialog import RemoteDialog
    from app.gui.dialogs.settings_dialog import ChatSettingsDialog

    w = make_window(engine)
    send(qtbot, w, "Hello")
    chat = ChatSettingsDialog(w.store.get_conversation(w.current_id), w.settings, parent=w)
    library = ModelLibraryDialog(parent=w, tasks=w.tasks)
    remote = RemoteDialog(w.tasks.run_task, parent=w)
    for dlg in (chat, library, remote):
        assert_fits(dlg)
        dlg.deleteLater()
