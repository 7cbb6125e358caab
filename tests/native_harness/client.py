"""Drives tests/native_harness/harness.c, the kernels built for arm64 Linux, under qemu-aarch64
(windows.py: built for Windows, under wine).

`build_harness` cross-compiles the harness with every source of engine/native/src into one static
executable; a `Batch` collects requests (the harness's wire format), runs them in one emulator
process on a chosen CPU model and returns each reply.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.native import build as native_build

TARGET = "aarch64-linux"
HARNESS_C = Path(__file__).resolve().parent / "harness.c"
SYSROOT = Path("/usr/aarch64-linux-gnu")   # Debian's libc6-arm64-cross (qemu -L: the loader)
RUN_TIMEOUT_S = 1800


class HarnessError(Exception):
    """The harness could not be built or exited with an error; the message says why."""


def missing_tools() -> list[str]:
    """The programs the arm64 tests need that are not on PATH."""
    need = [native_build.CROSS_COMPILERS[TARGET], "qemu-aarch64"]
    return [name for name in need if shutil.which(name) is None]


def build_harness(out_dir: Path) -> Path:
    """The harness executable for arm64 Linux (static, so qemu needs no loader), in out_dir."""
    cc = native_build.find_compiler(TARGET)
    if cc is None:
        raise HarnessError(f"{native_build.CROSS_COMPILERS[TARGET]} not found")
    exe = out_dir / "amber-native-harness"
    flags = [f for f in native_build.CFLAGS if f not in ("-shared", "-fPIC")]
    srcs = [str(p) for p in native_build.c_sources()]
    cmd = [cc, *flags, "-static", *native_build.include_flags(), "-o", str(exe), str(HARNESS_C),
           *srcs, "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          timeout=native_build.COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise HarnessError(proc.stderr.strip() or f"{cc} exited {proc.returncode}")
    return exe


@dataclass
class Reply:
    rc: int
    bufs: list[bytes]

    def array(self, i: int, dtype: type) -> np.ndarray:
        return np.frombuffer(self.bufs[i], dtype=dtype).copy()

    def text(self) -> str:
        return self.bufs[0].decode()


@dataclass
class Batch:
    """Requests for one harness run, in order; `run` returns a Reply per request."""
    parts: list[bytes] = field(default_factory=list)

    def _add(self, op: int, args: tuple[int, ...], bufs: tuple[bytes, ...]) -> int:
        msg = [struct.pack(f"<ii{len(args)}qi", op, len(args), *args, len(bufs))]
        for b in bufs:
            msg += [struct.pack("<q", len(b)), b]
        self.parts.append(b"".join(msg))
        return len(self.parts) - 1

    def set_isa(self, name: str) -> int:
        return self._add(1, (), (name.encode(),))

    def isa(self) -> int:
        return self._add(2, (), ())

    def quantize(self, qtype: int, x: np.ndarray) -> int:
        m, k = x.shape
        return self._add(3, (qtype, m, k), (np.ascontiguousarray(x, np.float32).tobytes(),))

    def gemm(self, qtype: int, act: np.ndarray, m: int, w: np.ndarray, k: int, n0: int, n1: int,
             y: np.ndarray, ldy: int) -> int:
        """y's contents go in as they are; the reply holds y after the call."""
        return self._add(4, (qtype, m, k, n0, n1, ldy),
                         (act.tobytes(), w.tobytes(), np.ascontiguousarray(y, np.float32).tobytes()))

    def silu_mul(self, g: np.ndarray, u: np.ndarray) -> int:
        return self._add(5, (), (g.astype(np.float32).tobytes(), u.astype(np.float32).tobytes()))

    def silu_path(self) -> int:
        return self._add(6, (), ())

    def attention(self, c: Any, f: dict[str, np.ndarray]) -> int:
        """One ai.amber.Attention step: `c` a tests.support.attn_graphs.Case (not packed), `f` its
        feeds (past KV as float16); past and present are separate buffers of c.cap positions."""
        rot = (c.rot or c.d) if c.rotary else 0
        scale = c.scale if c.scale is not None else 1.0 / np.sqrt(c.d)
        bits = [int(np.array([v], np.float32).view(np.uint32)[0]) for v in (scale, c.softcap)]
        empty = np.zeros(0, np.float32)
        bufs = (f["query"], f["key"], f["value"], f.get("cos_cache", empty), f.get("sin_cache", empty),
                f["seqlens_k"].astype(np.int32), f["past_key"].astype(np.float16),
                f["past_value"].astype(np.float16))
        return self._add(7, (c.b, c.s, c.hq, c.hkv, c.d, c.cap, rot, c.window, *bits),
                         tuple(np.ascontiguousarray(x).tobytes() for x in bufs))

    def set_silu_path(self, name: str) -> int:
        return self._add(8, (), (name.encode(),))

    def run(self, exe: Path, cpu: str) -> list[Reply]:
        """Runs every request in one `qemu-aarch64 -cpu <cpu>` process."""
        qemu = shutil.which("qemu-aarch64")
        if qemu is None:
            raise HarnessError("qemu-aarch64 not found")
        return self.run_argv([qemu, "-cpu", cpu, "-L", str(SYSROOT), str(exe)], where=f"on {cpu}")

    def run_argv(self, argv: list[str], *, where: str, env: dict[str, str] | None = None) -> list[Reply]:
        """Runs every request in one process started by `argv` (the harness, maybe under an
        emulator); `where` names the run in errors."""
        proc = subprocess.run(argv, input=b"".join(self.parts), capture_output=True, check=False,
                              timeout=RUN_TIMEOUT_S, env=env)
        if proc.returncode != 0:
            raise HarnessError(f"harness {where} exited {proc.returncode}: "
                               f"{proc.stderr.decode(errors='replace').strip()}")
        return _parse(proc.stdout, len(self.parts))


def _parse(out: bytes, count: int) -> list[Reply]:
    replies, pos = [], 0
    for _ in range(count):
        rc, nbufs = struct.unpack_from("<ii", out, pos)
        pos += 8
        bufs = []
        for _ in range(nbufs):
            (n,) = struct.unpack_from("<q", out, pos)
            bufs.append(out[pos + 8: pos + 8 + n])
            pos += 8 + n
        replies.append(Reply(rc, bufs))
    if pos != len(out):
        raise HarnessError(f"harness wrote {len(out) - pos} bytes more than {count} replies")
    return replies
