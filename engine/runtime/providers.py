"""Choosing an ONNX Runtime execution provider, and telling the truth about which one runs."""
from __future__ import annotations

import ctypes
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import onnxruntime as ort

from ..base import cuda_libs
from ..onnx.graph_scan import external_bytes, read_graph, weight_preparation
from . import native_ops
from .host.spin import spin_entries

ProviderChoice = Literal["auto", "cpu", "gpu"]
CPU = "CPUExecutionProvider"
GPU_PREFERENCE = ("CUDAExecutionProvider", "CoreMLExecutionProvider", "DmlExecutionProvider")
COREML, DML = "CoreMLExecutionProvider", "DmlExecutionProvider"
GPU_PROVIDERS = ("CUDAExecutionProvider", DML)   # the ones that run the float16 variant
DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
SHORT_NAMES = {"CPUExecutionProvider": "CPU", "CUDAExecutionProvider": "CUDA",
               "CoreMLExecutionProvider": "CoreML", "DmlExecutionProvider": "DirectML",
               "TensorrtExecutionProvider": "TensorRT"}


@dataclass
class SessionResult:
    session: ort.InferenceSession
    provider: str                   # what get_providers() reports first: the one that runs
    fallback_reason: str | None     # why a GPU provider that was asked for is not the one running
    model_path: str = ""            # the graph the session runs (the float16 variant on a GPU)


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
    # CoreML has no kernels for GroupQueryAttention or MatMulNBits: a Mac runs on CPU (and says so).
    gpus = [p for p in GPU_PREFERENCE if p in available and p != COREML]
    if "CUDAExecutionProvider" in gpus and not _cuda_provider_library_present():
        gpus.remove("CUDAExecutionProvider")   # listed by onnxruntime-gpu, but its library was not shipped
    return gpus[:1] + [CPU]


def session_options(threads: int | None = None) -> ort.SessionOptions:
    """Options of a CPU session: the base ones and the intra-op spin policy (spin_entries)."""
    so = _base_options(threads)
    for key, value in spin_entries().items():
        so.add_session_config_entry(key, value)
    return so


