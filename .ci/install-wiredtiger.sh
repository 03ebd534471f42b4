#!/usr/bin/env bash
# Build and install the optional WiredTiger binding (PyPI sdist 11.3.1) into the
# active virtual environment.  Its build needs cmake, ninja and SWIG from PyPI
# -- swig==4.4.1 exactly, SWIG 4.5 yields a module that fails at import with
# PyInt_AsLong -- and finds them only when the venv's bin is on PATH.  pip's
# wheel cache may hold a broken wheel from an earlier attempt: --no-cache-dir.
#
# The sdist's setup.py configures CMake without a build type, and WiredTiger
# then defaults to a *Debug* build (-Og, assertions on: a lookup costs ~5x
# more).  setup.py passes only PATH through to CMake, so a small `cmake` shim
# placed first on PATH adds -DCMAKE_BUILD_TYPE=Release to the configure step.
set -euo pipefail
py=${PYTHON:-python}
venv_bin=$("$py" -c 'import sys, os; print(os.path.join(sys.prefix, "bin"))')
export PATH="$venv_bin:$PATH"
if "$py" -c 'import wiredtiger, sys; sys.exit(wiredtiger.diagnostic_build())' 2>/dev/null; then
    echo "wiredtiger (release build) already importable"; exit 0
fi
"$py" -m pip install -q cmake ninja 'swig==4.4.1'
real_cmake="$venv_bin/cmake"
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
cat > "$shim/cmake" <<SHIM
#!/usr/bin/env bash
for a in "\$@"; do
    if [ "\$a" = "-B" ]; then exec "$real_cmake" "\$@" -DCMAKE_BUILD_TYPE=Release; fi
done
exec "$real_cmake" "\$@"
SHIM
chmod +x "$shim/cmake"
PATH="$shim:$PATH" "$py" -m pip install --no-cache-dir --force-reinstall --no-deps 'wiredtiger==11.3.1'
"$py" -c 'import wiredtiger; assert not wiredtiger.diagnostic_build(), "diagnostic build"; print("wiredtiger", wiredtiger.wiredtiger_version()[0], "release build")'
