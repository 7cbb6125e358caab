"""A GGUF import's progress in stages the user can see move: reading the file (busy), the
tensors (most of the bar, as the converter reports them), then building and writing the ONNX
model (busy again, near the end), instead of a bar that sits still and jumps at the end."""
from __future__ import annotations

from typing import Callable

Progress = Callable[[float, str], None]

READ_END = 0.03      # the bar after reading the header and tokenizer
TENSORS_END = 0.9    # ... after the last tensor; building and writing the model follow


def staged(progress: Progress) -> Progress:
    """Wraps the dialog's progress callback for `backend.import_gguf` (any thread)."""
    state = {"tensors_done": False}
    progress(-1.0, "Reading the GGUF file…")

    def cb(fraction: float, message: str = "") -> None:
        if fraction < 0:
            progress(-1.0, message)
            return
        if state["tensors_done"]:
            return
        if fraction >= 1.0:
            state["tensors_done"] = True
            progress(-1.0, "Building and writing the ONNX model…")
            return
        shown = READ_END + (TENSORS_END - READ_END) * max(0.0, fraction)
        # the converter names the tensor it is on (blk.7.ffn_down.weight): the log's business;
        # the user gets the phase and how far it is
        progress(shown, f"Converting the weights… {int(max(0.0, fraction) * 100)} %")

    return cb
