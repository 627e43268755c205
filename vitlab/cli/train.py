"""`vitlab train`: train a model on Fashion-MNIST or an image folder; prints the final test accuracy."""

from __future__ import annotations

import argparse
import os

from ..engine.recipes import RECIPES

FM = RECIPES["fashion-mnist"]
FOLDER = RECIPES["folder"]


def _recipe_default(key: str) -> str:
    return f"(default: recipe — fashion-mnist {FM[key]}, folder {FOLDER[key]})"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train", help="train a model", description="Train a ViT. Without options it runs the data's default recipe.",
    )
    p.add_argument("--data", default="fashion-mnist", help="'fashion-mnist' or a folder of class sub-folders "
                   "(default: fashion-mnist)")
    p.add_argument("--out", help="run folder to write (default: runs/MODEL-TIMESTAMP)")
    p.add_argument("--model", help=f"registered model name {_recipe_default('model')}")
    p.add_argument("--data-dir", help="where Fashion-MNIST's files are (default: search $VITLAB_DATA, "
                   "/usr/share/datasets, then download)")
    p.add_argument("--epochs", type=int, help=f"epochs {_recipe_default('epochs')}")
    p.add_argument("--batch-size", type=int, help=f"batch size {_recipe_default('batch_size')}")
    p.add_argument("--lr", type=float, help=f"peak learning rate {_recipe_default('lr')}")
    p.add_argument("--weight-decay", type=float, help=f"AdamW weight decay {_recipe_default('weight_decay')}")
    p.add_argument("--warmup-epochs", type=float, help=f"linear warm-up {_recipe_default('warmup_epochs')}")
    p.add_argument("--label-smoothing", type=float, help=f"{_recipe_default('label_smoothing')}")
    p.add_argument("--clip-grad", type=float, help=f"max gradient norm, 0 = off {_recipe_default('clip_grad')}")
    p.add_argument("--drop-path", type=float, help=f"stochastic depth rate {_recipe_default('drop_path')}")
    p.add_argument("--img-size", type=int, help=f"image side the model sees {_recipe_default('img_size')}")
    p.add_argument("--crop-padding", type=int, help="random shift of up to this many pixels; folders without it "
                   f"use random-resized crops {_recipe_default('crop_padding')}")
    p.add_argument("--no-hflip", dest="hflip", action="store_false", default=None,
                   help="no random horizontal flips (default: flips on)")
    deit = p.add_argument_group("DeiT's recipe (Touvron et al. 2021); each piece is off unless given")
    deit.add_argument("--randaugment", type=int, metavar="M",
                      help="RandAugment of magnitude M (0..30; DeiT: 9) (default: 0 = off)")
    deit.add_argument("--randaugment-ops", type=int, metavar="N", help="RandAugment operations per image (default: 2)")
    deit.add_argument("--mixup", type=float, metavar="ALPHA", help="Mixup with Beta(α, α) (DeiT: 0.8) (default: 0 = "
                      "off; with --cutmix too, each batch uses one of the two)")
    deit.add_argument("--cutmix", type=float, metavar="ALPHA", help="CutMix with Beta(α, α) (DeiT: 1.0) "
                      "(default: 0 = off)")
    deit.add_argument("--random-erasing", type=float, metavar="P", help="erase a random box of each image with "
                      "probability P (DeiT: 0.25) (default: 0 = off)")
    deit.add_argument("--repeated-aug", type=int, metavar="N", help="show each image N times per epoch, "
                      "differently augmented, in the same batch (DeiT: 3) (default: 1 = off)")
    deit.add_argument("--ema-decay", type=float, metavar="D", help="keep and evaluate an exponential moving average "
                      "of the weights, saved as ema.safetensors (e.g. 0.9998) (default: 0 = off)")
    deit.add_argument("--layer-decay", type=float, metavar="F", help="layer-wise learning-rate decay for fine-tuning "
                      "with --weights: block i of L trains at lr·F^(L−i) (e.g. 0.75) (default: off)")
    deit.add_argument("--weights", metavar="PATH", help="start from these weights (a run folder or a checkpoint "
                      "file of any supported format; a head of another class count is replaced) (default: random)")
    deit.add_argument("--distill", choices=("none", "soft", "hard"), help="learn from --teacher too: soft (KL at "
                      "temperature τ) or hard (the teacher's argmax as a label) (default: none)")
    deit.add_argument("--teacher", metavar="RUN_DIR", help="run folder (or vitlab .safetensors) of the frozen "
                      "teacher for --distill (default: none)")
    deit.add_argument("--distill-alpha", type=float, metavar="A", help="weight of the distillation term "
                      "(default: 0.5; the paper's soft setting is 0.1)")
    deit.add_argument("--distill-tau", type=float, metavar="T", help="temperature of soft distillation "
                      "(default: 1.0; the paper's soft setting is 3.0)")
    p.add_argument("--val-fraction", type=float, default=0.1,
                   help="share of a folder without train/ and test/ held out for evaluation (default: 0.1)")
    p.add_argument("--skip-bad-images", action="store_true",
                   help="skip unreadable images (counted) instead of stopping (default: off)")
    p.add_argument("--allow-partial-data", action="store_true",
                   help="accept a Fashion-MNIST copy with fewer images than the official 60,000/10,000 (default: off)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast, on CPU or GPU (default: off; slow on "
                   "CPUs without native bf16, such as AVX2-only ones)")
    p.add_argument("--fp16", action="store_true", help="float16 autocast with a gradient scaler, CUDA only "
                   "(default: off)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model's forward pass (about 30 s of "
                   "compiling per input shape on 2 CPU cores, measured to gain little on them) (default: off)")
    p.add_argument("--accum-steps", type=int, default=1, help="add up the gradients of this many batches per "
                   "optimizer step: effective batch = batch-size × accum-steps × processes (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights, data order and augmentation (default: 0)")
    p.add_argument("--workers", type=int, default=0, help="data-loading processes for folders (default: 0)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto — CUDA if present)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an --out folder that already holds a run (default: refuse)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run that stopped, from its last checkpoint; "
                   "only --epochs, --max-epochs-this-run, --data-dir, --device, --threads and --compile may change "
                   "(default: a new run)")
    p.add_argument("--max-epochs-this-run", type=int,
                   help="stop after this many epochs, to resume later (default: run to the end)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..engine.distributed import launched_by_torchrun, shutdown
    from ..engine.session import TrainOptions, train_run

    fields = TrainOptions.__dataclass_fields__
    options = TrainOptions(**{k: v for k, v in vars(args).items() if k in fields})
    try:
        result = train_run(options)
    finally:
        shutdown()
    if "test_acc" in result and int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks
        if launched_by_torchrun():
            print(f"processes: {os.environ['WORLD_SIZE']}")
        print(f"run folder: {result['run_dir']}")
        print(f"test accuracy: {result['test_acc']:.4f} after {result['epoch']} epochs, "
              f"{result['elapsed_s'] / 60:.1f} min of training and per-epoch evaluation")
    return 0
