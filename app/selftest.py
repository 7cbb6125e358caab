"""`amber --self-test`: check an installation end to end, in the built bundle as in development.

Steps (each prints one line; a failed step names what failed and the test goes on where it can):
  1. data directory: created if missing, writable, the conversation database opens and migrates
     (this runs the bundled Alembic migrations);
  2. Qt: the platform plugin loads (offscreen when there is no display), SVG icons render, the
     style sheet and icons in `resources/` are there;
  3. model: the default model is found (the user's converted copy, else the one bundled with an
     installed build; never downloaded) and loads in ONNX Runtime;
  4. generate: a few greedy tokens;
  5. pin and resume: a tiny pinned session is saved, a second session manager resumes it from
     disk, and it is deleted again (in a scratch state folder inside the data directory).

Exit status 0 when every step passed, 1 otherwise. Nothing here downloads anything.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Callable, TextIO

from engine.base import paths
from engine.config import settings

# ---- where an installed build keeps its files ----------------------------------------------------
def bundle_dir() -> Path | None:
    """The folder holding an installed (PyInstaller) build's files, or None when run from source.

    onedir builds: `<install>/_internal` on Windows and Linux, `Amber.app/Contents/Frameworks`
    on macOS (whose data files live in `Contents/Resources`, linked from there)."""
    base = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and base:
        return Path(base)
    return None


def bundled_models_dir() -> Path | None:
    """Read-only models shipped with the app: `$AMBER_BUNDLED_MODELS`, else `models/` in the bundle."""
    return paths.bundled_models_dir()


def find_default_model() -> tuple[Path, str]:
    """(folder, where): the user's converted default model, else the bundled one.

    Raises FileNotFoundError naming the places looked at."""
    from engine.convert import default_model

    from engine.base import paths
    user = paths.models_dir() / paths.DEFAULT_MODEL_NAME
    if default_model.is_ready(user):
        return user, "user data"
    looked = [str(user)]
    bundled_root = bundled_models_dir()
    if bundled_root is not None:
        bundled = bundled_root / paths.DEFAULT_MODEL_NAME
        if default_model.is_ready(bundled):
            return bundled, "bundled"
        looked.append(str(bundled))
    raise FileNotFoundError("the default model is not prepared (looked in " + ", ".join(looked) +
                            "); run `amber-engine fetch-default` once, or reinstall Amber")


# ---- the test ------------------------------------------------------------------------------------
class _Report:
    def __init__(self, out: TextIO):
        self.out = out
        self.failures: list[str] = []

    def step(self, name: str, fn: Callable[[], str]) -> bool:
        t0 = time.perf_counter()
        try:
            detail = fn()
        except Exception as exc:   # noqa: BLE001 - every failure is reported, never raised
            ms = (time.perf_counter() - t0) * 1000
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            msg = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
            self.failures.append(f"{name}: {msg}")
            print(f"  FAIL  {name:<15} {msg}  ({ms:.0f} ms)", file=self.out, flush=True)
            if settings().selftest_traceback:
                traceback.print_exc(file=self.out)
            return False
        ms = (time.perf_counter() - t0) * 1000
        print(f"  ok    {name:<15} {detail}  ({ms:.0f} ms)", file=self.out, flush=True)
        return True

    def skip(self, name: str, why: str) -> None:
        self.failures.append(f"{name}: skipped ({why})")
        print(f"  SKIP  {name:<15} {why}", file=self.out, flush=True)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("amber-chat")
    except Exception:   # noqa: BLE001 - metadata missing in an odd build: not a failure
        return "unknown"


def _check_data_dir() -> str:
    from app.store import ConversationStore
    from app.store.database import head_revision
    from engine.base import paths

    home = paths.amber_home()
    home.mkdir(parents=True, exist_ok=True)
    probe = home / f".selftest-{uuid.uuid4().hex[:8]}"
    probe.write_bytes(b"ok")
    probe.unlink()
    store = ConversationStore(paths.database_path())
    try:
        n = len(store.list_conversations())
    finally:
        store.close()
    return f"{home} (writable; database at schema {head_revision()}, {n} conversation(s))"


def _check_qt() -> str:
    if (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"   # a headless machine: test what can be tested
    from PySide6.QtCore import QByteArray, QSize
    from PySide6.QtGui import QGuiApplication, QImage, QImageReader, QPainter
    from PySide6.QtSvg import QSvgRenderer

    from app.gui.theme import resources_dir

    existing = QGuiApplication.instance()
    app = (existing if isinstance(existing, QGuiApplication)
           else QGuiApplication([sys.argv[0] if sys.argv else "amber"]))
    platform = app.platformName()
    res = resources_dir()
    svg = (res / "icons" / "amber.svg").read_bytes()
    if not (res / "styles" / "amber.qss").is_file():
        raise FileNotFoundError(f"{res / 'styles' / 'amber.qss'} is missing")
    renderer = QSvgRenderer(QByteArray(svg))
    if not renderer.isValid():
        raise RuntimeError("amber.svg does not render (QtSvg broken)")
    image = QImage(QSize(32, 32), QImage.Format.Format_ARGB32)
    image.fill(0)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    formats = {bytes(f.data()).decode() for f in QImageReader.supportedImageFormats()}
    missing = {"png", "svg"} - formats
    if missing:
        raise RuntimeError(f"Qt image formats missing: {', '.join(sorted(missing))}")
    return f"platform {platform}, {len(formats)} image formats, resources at {res}"


def run_self_test(out: TextIO | None = None) -> int:
    """Runs every step; prints one line each and a verdict. Returns the exit status.

    A windowed build has no stdout (Windows): the report then goes to `<data dir>/self-test.log`."""
    if out is None and sys.stdout is None:
        from engine.base import paths

        paths.amber_home().mkdir(parents=True, exist_ok=True)
        with open(paths.amber_home() / "self-test.log", "w", encoding="utf-8") as log:
            return run_self_test(log)
    out = out or sys.stdout
    report = _Report(out)
    where = bundle_dir()
    build = f"installed build at {where.parent if where.name == '_internal' else where}" if where else "source checkout"
    print(f"Amber self-test: version {_version()}, Python {sys.version.split()[0]}, {build}",
          file=out, flush=True)
    t_start = time.perf_counter()
    report.step("data directory", _check_data_dir)
    report.step("qt", _check_qt)

    state: dict[str, object] = {}

    def load() -> str:
        from engine.runtime.model import load_model   # first: engine turns ONNX Runtime's telemetry off

        import onnxruntime as ort

        folder, origin = find_default_model()
        model = load_model(folder, provider=settings().selftest_provider)  # type: ignore[arg-type]
        state["model"] = model
        extra = f"; fell back: {model.provider_fallback_reason}" if model.provider_fallback_reason else ""
        return (f"{model.name} ({origin}, {folder}) on {model.provider} "
                f"(ONNX Runtime {ort.__version__}){extra}")

    if not report.step("model", load):
        report.skip("generate", "no model")
        report.skip("pin and resume", "no model")
        return _verdict(report, out, t_start)

    from engine.base import paths

    paths.amber_home().mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".selftest-state-", dir=paths.amber_home()))
    try:
        _session_steps(report, state["model"], scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _verdict(report, out, t_start)


def _session_steps(report: _Report, model: object, scratch: Path) -> None:
    from engine.api import GenerationResult, SamplingParams, SessionKind
    from engine.sessions.manager import SessionManager

    sampling = SamplingParams(greedy=True, max_new_tokens=8)
    sid = str(uuid.uuid4())

    def run(manager: SessionManager, text: str) -> GenerationResult:
        result = None
        for event in manager.chat(sid, text, sampling=sampling):
            if isinstance(event, GenerationResult):
                result = event
        if result is None:
            raise RuntimeError("the stream ended without a result")
        return result

    first = SessionManager(model, scratch)   # type: ignore[arg-type]
    try:
        def generate() -> str:
            first.open(sid, kind=SessionKind.PINNED)
            result = run(first, "Say hello.")
            f = result.figures
            if f.generated_tokens < 1:
                raise RuntimeError("no tokens were generated")
            return (f"{f.generated_tokens} tokens {result.text.strip()[:40]!r}, "
                    f"TTFT {f.ttft_ms:.0f} ms, {f.decode_tokens_per_s:.0f} tok/s")
        ok = report.step("generate", generate)
        if ok:
            if not first.wait_for_saves(30.0):
                raise_later: str | None = "the pinned session's save did not finish in 30 s"
            else:
                info = first.info(sid)
                raise_later = (None if info.kv_bytes_disk > 0 and not info.save_error
                               else info.save_error or "the pinned session has no KV on disk")
    finally:
        first.shutdown()
    if not ok:
        report.skip("pin and resume", "generation failed")
        return

    def resume() -> str:
        if raise_later:
            raise RuntimeError(raise_later)
        second = SessionManager(model, scratch)   # type: ignore[arg-type]
        try:
            info = second.open(sid)
            if info.kind != SessionKind.PINNED or info.tokens < 1:
                raise RuntimeError(f"reopened as {info.kind.value} with {info.tokens} tokens")
            result = run(second, "Again.")
            f = result.figures
            if f.resume != "disk" or f.reused_tokens < 1:
                raise RuntimeError(f"not resumed from disk (resume={f.resume!r}, reused {f.reused_tokens}"
                                   f"{', ' + f.fallback_reason if f.fallback_reason else ''})")
            second.delete(sid)
            return (f"saved {info.tokens} tokens ({info.kv_bytes_disk:,} B); resumed from disk in "
                    f"{f.resume_ms:.0f} ms, reused {f.reused_tokens}, prefilled {f.prefilled_tokens}")
        finally:
            second.shutdown()

    report.step("pin and resume", resume)


def _verdict(report: _Report, out: TextIO, t_start: float) -> int:
    took = time.perf_counter() - t_start
    if report.failures:
        print(f"FAILED ({len(report.failures)}) after {took:.1f} s: " + "; ".join(report.failures),
              file=out, flush=True)
        return 1
    print(f"PASSED in {took:.1f} s", file=out, flush=True)
    return 0


if __name__ == "__main__":   # `python -m app.selftest` until app.main wires --self-test
    sys.exit(run_self_test())
