"""Checks that every platform Amber supports can install its pinned dependency set from wheels.

For each target (see TARGETS, the platforms README.md's "Platforms" section names) the pins in
pyproject.toml (runtime dependencies and every extra) are filtered by their environment markers
evaluated *for that target*, then fetched with

    pip download --only-binary=:all: --platform TAG... --python-version 3.11 --implementation cp
                 --no-deps -d TMP PIN

and, once every direct pin has a wheel, resolved again with their dependencies (the transitive
step). It prints what each target needs (oldest glibc / macOS from the wheels' tags) and exits 1
naming every package that has no wheel for a target. `make check-platforms` runs it (network).

    python packaging/check_platforms.py [--target NAME]... [--direct-only] [--pip-arg ARG]...
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"


def manylinux_tags(arch: str, glibc_minor: int) -> list[str]:
    """Every manylinux tag a glibc 2.<glibc_minor> host accepts (pip does not expand these)."""
    tags = [f"manylinux_2_{m}_{arch}" for m in range(glibc_minor, 16, -1)]
    tags.append(f"manylinux2014_{arch}")
    if arch in ("x86_64", "i686"):
        tags += [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    return tags


@dataclass(frozen=True)
class Target:
    """One platform: the marker environment pip would see there and its wheel platform tags."""
    name: str
    marker_env: dict[str, str]
    platforms: tuple[str, ...]
    claim: str                      # what README.md promises for it, printed with the result


def _env(sys_platform: str, machine: str, system: str, os_name: str) -> dict[str, str]:
    return {"sys_platform": sys_platform, "platform_machine": machine, "platform_system": system,
            "os_name": os_name, "python_version": PYTHON_VERSION, "python_full_version": f"{PYTHON_VERSION}.0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "implementation_version": f"{PYTHON_VERSION}.0", "platform_release": "", "platform_version": ""}


# The oldest OS each target claims: pip accepts wheels for that version or older (macOS tags are
# expanded by pip itself; manylinux ones by manylinux_tags).
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("linux-x86_64", _env("linux", "x86_64", "Linux", "posix"), tuple(manylinux_tags("x86_64", 35)),
           "Linux x86_64, glibc >= 2.35 (Ubuntu 22.04, Debian 12)"),
    Target("linux-aarch64", _env("linux", "aarch64", "Linux", "posix"), tuple(manylinux_tags("aarch64", 39)),
           "Linux arm64, glibc >= 2.39 (Ubuntu 24.04, Debian 13), from source only"),
    Target("windows-x86_64", _env("win32", "AMD64", "Windows", "nt"), ("win_amd64",), "Windows 10/11 x64"),
    Target("macos-arm64", _env("darwin", "arm64", "Darwin", "posix"), ("macosx_14_0_arm64",),
           "macOS 14 or newer, Apple silicon"),
    Target("macos-x86_64", _env("darwin", "x86_64", "Darwin", "posix"), ("macosx_13_0_x86_64",),
           "macOS 13 or newer, Intel"),
)}


class PinError(ValueError):
    """pyproject.toml holds something this check cannot read as an exact pin."""


def read_pins(pyproject: Path, extras: Sequence[str] | None = None) -> list[Requirement]:
    """The runtime dependencies plus the named optional groups (None: every group), as parsed
    requirements. Each must pin one exact version (`name==x.y.z`), else PinError names it."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PinError(f"{pyproject}: cannot read it ({exc})") from None
    project = data.get("project") or {}
    groups = project.get("optional-dependencies") or {}
    wanted = list(groups) if extras is None else list(extras)
    lines: list[str] = list(project.get("dependencies") or [])
    for extra in wanted:
        if extra not in groups:
            raise PinError(f"{pyproject}: no optional-dependencies group '{extra}'")
        lines += groups[extra]
    pins: list[Requirement] = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise PinError(f"{pyproject}: '{line}' is not a requirement ({exc})") from None
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise PinError(f"{pyproject}: '{line}' is not pinned to one version (name==x.y.z)")
        pins.append(req)
    return pins


def pins_for(target: Target, pins: Sequence[Requirement]) -> list[str]:
    """The pins that apply on `target` (markers evaluated for it), as `name[extras]==version`,
    without duplicates (two groups may list the same pin)."""
    out: list[str] = []
    for req in pins:
        if req.marker is not None and not req.marker.evaluate(dict(target.marker_env)):
            continue
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        text = f"{req.name}{extras}{req.specifier}"
        if text not in out:
            out.append(text)
    return out


_NO_DIST = re.compile(r"No matching distribution found for ([^\s;]+)")


def missing_from_pip_output(output: str) -> list[str]:
    """The requirements pip's output says it found no distribution for."""
    return list(dict.fromkeys(m.group(1).rstrip(".") for m in _NO_DIST.finditer(output)))


_LEGACY = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}


def _tag_os(platform: str) -> tuple[int, int] | None:
    """(2, 28) for manylinux_2_28_x86_64, (13, 0) for macosx_13_0_x86_64, None for win/any."""
    m = re.match(r"(?:manylinux|macosx)_(\d+)_(\d+)_", platform)
    if m:
        return int(m.group(1)), int(m.group(2))
    for prefix, version in _LEGACY.items():
        if platform.startswith(prefix + "_"):
            return version
    return None


