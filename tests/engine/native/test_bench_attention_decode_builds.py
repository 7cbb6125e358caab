"""bench.experiments.attention_decode_builds (by hand): runs the op on the built library and compares
two builds bit for bit."""
from __future__ import annotations

import pytest

from bench.experiments import attention_decode_builds as bench_attn_decode


@pytest.mark.parametrize("threads", ["1", "2"])
def test_times_and_the_same_bits_against_another_build(native_on, threads: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from engine import native
    lib = native.library_path()
    assert lib is not None
    assert bench_attn_decode.main(["--ctx", "5,130", "--layers", "2", "--rounds", "2", "--threads", threads,
                                   "--against", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "BITS DIFFER" not in out
    assert out.count("same bits") == 2   # both contexts
