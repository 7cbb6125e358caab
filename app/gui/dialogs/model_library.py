"""The model library dialog: recommended models and Hub search, a repo's files by quantization with
size and a fits/tight/too-large verdict, then download (speed, time left, cancel; resumable),
conversion, and the model is in the picker. All Hub and disk work runs off the UI thread
(engine.hub through the TaskRunner); the dialog only shows what comes back.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QDialog, QHBoxLayout, QHeaderView, QInputDialog,
                               QLabel, QLineEdit, QListWidget, QListWidgetItem, QProgressBar, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from engine.base.oneline import one_line as shown   # names from the Hub: control characters escaped

from .. import accessibility as a11y
from ..tasks import ProgressRelay, TaskRunner

ROLE_REPO = Qt.ItemDataRole.UserRole
ROLE_FILE = Qt.ItemDataRole.UserRole + 1


def _duration(s: float | None) -> str:
    if s is None:
        return "…"
    s = int(s)
    return f"{s // 3600} h {s % 3600 // 60} min" if s >= 3600 else f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def progress_text(p: Any) -> tuple[float, str]:
    """(bar fraction 0..1, label) for an engine.hub Progress: download 0-80 %, conversion 80-100 %."""
    from engine.hub import human
    if p.stage == "download":
        return (0.8 * p.fraction, f"Downloading {shown(p.what)}: {human(p.done)} of {human(p.total)} · "
                                  f"{human(p.speed)}/s · {_duration(p.eta_s)} left")
    if p.stage == "verify":
        return (0.8, f"Checking {shown(p.what)} (SHA-256)…")
    if p.stage == "convert":
        return (0.8 + 0.2 * p.fraction, f"Converting to ONNX: {p.done}/{p.total} tensors")
    if p.stage == "check":
        return (0.95, "Checking that the model loads…")
    return (1.0, "Installing…")


class ModelLibraryDialog(QDialog):
    """Find and get models. `installed(Path)` is emitted when a model folder is in place."""

    installed = Signal(object)

    def __init__(self, parent: QWidget | None = None, tasks: TaskRunner | None = None,
                 ask_token: Callable[[str], str | None] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Get models")
        self.setObjectName("ModelLibrary")
        self.resize(900, 560)
        self.tasks = tasks or TaskRunner(max_threads=2, parent=self)
        self.ask_token = ask_token or self._ask_token
        self.cancel_event: threading.Event | None = None
        self.listing: Any = None
        self.plan: Any = None
        self.busy = False
        self.last_error = ""
        # Each search / repo / file pick bumps its counter; an answer for an older pick is dropped
        # (the worker pool may finish them out of order)
        self.seq = {"search": 0, "repo": 0, "plan": 0}

        self.query = QLineEdit()
        self.query.setPlaceholderText("Search Hugging Face (e.g. qwen2.5 gguf)")
        a11y.name(self.query, "Search models", "Searches the Hugging Face Hub")
        self.query.returnPressed.connect(self.search)
        self.onnx = QCheckBox("ONNX repos")
        self.search_btn = QPushButton("Search")
        self.search_btn.clicked.connect(self.search)
        self.recommended_btn = QPushButton("Recommended")
        self.recommended_btn.clicked.connect(self.show_recommended)
        top = QHBoxLayout()
        for w in (self.query, self.onnx, self.search_btn, self.recommended_btn):
            top.addWidget(w)

        self.repos = QListWidget()
        a11y.name(self.repos, "Repositories", "Recommended models or search results")
        self.repos.currentItemChanged.connect(lambda cur, _prev: self._repo_selected(cur))
        self.files = QTableWidget(0, 5)
        self.files.setHorizontalHeaderLabels(["Quantization", "Size", "Memory", "This machine", "File"])
        for col in range(4):
            self.files.horizontalHeader().setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.files.horizontalHeader().setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        self.files.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.files.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.files.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.files.verticalHeader().setVisible(False)
        a11y.name(self.files, "Files", "The repo's files by quantization")
        self.files.itemSelectionChanged.connect(self._file_selected)
        middle = QHBoxLayout()
        middle.addWidget(self.repos, 2)
        middle.addWidget(self.files, 3)

        self.info = QLabel("Pick a model.")
        self.info.setTextFormat(Qt.TextFormat.PlainText)    # it quotes names from the Hub: never markup
        self.info.setWordWrap(True)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setVisible(False)
        a11y.name(self.bar, "Download progress")
        self.status = QLabel("")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.download_btn = QPushButton("Download")
        self.download_btn.setEnabled(False)
        self.download_btn.clicked.connect(self.download)
        self.cancel_btn = QPushButton("Cancel download")
        self.cancel_btn.setVisible(False)
        self.cancel_btn.clicked.connect(self.cancel)
        self.close_btn = QPushButton("Close")
        self.close_btn.clicked.connect(self.close)
        bottom = QHBoxLayout()
        bottom.addWidget(self.status, 1)
        for w in (self.download_btn, self.cancel_btn, self.close_btn):
            bottom.addWidget(w)

        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addLayout(middle, 1)
        lay.addWidget(self.info)
        lay.addWidget(self.bar)
        lay.addLayout(bottom)

        self.relay = ProgressRelay(self)
        self.relay.progressed.connect(self._on_progress)
        self.show_recommended()

    # ---- lists -------------------------------------------------------------------------------
    def show_recommended(self) -> None:
        from engine.hub import recommended, supported_architectures
        supported = supported_architectures()
        self.repos.clear()
        for r in recommended():
            ok = r.is_onnx or r.architecture in supported
            text = f"★ {r.title} — {r.params}" + ("" if ok else f"  (needs {r.architecture} support)")
            item = QListWidgetItem(text)
            item.setData(ROLE_REPO, r.repo)
            item.setData(ROLE_FILE, r.file or r.quant)
            item.setToolTip(f"{r.repo}\n{r.note}".strip())
            self.repos.addItem(item)
        self.status.setText("Recommended chat models")

    def search(self) -> None:
        from engine.hub import search, supported_architectures
        supported = supported_architectures()
        text, kind = self.query.text().strip(), "onnx" if self.onnx.isChecked() else "gguf"
        self.status.setText(f"Searching for “{shown(text)}”…")
        self.search_btn.setEnabled(False)
        ticket = self._next("search")

        def done(hits: list[Any]) -> None:
            self.search_btn.setEnabled(True)
            if ticket != self.seq["search"]:
                return
            self.repos.clear()
            for h in hits:
                extra = (f" · {shown(h.architecture)}" if h.architecture else "") + (" · gated" if h.gated else "")
                if h.kind == "gguf" and h.architecture and h.architecture not in supported:
                    extra += " · not supported yet"
                item = QListWidgetItem(f"{shown(h.repo)}  ({h.downloads:,} downloads{extra})")
                item.setData(ROLE_REPO, h.repo)
                item.setData(ROLE_FILE, "")
                self.repos.addItem(item)
            self.status.setText(f"{len(hits)} repos" if hits else "No matching repos")

        self.tasks.run_task(lambda: search(text, kind=kind), done,
                            self._failed(lambda: self.search_btn.setEnabled(True)))

    def _repo_selected(self, item: QListWidgetItem | None, retry: bool = True) -> None:
        if item is None:
            return
        from engine.hub import repo_files
        repo, want = item.data(ROLE_REPO), item.data(ROLE_FILE) or ""
        self.files.setRowCount(0)
        self.download_btn.setEnabled(False)
        self.listing = None
        self.info.setText(f"Reading {shown(repo)}…")
        ticket = self._next("repo")
        self._next("plan")        # a plan for the previous repo's file is stale too

        def done(listing_and_fits: Any) -> None:
            if ticket == self.seq["repo"]:
                self._fill_files(listing_and_fits, want)

        def failed(exc: BaseException) -> None:
            if ticket != self.seq["repo"]:
                return
            if self._maybe_token(exc, lambda: self._repo_selected(item, retry=False)) and retry:
                return
            self._failed()(exc)

        self.tasks.run_task(lambda: _with_fits(repo_files(repo)), done, failed)

    def _fill_files(self, listing_and_fits: Any, want: str) -> None:
        from engine.hub import human
        listing, fits = listing_and_fits
        self.listing = listing
        self.files.setRowCount(len(listing.variants))
        pick = 0
        for row, (v, fit) in enumerate(zip(listing.variants, fits, strict=True)):   # one fit per variant
            cells = [shown(v.quant), human(v.size), f"~{human(fit.memory_bytes)}", fit.verdict,
                     shown(v.name) + (f" (+{len(v.files) - 1} parts)" if v.split else "")]
            for col, text in enumerate(cells):
                self.files.setItem(row, col, QTableWidgetItem(text))
            if want and (want in (v.name, v.quant)):
                pick = row
        arch = f" · {shown(listing.architecture)}" if listing.architecture else ""
        repo = shown(listing.repo)
        self.info.setText(f"{repo}{arch} · {len(listing.variants)} files" if listing.variants
                          else f"{repo}: no GGUF or ONNX model files")
        if listing.variants:
            self.files.selectRow(pick)

    def _file_selected(self) -> None:
        rows = {i.row() for i in self.files.selectedItems()}
        if not rows or self.listing is None:
            self.download_btn.setEnabled(False)
            return
        from engine.hub import human, plan
        v = self.listing.variants[rows.pop()]
        repo = self.listing.repo
        self.plan = None
        self.download_btn.setEnabled(False)
        ticket = self._next("plan")

        def done(p: Any) -> None:
            if ticket != self.seq["plan"]:
                return
            self.plan = p
            resumes = p.variant.size - p.fit.download_bytes
            self.info.setText(f"{shown(p.variant.name)} → “{shown(p.name)}”: {p.fit.summary()}"
                              + (f" — resumes a partial download ({human(resumes)} already here)"
                                 if resumes > 0 else "")
                              + ("" if p.fit.disk_ok else " — not enough disk space"))
            self.download_btn.setEnabled(not self.busy and p.fit.disk_ok)

        def failed(exc: BaseException) -> None:
            if ticket != self.seq["plan"]:
                return
            self.plan = None
            self.download_btn.setEnabled(False)
            self.info.setText(shown(str(exc)))

        self.tasks.run_task(lambda: plan(repo, v.name if v.kind == "gguf" else v.files[0].path), done, failed)

    def _next(self, what: str) -> int:
        self.seq[what] += 1
        return self.seq[what]

    # ---- download ----------------------------------------------------------------------------
    def download(self) -> None:
        if self.plan is None or self.busy:
            return
        from engine.hub import install
        p = self.plan
        cancel = self.cancel_event = threading.Event()
        self._set_busy(True)
        self.status.setText(f"Getting {shown(p.variant.name)}…")

        def feed(pr: Any) -> None:           # worker thread
            self.relay(*progress_text(pr))

        def done(dest: Path) -> None:
            self._set_busy(False)
            self.bar.setValue(1000)
            self.status.setText(f"“{shown(dest.name)}” is ready: pick it in the model menu")
            self.installed.emit(dest)

        def failed(exc: BaseException) -> None:
            self._set_busy(False)
            if self._maybe_token(exc, self.download):
                return
            self._failed()(exc)

        self.tasks.run_task(lambda: install(p, progress=feed, cancel=cancel), done, failed)

    def cancel(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()
            self.status.setText("Cancelling… (the partial download is kept: Download resumes it)")

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.bar.setVisible(busy or self.bar.value() > 0)
        if busy:
            self.bar.setValue(0)
        self.cancel_btn.setVisible(busy)
        self.download_btn.setEnabled(not busy and self.plan is not None)

    def _on_progress(self, fraction: float, message: str) -> None:
        self.bar.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        self.status.setText(message)

    # ---- errors and tokens -------------------------------------------------------------------
    def _failed(self, also: Callable[[], None] | None = None) -> Callable[[BaseException], None]:
        def show(exc: BaseException) -> None:
            if also:
                also()
            self.last_error = shown(str(exc))
            self.status.setText(self.last_error)    # one place: the status line under the lists
            self.info.setText("")
        return show

    def _maybe_token(self, exc: BaseException, retry: Callable[[], None]) -> bool:
        """A gated/private repo: ask for a token, store it (0600, never logged), then retry once."""
        from engine.hub import AuthRequired, store_token
        if not isinstance(exc, AuthRequired):
            return False
        token = self.ask_token(shown(str(exc)))
        if not token:
            return False
        self.status.setText("Token saved; trying again…")
        self.tasks.run_task(lambda: store_token(token), lambda _: retry(), self._failed())
        return True

    def _ask_token(self, why: str) -> str | None:
        text, ok = QInputDialog.getText(self, "Hugging Face token",
                                        f"{why}\n\nPaste a Hugging Face access token (it is stored in "
                                        "Amber's folder, readable only by you):", QLineEdit.EchoMode.Password)
        return text.strip() if ok and text.strip() else None

    def closeEvent(self, event: Any) -> None:   # noqa: N802 - Qt
        self.cancel()        # a download in flight stops; its part is kept for next time
        super().closeEvent(event)


def _with_fits(listing: Any) -> tuple[Any, list[Any]]:
    """The listing plus each variant's fit (worker thread: reads free disk space and RAM)."""
    from engine.base import paths
    from engine.hub import estimate
    return listing, [estimate(v.size, v.quant, paths.models_dir()) for v in listing.variants]


def open_model_library(window: Any) -> ModelLibraryDialog:
    """From the main window's menu: show the dialog; a new model refreshes the picker."""
    dlg = ModelLibraryDialog(window, tasks=getattr(window, "tasks", None))
    dlg.installed.connect(lambda dest: window.refresh_models())
    if hasattr(window, "status"):
        dlg.installed.connect(lambda dest: window.status.set_message(f"Downloaded {Path(dest).name}"))
    window.model_library = dlg
    dlg.show()
    return dlg
