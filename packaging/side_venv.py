"""Throwaway venvs for checks against other releases of a library (never the project's venv):
made once with exact pins, stamped with them, and reused while the stamp still matches."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ready(venv: Path, wanted: list[str], stamp_name: str) -> Path | None:
    """The venv's python when it was made for exactly `wanted` (its stamp says so), else None."""
    python = venv_python(venv)
    try:
        made_for = json.loads((venv / stamp_name).read_text())
    except (OSError, ValueError):
        return None
    return python if python.exists() and made_for == wanted else None


def ensure(venv: Path, wanted: list[str], stamp_name: str, who: str) -> Path:
    """A venv holding `wanted` (pip pins), reused when its stamp matches; returns its python.
    Needs the package index the first time; a failed install exits naming `who`."""
    found = ready(venv, wanted, stamp_name)
    if found is not None:
        return found
    print(f"== creating {venv} with {' '.join(wanted)}", flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    python = venv_python(venv)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *wanted],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{who}: pip could not install {' '.join(wanted)} into {venv}:\n"
                         + (proc.stderr or proc.stdout)[-2000:])
    (venv / stamp_name).write_text(json.dumps(wanted))
    return python
