"""VQGAN's two stages on Fashion-MNIST (padded to 32×32), scored on the 10,000 test images, against training time.

    python benchmarks/vqgan_fashion_mnist.py --classifier runs/fm     # a `vitlab train` classification run
    python benchmarks/vqgan_fashion_mnist.py --quick                  # a smoke run on the 200-image test slice

Stage 1 is `vitlab train --task vqgan --model vqgan_small` (the task's recipe: Adam β = (0.5, 0.9), lr 2e-4,
batches of 64, the GAN term from --disc-start), evaluated after every epoch on 2,000 validation images (the task holds
5,000 training images out); stage 2 is `vitlab train --task prior --vqgan RUN --classifier RUN` (gpt_prior_small),
evaluated after every epoch with 1,000 class-conditional samples against the validation images. Each run's best
checkpoint is picked on those; both are then scored once by `vitlab eval` on the whole test set:

- reconstruction PSNR and SSIM (the 28×28 pixels of the data, the padding cropped off), codebook usage and
  perplexity;
- FID of --samples samples against the test images, in the classifier's feature space (its pooled features), beside
  FID(as many training images, test images): the floor that real images reach;
- the classifier's accuracy on the samples: a sample of class c counted right when recognised as c.

The bars: PSNR ≥ 24 dB, usage ≥ 50 %, class accuracy ≥ 70 %. Writes benchmarks/results/vqgan_fashion_mnist.{json,md,
png} (the curves), docs/img/vqgan_samples.png (a row of samples per class) and docs/img/vqgan_reconstructions.png
(test images above their reconstructions). One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
PICTURES = ROOT / "docs" / "img"
MINI = ROOT / "tests" / "fixtures" / "fashion-mnist-mini"
BARS = {"psnr": 24.0, "usage": 0.5, "class_acc": 0.7}


def curves(run: Path) -> list[dict]:
    """The validation rows of a run, their keys without the `val_` prefix (the test row, scored once, left out)."""
    from vitlab.engine.run import read_metrics

    return [{key.removeprefix("val_"): value for key, value in row.items()} for row in read_metrics(run)
            if not any(key.startswith("test_") for key in row)]


def plot(vqgan_rows: list[dict], prior_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    minutes = [r["elapsed_s"] / 60 for r in vqgan_rows]
    axes[0].plot(minutes, [r["psnr"] for r in vqgan_rows], marker="o")
    axes[0].axhline(BARS["psnr"], ls="--", c="grey")
    axes[0].set(title="stage 1: validation PSNR (dB)", xlabel="training minutes")
    axes[1].plot(minutes, [100 * r["usage"] for r in vqgan_rows], marker="o")
    axes[1].axhline(100 * BARS["usage"], ls="--", c="grey")
    axes[1].set(title="stage 1: codebook usage (%)", xlabel="training minutes")
    if prior_rows and "class_acc" in prior_rows[0]:
        prior_minutes = [r["elapsed_s"] / 60 for r in prior_rows]
        axes[2].plot(prior_minutes, [100 * r["class_acc"] for r in prior_rows], marker="o", label="class accuracy %")
        axes[2].plot(prior_minutes, [r["fid"] for r in prior_rows], marker="s", label="FID")
        axes[2].plot(prior_minutes, [r["fid_floor"] for r in prior_rows], ls=":", label="FID floor (train vs val)")
        axes[2].axhline(100 * BARS["class_acc"], ls="--", c="grey")
        axes[2].legend(fontsize=8)
    axes[2].set(title="stage 2: samples", xlabel="training minutes")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pictures(vqgan_run: Path, prior_run: Path, out: Path, per_class: int) -> None:
    from vitlab.engine.run import RunDir
    from vitlab.tasks import load_task
    from vitlab.tasks.generation.inference import grid_picture, sample_grid, save_picture
    from vitlab.tasks.generation.metrics import from_uint8, to_unit
    from vitlab.tasks.generation.prior_task import vqgan_images

    task, saved = load_task(prior_run)
    sample_grid(task, RunDir(prior_run).load_model("best"), saved, out / "vqgan_samples.png", None, per_class)
    _, vq_saved = load_task(vqgan_run)
    vqgan = RunDir(vqgan_run).load_model("best").eval()
    images = vqgan_images(vq_saved)
    picks = torch.cat([torch.nonzero(images.test_labels == c).flatten()[:2] for c in range(len(images.classes))])
    with torch.no_grad():
        x = from_uint8(images.test[picks])
        rebuilt = to_unit(vqgan(x).reconstruction)
    save_picture(grid_picture(torch.cat([to_unit(x), rebuilt]), len(picks)), out / "vqgan_reconstructions.png")


def table_of(result: dict) -> str:
    """The metrics against their bars, from what vqgan_fashion_mnist.json records (the first runs recorded the
    prior's loss as test_loss and no codebook size)."""
    final, bars = result["final"], result["bars"]

    def verdict(key: str) -> str:
        return "met" if bars[key]["met"] else "missed"

    codes = f" of {result['num_codes']}" if "num_codes" in result else ""
    return "\n".join([
        "| metric | value | bar | |", "| --- | --- | --- | --- |",
        f"| reconstruction PSNR (dB) | {final['psnr']:.2f} | ≥ {bars['psnr']['bar']:g} | {verdict('psnr')} |",
        f"| reconstruction SSIM | {final['ssim']:.4f} | | |",
        f"| codebook usage | {100 * final['usage']:.1f} %{codes} | ≥ {100 * bars['usage']['bar']:g} % | "
        f"{verdict('usage')} |",
        f"| codebook perplexity | {final['perplexity']:.1f} | | |",
        f"| samples recognised as their class | {100 * final['class_acc']:.1f} % | "
        f"≥ {100 * bars['class_acc']['bar']:g} % | {verdict('class_acc')} |",
        f"| FID of {final['samples']:,} samples (classifier features) | {final['fid']:.2f} | | |",
        f"| FID floor: {final['samples']:,} training images against the test images | {final['fid_floor']:.2f} | | |",
        f"| prior test cross-entropy (nats per code) | {final.get('code_loss', final.get('test_loss')):.3f} | | |"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", type=Path, help="a classification run on Fashion-MNIST (FID features)")
    parser.add_argument("--vqgan-epochs", type=int, default=3)
    parser.add_argument("--prior-epochs", type=int, default=6)
    parser.add_argument("--disc-start", type=int, default=1500)
    parser.add_argument("--disc-weight", type=float, default=0.8)
    parser.add_argument("--samples", type=int, default=2000, help="samples scored at the end (classes in turn)")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "vqgan_benchmark", help="where the runs go")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--pictures", type=Path, default=PICTURES)
    parser.add_argument("--quick", action="store_true")
    from benchmarks.harness import add_beside_option, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)

    from vitlab.engine.run import RunDir
    from vitlab.engine.speed import tune_process
    from vitlab.tasks import load_task, train
    from vitlab.tasks.generation.inference import evaluate_run

    tune_process()
    data = dict(data_dir=str(MINI), allow_partial_data=True) if args.quick else {}
    small = dict(batch_size=16) if args.quick else {}
    if args.quick:
        args.vqgan_epochs, args.prior_epochs, args.samples, args.disc_start = 1, 1, 20, 5
    if args.classifier is None:
        if not args.quick:
            parser.error("--classifier RUN is needed: a Fashion-MNIST classification run (`vitlab train --out RUN`)")
        args.classifier = args.runs / "classifier"
        train(out=str(args.classifier), overwrite=True, epochs=1, model="vit_tiny_patch4_28",
              model_overrides={"dim": 32, "depth": 1, "num_heads": 2}, batch_size=32, **data)
    vqgan_run, prior_run = args.runs / "vqgan", args.runs / "prior"
    start = time.time()
    train("vqgan", out=str(vqgan_run), overwrite=True, epochs=args.vqgan_epochs, disc_start=args.disc_start,
          disc_weight=args.disc_weight,
          eval_images=0 if args.quick else 2000, **data, **small)
    vqgan_minutes = (time.time() - start) / 60
    start = time.time()
    train("prior", vqgan=str(vqgan_run), classifier=str(args.classifier), out=str(prior_run), overwrite=True,
          epochs=args.prior_epochs, eval_samples=args.samples if args.quick else 1000, **small)
    prior_minutes = (time.time() - start) / 60

    task, saved = load_task(prior_run)
    final = evaluate_run(task, RunDir(prior_run).load_model("best"), saved, prior_run, samples=args.samples)
    vq_saved = load_task(vqgan_run)[1]
    bars = {key: {"bar": bar, "value": final[key], "met": final[key] >= bar} for key, bar in BARS.items()}
    result = {"quick": args.quick, "vqgan_run": str(vqgan_run), "prior_run": str(prior_run),
              "classifier": str(args.classifier), "vqgan_epochs": args.vqgan_epochs,
              "prior_epochs": args.prior_epochs, "disc_start": args.disc_start, "disc_weight": args.disc_weight,
              "vqgan_minutes": vqgan_minutes,
              "prior_minutes": prior_minutes, "final": final, "bars": bars,
              "vqgan_curve": curves(vqgan_run), "prior_curve": curves(prior_run)}
    result["num_codes"] = vq_saved["model_config"]["num_codes"]
    table = "\n".join([
        "# VQGAN on Fashion-MNIST" + (" (quick smoke run, not a result)" if args.quick else ""), "",
        f"vqgan_small, {args.vqgan_epochs} epochs in {vqgan_minutes:.1f} min (GAN term from step {args.disc_start}, "
        f"disc_weight {args.disc_weight}); "
        f"gpt_prior_small, {args.prior_epochs} epochs in {prior_minutes:.1f} min; scored on the {final['num_images']} "
        f"{final['split']} images; classifier {args.classifier}.", "", table_of(result), ""])
    print(table)
    suffix = "_quick" if args.quick else ""
    write_json(args.out / f"vqgan_fashion_mnist{suffix}.json", result, beside=args.beside)
    write_table(args.out / f"vqgan_fashion_mnist{suffix}.md", table)
    plot(result["vqgan_curve"], result["prior_curve"], args.out / f"vqgan_fashion_mnist{suffix}.png")
    pictures(vqgan_run, prior_run, args.pictures, 2 if args.quick else 10)
    return result


if __name__ == "__main__":
    main()
