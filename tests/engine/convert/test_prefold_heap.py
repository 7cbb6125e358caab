"""engine.runtime.prefold's heap handling: while numpy forms the values, freed
intermediates stay in glibc's heap and are reused by the next tensor's (not returned and faulted
in again page by page); once the values are formed the old thresholds are back, so a session's
own freed buffers are returned to the system as before. Counted in page faults, not time."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.runtime.providers import create_session
from tests.support.reference_model import Runner, prompt
from test_convert_forms import FORMS, converted  # noqa: F401 - the module-scoped fixture
from engine.convert import FAST

PAGES = (16 << 20) // 4096      # a 16 MiB intermediate


def _glibc() -> bool:
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    return hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")


pytestmark = pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")


# Run in a fresh interpreter: a heap that earlier tests left with large free chunks would serve a
# block without faults whatever the thresholds.
PROBE = """
import resource, sys
import numpy as np
from numpy._core import multiarray
from engine.runtime.host import malloc
multiarray._set_madvise_hugepage(False)    # 4 KiB pages: each fault one page

def refault():
    a = np.ones(16 << 20, np.uint8)
    del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(16 << 20, np.uint8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del b
    return faults

out = []
if sys.argv[1] == "keep":
    malloc.fix_mmap_threshold()          # the state after a first load: a mapping per block
    out.append(refault())
    malloc.keep_heap()
    refault()                              # the first block comes from the heap, then stays there
    out.append(refault())
else:
    from engine.runtime.providers import create_session
    session = create_session(sys.argv[2], "cpu", 2).session
    out.append(int(hasattr(session, "amber_prefolded")))
    out.append(refault())
    # 64 MiB in 512 KiB blocks (under the mmap threshold: from the heap), written then freed:
    # with glibc's trim threshold back, the heap's top is returned as they are freed
    rss = lambda: int(open("/proc/self/statm").read().split()[1])
    before = rss()
    blocks = [np.ones(512 << 10, np.uint8) for _ in range(128)]
    grown = rss() - before
    del blocks
    out.append(grown)
    out.append(rss() - before)
print(*out)
"""


def _probe(*args: str, home: Path | None = None) -> list[int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if home is not None:
        env["AMBER_HOME"] = str(home)       # the spill file goes to the test's own folder
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [int(v) for v in done.stdout.split()]


def test_freed_intermediates_are_reused_while_forming():
    fixed, kept = _probe("keep")
    assert fixed > PAGES // 2            # a fresh mapping: every page faulted in again
    assert kept < 64                     # the heap's block again: (almost) no faults


def test_thresholds_are_restored_after_the_load(converted, tmp_path):   # noqa: F811
    """After a prefolded session is made, freed blocks go back to the system again, and the
    logits are ONNX Runtime's own folding's."""
    model, folder = converted(FORMS[-1], FAST)
    prefolded, faults, grown, kept = _probe("session", str(folder / "model.onnx"), home=tmp_path / "home")
    assert prefolded == 1
    assert faults > PAGES // 2            # a large block: its own mapping again
    assert grown > PAGES * 3              # the 64 MiB of small blocks were resident ...
    assert kept < grown // 4              # ... and went back to the system when freed
    assert list((tmp_path / "home" / "tmp").iterdir()) == []      # the spill file was unlinked
    ids = prompt(model, 9)
    plain = Runner(folder)
    ours = Runner(folder)
    ours.session = create_session(str(folder / "model.onnx"), "cpu", 2).session
    assert hasattr(ours.session, "amber_prefolded")
    assert np.array_equal(plain.run(ids)[0], ours.run(ids)[0])
