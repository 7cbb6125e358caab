"""The NVIDIA wheels a GPU build bundles: pyproject.toml's `cuda` extra, the one list (a source
install gets the same ones with `pip install "amber-chat[cuda]"`). amber.spec asks here which of
them apply to this platform, whether the build environment holds exactly those versions, and
which shared libraries they installed.

    python packaging/cuda_wheels.py      # prints the pins for this platform, one per line
"""
from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
EXTRA = "cuda"


def pins(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """The `cuda` extra's requirements, as pyproject.toml lists them."""
    with pyproject.open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    return [Requirement(line) for line in extras[EXTRA]]


def for_this_platform(reqs: list[Requirement]) -> list[Requirement]:
    return [r for r in reqs if r.marker is None or r.marker.evaluate()]


def problems(reqs: list[Requirement]) -> list[str]:
    """Pins of this platform that the environment lacks or holds at another version."""
    out = []
    for r in for_this_platform(reqs):
        try:
            have = metadata.version(r.name)
        except metadata.PackageNotFoundError:
            out.append(f"{r.name} is not installed")
            continue
        if not r.specifier.contains(have, prereleases=True):
            out.append(f"{r.name} {have} installed, {r.specifier} pinned")
    return out


def shared_libraries(reqs: list[Requirement]) -> list[Path]:
    """The .so / .dll files the platform's pinned wheels installed."""
    found: set[Path] = set()
    for r in for_this_platform(reqs):
        dist = metadata.distribution(r.name)
        for f in dist.files or []:
            name = f.name.lower()
            if name.endswith(".dll") or (".so" in name and not name.endswith(".py")):
                found.add(Path(str(dist.locate_file(f))).resolve())
    return sorted(p for p in found if p.is_file())


if __name__ == "__main__":
    for r in for_this_platform(pins()):
        print(f"{r.name}{r.specifier}")
    sys.exit(0)
