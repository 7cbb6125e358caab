"""Choosing an ONNX Runtime execution provider, and telling the truth about which one runs."""
from __future__ import annotations

import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Literal

import onnxruntime as ort

ProviderChoice = Literal["auto", "cpu", "gpu"]
CPU = "CPUExecutionProvider"
GPU_PREFERENCE = ("CUDAExecutionProvider", "CoreMLExecutionProvider", "DmlExecutionProvider")
SHORT_NAMES = {"CPUExecutionProvider": "CPU", "CUDAExecutionProvider": "CUDA",
               "CoreMLExecutionProvider": "CoreML", "DmlExecutionProvider": "DirectML",
               "TensorrtExecutionProvider": "TensorRT"}


@dataclass
class SessionResult:
    session: ort.InferenceSession
    provider: str                   # what get_providers() reports first: the one that runs
    fallback_reason: str | None     # why a GPU provider that was asked for is not the one running


def short_name(provider: str) -> str:
    return SHORT_NAMES.get(provider, provider.replace("ExecutionProvider", ""))


def _cuda_provider_library_present() -> bool:
    capi = Path(ort.__file__).parent / "capi"
    return any(capi.glob("*onnxruntime_providers_cuda*"))


def wanted_providers(choice: ProviderChoice) -> list[str]:
    """Providers to ask for, best first, CPU last."""
    if choice == "cpu":
        return [CPU]
    available = ort.get_available_providers()
    gpus = [p for p in GPU_PREFERENCE if p in available]
    if "CUDAExecutionProvider" in gpus and not _cuda_provider_library_present():
        gpus.remove("CUDAExecutionProvider")   # listed by onnxruntime-gpu, but its library was not shipped
    if sys.platform != "darwin":
        gpus = [p for p in gpus if p != "CoreMLExecutionProvider"]
    return gpus[:1] + [CPU]


def session_options(threads: int | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3   # errors only; a failed CUDA load is reported through fallback_reason
    if threads:
        so.intra_op_num_threads = threads
    return so


def create_session(model_path: str, choice: ProviderChoice = "auto", threads: int | None = None) -> SessionResult:
    """Creates a session on the best provider; on failure retries on CPU and keeps the reason."""
    wanted = wanted_providers(choice)
    reason = None
    # ORT prints a CUDA library load failure on its default logger; Amber reports it as fallback_reason.
    ort.set_default_logger_severity(4)
    ort.disable_telemetry_events()   # the env switch in engine/__init__.py stops the local database too
    try:
        session = ort.InferenceSession(model_path, session_options(threads), providers=wanted)
    except Exception as exc:
        if wanted == [CPU]:
            raise
        reason = f"{short_name(wanted[0])} failed at session creation: {str(exc).splitlines()[0][:300]}"
        session = ort.InferenceSession(model_path, session_options(threads), providers=[CPU])
    running = session.get_providers()[0]
    if reason is None and wanted[0] != CPU and running != wanted[0]:
        reason = f"{short_name(wanted[0])} is installed but could not be used (missing driver or libraries)"
    if choice == "gpu" and wanted == [CPU]:
        reason = "no GPU execution provider is available in this ONNX Runtime build"
    return SessionResult(session, running, reason)
