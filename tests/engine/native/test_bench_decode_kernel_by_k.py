"""bench.experiments.decode_kernel_by_k (by hand): runs on the built library and compares two builds
bit for bit."""
from __future__ import annotations

import pytest

from bench.experiments import decode_kernel_by_k as bench_decode_k


def test_rates_and_the_same_bits_against_another_build(native_lib, capsys: pytest.CaptureFixture[str]) -> None:
    from engine import native
    lib = native.library_path()
    assert lib is not None
    assert bench_decode_k.main(["--types", "12,14,2", "--ks", "1536,256", "--kib", "16", "--rounds", "2",
                                "--against", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "ISA " in out and "BITS DIFFER" not in out
    assert out.count("same bits") == 6   # three types at both Ks
