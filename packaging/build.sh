#!/usr/bin/env bash
# Builds Amber: the PyInstaller --onedir bundle (packaging/amber.spec), then this platform's
# installers into dist/:
#   Linux    amber_<version>_amd64.deb (dpkg-deb, zstd) and amber-<version>-linux-x86_64.tar.gz
#   Windows  Amber-Setup-<version>.exe (Inno Setup 6, `iscc` on PATH)
#   macOS    Amber-<version>.dmg (signed and notarized when the certificate variables are set)
# A GPU variant (--variant gpu; Windows and Linux) also bundles CUDA 13 and cuDNN 9 and is named
# with a -gpu suffix. Usage:
#   packaging/build.sh [--variant cpu|gpu] [--bundle-only]
# Environment: PYTHON (default .venv's python), AMBER_PACKAGE_MODEL (a converted default model
# folder; default: $AMBER_HOME's or .amber-dev's, prepared with `amber-engine fetch-default`
# when missing), SOURCE_DATE_EPOCH (file times; default: the last commit's time).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VARIANT=cpu
BUNDLE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) VARIANT=$2; shift 2 ;;
    --variant=*) VARIANT=${1#*=}; shift ;;
    --bundle-only) BUNDLE_ONLY=1; shift ;;
    *) echo "usage: $0 [--variant cpu|gpu] [--bundle-only]" >&2; exit 2 ;;
  esac
done
case "$VARIANT" in cpu|gpu) ;; *) echo "variant must be cpu or gpu" >&2; exit 2 ;; esac

case "$(uname -s)" in
  Linux) OS=linux ;;
  Darwin) OS=macos ;;
  MINGW*|MSYS*|CYGWIN*) OS=windows ;;
  *) echo "unsupported build platform: $(uname -s)" >&2; exit 2 ;;
esac
if [ "$OS" = macos ] && [ "$VARIANT" = gpu ]; then
  echo "there is no GPU variant on macOS (ONNX Runtime uses CoreML there)" >&2; exit 2
fi
if [ -z "${PYTHON:-}" ]; then
  if [ "$OS" = windows ]; then PYTHON=$ROOT/.venv/Scripts/python.exe; else PYTHON=$ROOT/.venv/bin/python; fi
fi
export PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1

VERSION=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('amber-chat'))")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
BUILD=$ROOT/build/package
DIST=$ROOT/dist
SUFFIX=$([ "$VARIANT" = gpu ] && echo "-gpu" || true)
mkdir -p "$BUILD" "$DIST"
"$PYTHON" -c "import PyInstaller" 2>/dev/null || {
  echo "PyInstaller is missing: $PYTHON -m pip install -e '.[package]'" >&2; exit 1; }

# 1. the default model, converted once and staged with stable file times
MODEL_NAME=SmolLM2-135M-Instruct
if [ -n "${AMBER_PACKAGE_MODEL:-}" ]; then
  MODEL_SRC=$AMBER_PACKAGE_MODEL
else
  HOME_DIR=${AMBER_HOME:-$ROOT/.amber-dev}
  MODEL_SRC=$HOME_DIR/models/$MODEL_NAME
  if ! "$PYTHON" -c "import sys; from pathlib import Path; from engine.convert.default_model import is_ready; sys.exit(not is_ready(Path(sys.argv[1])))" "$MODEL_SRC"; then
    echo "== preparing the default model in $HOME_DIR (downloads ~100 MB once)"
    AMBER_HOME=$HOME_DIR "$PYTHON" -m engine.cli fetch-default
  fi
fi
echo "== staging the model"
"$PYTHON" packaging/stage_model.py "$MODEL_SRC" "$BUILD/model/$MODEL_NAME" "$SOURCE_DATE_EPOCH"

# 2. icons rendered from resources/icons/amber.svg
"$PYTHON" packaging/render_icons.py "$BUILD/icons" >/dev/null
if [ "$OS" = windows ]; then
  "$PYTHON" packaging/windows/version_info.py "$VERSION" "$BUILD/icons/version_info.txt"
fi

# 3. the onedir bundle, with the native kernels built first (a no-op when up to date): an
#    installer without this platform's kernels is an error (no compiler, or a library that does
#    not load), never a bundle that quietly runs on ONNX Runtime's ops
AMBER_REQUIRE_KERNELS=1 "$PYTHON" -m engine.native.build
"$PYTHON" packaging/check_kernels.py
echo "== PyInstaller ($VARIANT)"
T0=$(date +%s)
AMBER_VARIANT=$VARIANT AMBER_VERSION=$VERSION AMBER_BUNDLE_MODEL=$BUILD/model/$MODEL_NAME AMBER_ICONS=$BUILD/icons \
  "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$BUILD/dist-$VARIANT" --workpath "$BUILD/work-$VARIANT" packaging/amber.spec
echo "   bundle built in $(( $(date +%s) - T0 )) s"
"$PYTHON" packaging/stage_model.py --restamp "$BUILD/dist-$VARIANT" "$SOURCE_DATE_EPOCH"
[ "$BUNDLE_ONLY" = 1 ] && { echo "bundle: $BUILD/dist-$VARIANT"; exit 0; }

# 4. the installers
case "$OS" in
  linux)
    bash packaging/linux/make-packages.sh "$BUILD/dist-$VARIANT/Amber" "$VERSION" "$VARIANT" "$DIST" "$BUILD/icons" ;;
  windows)
    ISCC=${ISCC:-iscc}
    "$ISCC" //Q "//DAppVersion=$VERSION" "//DSourceDir=$(cygpath -w "$BUILD/dist-$VARIANT/Amber")" \
      "//DVariantSuffix=$SUFFIX" "//DOutputDir=$(cygpath -w "$DIST")" "//DIconFile=$(cygpath -w "$BUILD/icons/amber.ico")" \
      packaging/windows/amber.iss
    echo "built $DIST/Amber-Setup-$VERSION$SUFFIX.exe" ;;
  macos)
    bash packaging/macos/make-dmg.sh "$BUILD/dist-$VARIANT/Amber.app" "$VERSION" "$DIST" ;;
esac
