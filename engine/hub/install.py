"""Get a model into Amber's models folder: download (resumable), verify, convert, move into place.

Everything in flight lives under `models/.downloads/<repo>--<quant>/` (hidden from the picker);
the model folder appears under `models/` only when it is complete, by a rename.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.base import paths
from engine.base.safefs import atomic_write, make_folder
from .catalog import supported_architectures
from .download import CancelToken, Progress, ProgressFn, download_file
from .errors import Cancelled, DiskFull, HubError, NotLoadable
from .fit import Fit, estimate
from .search import RepoFiles, Variant, check_repo_id, repo_files

if TYPE_CHECKING:
    from ..onnx.weights import WeightPolicy

DOWNLOADS = ".downloads"
SOURCE_FILE = "amber-source.json"      # where an installed model came from
_NAME = re.compile(r"^[A-Za-z0-9][\w.+-]{0,120}$")


def downloads_root() -> Path:
    return paths.models_dir() / DOWNLOADS


@dataclass(frozen=True)
class Plan:
    """What `install` would do: the variant, where it goes, and the space/memory verdict."""
    listing: RepoFiles
    variant: Variant
    name: str
    work: Path
    fit: Fit


def default_name(repo: str, variant: Variant) -> str:
    base = repo.split("/", 1)[1]
    base = re.sub(r"[-_.]?gguf$", "", base, flags=re.IGNORECASE)
    if variant.kind == "gguf" and variant.quant and variant.quant.lower() not in base.lower():
        base = f"{base}-{variant.quant}"
    elif variant.kind == "onnx" and variant.quant != "ONNX":
        base = f"{base}-{variant.quant.removeprefix('ONNX_')}"
    return re.sub(r"[^\w.+-]", "-", base)


def plan(repo: str, which: str | None = None, *, name: str | None = None, revision: str | None = None,
         token: str | None = None) -> Plan:
    """Looks the repo up and picks the variant: a file name or quant, else Q4_K_M, else the smallest."""
    listing = repo_files(check_repo_id(repo), revision=revision, token=token)
    if not listing.variants:
        raise HubError(f"{repo}: no GGUF file or ONNX model in the repo")
    if which:
        variant = listing.find(which)
    else:
        ggufs = [v for v in listing.variants if v.kind == "gguf" and not v.split]
        preferred = [v for v in ggufs if v.quant == "Q4_K_M"]
        # ONNX repos: 4-bit MatMulNBits first (fast on CPU), then int8, then the float32 graph
        onnx_order = ("ONNX_q4", "ONNX_int8", "ONNX_quantized", "ONNX")
        onnx = sorted((v for v in listing.variants if v.kind == "onnx" and v.quant in onnx_order),
                      key=lambda v: onnx_order.index(v.quant))
        variant = (preferred or ggufs or onnx or listing.variants)[0]
    if variant.split:
        raise HubError(f"{repo}: {variant.quant} is split into {len(variant.files)} files, which Amber "
                       "cannot convert yet: pick a single-file quantization")
    arch = listing.architecture
    if variant.kind == "gguf" and arch and arch not in supported_architectures():
        raise HubError(f"{repo}: architecture '{arch}' is not supported yet "
                       f"(supported: {', '.join(supported_architectures())})")
    final = name or default_name(listing.repo, variant)
    if not _NAME.match(final):
        raise HubError(f"'{final}' cannot be a model name (letters, digits, . _ + - only)")
    key = re.sub(r"[^\w.+-]", "-", f"{listing.repo.replace('/', '--')}--{variant.quant}")
    work = downloads_root() / key
    already = sum(_part_size(work / "files" / f.path) for f in variant.files)
    return Plan(listing, variant, final, work, estimate(variant.size, variant.quant, paths.models_dir(), already))


def _part_size(dest: Path) -> int:
    for p in (dest, dest.with_name(dest.name + ".part")):
        if p.is_file():
            return p.stat().st_size
    return 0


def install(p: Plan, *, token: str | None = None, progress: ProgressFn | None = None,
            cancel: CancelToken | None = None, weights: WeightPolicy = "auto") -> Path:
    """Runs the plan; returns the new model folder under models/."""
    if not p.fit.disk_ok:
        raise DiskFull(f"not enough disk space: {p.fit.summary()}")
    from filelock import FileLock, Timeout
    try:    # every folder a download writes, made below models/ and never through a symlink
        for f in p.variant.files:
            make_folder(paths.models_dir(), (p.work / "files" / f.path).parent)
    except OSError as exc:
        raise HubError(f"the download folder cannot be used: {exc.strerror or exc}") from None
    # Two Amber processes appending to one .part would corrupt it: the second one is refused
    lock = FileLock(str(p.work / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise HubError(f"{p.listing.repo} {p.variant.quant} is already being downloaded by another "
                       "Amber process") from None
    not_a_model = False
    try:
        dest = _install_locked(p, token=token, progress=progress, cancel=cancel, weights=weights)
    except NotLoadable:
        not_a_model = True       # nothing worth resuming: the download goes too
        raise
    finally:
        lock.release()
        if not_a_model:
            shutil.rmtree(p.work, ignore_errors=True)
    shutil.rmtree(p.work, ignore_errors=True)     # after the release: Windows cannot delete a held lock
    return dest


def _install_locked(p: Plan, *, token: str | None, progress: ProgressFn | None,
                    cancel: CancelToken | None, weights: WeightPolicy) -> Path:
    dest = _unique(paths.models_dir() / p.name)
    files = p.work / "files"
    total = p.variant.size
    done_before = 0
    for f in p.variant.files:
        def relay(pr: Progress, base: int = done_before) -> None:
            if progress:
                progress(Progress(pr.stage, base + pr.done, total, pr.speed,
                                  pr.eta_s if pr.stage == "download" else None, pr.what))
        download_file(p.listing.repo, f, p.listing.revision, files / f.path, token=token,
                      progress=relay, cancel=cancel)
        done_before += f.size
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled; the download is kept (run it again to continue)")
    if p.variant.kind == "gguf":
        try:
            _convert(files / p.variant.files[0].path, dest, progress, cancel, weights)
        except HubError as exc:
            if isinstance(exc, Cancelled):
                raise
            raise type(exc)(f"{exc} (the download is kept: `amber-engine models remove {p.work.name}` "
                            "deletes it)") from None
    else:
        _assemble_onnx(p, files, dest, progress)
    _write_source(dest, p)
    return dest


def _convert(src: Path, dest: Path, progress: ProgressFn | None, cancel: CancelToken | None,
             weights: WeightPolicy) -> None:
    from engine.convert import FAST, ConversionCancelled, ModelImportError, convert_gguf

    def tick(done: int, total: int, what: str) -> None:
        if progress:
            progress(Progress("convert", done, total, what=what))
    try:
        convert_gguf(src, dest, weights=weights, progress=tick, cancel=cancel, accuracy_level=FAST)
    except ConversionCancelled:
        raise Cancelled("cancelled during conversion; the download is kept") from None
    except ModelImportError as exc:
        raise HubError(f"conversion failed: {exc}") from None
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno in (28, 122):
            raise DiskFull(f"the disk filled up during conversion ({exc.strerror})") from None
        raise HubError(f"conversion failed: {exc.strerror or exc}") from None


def _assemble_onnx(p: Plan, files: Path, dest: Path, progress: ProgressFn | None) -> None:
    """The graph becomes `model.onnx` at the folder's root, its data and the side files beside it.
    (External data is referenced by file name, so only the graph may be renamed.) The folder is
    renamed into place only once it loads."""
    tmp = dest.with_name(f".{dest.name}.assembling-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for f in p.variant.files:
            leaf = f.path.rsplit("/", 1)[-1]
            target = tmp / ("model.onnx" if leaf.endswith(".onnx") else leaf)
            os.replace(files / f.path, target)
        if not (tmp / "config.json").is_file():
            raise NotLoadable(f"{p.listing.repo}: the repo has no config.json next to the ONNX model; "
                              "nothing was installed")
        if progress:
            progress(Progress("check", 0, 1, what=dest.name))
        _check_loads(tmp, p.listing.repo)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if progress:
        progress(Progress("install", 1, 1, what=dest.name))


def _check_loads(folder: Path, repo: str) -> None:
    """Opens the folder as the chat would (CPU, one thread): a repo whose files are not a model
    Amber can run is refused here, not at the user's first message."""
    from engine.runtime.model import ModelLoadError, load_model
    try:
        model = load_model(folder, provider="cpu", threads=1, variant="fp32")
    except ModelLoadError as exc:
        why = str(exc).replace(str(folder) + os.sep, "").replace(str(folder), "the model folder")
        raise NotLoadable(f"{repo}: the downloaded model does not load ({why}); nothing was installed") from None
    del model


