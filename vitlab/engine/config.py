"""The options every task shares: the run's length, the optimizer and its schedule, precision, EMA, where to run.

A task supplies its own defaults for them (`Task.loop_defaults()`); the user's values win over both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .options import check, check_choices, option

SCHEDULES = ("cosine", "inverse_sqrt", "poly")
OPTIMIZERS = ("adamw", "sgd")
CURVES = ("every", "end", "never")
CURVES_ENV = "VITLAB_CURVES"  # the default of `curves`, for a whole session of short runs (the test suite sets it)


def _curves_default() -> str:
    return os.environ.get(CURVES_ENV, "every")


@dataclass(frozen=True)
class LoopConfig:
    """The options every task shares. A task supplies its own defaults for them (`task.loop_defaults()`)."""

    epochs: int | None = option(None, "the run's length in passes over the training data", default_text="the task's")
    steps: int | None = option(None, "the run's length in optimizer steps, instead of epochs",
                               default_text="the task's")
    batch_size: int = option(64, "examples per batch, per process")
    lr: float = option(1e-3, "peak learning rate, reached at the end of the warm-up")
    weight_decay: float = option(0.05, "weight decay (never on biases, norms, embeddings and tokens)")
    optimizer: str = option("adamw", "AdamW, or SGD with momentum (the segmentation papers')", choices=OPTIMIZERS)
    momentum: float = option(0.9, "SGD's momentum")
    # inverse_sqrt: Vaswani et al. §5.3; poly, lr·(1 − t/T)^power: SETR's and DeepLab's
    schedule: str = option("cosine", "learning-rate schedule after the warm-up: cosine, 1/√step or poly",
                           choices=SCHEDULES)
    poly_power: float = option(0.9, "the poly schedule's power")
    warmup_epochs: float | None = option(None, "linear warm-up, in epochs", default_text="the task's")
    warmup_steps: int | None = option(None, "linear warm-up, in optimizer steps (wins over warmup_epochs)",
                                      default_text="the task's")
    min_lr_ratio: float = option(0.01, "the cosine (and poly) schedule ends at lr × this")
    betas: tuple[float, float] = option((0.9, 0.999), "AdamW's β1 β2", metavar="B")
    adam_eps: float = option(1e-8, "AdamW's ε")
    clip_grad: float = option(1.0, "max global gradient norm; 0 = off")
    accum_steps: int = option(1, "add up the gradients of this many batches per step (effective batch: "
                              "batch-size × this × processes)")
    bf16: bool = option(False, "bfloat16 autocast (slow on CPUs without native bf16, such as AVX2-only ones)")
    fp16: bool = option(False, "float16 autocast with a gradient scaler (CUDA only)")
    compile: bool = option(False, "torch.compile the forward pass (~30 s per input shape on 2 CPU cores, "
                           "where it gains little)")
    ema_decay: float = option(0.0, "also keep an exponential moving average of the weights (ema.safetensors), "
                              "e.g. 0.9998; 0 = off", metavar="D")
    layer_decay: float | None = option(None, "layer-wise learning-rate decay for fine-tuning: block i of L trains "
                                       "at lr·F^(L−i) (e.g. 0.75)", metavar="F")
    eval_every: int = option(1, "evaluate and checkpoint every this many epochs (steps, for data without "
                             "epochs) and at the end", default_text="the task's", group="run")
    # the checkpoint holds the model, optimizer, schedule, random streams, the position in the data and the epoch's
    # running figures; an epoch shorter than the interval never writes one
    checkpoint_every: float = option(10.0, "also write a resumable checkpoint inside an epoch every this many minutes: "
                                     "a killed or preempted run resumes there, as if never stopped", metavar="MIN",
                                     group="run")
    checkpoint_every_steps: int | None = option(None, "write that checkpoint every this many optimizer steps "
                                                "instead of minutes", metavar="N", group="run")
    max_epochs_this_run: int | None = option(None, "stop after this many epochs (resumable)", group="run")
    max_steps_this_run: int | None = option(None, "stop after this many optimizer steps (resumable)",
                                                 group="run")
    seed: int = option(0, "seed for weights, data order and augmentation")
    device: str = option("auto", "auto (CUDA if present), cpu, cuda or cuda:N", group="run")
    threads: int | None = option(None, "torch CPU threads", default_text="torch's choice", group="run")
    workers: int = option(0, "data-loading processes", group="run")
    # every: a run stopped at any moment has its picture; end: matplotlib costs ~0.3 s a picture, much for runs of
    # seconds; never: scripted sweeps that read metrics.jsonl
    curves: str = option(help="when curves.png is drawn: at every checkpoint, once when the run ends, or never",
                         choices=CURVES, default_factory=_curves_default, default_text=f"every, or ${CURVES_ENV}",
                         group="run")

    def __post_init__(self) -> None:
        check_choices(self)
        check(self.epochs is None or self.epochs >= 1, "epochs", "at least 1", self.epochs)
        check(self.steps is None or self.steps >= 1, "steps", "positive", self.steps)
        check(self.epochs is None or self.steps is None, "steps", "given without epochs (a run's length is one "
              "or the other)", self.steps)
        check(self.batch_size >= 1, "batch_size", "at least 1", self.batch_size)
        check(self.lr > 0, "lr", "positive", self.lr)
        check(self.weight_decay >= 0, "weight_decay", "0 or more", self.weight_decay)
        check(self.warmup_epochs is None or self.warmup_epochs >= 0, "warmup_epochs", "0 or more", self.warmup_epochs)
        check(self.warmup_steps is None or self.warmup_steps >= 0, "warmup_steps", "0 or more", self.warmup_steps)
        check(self.schedule != "inverse_sqrt" or bool(self.warmup_steps), "warmup_steps",
              "positive for the inverse_sqrt schedule", self.warmup_steps)
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "in [0, 1]", self.min_lr_ratio)
        check(0 <= self.momentum < 1, "momentum", "in [0, 1)", self.momentum)
        check(self.poly_power > 0, "poly_power", "positive", self.poly_power)
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas", "two numbers in [0, 1)",
              self.betas)
        check(self.clip_grad >= 0, "clip_grad", "0 (off) or more", self.clip_grad)
        check(self.accum_steps >= 1, "accum_steps", "at least 1", self.accum_steps)
        check(not (self.bf16 and self.fp16), "fp16", "off when bf16 is on (choose one)", self.fp16)
        check(self.ema_decay == 0 or 0 < self.ema_decay < 1, "ema_decay", "0 (off) or in (0, 1)", self.ema_decay)
        check(self.layer_decay is None or 0 < self.layer_decay <= 1, "layer_decay", "in (0, 1]", self.layer_decay)
        check(self.eval_every >= 1, "eval_every", "at least 1", self.eval_every)
        check(self.checkpoint_every > 0, "checkpoint_every", "a positive number of minutes (give a large one, or "
              "--checkpoint-every-steps, for fewer checkpoints)", self.checkpoint_every)
        check(self.checkpoint_every_steps is None or self.checkpoint_every_steps >= 1, "checkpoint_every_steps",
              "at least 1", self.checkpoint_every_steps)
        for name in ("max_epochs_this_run", "max_steps_this_run", "threads"):
            value = getattr(self, name)
            check(value is None or value >= 1, name, "at least 1", value)
        check(self.workers >= 0, "workers", "0 or more", self.workers)

    @property
    def precision(self) -> torch.dtype | None:
        """The autocast dtype, or None for fp32."""
        return torch.bfloat16 if self.bf16 else torch.float16 if self.fp16 else None
