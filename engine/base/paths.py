"""Every path Amber uses, in one place. `AMBER_HOME` overrides them all."""
from __future__ import annotations

import sys
from pathlib import Path

import platformdirs

from engine.config import settings

APP_NAME = "Amber"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def amber_home() -> Path:
    """Root of all user data: `$AMBER_HOME`, else the platform's user data directory."""
    override = settings().home
    if override:
        return override.resolve()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    return amber_home() / "models"


def default_model_dir() -> Path:
    return models_dir() / DEFAULT_MODEL_NAME


def state_dir() -> Path:
    """Engine state: session manifests and the KV block store."""
    return amber_home() / "state"


def database_path() -> Path:
    return amber_home() / "amber.sqlite3"


def downloads_dir() -> Path:
    """Wheel cache for `fetch-default` (the only thing Amber ever downloads, at install time)."""
    return amber_home() / "downloads"


def settings_path() -> Path:
    return amber_home() / "settings.json"


def mcp_config_path() -> Path:
    """The MCP servers the desktop window offers tools from (LM Studio's mcp.json format)."""
    return amber_home() / "mcp.json"


def bundled_models_dir() -> Path | None:
    """Read-only models shipped with an installed build: `$AMBER_BUNDLED_MODELS`, else `models/`
    inside a PyInstaller bundle (`sys._MEIPASS`); None when running from source."""
    override = settings().bundled_models
    if override:
        return override
    base = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and base and (Path(base) / "models").is_dir():
        return Path(base) / "models"
    return None
