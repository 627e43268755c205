"""One short check of vitlab on a CUDA GPU (under 8 minutes on one), printing one table:

1. each family's small preset trains a few steps in fp32, bf16 and fp16 (with the gradient scaler): classification
   (ViT, DeiT), detection (DETR, Deformable DETR), segmentation (SETR), restoration (IPT), generation (VQGAN);
2. `torchrun --nproc_per_node=1` trains on the nccl backend;
3. vitlab against timm and Hugging Face, inference and training steps at batch 64 in bf16, interleaved in rotated
   rounds (ViT-B/16), each eager and under torch.compile.

    python benchmarks/gpu_check.py                 # writes benchmarks/results/gpu_check.{json,md}
    python benchmarks/gpu_check.py --device cpu --quick   # the same code paths on the CPU, in tiny form

Without a CUDA GPU (and without --device cpu) it says so and exits 0 with nothing run: the project builds and
tests without one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
MINI = ROOT / "tests" / "fixtures" / "fashion-mnist-mini"
DATA = ["--data-dir", str(MINI), "--allow-partial-data"]
PRECISIONS = {"fp32": [], "bf16": ["--bf16"], "fp16": ["--fp16"]}


def training_runs(root: Path, steps: int) -> list[tuple[str, list[str]]]:
    """(label, `vitlab train` arguments) for each family's small preset, a few steps each."""
    scenes, photos = root / "scenes", root / "photos"
    short = ["--steps", str(steps), "--eval-every", str(steps)]
    return [
        ("vit classification", ["--model", "vit_tiny_patch4_28", *DATA, *short, "--batch-size", "64"]),
        ("deit classification", ["--model", "deit_mini_patch7_28", *DATA, *short, "--batch-size", "64"]),
        ("detr detection", ["--task", "detection", "--data", str(scenes), *short, "--batch-size", "8",
                            "--eval-batch-size", "4"]),
        ("deformable detr detection", ["--task", "detection", "--model", "deformable_detr_small", "--data",
                                       str(scenes), *short, "--batch-size", "8", "--eval-batch-size", "4"]),
        ("setr segmentation", ["--task", "segmentation", "--model", "setr_pup_small", "--data", str(scenes),
                               *short, "--batch-size", "8", "--crop-size", "64", "--eval-batch-size", "4"]),
        ("ipt restoration", ["--task", "restoration", "--model", "ipt_small", "--data", str(photos),
                             "--degradations", "sr2", *short, "--batch-size", "4", "--patches-per-task", "4",
                             "--eval-crop", "48"]),
        ("vqgan generation", ["--task", "vqgan", *DATA, *short, "--batch-size", "16", "--eval-images", "0"]),
    ]


def make_data(root: Path) -> None:
    """Scenes for detection and segmentation, photographs for restoration, from what is on disk."""
    from PIL import Image

    from vitlab.cli.main import main
    from vitlab.data.photos import skimage_photos

    assert main(["make-scenes", "--out", str(root / "scenes"), "--train", "32", "--val", "8", "--test", "8",
                 "--size", "64", "--scale", "16-32", "--objects", "1-3", *DATA]) == 0
    for i, (name, array) in enumerate(skimage_photos().items()):
        split = root / "photos" / ("test" if i >= 3 else "train")
        split.mkdir(parents=True, exist_ok=True)
        side = 96 if i >= 3 else 200
        Image.fromarray(array).crop((100, 100, 100 + side, 100 + side)).save(split / f"{name}.png")


def check_training(root: Path, device: str, steps: int, precisions: list[str]) -> list[dict]:
    from vitlab.cli.main import main

    rows = []
    for label, args in training_runs(root, steps):
        for precision in precisions:
            if precision == "fp16" and not device.startswith("cuda"):
                rows.append({"check": f"train {label}", "precision": precision, "status": "skipped (CUDA only)"})
                continue
            out = root / "runs" / f"{label.replace(' ', '-')}-{precision}"
            start = time.perf_counter()
            try:
                code = main(["train", *args, *PRECISIONS[precision], "--device", device, "--out", str(out)])
                status = "ok" if code == 0 else f"exit {code}"
            except Exception as error:  # noqa: BLE001 - one failing family is a row, not the end of the check
                status = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            log = out / "metrics.jsonl"
            losses = [json.loads(line).get("train_loss") for line in log.read_text().splitlines()] \
                if log.is_file() else []
            losses = [v for v in losses if isinstance(v, (int, float))]
            finite = bool(losses) and all(v == v and abs(v) != float("inf") for v in losses)
            rows.append({"check": f"train {label}", "precision": precision,
                         "status": status if finite or status != "ok" else "ok (no finite loss logged)",
                         "seconds": round(time.perf_counter() - start, 1),
                         "last_loss": round(losses[-1], 4) if losses else None})
    return rows


