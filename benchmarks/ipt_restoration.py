"""IPT on the held-out photographs: against doing nothing (bicubic, the noisy input), against the EDSR-baseline CNN
trained for the same time on the same patches, and how the tiles of tiled inference meet.

    python benchmarks/ipt_restoration.py --budget-min 20          # sr2 + denoise30, 20 minutes per model
    python benchmarks/ipt_restoration.py --budget-min 20 --plain  # also both models without the global residual
    python benchmarks/ipt_restoration.py --single                 # also one IPT per task (equal steps per task)
    python benchmarks/ipt_restoration.py --quick                  # a short run on scikit-image's photographs
    python benchmarks/ipt_restoration.py --smoke                  # every code path once (the tests run this)

The photographs are `vitlab fetch-photos`' 39 training and 10 held-out ones (whole photographs, never crops of a
training one), halved first (PIL bicubic). Every model is a full `vitlab train --task restoration` run with the
task's default recipe (Adam, lr 2e-4, batches of 16 patches of 48 pixels, cosine), from random weights:

- IPT (`--model`, default ipt_small) and EDSR-baseline, multi-task, each for `--budget-min` minutes of training:
  the steps that fill it at each model's throughput, measured here first (a few full Adam steps). Both presets
  predict the difference from the baseline (the global residual); `--plain` trains each once more without it.
- with `--single`, one IPT per task, each trained on its task alone for the multi-task run's steps per task.

Scores: the centre `--crop` pixels of each held-out photograph, degraded with the evaluation seed; Y-PSNR and
Y-SSIM as IPT reports them (BT.601 luma of the 8-bit output, a border of the scale shaved) and RGB PSNR. The bars:
×2 SR Y-PSNR ≥ bicubic + 0.5 dB; σ30 denoising ≥ the noisy input + 8 dB.

Seams: each model's tiled inference with every blend of overlapping tiles (layers/tiling.py), Y-PSNR over the
pixels within 2 px of a tile's edge inside the image against Y-PSNR over the rest (pooled over the photographs).
Writes benchmarks/results/ipt_restoration.{json,md} and ipt_restoration_crops.png (input, IPT, CNN, ground truth).
One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
BARS = {"sr2": 0.5, "denoise30": 8.0}  # dB above the input's Y-PSNR
SEAM = 2  # pixels each side of a tile's edge that count as the seam
BATCH = 16


def step_seconds(model_name: str, tasks: tuple[str, ...], batch: int, patch: int = 48, steps: int = 8) -> float:
    """Seconds per full training step (forward, L1, backward, Adam) on random patches, tasks in turn."""
    from vitlab.data.degradations import scale_of
    from vitlab.models import create_model

    torch.manual_seed(0)
    model = create_model(model_name, degradations=tasks)
    optimizer = torch.optim.Adam(model.parameters(), 1e-4)
    times = []
    for i in range(steps + len(tasks)):
        name = tasks[i % len(tasks)]
        side = patch * scale_of(name)
        lq, hq = torch.rand(batch, 3, patch, patch), torch.rand(batch, 3, side, side)
        start = time.perf_counter()
        torch.nn.functional.l1_loss(model(lq, name), hq).backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    timed = times[len(tasks):]
    return sum(timed) / len(timed)  # the mean: the tasks' steps differ (an SR tail works at twice the size)


def train_run(out: Path, data: str, model: str, tasks: tuple[str, ...], steps: int, extra: dict,
              batch: int = BATCH) -> dict:
    from vitlab.tasks import train

    result = train("restoration", out=str(out), overwrite=True, data=data, model=model,
                   degradations=",".join(tasks), steps=steps, batch_size=batch, eval_every=steps, **extra)
    return result


def score(run: Path, crop: int | None, data: str | None) -> dict:
    from vitlab.engine.run import RunDir
    from vitlab.tasks import load_task
    from vitlab.tasks.restoration.inference import evaluate_run

    task, saved = load_task(run)
    model = RunDir(run).load_model("last")
    return evaluate_run(task, model, saved, run, data=data, crop=crop or 0)


def crops_picture(runs: dict[str, Path], tasks: tuple[str, ...], path: Path, crop: int, size: int = 96) -> None:
    """One row per task: the input (bicubic-upscaled for SR), IPT, the CNN, the ground truth, on the first held-out
    photograph's centre."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vitlab.data.degradations import baseline
    from vitlab.data.restoration import RestorationPairs, load_photos
    from vitlab.engine.run import RunDir
    from vitlab.tasks import load_task
    from vitlab.tasks.restoration.inference import restore_image
    from vitlab.tasks.restoration.metrics import restoration_scores

    task, saved = load_task(runs["ipt"])
    image = load_photos(saved["data"]["test"][:1], halve_first=task.config.halve)[0]
    models = {key: RunDir(runs[key]).load_model("last") for key in ("ipt", "cnn")}
    figure, axes = plt.subplots(len(tasks), 4, figsize=(10, 2.7 * len(tasks)), squeeze=False)
    for row, name in enumerate(tasks):
        lq, hq, _ = RestorationPairs([image], name, crop, task.config.eval_seed)[0]
        lq8 = (lq * 255).round().to(torch.uint8)
        panels = {"input": baseline(lq8, name), "IPT": restore_image(models["ipt"], lq8, name),
                  "CNN (EDSR-baseline)": restore_image(models["cnn"], lq8, name),
                  "ground truth": (hq * 255).round().to(torch.uint8)}
        H, W = hq.shape[-2:]
        y, x = (H - size) // 2, (W - size) // 2
        for col, (label, picture) in enumerate(panels.items()):
            ax = axes[row][col]
            ax.imshow(picture[:, y:y + size, x:x + size].permute(1, 2, 0).numpy(), interpolation="nearest")
            caption = label
            if label != "ground truth":
                psnr = float(restoration_scores(picture.float()[None] / 255, hq[None], 2 if name == "sr2" else 1
                                                )["psnr_y"][0])
                caption = f"{label}\n{psnr:.2f} dB"
            ax.set_title(f"{name}: {caption}" if col == 0 else caption, fontsize=9)
            ax.axis("off")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def seam_mask(size: int, tile: int, stride: int, scale: int) -> torch.Tensor:
    """(size·scale,) True within SEAM px of a tile's edge inside the image, along one side of `size` input pixels
    (tiles of `tile` every `stride`, the last flush with the edge, as layers/tiling.py lays them)."""
    from vitlab.layers.tiling import window_starts

    starts = window_starts(size, tile, stride)
    edges = [s * scale for s in starts if s > 0] + [(s + tile) * scale for s in starts if s + tile < size]
    index = torch.arange(size * scale)
    mask = torch.zeros(size * scale, dtype=torch.bool)
    for edge in edges:
        mask |= (index >= edge - SEAM) & (index < edge + SEAM)
    return mask


