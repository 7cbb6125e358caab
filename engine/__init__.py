"""Amber's engine: model import, loading and generation (no Qt, no app)."""
import os as _os

# ONNX Runtime's OneDS telemetry writes a device id and an event database under
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime as soon as onnxruntime is imported (measured with
# onnxruntime-gpu 1.31.1 on Linux; `disable_telemetry_events()` afterwards does not stop it). The
# variable is read at import, so it is set here, before any engine module imports onnxruntime,
# and it is forced: Amber never lets ORT record anything about its use.
_os.environ["ORT_DISABLE_TELEMETRY"] = "1"
