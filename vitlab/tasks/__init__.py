"""One package per kind of training; each supplies a Task (tasks/base.py) to the one loop (engine/loop.py).

`TASKS` maps each task's name to its class, in the order each task declares (`Task.order`). A task registers itself
with `@register_task`; the task packages here are found by the first lookup (no list names them), and a task
defined elsewhere registers the same way."""

from .base import TASKS, Task, register_task
from .launch import load_run, load_task, resolved_recipe, resume, train, train_or_resume

__all__ = ["TASKS", "Task", "load_run", "load_task", "register_task", "resolved_recipe", "resume", "train",
           "train_or_resume"]
