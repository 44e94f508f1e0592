#!/bin/sh
# tests/layout/check_layering.sh — the structure rules (docs/DESIGN.md,
# "Layers and rooms"): make check runs check_layering.py on the sources
# ($TALLY_SRCDIR) and on the objects built in the current directory.
set -u
src=${TALLY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
exec python3 "$src/tests/layout/check_layering.py" "$src" "$(pwd)"
