"""The entry points' one-time re-exec with glibc's huge-page malloc tunable."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from engine.hugepages import OPT_OUT, REEXEC_MARK, TUNABLE, reexec_env

linux_glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                 reason="glibc tunables exist on Linux with glibc only")
REPO = Path(__file__).resolve().parents[2]


def _thp(tmp_path: Path, mode: str) -> Path:
    p = tmp_path / "enabled"
    p.write_text({"always": "[always] madvise never\n", "madvise": "always [madvise] never\n",
                  "never": "always madvise [never]\n"}[mode])
    return p


@linux_glibc
def test_env_adds_the_tunable_and_the_loop_guard(tmp_path: Path) -> None:
    env = reexec_env({"PATH": "/bin"}, _thp(tmp_path, "madvise"))
    assert env is not None and env["GLIBC_TUNABLES"] == TUNABLE and env[REEXEC_MARK] == "1" and env["PATH"] == "/bin"
    other = reexec_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, _thp(tmp_path, "always"))
    assert other is not None and other["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}"


@linux_glibc
@pytest.mark.parametrize("environ, mode", [
    ({REEXEC_MARK: "1"}, "madvise"),                                  # already re-executed: never loop
    ({OPT_OUT: "1"}, "madvise"),                                      # the user's opt-out
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise"),        # the user's own choice wins
    ({}, "never"),                                                    # THP off: nothing to gain
])
def test_no_reexec_when_nothing_to_gain(tmp_path: Path, environ: dict[str, str], mode: str) -> None:
    assert reexec_env(environ, _thp(tmp_path, mode)) is None


def test_no_reexec_without_thp_in_the_kernel(tmp_path: Path) -> None:
    assert reexec_env({}, tmp_path / "missing") is None


@linux_glibc
def test_engine_entry_point_reexecutes_once_with_the_tunable(tmp_path: Path) -> None:
    """`python -m engine` comes back as the same command (same pid, same arguments) with the
    tunable in its environment, exactly once."""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text():
        pytest.skip("transparent huge pages are off on this machine")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys\n"
        "print('start', os.getpid(), os.environ.get('GLIBC_TUNABLES'), sys.argv[1:], flush=True)\n"
        "from engine.hugepages import reexec_with_huge_pages\n"
        "reexec_with_huge_pages({'PROBE_EXTRA': 'x'})\n"
        "print('after', os.getpid(), os.environ.get('PROBE_EXTRA'), flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k not in (REEXEC_MARK, OPT_OUT, "GLIBC_TUNABLES")}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, str(probe), "--flag", "a b"], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split("\n")
    first, second, after = out[0].split(" ", 3), out[1].split(" ", 3), out[2].split()
    assert first[0] == "start" and first[2] == "None"
    assert second[0] == "start" and second[1] == first[1] and second[2] == TUNABLE   # same process, re-executed
    assert first[3] == second[3] == "['--flag', 'a b']"
    assert after == ["after", first[1], "x"] and len([line for line in out if line.startswith("start")]) == 2
