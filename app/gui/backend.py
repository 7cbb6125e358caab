"""The one seam between the GUI and the engine / store. Everything here runs on worker threads.

Wiring the real engine is `open_engine`; tests replace it (and `prepare_model`) with fakes through
`Backend`. Imports of the engine and the store are lazy so that the window appears before
onnxruntime / SQLAlchemy are loaded.
"""
from __future__ import annotations

import inspect
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from engine.base import paths
from engine.base.cuda_probe import GpuPresence, machine_gpu
from engine.api import ChatEngine

from .settings import Settings

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]


_PROVIDERS: dict[str, Literal["auto", "cpu", "gpu"]] = {"auto": "auto", "cpu": "cpu", "gpu": "gpu"}


def accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The subset of `kwargs` that `fn` accepts (so new engine options can be added safely)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def open_engine(model_dir: Path, state_dir: Path, settings: Settings,
                progress: ProgressFn | None = None) -> ChatEngine:
    """Load the model in `model_dir` and return a session manager over it (worker thread).
    `progress(fraction, text)` reports making the model's GPU variant (first use of a GPU)."""
    from engine.runtime.model import load_model  # noqa: PLC0415 - heavy, and may not exist yet
    from engine.sessions.manager import SessionManager  # noqa: PLC0415

    provider = _PROVIDERS.get(settings.provider, "auto")
    variant_progress = None
    if progress is not None:
        def variant_progress(done: int, total: int, what: str) -> None:
            progress(done / max(1, total), "Preparing the model for the GPU (float16)…")
    model = load_model(model_dir, provider=provider, progress=variant_progress)
    options = {
        "memory_budget_bytes": int(settings.memory_budget_mb) * 1024 * 1024,
        "cache_disk_bytes": int(settings.disk_budget_mb) * 1024 * 1024,
        "cache_max_age_s": float(settings.cache_max_age_days) * 86400,
        "kv_store": settings.kv_store,
    }
    state_dir.mkdir(parents=True, exist_ok=True)
    return SessionManager(model, state_dir, **accepted_kwargs(SessionManager, options))


def open_remote(choice: str, home: Path) -> ChatEngine:
    """Connects to a saved OpenAI-compatible endpoint (`remote:<id>`; worker thread)."""
    from .remote_config import open_remote_engine  # noqa: PLC0415 - loads the HTTP stack

    return open_remote_engine(choice, home)


def open_store(db_path: Path) -> Any:
    """The conversation store (`app.store.ConversationStore`) over `db_path` (worker thread)."""
    from app.store import ConversationStore  # noqa: PLC0415

    db_path.parent.mkdir(parents=True, exist_ok=True)
    return ConversationStore(db_path)


def _adapt_progress(progress: ProgressFn) -> Callable[..., None]:
    """Engine progress callbacks may pass (fraction), (fraction, message) or (done, total, msg)."""
    def cb(*args: Any, **kwargs: Any) -> None:
        frac, msg = -1.0, ""
        nums = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
        texts = [a for a in args if isinstance(a, str)]
        if len(nums) >= 2 and nums[1]:
            frac = float(nums[0]) / float(nums[1])
        elif nums:
            frac = float(nums[0])
            if frac > 1.0:
                frac /= 100.0
        if texts:
            msg = texts[0]
        msg = kwargs.get("message", kwargs.get("stage", msg)) or msg
        progress(max(-1.0, min(1.0, frac)), str(msg))
    return cb


def prepare_model(name: str, progress: ProgressFn) -> Path:
    """The folder of the model to load: `name` under models/, or the default (prepared once)."""
    if name:
        candidate = paths.models_dir() / name
        if is_model_dir(candidate):
            return candidate
        log.warning("model %s not found; using the default model", name)
    from engine.convert.default_model import ensure_default_model  # noqa: PLC0415

    return Path(ensure_default_model(progress=_adapt_progress(progress)))


def is_model_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any(p.suffix == ".onnx" for p in path.iterdir())
    except OSError:
        return False


