#!/usr/bin/env bash
# Python 3.11 with venv support: Debian 12's python3 is 3.11 but ships venv
# (ensurepip) in a separate package.
set -euo pipefail
if ! command -v python3 >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv
fi
version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ "$version" != "3.11" ]]; then
  echo "ensure-python: need Python 3.11, python3 is $version" >&2
  exit 1
fi
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
fi
