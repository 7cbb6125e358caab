"""Settings: defaults for every chat, and one chat's overrides."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFormLayout, QFrame, QGroupBox, QHBoxLayout, QLabel, QPlainTextEdit,
                               QPushButton, QScrollArea, QSpinBox, QTabWidget, QVBoxLayout, QWidget)

from ..models.chat_figures import OVERFLOW_CHOICES, OVERFLOW_VALUES
from ..settings import Sampling, Settings

THEME_CHOICES = [("Follow the system", "system"), ("Light", "light"), ("Dark", "dark")]
PROVIDER_CHOICES = [("Automatic (best available)", "auto"), ("CPU", "cpu"),
                    ("GPU (CUDA / CoreML / DirectML)", "gpu")]


class SamplingForm(QWidget):
    """The sampling numbers; with `offer_model_defaults`, a switch that leaves them to each model's
    own generation_config.json (the numbers below are then greyed out and not sent)."""

    def __init__(self, s: Sampling, parent: QWidget | None = None, offer_model_defaults: bool = False):
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.model_defaults: QCheckBox | None = None
        if offer_model_defaults:
            self.model_defaults = QCheckBox("Use each model's own sampling settings")
            self.model_defaults.setToolTip("From the model's generation_config.json; uncheck to set your own")
            self.model_defaults.setChecked(s.model_defaults)
            form.addRow(self.model_defaults)
        self.temperature = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=2.0, singleStep=0.05)
        self.temperature.setValue(s.temperature)
        self.top_p = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=1.0, singleStep=0.05)
        self.top_p.setValue(s.top_p)
        self.top_k = QSpinBox(minimum=0, maximum=1000)
        self.top_k.setValue(s.top_k)
        self.repetition_penalty = QDoubleSpinBox(decimals=2, minimum=0.5, maximum=2.0, singleStep=0.05)
        self.repetition_penalty.setValue(s.repetition_penalty)
        self.max_new_tokens = QSpinBox(minimum=1, maximum=32768, singleStep=64)
        self.max_new_tokens.setValue(s.max_new_tokens)
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(-1 if s.seed is None else s.seed)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top P", self.top_p)
        form.addRow("Top K", self.top_k)
        form.addRow("Repetition penalty", self.repetition_penalty)
        form.addRow("Max new tokens", self.max_new_tokens)
        form.addRow("Seed", self.seed)
        self._model_fields = (self.temperature, self.top_p, self.top_k, self.repetition_penalty)
        if self.model_defaults is not None:
            self.model_defaults.toggled.connect(self._follow_model)
            self._follow_model(self.model_defaults.isChecked())

    def _follow_model(self, on: bool) -> None:
        for box in self._model_fields:
            box.setEnabled(not on)

    def value(self) -> Sampling:
        return Sampling(temperature=self.temperature.value(), top_p=self.top_p.value(),
                        top_k=self.top_k.value(), repetition_penalty=self.repetition_penalty.value(),
                        max_new_tokens=self.max_new_tokens.value(),
                        seed=None if self.seed.value() < 0 else self.seed.value(),
                        model_defaults=self.model_defaults is not None and self.model_defaults.isChecked())


class SettingsDialog(QDialog):
    """The settings in tabs (chats, engine, API server, general), each page scrolling on its own,
    so the dialog and its OK / Cancel fit a 1366×768 screen."""

    clearCacheRequested = Signal()

    def __init__(self, settings: Settings, home: Path, parent: QWidget | None = None,
                 server: Any = None, tools: Any = None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(520)
        self._settings = settings.copy()
        self.home = home
        lay = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("SettingsTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.setAccessibleName("Settings pages")
        lay.addWidget(self.tabs, 1)

        chat = QGroupBox("New chats")
        cf = QVBoxLayout(chat)
        cf.addWidget(QLabel("System prompt"))
        self.system_prompt = QPlainTextEdit(settings.system_prompt)
        self.system_prompt.setFixedHeight(80)
        cf.addWidget(self.system_prompt)
        self.sampling = SamplingForm(settings.sampling, offer_model_defaults=True)
        cf.addWidget(self.sampling)
        cf.addWidget(QLabel("When a chat outgrows the model's context window"))
        self.overflow = overflow_combo(settings.overflow)
        cf.addWidget(self.overflow)
        _page(self.tabs, "Chats", chat)

        look = QGroupBox("Appearance")
        lf = QFormLayout(look)
        self.theme = QComboBox()
        self.theme.setObjectName("ThemeChoice")
        for label, value in THEME_CHOICES:
            self.theme.addItem(label, value)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.theme)))
        lf.addRow("Theme", self.theme)

        eng = QGroupBox("Engine and cache")
        ef = QFormLayout(eng)
        self.provider = QComboBox()
        for label, value in PROVIDER_CHOICES:
            self.provider.addItem(label, value)
        self.provider.setCurrentIndex(max(0, self.provider.findData(settings.provider)))
        ef.addRow("Execution provider", self.provider)
        self.memory = QSpinBox(minimum=64, maximum=262144, singleStep=256, suffix=" MB")
        self.memory.setValue(settings.memory_budget_mb)
        ef.addRow("Memory cache budget", self.memory)
        self.disk = QSpinBox(minimum=0, maximum=10_000_000, singleStep=1024, suffix=" MB")
        self.disk.setValue(settings.disk_budget_mb)
        ef.addRow("Disk cache budget", self.disk)
        self.max_age = QSpinBox(minimum=1, maximum=3650, suffix=" days")
        self.max_age.setValue(settings.cache_max_age_days)
        ef.addRow("Keep cached chats for", self.max_age)
        self.compact_kv = QCheckBox("Store pinned chats' KV in float16")
        self.compact_kv.setToolTip("Half the disk space for pinned chats; replies after a restart can "
                                   "differ very slightly. Changing it re-computes each pinned chat once.")
        self.compact_kv.setChecked(settings.kv_store == "float16")
        ef.addRow("Compact saved KV", self.compact_kv)
        self.clear_btn = QPushButton("Clear cache")
        self.clear_btn.setToolTip("Drop the cached KV of every chat except pinned ones")
        self.clear_btn.clicked.connect(self._clear)
        self.cleared = QLabel("")
        row = QHBoxLayout()
        row.addWidget(self.clear_btn)
        row.addWidget(self.cleared, 1)
        ef.addRow("", _wrap(row))
        _page(self.tabs, "Engine", eng)

        self.server_panel = None
        if server is not None:   # an app.gui.server_control.ServerControl: the API server switch
            from ..server_control import ServerPanel  # noqa: PLC0415
            self.server_panel = ServerPanel(server)
            _page(self.tabs, "API server", self.server_panel)

        self.tools_page = None
        if tools is not None:    # an app.gui.controllers.tools.ToolsController: the MCP servers
            from .mcp_page import McpServersPage  # noqa: PLC0415
            self.tools_page = McpServersPage(tools, settings.mcp_tools)
            servers = QGroupBox("MCP servers")
            QVBoxLayout(servers).addWidget(self.tools_page)
            _page(self.tabs, "Tools", servers)

        data = QGroupBox("Data")
        df = QHBoxLayout(data)
        self.folder_label = QLabel(str(home))
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        df.addWidget(self.folder_label, 1)
        open_btn = QPushButton("Open folder")
        open_btn.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(home))))
        df.addWidget(open_btn)
        _page(self.tabs, "General", look, data)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self._fit_to_screen()

    def _fit_to_screen(self) -> None:
        """Tall enough to show the longest page whole where the screen allows it."""
        pages = [self.tabs.widget(i) for i in range(self.tabs.count())]
        shown = self.tabs.currentWidget().sizeHint().height()
        needed = max(inner.sizeHint().height() for p in pages
                     if isinstance(p, QScrollArea) and (inner := p.widget()) is not None)
        screen = self.screen().availableGeometry()
        height = min(self.sizeHint().height() + max(0, needed - shown) + 8, int(screen.height() * 0.9))
        self.resize(max(self.sizeHint().width(), 560), max(height, self.minimumSizeHint().height()))

    def _clear(self) -> None:
        self.clearCacheRequested.emit()
        self.cleared.setText("Cleared (pinned chats keep theirs)")

    def result_settings(self) -> Settings:
        s = self._settings
        s.system_prompt = self.system_prompt.toPlainText()
        s.sampling = self.sampling.value()
        s.provider = self.provider.currentData()
        s.memory_budget_mb = self.memory.value()
        s.disk_budget_mb = self.disk.value()
        s.cache_max_age_days = self.max_age.value()
        s.kv_store = "float16" if self.compact_kv.isChecked() else "model"
        s.overflow = self.overflow.currentData() or s.overflow
        s.theme = self.theme.currentData() or "system"
        if self.tools_page is not None:
            s.mcp_tools = self.tools_page.offer.isChecked()
        return s


class ChatSettingsDialog(QDialog):
    """One chat's overrides: its system prompt and sampling (or the defaults)."""

    def __init__(self, detail: Any, settings: Settings, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Chat settings — {detail.title}")
        self.setMinimumWidth(460)
        overrides = dict(getattr(detail, "settings", None) or {})
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("System prompt for this chat (empty: the default)"))
        self.system_prompt = QPlainTextEdit(getattr(detail, "system_prompt", "") or "")
        self.system_prompt.setAccessibleName("System prompt for this chat")
        self.system_prompt.setPlaceholderText(settings.system_prompt)
        self.system_prompt.setFixedHeight(80)
        lay.addWidget(self.system_prompt)
        self.use_own = QCheckBox("Use its own sampling settings")
        own = overrides.get("sampling") or {}
        self.use_own.setChecked(bool(own))
        lay.addWidget(self.use_own)
        base = settings.sampling
        merged = Sampling(**{**base.__dict__, **{k: v for k, v in own.items() if k in base.__dict__}})
        self.sampling = SamplingForm(merged)
        self.sampling.setEnabled(bool(own))
        self.use_own.toggled.connect(self.sampling.setEnabled)
        lay.addWidget(self.sampling)
        default_label = next((lab for lab, v in OVERFLOW_CHOICES if v == settings.overflow), "")
        lay.addWidget(QLabel("When this chat outgrows the model's context window"))
        self.overflow = overflow_combo(overrides.get("overflow") or "",
                                       default=f"The default: {default_label.split(' (')[0]}")
        lay.addWidget(self.overflow)
        self._overrides = overrides
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def values(self) -> tuple[str, dict]:
        overrides = dict(self._overrides)
        if self.use_own.isChecked():
            overrides["sampling"] = self.sampling.value().__dict__
        else:
            overrides.pop("sampling", None)
        if self.overflow.currentData():
            overrides["overflow"] = self.overflow.currentData()
        else:
            overrides.pop("overflow", None)
        return self.system_prompt.toPlainText(), overrides


def overflow_combo(current: str, default: str | None = None) -> QComboBox:
    """The overflow policies (and, for one chat, “the default”), `current` selected."""
    box = QComboBox()
    box.setObjectName("OverflowChoice")
    box.setAccessibleName("When a chat outgrows the context window")
    if default is not None:
        box.addItem(default, "")
    for label, value in OVERFLOW_CHOICES:
        box.addItem(label, value)
    box.setCurrentIndex(max(0, box.findData(current if current in OVERFLOW_VALUES else
                                            ("" if default is not None else current))))
    return box


def _page(tabs: QTabWidget, title: str, *groups: QWidget) -> None:
    """A tab holding `groups`, top-aligned, that scrolls when the screen is shorter than they are."""
    inner = QWidget()
    col = QVBoxLayout(inner)
    for g in groups:
        col.addWidget(g)
    col.addStretch(1)
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setWidget(inner)
    area.setAccessibleName(f"{title} settings")   # the page scrolls: a screen reader names it
    tabs.addTab(area, title)


def _wrap(layout: Any) -> QWidget:
    w = QWidget()
    layout.setContentsMargins(0, 0, 0, 0)
    w.setLayout(layout)
    return w