def needs(wheel_names: Sequence[str], target: Target) -> str:
    """The oldest glibc / macOS the downloaded wheels together need ('' when nothing limits it):
    each wheel needs the lowest of its tags, the set the highest of those."""
    best: tuple[int, int] | None = None
    for name in wheel_names:
        try:
            tags = parse_wheel_filename(name)[3]
        except InvalidWheelFilename:
            continue
        versions = [v for v in (_tag_os(tag.platform) for tag in tags) if v is not None]
        if versions and (best is None or min(versions) > best):
            best = min(versions)
    if best is None:
        return ""
    kind = "glibc" if target.marker_env["sys_platform"] == "linux" else "macOS"
    return f"{kind} >= {best[0]}.{best[1]}"


Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run_pip(args: list[str]) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


@dataclass
class TargetResult:
    target: Target
    pins: list[str]
    missing: list[str] = field(default_factory=list)       # direct pins without a wheel
    missing_deps: list[str] = field(default_factory=list)  # dependencies (transitive step)
    wheels: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)        # pip failures that name no package

    @property
    def ok(self) -> bool:
        return not (self.missing or self.missing_deps or self.errors)


def _download_args(target: Target, dest: Path, pip_args: Sequence[str], no_deps: bool) -> list[str]:
    args = ["download", "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
            "--disable-pip-version-check", "-q", "-d", str(dest)]
    for tag in target.platforms:
        args += ["--platform", tag]
    if no_deps:
        args.append("--no-deps")
    return args + list(pip_args)


def _first_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip failed without a message"])[-1][:300]


def check_target(target: Target, pins: Sequence[Requirement], dest: Path, pip_args: Sequence[str] = (),
                 transitive: bool = True, run: Runner = _run_pip) -> TargetResult:
    """Downloads every pin for `target` into `dest` (one pip call; on failure one per pin, so that
    every missing one is named), then resolves their dependencies when `transitive`."""
    result = TargetResult(target, pins_for(target, pins))
    dest.mkdir(parents=True, exist_ok=True)
    proc = run(_download_args(target, dest, pip_args, no_deps=True) + result.pins)
    if proc.returncode != 0:
        for pin in result.pins:
            one = run(_download_args(target, dest, pip_args, no_deps=True) + [pin])
            if one.returncode != 0:
                named = missing_from_pip_output(one.stdout + one.stderr)
                if named:
                    result.missing.append(pin)
                else:
                    result.errors.append(f"{pin}: {_first_error_line(one.stdout + one.stderr)}")
    if result.ok and transitive:
        proc = run(_download_args(target, dest, pip_args, no_deps=False) + result.pins)
        if proc.returncode != 0:
            named = missing_from_pip_output(proc.stdout + proc.stderr)
            if named:
                result.missing_deps += named
            else:
                result.errors.append(f"dependencies: {_first_error_line(proc.stdout + proc.stderr)}")
    result.wheels = sorted(p.name for p in dest.glob("*.whl"))
    return result


def report(result: TargetResult) -> list[str]:
    """Human-readable lines for one target."""
    t = result.target
    if result.ok:
        need = needs(result.wheels, t)
        return [f"ok    {t.name:15} {len(result.pins)} pins, {len(result.wheels)} wheels with dependencies"
                + (f"; needs {need}" if need else "") + f"  [{t.claim}]"]
    lines = [f"FAIL  {t.name:15} [{t.claim}]"]
    lines += [f"      no wheel for {t.name}: {pin}" for pin in result.missing]
    lines += [f"      no wheel for {t.name}: {dep} (a dependency of the pins)" for dep in result.missing_deps]
    lines += [f"      pip failed: {err}" for err in result.errors]
    return lines


def main(argv: Sequence[str] | None = None, run: Runner = _run_pip) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: every target")
    ap.add_argument("--extra", action="append", help="optional-dependency groups (default: all)")
    ap.add_argument("--direct-only", action="store_true", help="skip the transitive resolution")
    ap.add_argument("--pip-arg", action="append", default=[], help="passed to pip download (e.g. --no-index)")
    ap.add_argument("--dest", type=Path, help="keep the wheels here (default: a temporary folder)")
    args = ap.parse_args(argv)
    try:
        pins = read_pins(args.pyproject, args.extra)
    except PinError as exc:
        print(f"check-platforms: {exc}", file=sys.stderr)
        return 2
    names = args.target or list(TARGETS)
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="amber-platforms-") as tmp:
        base = args.dest or Path(tmp)
        for name in names:
            result = check_target(TARGETS[name], pins, base / name, args.pip_arg, not args.direct_only, run)
            print("\n".join(report(result)), flush=True)
            if not result.ok:
                failed.append(name)
    if failed:
        print(f"check-platforms: {len(failed)} of {len(names)} targets cannot install Amber: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    print(f"check-platforms: all {len(names)} targets install from wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
