#!/usr/bin/env bash
# The README's test command: from the venv the README's first command made,
# install what only the tests need, then run the whole suite twice.
#  - the WiredTiger binding as a release build (pip's plain build of the
#    `wiredtiger` extra is a Debug build, which a test refuses);
#  - tests/example_plugin, the third-party plugin the entry-point tests load;
#  - pass 1: every test, the import-layer contracts included (tests/test_layers.py);
#  - pass 2: the same suite on the pure-Python references (PREFIXBENCH_PURE=1),
#    which must behave exactly like the compiled twins.
# Options go to both pytest passes (e.g. `bash tests/run.sh -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
bash .ci/install-wiredtiger.sh
python -m pip install -q tests/example_plugin
python -m pytest -q "$@"
PREFIXBENCH_PURE=1 python -m pytest -q "$@"
