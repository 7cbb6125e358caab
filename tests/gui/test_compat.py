"""The pinned Qt binding must not leak references to None/True/False.

PySide6 6.12.0 on CPython 3.11 lost a reference to `None` on every void method call and to
`True`/`False` on every `Signal.emit()`; the counts reached zero after some thousands of calls and
the interpreter aborted ("Fatal Python error: none_dealloc"). Amber pins a release without it.
"""
from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel


def test_void_calls_and_emits_keep_singleton_refcounts(qapp):
    class Obj(QObject):
        flag = Signal(bool)
        obj = Signal(object)

    label = QLabel()
    o = Obj()
    o.obj.connect(lambda _x: None)
    before = (sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False))
    for _ in range(20_000):
        label.setText("x")
        label.update()
        o.flag.emit(True)
        o.flag.emit(False)
        o.obj.emit(None)
    after = (sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False))
    # A leak would lose 20,000+ references; a few may move for unrelated reasons.
    assert all(abs(a - b) < 100 for a, b in zip(after, before, strict=True)), (before, after)
