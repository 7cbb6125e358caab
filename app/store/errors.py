"""Exceptions the store raises, with messages meant for the user."""
from __future__ import annotations

import re
from pathlib import Path


class StoreError(Exception):
    """The conversation database cannot be used; `reason` says why, `path` where it is."""

    def __init__(self, message: str, *, path: Path | str, reason: str) -> None:
        # One line, whatever it quotes (SQLite's own messages and file names can hold newlines).
        super().__init__(_one_line(message))
        self.path = Path(path)
        # One of: "locked", "read_only", "corrupt", "newer", "migration_failed", "io", "closed".
        self.reason = reason


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def _one_line(text: str) -> str:
    """`text` with every run of line breaks and other control characters made one space."""
    return _CONTROL.sub(" ", text).strip()


class NotFoundError(LookupError):
    """No conversation or message with that id (it may have been deleted)."""


_UNTOUCHED = "Amber has not changed it."


def locked(path: Path) -> StoreError:
    """Another program (perhaps another Amber) holds the database's write lock."""
    return StoreError(
        f"The conversation database at {path} is locked by another program, perhaps another "
        f"copy of Amber. Close it and start Amber again. {_UNTOUCHED}",
        path=path, reason="locked",
    )


def read_only(path: Path, detail: str = "") -> StoreError:
    """The file or its folder cannot be written."""
    extra = f" ({detail})" if detail else ""
    return StoreError(
        f"The conversation database at {path} is read-only{extra}. Amber needs to write both "
        f"the file and its folder; check their permissions and free disk space. {_UNTOUCHED}",
        path=path, reason="read_only",
    )


def corrupt(path: Path, detail: str = "") -> StoreError:
    """The file is not a SQLite database, or is damaged."""
    extra = f" ({detail})" if detail else ""
    return StoreError(
        f"The conversation database at {path} is damaged or is not an Amber database{extra}. "
        f"{_UNTOUCHED} Move it elsewhere to start with an empty history, or put back a backup "
        f"(files named {path.name}.backup-* next to it).",
        path=path, reason="corrupt",
    )


def newer(path: Path, revision: str) -> StoreError:
    """The schema was written by a newer Amber than this one."""
    return StoreError(
        f"The conversation database at {path} was written by a newer version of Amber (schema "
        f"revision {revision!r}). Update Amber to open it. {_UNTOUCHED}",
        path=path, reason="newer",
    )


def migration_failed(path: Path, backup: Path | None, detail: str) -> StoreError:
    """An upgrade of the schema failed (and was rolled back)."""
    where = f" A copy made before the upgrade is at {backup}." if backup else ""
    return StoreError(
        f"Upgrading the conversation database at {path} failed ({detail}); the upgrade was "
        f"rolled back.{where}",
        path=path, reason="migration_failed",
    )


_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column '([^']*)'")
# Errors that mean the file's contents are not what Amber wrote (a damaged or edited file).
_DAMAGE = ("malformed", "not a database", "no such table", "no such column", "no such index",
           "no such trigger", "no such module")


def from_sqlite(exc: BaseException, path: Path) -> StoreError:
    """Translate a sqlite3 (or SQLAlchemy-wrapped) error into a StoreError naming the file."""
    orig = getattr(exc, "orig", None) or exc
    name = getattr(orig, "sqlite_errorname", "") or ""
    text = str(orig)
    if isinstance(orig, UnicodeDecodeError):
        return corrupt(path, "damaged text (not UTF-8)")
    undecodable = _UNDECODABLE.search(text)
    if undecodable:   # the message quotes the damaged text itself: name the column only
        return corrupt(path, f"damaged text in column {undecodable.group(1)} (not UTF-8)")
    text = text if len(text) <= 300 else text[:297] + "..."
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return locked(path)
    if name.startswith("SQLITE_READONLY") or "readonly" in text or "read-only" in text:
        return read_only(path, text)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or any(d in text for d in _DAMAGE):
        return corrupt(path, text)
    if name.startswith("SQLITE_FULL"):
        return StoreError(f"The disk holding {path} is full ({text}).", path=path, reason="io")
    return StoreError(f"The conversation database at {path} could not be used: {text}.",
                      path=path, reason="io")
