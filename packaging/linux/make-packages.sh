#!/usr/bin/env bash
# Wraps the onedir bundle into the Linux downloads (called by packaging/build.sh):
#   DIST/amber[-gpu]_<version>_amd64.deb           dpkg-deb, zstd; installs to /opt/amber
#   DIST/amber[-gpu]-<version>-linux-x86_64.tar.gz the onedir folder (run ./amber)
# Usage: make-packages.sh BUNDLE_DIR VERSION VARIANT DIST_DIR ICONS_DIR
set -euo pipefail
BUNDLE=$(cd "$1" && pwd); VERSION=$2; VARIANT=$3; DIST=$4; ICONS=$5
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PKG=amber; [ "$VARIANT" = gpu ] && PKG=amber-gpu
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
MACHINE=$(uname -m)
EPOCH=${SOURCE_DATE_EPOCH:-$(date +%s)}
WORK=$ROOT/build/package/linux-$VARIANT
rm -rf "$WORK"; mkdir -p "$WORK" "$DIST"

# ---- .tar.gz: the onedir folder as amber-<version>/ ---------------------------------------------
TARNAME=$PKG-$VERSION-linux-$MACHINE
mkdir -p "$WORK/tar"
cp -a "$BUNDLE" "$WORK/tar/$TARNAME"
install -m 0644 "$HERE/amber.desktop" "$WORK/tar/$TARNAME/amber.desktop"
install -m 0644 "$ROOT/resources/icons/amber.svg" "$WORK/tar/$TARNAME/amber.svg"
tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner -C "$WORK/tar" -cf - "$TARNAME" \
  | gzip -n -6 > "$DIST/$TARNAME.tar.gz"
echo "built $DIST/$TARNAME.tar.gz ($(du -m "$DIST/$TARNAME.tar.gz" | cut -f1) MB)"

# ---- .deb ---------------------------------------------------------------------------------------
R=$WORK/deb
mkdir -p "$R/DEBIAN" "$R/opt" "$R/usr/bin" "$R/usr/share/applications" "$R/usr/share/doc/$PKG" \
  "$R/usr/share/icons/hicolor/scalable/apps"
cp -a "$BUNDLE" "$R/opt/amber"
ln -s ../../opt/amber/amber "$R/usr/bin/amber"
install -m 0644 "$HERE/amber.desktop" "$R/usr/share/applications/amber.desktop"
install -m 0644 "$ROOT/resources/icons/amber.svg" "$R/usr/share/icons/hicolor/scalable/apps/amber.svg"
for s in 16 24 32 48 64 128 256 512; do
  install -D -m 0644 "$ICONS/amber-$s.png" "$R/usr/share/icons/hicolor/${s}x${s}/apps/amber.png"
done
cat > "$R/usr/share/doc/$PKG/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: Amber
Source: https://github.com/amber-chat/amber

Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
 /opt/amber/_internal bundles Python, Qt 6 (LGPL-3.0), PySide6 (LGPL-3.0), ONNX Runtime (MIT),
 NumPy (BSD-3-Clause) and the SmolLM2-135M-Instruct model (Apache-2.0), each under its own licence.
EOF
# Everything shipped is world-readable, executables and folders are 0755, owned by root (dpkg-deb).
chmod -R u+rwX,go+rX,go-w "$R"
# Reproducible file times; the model keeps its own (its fingerprint cache records them).
find "$R" -path "$R/opt/amber/_internal/models" -prune -o -exec touch -h -d "@$EPOCH" {} +

DEPENDS=$(bash "$HERE/shlibdeps.sh" "$R/opt/amber")
INSTALLED_KB=$(du -sk --exclude=DEBIAN "$R" | cut -f1)
cat > "$R/DEBIAN/control" <<EOF
Package: $PKG
Version: $VERSION
Architecture: $ARCH
Maintainer: Amber developers <amber@example.org>
Installed-Size: $INSTALLED_KB
Depends: $DEPENDS
Recommends: fonts-dejavu-core | fonts-noto-core, libwayland-egl1, xdg-desktop-portal
Section: utils
Priority: optional
Homepage: https://github.com/amber-chat/amber
Description: desktop chat for local language models
 Amber chats with language models that run on this computer (ONNX Runtime),
 with no account and no network: the default model, SmolLM2-135M-Instruct,
 is included. Conversations are kept in a local database; pinned chats
 resume instantly from their saved state.
EOF
if [ "$PKG" = amber-gpu ]; then
  sed -i 's/^Description: .*/&, with NVIDIA CUDA/' "$R/DEBIAN/control"
  printf 'Provides: amber\nConflicts: amber\nReplaces: amber\n' >> "$R/DEBIAN/control"
else
  printf 'Conflicts: amber-gpu\n' >> "$R/DEBIAN/control"
fi
DEB=$DIST/${PKG}_${VERSION}_${ARCH}.deb
T0=$(date +%s%N)
# zstd level 9: 186 MB in 12 s here; 19 saves 11 MB more but takes 4 min (CI release builds set it)
dpkg-deb --root-owner-group -Zzstd "-z${AMBER_DEB_ZSTD_LEVEL:-9}" --build "$R" "$DEB" >/dev/null
echo "built $DEB ($(du -m "$DEB" | cut -f1) MB, dpkg-deb $(( ($(date +%s%N) - T0) / 1000000 )) ms)"
echo "Depends: $DEPENDS"
