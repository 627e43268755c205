#!/usr/bin/env bash
# Set up vitlab on a fresh Debian machine: Fashion-MNIST from Debian's package where possible, a virtual
# environment in .venv with vitlab and its test dependencies. Safe to run again; it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
    echo "== installing Fashion-MNIST (Debian package dataset-fashion-mnist)"
    { $SUDO apt-get update -qq && $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist; } \
        || echo "   (apt-get failed; vitlab will download the dataset from its official address instead)"
fi

if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv with $($PYTHON --version)"
    $PYTHON -m venv .venv
fi
echo "== installing vitlab and its dependencies into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import vitlab, torch; print(f'vitlab {vitlab.__version__}, torch {torch.__version__}')"
