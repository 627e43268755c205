#!/usr/bin/env bash
# Set up (scripts/setup.sh), train the default Fashion-MNIST recipe, evaluate it and print the test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh   # vitlab and its product dependencies, Fashion-MNIST: no test extras
.venv/bin/vitlab train --data fashion-mnist --out runs/fashion-mnist --overwrite
.venv/bin/vitlab eval runs/fashion-mnist
