"""The model library: search the Hugging Face Hub, download (resumable, verified), convert, list, remove.

No Qt here; the GUI (app/gui/model_library.py) and the CLI (engine/cli/models.py) both use it.
"""
from __future__ import annotations

from .catalog import Recommended, recommended, supported_architectures
from .client import is_offline, resolve_token, store_token, stored_token
from .download import Progress, download_file
from .errors import (AuthRequired, Cancelled, ChecksumMismatch, DiskFull, GaveUp, HubError, NotFound, NotLoadable,
                     OfflineError)
from .fit import FITS, TIGHT, TOO_LARGE, Fit, estimate, human
from .install import Plan, install, list_installed, list_pending, plan, remove
from .search import HubFile, RepoFiles, RepoHit, Variant, quant_of, repo_files, search

__all__ = ["Recommended", "recommended", "supported_architectures", "is_offline", "resolve_token",
           "store_token", "stored_token", "Progress", "download_file", "AuthRequired", "Cancelled",
           "ChecksumMismatch", "DiskFull", "GaveUp", "HubError", "NotFound", "NotLoadable", "OfflineError",
           "FITS", "TIGHT",
           "TOO_LARGE", "Fit", "estimate", "human", "Plan", "install", "list_installed", "list_pending",
           "plan", "remove", "HubFile", "RepoFiles", "RepoHit", "Variant", "quant_of", "repo_files", "search"]
