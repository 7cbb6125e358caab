"""Status bar: provider, tokens/s, context used of the window, and how the last reply started."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QStatusBar,
                               QToolButton, QWidget)

from ..models.turn_figures import count
from ..models.turn_figures import short_figures  # noqa: F401 - the bubbles use it from here too

PROVIDER_NAMES = {
    "CPUExecutionProvider": "CPU", "CUDAExecutionProvider": "CUDA",
    "TensorrtExecutionProvider": "TensorRT", "CoreMLExecutionProvider": "CoreML",
    "DmlExecutionProvider": "DirectML", "ROCMExecutionProvider": "ROCm",
    "cpu": "CPU", "cuda": "CUDA", "coreml": "CoreML", "dml": "DirectML", "directml": "DirectML",
}


def provider_label(provider: str) -> str:
    return PROVIDER_NAMES.get(provider, PROVIDER_NAMES.get(provider.lower(), provider or "—"))


INSTALL_CUDA = 'pip install "amber-chat[cuda]"'    # the `cuda` extra (engine.base.cuda_libs.INSTALL)
DRIVER = "the NVIDIA driver (version 580 or newer)"


def gpu_advice(reason: str, gpu: str = "driver") -> str:
    """What to do about a GPU that is here but could not be used, from what the machine has (`gpu`:
    "driver" or "no-driver", engine.base.cuda_probe.gpu_presence) and why CUDA failed."""
    libraries = (f"the CUDA 13 and cuDNN 9 libraries ({INSTALL_CUDA} in Amber's Python environment, or "
                 "make run GPU=1 in its checkout; an installed Amber: its GPU download)")
    if gpu == "no-driver":
        return f"Install {DRIVER} and {libraries}, then restart Amber."
    lower = reason.lower()
    if "driver" in lower or "insufficient" in lower:
        return f"Install or update {DRIVER}, then restart Amber."
    if any(k in lower for k in (".so", ".dll", "cannot open", "not found", "no such file")):
        return f"Install {libraries}, then restart Amber."
    return f"Check that {DRIVER} and {libraries} are installed, then restart Amber."


def provider_status(provider: str, fallback: str | None, gpu: str) -> tuple[str, str]:
    """(label, tooltip) for the provider running and why a GPU that was asked for is not. `gpu` is
    what the machine has ("none", "no-driver", "driver"): without an NVIDIA GPU a CUDA failure is
    no news, and the label is just "CPU"."""
    if not provider:
        return "", ""
    label = provider_label(provider)
    if not fallback:
        return label, f"Running on {label} ({provider})"
    if gpu == "none":
        return label, f"Running on {label}: no NVIDIA GPU on this computer"
    why = "its driver is not installed" if gpu == "no-driver" else "Amber could not use it"
    return (f"{label} — GPU not used",
            f"An NVIDIA GPU is here, but {why}, so Amber runs on the {label}.\n"
            f"Why: {fallback}\n{gpu_advice(fallback, gpu)}")


def gpu_alarm(provider: str, fallback: str | None, gpu: str) -> bool:
    """The status bar's warning colour: a GPU is here and the model runs without it."""
    return bool(provider and fallback and gpu != "none")


