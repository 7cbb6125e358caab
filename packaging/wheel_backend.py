"""The build backend pyproject.toml's [build-system] pins, in a venv of its own
(build/wheel-backend/venv), so tests/test_wheel.py builds a wheel with exactly the tested backend and
without the network: `make install-wheel-backend` (part of `make test`) makes it once, from PyPI."""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packaging"))   # side_venv, beside this script
import side_venv  # noqa: E402

VENV = ROOT / "build" / "wheel-backend" / "venv"
STAMP = ".amber-wheel-backend.json"


def requires() -> list[str]:
    """[build-system] requires: exact pins, so the backend the test builds with is the tested one."""
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    if not all("==" in r for r in wanted):
        raise SystemExit(f"wheel-backend: [build-system] requires must pin exact versions: {wanted}")
    return list(wanted)


def ready() -> Path | None:
    """The backend venv's python when it holds exactly today's pins, else None."""
    return side_venv.ready(VENV, requires(), STAMP)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--install-only", action="store_true", help="create the venv and stop")
    ap.parse_args(argv)
    print(f"wheel backend: {side_venv.ensure(VENV, requires(), STAMP, 'wheel-backend')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
