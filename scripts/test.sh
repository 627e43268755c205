#!/usr/bin/env bash
# Set up vitlab with what its tests need (scripts/setup.sh --test) and run the whole test suite, slow end-to-end
# tests included, on two pytest-xdist workers (a core each; the whole_machine tests run one at a time on every core).
# Arguments go to pytest: `bash scripts/test.sh -m "not slow"` is the quick tier, `-n 0` runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/python -m pytest -n "${VITLAB_TEST_WORKERS:-2}" "$@"  # --dist loadgroup: addopts
