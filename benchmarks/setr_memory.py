"""Peak memory of one SETR training step at the paper's 768 × 768 crop, batch 1 (ViT-L/16: 2,304 tokens), beside the
out-of-memory reports users make against the official code.

    python benchmarks/setr_memory.py --decoders naive pup mla   # what the README shows
    python benchmarks/setr_memory.py                             # PUP only, fused and explicit attention
    python benchmarks/setr_memory.py --smoke --crop 32            # every path in seconds: the encoder at width 256

Each measurement runs in a fresh process: the model (the paper's, 19 classes, auxiliary heads on), SGD with momentum
(the official recipe) and one forward + backward + step on a random 768 crop, with the cross-entropy of the main
and auxiliary logits, on the CPU in fp32 (the same tensors a GPU holds in fp32). Two figures from the process's
peak resident set:
- "peak, tensors": the peak less the process's size before any tensor existed (Python and torch loaded), i.e.
  what a GPU's allocator would have to hold: weights, gradients, momentum and activations;
- "of which the step": the peak less the size just before the step (the weights already there).
The states (weights, gradients, momentum) are also given by count, 3 × 4 bytes per parameter.

"explicit" is the attention formula step by step, as the official code computes it (it keeps every block's
(16, 2305, 2305) attention probabilities for the backward); "fused" is scaled_dot_product_attention, vitlab's
default, whose CPU and GPU kernels keep no attention matrix. Writes benchmarks/results/setr_memory.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
# what users report against the official code and mmseg's reimplementation, fp32, batch 1 per GPU at 768
REPORTS = [
    "mmsegmentation's SETR metafile (V100, 768 crop, 1 image per GPU, ViT-L): Naive 24.06 GB, PUP 27.96 GB, "
    "MLA 24.10 GB",
    "fudan-zvg/SETR #13: out of memory on 2 × P40, and on 4 × TITAN RTX 24 GB at 1 image per GPU (DeiT encoder); "
    "the authors' minimum with DeiT at batch 8: 8 × 11.5–12.8 GB",
    "fudan-zvg/SETR #24: out of memory testing PUP on 2 × P100 16 GB; the authors trained on 8 × 32 GB V100s (#47)",
    "fudan-zvg/SETR #47: out of memory on one 24 GB card (18.99 GiB allocated)",
    "open-mmlab/mmsegmentation #1029: out of memory in the attention softmax on 8 × GTX 1080 11 GB",
]


def peak_rss_gib() -> float:
    """This process's peak resident set. /proc's VmHWM starts afresh at exec; getrusage's ru_maxrss does not (a
    child forked from a large parent starts at the parent's size), so it is only the fallback."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


# --smoke: the paper's model (24 blocks, 4 auxiliary heads) at a quarter of ViT-L's width, 19 M parameters instead
# of 300 M: every path of a measurement in seconds, with weights still large beside the process's own noise
SMOKE = {"dim": 256, "num_heads": 4, "channels": 64}


def measure(decoder: str, attention: str, crop: int, smoke: bool = False) -> dict:
    """One step in this process (call in a fresh one)."""
    import time

    import torch

    runtime = peak_rss_gib()  # Python and torch loaded, no tensors yet

    from vitlab.models import create_model
    from vitlab.tasks.segmentation.task import pixel_cross_entropy

    torch.manual_seed(0)
    model = create_model(f"setr_{decoder}_vit_large_patch16_384", img_size=crop,
                         **(SMOKE if smoke else {})).train()
    for module in model.modules():
        if hasattr(module, "fused"):
            module.fused = attention == "fused"
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(1, 3, crop, crop)
    masks = torch.randint(0, 19, (1, crop, crop))
    before = peak_rss_gib()  # the runtime, the model's weights and the input
    start = time.perf_counter()
    out = model(images)
    loss = pixel_cross_entropy(out.logits, masks) + 0.4 * sum(pixel_cross_entropy(a, masks) for a in out.aux_logits)
    loss.backward()
    optimizer.step()
    seconds = time.perf_counter() - start
    peak = peak_rss_gib()
    return {"decoder": decoder, "attention": attention, "crop": crop, "batch": 1, "params_m": params / 1e6,
            "aux_heads": len(out.aux_logits), "weights_gib": params * 4 / 2**30,
            "states_gib": 3 * params * 4 / 2**30, "runtime_gib": runtime, "rss_before_step_gib": before,
            "peak_rss_gib": peak, "tensors_gib": peak - runtime, "step_gib": peak - before, "step_s": seconds,
            "smoke": smoke, "torch": torch.__version__}


