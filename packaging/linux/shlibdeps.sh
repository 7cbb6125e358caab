#!/usr/bin/env bash
# Prints the .deb `Depends:` value for an onedir bundle: the Debian packages owning every system
# library that the bundle's ELF files load and that PyInstaller did not bundle (libc, GL, X11/xcb,
# fontconfig, freetype, glib, dbus, ...), found with ldd on this build machine, plus the glibc
# version the bundle needs (its newest GLIBC_x.y symbol version).
# Libraries that nothing here provides (optional plugins' deps) are listed on stderr.
# Usage: shlibdeps.sh BUNDLE_DIR
set -euo pipefail
B=$(cd "$1" && pwd)
LIBPATH=$(find "$B" -name '*.so*' -type f -printf '%h\n' | sort -u | paste -sd:)
declare -A pkgs=()
declare -A missing=()
declare -A seen=()
elfs=()
while IFS= read -r -d '' f; do
  [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && elfs+=("$f")
done < <(find "$B" -type f \( -name '*.so*' -o -perm -u+x \) -print0)

while IFS= read -r line; do
  case "$line" in
    *"=> not found"*) missing[$(echo "$line" | awk '{print $1}')]=1 ;;
    *"=> /"*)
      lib=$(echo "$line" | awk '{print $3}')
      case "$lib" in "$B"/*) continue ;; esac
      real=$(readlink -f "$lib")
      [ -n "${seen[$real]:-}" ] && continue
      seen[$real]=1
      owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "/usr$real" 2>/dev/null || true)
      owner=${owner%%:*}
      if [ -n "$owner" ]; then pkgs[$owner]=1; else echo "shlibdeps: no package owns $real" >&2; fi ;;
  esac
done < <(for f in "${elfs[@]}"; do LD_LIBRARY_PATH=$LIBPATH ldd "$f" 2>/dev/null || true; done \
          | sed 's/ *(0x[0-9a-f]*)$//' | sort -u)

glibc=$(cat "${elfs[@]}" | grep -aoE 'GLIBC_2\.[0-9]+' | sort -uV | tail -1 | sed 's/GLIBC_//')
for m in "${!missing[@]}"; do echo "shlibdeps: not found (an optional plugin's dependency): $m" >&2; done
out=()
for p in $(printf '%s\n' "${!pkgs[@]}" | sort); do
  if [ "$p" = libc6 ]; then out+=("libc6 (>= $glibc)"); else out+=("$p"); fi
done
[ -n "${pkgs[libc6]:-}" ] || out=("libc6 (>= $glibc)" "${out[@]}")
(IFS=,; echo "${out[*]}" | sed 's/,/, /g')