def check_torchrun(root: Path, device: str) -> dict:
    """One process under torchrun on the device's backend (nccl on CUDA)."""
    out = root / "runs" / "torchrun"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "--standalone", "-m", "vitlab",
               "train", "--model", "vit_tiny_patch4_28", *DATA, "--steps", "4", "--eval-every", "4",
               "--batch-size", "64", "--device", device, "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    backend = "nccl" if device.startswith("cuda") else "gloo"
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return {"check": f"torchrun --nproc_per_node=1 ({backend})", "precision": "fp32", "status": status,
            "seconds": round(time.perf_counter() - start, 1)}


def check_speed(device: str, batch: int, rounds: int, name: str, compile: bool = True) -> list[dict]:
    """vitlab, timm and HF ViT at `batch` in bf16 autocast: inference and training steps, eager and compiled,
    interleaved in rotated rounds; images/s medians and ratios to timm eager."""
    import torch

    from benchmarks.harness.workloads import build, image_shape
    from vitlab.models.registry import get_config

    torch.manual_seed(0)
    shape = image_shape(name)
    x = torch.randn(batch, *shape, device=device)
    y = torch.randint(0, get_config(name).num_classes, (batch,), device=device)
    models = {}
    for library in ("vitlab", "timm", "hf"):
        eager = build(library, name).to(device)
        models[library] = eager
        if compile:
            models[f"{library}+compile"] = torch.compile(eager)
    optimizers = {label: torch.optim.AdamW(m.parameters(), lr=1e-4) for label, m in models.items()}

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def infer(label):
        with torch.inference_mode(), torch.autocast(torch.device(device).type, torch.bfloat16):
            models[label].eval()(x)

    def train(label):
        model, optimizer = models[label].train(), optimizers[label]
        with torch.autocast(torch.device(device).type, torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    samples: dict[tuple[str, str], list[float]] = {}
    first: dict[tuple[str, str], float] = {}
    labels = list(models)
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            for mode, fn in (("inference", infer), ("training", train)):
                if (label, mode) not in first:  # warm-up call (compiles)
                    start = time.perf_counter()
                    fn(label)
                    sync()
                    first[(label, mode)] = time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(3):
                    fn(label)
                sync()
                samples.setdefault((label, mode), []).append(3 * batch / (time.perf_counter() - start))
    rows = []
    for (label, mode), values in samples.items():
        base = samples[("timm", mode)]
        rows.append({"check": f"{name} {mode} b{batch}", "precision": "bf16", "status": label,
                     "images_per_s": round(statistics.median(values), 1),
                     "ratio_to_timm": round(statistics.median(v / b for v, b in zip(values, base)), 3),
                     "first_call_s": round(first[(label, mode)], 1)})
    return rows


def markdown(rows: list[dict], host: dict) -> str:
    lines = [f"# GPU check: {host.get('gpu', host['device'])}", "",
             f"torch {host['torch']}, `python benchmarks/gpu_check.py`", "",
             "| check | precision | status / library | s | last loss | images/s | × timm | first call s |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['check']} | {r['precision']} | {r['status']} | {r.get('seconds', '')} | "
                     f"{r.get('last_loss', '') if r.get('last_loss') is not None else ''} | "
                     f"{r.get('images_per_s', '')} | {r.get('ratio_to_timm', '')} | {r.get('first_call_s', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the code paths")
    parser.add_argument("--quick", action="store_true", help="2 steps, fp32 only, a tiny speed model, no compile")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for gpu_check.json and .md")
    from benchmarks.harness.host import add_beside_option, machine
    from benchmarks.harness.reporting import write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU on this machine: skipped (nothing run). On a machine with one: "
              "python benchmarks/gpu_check.py")
        return 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vitlab-gpu-check-") as tmp:
        root = Path(tmp)
        make_data(root)
        precisions = ["fp32"] if args.quick else list(PRECISIONS)
        rows = check_training(root, args.device, 2 if args.quick else 6, precisions)
        rows.append(check_torchrun(root, args.device))
    speed_model = "vit_tiny_patch4_28" if args.quick else "vit_base_patch16_224"
    rows += check_speed(args.device, 8 if args.quick else 64, 1 if args.quick else 3, speed_model,
                        compile=not args.quick)
    host = machine(args.device)
    host["seconds"] = round(time.perf_counter() - start, 1)
    write_results(args.out, "gpu_check" if not args.quick else "gpu_check_quick", {"machine": host, "rows": rows},
                  markdown(rows, host), beside=args.beside, device=args.device)
    failed = [r for r in rows if r["status"] not in ("ok", "vitlab", "timm", "hf", "vitlab+compile", "timm+compile",
                                                      "hf+compile") and not r["status"].startswith("skipped")]
    print(f"gpu_check: {len(rows)} rows in {host['seconds']} s; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
