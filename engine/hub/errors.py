"""What can go wrong while getting a model, each as one line a user can act on."""
from __future__ import annotations

from engine.base.oneline import one_line


class HubError(Exception):
    """A Hub operation failed; `str()` is one line naming the cause (CLI: exit 2). Messages quote
    names the Hub sent (repo ids, file names): their control characters are escaped here, so a
    message stays one line and cannot drive the terminal."""

    def __init__(self, message: object = "") -> None:
        super().__init__(one_line(str(message)))


class OfflineError(HubError):
    """No network (offline mode, or the endpoint cannot be reached)."""


class GaveUp(OfflineError):
    """The server kept stalling or dropping the connection past the attempt or time bound; the
    partial download is kept to resume later."""


class AuthRequired(HubError):
    """The repo is gated or private: a Hugging Face token is needed (or the one given is refused)."""


class NotFound(HubError):
    """No such repo, revision or file."""


class ChecksumMismatch(HubError):
    """The downloaded bytes do not have the SHA-256 the Hub lists; nothing was kept."""


class NotLoadable(HubError):
    """The downloaded files are not a model Amber can load; nothing was installed or kept."""


class DiskFull(HubError):
    """Not enough free space for the download or the conversion."""


class Cancelled(HubError):
    """The caller cancelled; a partial download is kept to resume later."""
