"""Writing the app's small JSON files: temp file in the same folder, fsync, rename, fsync the folder."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomically(path: Path, text: str, prefix: str) -> None:
    """Replaces `path` with `text` so a crash leaves the old file or the new one, never a mix.

    The temp file is created with mode 0600 (mkstemp), and the rename keeps that mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass    # Windows cannot open a folder; its rename is durable once the file is flushed
