"""engine.runtime.prefold's heap handling (issue 18): while numpy forms the values, freed
intermediates stay in glibc's heap and are reused by the next tensor's (not returned and faulted
in again page by page); once the values are formed the old thresholds are back, so a session's
own freed buffers are returned to the system as before. Counted in page faults, not time."""
from __future__ import annotations

import ctypes
import resource

import numpy as np
import pytest
from numpy._core import multiarray

from engine.runtime import prefold
from engine.runtime.providers import create_session
from test_convert import Runner, prompt
from test_convert_forms import FORMS, converted  # noqa: F401 - the module-scoped fixture
from engine.convert import FAST

BLOCK = 16 << 20        # a 16 MiB intermediate (4096 pages)


def _glibc() -> bool:
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    return hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")


pytestmark = pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")


@pytest.fixture(autouse=True)
def small_pages():
    """numpy asks for huge pages on large arrays; 4 KiB pages make each fault one page."""
    was = multiarray._set_madvise_hugepage(False)
    yield
    multiarray._set_madvise_hugepage(was)
    prefold._fix_mmap_threshold()


def _refault_pages() -> int:
    """Page faults taken by the second of two 16 MiB arrays written one after the other."""
    a = np.ones(BLOCK, np.uint8)
    del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(BLOCK, np.uint8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del b
    return faults


def test_freed_intermediates_are_reused_while_forming():
    prefold._fix_mmap_threshold()        # the state after a first load: a mapping per block
    assert _refault_pages() > BLOCK // 4096 // 2
    prefold._keep_heap()
    try:
        _refault_pages()                 # the first block comes from the heap, then stays there
        assert _refault_pages() < 64
    finally:
        prefold._mallopt(prefold.M_TRIM_THRESHOLD, prefold.TRIM_DEFAULT)
        prefold._trim_heap()


def test_thresholds_are_restored_after_the_load(converted, tmp_path, monkeypatch):   # noqa: F811
    """After a prefolded session is made, freed blocks go back to the system again, and the
    logits are ONNX Runtime's own folding's."""
    monkeypatch.setattr(prefold, "_spill_folder", lambda: tmp_path / "spill")
    model, folder = converted(FORMS[-1], FAST)
    session = create_session(str(folder / "model.onnx"), "cpu", 2).session
    assert hasattr(session, "amber_prefolded")
    assert _refault_pages() > BLOCK // 4096 // 2
    ids = prompt(model, 9)
    plain = Runner(folder)
    ours = Runner(folder)
    ours.session = session
    assert np.array_equal(plain.run(ids)[0], ours.run(ids)[0])