@torch.no_grad()
def seams(run: Path, crop: int) -> dict:
    """Per degradation and blend: Y-PSNR within SEAM px of the tiles' edges and over the rest, pooled over the
    held-out photographs (the scale's border shaved, as the scores)."""
    import inspect

    from vitlab.data.restoration import RestorationPairs, load_photos
    from vitlab.engine.run import RunDir
    from vitlab.layers.tiling import BLENDS
    from vitlab.tasks import load_task
    from vitlab.tasks.restoration.metrics import quantize, rgb_to_y

    task, saved = load_task(run)
    model = RunDir(run).load_model("last")
    chop = inspect.signature(model.forward_chop).parameters
    tile = int(getattr(model, "patch_size", None) or chop["tile"].default)
    overlap = task.config.overlap
    images = load_photos(saved["data"]["test"], halve_first=task.config.halve)
    result: dict = {"tile": tile, "overlap": overlap}
    for name in saved["data"]["degradations"]:
        pairs = RestorationPairs(images, name, crop, task.config.eval_seed)
        scale = model.scale_of(name)
        sums = {blend: {"seam": [0.0, 0], "rest": [0.0, 0]} for blend in BLENDS}
        for index in range(len(pairs)):
            lq, hq, _ = pairs[index]
            h, w = lq.shape[-2:]
            seam = seam_mask(h, tile, tile - overlap, scale)[:, None] | seam_mask(w, tile, tile - overlap, scale)
            border = scale if scale > 1 else 0
            inside = torch.zeros_like(seam)
            inside[border:h * scale - border, border:w * scale - border] = True
            reference = rgb_to_y(hq[None].mul(255).round())[0, 0].double()
            for blend in BLENDS:
                out = model.forward_chop(lq[None], name, overlap, task.config.eval_batch_size, blend=blend)
                error = (rgb_to_y(quantize(out))[0, 0].double() - reference).square()
                for part, where in (("seam", seam & inside), ("rest", ~seam & inside)):
                    sums[blend][part][0] += float(error[where].sum())
                    sums[blend][part][1] += int(where.sum())
        # no seam where the image is one tile (None); an exact part would be inf dB
        result[name] = {blend: {part: (10 * math.log10(255.0 ** 2 * n / total) if total else math.inf) if n else None
                                for part, (total, n) in parts.items()}
                        for blend, parts in sums.items()}
    return result


