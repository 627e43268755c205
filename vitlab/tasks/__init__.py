"""One package per kind of training; each supplies a Task (tasks/base.py) to the one loop (engine/loop.py).

`TASKS` maps each task's name to its class; each registers itself with `@register_task`, as a task defined
elsewhere does."""

from .base import TASKS, Task, register_task
from .classification import ClassificationTask
from .detection import DetectionTask
from .generation import PriorTask, VQGANTask
from .launch import load_run, load_task, resume, train
from .restoration import RestorationTask
from .segmentation import SegmentationTask
from .seq2seq import Seq2SeqTask

__all__ = [
    "TASKS",
    "ClassificationTask",
    "DetectionTask",
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
