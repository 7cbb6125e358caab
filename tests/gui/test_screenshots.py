"""Screenshots of the main states, for a person to look at (`make screenshots`).

Each test also checks the state it shows, so they are real tests too.
"""
from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.gui import theme
from tests.support.gui import send, wait_idle

QUESTION = "How do I read a file line by line in Python, and what is the KV cache?"


def populate(qtbot, w, engine):
    """A few chats: one pinned (KV on disk), regular ones, a temporary one."""
    engine.reply = lambda msgs: "Here is a quick note about " + msgs[-1].content.split()[0] + "."
    for text in ("Trip plans for Lisbon in May", "Explain attention like I'm five",
                 "Draft an email to the landlord"):
        w.new_chat()
        send(qtbot, w, text)
    pinned = w.chat_model.visible_chat_ids()[-1]
    w.toggle_pin(pinned)
    qtbot.waitUntil(lambda: w.chat_model.chat(pinned).kv_state == "disk", timeout=5000)
    w.new_chat(temporary=True)
    send(qtbot, w, "Quick private question")
    from tests.support.fake_engine import DEFAULT_REPLY
    engine.reply = ("Reading a file line by line is easy — iterate over the file object:\n\n"
                    "```python\nwith open(\"notes.txt\", encoding=\"utf-8\") as f:\n"
                    "    for line in f:\n        print(line.rstrip())\n```\n\n"
                    "### The KV cache\n\nWhile generating, the model keeps the **keys** and "
                    "**values** of every token it has seen, so each new token costs one step:\n\n"
                    "| Chat kind | KV cache | After a restart |\n|---|---|---|\n"
                    "| Pinned | on disk | resumes instantly |\n| Regular | in memory | prefilled again |\n"
                    "| Temporary | in memory | gone |\n\n"
                    "More in the [ONNX Runtime docs](https://onnxruntime.ai).")
    w.new_chat()
    send(qtbot, w, QUESTION)
    engine.reply = DEFAULT_REPLY
    wait_idle(qtbot, w)


def test_screenshot_main_light(make_window, engine, qtbot, shots):
    w = make_window(engine)
    w.resize(1180, 780)
    populate(qtbot, w, engine)
    assert w.chat_model.headers() == ["Pinned", "Today"]
    assert w.chat_view.widgets[-1].item.rendered.code_blocks
    shots(w, "01-main-light")


def test_screenshot_streaming(make_window, engine, qtbot, shots):
    engine.delay = 0.03
    w = make_window(engine)
    w.resize(1180, 780)
    send(qtbot, w, "Write me something with code", wait=False)
    qtbot.waitUntil(lambda: "First point" in w.chat_view.stream_text, timeout=5000)
    assert w.composer.stop_btn.isVisible()
    shots(w, "02-streaming")
    w.stop()


def test_screenshot_dark(make_window, engine, qtbot, shots, qapp):
    theme.apply(qapp, theme.DARK)
    try:
        w = make_window(engine)
        w.resize(1180, 780)
        populate(qtbot, w, engine)
        assert QApplication.palette().color(QApplication.palette().ColorRole.Window).name() == theme.DARK.window
        shots(w, "03-main-dark")
    finally:
        theme.apply(qapp, theme.LIGHT)


def test_screenshot_search_and_menu(make_window, engine, qtbot, shots):
    w = make_window(engine)
    w.resize(1180, 780)
    populate(qtbot, w, engine)
    qtbot.keyClicks(w.sidebar.search, "landlord")
    qtbot.waitUntil(lambda: w.chat_model.searching and len(w.chat_model.visible_chat_ids()) == 1,
                    timeout=3000)
    shots(w, "04-search")
    w.sidebar.search.clear()
    qtbot.waitUntil(lambda: not w.chat_model.searching, timeout=3000)
    menu = w.sidebar.build_menu(w.chat_model.index_of(w.chat_model.visible_chat_ids()[0]))
    menu.popup(w.sidebar.view.mapToGlobal(w.sidebar.view.rect().center()))
    qtbot.waitExposed(menu)
    shots(menu, "05-context-menu")
    menu.close()


def test_screenshot_first_launch_loading(make_window, engine, qtbot, shots):
    import threading
    gate = threading.Event()

    def prepare(name, progress):
        progress(0.42, "Preparing the default model (SmolLM2-135M-Instruct): converting weights…")
        gate.wait(5)
        return make_window.home / "models" / "default"

    w = make_window(engine, wait_ready=False, model_preparer=prepare)
    w.resize(1180, 780)
    qtbot.waitUntil(lambda: w.banner.isVisible() and w.banner.bar.value() == 420, timeout=3000)
    assert not w.composer.send_btn.isEnabled()
    shots(w, "06-first-launch")
    gate.set()
    qtbot.waitUntil(lambda: w.engine is not None, timeout=3000)