def list_models() -> list[str]:
    """Model folder names under models/ (worker thread)."""
    root = paths.models_dir()
    try:
        return sorted(p.name for p in root.iterdir() if is_model_dir(p))
    except OSError:
        return []


def _converter() -> Callable[..., Any]:
    from engine.convert import convert_gguf  # noqa: PLC0415
    return convert_gguf


def import_gguf(src: Path, progress: ProgressFn, cancel: threading.Event) -> Path:
    """Convert a GGUF file into an ONNX model folder under models/ (worker thread).

    The converter writes into a temporary sibling and renames at the end, so a cancelled or
    failed import leaves nothing behind. A file imported before raises `AlreadyImported`."""
    from .import_source import AlreadyImported, find_import, record_import, source_fingerprint  # noqa: PLC0415

    progress(-1.0, f"Checking {src.name}…")
    fingerprint = source_fingerprint(src)
    existing = find_import(paths.models_dir(), src, fingerprint)
    if existing is not None:
        raise AlreadyImported(src, existing)
    dest = _unique_dest(src.stem)
    try:
        from engine.convert import FAST  # noqa: PLC0415
        _converter()(src, dest, weights="auto", progress=_adapt_progress(progress), cancel=cancel,
                     accuracy_level=FAST)
    except BaseException as exc:
        if cancel.is_set() or type(exc).__name__ in ("ConversionCancelled", "Cancelled"):
            raise ImportCancelled() from exc
        raise
    if cancel.is_set():
        shutil.rmtree(dest, ignore_errors=True)
        raise ImportCancelled()
    record_import(dest, src, fingerprint)
    return dest


def import_onnx_folder(src: Path, progress: ProgressFn, cancel: threading.Event) -> Path:
    """Copy an ONNX model folder under models/, file by file so that it can be cancelled. A folder
    imported before raises `AlreadyImported`."""
    from .import_source import AlreadyImported, find_import, record_import, source_fingerprint  # noqa: PLC0415

    if not is_model_dir(src):
        raise ValueError(f"{src} does not contain an .onnx model")
    fingerprint = source_fingerprint(src)
    existing = find_import(paths.models_dir(), src, fingerprint)
    if existing is not None:
        raise AlreadyImported(src, existing)
    files = [p for p in src.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files) or 1
    dest = _unique_dest(src.name)
    tmp = dest.with_name("." + dest.name + ".importing")
    shutil.rmtree(tmp, ignore_errors=True)
    done = 0
    try:
        for f in files:
            target = tmp / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            with f.open("rb") as fin, target.open("wb") as fout:
                while chunk := fin.read(4 << 20):
                    if cancel.is_set():
                        raise ImportCancelled()
                    fout.write(chunk)
                    done += len(chunk)
                    progress(done / total, f"Copying {f.name}")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    record_import(dest, src, fingerprint)
    return dest


class ImportCancelled(Exception):
    pass


def _unique_dest(stem: str) -> Path:
    root = paths.models_dir()
    root.mkdir(parents=True, exist_ok=True)
    dest, n = root / stem, 2
    while dest.exists():
        dest, n = root / f"{stem}-{n}", n + 1
    return dest


@dataclass
class Backend:
    """What the main window uses to reach the engine and the store. Tests inject fakes."""

    engine_factory: Callable[[Path, Path, Settings], ChatEngine] = open_engine
    store_factory: Callable[[Path], Any] | None = None        # None: the SQLite store
    model_preparer: Callable[[str, ProgressFn], Path] = prepare_model
    model_lister: Callable[[], list[str]] = list_models
    gguf_importer: Callable[[Path, ProgressFn, threading.Event], Path] = import_gguf
    folder_importer: Callable[[Path, ProgressFn, threading.Event], Path] = import_onnx_folder
    remote_factory: Callable[[str, Path], ChatEngine] = open_remote
    gpu_presence: Callable[[], GpuPresence] = machine_gpu   # an NVIDIA GPU to warn about (and its driver)
    extra: dict[str, Any] = field(default_factory=dict)

    def make_store(self, db_path: Path) -> Any:
        if self.store_factory is not None:
            return self.store_factory(db_path)
        return open_store(db_path)
