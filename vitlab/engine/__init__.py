"""Training and evaluation: loops, optimizer groups and schedules, checkpoints."""

from .evaluate import evaluate
from .loaders import EpochDataLoader, TensorLoader
from .optim import build_optimizer, build_scheduler, param_groups, warmup_cosine
from .trainer import TrainConfig, fit, plot_curves, read_metrics

__all__ = [
    "EpochDataLoader",
    "TensorLoader",
    "TrainConfig",
    "build_optimizer",
    "build_scheduler",
    "evaluate",
    "fit",
    "param_groups",
    "plot_curves",
    "read_metrics",
    "warmup_cosine",
]
