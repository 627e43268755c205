"""One package per kind of training; each supplies a Task (tasks/base.py) to the one loop (engine/loop.py)."""

from .base import Task
from .classification import ClassificationTask
from .detection import DetectionTask
from .generation import PriorTask, VQGANTask
from .launch import load_run, load_task, resume, train
from .restoration import RestorationTask
from .segmentation import SegmentationTask
from .seq2seq import Seq2SeqTask

TASKS: dict[str, type[Task]] = {task.name: task for task in (ClassificationTask, Seq2SeqTask,
                                                              DetectionTask, SegmentationTask,
                                                              RestorationTask, VQGANTask, PriorTask)}

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
                                                              "resume",
                                                              "train",
]
