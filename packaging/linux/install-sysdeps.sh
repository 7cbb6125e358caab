#!/usr/bin/env bash
# Installs the Debian/Ubuntu system libraries Qt needs (offscreen, xcb, screenshots under Xvfb)
# and the C compiler the native kernels are built with. `install-sysdeps.sh arm64` adds what the
# arm64 kernel tests need (tests/engine/test_native_arm64.py): the aarch64 cross compiler with its
# C library, and qemu-user to run what it builds. `install-sysdeps.sh windows` adds what the Windows
# kernel tests need (tests/engine/test_native_windows.py): MinGW-w64's x86-64 cross compiler and
# wine (64-bit) to run what it builds.
# Does nothing when they are all present, when this is not a Debian-like system, or when not root.
set -euo pipefail
pkgs=(libgl1 libegl1 libopengl0 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 fonts-dejavu-core
      libdbus-1-3 libglib2.0-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0
      libxcb-xinerama0 libxcb-randr0 libxcb-render-util0 libxcb-image0 libwayland-cursor0 xvfb xauth
      gcc libc6-dev)   # gcc + libc6-dev: the native kernels (python -m engine.native.build)
if [ "${1:-}" = arm64 ]; then
  pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
elif [ "${1:-}" = windows ]; then
  pkgs=(gcc-mingw-w64-x86-64 wine wine64)
fi
command -v dpkg >/dev/null 2>&1 || exit 0
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "note: missing system packages (install them with sudo apt-get install): ${missing[*]}" >&2
  exit 0
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