def _colours(img, rect, step: int = 2) -> set[int]:
    """The distinct pixel values of `img` sampled over `rect` (image pixels)."""
    return {img.pixel(x, y) for x in range(rect.left(), rect.right() + 1, step)
            for y in range(rect.top(), rect.bottom() + 1, step)}


def test_screenshot_settings(make_window, engine, qtbot, shots):
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QDialogButtonBox

    from app.gui.dialogs.settings_dialog import SettingsDialog

    w = make_window(engine)
    dlg = SettingsDialog(w.settings, w.home, parent=w)
    dlg.show()
    qtbot.waitExposed(dlg)
    img = QImage(str(shots(dlg, "07-settings")))
    ratio = dlg.devicePixelRatioF()
    assert (img.width(), img.height()) == (round(dlg.width() * ratio), round(dlg.height() * ratio))
    assert len(_colours(img, img.rect(), step=7)) > 10          # a drawn dialog, not a blank picture
    assert dlg.system_prompt.toPlainText() == w.settings.system_prompt
    box = dlg.findChild(QDialogButtonBox)
    for role, label in ((QDialogButtonBox.StandardButton.Ok, "OK"),
                        (QDialogButtonBox.StandardButton.Cancel, "Cancel")):
        button = box.button(role)
        assert button.isVisible() and button.text().replace("&", "") == label
        where = QRect(button.mapTo(dlg, QPoint(0, 0)), button.size())
        assert dlg.rect().contains(where)                       # whole, not cut off by the dialog's edge
        pixels = QRect(round(where.x() * ratio), round(where.y() * ratio),
                       round(where.width() * ratio), round(where.height() * ratio))
        assert len(_colours(img, pixels)) > 3                   # drawn in the picture: frame and label
    dlg.reject()


def test_screenshot_deleted_with_undo(make_window, engine, qtbot, shots):
    w = make_window(engine)
    w.resize(1180, 780)
    populate(qtbot, w, engine)
    deleted = w.current_id
    with qtbot.waitSignal(w.chatLoaded, timeout=5000):
        w.delete_chat(deleted)             # the neighbouring chat opens
    qtbot.waitUntil(lambda: not w.chat_view.loading, timeout=5000)
    assert w.toast.isVisible() and w.current_id not in (None, deleted)
    shots(w, "08-undo-delete")
    w.undo_delete()


# --- the daily-use states: ------------------------------------------------------------------
LONG_LINE_REPLY = ("A long line keeps its shape and scrolls sideways:\n\n```python\n"
                   "result = compute(" + ", ".join(f"argument_{i}={i}" for i in range(40)) + ")\n"
                   "print(result)\n```\n\nThe Copy link stays in view.")


def test_screenshot_small_window(make_window, engine, qtbot, shots):
    w = make_window(engine)
    populate(qtbot, w, engine)
    w.resize(640, 480)
    qtbot.waitUntil(lambda: w.width() == 640 and w.sidebar.isHidden(), timeout=3000)
    QApplication.processEvents()
    assert w.title_label.isVisible() and w.composer.send_btn.isVisible()
    shots(w, "09-small-window")
    w.view_ctl.set_sidebar(True, user=True)
    QApplication.processEvents()
    assert not w.sidebar.isHidden()
    shots(w, "10-small-window-sidebar")


def test_screenshot_prefill_progress(make_window, engine, qtbot, shots):
    engine.hold_prefill = True
    w = make_window(engine)
    w.resize(1000, 680)
    send(qtbot, w, "Summarise this long paste: " + "lorem ipsum dolor sit amet " * 80, wait=False)
    qtbot.waitUntil(lambda: " / " in w.chat_view.widgets[-1].prefill.label.text(), timeout=5000)
    QApplication.processEvents()
    assert w.chat_view.widgets[-1].prefill.label.text().startswith("Reading prompt… ")
    shots(w, "11-prefill-progress")
    engine.release_prefill.set()
    wait_idle(qtbot, w, timeout=10000)


