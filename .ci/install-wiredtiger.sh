#!/usr/bin/env bash
# Build and install the optional WiredTiger binding (PyPI sdist 11.3.1) into the
# active virtual environment.  Its build needs cmake, ninja and SWIG from PyPI
# -- swig==4.4.1 exactly, SWIG 4.5 yields a module that fails at import with
# PyInt_AsLong -- and finds them only when the venv's bin is on PATH.  pip's
# wheel cache may hold a broken wheel from an earlier attempt: --no-cache-dir.
set -euo pipefail
py=${PYTHON:-python}
venv_bin=$("$py" -c 'import sys, os; print(os.path.join(sys.prefix, "bin"))')
export PATH="$venv_bin:$PATH"
if "$py" -c 'import wiredtiger' 2>/dev/null; then
    echo "wiredtiger already importable"; exit 0
fi
"$py" -m pip install -q cmake ninja 'swig==4.4.1'
"$py" -m pip install --no-cache-dir 'wiredtiger==11.3.1'
"$py" -c 'import wiredtiger; print("wiredtiger", wiredtiger.wiredtiger_version()[0])'
