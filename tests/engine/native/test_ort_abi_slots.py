"""ort/ort_abi.h's hand-counted OrtApi slot numbers against the real ONNX Runtime library.

No package Amber can install ships ONNX Runtime's C header, so the check is behavioural: the
pinned runtime's own libonnxruntime (the onnxruntime wheel's capi/) is opened, OrtApiBase's and
the version-17 OrtApi table's slots that can be called without a session are called through the
numbers ort_abi.h declares, and each must do what its name says. (Every other slot is exercised
by the op tests, which run the library inside real sessions.) In a subprocess: a wrong slot may
crash."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import onnxruntime
import pytest

from engine.native import build as native_build

HEADER = native_build.SRC_DIR / "ort" / "ort_abi.h"

PROBE = r'''
import ctypes, sys
lib_path, version, slots = sys.argv[1], int(sys.argv[2]), eval(sys.argv[3])
ort = ctypes.CDLL(lib_path)
ort.OrtGetApiBase.restype = ctypes.POINTER(ctypes.c_void_p)
base = ort.OrtGetApiBase()
get_api = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)(base[0])
version_string = ctypes.CFUNCTYPE(ctypes.c_char_p)(base[1])
print("version", version_string().decode())
api = ctypes.cast(get_api(version), ctypes.POINTER(ctypes.c_void_p))
fn = lambda name, res, *args: ctypes.CFUNCTYPE(res, *args)(api[slots[name]])
status = fn("CreateStatus", ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)(2, b"amber slot check")
message = fn("GetErrorMessage", ctypes.c_char_p, ctypes.c_void_p)(status)
print("message", message.decode())
fn("ReleaseStatus", None, ctypes.c_void_p)(status)
domain = ctypes.c_void_p()
err = fn("CreateCustomOpDomain", ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))(
    b"ai.amber.slotcheck", ctypes.byref(domain))
print("domain", err is None, bool(domain.value))
'''


def _slots() -> dict[str, int]:
    text = HEADER.read_text()
    slots = {m[1]: int(m[2]) for m in re.finditer(r"ORT_SLOT_(\w+)\s*=\s*(\d+)", text)}
    version = re.search(r"#define AMBER_ORT_API_VERSION (\d+)u", text)
    assert slots and version is not None
    slots["_version"] = int(version[1])
    return slots


def _runtime_library() -> Path:
    found = sorted((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so*")) + sorted(
        (Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime*.dylib"))
    if not found:
        pytest.skip("this onnxruntime wheel ships no separate libonnxruntime (Windows: onnxruntime.dll)")
    return found[0]


def test_the_header_slots_do_what_their_names_say_in_the_real_runtime():
    slots = _slots()
    version = slots.pop("_version")
    # one slot per name, none shared
    assert len(set(slots.values())) == len(slots)
    proc = subprocess.run([sys.executable, "-c", PROBE, str(_runtime_library()), str(version), repr(slots)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["version"] == onnxruntime.__version__          # OrtApiBase: GetApi, then GetVersionString
    assert lines["message"] == "amber slot check"               # CreateStatus, GetErrorMessage, ReleaseStatus
    assert lines["domain"] == "True True"                        # CreateCustomOpDomain: no error, a domain
