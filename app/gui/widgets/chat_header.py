"""The bar above the chat: its title (and whether it is pinned / temporary), the model picker,
the import menu, this chat's settings and the settings."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFrame, QHBoxLayout, QLabel, QMenu, QToolButton, QVBoxLayout

from .. import accessibility as a11y
from .. import theme
from .elided import ElidedLabel

PICKER_ROWS = 12   # the model picker's popup shows this many models at most (then it scrolls)


class ChatHeader(QFrame):
    modelPicked = Signal(int)           # index in the model picker
    getModelsRequested = Signal()       # the model library (Hugging Face)
    importGgufRequested = Signal()
    importFolderRequested = Signal()
    connectRemoteRequested = Signal()
    chatSettingsRequested = Signal()
    settingsRequested = Signal()
    pinClicked = Signal()               # pin or unpin the chat on screen
    temporaryToggled = Signal(bool)     # a new chat: temporary or not

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("ChatHeader")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        hl = QHBoxLayout(self)
        hl.setContentsMargins(18, 10, 12, 10)
        titles = QVBoxLayout()
        titles.setSpacing(0)
        self.title_label = ElidedLabel("New chat")
        self.title_label.setObjectName("ChatTitle")
        self.subtitle_label = QLabel("")
        self.subtitle_label.setObjectName("ChatSubtitle")
        titles.addWidget(self.title_label)
        titles.addWidget(self.subtitle_label)
        hl.addLayout(titles, 1)
        # the chat's own state, as buttons that show it: pinned, temporary
        self.pin_btn = QToolButton()
        self.pin_btn.setObjectName("HeaderPin")
        self.pin_btn.setCheckable(True)
        self.pin_btn.clicked.connect(lambda: self.pinClicked.emit())
        hl.addWidget(self.pin_btn)
        self.temp_btn = QToolButton()
        self.temp_btn.setObjectName("HeaderTemporary")
        self.temp_btn.setCheckable(True)
        self.temp_btn.clicked.connect(lambda on: self.temporaryToggled.emit(bool(on)))
        hl.addWidget(self.temp_btn)
        self.model_picker = QComboBox()
        self.model_picker.setObjectName("ModelPicker")
        self.model_picker.setToolTip("Model")
        a11y.name(self.model_picker, "Model", "The model that writes the replies")
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.model_picker.setMaxVisibleItems(PICKER_ROWS)
        self.model_picker.activated.connect(self.modelPicked)
        hl.addWidget(self.model_picker)
        self.import_btn = QToolButton()
        self.import_btn.setToolTip("Import a model, or connect to a server")
        a11y.name(self.import_btn, "Import a model",
                  "A GGUF file, an ONNX model folder, or an OpenAI-compatible server")
        self.import_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.import_btn)
        self.act_get_models = menu.addAction("Get models…", self.getModelsRequested.emit)
        self.act_import_gguf = menu.addAction("Import GGUF file…", self.importGgufRequested.emit)
        self.act_import_folder = menu.addAction("Import ONNX model folder…",
                                                self.importFolderRequested.emit)
        self.act_connect_remote = menu.addAction("Connect to an OpenAI-compatible server…",
                                                 self.connectRemoteRequested.emit)
        self.import_btn.setMenu(menu)
        hl.addWidget(self.import_btn)
        self.chat_settings_btn = QToolButton()
        self.chat_settings_btn.setToolTip("This chat's settings (system prompt, sampling)")
        a11y.name(self.chat_settings_btn, "Chat settings", "This chat's system prompt and sampling")
        self.chat_settings_btn.clicked.connect(self.chatSettingsRequested)
        hl.addWidget(self.chat_settings_btn)
        self.settings_btn = QToolButton()
        self.settings_btn.setToolTip("Settings (Ctrl+,)")
        a11y.name(self.settings_btn, "Settings")
        self.settings_btn.clicked.connect(self.settingsRequested)
        hl.addWidget(self.settings_btn)
        self.update_icons()
        self.show_state(pinned=False, temporary=False, can_pin=False, can_switch_temporary=True)
        theme.changed_signal().connect(self.update_icons)

    def update_icons(self, *_: Any) -> None:
        t = theme.current()
        self.import_btn.setIcon(theme.icon("import", t.text, 18))
        self.settings_btn.setIcon(theme.icon("settings", t.text, 18))
        self.chat_settings_btn.setIcon(theme.icon("sliders", t.text, 18))
        self.act_import_gguf.setIcon(theme.icon("import", t.text, 16))
        self.act_import_folder.setIcon(theme.icon("folder", t.text, 16))
        self.pin_btn.setIcon(theme.icon("pin", t.accent if self.pin_btn.isChecked() else t.text, 18))
        self.temp_btn.setIcon(theme.icon("temporary", t.accent if self.temp_btn.isChecked() else t.text, 18))

    def show_state(self, *, pinned: bool, temporary: bool, can_pin: bool, can_switch_temporary: bool) -> None:
        """The pin and temporary buttons: checked as the chat is, enabled where it can change
        (a temporary chat is never pinned; only a new, empty chat can become temporary)."""
        self.pin_btn.setChecked(pinned)
        self.pin_btn.setEnabled(can_pin)
        if temporary:
            pin_tip = "Temporary chats cannot be pinned"
        elif pinned:
            pin_tip = "Pinned: kept on disk, resumes at once after a restart. Click to unpin (Ctrl+P)"
        else:
            pin_tip = "Pin this chat: keep it on disk to resume at once after a restart (Ctrl+P)"
        self.pin_btn.setToolTip(pin_tip if can_pin or temporary else "Send a message first, then pin the chat")
        a11y.name(self.pin_btn, "Unpin chat" if pinned else "Pin chat")
        self.temp_btn.setChecked(temporary)
        self.temp_btn.setEnabled(can_switch_temporary)
        if can_switch_temporary:
            temp_tip = ("Temporary: never saved, discarded when closed. Click for a regular chat" if temporary
                        else "Make this new chat temporary: never saved, discarded when closed")
        else:
            temp_tip = ("Temporary chat: never saved, discarded when closed" if temporary
                        else "A saved chat (only a new chat can be made temporary)")
        self.temp_btn.setToolTip(temp_tip)
        a11y.name(self.temp_btn, "Temporary chat")
        self.update_icons()

    def show_chat(self, title: str, subtitle: str, *, settings_enabled: bool) -> None:
        self.title_label.setText(title)
        self.subtitle_label.setText(subtitle)
        self.subtitle_label.setVisible(bool(subtitle))
        self.chat_settings_btn.setEnabled(settings_enabled)

    def show_models(self, models: list[tuple[str, str, str]], current: str) -> None:
        """The picker's entries — (label, `Settings.model` value, tooltip) — with `current`
        selected; choosing one is `modelPicked`, filling it is not."""
        picker, icon = self.model_picker, theme.icon("model", theme.current().text, 16)
        picker.blockSignals(True)
        picker.clear()
        for label, value, tip in models:
            picker.addItem(icon, label, value)
            if tip:
                picker.setItemData(picker.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        picker.setCurrentIndex(max(0, picker.findData(current)))
        picker.blockSignals(False)
        self._size_popup()

    def _size_popup(self) -> None:
        """The popup lists every model (up to PICKER_ROWS, then it scrolls): its list is never
        shorter than that, whatever squeezed the popup before (a screen edge, an earlier list)."""
        view, picker = self.model_picker.view(), self.model_picker
        rows = min(picker.count(), PICKER_ROWS)
        row = max((view.sizeHintForRow(i) for i in range(rows)), default=0)
        view.setMinimumHeight(rows * row + 2 * view.frameWidth() if rows else 0)
