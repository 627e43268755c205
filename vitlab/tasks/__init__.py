"""One package per kind of training; each supplies a Task (tasks/base.py) to the one loop (engine/loop.py).

`TASKS` maps each task's name to its class; each registers itself with `@register_task`, as a task defined
elsewhere does."""

from .base import TASKS, Task, register_task
from .launch import load_run, load_task, resume, train

# isort: off
# the order tasks register in is the order `--task` lists them
from .classification import ClassificationTask
from .seq2seq import Seq2SeqTask
from .detection import DetectionTask
from .segmentation import SegmentationTask
from .restoration import RestorationTask
from .generation import VQGANTask, PriorTask
from .mim import MIMTask
# isort: on

__all__ = [
    "TASKS",
    "ClassificationTask",
    "DetectionTask",
    "MIMTask",
    "PriorTask",
    "RestorationTask",
    "SegmentationTask",
    "Seq2SeqTask",
    "Task",
    "VQGANTask",
    "load_run",
    "load_task",
    "register_task",
    "resume",
    "train",
]
