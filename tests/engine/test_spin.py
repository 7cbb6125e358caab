"""ONNX Runtime intra-op spinning on CPU (issue 18): the policy engine/runtime/spin.py chooses, the
AMBER_ORT_SPIN override, and that the sessions Amber makes carry it (read back from ORT itself).

No speed figures here (bench/bench_spin.py, docs/BENCHMARKS.md): the tests read the options back
through `SessionOptions.get_session_config_entry` and check what a thread pool that does not spin
must do, burn no CPU while the session waits between runs."""
from __future__ import annotations

import resource
import time

import pytest

from engine.runtime import providers, spin
from engine.runtime.model import load_model
from engine.runtime.runner import Runner


def _entry(so, key: str) -> str | None:
    try:
        return so.get_session_config_entry(key)
    except RuntimeError:    # ORT: "SessionOptions does not have configuration with key: …"
        return None


def test_modes_map_to_ort_entries() -> None:
    assert spin.spin_entries("on") == {spin.ALLOW: "1"}
    assert spin.spin_entries("off") == {spin.ALLOW: "0"}
    auto = spin.spin_entries("auto")
    assert auto == spin.SETTINGS["auto"]
    assert auto[spin.ALLOW] == "1"                  # auto spins, but boundedly (see spin.py)
    assert int(auto[spin.DURATION]) > 0


@pytest.mark.parametrize(("value", "mode"), [("", "auto"), ("auto", "auto"), ("on", "on"), ("OFF", "off"),
                                             (" off ", "off"), ("1", "auto"), ("spin", "auto")])
def test_env_override(value: str, mode: str) -> None:
    assert spin.spin_mode({spin.SPIN_ENV: value}) == mode
    assert spin.spin_mode({}) == "auto"


@pytest.mark.parametrize("mode", ["auto", "on", "off"])
def test_cpu_session_options_carry_the_policy(mode: str, monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_ENV, mode)
    so = providers.session_options(2)
    for key in (spin.ALLOW, spin.DURATION, spin.BACKOFF, spin.STOP, spin.BLOCK):
        assert _entry(so, key) == spin.SETTINGS[mode].get(key), key


def test_gpu_sessions_keep_ort_defaults(monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_ENV, "off")
    so = providers.strict_session_options("CUDAExecutionProvider", 2)
    for key in (spin.ALLOW, spin.DURATION, spin.BACKOFF, spin.STOP, spin.BLOCK):
        assert _entry(so, key) is None, key


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_the_loaded_session_was_made_with_the_policy(tiny_dir, mode: str, monkeypatch) -> None:
    monkeypatch.setenv(spin.SPIN_ENV, mode)
    model = load_model(tiny_dir, provider="cpu", threads=2)
    so = model.session.get_session_options()
    for key, value in spin.SETTINGS[mode].items():
        assert _entry(so, key) == value, key
    assert so.intra_op_num_threads == 2


def _cpu_while_waiting(model, seconds: float) -> float:
    """Process CPU seconds spent while the main thread sleeps after a run (the pool's idle cost)."""
    runner = Runner(model)
    cache = runner.new_cache()
    runner.forward(cache, list(range(3, 60)))
    runner.forward(cache, [5])
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(seconds)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize("mode", ["auto", "off", "on"])
def test_an_idle_session_burns_no_cpu(tiny_dir, mode: str, monkeypatch) -> None:
    """Between replies a desktop app waits: its pool must not keep a core busy. ORT's default ("on")
    goes on spinning for milliseconds after a run — the contrast that shows the measurement sees a
    spinner; auto's spin is bounded to microseconds, off never spins."""
    monkeypatch.setenv(spin.SPIN_ENV, mode)
    model = load_model(tiny_dir, provider="cpu", threads=2)
    used = max(_cpu_while_waiting(model, 0.05) for _ in range(3))
    # CPU seconds in 50 ms of waiting: a blocked pool takes ~0.1 ms (the margin is for the
    # interpreter's own work, not a speed figure); ORT's default spinner took 14-27 ms here.
    if mode == "on":
        assert used > 0.002, used
    else:
        assert used < 0.005, used
