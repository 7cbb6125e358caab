"""`amber --self-test` in development: `run_self_test()` in a subprocess, over a scratch data folder
that holds (a link to) the converted default model. Needs the real model: marked slow."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = "SmolLM2-135M-Instruct"


def _dev_model() -> Path | None:
    homes = [os.environ.get("AMBER_TEST_HOME"), str(REPO / ".amber-dev")]
    for home in filter(None, homes):
        folder = Path(home) / "models" / MODEL
        if (folder / "model.onnx").is_file():
            return folder
    return None


def _run(home: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")}
    env.update({"AMBER_HOME": str(home), "QT_QPA_PLATFORM": "offscreen", "AMBER_SELFTEST_PROVIDER": "cpu"})
    env.update(extra_env or {})
    code = textwrap.dedent("""
        import sys
        from app.selftest import run_self_test
        sys.exit(run_self_test())
    """)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_self_test_passes_with_the_default_model(tmp_path: Path) -> None:
    model = _dev_model()
    if model is None:
        pytest.skip("the converted default model is absent (make default-model)")
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / MODEL).symlink_to(model, target_is_directory=True)
    proc = _run(home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for step in ("data directory", "qt", "model", "generate", "pin and resume"):
        assert f"ok    {step}" in out, out
    assert "resumed from disk" in out
    assert out.rstrip().splitlines()[-1].startswith("PASSED")
    # the scratch state is gone; the database stays (it is the user's real data folder)
    assert not list(home.glob(".selftest-*"))
    assert (home / "amber.sqlite3").is_file()


@pytest.mark.slow
def test_self_test_finds_a_bundled_model(tmp_path: Path) -> None:
    """An installed build's read-only model folder (AMBER_BUNDLED_MODELS stands in for the bundle)."""
    model = _dev_model()
    if model is None:
        pytest.skip("the converted default model is absent (make default-model)")
    bundled = tmp_path / "bundle" / "models"
    bundled.mkdir(parents=True)
    (bundled / MODEL).symlink_to(model, target_is_directory=True)
    proc = _run(tmp_path / "home", {"AMBER_BUNDLED_MODELS": str(bundled)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(bundled," in proc.stdout


def test_self_test_fails_clearly_without_a_model(tmp_path: Path) -> None:
    proc = _run(tmp_path / "home", {"AMBER_BUNDLED_MODELS": str(tmp_path / "nothing")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  model" in proc.stdout
    assert "the default model is not prepared" in proc.stdout
    assert "SKIP  generate" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("FAILED")
