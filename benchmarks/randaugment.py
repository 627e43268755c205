"""RandAugment on a training batch: torchvision's v2.RandAugment image by image against vitlab's batched
`rand_augment` (the same choices from the same random stream, each operation run once per group of images), with
the training step it is paid for beside them.

    python benchmarks/randaugment.py           # Fashion-MNIST b128 (1×28×28) and ImageNet-sized b32 (3×224×224)
    python benchmarks/randaugment.py --quick   # a smoke run

Writes benchmarks/results/<tag>.json and <tag>.md and prints the markdown. One benchmark at a time on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torchvision.transforms import v2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable

from benchmarks.harness import add_beside_option, cpu_and_isa, machine, stamped, write_results  # noqa: E402 - after the path set-up
from vitlab.engine.augment import rand_augment  # noqa: E402 - after the path set-up above
from vitlab.models import create_model  # noqa: E402 - after the path set-up above

RESULTS = Path(__file__).parent / "results"
# (model whose training step is timed beside it, channels, image size, batch)
DEFAULT = [("vit_mini_patch7_28", 1, 28, 128), ("vit_tiny_patch16_224", 3, 224, 32)]
QUICK = [("vit_mini_patch7_28", 1, 28, 8)]


def seconds(fn, repeats: int) -> float:
    """Median wall time of `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(model_name: str, channels: int, size: int, batch: int, rounds: int, repeats: int) -> dict:
    images = torch.rand(batch, channels, size, size, generator=torch.Generator().manual_seed(0))
    per_image_op = v2.RandAugment(num_ops=2, magnitude=9)
    batched_op = rand_augment(2, 9)
    model = create_model(model_name, in_chans=channels, num_classes=10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    labels = torch.randint(0, 10, (batch,))

    def train_step():
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    variants = {"torchvision, image by image": lambda: torch.stack([per_image_op(image) for image in images]),
                "vitlab, batched": lambda: batched_op(images),
                "training step": train_step}
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):  # interleaved, the order rotated each round
        names = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
        for name in names:
            per_round[name].append(seconds(variants[name], repeats))
    median = {name: statistics.median(times) for name, times in per_round.items()}
    speedups = [a / b for a, b in zip(per_round["torchvision, image by image"], per_round["vitlab, batched"],
                                      strict=True)]
    return {"model": model_name, "shape": [batch, channels, size, size], "seconds": median, "per_round": per_round,
            "speedup": statistics.median(speedups), "speedup_range": [min(speedups), max(speedups)],
            "share_of_step_before": median["torchvision, image by image"] / (
                median["torchvision, image by image"] + median["training step"]),
            "share_of_step_after": median["vitlab, batched"] / (median["vitlab, batched"] + median["training step"])}


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [f"Machine: {cpu_and_isa(m)}, {m['cpus']} cores, torch "
             f"{m['torch']}, {m['threads']} threads. RandAugment "
             f"N=2, M=9; ms per batch, median of {result['rounds']} interleaved rounds (each the median of "
             f"{result['repeats']} calls); speedup = median of per-round ratios (range); share = augmentation / "
             f"(augmentation + training step of the model).", "",
             "| batch (B, C, H, W) | torchvision image by image | vitlab batched | speedup | training step "
             "(model) | share before → after |", "| --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        s = row["seconds"]
        lines.append(f"| {tuple(row['shape'])} | {1e3 * s['torchvision, image by image']:.1f} | "
                     f"{1e3 * s['vitlab, batched']:.1f} | {row['speedup']:.2f}× ({row['speedup_range'][0]:.2f}–"
                     f"{row['speedup_range'][1]:.2f}) | {1e3 * s['training step']:.0f} ({row['model']}) | "
                     f"{100 * row['share_of_step_before']:.0f} % → {100 * row['share_of_step_after']:.0f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one tiny workload, 1 round (a smoke run)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tag", default="randaugment", help="results file name (default: randaugment)")
    parser.add_argument("--out", default=str(RESULTS), help="results folder")
    add_beside_option(parser)
    args = parser.parse_args(argv)
    rounds, repeats = (1, 1) if args.quick else (args.rounds, args.repeats)
    torch.manual_seed(0)
    rows = [measure(*workload, rounds=rounds, repeats=repeats) for workload in (QUICK if args.quick else DEFAULT)]
    result = stamped({"machine": machine(), "rounds": rounds, "repeats": repeats, "rows": rows}, args.beside)
    write_results(Path(args.out), args.tag, result, markdown(result), beside=args.beside)
    return result


if __name__ == "__main__":
    main()
