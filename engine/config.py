"""Every AMBER_* environment variable Amber reads, typed and documented, in one place.

`settings()` wraps the environment as it is at the call, and each property parses its variable
when it is read: nothing is cached at import, so a test's `monkeypatch.setenv` (or `--data-dir`,
which sets AMBER_HOME before the app starts) is seen by the next read. `settings(env)` reads a
given mapping instead (the hugepages re-exec inspects the environment it is about to pass on).

Nothing else in engine/ or app/ reads an AMBER_* variable; README.md ("Settings by environment")
lists them. The names are constants here so that the few writers (the re-exec's marks, `--data-dir`,
the server's spin preference) spell them the same way.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

HOME = "AMBER_HOME"
BUNDLED_MODELS = "AMBER_BUNDLED_MODELS"
KERNELS = "AMBER_KERNELS"
REQUIRE_KERNELS = "AMBER_REQUIRE_KERNELS"          # building: no C compiler is an error (installers, wheels)
NATIVE_ATTENTION = "AMBER_NATIVE_ATTENTION"
NATIVE_SWIGLU = "AMBER_NATIVE_SWIGLU"
BATCH_DECODE = "AMBER_BATCH_DECODE"
LOCK_WAIT_S = "AMBER_LOCK_WAIT_S"
ORT_SPIN = "AMBER_ORT_SPIN"
ORT_SPIN_US = "AMBER_ORT_SPIN_US"
NO_CUDA_PRELOAD = "AMBER_NO_CUDA_PRELOAD"
HUGEPAGES = "AMBER_HUGEPAGES"
NO_HUGEPAGES = "AMBER_NO_HUGEPAGES"
MALLOC_REEXEC = "AMBER_MALLOC_REEXEC"                # set by the hugepages re-exec in the new process
GLIBC_TUNABLES_BEFORE = "AMBER_GLIBC_TUNABLES_BEFORE"  # the user's GLIBC_TUNABLES, restored after it
HUB_MAX_ATTEMPTS = "AMBER_HUB_MAX_ATTEMPTS"
HUB_DEADLINE_S = "AMBER_HUB_DEADLINE_S"
API_KEYS = "AMBER_API_KEYS"
LAUNCHED_AT = "AMBER_LAUNCHED_AT"                    # a re-executed app launch counts from the first start
STARTUP_PROBE = "AMBER_STARTUP_PROBE"
RESOURCES = "AMBER_RESOURCES"
THEME = "AMBER_THEME"
SELFTEST_PROVIDER = "AMBER_SELFTEST_PROVIDER"
SELFTEST_TRACEBACK = "AMBER_SELFTEST_TRACEBACK"

KERNEL_MODES = ("auto", "native", "ort")
SPIN_MODES = ("auto", "on", "off", "bounded")
DEFAULT_LOCK_WAIT_S = 10.0


class SettingError(ValueError):
    """A variable holds a value its setting cannot take; the message names the variable and the value."""


class Settings:
    """The AMBER_* settings of one environment (by default the process's), parsed when read."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def _text(self, name: str) -> str:
        return self._env.get(name, "")

    def _not_zero(self, name: str) -> bool:
        """On unless the variable is "0" (surrounding spaces ignored)."""
        return self._text(name).strip() != "0"

    def _path(self, name: str) -> Path | None:
        text = self._text(name)
        return Path(text).expanduser() if text else None

    # ---- folders ---------------------------------------------------------------------------------
    @property
    def home(self) -> Path | None:
        """AMBER_HOME: the folder of all user data (chats, models, state); None: the platform's."""
        return self._path(HOME)

    @property
    def bundled_models(self) -> Path | None:
        """AMBER_BUNDLED_MODELS: read-only models shipped with an installed build."""
        return self._path(BUNDLED_MODELS)

    @property
    def resources(self) -> Path | None:
        """AMBER_RESOURCES: the GUI's icons and styles folder (default: the one beside the code)."""
        text = self._text(RESOURCES)
        return Path(text) if text else None

    # ---- what a conversion writes ------------------------------------------------------------------
    @property
    def kernels(self) -> str:
        """AMBER_KERNELS: "native" (Amber's GgufMatMul), "ort" (ONNX Runtime's ops) or "auto"
        (unset, empty or unknown: a warning names an unknown value)."""
        value = self._text(KERNELS).strip().lower() or "auto"
        if value not in KERNEL_MODES:
            log.warning("%s=%r is not one of %s; using auto", KERNELS, value, "/".join(KERNEL_MODES))
            return "auto"
        return value

    @property
    def require_kernels(self) -> bool:
        """AMBER_REQUIRE_KERNELS: "1" makes building the native kernels without a C compiler an error
        (engine/native/build.py exits 2, a wheel build fails), not a note: installers ship them."""
        return self._text(REQUIRE_KERNELS).strip() == "1"

    @property
    def native_attention(self) -> bool:
        """AMBER_NATIVE_ATTENTION: "0" keeps GroupQueryAttention in new native-form conversions."""
        return self._not_zero(NATIVE_ATTENTION)

    @property
    def native_swiglu(self) -> bool:
        """AMBER_NATIVE_SWIGLU: "0" keeps the unfused MLP in new native-form conversions."""
        return self._not_zero(NATIVE_SWIGLU)

    # ---- running a model ---------------------------------------------------------------------------
    @property
    def batch_decode(self) -> bool:
        """AMBER_BATCH_DECODE: "0" makes concurrent sessions take turns instead of one batched step."""
        return self._not_zero(BATCH_DECODE)

    @property
    def ort_spin(self) -> str:
        """AMBER_ORT_SPIN: ONNX Runtime's intra-op spinning on CPU, auto/on/off/bounded (anything else: auto)."""
        value = self._text(ORT_SPIN).strip().lower()
        return value if value in SPIN_MODES else "auto"

    @property
    def ort_spin_us(self) -> int | None:
        """AMBER_ORT_SPIN_US: the bounded spin's duration, 1-100000 µs; None when unset or out of range."""
        value = self._text(ORT_SPIN_US).strip()
        return int(value) if value.isascii() and value.isdigit() and 0 < int(value) <= 100_000 else None

    @property
    def no_cuda_preload(self) -> bool:
        """AMBER_NO_CUDA_PRELOAD: set (not "0"): the NVIDIA wheels' CUDA and cuDNN libraries are not
        preloaded (engine.base.cuda_libs), in an installed GPU build or a source install alike."""
        return self._text(NO_CUDA_PRELOAD).strip() not in ("", "0")

    @property
    def hugepages(self) -> bool:
        """AMBER_HUGEPAGES: "1" lets a source run re-execute itself with glibc's huge-page tunable."""
        return self._text(HUGEPAGES) == "1"

    @property
    def no_hugepages(self) -> bool:
        """AMBER_NO_HUGEPAGES: "1" never re-executes for huge pages (a built app does by default)."""
        return self._text(NO_HUGEPAGES) == "1"

    @property
    def reexecuted(self) -> bool:
        """AMBER_MALLOC_REEXEC (set by Amber): this process is the huge-page re-exec; never loop."""
        return bool(self._text(MALLOC_REEXEC))

    # ---- sessions, server, hub ---------------------------------------------------------------------
    @property
    def lock_wait_s(self) -> float:
        """AMBER_LOCK_WAIT_S: seconds a second process waits for a chat another one holds (default 10)."""
        try:
            return max(0.0, float(self._env.get(LOCK_WAIT_S, DEFAULT_LOCK_WAIT_S)))
        except ValueError:
            return DEFAULT_LOCK_WAIT_S

    @property
    def api_keys(self) -> list[str]:
        """AMBER_API_KEYS: comma-separated bearer keys the local server accepts (besides --api-key)."""
        return [k.strip() for k in self._text(API_KEYS).split(",") if k.strip()]

    def _number(self, name: str, *, integer: bool) -> float | None:
        text = self._text(name).strip()
        if not text:
            return None
        pattern = r"[0-9]{1,9}" if integer else r"[0-9]{1,9}(\.[0-9]{1,6})?"
        if not re.fullmatch(pattern, text) or (integer and int(text) < 1):
            kind = "a whole number of connections, at least 1" if integer else "a number of seconds"
            raise SettingError(f"{name}={text[:40]} is not {kind}")
        return float(text)

    @property
    def hub_max_attempts(self) -> int | None:
        """AMBER_HUB_MAX_ATTEMPTS: connections per downloaded file, at least 1; SettingError if malformed."""
        value = self._number(HUB_MAX_ATTEMPTS, integer=True)
        return None if value is None else int(value)

    @property
    def hub_deadline_s(self) -> float | None:
        """AMBER_HUB_DEADLINE_S: seconds in all per downloaded file; SettingError if malformed."""
        return self._number(HUB_DEADLINE_S, integer=False)

    # ---- the desktop app ---------------------------------------------------------------------------
    @property
    def theme(self) -> str | None:
        """AMBER_THEME: "light" or "dark" overrides the system's colour scheme; None otherwise."""
        value = self._text(THEME)
        return value if value in ("light", "dark") else None

    @property
    def startup_probe(self) -> bool:
        """AMBER_STARTUP_PROBE: set: print the time to a visible window, then close (packaging's timing)."""
        return bool(self._text(STARTUP_PROBE))

    @property
    def selftest_provider(self) -> str:
        """AMBER_SELFTEST_PROVIDER: the provider `amber --self-test` loads the model on (default auto)."""
        return self._env.get(SELFTEST_PROVIDER, "auto")

    @property
    def selftest_traceback(self) -> bool:
        """AMBER_SELFTEST_TRACEBACK: set: a failed self-test check prints its traceback."""
        return bool(self._text(SELFTEST_TRACEBACK))


def settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of `env`, by default of this process's environment as it is now."""
    return Settings(os.environ if env is None else env)


def take_launched_at(default: float) -> float:
    """AMBER_LAUNCHED_AT, removed from the environment (it concerns this launch only), else `default`."""
    return float(os.environ.pop(LAUNCHED_AT, default))
