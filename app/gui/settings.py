"""Application settings, persisted as JSON at `engine.base.paths.settings_path()`.

Written atomically (temp file + fsync + rename); unknown keys are kept, bad values fall back to
the defaults, so a hand-edited or older file never stops the app from starting.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.base.safefs import atomic_write
from engine.api import KV_STORE_MODEL, KV_STORES, SamplingParams

log = logging.getLogger(__name__)

PROVIDERS = ("auto", "cpu", "gpu")
THEMES = ("system", "light", "dark")


# What `model_defaults` leaves to the model's own generation_config.json.
MODEL_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty", "min_p")


@dataclass
class Sampling:
    # The numbers sent when the user sets their own: the default model's generation_config.json,
    # chosen by measurement over everyday prompts (bench/suites/defaults.py, docs/BENCHMARKS.md
    # "Sampling defaults for the default model").
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    repetition_penalty: float = 1.1
    min_p: float = 0.05
    max_new_tokens: int = 512
    seed: int | None = None
    # The default: each model samples with its own generation_config.json (the engine fills in the
    # fields left None), so an imported model is not run with the default model's numbers.
    model_defaults: bool = True

    def to_params(self, overrides: dict[str, Any] | None = None) -> SamplingParams:
        """The engine's parameters; `overrides` (a chat's own settings) are explicit numbers."""
        values = asdict(self)
        use_model = values.pop("model_defaults")
        own = {k: v for k, v in (overrides or {}).items() if k in values and v is not None}
        if own:
            use_model = False
        values.update(own)
        if use_model:
            for key in MODEL_SAMPLING_FIELDS:
                values[key] = None
        return SamplingParams(**values)


@dataclass
class Settings:
    system_prompt: str = "You are a helpful assistant."
    sampling: Sampling = field(default_factory=Sampling)
    provider: str = "auto"                 # auto | cpu | gpu
    memory_budget_mb: int = 1024           # KV kept in memory (all regular chats together)
    disk_budget_mb: int = 4096             # shared on-disk prefix cache (pinned chats not counted)
    cache_max_age_days: int = 14
    kv_store: str = "model"                # saved KV: "model" (lossless) | "float16" (half the disk)
    model: str = ""                        # folder name under models/, "" = the default model
    overflow: str = "truncate_middle"      # a long chat's default: truncate_middle | rolling | stop
    theme: str = "system"                  # system | light | dark
    api_server: bool = False               # the local API server is on (started again on launch)
    api_port: int = 8080                   # its port on 127.0.0.1
    api_key: str = ""                      # the bearer key its clients send ("" = none)
    mcp_tools: bool = True                 # offer the MCP servers' tools (mcp.json) to models that take them
    last_dir: str | None = None            # the folder the last file dialog was in
    last_chat_id: str | None = None
    window_geometry: str | None = None     # base64 of QWidget.saveGeometry()
    window_state: str | None = None
    splitter_state: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    # --- persistence -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> "Settings":
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            log.warning("settings file %s unreadable (%s); using defaults", path, exc)
            return cls()
        return cls.from_dict(raw if isinstance(raw, dict) else {})

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Settings":
        s = cls()
        known = {f.name for f in fields(cls)}
        for f in fields(cls):
            if f.name not in raw or f.name in ("sampling", "extra"):
                continue
            value = raw[f.name]
            default = getattr(s, f.name)
            if default is None or isinstance(value, type(default)) or (
                    isinstance(default, float) and isinstance(value, int)):
                setattr(s, f.name, value)
        if isinstance(raw.get("sampling"), dict):
            sd = Sampling()
            for f in fields(Sampling):
                value = raw["sampling"].get(f.name, getattr(sd, f.name))
                default = getattr(sd, f.name)
                if value is None and f.name == "seed":
                    setattr(sd, f.name, None)
                elif f.name == "model_defaults":
                    if isinstance(value, bool):
                        sd.model_defaults = value
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    setattr(sd, f.name, type(default)(value) if default is not None else int(value))
            s.sampling = sd
        if s.provider not in PROVIDERS:
            s.provider = "auto"
        if s.kv_store not in KV_STORES:
            s.kv_store = KV_STORE_MODEL
        if s.overflow not in ("truncate_middle", "rolling", "stop"):
            s.overflow = "truncate_middle"
        if s.theme not in THEMES:
            s.theme = "system"
        if isinstance(s.api_port, bool) or not 1024 <= s.api_port <= 65535:
            s.api_port = Settings.api_port
        if s.last_dir is not None and not isinstance(s.last_dir, str):
            s.last_dir = None
        s.extra = {k: v for k, v in raw.items() if k not in known}
        return s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        return {**extra, **d}

    def save(self, path: Path) -> None:
        atomic_write(path, json.dumps(self.to_dict(), indent=2, sort_keys=True), private=True, parents=True)

    def copy(self) -> "Settings":
        return Settings.from_dict(json.loads(json.dumps(self.to_dict())))
