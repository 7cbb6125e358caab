"""Bad ai.amber.Attention nodes (attributes from an untrusted file) and bad inputs (lengths beyond
the KV capacity, negative, mismatched shapes): one-line ONNX Runtime errors, never a crash. All
cases run in one child process (tests/support/attn_hostile.py), so a crash is a signal there."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.attn_hostile import CASES

REPO = Path(__file__).resolve().parents[3]
ORT_ERRORS = {"InvalidArgument", "RuntimeException", "InvalidGraph", "Fail"}


@pytest.fixture(scope="module")
def results(native_lib) -> dict[str, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AMBER_KERNELS", None)
    proc = subprocess.run([sys.executable, "-m", "tests.support.attn_hostile"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"child exited {proc.returncode} (negative: a signal)\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_node_or_input_is_a_one_line_ort_error(results, case):
    result = results[case]
    assert result["phase"] in ("create", "run"), f"{case}: no error at all"
    assert result["error"] in ORT_ERRORS, result
    assert CASES[case][0] in result["message"], result["message"]
    assert "\n" not in result["message"].strip()


def test_bad_attributes_fail_when_the_session_is_made(results):
    """Attributes are checked once, when the kernel is made: a bad file fails at load, not mid-chat."""
    for case in ("heads_not_multiple", "heads_zero", "interleaved_rotary", "scale_nan", "window_negative"):
        assert results[case]["phase"] == "create", case
