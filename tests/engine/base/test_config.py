"""engine/config.py: the one reader of AMBER_* variables, read when used (not at import)."""
from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from engine import config
from engine.base import paths
from engine.native import mode

ROOT = Path(__file__).resolve().parents[3]


def test_a_variable_set_after_import_is_seen_by_the_next_read(monkeypatch, tmp_path):
    monkeypatch.setenv(config.KERNELS, "ort")
    assert mode() == "ort"
    monkeypatch.setenv(config.KERNELS, " Native ")
    assert mode() == "native"
    monkeypatch.setenv(config.HOME, str(tmp_path))
    assert paths.amber_home() == tmp_path.resolve()


def test_an_unknown_kernels_value_is_auto_and_named_in_a_warning(monkeypatch, caplog):
    monkeypatch.setenv(config.KERNELS, "fastest")
    with caplog.at_level(logging.WARNING, logger="engine.config"):
        assert config.settings().kernels == "auto"
    assert "AMBER_KERNELS='fastest'" in caplog.text


@pytest.mark.parametrize(("env", "attempts", "deadline"), [
    ({}, None, None),
    ({config.HUB_MAX_ATTEMPTS: " 3 ", config.HUB_DEADLINE_S: "1.5"}, 3, 1.5),
])
def test_hub_bounds_parse(env, attempts, deadline):
    s = config.settings(env)
    assert (s.hub_max_attempts, s.hub_deadline_s) == (attempts, deadline)


@pytest.mark.parametrize(("name", "value"), [(config.HUB_MAX_ATTEMPTS, "0"), (config.HUB_MAX_ATTEMPTS, "2.5"),
                                             (config.HUB_DEADLINE_S, "-1"), (config.HUB_DEADLINE_S, "soon")])
def test_a_malformed_hub_bound_is_an_error_naming_the_variable(name, value):
    with pytest.raises(config.SettingError, match=f"^{name}={re.escape(value)} is not "):
        getattr(config.settings({name: value}), "hub_max_attempts" if "ATTEMPTS" in name else "hub_deadline_s")


def test_flags_and_numbers_keep_their_defaults_and_bounds():
    empty = config.settings({})
    assert (empty.native_attention, empty.native_swiglu, empty.batch_decode) == (True, True, True)
    off = config.settings({config.NATIVE_ATTENTION: " 0", config.NATIVE_SWIGLU: "0", config.BATCH_DECODE: "0"})
    assert (off.native_attention, off.native_swiglu, off.batch_decode) == (False, False, False)
    assert empty.lock_wait_s == config.DEFAULT_LOCK_WAIT_S
    assert config.settings({config.LOCK_WAIT_S: "-3"}).lock_wait_s == 0.0
    assert config.settings({config.LOCK_WAIT_S: "x"}).lock_wait_s == config.DEFAULT_LOCK_WAIT_S
    assert config.settings({config.ORT_SPIN_US: "100001"}).ort_spin_us is None
    assert config.settings({config.ORT_SPIN: "OFF "}).ort_spin == "off"
    assert config.settings({config.API_KEYS: " a, ,b "}).api_keys == ["a", "b"]
    assert config.settings({config.THEME: "blue"}).theme is None
    assert config.settings({config.NO_CUDA_PRELOAD: "1"}).no_cuda_preload
    assert not config.settings({config.NO_CUDA_PRELOAD: " 0"}).no_cuda_preload
    assert not config.settings({}).no_cuda_preload


def test_only_the_settings_module_reads_amber_variables():
    """No other module of engine/ or app/ reads os.environ / getenv with an AMBER_ name or constant."""
    read = re.compile(r"(environ\.get|getenv|environ\[)\(?\s*[\"']AMBER_")
    offenders = [str(p.relative_to(ROOT)) for folder in ("engine", "app") for p in (ROOT / folder).rglob("*.py")
                 if p.name != "config.py" and read.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_every_variable_is_listed_in_the_readme():
    names = set(re.findall(r"\"(AMBER_[A-Z_]+)\"", (ROOT / "engine" / "config.py").read_text(encoding="utf-8")))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Settings by environment", 1)[1].split("\n## ", 1)[0]
    assert names and sorted(n for n in names if f"`{n}`" not in section) == []
