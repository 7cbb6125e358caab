"""The entry points' one-time re-exec with glibc's huge-page malloc tunable: when it happens
(built app by default, source runs opt-in, glibc 2.35+), and that nothing it starts inherits it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.runtime.host.hugepages import (
    HUGETLB,
    BEFORE,
    OPT_IN,
    OPT_OUT,
    REEXEC_MARK,
    TUNABLE,
    glibc_version,
    parse_libc_version,
    reexec_env,
    strip_after_reexec,
    tunable_env,
)

REPO = Path(__file__).resolve().parents[3]
NEW, OLD = (2, 36), (2, 34)
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables: Linux only")


def _thp(tmp_path: Path, mode: str) -> Path:
    p = tmp_path / "enabled"
    p.write_text({"always": "[always] madvise never\n", "madvise": "always [madvise] never\n",
                  "never": "always madvise [never]\n"}[mode])
    return p


def test_libc_version_parsing() -> None:
    assert parse_libc_version("glibc 2.36") == (2, 36)
    assert parse_libc_version("glibc 2.35.1\n") == (2, 35)
    for other in ("", "musl 1.2.4", "glibc", "glibc two.x", "uclibc 2.40"):
        assert parse_libc_version(other) is None
    if sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION"):
        assert glibc_version() == parse_libc_version(os.confstr("CS_GNU_LIBC_VERSION") or "")


@linux
def test_tunable_env_adds_the_tunable_only_where_it_helps(tmp_path: Path) -> None:
    env = tunable_env({"PATH": "/bin"}, _thp(tmp_path, "madvise"), NEW)
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": TUNABLE}
    other = tunable_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, _thp(tmp_path, "always"), NEW)
    assert other is not None and other["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}"
    assert tunable_env({}, _thp(tmp_path, "madvise"), OLD) is None            # glibc before 2.35
    assert tunable_env({}, _thp(tmp_path, "never"), NEW) is None              # THP off
    assert tunable_env({}, tmp_path / "missing", NEW) is None                 # no THP in the kernel
    assert tunable_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"},          # the user's choice
                       _thp(tmp_path, "madvise"), NEW) is None


@linux
def test_reexec_is_opt_in_for_source_runs_and_default_for_the_built_app(tmp_path: Path) -> None:
    thp = _thp(tmp_path, "madvise")
    assert reexec_env({}, thp, frozen=False, glibc=NEW) is None               # source run: off
    src = reexec_env({OPT_IN: "1"}, thp, frozen=False, glibc=NEW)
    built = reexec_env({}, thp, frozen=True, glibc=NEW)
    for env in (src, built):
        assert env is not None and env["GLIBC_TUNABLES"] == TUNABLE and env[REEXEC_MARK] == "1"
        assert BEFORE not in env
    mine = reexec_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, thp, frozen=True, glibc=NEW)
    assert mine is not None and mine[BEFORE] == "glibc.malloc.arena_max=2"


@linux
@pytest.mark.parametrize("environ, argv, glibc", [
    ({REEXEC_MARK: "1"}, [], NEW),                                   # already re-executed: never loop
    ({OPT_OUT: "1"}, [], NEW),                                       # the opt-out wins, even built
    ({}, ["--help"], NEW),                                           # --help never re-executes
    ({}, ["serve", "--version"], NEW),
    ({}, [], OLD),                                                   # the tunable does not exist
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, [], NEW),
])
def test_no_reexec(tmp_path: Path, environ: dict[str, str], argv: list[str],
                   glibc: tuple[int, int]) -> None:
    assert reexec_env(environ, _thp(tmp_path, "madvise"), frozen=True, glibc=glibc, argv=argv) is None


def test_strip_after_reexec_restores_the_users_environment() -> None:
    env = {"GLIBC_TUNABLES": f"a=1:{TUNABLE}", REEXEC_MARK: "1", BEFORE: "a=1", "PATH": "/bin"}
    assert strip_after_reexec(env) is True and env == {"GLIBC_TUNABLES": "a=1", "PATH": "/bin"}
    env = {"GLIBC_TUNABLES": TUNABLE, REEXEC_MARK: "1"}
    assert strip_after_reexec(env) is True and env == {}
    env = {"GLIBC_TUNABLES": TUNABLE}
    assert strip_after_reexec(env) is False and env == {"GLIBC_TUNABLES": TUNABLE}


PROBE = """\
import logging, os, subprocess, sys
print('start', os.getpid(), os.environ.get('GLIBC_TUNABLES'), sys.argv[1:], flush=True)
from engine.runtime.host.hugepages import log_status, reexec_with_huge_pages
reexec_with_huge_pages({'PROBE_EXTRA': 'x'})
logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
log_status()
with open('/proc/self/environ', 'rb') as f:   # what this process was started with
    started = [v.decode() for v in f.read().split(b'\\0') if v.startswith(b'GLIBC_TUNABLES=')]
child = subprocess.run([sys.executable, '-c', 'import os; print(sorted(k for k in os.environ '
                        'if k.startswith(("GLIBC", "AMBER_"))))'], capture_output=True, text=True)
print('after', os.getpid(), os.environ.get('PROBE_EXTRA'), os.environ.get('GLIBC_TUNABLES'),
      started, child.stdout.strip(), flush=True)
"""


def _probe(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AMBER_") and k != "GLIBC_TUNABLES"}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return subprocess.run([sys.executable, str(probe), *args], env=env, capture_output=True,
                          text=True, timeout=120, check=True)


def _thp_on() -> bool:
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return thp.exists() and "[never]" not in thp.read_text() and (glibc_version() or (0, 0)) >= (2, 35)


@linux
def test_opted_in_source_run_reexecutes_once_and_children_do_not_inherit(tmp_path: Path) -> None:
    """The same process (same pid, same arguments) comes back started with the tunable; then
    its environment is the user's again, so a child process sees no tunable and no marks."""
    if not _thp_on():
        pytest.skip("transparent huge pages or glibc 2.35 missing on this machine")
    run = _probe(tmp_path, "--flag", "a b", **{OPT_IN: "1"})
    out = run.stdout.splitlines()
    starts = [line for line in out if line.startswith("start")]
    assert len(starts) == 2
    first, second = starts[0].split(" ", 3), starts[1].split(" ", 3)
    assert first[2] == "None" and second[2] == TUNABLE and second[1] == first[1]
    assert first[3] == second[3] == "['--flag', 'a b']"
    after = out[-1]
    # /proc/self/environ: glibc 2.36 rewrites that copy of GLIBC_TUNABLES at start-up (the
    # mmap_threshold entry leaves it, and still takes effect: tests/engine/runtime/test_memory.py)
    assert after.startswith(f"after {first[1]} x None ['GLIBC_TUNABLES={HUGETLB}")
    assert after.endswith(f"'] ['{OPT_IN}']")
    logged = [line for line in run.stderr.splitlines() if line.startswith("engine.runtime.host.hugepages: ")]
    assert len(logged) == 1 and f"GLIBC_TUNABLES={TUNABLE}" in logged[0]


@linux
def test_source_run_without_opt_in_and_help_do_not_reexecute(tmp_path: Path) -> None:
    for args, extra in (((), {}), (("--help",), {OPT_IN: "1"})):
        run = _probe(tmp_path, *args, **extra)
        out = run.stdout.splitlines()
        assert len([line for line in out if line.startswith("start")]) == 1
        assert out[-1].split(" ", 3)[2:] == ["None", "None [] " + str(sorted(extra))]
        assert "engine.runtime.host.hugepages" not in run.stderr
