"""Times an installed Amber: launch to visible main window (the app's AMBER_STARTUP_PROBE line),
and `--self-test` wall time. Cold runs first evict the bundle's files from the page cache
(posix_fadvise DONTNEED on each file; nothing else on the machine is touched).

    python3 measure_startup.py EXECUTABLE BUNDLE_DIR [--runs N] [--platform offscreen|xcb] [--as-user UID]

Prints one JSON object. Uses only the standard library (any python3 can run it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def evict(root: Path) -> int:
    n = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def base_env(home: Path, platform: str, as_user: int | None = None) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "AMBER_HOME": str(home / "data"),
           "LANG": "C.UTF-8", "QT_QPA_PLATFORM": platform}
    if platform == "xcb" and "DISPLAY" in os.environ:
        env["DISPLAY"] = os.environ["DISPLAY"]
        xauth = os.environ.get("XAUTHORITY")
        if xauth:
            if as_user is not None:   # the X cookie, readable by the user the app runs as
                copy = home / ".Xauthority"
                copy.write_bytes(Path(xauth).read_bytes())
                os.chown(copy, as_user, as_user)
                xauth = str(copy)
            env["XAUTHORITY"] = xauth
    return env


def prefix(as_user: int | None) -> list[str]:
    if as_user is None:
        return []
    return ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups"]


def fresh_home(as_user: int | None) -> Path:
    home = Path(tempfile.mkdtemp(prefix="amber-start-"))
    os.chmod(home, 0o755)
    if as_user is not None:
        os.chown(home, as_user, as_user)
    return home


def time_to_window(exe: str, platform: str, as_user: int | None) -> tuple[float, float, str]:
    home = fresh_home(as_user)
    env = base_env(home, platform, as_user)
    env["AMBER_STARTUP_PROBE"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.Popen(prefix(as_user) + [exe], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    shown = None
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if shown is None and "window visible after" in line:
            shown = time.perf_counter() - t0
            inside = float(re.search(r"after (\d+) ms", line).group(1)) / 1000
    code = proc.wait(timeout=120)
    total = time.perf_counter() - t0
    subprocess.run(["rm", "-rf", str(home)])
    if shown is None or code != 0:
        raise SystemExit(f"no window (exit {code}):\n{''.join(lines)[-3000:]}")
    return shown, total, f"{inside:.3f}"


def self_test(exe: str, as_user: int | None) -> float:
    home = fresh_home(as_user)
    t0 = time.perf_counter()
    proc = subprocess.run(prefix(as_user) + [exe, "--self-test"], env=base_env(home, "offscreen"),
                          capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    subprocess.run(["rm", "-rf", str(home)])
    if proc.returncode != 0:
        raise SystemExit(f"self-test failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--platform", default="offscreen")
    ap.add_argument("--as-user", type=int, default=None)
    args = ap.parse_args()
    out: dict[str, object] = {"platform": args.platform}
    evict(args.bundle)
    shown, total, inside = time_to_window(args.exe, args.platform, args.as_user)
    out["cold_window_s"] = round(shown, 3)
    out["cold_window_in_process_s"] = float(inside)
    out["cold_run_to_exit_s"] = round(total, 3)
    warm = [time_to_window(args.exe, args.platform, args.as_user) for _ in range(args.runs)]
    out["warm_window_s"] = [round(w[0], 3) for w in warm]
    out["warm_window_median_s"] = round(statistics.median(w[0] for w in warm), 3)
    out["warm_window_in_process_s"] = [float(w[2]) for w in warm]
    evict(args.bundle)
    out["cold_self_test_s"] = round(self_test(args.exe, args.as_user), 3)
    out["warm_self_test_s"] = round(self_test(args.exe, args.as_user), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
