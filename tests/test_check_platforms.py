"""packaging/check_platforms.py without the network: pyproject parsing, markers evaluated per
target, and the failure report, against a real pip run over a local folder of wheels (--no-index).

The real run (PyPI, every target) is `make check-platforms`."""
from __future__ import annotations

import importlib.util
import io
import sys
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_platforms", REPO / "packaging" / "check_platforms.py")
cp = importlib.util.module_from_spec(_spec)
sys.modules["check_platforms"] = cp          # dataclasses look their module up there
_spec.loader.exec_module(cp)


def _ort_pins(target: str) -> list[str]:
    pins = cp.pins_for(cp.TARGETS[target], cp.read_pins(REPO / "pyproject.toml"))
    return [p for p in pins if p.lower().startswith("onnxruntime")]


def test_every_target_gets_exactly_one_onnxruntime_from_the_real_pyproject():
    for name in cp.TARGETS:
        assert len(_ort_pins(name)) == 1, (name, _ort_pins(name))
    # Intel Macs: the last release with a macOS x86_64 wheel; Apple silicon the newer one
    assert _ort_pins("macos-x86_64") == ["onnxruntime==1.23.2"]
    assert _ort_pins("macos-arm64")[0].startswith("onnxruntime==") and _ort_pins("macos-arm64") != _ort_pins("macos-x86_64")
    assert _ort_pins("linux-x86_64")[0].startswith("onnxruntime-gpu==")
    assert _ort_pins("windows-x86_64") == _ort_pins("linux-x86_64")


def test_every_real_pin_is_exact_and_extras_are_included():
    runtime = cp.read_pins(REPO / "pyproject.toml", [])
    everything = cp.read_pins(REPO / "pyproject.toml")
    assert len(everything) > len(runtime)
    names = {r.name.lower() for r in everything}
    assert {"pyside6-essentials", "numpy", "tokenizers", "pytest", "pyinstaller"} <= names
    assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in everything)


def _pyproject(tmp_path: Path, deps: list[str], extras: dict[str, list[str]] | None = None) -> Path:
    lines = ["[project]", 'name = "probe"', 'version = "0"', "dependencies = ["]
    lines += [f'    "{d}",' for d in deps] + ["]"]
    if extras:
        lines.append("[project.optional-dependencies]")
        lines += [f"{k} = [{', '.join(repr(v) for v in vs)}]".replace("'", '"') for k, vs in extras.items()]
    path = tmp_path / "pyproject.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("dep, message", [
    ("numpy>=2", "is not pinned to one version"),
    ("numpy", "is not pinned to one version"),
    ("numpy==2.*", "is not pinned to one version"),
    ("numpy==2.4.6,!=2.4.5", "is not pinned to one version"),
    ("numpy = 2", "is not a requirement"),
])
def test_a_loose_or_broken_pin_is_named(tmp_path, dep, message):
    path = _pyproject(tmp_path, ["jinja2==3.1.6", dep])
    with pytest.raises(cp.PinError, match=message) as info:
        cp.read_pins(path)
    assert dep in str(info.value)