def _write_source(dest: Path, p: Plan) -> None:
    data = {"repo": p.listing.repo, "revision": p.listing.revision, "quant": p.variant.quant,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in p.variant.files]}
    atomic_write(dest / SOURCE_FILE, json.dumps(data, indent=1))


def _unique(dest: Path) -> Path:
    candidate, n = dest, 2
    while candidate.exists():
        candidate, n = dest.with_name(f"{dest.name}-{n}"), n + 1
    return candidate


# ---- list / remove ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Installed:
    name: str
    path: Path
    size: int
    source: str            # "repo (quant)" or ""


@dataclass(frozen=True)
class Pending:
    key: str
    path: Path
    size: int              # bytes downloaded so far


def _is_model_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any(p.suffix == ".onnx" for p in path.iterdir())
    except OSError:
        return False


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                pass
    return total


def list_installed() -> list[Installed]:
    root = paths.models_dir()
    out = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    for d in entries:
        if d.name.startswith(".") or not _is_model_dir(d):
            continue
        src = ""
        try:
            meta: Any = json.loads((d / SOURCE_FILE).read_text(encoding="utf-8"))
            src = f"{meta['repo']} ({meta['quant']})"
        except (OSError, ValueError, KeyError, TypeError):
            pass
        out.append(Installed(d.name, d, _du(d), src))
    return out


def list_pending() -> list[Pending]:
    root = downloads_root()
    try:
        return [Pending(d.name, d, _du(d)) for d in sorted(root.iterdir()) if d.is_dir()]
    except OSError:
        return []


def remove(name: str) -> Path:
    """Deletes an installed model folder (or, with a `.downloads/` key, a partial download)."""
    pending = {p.key: p.path for p in list_pending()}
    if name in pending:
        shutil.rmtree(pending[name])
        return pending[name]
    if not _NAME.match(name) or name in (".", ".."):
        raise HubError(f"'{name}' is not a model name")
    target = paths.models_dir() / name
    if not _is_model_dir(target) or target.is_symlink():
        raise HubError(f"no model named '{name}' in {paths.models_dir()}")
    try:
        shutil.rmtree(target)
    except OSError as exc:
        raise HubError(f"cannot remove {target}: {exc.strerror or exc}") from None
    return target
