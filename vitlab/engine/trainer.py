"""The training loop: AdamW, warm-up + cosine, label smoothing, gradient clipping, optional bf16 autocast,
progress bars, per-epoch metrics (metrics.jsonl), atomic checkpoints (best and last) and exact resume.

Resume is exact on CPU: the data order and augmentation of every epoch come from a generator seeded by
(seed, epoch), and the global RNG state (dropout, drop path) is saved with each checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from ..interop.weights import load_weights, save_weights
from .augment import mixup_cutmix
from .checkpoint import load_training_state, read_jsonl, rng_state, save_training_state, set_rng_state
from .distill import DistillationLoss
from .distributed import DistInfo, all_reduce_sum, barrier, gather_objects
from .ema import ModelEma
from .evaluate import evaluate
from .optim import build_optimizer, build_scheduler
from .speed import autocast, bf16_supported, bf16_unsupported_reason, maybe_compile

METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3  # peak learning rate, reached at the end of the warm-up
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    min_lr_ratio: float = 0.01  # the cosine ends at lr · min_lr_ratio
    label_smoothing: float = 0.1
    clip_grad: float = 1.0  # max global gradient norm; 0 turns clipping off
    bf16: bool = False  # autocast matmuls to bfloat16 (slow on CPUs without native bf16 support)
    fp16: bool = False  # autocast to float16 with a gradient scaler (CUDA only)
    accum_steps: int = 1  # batches whose gradients add up to one optimizer step
    compile: bool = False  # torch.compile the forward pass (~30 s per input shape on 2 CPU cores)
    seed: int = 0
    eval_every: int = 1  # evaluate on the held-out split every this many epochs (and after the last)
    max_epochs_this_run: int | None = None  # stop after this many epochs (the run can be resumed later)
    # DeiT's recipe (engine/distill.py, augment.py, ema.py); the defaults leave each piece off
    distill: str = "none"  # "none" | "soft" | "hard": what the teacher passed to fit() teaches
    distill_alpha: float = 0.5  # weight of the distillation term
    distill_tau: float = 1.0  # softmax temperature of soft distillation
    mixup: float = 0.0  # Mixup's Beta(α, α); 0 = off
    cutmix: float = 0.0  # CutMix's Beta(α, α); 0 = off
    ema_decay: float = 0.0  # exponential moving average of the weights, updated every step; 0 = off
    layer_decay: float | None = None  # layer-wise learning-rate decay (fine-tuning); None = off


def set_seed(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)


def precision_of(config: TrainConfig) -> torch.dtype | None:
    """The autocast dtype of the run, or None for fp32."""
    if config.bf16 and config.fp16:
        raise ValueError("--bf16 and --fp16 exclude each other; choose one")
    return torch.bfloat16 if config.bf16 else torch.float16 if config.fp16 else None


def train_one_epoch(model, loader, optimizer, scheduler, config: TrainConfig, epoch: int, device,
                    criterion: DistillationLoss, mix=None, ema: ModelEma | None = None, scaler=None,
                    dist: DistInfo | None = None, eager: nn.Module | None = None) -> dict[str, float]:
    """One pass over `loader`, one optimizer step every `config.accum_steps` batches.

    model: the module that runs forward (DDP-wrapped in a distributed run); its gradients are averaged over
    processes only on the last batch of each accumulation (`no_sync` before). `mix`: Mixup/CutMix (images,
    labels) -> (images, soft targets (B, K)). `scaler`: the fp16 gradient scaler (a disabled one otherwise).
    `eager`: the plain module behind a DDP or compiled wrapper, which the EMA follows (default: `model`).
    """
    eager = eager if eager is not None else model
    dist = dist or DistInfo(device=torch.device(device))
    model.train()
    criterion.train()
    accum = config.accum_steps
    batches = (len(loader) // accum) * accum  # a last incomplete accumulation is left out, like drop_last
    dtype = precision_of(config)
    loss_sum, correct, seen, start = 0.0, 0, 0, time.perf_counter()
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{config.epochs}", total=batches, leave=False, dynamic_ncols=True,
               mininterval=1.0, disable=not dist.is_main)
    optimizer.zero_grad(set_to_none=True)
    for i, (images, labels) in enumerate(bar):
        if i == batches:
            break
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        targets = labels
        if mix is not None:
            images, targets = mix(images, labels)  # targets: (B, K) probabilities
        stepping = (i + 1) % accum == 0
        sync = contextlib.nullcontext() if stepping or not dist.distributed else model.no_sync()
        with sync:
            with autocast(device, dtype):
                outputs = model(images)  # logits (B, K), or (y_cls, y_dist) from a distilled DeiT
                loss = criterion(images, outputs, targets)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"the loss became {loss.item()} at epoch {epoch + 1}; lower --lr or keep --clip-grad on"
                )
            scaler.scale(loss / accum).backward()  # accumulated gradients add up to the mean over the batches
        if stepping:
            if config.clip_grad > 0:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            if ema is not None:
                ema.update(eager)
        logits = (outputs[0] + outputs[1]) / 2 if isinstance(outputs, tuple) else outputs  # as at evaluation
        truth = targets.argmax(-1) if targets.ndim == 2 else targets
        B = labels.shape[0]
        loss_sum += loss.item() * B
        correct += (logits.argmax(-1) == truth).sum().item()
        seen += B
        elapsed = time.perf_counter() - start
        bar.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}", img_s=f"{seen / elapsed:.0f}",
                        refresh=False)
    elapsed = time.perf_counter() - start
    loss_sum, correct, seen = all_reduce_sum([loss_sum, correct, seen], dist)  # over all processes
    return {"train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
            "train_images_per_s": seen / elapsed, "train_time_s": elapsed}


def evaluate_all(model, loader, device, bf16: bool, desc: str, dist: DistInfo) -> dict[str, float]:
    """Loss and accuracy over the whole held-out set, each process evaluating its shard."""
    num_classes = _num_classes(getattr(model, "_orig_mod", model))
    result = evaluate(model, loader, device=device, bf16=bf16, desc=desc, num_classes=num_classes) if len(loader) \
        else None
    n = result["num_images"] if result else 0
    loss_sum = result["loss"] * n if result else 0.0
    right = sum(row[i] for i, row in enumerate(result["confusion"])) if result else 0
    loss_sum, right, n = all_reduce_sum([loss_sum, right, n], dist)
    return {"loss": loss_sum / max(n, 1), "accuracy": right / max(n, 1)}


def fit(
    model: nn.Module,
    train_loader,
    eval_loader,
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    run_info: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
    teacher: nn.Module | None = None,
    dist: DistInfo | None = None,
) -> dict[str, Any]:
    """Train `model` and evaluate it on `eval_loader` each epoch; returns the last epoch's metrics.

    run_dir receives config.json, metrics.jsonl, last/best.safetensors, state.pt and curves.png (and
    ema.safetensors with config.ema_decay). `teacher`: the frozen model of config.distill "soft" or "hard".
    `dist`: this process's place in a torchrun launch (engine/distributed.py); the loaders must already give it
    its shard. Only rank 0 writes files and prints.
    """
    run_dir = Path(run_dir)
    dist = dist or DistInfo(device=torch.device(device))
    device = dist.device
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    model.to(device)
    if config.accum_steps < 1 or len(train_loader) < config.accum_steps:
        raise ValueError(f"--accum-steps must be between 1 and the {len(train_loader)} batches of an epoch, "
                         f"got {config.accum_steps}")
    steps_per_epoch = len(train_loader) // config.accum_steps  # optimizer steps
    optimizer = build_optimizer(model, config.lr, config.weight_decay, layer_decay=config.layer_decay)
    if teacher is not None:
        teacher.to(device)
    criterion = DistillationLoss(teacher, config.distill, config.distill_alpha, config.distill_tau,
                                 config.label_smoothing)
    mix = mixup_cutmix(config.mixup, config.cutmix, _num_classes(model))
    ema = ModelEma(model, config.ema_decay) if config.ema_decay else None
    if precision_of(config) == torch.float16 and device.type != "cuda":
        raise ValueError("--fp16 needs a CUDA device (float16 with a gradient scaler); on a CPU use --bf16")
    scaler = torch.amp.GradScaler(device.type, enabled=config.fp16)
    total_steps = config.epochs * steps_per_epoch
    # a warm-up longer than half the run would leave no room for the decay: cap it there
    warmup_steps = min(round(config.warmup_epochs * steps_per_epoch), total_steps // 2)
    scheduler = build_scheduler(optimizer, total_steps, warmup_steps, config.min_lr_ratio)
    start_epoch, best_acc, elapsed_before = 0, -1.0, 0.0
    if resume:
        state = load_training_state(run_dir)
        load_weights(model, state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        if ema is not None:
            ema.load_state_dict(state["ema"])
        start_epoch, best_acc, elapsed_before = state["epoch"], state["best_acc"], state["elapsed_s"]
        set_rng_state(_rng_for_rank(state, dist))
        if dist.is_main:
            _truncate_metrics(run_dir / METRICS_FILE, start_epoch)
    else:
        set_seed(config.seed + dist.rank)  # each process its own dropout and drop-path draws
        if dist.is_main:
            (run_dir / METRICS_FILE).unlink(missing_ok=True)
    if dist.is_main:
        _write_json(run_dir / "config.json", {**(run_info or {}), "train": dataclasses.asdict(config),
                                              "model_config": _model_config(model), "world_size": dist.world_size})
    if config.bf16 and not bf16_supported(device) and dist.is_main:
        warnings.warn(f"--bf16: {bf16_unsupported_reason(device)}", stacklevel=2)
    # the compiled module shares `model`'s parameters; files are written from `model`, so keys stay plain
    forward_model = maybe_compile(model, config.compile, dynamic=False)
    if dist.distributed:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(forward_model, device_ids=[device] if device.type == "cuda" else None)
    else:
        train_model = forward_model

    metrics: dict[str, Any] = {}
    end_epoch = config.epochs
    if config.max_epochs_this_run is not None:
        end_epoch = min(end_epoch, start_epoch + config.max_epochs_this_run)
    run_start = time.perf_counter()
    for epoch in range(start_epoch, end_epoch):
        train_loader.set_epoch(epoch)
        metrics = {"epoch": epoch + 1, "lr": max(group["lr"] for group in optimizer.param_groups)}
        metrics.update(train_one_epoch(train_model, train_loader, optimizer, scheduler, config, epoch, device,
                                       criterion, mix, ema, scaler, dist, eager=model))
        if (epoch + 1) % config.eval_every == 0 or epoch + 1 == config.epochs:
            result = evaluate_all(forward_model, eval_loader, device, config.bf16, "evaluate", dist)
            metrics.update({"test_loss": result["loss"], "test_acc": result["accuracy"]})
            if ema is not None:
                result = evaluate_all(ema.module, eval_loader, device, config.bf16, "evaluate EMA", dist)
                metrics.update({"test_loss_ema": result["loss"], "test_acc_ema": result["accuracy"]})
        metrics["elapsed_s"] = elapsed_before + time.perf_counter() - run_start
        metrics["step"] = (epoch + 1) * steps_per_epoch
        rng_per_rank = gather_objects(rng_state(), dist)  # a collective: every rank takes part
        if dist.is_main:
            _save_epoch(run_dir, model, optimizer, scheduler, scaler, ema, metrics, best_acc, rng_per_rank)
            best_acc = max(best_acc, metrics.get("test_acc", -1.0))
        barrier(dist)  # no rank runs ahead of a checkpoint it may have to resume from
    if not metrics and dist.is_main:
        tqdm.write(f"nothing to do: the run in {run_dir} has finished its {config.epochs} epochs "
                   f"(pass --epochs N with --resume to extend it)")
        rows = read_metrics(run_dir)
        metrics = rows[-1] if rows else {}
    return metrics


def _save_epoch(run_dir, model, optimizer, scheduler, scaler, ema, metrics, best_acc, rng_per_rank) -> None:
    _append_jsonl(run_dir / METRICS_FILE, metrics)
    provenance = {"epoch": str(metrics["epoch"]), "step": str(metrics["step"]),
                  "test_acc": str(metrics.get("test_acc", ""))}
    save_weights(model, run_dir / "last.safetensors", provenance)
    if metrics.get("test_acc", -1.0) > best_acc:
        save_weights(model, run_dir / "best.safetensors", provenance)
    if ema is not None:
        save_weights(ema.module, run_dir / "ema.safetensors", provenance)
    save_training_state(
        run_dir, model=model.state_dict(), optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
        scaler=scaler.state_dict(), epoch=metrics["epoch"], step=metrics["step"],
        best_acc=max(best_acc, metrics.get("test_acc", -1.0)), elapsed_s=metrics["elapsed_s"],
        rng_per_rank=rng_per_rank, **({"ema": ema.state_dict()} if ema is not None else {}),
    )
    shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
    tqdm.write(json.dumps(shown))
    plot_curves(run_dir)  # every epoch, so a run stopped early still has its picture


def _rng_for_rank(state: dict[str, Any], dist: DistInfo) -> dict[str, Any]:
    """This process's saved random state; a run resumed with another number of processes cannot replay the
    same draws, and says so."""
    per_rank = state.get("rng_per_rank")
    if per_rank is None:
        return state["rng"]
    if len(per_rank) != dist.world_size:
        if dist.is_main:
            warnings.warn(f"the run was trained by {len(per_rank)} process(es) and resumes with {dist.world_size}: "
                          f"it continues, but not draw for draw as the original would have", stacklevel=3)
        return per_rank[dist.rank % len(per_rank)]
    return per_rank[dist.rank]


def _num_classes(model: nn.Module) -> int:
    return int(getattr(model, "num_classes", 0) or getattr(model.config, "num_classes", 0))


def _model_config(model: nn.Module) -> dict[str, Any]:
    from ..models.registry import config_to_dict

    return {"name": getattr(model, "model_name", None), **config_to_dict(model.config)}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of metrics.jsonl; a last line cut short by a kill is left out."""
    path = Path(run_dir) / METRICS_FILE
    return read_jsonl(path) if path.is_file() else []


def _truncate_metrics(path: Path, epochs_kept: int) -> None:
    """Drop rows of epochs after the checkpoint (a run killed after writing metrics but before its checkpoint)."""
    rows = [row for row in read_metrics(path.parent) if row["epoch"] <= epochs_kept]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(path)


def plot_curves(run_dir: str | Path) -> Path | None:
    """curves.png: loss and accuracy per epoch, train and test."""
    rows = read_metrics(run_dir)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in rows]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [row["train_loss"] for row in rows], "o-", label="train")
    evaluated = [row for row in rows if "test_loss" in row]
    ax_loss.plot([r["epoch"] for r in evaluated], [r["test_loss"] for r in evaluated], "o-", label="test")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.plot(epochs, [row["train_acc"] for row in rows], "o-", label="train")
    ax_acc.plot([r["epoch"] for r in evaluated], [r["test_acc"] for r in evaluated], "o-", label="test")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = Path(run_dir) / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
