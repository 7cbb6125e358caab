"""The window's two questions: confirming a destructive step, and agreeing to a model switch
(saying what it costs). Tests answer them by replacing `MainWindow.confirm` / `confirm_switch`."""
from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


class Questions:
    def __init__(self, parent: QWidget):
        self.parent = parent
        self.confirm_box: QMessageBox | None = None     # the last destructive step asked

    def ask_switch(self, title: str, text: str) -> bool:
        box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.Cancel, self.parent)
        switch = box.addButton("Switch", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(switch)
        box.exec()
        return box.clickedButton() is switch

    def ask_confirm(self, title: str, text: str) -> bool:
        """A destructive step, asked: the title's first word names its button (“Discard
        temporary chat?” → Discard); Cancel is the default."""
        box = QMessageBox(QMessageBox.Icon.Warning, title, text,
                          QMessageBox.StandardButton.Cancel, self.parent)
        self.confirm_box = box
        go = box.addButton(title.split(" ")[0] or "OK", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is go
