#!/usr/bin/env bash
# Set up vitlab on a fresh Debian machine: Fashion-MNIST from Debian's package where possible and a virtual
# environment in .venv with vitlab and its product dependencies. `setup.sh --test` adds what the test suite needs:
# the test extras (the reference libraries, the runtimes, the server), taming-transformers' modules and Debian's
# chromium for the browser test. Safe to run again; it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_TESTS=0
case "${1:-}" in
    "") ;;
    --test) WITH_TESTS=1 ;;
    *) echo "usage: bash scripts/setup.sh [--test]   (--test: also what the test suite needs)" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
apt_install() {  # apt_install PACKAGE WHY: Debian's package, when apt-get is here; a failure is reported, not fatal
    echo "== installing $1 (Debian package), $2"
    { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1"; } \
        || echo "   (apt-get failed: $3)"
}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && command -v apt-get >/dev/null; then
    apt_install dataset-fashion-mnist "the Fashion-MNIST data" \
        "vitlab will download the dataset from its official address instead"
fi
# the browser test of `vitlab serve` drives Debian's chromium (playwright downloads no browser here)
if [ "$WITH_TESTS" = 1 ] && ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
    apt_install chromium "for the browser test" "the browser test will say that chromium is missing"
fi

if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv with $($PYTHON --version)"
    $PYTHON -m venv .venv
fi

free_gib() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
disk_report() { echo "   free disk: $(free_gib .) GiB here ($(pwd)), $(free_gib "${TMPDIR:-/tmp}") GiB in ${TMPDIR:-/tmp}" >&2; }
# torch's CUDA build, the one pip takes with torchvision on x86_64, is ~5.5 GB installed and is unpacked through
# TMPDIR first; a full disk stops pip half way, with torch installed and torchvision not.
NEEDED_GIB=8
if ! .venv/bin/python -c "import torch, torchvision" 2>/dev/null && [ "$(free_gib .)" -lt "$NEEDED_GIB" ]; then
    echo "!! only $(free_gib .) GiB free in $(pwd); installing torch and torchvision needs about $NEEDED_GIB GiB." >&2
    echo "   pip will probably fail; free some space (old clones, ~/.cache/pip, /tmp) and run this again." >&2
fi

TARGET="."; [ "$WITH_TESTS" = 1 ] && TARGET=".[test]"
echo "== installing vitlab${TARGET#.} and its dependencies into .venv"
LOG=.venv/pip-install.log
if ! .venv/bin/python -m pip install --disable-pip-version-check -e "$TARGET" >"$LOG" 2>&1; then
    echo "!! pip install failed; the end of its log ($LOG):" >&2
    tail -n 25 "$LOG" >&2
    disk_report
    exit 1
fi

# taming-transformers' own modules are a test reference for VQGAN; its declared dependencies (an old
# pytorch-lightning, omegaconf, ...) are not needed to import them, and would pull in a different torch
if [ "$WITH_TESTS" = 1 ] && ! .venv/bin/python -m pip install --disable-pip-version-check --no-deps \
        "taming-transformers-rom1504==0.0.6" >>"$LOG" 2>&1; then
    echo "!! pip could not install taming-transformers-rom1504 (without its dependencies); see $LOG" >&2
    exit 1
fi

# Every module the package (and with --test, its tests) imports, so that a half-finished install fails here, in
# one line, and not as a wall of errors later.
if ! VITLAB_SETUP_TESTS=$WITH_TESTS .venv/bin/python - <<'PY'
import importlib
import os
import sys

names = ["torch", "torchvision", "numpy", "PIL", "safetensors", "tqdm", "matplotlib", "scipy", "pycocotools",
         "torchmetrics", "vitlab"]
if os.environ["VITLAB_SETUP_TESTS"] == "1":
    names += ["pytest", "xdist", "timm", "transformers", "onnx", "onnxscript", "onnxruntime", "openvino",
              "skimage", "diffusers", "einops", "taming.modules.vqvae.quantize", "fastapi", "uvicorn", "multipart",
              "gradio", "httpx", "playwright.sync_api", "psutil"]
missing = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - report every broken module, whatever it raised
        missing.append(f"{name} ({type(error).__name__}: {error})")
if missing:
    sys.exit("!! installed, but these do not import: " + "; ".join(missing))
import torch
import vitlab

print(f"vitlab {vitlab.__version__}, torch {torch.__version__}")
PY
then
    echo "   pip's log is in $LOG; run 'bash scripts/setup.sh' again once the cause is fixed." >&2
    disk_report
    exit 1
fi
