"""ONNX Runtime intra-op spinning on CPU: the policy engine/runtime/host/spin.py chooses, the
AMBER_ORT_SPIN override, and that the sessions Amber makes carry it (read back from ORT itself).

No speed or CPU figures here: the tests read the options back through
`SessionOptions.get_session_config_entry` (what ORT will do with them is ORT's). What the pool costs
while a session waits between runs under each mode is measured by `python -m bench.suites.spin idle`;
speed under competing load by `python -m bench spin` (bench/suites/spin.py, docs/BENCHMARKS.md)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engine.runtime import providers
from engine.runtime.host import spin
from engine.runtime.model import load_model


def _entry(so, key: str) -> str | None:
    try:
        return so.get_session_config_entry(key)
    except RuntimeError:    # ORT: "SessionOptions does not have configuration with key: …"
        return None


@pytest.fixture(autouse=True)
def _no_duration_override(monkeypatch):
    monkeypatch.delenv(spin.SPIN_US_ENV, raising=False)


@pytest.mark.parametrize(("value", "us"), [("500", 500), (" 20 ", 20), ("100000", 100000), ("0", spin.SPIN_US),
                                           ("-5", spin.SPIN_US), ("abc", spin.SPIN_US), ("100001", spin.SPIN_US),
                                           ("²", spin.SPIN_US)])
def test_the_bounded_duration_can_be_set(value: str, us: int, monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_US_ENV, value)
    assert spin.spin_entries("bounded")[spin.DURATION] == str(us)
    assert spin.DURATION not in spin.spin_entries("on")      # only the bounded spin has a duration


@pytest.fixture
def quiet(monkeypatch):
    """This machine as auto sees it: quiet (load 0.3 on 4 CPUs), whatever the real load is now."""
    monkeypatch.setattr(spin, "machine_load", lambda: (0.3, 4))


def test_modes_map_to_ort_entries() -> None:
    assert spin.spin_entries("on") == {spin.ALLOW: "1"}
    assert spin.spin_entries("off") == {spin.ALLOW: "0"}
    bounded = spin.spin_entries("auto", load=(0.3, 4))
    assert bounded == {spin.ALLOW: "1", spin.DURATION: str(spin.SPIN_US)}
    assert 0 < spin.SPIN_US <= 1000                 # bounded: microseconds, not ORT's long default


@pytest.mark.parametrize(("load", "cpus", "setting"), [(0.0, 2, "bounded"), (2.0, 2, "bounded"), (3.9, 2, "bounded"),
                                                       (4.0, 2, "off"), (8.0, 2, "off"), (15.0, 8, "bounded"),
                                                       (16.0, 8, "off"), (1.5, 1, "bounded"), (2.0, 1, "off")])
def test_auto_stops_spinning_on_an_oversubscribed_machine(load: float, cpus: int, setting: str) -> None:
    assert spin.auto_setting(load, cpus) == setting
    assert spin.spin_entries("auto", load=(load, cpus)) == spin.SETTINGS[setting]


def test_machine_load_is_this_machines() -> None:
    load, cpus = spin.machine_load()
    assert load >= 0.0
    assert 1 <= cpus <= (os.cpu_count() or 1)


def test_machine_load_leaves_out_amber_itself(monkeypatch) -> None:
    """A model reloaded after a long reply: Amber's own decoding is in the load average, not other load."""
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 2.0, 1.0))
    monkeypatch.setattr(spin, "_own_load", lambda: 1.5)
    assert spin.machine_load()[0] == pytest.approx(1.0)
    monkeypatch.setattr(spin, "_own_load", lambda: 4.0)
    assert spin.machine_load()[0] == 0.0


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc (Linux)")
def test_own_load_grows_with_this_processs_cpu() -> None:
    before = spin._own_load()
    start = time.process_time()
    while time.process_time() - start < 0.3:   # CPU work of this process (not wall time)
        pass
    after = spin._own_load()
    assert 0.0 <= before < after <= (os.cpu_count() or 1)


@pytest.mark.parametrize(("value", "mode"), [("", "auto"), ("auto", "auto"), ("on", "on"), ("OFF", "off"),
                                             (" off ", "off"), ("bounded", "bounded"), ("1", "auto"),
                                             ("spin", "auto")])
def test_env_override(value: str, mode: str) -> None:
    assert spin.spin_mode({spin.SPIN_ENV: value}) == mode
    assert spin.spin_mode({}) == "auto"


@pytest.mark.parametrize(("mode", "setting"), [("auto", "bounded"), ("", "bounded"), ("on", "on"), ("off", "off")])
def test_cpu_session_options_carry_the_policy(mode: str, setting: str, quiet, monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_ENV, mode)
    so = providers.session_options(2)
    for key in (spin.ALLOW, spin.DURATION, spin.BACKOFF, spin.STOP, spin.BLOCK):
        assert _entry(so, key) == spin.SETTINGS[setting].get(key), key


def test_auto_on_a_busy_machine_does_not_spin(monkeypatch) -> None:
    monkeypatch.delenv(spin.SPIN_ENV, raising=False)
    monkeypatch.setattr(spin, "machine_load", lambda: (6.0, 2))   # 3× oversubscribed
    assert _entry(providers.session_options(2), spin.ALLOW) == "0"
    monkeypatch.setenv(spin.SPIN_ENV, "on")      # the override wins over the load
    assert _entry(providers.session_options(2), spin.ALLOW) == "1"


def test_gpu_sessions_keep_ort_defaults(monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_ENV, "off")
    so = providers.strict_session_options("CUDAExecutionProvider", 2)
    for key in (spin.ALLOW, spin.DURATION, spin.BACKOFF, spin.STOP, spin.BLOCK):
        assert _entry(so, key) is None, key


@pytest.mark.parametrize(("mode", "setting"), [("auto", "bounded"), ("off", "off"), ("on", "on")])
def test_the_loaded_session_was_made_with_the_policy(tiny_dir, mode: str, setting: str, quiet, monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_ENV, mode)
    model = load_model(tiny_dir, provider="cpu", threads=2)
    so = model.session.get_session_options()
    for key, value in spin.SETTINGS[setting].items():
        assert _entry(so, key) == value, key
    assert so.intra_op_num_threads == 2


def test_a_serving_process_spins_longer_unless_told_otherwise() -> None:
    env: dict[str, str] = {}
    spin.prefer_server_spin(env)
    assert spin.spin_us(env) == spin.SERVE_SPIN_US != spin.SPIN_US
    mine = {spin.SPIN_US_ENV: "80"}
    spin.prefer_server_spin(mine)
    assert spin.spin_us(mine) == 80


def test_serve_sets_the_server_spin_before_loading_the_model(monkeypatch) -> None:
    import argparse

    from engine.cli import serve
    from engine.runtime import model as model_module
    monkeypatch.setenv(spin.SPIN_US_ENV, "1")      # recorded, so that what serve sets is undone after
    monkeypatch.delenv(spin.SPIN_US_ENV)
    seen: list[int] = []

    def refuse(*args, **kwargs):
        seen.append(spin.spin_us())
        raise model_module.ModelLoadError("stop here")
    monkeypatch.setattr(model_module, "load_model", refuse)
    args = argparse.Namespace(api_key=None, host="127.0.0.1", max_prompt_tokens=None, model="x", provider="cpu")
    with pytest.raises(Exception, match="stop here"):
        serve.cmd_serve(args)
    assert seen == [spin.SERVE_SPIN_US]
