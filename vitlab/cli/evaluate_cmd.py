"""`vitlab eval RUN_DIR`: evaluate a trained run on its held-out data, by the run's task (read from config.json):
accuracy, per-class accuracy and confusion matrix for classification; exact-sequence accuracy for seq2seq; COCO's
box AP and AR for detection; per-class IoU, mIoU and pixel accuracy for segmentation; per degradation Y-PSNR,
Y-SSIM and RGB PSNR for restoration; reconstruction PSNR and SSIM, codebook usage and perplexity for a VQGAN, and
for a prior also FID and the class accuracy of its samples."""

from __future__ import annotations

import argparse
import json

from .runtime_flags import add_runtime_flags, on_runtime


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="evaluate a trained run on its test data (or other data)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="folder written by `vitlab train`")
    p.add_argument("--weights", choices=["last", "best", "ema"], default="last",
                   help="which checkpoint (default: last)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (default: text)")
    add_runtime_flags(p)
    image = p.add_argument_group("classification, detection, segmentation and restoration")
    image.add_argument("--data", help="classification: 'fashion-mnist' or an image folder; detection: a COCO-format "
                       "folder with the run's categories; segmentation: a folder of images and masks with the run's "
                       "classes; restoration: an HR folder (DIV2K, Set5, Set14, BSD68, Urban100), a photograph "
                       "folder with test/ or val/, or 'skimage' (default: the run's own data)")
    image.add_argument("--data-dir", help="where Fashion-MNIST's files are (default: the run's, then the usual "
                       "places)")
    image.add_argument("--batch-size", type=int, help="evaluation batch size (default: classification 256, "
                       "detection the run's --eval-batch-size)")
    image.add_argument("--bf16", action="store_true", help="bf16 autocast; refused where the device has no native "
                       "bf16 (there it is many times slower) (default: off, fp32)")
    image.add_argument("--compile", action="store_true", help="torch.compile the model first (pays on large test "
                       "sets) (default: off)")
    image.add_argument("--no-plot", dest="plot", action="store_false",
                       help="do not write confusion.png (default: write)")
    restoration = p.add_argument_group("restoration")
    restoration.add_argument("--lr", metavar="DIR", help="LR images for --data's HR images, paired by name "
                             "(0001x2.png or 0001.png), instead of downscaling here; needs one SR --degradation "
                             "(default: downscale here)")
    restoration.add_argument("--degradation", action="append", metavar="NAME", help="evaluate this task only "
                             "(repeatable) (default: all the run's tasks)")
    restoration.add_argument("--crop", type=int, help="score each image's centre, this many pixels square; 0: "
                             "whole images (default: the run's --eval-crop)")
    generation = p.add_argument_group("vqgan and prior")
    generation.add_argument("--classifier", metavar="RUN", help="a prior: the classification run whose features FID "
                            "uses and whose predictions class_acc counts (default: the run's --classifier; none: no "
                            "FID)")
    generation.add_argument("--samples", type=int, help="a prior: samples to draw, classes in turn (default: the "
                            "run's --eval-samples)")
    generation.add_argument("--temperature", type=float, help="a prior: sampling temperature (default: the run's)")
    generation.add_argument("--top-k", type=int, help="a prior: top-k sampling (default: the run's)")
    generation.add_argument("--top-p", type=float, help="a prior: top-p sampling (default: the run's)")
    seq = p.add_argument_group("seq2seq")
    seq.add_argument("--beam-size", type=int, default=1, help="1: greedy; more: beam search (default: 1)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..engine.run import RunDir
    from ..tasks import load_task

    task, saved = load_task(args.run_dir)
    model = RunDir(args.run_dir).load_model(args.weights)
    if task.name in ("seq2seq", "prior") and (args.runtime != "torch" or args.precision != "fp32"):
        raise ValueError(f"a {task.name} run decodes in a Python loop: it runs on --runtime torch in fp32 only"
                         + (" (evaluate its VQGAN run on a runtime instead)" if task.name == "prior" else ""))
    if task.name not in ("seq2seq", "prior"):
        model = on_runtime(model, args, args.run_dir, args.weights)
    if task.name == "classification":
        options = {"data": args.data, "data_dir": args.data_dir, "batch_size": args.batch_size or 256,
                   "bf16": args.bf16, "compile": args.compile, "plot": args.plot}
    elif task.name in ("detection", "segmentation"):
        options = {"data": args.data, "batch_size": args.batch_size}
    elif task.name == "restoration":
        options = {"data": args.data, "batch_size": args.batch_size, "lr": args.lr,
                   "degradations": args.degradation, "crop": args.crop}
    elif task.name in ("vqgan", "prior"):
        options = {"data_dir": args.data_dir, "classifier": args.classifier, "samples": args.samples,
                   "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    else:
        options = {"beam_size": args.beam_size}
    result = task.evaluate_run(model, saved, args.run_dir, **options)
    print(json.dumps(result) if args.json else task.format_evaluation(result, args.weights))
    return 0
