"""Property-based fuzzing of Amber's readers of untrusted files (Hypothesis).

Profiles (pick one with HYPOTHESIS_PROFILE):
  "default"  (`make test`): a few dozen examples per target, derandomized, so CI is reproducible;
  "campaign" (`make fuzz`): many random examples per round; `bench/suites/fuzz_report.py` runs rounds
             with fresh seeds for a bounded time and writes the counts to docs/BENCHMARKS.md.
AMBER_FUZZ_EXAMPLES overrides max_examples (both profiles).

Every target asserts the same property: reading a damaged or generated file ends in success or
in the reader's own one-line error, never another exception, a hang or unbounded memory (see
tests/support/bounded.py). The plugin part below counts the examples each target ran (every
@given test under tests/fuzz, whoever wrote it) and, with AMBER_FUZZ_COUNTS=path, writes them
there as JSON at the end of the session.
"""
from __future__ import annotations

import collections
import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

HERE = Path(__file__).resolve().parent
# The tiny-model writer, the byte-level GGUF helpers and the bounded runner are in tests/support
# (imported as tests.support.*), shared with the engine tests.

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
            HealthCheck.large_base_example]
_EXAMPLES = os.environ.get("AMBER_FUZZ_EXAMPLES")
settings.register_profile("default", max_examples=int(_EXAMPLES or 60), deadline=None, derandomize=True,
                          database=None, suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("campaign", max_examples=int(_EXAMPLES or 400), deadline=None, derandomize=False,
                          database=None, suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# ---- counting examples per target -----------------------------------------------------------------
CASES: collections.Counter[str] = collections.Counter()
OUTCOMES: dict[str, dict[str, Any]] = {}
_current: list[str] = [""]


def _is_fuzz_item(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).resolve().parents


def _count(inner: Any) -> Any:
    @functools.wraps(inner)
    def counted(*args: Any, **kwargs: Any) -> Any:
        CASES[_current[0]] += 1
        return inner(*args, **kwargs)
    counted._amber_counted = True  # type: ignore[attr-defined]
    return counted


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        handle = getattr(getattr(item, "obj", None), "hypothesis", None)
        if handle is None or not _is_fuzz_item(item):
            continue
        # Hypothesis reads `inner_test` at call time (its documented hook for wrapping the body);
        # parametrized items share one function, so wrap it once.
        if not getattr(handle.inner_test, "_amber_counted", False):
            handle.inner_test = _count(handle.inner_test)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    _current[0] = item.nodeid
    yield
    _current[0] = ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" or HERE.name not in report.nodeid.split("/"):
        return
    entry = OUTCOMES.setdefault(report.nodeid, {"failed": False, "error": ""})
    if report.failed:
        entry["failed"] = True
        text = str(report.longrepr or "")
        lines = [line for line in text.splitlines() if line.startswith("E ")]
        entry["error"] = (lines[0][1:].strip() if lines else text.splitlines()[-1] if text else "")[:300]
    elif report.skipped:
        entry["skipped"] = True


def pytest_terminal_summary(terminalreporter: Any) -> None:
    fuzzed = {k: v for k, v in CASES.items() if k}
    if not fuzzed:
        return
    terminalreporter.write_sep("-", "fuzz: examples run per target")
    for nodeid in sorted(fuzzed):
        failed = OUTCOMES.get(nodeid, {}).get("failed")
        terminalreporter.write_line(f"{fuzzed[nodeid]:8d}  {'FAILED ' if failed else ''}{nodeid}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("AMBER_FUZZ_COUNTS")
    if not out:
        return
    data = {nodeid: {"cases": CASES.get(nodeid, 0), **OUTCOMES.get(nodeid, {"failed": False, "error": ""})}
            for nodeid in set(CASES) | set(OUTCOMES) if nodeid}
    Path(out).write_text(json.dumps(data, indent=1, sort_keys=True))
