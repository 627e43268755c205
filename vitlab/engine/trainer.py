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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ..interop.weights import load_weights, save_weights
from .checkpoint import load_training_state, save_training_state, set_rng_state
from .evaluate import evaluate
from .optim import build_optimizer, build_scheduler

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
    seed: int = 0
    eval_every: int = 1  # evaluate on the held-out split every this many epochs (and after the last)
    max_epochs_this_run: int | None = None  # stop after this many epochs (the run can be resumed later)


def set_seed(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)


def autocast(enabled: bool, device: torch.device) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def train_one_epoch(model, loader, optimizer, scheduler, config: TrainConfig, epoch: int, device) -> dict[str, float]:
    model.train()
    loss_sum, correct, seen, start = 0.0, 0, 0, time.perf_counter()
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{config.epochs}", leave=False, dynamic_ncols=True, mininterval=1.0)
    for images, labels in bar:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        with autocast(config.bf16, device):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=config.label_smoothing)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"the loss became {loss.item()} at epoch {epoch + 1}; lower --lr or keep --clip-grad on"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.clip_grad > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad)
        optimizer.step()
        scheduler.step()
        B = labels.shape[0]
        loss_sum += loss.item() * B
        correct += (logits.argmax(-1) == labels).sum().item()
        seen += B
        elapsed = time.perf_counter() - start
        bar.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}", img_s=f"{seen / elapsed:.0f}",
                        refresh=False)
    elapsed = time.perf_counter() - start
    return {"train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
            "train_images_per_s": seen / elapsed, "train_time_s": elapsed}


def fit(
    model: nn.Module,
    train_loader,
    eval_loader,
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    run_info: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Train `model` and evaluate it on `eval_loader` each epoch; returns the last epoch's metrics.

    run_dir receives config.json, metrics.jsonl, last/best.safetensors, state.pt and curves.png.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(device)
    model.to(device)
    steps_per_epoch = len(train_loader)
    optimizer = build_optimizer(model, config.lr, config.weight_decay)
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
        start_epoch, best_acc, elapsed_before = state["epoch"], state["best_acc"], state["elapsed_s"]
        set_rng_state(state["rng"])
        _truncate_metrics(run_dir / METRICS_FILE, start_epoch)
    else:
        set_seed(config.seed)
        (run_dir / METRICS_FILE).unlink(missing_ok=True)
    _write_json(run_dir / "config.json", {**(run_info or {}), "train": dataclasses.asdict(config),
                                          "model_config": _model_config(model)})

    metrics: dict[str, Any] = {}
    end_epoch = config.epochs
    if config.max_epochs_this_run is not None:
        end_epoch = min(end_epoch, start_epoch + config.max_epochs_this_run)
    run_start = time.perf_counter()
    for epoch in range(start_epoch, end_epoch):
        train_loader.set_epoch(epoch)
        metrics = {"epoch": epoch + 1, "lr": optimizer.param_groups[0]["lr"]}
        metrics.update(train_one_epoch(model, train_loader, optimizer, scheduler, config, epoch, device))
        if (epoch + 1) % config.eval_every == 0 or epoch + 1 == config.epochs:
            result = evaluate(model, eval_loader, device=device, bf16=config.bf16, desc="evaluate")
            metrics.update({"test_loss": result["loss"], "test_acc": result["accuracy"]})
        metrics["elapsed_s"] = elapsed_before + time.perf_counter() - run_start
        metrics["step"] = (epoch + 1) * steps_per_epoch
        _append_jsonl(run_dir / METRICS_FILE, metrics)
        provenance = {"epoch": str(epoch + 1), "step": str(metrics["step"]),
                      "test_acc": str(metrics.get("test_acc", ""))}
        save_weights(model, run_dir / "last.safetensors", provenance)
        if metrics.get("test_acc", -1.0) > best_acc:
            best_acc = metrics["test_acc"]
            save_weights(model, run_dir / "best.safetensors", provenance)
        save_training_state(
            run_dir, model=model.state_dict(), optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
            epoch=epoch + 1, step=metrics["step"], best_acc=best_acc, elapsed_s=metrics["elapsed_s"],
        )
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
        tqdm.write(json.dumps(shown))
        plot_curves(run_dir)  # every epoch, so a run stopped early still has its picture
    if not metrics:
        tqdm.write(f"nothing to do: the run in {run_dir} has finished its {config.epochs} epochs "
                   f"(pass --epochs N with --resume to extend it)")
        rows = read_metrics(run_dir)
        metrics = rows[-1] if rows else {}
    return metrics


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
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


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
