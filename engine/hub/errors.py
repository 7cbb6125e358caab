"""What can go wrong while getting a model, each as one line a user can act on."""
from __future__ import annotations


class HubError(Exception):
    """A Hub operation failed; `str()` is one line naming the cause (CLI: exit 2)."""


class OfflineError(HubError):
    """No network (offline mode, or the endpoint cannot be reached)."""


class AuthRequired(HubError):
    """The repo is gated or private: a Hugging Face token is needed (or the one given is refused)."""


class NotFound(HubError):
    """No such repo, revision or file."""


class ChecksumMismatch(HubError):
    """The downloaded bytes do not have the SHA-256 the Hub lists; nothing was kept."""


class DiskFull(HubError):
    """Not enough free space for the download or the conversion."""


class Cancelled(HubError):
    """The caller cancelled; a partial download is kept to resume later."""