def by_decoder(record: dict) -> str:
    """One row per decoder: the training states, and the peak of a step with each attention path."""
    rows = record["results"]
    lines = ["| decoder | params | weights + gradients + momentum | peak, fused attention (vitlab's default) | "
             "peak, explicit attention (the official code's formula) |", "| --- | ---: | ---: | ---: | ---: |"]
    for decoder in dict.fromkeys(row["decoder"] for row in rows):
        fused, explicit = (next(row for row in rows if row["decoder"] == decoder and row["attention"] == attention)
                           for attention in ("fused", "explicit"))
        lines.append(f"| {decoder} | {fused['params_m']:.1f} M | {fused['states_gib']:.2f} GiB | "
                     f"{fused['tensors_gib']:.2f} GiB | {explicit['tensors_gib']:.2f} GiB |")
    return "\n".join(lines)


def write(rows: list[dict], out: Path, crop: int, beside: str = "nothing") -> None:
    """The table and the users' reports, as markdown beside the JSON."""
    from benchmarks.harness import machine, write_json, write_table

    lines = ["| decoder | attention | params | weights + grads + momentum | peak, tensors | of which the step "
             "| step s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['decoder']} | {r['attention']} | {r['params_m']:.1f} M | {r['states_gib']:.2f} GiB | "
                     f"{r['tensors_gib']:.2f} GiB | {r['step_gib']:.2f} GiB | {r['step_s']:.0f} |")
    m = machine()
    reports = "\n".join(f"- {line}" for line in REPORTS)
    table = "\n".join(lines)
    smoke = (" (a smoke run: the encoder at width 256, not the paper's model)"
             if any(row.get("smoke") for row in rows) else "")
    text = (f"{table}\n\n{crop} × {crop} crop, batch 1, fp32, SGD with momentum{smoke}; {m['cpu']}, "
            f"{m['threads']} threads, torch {m['torch']}\n\nReported against the official code:\n{reports}\n")
    print(text)
    write_json(out, {"machine": m, "results": rows, "reports": REPORTS}, beside=beside)
    write_table(out.with_suffix(".md"), text)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decoders", nargs="+", default=["pup"], choices=["naive", "pup", "mla"])
    parser.add_argument("--attention", nargs="+", default=["fused", "explicit"], choices=["fused", "explicit"])
    parser.add_argument("--crop", type=int, default=768)
    parser.add_argument("--smoke", action="store_true", help="the encoder at width 256: every path, not the figures")
    parser.add_argument("--one", nargs=2, metavar=("DECODER", "ATTENTION"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help="the JSON to write (default: benchmarks/results/setr_memory.json; with --smoke, "
                                      "setr_memory_smoke.json: a smoke run never replaces the measured figures)")
    from benchmarks.harness import add_beside_option  # no torch: the --one processes measure from a bare start

    add_beside_option(parser)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(*args.one, args.crop, args.smoke)))
        return []
    rows = []
    for decoder in args.decoders:
        for attention in args.attention:
            done = subprocess.run([sys.executable, __file__, "--one", decoder, attention, "--crop", str(args.crop),
                                   *(["--smoke"] if args.smoke else [])],
                                  capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out) if args.out else RESULTS / ("setr_memory_smoke.json" if args.smoke else "setr_memory.json")
    write(rows, out, args.crop, args.beside)
    return rows


if __name__ == "__main__":
    main()
