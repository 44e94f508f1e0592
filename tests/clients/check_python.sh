#!/bin/sh
# tests/clients/check_python.sh — the Python client (clients/python/,
# import name `tally`): its pytest suite against real tallyds it starts
# itself (clients/python/tests/support.py: a temp directory, the HTTP face
# on a loopback port of the kernel's), run with Debian's /usr/bin/python3
# and python3-pytest (setup.sh installs them; the python3 on PATH may be
# another build without pytest). Then `pip install` of the package from a
# copy of clients/python into a temp directory, and an import of what was
# installed; and mypy --strict over the package (python3-mypy). No pytest,
# no mypy or no pip is a failure, never a skip.
# Run by make check (TALLYD, TALLY_SRCDIR from the test environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin python
py=${TALLY_PYTHON:-/usr/bin/python3}
"$py" -m pytest --version >/dev/null 2>&1 ||
    { echo "check_python: $py -m pytest does not run (setup.sh installs python3-pytest)" >&2; exit 1; }

# the suite: no cache or bytecode written into the source tree
if PYTHONDONTWRITEBYTECODE=1 TMPDIR="$tmp" "$py" -m pytest -p no:cacheprovider -q -rfE \
    --rootdir "$TALLY_SRCDIR/clients/python" "$TALLY_SRCDIR/clients/python/tests"; then
    ok "pytest clients/python/tests"
else
    fail "pytest clients/python/tests (above)"
fi

# the type hints hold: mypy --strict, for the oldest Python the package takes
if "$py" -m mypy --strict --python-version 3.9 --cache-dir "$tmp/mypy" \
    "$TALLY_SRCDIR/clients/python/tally" >"$tmp/mypy.log" 2>&1; then
    ok "mypy --strict clients/python/tally"
else
    cat "$tmp/mypy.log" >&2
    fail "mypy --strict clients/python/tally"
fi

# installable with pip (from a copy: a build writes next to its sources)
cp -R "$TALLY_SRCDIR/clients/python" "$tmp/src" && chmod -R u+w "$tmp/src"
rm -rf "$tmp/src/tests"
if "$py" -m pip install --quiet --no-build-isolation --no-deps --no-index \
    --root-user-action=ignore --target "$tmp/site" "$tmp/src" >"$tmp/pip.log" 2>&1; then
    ok "pip install clients/python"
else
    cat "$tmp/pip.log" >&2
    fail "pip install clients/python"
fi
installed=$(cd "$tmp" && PYTHONPATH="$tmp/site" "$py" -c \
    'import tally, os; print(os.path.dirname(tally.__file__), tally.__version__, tally.Client.__name__)')
expect "the installed package imports" "$tmp/site/tally 0.1.0 Client" "$installed"
[ -f "$tmp/site/tally/py.typed" ] && ok "py.typed installed" || fail "py.typed installed"
shell_test_end check_python