def test_bad_toml_and_unknown_extra_are_errors_not_tracebacks(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("[project\n")
    with pytest.raises(cp.PinError, match="cannot read it"):
        cp.read_pins(bad)
    good = _pyproject(tmp_path, ["jinja2==3.1.6"], {"test": ["pytest==9.2.0"]})
    with pytest.raises(cp.PinError, match="no optional-dependencies group 'gpu'"):
        cp.read_pins(good, ["gpu"])
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert cp.main(["--pyproject", str(bad)]) == 2
    assert "cannot read it" in err.getvalue() and "Traceback" not in err.getvalue()


def test_markers_are_evaluated_for_the_target_not_this_host(tmp_path):
    path = _pyproject(tmp_path, [
        "a==1; sys_platform == 'win32'",
        "b==1; sys_platform == 'darwin' and platform_machine == 'x86_64'",
        "c==1; sys_platform == 'darwin' and platform_machine == 'arm64'",
        "d==1; platform_system == 'Linux' and platform_machine == 'aarch64'",
        "e==1; python_version < '3.11'",
        "f[x]==1",
    ], {"one": ["f[x]==1", "g==2"]})
    pins = cp.read_pins(path)
    got = {name: cp.pins_for(t, pins) for name, t in cp.TARGETS.items()}
    assert got["windows-x86_64"] == ["a==1", "f[x]==1", "g==2"]
    assert got["macos-x86_64"] == ["b==1", "f[x]==1", "g==2"]
    assert got["macos-arm64"] == ["c==1", "f[x]==1", "g==2"]
    assert got["linux-aarch64"] == ["d==1", "f[x]==1", "g==2"]
    assert got["linux-x86_64"] == ["f[x]==1", "g==2"]


def test_manylinux_tags_and_what_the_wheels_need():
    tags = cp.manylinux_tags("x86_64", 35)
    assert "manylinux_2_35_x86_64" in tags and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux_2_36_x86_64" not in tags
    linux = cp.TARGETS["linux-x86_64"]
    assert cp.needs(["a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                     "b-1-cp311-cp311-manylinux_2_28_x86_64.whl", "c-1-py3-none-any.whl"], linux) == "glibc >= 2.28"
    assert cp.needs(["a-1-cp311-cp311-manylinux2014_x86_64.whl"], linux) == "glibc >= 2.17"
    mac = cp.TARGETS["macos-x86_64"]
    assert cp.needs(["a-1-cp311-cp311-macosx_10_9_x86_64.whl", "b-1-cp310-abi3-macosx_13_0_universal2.whl"],
                    mac) == "macOS >= 13.0"
    assert cp.needs(["c-1-py3-none-any.whl", "not a wheel.whl"], mac) == ""


def _wheel(folder: Path, name: str, version: str, tag: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal valid wheel (pip reads its METADATA) for the offline pip run."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{dist}-{version}-{tag}.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    _wheel(folder, "amberprobe-any", "1.0", "py3-none-any")
    _wheel(folder, "amberprobe-win", "1.0", "cp311-cp311-win_amd64")            # no Linux/macOS wheel
    _wheel(folder, "amberprobe-deps", "1.0", "py3-none-any", ("amberprobe-gone==1.0",))
    return folder


def _main(tmp_path, wheelhouse, deps, *targets) -> tuple[int, str]:
    path = _pyproject(tmp_path, deps)
    args = ["--pyproject", str(path), "--pip-arg=--no-index", f"--pip-arg=--find-links={wheelhouse}"]
    for t in targets:
        args += ["--target", t]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = cp.main(args)
    return rc, out.getvalue() + err.getvalue()


def test_a_pin_without_a_wheel_for_a_target_is_named(tmp_path, wheelhouse):
    rc, text = _main(tmp_path, wheelhouse, ["amberprobe-any==1.0", "amberprobe-win==1.0",
                                            "amberprobe-nowhere==1.0; sys_platform == 'darwin'"],
                     "windows-x86_64", "linux-x86_64", "macos-arm64")
    assert rc == 1, text
    assert "ok    windows-x86_64" in text
    assert "no wheel for linux-x86_64: amberprobe-win==1.0" in text
    assert "no wheel for macos-arm64: amberprobe-win==1.0" in text
    assert "no wheel for macos-arm64: amberprobe-nowhere==1.0" in text
    assert "amberprobe-nowhere" not in text.split("FAIL  linux-x86_64")[1].split("FAIL")[0]   # marker: darwin only
    assert "amberprobe-any" not in text.replace("ok    windows", "")                          # it has a wheel
    assert "2 of 3 targets cannot install Amber: linux-x86_64, macos-arm64" in text


def test_a_dependency_without_a_wheel_is_named_unless_direct_only(tmp_path, wheelhouse):
    rc, text = _main(tmp_path, wheelhouse, ["amberprobe-any==1.0", "amberprobe-deps==1.0"], "linux-x86_64")
    assert rc == 1, text
    assert "no wheel for linux-x86_64: amberprobe-gone==1.0 (a dependency of the pins)" in text
    path = _pyproject(tmp_path, ["amberprobe-any==1.0", "amberprobe-deps==1.0"])
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        rc = cp.main(["--pyproject", str(path), "--target", "linux-x86_64", "--direct-only",
                      "--pip-arg=--no-index", f"--pip-arg=--find-links={wheelhouse}"])
    assert rc == 0, out.getvalue()
    assert "ok    linux-x86_64    2 pins" in out.getvalue() and "all 1 targets install" in out.getvalue()


_hspec = importlib.util.spec_from_file_location("check_host", REPO / "packaging" / "check_host.py")
ch = importlib.util.module_from_spec(_hspec)
sys.modules["check_host"] = ch
_hspec.loader.exec_module(ch)


def test_the_host_check_supports_exactly_the_checked_targets():
    assert {name for name, _, _ in ch.SUPPORTED.values()} == set(cp.TARGETS)
    for (system, machine), (name, oldest, _) in ch.SUPPORTED.items():
        target = cp.TARGETS[name]
        assert target.marker_env["platform_system"] == system
        if system == "Linux":        # the newest manylinux tag the check accepts = the oldest glibc promised
            assert target.platforms[0] == f"manylinux_2_{oldest[1]}_{machine}"
        elif system == "Darwin":
            assert target.platforms == (f"macosx_{oldest[0]}_{oldest[1]}_{machine}",)


@pytest.mark.parametrize("host, problem", [
    (("Linux", "x86_64", "2.36", (3, 11)), None),
    (("Linux", "x86_64", "", (3, 12)), None),                       # glibc unknown: not held against it
    (("Windows", "AMD64", "", (3, 11)), None),
    (("Darwin", "arm64", "14.5", (3, 11)), None),
    (("Darwin", "x86_64", "13.0", (3, 11)), None),
    (("Linux", "aarch64", "2.39", (3, 11)), None),
    (("Linux", "x86_64", "2.31", (3, 11)), "needs glibc 2.35 (Ubuntu 22.04, Debian 12) or newer; this host has glibc 2.31"),
    (("Linux", "aarch64", "2.36", (3, 11)), "needs glibc 2.39"),
    (("Darwin", "x86_64", "12.7.4", (3, 11)), "needs macOS 13 Ventura or newer; this host has macOS 12.7"),
    (("Darwin", "arm64", "13.6", (3, 11)), "needs macOS 14 Sonoma or newer"),
    (("Windows", "ARM64", "", (3, 11)), "does not support Windows arm64"),
    (("Linux", "riscv64", "2.40", (3, 11)), "does not support Linux riscv64"),
    (("FreeBSD", "amd64", "", (3, 11)), "does not support FreeBSD x86_64"),
    (("Linux", "x86_64", "2.36", (3, 10)), "needs Python 3.11 or newer; this is 3.10"),
])
def test_host_problem(host, problem):
    got = ch.host_problem(*host)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got, got


def test_this_host_runs_the_suite_so_it_is_supported():
    assert ch.host_problem(*ch.this_host()) is None
