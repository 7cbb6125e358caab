"""“Connect to a server…”: an OpenAI-compatible endpoint (base URL, optional API key, model name)
for the model picker. Listing the server's models runs on a worker (`run_task`), never the UI."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget)

from ..remote_config import LOGS_NOTE

if TYPE_CHECKING:   # engine.remote (and its HTTP stack) loads when the dialog is first used
    from engine.remote.engine import RemoteEndpoint

FLAVOR_CHOICES = [("Detect from the server", "auto"), ("vLLM (sends a per-chat cache_salt)", "vllm"),
                  ("llama.cpp server (sends cache_prompt)", "llamacpp"),
                  ("Amber (amber-engine serve; sends a per-chat cache_salt)", "amber"),
                  ("Other OpenAI-compatible (standard fields only)", "openai")]


class RemoteDialog(QDialog):
    """Edits one endpoint; `endpoint()` is the result once accepted."""

    def __init__(self, run_task: Callable[..., Any], initial: "RemoteEndpoint | None" = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Connect to an OpenAI-compatible server")
        self.setMinimumWidth(520)
        self._run_task = run_task
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.url = QLineEdit()
        self.url.setObjectName("RemoteUrl")
        self.url.setPlaceholderText("http://127.0.0.1:8000/v1")
        self.key = QLineEdit()
        self.key.setObjectName("RemoteKey")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("optional")
        self.model = QComboBox()
        self.model.setObjectName("RemoteModel")
        self.model.setEditable(True)
        self.model.lineEdit().setPlaceholderText("the model name the server serves")
        # in a row layout, so its form label is not its buddy: named for screen readers here
        self.model.setAccessibleName("Model")
        self.model.lineEdit().setAccessibleName("Model")
        self.list_btn = QPushButton("List models")
        self.list_btn.setObjectName("RemoteListModels")
        self.list_btn.clicked.connect(self.list_models)
        row = QHBoxLayout()
        row.addWidget(self.model, 1)
        row.addWidget(self.list_btn)
        self.flavor = QComboBox()
        for label, value in FLAVOR_CHOICES:
            self.flavor.addItem(label, value)
        self.name = QLineEdit()
        self.name.setPlaceholderText("shown in the model picker (optional)")
        form.addRow("Server address", self.url)
        form.addRow("API key", self.key)
        form.addRow("Model", row)
        form.addRow("Server kind", self.flavor)
        form.addRow("Name", self.name)
        lay.addLayout(form)
        self.message = QLabel("")
        self.message.setObjectName("RemoteMessage")
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        note = QLabel(LOGS_NOTE + " The API key is kept in remotes.json in Amber's folder, readable "
                      "only by you. Temporary chats send nothing that asks the server to keep them.")
        note.setObjectName("ChatSubtitle")
        note.setWordWrap(True)
        lay.addWidget(note)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.connect_btn = self.buttons.addButton("Connect", QDialogButtonBox.ButtonRole.AcceptRole)
        self.forget_btn = self.buttons.addButton("Forget this server", QDialogButtonBox.ButtonRole.DestructiveRole)
        self.forget_btn.setObjectName("RemoteForget")
        self.forget_btn.hide()          # shown when the dialog edits a saved server
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        if initial is not None:
            self.url.setText(initial.base_url)
            self.key.setText(initial.api_key)
            self.model.setEditText(initial.model)
            self.flavor.setCurrentIndex(max(0, self.flavor.findData(initial.flavor)))
            self.name.setText(initial.name)

    def _read(self) -> "RemoteEndpoint":
        from engine.remote.engine import RemoteEndpoint  # noqa: PLC0415
        return RemoteEndpoint(base_url=self.url.text(), model=self.model.currentText(),
                              api_key=self.key.text(), flavor=self.flavor.currentData() or "auto",
                              name=self.name.text().strip())

    def endpoint(self) -> "RemoteEndpoint":
        return self._read()

    def _accept(self) -> None:
        from engine.remote.engine import RemoteError  # noqa: PLC0415
        try:
            ep = self._read()
        except RemoteError as exc:
            self.message.setText(str(exc))
            return
        if not ep.model:
            self.message.setText("Enter the model name (or list the server's models).")
            return
        self.accept()

    def list_models(self) -> None:
        from engine.remote.engine import RemoteError, list_models  # noqa: PLC0415
        try:
            ep = self._read()
        except RemoteError as exc:
            self.message.setText(str(exc))
            return
        self.list_btn.setEnabled(False)
        self.message.setText(f"Asking {ep.host} for its models…")

        def done(models: list[dict[str, Any]]) -> None:
            self.list_btn.setEnabled(True)
            current = self.model.currentText()
            self.model.clear()
            for m in models:
                self.model.addItem(m["id"])
            if current and self.model.findText(current) >= 0:
                self.model.setCurrentIndex(self.model.findText(current))
            elif not current and models:
                self.model.setCurrentIndex(0)
            else:
                self.model.setEditText(current)
            self.message.setText(f"{ep.host} serves {len(models)} model(s)." if models
                                 else f"{ep.host} lists no models.")

        def failed(exc: BaseException) -> None:
            self.list_btn.setEnabled(True)
            self.message.setText(str(exc) if isinstance(exc, RemoteError) else f"{type(exc).__name__}: {exc}")

        self._run_task(lambda: list_models(ep), done, failed)



# ---- the window's side (kept here so that main_window.py only calls in) -----------------------
def open_connect_dialog(window: Any) -> RemoteDialog:
    """Shows the dialog; once accepted, the endpoint is saved (worker) and becomes the model."""
    from ..remote_config import find_remote, remove_remote, save_remote  # noqa: PLC0415

    current = window.settings.model
    initial: list[Any] = []
    dlg = RemoteDialog(window.tasks.run_task, None, parent=window)
    dlg.setObjectName("RemoteDialog")

    def fill(saved: Any) -> None:
        if saved is not None and not dlg.url.text():
            initial.append(saved)
            dlg.url.setText(saved.endpoint.base_url)
            dlg.key.setText(saved.endpoint.api_key)
            dlg.model.setEditText(saved.endpoint.model)
            dlg.flavor.setCurrentIndex(max(0, dlg.flavor.findData(saved.endpoint.flavor)))
            dlg.name.setText(saved.endpoint.name)
            dlg.forget_btn.show()

    window.tasks.run_task(lambda: find_remote(window.home, current) if current else None, fill,
                          lambda exc: None)

    def accepted() -> None:
        ep = dlg.endpoint()
        rid = initial[0].id if initial and initial[0].endpoint.base_url == ep.base_url else None

        def saved(r: Any) -> None:
            window.settings.model = r.choice
            window.save_settings()
            window.refresh_models()
            window.stop()
            window.load_engine()

        def failed(exc: BaseException) -> None:
            window.status.set_message(f"Could not save the server: {exc}")

        window.tasks.run_task(lambda: save_remote(window.home, ep, rid), saved, failed)

    def forget() -> None:
        if not initial:
            return
        rid = initial[0].id

        def removed(_: Any) -> None:
            if window.settings.model == initial[0].choice:
                window.settings.model = ""          # back to the default local model
                window.save_settings()
                window.stop()
                window.load_engine()
            window.refresh_models()
            window.status.set_message("Server forgotten (its API key is deleted from remotes.json)")

        dlg.reject()
        window.tasks.run_task(lambda: remove_remote(window.home, rid), removed,
                              lambda exc: window.status.set_message(f"Could not forget the server: {exc}"))

    dlg.forget_btn.clicked.connect(forget)
    dlg.accepted.connect(accepted)
    dlg.open()
    window.remote_dialog = dlg
    return dlg
