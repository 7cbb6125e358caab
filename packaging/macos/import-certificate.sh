#!/usr/bin/env bash
# CI only: imports a Developer ID certificate into a temporary keychain so that codesign finds
# it. Does nothing unless MACOS_CERTIFICATE_P12 (base64 of the .p12) and
# MACOS_CERTIFICATE_PASSWORD are set. Prints nothing secret.
set -euo pipefail
if [ -z "${MACOS_CERTIFICATE_P12:-}" ] || [ -z "${MACOS_CERTIFICATE_PASSWORD:-}" ]; then
  echo "no signing certificate configured: skipping"; exit 0
fi
KEYCHAIN=$RUNNER_TEMP/amber-signing.keychain-db
KEYCHAIN_PASSWORD=$(uuidgen)
echo "$MACOS_CERTIFICATE_P12" | base64 --decode > "$RUNNER_TEMP/cert.p12"
security create-keychain -p "$KEYCHAIN_PASSWORD" "$KEYCHAIN"
security set-keychain-settings -lut 21600 "$KEYCHAIN"
security unlock-keychain -p "$KEYCHAIN_PASSWORD" "$KEYCHAIN"
security import "$RUNNER_TEMP/cert.p12" -P "$MACOS_CERTIFICATE_PASSWORD" -A -t cert -f pkcs12 -k "$KEYCHAIN"
security set-key-partition-list -S apple-tool:,apple: -k "$KEYCHAIN_PASSWORD" "$KEYCHAIN" >/dev/null
security list-keychains -d user -s "$KEYCHAIN" $(security list-keychains -d user | tr -d '"')
rm -f "$RUNNER_TEMP/cert.p12"
echo "signing certificate imported"