def _ms(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def how_started(f: dict[str, Any] | None) -> str:
    """“resumed 2,048 tokens from disk in 31 ms” or “prefilled 2,048 tokens in 4.2 s”."""
    if not f:
        return ""
    reused = int(f.get("reused_tokens") or 0)
    prefilled = int(f.get("prefilled_tokens") or 0)
    resume = f.get("resume") or "none"
    parts = []
    if reused and resume == "disk":
        parts.append(f"resumed {count(reused)} from disk in {_ms(float(f.get('resume_ms') or 0))}")
    elif reused:
        parts.append(f"reused {count(reused)} from memory")
    if prefilled:
        parts.append(f"prefilled {count(prefilled)} in {_ms(float(f.get('prefill_ms') or 0))}")
    text = ", ".join(parts)
    if f.get("fallback_reason"):
        text += f" (saved cache not used: {f['fallback_reason']})"
    return text


def api_text(url: str) -> str:
    """“API on 127.0.0.1:8080” for the server's address (`http://127.0.0.1:8080/v1`)."""
    host = url.split("://", 1)[-1].split("/", 1)[0]
    return f"API on {host}"


class StatusBar(QStatusBar):
    apiClicked = Signal()        # the API server's indicator: its settings

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.message = QLabel("")
        self.message.setObjectName("StatusMessage")
        # the transient message gives way to the figures (never squeezes them)
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.addWidget(self.message, 1)
        self.kv = QLabel("")            # the KV state of the chat on screen (and only that chat)
        self.kv.setObjectName("StatusKv")
        self.addPermanentWidget(self.kv)
        self.started = QLabel("")
        self.started.setObjectName("StatusStarted")
        self.addPermanentWidget(self.started)
        self.speed = QLabel("")
        self.speed.setObjectName("StatusSpeed")
        self.addPermanentWidget(self.speed)
        ctx = QWidget()
        lay = QHBoxLayout(ctx)
        lay.setContentsMargins(4, 0, 4, 0)
        lay.setSpacing(6)
        self.context = QLabel("")
        self.context.setObjectName("StatusContext")
        self.context_bar = QProgressBar()
        self.context_bar.setObjectName("ContextBar")
        self.context_bar.setAccessibleName("Context window used")
        self.context_bar.setTextVisible(False)
        self.context_bar.setFixedWidth(80)
        self.context_bar.setFixedHeight(6)
        lay.addWidget(self.context)
        lay.addWidget(self.context_bar, 0, Qt.AlignmentFlag.AlignVCenter)
        self.addPermanentWidget(ctx)
        self.provider = QLabel("")
        self.provider.setObjectName("StatusProvider")
        self.addPermanentWidget(self.provider)
        self.api = QToolButton()       # shown while the local API server runs
        self.api.setObjectName("StatusApi")
        self.api.setAutoRaise(True)
        self.api.setCursor(Qt.CursorShape.PointingHandCursor)
        self.api.setAccessibleName("Local API server")
        self.api.clicked.connect(self.apiClicked)
        self.api.hide()
        self.addPermanentWidget(self.api)
        self.set_context(0, 0)

    def set_provider(self, provider: str, fallback: str | None = None, gpu: str = "none") -> None:
        """The provider really running. A GPU provider that failed is worth a word only where
        there is an NVIDIA GPU to use (`gpu` "driver" or "no-driver"): then "CPU — GPU not used",
        and the tooltip says why and what to install; without one, "CPU" is all there is to say."""
        label, tip = provider_status(provider, fallback, gpu)
        self.provider.setText(label)
        self.provider.setToolTip(tip)
        self.provider.setProperty("warning", gpu_alarm(provider, fallback, gpu))
        self.provider.style().polish(self.provider)   # the colour follows the property

    def set_context(self, used: int, window: int) -> None:
        if window:
            self.context.setText(f"{used:,} / {window:,} tokens")
            self.context_bar.setMaximum(window)
            self.context_bar.setValue(min(used, window))
            self.context_bar.show()
        else:
            self.context.setText("")
            self.context_bar.hide()

    def set_speed(self, tokens_per_s: float | None) -> None:
        self.speed.setText(f"{tokens_per_s:.1f} tok/s" if tokens_per_s else "")

    def set_figures(self, f: dict[str, Any] | None) -> None:
        self.started.setText(how_started(f))
        if f:
            self.set_speed(float(f.get("decode_tokens_per_s") or 0) or None)
            if f.get("context_window"):
                self.set_context(int(f.get("context_used") or 0), int(f["context_window"]))
        else:
            self.set_speed(None)

    def set_message(self, text: str) -> None:
        self.message.setText(text)

    def set_api(self, url: str) -> None:
        """The local API server listens at `url` ("" when it is off)."""
        self.api.setText(api_text(url) if url else "")
        self.api.setToolTip(f"OpenAI-compatible API at {url} — click for its settings" if url else "")
        self.api.setVisible(bool(url))

    # --- figures of the chat on screen -------------------------------------------------------
    def set_kv(self, text: str) -> None:
        """“1,146 tokens on disk — resumes without prefill”: about the chat shown, never another."""
        self.kv.setText(text)

    def show_chat(self, figures: dict[str, Any] | None, window: int, kv: str = "") -> None:
        """Everything the bar says about a chat, replaced at once when another chat is shown."""
        self.set_figures(figures)
        used = int((figures or {}).get("context_used") or 0)
        self.set_context(used, window)
        self.set_kv(kv)

    def set_live(self, live: Any, window: int = 0) -> None:
        """The turn in progress (a `widgets.turn.LiveTurn`): prefill progress, then tokens and
        tok/s so far; the previous turn's figures are not shown meanwhile."""
        if live.decoding:
            self.started.setText(f"generating: {count(live.tokens)}")
        else:
            self.started.setText(live.summary())
        self.set_speed(live.tokens_per_s())