def markdown(result: dict) -> str:
    m = result["machine"]
    columns = [("ipt", "IPT (all tasks)"), ("cnn", "EDSR-baseline (all tasks)"), ("ipt_plain", "IPT, no residual"),
               ("cnn_plain", "EDSR, no residual"), ("single", "IPT (one per task)")]
    columns = [(key, label) for key, label in columns if key in result["scores"]]
    lines = [f"Held-out photographs: {result['num_images']}, centres of {result['crop']} px; training "
             f"{result['budget_min']} min per multi-task model; Y-PSNR / Y-SSIM (RGB PSNR); {m['cpu']} "
             f"({m['cpu_capability']}), {m['threads']} threads, torch {m['torch']}; commit {result['commit']}.", "",
             "| degradation | input | " + " | ".join(label for _, label in columns) + " | bar (IPT) |",
             "| --- | --- | " + " | ".join("---" for _ in columns) + " | --- |"]
    for name in result["degradations"]:
        ipt = result["scores"]["ipt"]["degradations"][name]

        def cell(s: dict, prefix: str = "") -> str:
            return f"{s[prefix + 'psnr_y']:.2f} / {s[prefix + 'ssim_y']:.4f} ({s[prefix + 'psnr_rgb']:.2f})"

        gain = ipt["psnr_y"] - ipt["input_psnr_y"]
        bar = f"+{BARS[name]} dB: {'met' if gain >= BARS[name] else 'missed'} ({gain:+.2f})" if name in BARS else \
            f"{gain:+.2f} dB"
        cells = " | ".join(cell(result["scores"][key]["degradations"][name]) for key, _ in columns)
        lines.append(f"| {name} | {cell(ipt, 'input_')} | {cells} | {bar} |")
    lines += ["", f"Seams: Y-PSNR within {SEAM} px of a tile's edge / elsewhere (the gap), by how overlapping tiles "
                  "are blended.", "",
              "| model | tile, overlap | degradation | mean | window | centre |",
              "| --- | --- | --- | --- | --- | --- |"]
    for key, seam in result["seams"].items():
        for name in result["degradations"]:
            cells = " | ".join(f"{v['seam']:.2f} / {v['rest']:.2f} ({v['seam'] - v['rest']:+.2f})"
                               if v["seam"] is not None else "one tile"
                               for v in (seam[name][b] for b in ("mean", "window", "centre")))
            lines.append(f"| {result['runs'][key]['model']} ({key}) | {seam['tile']}, {seam['overlap']} | {name} | "
                         f"{cells} |")
    lines += ["", "| run | model | global residual | steps | train min | patches/s |",
              "| --- | --- | --- | --- | --- | --- |"]
    for key, info in result["runs"].items():
        lines.append(f"| {key} | {info['model']} | {info['global_residual']} | {info['steps']} | "
                     f"{info['train_min']:.1f} | {info['patches_per_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/photos", help="vitlab fetch-photos' folder (default: data/photos)")
    parser.add_argument("--degradations", default="sr2,denoise30")
    parser.add_argument("--model", default="ipt_small")
    parser.add_argument("--cnn", default="edsr_baseline")
    parser.add_argument("--budget-min", type=float, default=20.0, help="training minutes per multi-task model")
    parser.add_argument("--crop", type=int, default=512, help="score the centre of each held-out photograph")
    parser.add_argument("--plain", action="store_true", help="also train both models without the global residual")
    parser.add_argument("--single", action="store_true", help="also train one IPT per task")
    parser.add_argument("--keep-runs", type=Path, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="a short run: 6 s of training per model")
    parser.add_argument("--smoke", action="store_true",
                        help="every code path once: --quick with one step per task and no timing loop")
    parser.add_argument("--steps", nargs="*", default=[], metavar="RUN=N",
                        help="steps of a multi-task run (ipt=1464 cnn=1100) instead of the measured budget's")
    parser.add_argument("--reuse", nargs="*", default=[], metavar="RUN",
                        help="runs in --keep-runs to keep as they are, not train again (ipt, cnn, single_sr2, ...)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness import add_beside_option, provenance, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    from vitlab.engine.speed import tune_process
    from vitlab.models.registry import get_config

    tune_process()  # as `vitlab train` runs: freed memory kept, denormals flushed (IPT's steps take 0.82 s, not 1.5)
    tasks = tuple(args.degradations.split(","))
    data, eval_data = args.data, None
    args.quick = args.quick or args.smoke
    if args.quick:  # IPT's 48-pixel tiles meet inside a ×2 input of 80 (a smoke run's 56: two tiles, one seam)
        args.budget_min, args.crop = 0.1, 112 if args.smoke else 160
    batch = 2 if args.smoke else BATCH
    if args.smoke:  # one step of 2 patches per task, nothing timed: the code paths, not the rates
        args.steps = [f"{key}={len(tasks)}" for key in ("ipt", "cnn")] + args.steps
    models = (("ipt", args.model), ("cnn", args.cnn))
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep_runs or Path(tmp)
        timed_steps = 2 if args.quick else 8  # a quick run needs the path, not a precise rate
        seconds = {} if args.smoke else {key: step_seconds(name, tasks, BATCH, steps=timed_steps)
                                         for key, name in models}
        steps = {key: max(len(tasks), int(args.budget_min * 60 / seconds[key]) // len(tasks) * len(tasks))
                 for key in seconds}
        steps.update({key: int(n) for key, n in (item.split("=") for item in args.steps)})
        print(f"measured s/step: {seconds or 'nothing (smoke)'}; steps: {steps}", flush=True)
        runs, info = {}, {}
        plan = [("ipt", args.model, tasks, steps["ipt"], None), ("cnn", args.cnn, tasks, steps["cnn"], None)]
        if args.plain:
            plan += [("ipt_plain", args.model, tasks, steps["ipt"], False),
                     ("cnn_plain", args.cnn, tasks, steps["cnn"], False)]
        if args.single:
            plan += [(f"single_{name}", args.model, (name,), steps["ipt"] // len(tasks), None) for name in tasks]
        for key, model, its_tasks, n, residual in plan:
            runs[key] = root / key
            start = time.perf_counter()
            extra = {"eval_crop": 96, "eval_data": eval_data}
            if residual is not None:
                extra["global_residual"] = residual
            if key not in args.reuse:
                train_run(runs[key], data, model, its_tasks, n, extra, batch)
            from vitlab.engine.run import read_metrics
            rows = [row for row in read_metrics(runs[key]) if "train_time_s" in row]  # the test row has none
            if rows[-1]["step"] != n:
                raise ValueError(f"the kept run {runs[key]} trained {rows[-1]['step']} steps, not {n}")
            train_s = sum(row["train_time_s"] for row in rows)
            info[key] = {"model": model, "degradations": list(its_tasks), "steps": n, "train_min": train_s / 60,
                         "patches_per_s": n * batch / train_s, "wall_min": (time.perf_counter() - start) / 60,
                         "final_loss": rows[-1]["train_loss"],
                         "global_residual": get_config(model).global_residual if residual is None else residual}
            print(key, json.dumps(info[key]), flush=True)
        scores = {key: score(runs[key], args.crop, None) for key in runs if not key.startswith("single_")}
        if args.single:
            scores["single"] = {"degradations": {name: score(runs[f"single_{name}"], args.crop, None)
                                                 ["degradations"][name] for name in tasks}}
        seam = {key: seams(runs[key], args.crop) for key in ("ipt", "cnn")}
        first = scores["ipt"]
        result = {**provenance(beside=args.beside), "degradations": list(tasks), "budget_min": args.budget_min,
                  "crop": args.crop, "num_images": first["num_images"], "data": first["data"], "runs": info,
                  "scores": scores, "seams": seam, "seam_px": SEAM, "metrics": first["metrics"]}
        name = "ipt_restoration_quick" if args.quick else "ipt_restoration"
        result = write_json(args.out / f"{name}.json", result, beside=args.beside, indent=1)
        table = markdown(result)
        write_table(args.out / f"{name}.md", table + "\n")
        crops_picture(runs, tasks, args.out / f"{name}_crops.png", args.crop)
        print(table)
    return result


if __name__ == "__main__":
    main()
