"""Opening, creating and removing files of Amber's folders without trusting what is on disk.

Names come from manifests and file headers (untrusted), so every path is checked to lie inside its
root with no symlink on the way, and only regular files are opened: a FIFO, a device or a
directory where a KV file should be gives an error at once instead of a hang or a traceback.
Every folder Amber writes into is made by `make_folder`, which refuses a symlink (or anything but
a plain folder) anywhere below the root, so nothing is ever written through a link out of it.
Every file Amber replaces is written by `atomic_write`: readers see the old file or the new one.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO, Iterable

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)      # not on Windows (no symlinks by default there)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)
# Reads leave the access time alone (Linux; the owner only, else EPERM and a plain open): Amber
# uses mtimes, and a temporary chat's reads of shared blocks must leave no trace at all.
_NOATIME = getattr(os, "O_NOATIME", 0)


class UnsafePathError(OSError):
    """The path leaves its root, goes through a symlink, or is not a regular file."""


def check_inside(root: Path, path: Path) -> None:
    """Raises UnsafePathError unless `path` is below `root` (lexically, no `..`) and no component
    between them is a symlink. `root` itself is trusted (the user chose it)."""
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        raise UnsafePathError(f"{path.name}: outside the state folder") from None
    if not rel.parts or ".." in rel.parts:
        raise UnsafePathError(f"{path.name}: outside the state folder")
    here = Path(root)
    for part in rel.parts[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return              # nothing below it exists: nothing to follow
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"{path.name}: {part} is not a plain folder (a symlink?)")


def make_folder(root: Path, folder: Path) -> Path:
    """Creates `folder` and the folders between `root` and it, each a plain folder; returns
    `folder`. UnsafePathError when one of them is a symlink or not a folder, or `folder` is not
    below `root`. `root` itself is made as it is (the user chose it)."""
    root, folder = Path(root), Path(folder)
    try:
        rel = Path(os.path.normpath(folder)).relative_to(os.path.normpath(root))
    except ValueError:
        raise UnsafePathError(f"{folder.name}: outside its folder") from None
    if ".." in rel.parts:
        raise UnsafePathError(f"{folder.name}: outside its folder")
    root.mkdir(parents=True, exist_ok=True)
    here = root
    for i, part in enumerate(rel.parts):
        here = here / part
        try:
            os.mkdir(here)
        except FileExistsError:
            pass            # made before (or just now, by another process): checked below
        if not stat.S_ISDIR(os.lstat(here).st_mode):
            raise UnsafePathError(f"{Path(*rel.parts[:i + 1]).as_posix()} is not a plain folder (a symlink?)")
    return folder


def open_new(path: Path, private: bool = False) -> BinaryIO:
    """Opens `path` for writing from empty (a temp file): never through a symlink at that name,
    never blocking on a FIFO there. `private`: owner-only (0600), whatever was there before."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _NONBLOCK | _BINARY,
                 0o600 if private else 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"{path.name}: not a regular file")
        if private and hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)          # a temp file left by a crash keeps its mode through O_TRUNC
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def temp_path(path: Path) -> Path:
    """A fresh temp file name beside `path`, `.<name>.<random>.<pid>.tmp`: two writers of one file
    (threads too) never share one, and a leftover names its writer's pid (crash clean-up keeps a
    live writer's)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.{os.getpid()}.tmp")


def fsync_folder(folder: Path) -> None:
    """Makes a rename in `folder` durable; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str | Iterable[bytes | memoryview], *, private: bool = False,
                 parents: bool = False) -> int:
    """Replaces `path` with `data` (bytes, UTF-8 text, or chunks): a temp file in the same folder,
    fsync, rename, fsync the folder, so readers and a crash see the old file or the new one, never
    a mix. The temp file is never opened through a symlink; `private` makes the file owner-only;
    `parents` creates the folder first. Returns the bytes written."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [data.encode("utf-8")] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
    tmp = temp_path(path)
    written = 0
    try:
        with open_new(tmp, private) as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)
    return written


def is_regular(path: Path) -> bool:
    """A regular file (not a symlink, FIFO, device or folder)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def open_regular(path: Path, root: Path | None = None) -> BinaryIO:
    """Opens a regular file for reading: never through a symlink, never blocking on a FIFO."""
    if root is not None:
        check_inside(root, path)
    flags = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _BINARY
    try:
        fd = os.open(path, flags | _NOATIME)
    except PermissionError:
        if not _NOATIME:
            raise
        fd = os.open(path, flags)     # not the file's owner: O_NOATIME is refused
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path.name}: not a regular file")
        if _NONBLOCK:
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
        f.amber_path = str(path)      # type: ignore[attr-defined]  # its name is the fd number
        return f
    except BaseException:
        os.close(fd)
        raise


def unlink_inside(root: Path, path: Path, empty_dirs: bool = False) -> bool:
    """Removes `path` (a file or a symlink itself, never its target) if it lies inside `root`;
    with `empty_dirs`, an empty folder there too. False when it was not there or is not safe to
    remove (a folder with contents, outside the root)."""
    try:
        check_inside(root, path)
        if stat.S_ISDIR(os.lstat(path).st_mode):
            if not empty_dirs:
                return False
            os.rmdir(path)
            return True
        os.unlink(path)
    except OSError:
        return False
    return True
