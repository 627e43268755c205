"""The one training loop (loop.py), run folders (run.py), options (options.py), optimizer groups and schedules,
precision and compile switches, EMA, distributed training and the deterministic loaders."""

from .config import LoopConfig
from .loaders import EpochDataLoader, TensorLoader
from .loop import Stepper, TaskData, build_optimization, fit
from .optim import build_optimizer, build_scheduler, param_groups, warmup_cosine
from .options import OptionError, option
from .run import RunDir, RunFileError, read_jsonl

__all__ = [
    "EpochDataLoader",
    "LoopConfig",
    "OptionError",
    "RunDir",
    "RunFileError",
    "Stepper",
    "TaskData",
    "TensorLoader",
    "build_optimization",
    "build_optimizer",
    "build_scheduler",
    "fit",
    "option",
    "param_groups",
    "read_jsonl",
    "warmup_cosine",
]
