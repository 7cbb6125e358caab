#!/usr/bin/env bash
# Wraps Amber.app into DIST/Amber-<version>.dmg (called by packaging/build.sh on macOS).
# Signing and notarization run only when their variables are set; otherwise they are skipped
# (an unsigned .dmg: users open it with right-click > Open the first time).
#   AMBER_CODESIGN_IDENTITY   "Developer ID Application: Name (TEAMID)" in the keychain
#                             (CI: packaging/macos/import-certificate.sh puts it there)
#   AMBER_NOTARY_APPLE_ID, AMBER_NOTARY_TEAM_ID, AMBER_NOTARY_PASSWORD (app-specific password)
#     or AMBER_NOTARY_KEY (path to an App Store Connect .p8), AMBER_NOTARY_KEY_ID, AMBER_NOTARY_ISSUER
# Usage: make-dmg.sh PATH/Amber.app VERSION DIST_DIR
set -euo pipefail
APP=$1; VERSION=$2; DIST=$3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Intel builds are told apart by name (each .app holds one architecture: the build host's)
ARCH_SUFFIX=$([ "$(uname -m)" = x86_64 ] && echo "-x86_64" || true)
DMG=$DIST/Amber-$VERSION$ARCH_SUFFIX.dmg
mkdir -p "$DIST"

if [ -n "${AMBER_CODESIGN_IDENTITY:-}" ]; then
  echo "== signing Amber.app as $AMBER_CODESIGN_IDENTITY"
  # PyInstaller signed each binary already (codesign_identity in the spec); seal the bundle.
  codesign --force --deep --timestamp --options runtime \
    --entitlements "$HERE/entitlements.plist" --sign "$AMBER_CODESIGN_IDENTITY" "$APP"
  codesign --verify --deep --strict --verbose=2 "$APP"
else
  echo "== AMBER_CODESIGN_IDENTITY not set: Amber.app is not signed (ad-hoc signature only)"
fi

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
rm -f "$DMG"
hdiutil create -volname "Amber $VERSION" -srcfolder "$STAGE" -fs HFS+ -format ULFO -ov "$DMG" >/dev/null

if [ -n "${AMBER_CODESIGN_IDENTITY:-}" ]; then
  codesign --force --timestamp --sign "$AMBER_CODESIGN_IDENTITY" "$DMG"
  auth=()
  if [ -n "${AMBER_NOTARY_KEY:-}" ]; then
    auth=(--key "$AMBER_NOTARY_KEY" --key-id "$AMBER_NOTARY_KEY_ID" --issuer "$AMBER_NOTARY_ISSUER")
  elif [ -n "${AMBER_NOTARY_APPLE_ID:-}" ]; then
    auth=(--apple-id "$AMBER_NOTARY_APPLE_ID" --team-id "$AMBER_NOTARY_TEAM_ID" --password "$AMBER_NOTARY_PASSWORD")
  fi
  if [ ${#auth[@]} -gt 0 ]; then
    echo "== notarizing (waits for Apple, usually a few minutes)"
    xcrun notarytool submit "$DMG" "${auth[@]}" --wait
    xcrun stapler staple "$DMG"
    spctl --assess --type open --context context:primary-signature --verbose=2 "$DMG" || true
  else
    echo "== no notarization credentials: the .dmg is signed but not notarized"
  fi
fi
echo "built $DMG ($(du -m "$DMG" | cut -f1) MB)"
