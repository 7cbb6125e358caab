"""Work-arounds for the Qt binding that Amber is pinned to.

PySide6 6.12.0 on CPython 3.11 loses a reference to `None` on every call of a method that
returns nothing (`widget.update()`, `label.setText()`, `QApplication.processEvents()`, …) and to
`True`/`False` on `Signal.emit()` (measured with `sys.getrefcount`; see
tests/gui/test_compat.py). From CPython 3.12 on these singletons are immortal and the bug is
invisible; on 3.11 their counts fall to zero after some thousands of calls and the interpreter
aborts ("Fatal Python error: none_dealloc"). A streaming chat makes thousands of such calls a
minute, so Amber would crash within minutes.

`immortalize_singletons()` does what CPython 3.12 does: it gives `None`, `True` and `False` a
reference count so large that it can never reach zero. These objects are never freed anyway (their
deallocators only abort), so this changes nothing else.
"""
from __future__ import annotations

import ctypes
import sys

_BIG = 1 << 60


def immortalize_singletons() -> bool:
    """Make None/True/False effectively immortal on CPython < 3.12. True when applied."""
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return False
    for obj in (None, True, False):
        refcnt = ctypes.c_ssize_t.from_address(id(obj))  # ob_refcnt is PyObject's first field
        if refcnt.value < _BIG // 2:
            refcnt.value += _BIG
    return True
