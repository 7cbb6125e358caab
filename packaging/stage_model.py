"""Copies the converted default model into the build tree, ready to ship read-only.

    python packaging/stage_model.py SRC_MODEL_DIR DEST_MODEL_DIR [EPOCH]
    python packaging/stage_model.py --restamp BUNDLE_DIR EPOCH   (after PyInstaller, which copies
                                                                  data files with new mtimes)

Every file gets the same whole-second mtime (EPOCH, default $SOURCE_DATE_EPOCH or now) and mode
0644, and `amber_fingerprint.json` is written for those stamps. tar, dpkg, Inno Setup and a .dmg
keep whole-second mtimes, so an installed model's fingerprint cache stays valid and the app never
has to hash 116 MB at start (it could not write the cache into a read-only /opt/amber anyway).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.convert import default_model  # noqa: E402
from engine.onnx.fingerprint import CACHE_FILE, model_fingerprint  # noqa: E402
from engine.runtime.model import find_graph  # noqa: E402


def stage(src: Path, dest: Path, epoch: int) -> str:
    if not default_model.is_ready(src):
        raise SystemExit(f"{src}: not a prepared default model (run `amber-engine fetch-default`)")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name != CACHE_FILE and not f.name.endswith(".tmp"):
            shutil.copyfile(f, dest / f.name)
    for f in dest.iterdir():
        os.chmod(f, 0o644)
        os.utime(f, (epoch, epoch))
    fp = model_fingerprint(dest, find_graph(dest))
    os.chmod(dest / CACHE_FILE, 0o644)
    os.utime(dest / CACHE_FILE, (epoch, epoch))
    return fp


def restamp(bundle: Path, epoch: int) -> Path:
    """Puts the staged times back on the model folder inside a built bundle and checks the cache."""
    import json

    found = [p.parent for p in bundle.rglob(CACHE_FILE)]
    if len(found) != 1:
        raise SystemExit(f"{bundle}: expected one bundled model, found {len(found)}")
    folder = found[0]
    for f in folder.iterdir():
        os.utime(f, (epoch, epoch))
    stamp = json.loads((folder / CACHE_FILE).read_text())["stamp"]
    for name, size, mtime in stamp:
        st = (folder / name).stat()
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            raise SystemExit(f"{folder / name}: does not match {CACHE_FILE}")
    return folder


if __name__ == "__main__":
    if sys.argv[1] == "--restamp":
        print(f"restamped {restamp(Path(sys.argv[2]), int(sys.argv[3]))}")
        sys.exit(0)
    src, dest = Path(sys.argv[1]), Path(sys.argv[2])
    epoch = int(sys.argv[3]) if len(sys.argv) > 3 else int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    print(f"staged {src.name}: fingerprint {stage(src, dest, epoch)}")