def _base_options(threads: int | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Fatal only: a failed CUDA load is reported through fallback_reason, a graph that cannot load or
    # run through the one-line ModelLoadError / ModelRunError (ORT's own coloured line would precede it).
    so.log_severity_level = 4
    # No CPU arena: it keeps every chunk a prefill ever asked for (+90 MiB after a 2048-token
    # prompt on the default model, rounded up to powers of two); malloc gives the large ones back.
    # Decode allocates little per step (no more page faults a step without it; docs/benchmarks/memory.md).
    so.enable_cpu_mem_arena = False
    if threads:
        so.intra_op_num_threads = threads
    return so


def strict_session_options(provider: str, threads: int | None = None) -> ort.SessionOptions:
    """Options for a GPU session that must run every node on `provider`: a node without a kernel
    there is an error at creation, not a silent CPU path with copies in between."""
    so = _base_options(threads)   # no CPU spin policy: ORT's defaults on a GPU session
    so.log_severity_level = 4    # a refusal is reported once, through fallback_reason
    so.add_session_config_entry(DISABLE_CPU_FALLBACK, "1")
    if provider == DML:
        # DirectML supports neither memory patterns nor parallel execution (ORT's DirectML docs).
        so.enable_mem_pattern = False
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return so


def provider_library_problem(provider: str) -> str | None:
    """Why `provider`'s shared library cannot be loaded (e.g. a missing CUDA runtime library), or
    None. ORT only logs this and then creates a CPU session; loading the library ourselves names
    the missing file."""
    if provider != "CUDAExecutionProvider":
        return None
    lib = Path(ort.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    if not lib.is_file():
        return None
    try:
        ctypes.CDLL(str(lib))
    except OSError:
        # The NVIDIA wheels (the `cuda` extra) are not on the loader's path until ORT's
        # preload_dlls loads them; an installed GPU build preloads its own copy at import.
        cuda_libs.preload(ort)
        try:
            ctypes.CDLL(str(lib))
        except OSError as exc:
            return str(exc).strip().splitlines()[0][:300]
    return None


def _first_line(exc: BaseException) -> str:
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(exc).strip())
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _explain(provider: str, gpu_path: str, exc: BaseException) -> str:
    """One line: why the strict GPU session failed, naming the cause or the nodes it could not place."""
    problem = provider_library_problem(provider)
    if problem:
        return f"{short_name(provider)} failed: {problem}"
    detail = _first_line(exc)
    try:
        import onnx  # noqa: PLC0415 - only to explain a GPU session that failed
        from engine.onnx.variants import unplaceable_nodes  # noqa: PLC0415
        nodes = unplaceable_nodes(onnx.load(gpu_path, load_external_data=False), provider)
    except Exception:  # noqa: BLE001 - best effort: the explanation then names no nodes
        nodes = []
    if nodes:
        # Grouped by op and type: "GroupQueryAttention float ×30 (GroupQueryAttention_12, …)".
        groups: dict[str, list[str]] = {}
        for entry in nodes:
            name, _, kind = entry.partition(" (")
            groups.setdefault(kind.rstrip(")"), []).append(name)
        parts = [f"{kind} ×{len(names)} ({names[0]}{', …' if len(names) > 1 else ''})"
                 for kind, names in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
        detail += f"; no {short_name(provider)} kernel for: {'; '.join(parts)}"
    return f"{short_name(provider)} failed: {detail}"


def create_session(model_path: str, choice: ProviderChoice = "auto", threads: int | None = None,
                   gpu_model_path: str | Callable[[], str] | None = None) -> SessionResult:
    """Creates a session on the best provider; on failure creates a CPU session and keeps the reason.

    A GPU session runs `gpu_model_path` (the float16 variant; a callable makes it on first use) with
    `session.disable_cpu_ep_fallback`, so it either runs every node on the GPU or fails, naming why.
    The CPU session runs `model_path`."""
    wanted = wanted_providers(choice)
    reason = None
    # ORT prints a CUDA library load failure on its default logger; Amber reports it as fallback_reason.
    ort.set_default_logger_severity(4)
    ort.disable_telemetry_events()   # the env switch in engine/__init__.py stops the local database too
    if wanted[0] != CPU:
        gpu = wanted[0]
        if gpu == "CUDAExecutionProvider":
            cuda_libs.preload(ort)   # the `cuda` extra's libraries, where installed (a no-op otherwise)
        problem = provider_library_problem(gpu)
        if problem:
            # The library cannot load (e.g. onnxruntime-gpu without the CUDA runtime): say which file
            # is missing, and do not make the float16 variant for a GPU that cannot run it.
            return _cpu(model_path, threads, f"{short_name(gpu)} failed: {problem}")
        try:
            path = gpu_model_path() if callable(gpu_model_path) else (gpu_model_path or model_path)
        except Exception as exc:  # noqa: BLE001 - reported, and the CPU session is made instead
            reason = f"{short_name(gpu)} failed: its float16 variant could not be made ({_first_line(exc)})"
        else:
            try:
                session = ort.InferenceSession(path, strict_session_options(gpu, threads), providers=[gpu])
            except Exception as exc:  # noqa: BLE001 - explained, and the CPU session is made instead
                reason = _explain(gpu, path, exc)
            else:
                running = session.get_providers()[0]
                if running == gpu:
                    return SessionResult(session, running, None, path)
                reason = f"{short_name(gpu)} is installed but could not be used (missing driver or libraries)"
    if choice != "cpu" and reason is None:
        if sys.platform == "darwin" and COREML in ort.get_available_providers():
            reason = "CoreML has no kernels for GroupQueryAttention and MatMulNBits: running on CPU"
        elif choice == "gpu":
            reason = "no GPU execution provider is available in this ONNX Runtime build"
    return _cpu(model_path, threads, reason)


def _cpu(model_path: str, threads: int | None, reason: str | None) -> SessionResult:
    so = session_options(threads)
    if native_ops.graph_is_native(Path(model_path)):
        # Amber's own op (GgufMatMul): its library must be registered before the session is made.
        why = native_ops.unavailable_reason()
        if why is not None or not native_ops.register(so):
            raise RuntimeError(native_ops.unavailable_message(Path(model_path), why or "it failed to register"))
    session = _cpu_session(model_path, so)
    return SessionResult(session, session.get_providers()[0], reason, model_path)


def _cpu_session(model_path: str, so: ort.SessionOptions) -> ort.InferenceSession:
    """Amber's graphs that widen stored weights at load: their weight preparation runs in numpy,
    one tensor at a time (prefold.py). A graph with none, or only casts of small tables (the
    default model's native form: its embedding scales, 1.7 MB of float16, cast and reshaped), is ONNX Runtime's to
    fold: the same bits, without importing onnx (and ml_dtypes with it: ~15 MiB a process)."""
    try:
        folds = _worth_prefolding(read_graph(Path(model_path)))
    except (OSError, ValueError):
        folds = False     # ONNX Runtime's own error then names what is wrong with the file
    if not folds:
        return ort.InferenceSession(model_path, so, providers=[CPU])
    from . import prefold  # noqa: PLC0415 - onnx is imported only where it forms weights
    return prefold.cpu_session(model_path, so, [CPU])


# ONNX Runtime's constant folding keeps each folded value (and the intermediates of a chain) until
# its pass ends: for casts and reshapes (neither widens a table into more values) of this much
# stored data that is a few MiB at most.
ORT_FOLDS = frozenset({"Cast", "Reshape"})
ORT_FOLDS_MAX_BYTES = 16 << 20


def _worth_prefolding(proto: Any) -> bool:
    nodes = weight_preparation(proto)
    if not nodes:
        return False
    if any(n.op_type not in ORT_FOLDS for n in nodes):
        return True
    return external_bytes(proto, {i for n in nodes for i in n.input}) > ORT_FOLDS_MAX_BYTES
