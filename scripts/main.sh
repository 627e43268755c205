#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/vitlab models
.venv/bin/vitlab demo --model vit_tiny_patch4_28
