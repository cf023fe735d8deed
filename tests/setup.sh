#!/bin/sh
# System packages the test suite needs, installed only when missing (Debian; needs root).
# Python packages come from pip (pyproject's [test] extra).
set -e
need=""
python3 -c "import ensurepip, venv" 2>/dev/null || need="$need python3-venv"
found=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && found=yes; done
command -v initdb >/dev/null 2>&1 && found=yes
[ -n "$found" ] || need="$need postgresql"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing:$need"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  else
    echo "missing system packages:$need (run: sudo apt-get install$need)" >&2
    exit 1
  fi
fi
