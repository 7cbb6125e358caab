"""Process-wide helpers of the window's life: freezing the long-lived heap, warming up the
Markdown / Pygments renderers off the UI thread, the quit-time runner."""
from __future__ import annotations

import gc
import time
from typing import Any

from . import theme
from .models.markdown_render import render
from .tasks import TaskRunner


def freeze_heap() -> None:
    """Move every object alive now (modules, the chat list, the engine) out of the garbage
    collector's reach. A full collection otherwise walks them all: 50–85 ms with the GIL held,
    usually on a worker thread, and the UI thread stalls for as long. Called at a few points
    where what exists is long-lived; objects freed by reference counting are still freed."""
    gc.freeze()


def warm_up_rendering() -> None:
    """Import Markdown / Pygments lexers off the UI thread before the first reply needs them."""
    from pygments.lexers import get_lexer_by_name  # noqa: PLC0415

    sample = "# x\n\n- a\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    for lang in ("python", "javascript", "typescript", "bash", "json", "c", "cpp", "rust", "go",
                 "java", "html", "css", "sql", "yaml", "text"):
        try:
            get_lexer_by_name(lang)
        except Exception:  # noqa: BLE001
            pass
        sample += f"```{lang}\nx = 1\n```\n\n"
        time.sleep(0.01)  # a background nicety: leave the GIL to the UI thread now and then
    for th in (theme.LIGHT, theme.DARK):
        render(sample, th)


_SHUTDOWN_RUNNER: TaskRunner | None = None
_WARMED_UP = False


def claim_warm_up() -> bool:
    """True the first time only: the lexers are compiled once per process."""
    global _WARMED_UP
    first, _WARMED_UP = not _WARMED_UP, True
    return first


def shutdown_runner() -> TaskRunner:
    """Runs the quit-time waits (engine saves, store close); outlives any window."""
    global _SHUTDOWN_RUNNER
    if _SHUTDOWN_RUNNER is None:
        _SHUTDOWN_RUNNER = TaskRunner(max_threads=2)
    return _SHUTDOWN_RUNNER


def shiboken_valid(obj: Any) -> bool:
    import shiboken6  # noqa: PLC0415

    return shiboken6.isValid(obj)
