"""bench batch's native-op table: it times the real GgufMatMul for 1, 2 and 4 rows and the section
renders those rows (small shapes here; the bench runs the models' own)."""
from __future__ import annotations

import pytest

from bench.suites import batch as bench_batch
from bench.harness import common


@pytest.fixture
def small_shapes(monkeypatch):
    monkeypatch.setattr(bench_batch, "NATIVE_MATMULS", (("tiny Q4_1", 64, 96, 3), ("tiny Q8_0", 96, 64, 8)))


def _result(native: list) -> dict:
    facts = common.machine_facts()
    model = {"label": "m", "reps": 1, "n_new": 4, "raw": {"ms_1": 1.0, "ms_4": 2.0, "ratio": 2.0},
             "median_tok_s": {f"{n}_batched": 10.0 * n for n in bench_batch.COUNTS},
             "rows_per_batch": {}, "ratio_batched": {n: float(n) for n in bench_batch.COUNTS},
             "ratio_turns": {n: 1.0 for n in bench_batch.COUNTS}}
    return {"models": [model], "server": None, "matmuls": [], "native_matmuls": native, "facts": facts,
            "load_before": 0.0, "features": "avx2", "quick": True}


def test_native_rows_are_timed_and_rendered(native_on, small_shapes):
    rows = bench_batch.native_matmul_rows(blocks=1, per_block=2)
    assert [r["label"] for r in rows] == ["tiny Q4_1", "tiny Q8_0"]
    for r in rows:
        assert r["us_1"] > 0 and r["us_2"] > 0 and r["us_4"] > 0
        assert r["ratio"] == pytest.approx(r["us_4"] / r["us_1"])
    body = bench_batch.section(_result(rows)).body
    assert "ai.amber.GgufMatMul" in body
    assert "| tiny Q4_1 | 64 × 96, Q4_1 |" in body
    assert "| tiny Q8_0 | 96 × 64, Q8_0 |" in body
