#!/usr/bin/env bash
# ColdFront (PyPI `coldfront`, a Django app on SQLite) in its own venv under the
# cache, for the policy e2e test (docs/policy.md). Idempotent: a finished install
# leaves a marker naming the version; anything that fails stops the script.
set -euo pipefail
VERSION="${COLDFRONT_VERSION:-1.1.10}"
CACHE="${SLURMKUBE_CACHE:-$HOME/.cache/slurmkube}"
PREFIX="$CACHE/coldfront/$VERSION"
MARKER="$PREFIX/.installed"
if [[ -f "$MARKER" && -x "$PREFIX/venv/bin/coldfront" ]]; then
  echo "$PREFIX"
  exit 0
fi
rm -rf "$PREFIX"
mkdir -p "$PREFIX"
python3 -m venv "$PREFIX/venv" >&2
"$PREFIX/venv/bin/pip" install --quiet --disable-pip-version-check "coldfront==$VERSION" >&2
"$PREFIX/venv/bin/python" -c "import coldfront.plugins.api, rest_framework.authtoken" >&2
test -x "$PREFIX/venv/bin/coldfront" || { echo "coldfront-install: no coldfront command in $PREFIX/venv" >&2; exit 1; }
echo "$VERSION" > "$MARKER"
echo "$PREFIX"