def test_screenshot_overflow_notice(make_window, home, qtbot, shots):
    from tests.support.fake_engine import FakeEngine

    engine = FakeEngine(home / "state", context_window=160,
                        reply="Sure — continuing from the latest turns.")
    w = make_window(engine)
    w.resize(1000, 680)
    for i in range(5):
        send(qtbot, w, f"Part {i + 1} of my notes: " + "some words " * 12)
    wait_idle(qtbot, w)
    assert not w.chat_view.widgets[-1].overflow_label.isHidden()
    w.chat_view.scroll_to_bottom()
    QApplication.processEvents()
    shots(w, "12-overflow-notice")


def test_screenshot_long_code_line(make_window, engine, qtbot, shots):
    engine.reply = LONG_LINE_REPLY
    w = make_window(engine)
    w.resize(900, 620)
    send(qtbot, w, "Show me a long line")
    wait_idle(qtbot, w)
    assert w.chat_view.widgets[-1].body.wide()
    shots(w, "13-long-code-line")


def test_screenshot_small_window_dark(make_window, engine, qtbot, shots, qapp):
    theme.apply(qapp, theme.DARK)
    try:
        engine.reply = LONG_LINE_REPLY
        w = make_window(engine)
        w.resize(640, 480)
        send(qtbot, w, "Show me a long line")
        wait_idle(qtbot, w)
        QApplication.processEvents()
        shots(w, "14-small-window-dark")
    finally:
        theme.apply(qapp, theme.LIGHT)


def test_screenshot_queued_and_search_hit(make_window, engine, qtbot, shots):
    w = make_window(engine)
    w.resize(1100, 700)
    populate(qtbot, w, engine)
    engine.delay = 0.05
    send(qtbot, w, "Write a long story", wait=False)
    qtbot.waitUntil(lambda: len(w.chat_view.stream_text) > 20, timeout=5000)
    w.new_chat()
    send(qtbot, w, "And a quick question meanwhile", wait=False)
    assert w.queued
    QApplication.processEvents()
    shots(w, "15-queued-send")
    w.stop()
    wait_idle(qtbot, w, timeout=15000)
    qtbot.waitUntil(lambda: not w.queued and w.stream is None, timeout=15000)
    wait_idle(qtbot, w, timeout=15000)
    qtbot.keyClicks(w.sidebar.search, "attention")
    qtbot.waitUntil(lambda: w.chat_model.searching and bool(w.chat_model.visible_chat_ids()), timeout=3000)
    QApplication.processEvents()
    shots(w, "16-search-highlight")


def test_screenshot_chat_settings_overflow(make_window, engine, qtbot, shots):
    from app.gui.dialogs.settings_dialog import ChatSettingsDialog

    w = make_window(engine)
    send(qtbot, w, "Plan a long project with me")
    dlg = ChatSettingsDialog(w.store.get_conversation(w.current_id), w.settings, parent=w)
    dlg.overflow.setCurrentIndex(dlg.overflow.findData("rolling"))
    dlg.show()
    qtbot.waitExposed(dlg)
    assert dlg.values()[1]["overflow"] == "rolling"
    shots(dlg, "17-chat-settings-overflow")
    dlg.reject()


def test_screenshot_laptop_1366x768(make_window, engine, qtbot, shots):
    """The window maximized on a 1366×768 laptop (less the taskbar), and Settings over it."""
    from PySide6.QtWidgets import QDialogButtonBox

    from app.gui.dialogs.settings_dialog import SettingsDialog

    w = make_window(engine)
    w.resize(1366, 768 - 48)
    populate(qtbot, w, engine)
    assert w.size().height() == 768 - 48 and w.composer.isVisible()
    shots(w, "18-laptop-1366x768")
    dlg = SettingsDialog(w.settings, w.home, parent=w, server=w.api_server())
    dlg.show()
    qtbot.waitExposed(dlg)
    assert dlg.height() <= 768 - 48 - 32 and dlg.findChild(QDialogButtonBox).isVisible()
    shots(dlg, "19-settings-1366x768")
    dlg.reject()


def test_screenshot_no_model(make_window, engine, qtbot, shots):
    """No model could be loaded: the empty chat offers the ways to get one."""
    def missing(name, progress):
        raise FileNotFoundError(2, "No such file or directory", "models/SmolLM2-135M-Instruct/model.onnx")

    w = make_window(engine, wait_ready=False, model_preparer=missing)
    w.resize(1180, 780)
    qtbot.waitUntil(lambda: w.engine_error is not None and w.chats_loaded, timeout=5000)
    assert w.empty.import_btn.isVisible()
    shots(w, "20-no-model")
