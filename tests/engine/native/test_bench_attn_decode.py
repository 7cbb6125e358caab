"""bench.bench_attn_decode (by hand, issue 18): runs the op on the built library, compares two builds bit for bit."""
from __future__ import annotations

import pytest

from bench import bench_attn_decode


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
