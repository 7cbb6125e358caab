#!/usr/bin/env bash
# Tests the built Linux packages (run packaging/build.sh first; `make package-test` does both):
#   .deb     metadata and file list; extracted into a throwaway root; every Depends installed
#            here; the model's fingerprint cache still valid after extraction; then the installed
#            /usr/bin/amber runs `--self-test` offscreen as user nobody (read-only install, like a
#            real one) with no network (a fresh network namespace)
#   .tar.gz  extracted; ./amber --self-test the same way
#   startup  launch to visible window (offscreen, and xcb under Xvfb when xvfb-run exists),
#            cold and warm, and the self-test's wall time -> build/package/measurements.json
# Usage: package-test.sh [DIST_DIR] [--no-timing]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DIST=$ROOT/dist
TIMING=1
for a in "$@"; do
  case "$a" in --no-timing) TIMING=0 ;; *) DIST=$a ;; esac
done
PY=${PYTHON:-$ROOT/.venv/bin/python}
VERSION=$("$PY" -c "import importlib.metadata as m; print(m.version('amber-chat'))")
ARCH=$(dpkg --print-architecture)
DEB=$DIST/amber_${VERSION}_${ARCH}.deb
TGZ=$DIST/amber-$VERSION-linux-$(uname -m).tar.gz
for f in "$DEB" "$TGZ"; do [ -f "$f" ] || { echo "missing $f: run packaging/build.sh first" >&2; exit 1; }; done

T=$(mktemp -d /tmp/amber-package-test.XXXXXX)
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
NOBODY=65534

# Runs a command as nobody with a fresh data folder, no network when possible, offscreen, and a
# minimal environment (no venv, no PYTHONPATH, not from the checkout).
run_installed() {
  local home=$T/home-$RANDOM
  mkdir -p "$home"; chown $NOBODY:$NOBODY "$home"
  local net=()
  if unshare -n true 2>/dev/null; then net=(unshare -n); fi
  (cd / && "${net[@]}" setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups \
     env -i PATH=/usr/bin:/bin HOME="$home" LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen "$@")
}

echo "== .deb: $(basename "$DEB") ($(du -m "$DEB" | cut -f1) MB)"
dpkg-deb -I "$DEB" control > "$T/control"
grep -q "^Package: amber$" "$T/control" || fail "control: Package"
grep -q "^Version: $VERSION$" "$T/control" || fail "control: Version"
DEPENDS=$(sed -n 's/^Depends: //p' "$T/control")
echo "   Depends: $DEPENDS"
dpkg-deb -c "$DEB" | awk '{print $6}' > "$T/files"
for p in ./opt/amber/amber ./usr/bin/amber ./usr/share/applications/amber.desktop \
         ./usr/share/icons/hicolor/scalable/apps/amber.svg ./usr/share/icons/hicolor/256x256/apps/amber.png \
         ./opt/amber/_internal/models/SmolLM2-135M-Instruct/model.onnx.data \
         ./opt/amber/_internal/app/store/migrations/versions/0001_initial.py \
         ./opt/amber/_internal/resources/styles/amber.qss; do
  grep -qx "$p" "$T/files" || fail "$p is not in the package"
done
if grep -q "providers_cuda\|libcudart\|PIL/" "$T/files"; then fail "the default package holds GPU/PIL files"; fi
dpkg-deb -c "$DEB" | awk '$2 != "root/root" {print; exit 1}' >/dev/null || fail "files not owned by root"
echo "$DEPENDS" | tr ',' '\n' | sed 's/(.*)//; s/|.*//; s/ //g' | while read -r dep; do
  [ -z "$dep" ] && continue
  dpkg -s "$dep" >/dev/null 2>&1 || fail "Depends names $dep, which is not installed here"
done
if command -v desktop-file-validate >/dev/null; then
  dpkg-deb --fsys-tarfile "$DEB" | tar -xO ./usr/share/applications/amber.desktop > "$T/amber.desktop"
  desktop-file-validate "$T/amber.desktop" || fail "amber.desktop"
fi
R=$T/root
dpkg-deb -x "$DEB" "$R"
chmod 755 "$R"
[ "$(readlink "$R/usr/bin/amber")" = ../../opt/amber/amber ] || fail "/usr/bin/amber link"
python3 - "$R/opt/amber/_internal/models/SmolLM2-135M-Instruct" <<'EOF' || fail "the bundled model's fingerprint cache does not match its files after extraction"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
stamp = json.loads((d / "amber_fingerprint.json").read_text())["stamp"]
bad = [n for n, size, mtime in stamp if (d / n).stat().st_size != size or (d / n).stat().st_mtime_ns != mtime]
sys.exit(1 if bad else 0)
EOF
echo "   fingerprint cache valid after extraction"

echo "== installed .deb: amber --self-test (user nobody, no network, offscreen)"
run_installed "$R/usr/bin/amber" --self-test | tee "$T/selftest-deb.txt"
grep -q "(bundled," "$T/selftest-deb.txt" || fail "the bundled model was not used"

echo "== .tar.gz: $(basename "$TGZ") ($(du -m "$TGZ" | cut -f1) MB)"
mkdir -p "$T/tar"
tar -C "$T/tar" -xzf "$TGZ"
chmod 755 "$T/tar"
run_installed "$T/tar/amber-$VERSION-linux-$(uname -m)/amber" --self-test | tail -1

if [ "$TIMING" = 1 ]; then
  echo "== startup (the installed .deb, user nobody)"
  OUTJ=$ROOT/build/package/measurements.json
  OFF=$(python3 "$ROOT/packaging/measure_startup.py" "$R/usr/bin/amber" "$R/opt/amber" --as-user $NOBODY) \
    || fail "startup (offscreen)"
  XCB=null
  if command -v xvfb-run >/dev/null; then
    XCB=$(xvfb-run -a -s '-screen 0 1280x800x24' python3 "$ROOT/packaging/measure_startup.py" \
            "$R/usr/bin/amber" "$R/opt/amber" --platform xcb --as-user $NOBODY) || fail "startup (xcb under Xvfb)"
  fi
  printf '{"deb_bytes": %s, "tar_gz_bytes": %s, "installed_kbytes": %s,\n "offscreen": %s,\n "xcb": %s}\n' \
    "$(stat -c %s "$DEB")" "$(stat -c %s "$TGZ")" "$(du -sk "$R/opt/amber" | cut -f1)" "$OFF" "$XCB" > "$OUTJ"
  cat "$OUTJ"
fi
echo "package test PASSED"
