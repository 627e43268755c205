"""A task's two halves stay short and documented: the training half (what `vitlab train` and the loop need, the
loop's own Trainable extended, not copied) and the inference half (eval, predict, serve, quantize), each under 25
public names, every one of them named in docs/design.md."""

from pathlib import Path

from vitlab.engine.loop import Trainable
from vitlab.tasks.base import InferenceTask, Task, TrainingTask

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"
INSTANCE = {"config", "loop", "dist"}  # what TrainingTask.__init__ sets


def public_names(cls: type) -> set[str]:
    names = set()
    for base in cls.__mro__[:-1]:  # but object
        names |= {name for name in (*vars(base), *getattr(base, "__annotations__", {})) if not name.startswith("_")}
    return names


def test_each_half_is_under_25_public_names_and_documented():
    training = public_names(TrainingTask) | INSTANCE
    inference = public_names(InferenceTask)
    assert len(training) < 25, sorted(training)
    assert len(inference) < 25, sorted(inference)
    section = DESIGN.read_text().split("## What a task declares")[1].split("## Checklist")[0]
    undocumented = sorted(name for name in (training | inference) - INSTANCE if f"`{name}`" not in section)
    assert not undocumented, f"not in docs/design.md's 'What a task declares': {undocumented}"


def test_the_loop_asks_the_training_half_itself():
    assert issubclass(TrainingTask, Trainable) and Task.__bases__ == (TrainingTask, InferenceTask)
    # the loop's names are the training half's, not repeated in the inference half
    assert public_names(Trainable) <= public_names(TrainingTask)
    assert not (public_names(Trainable) & public_names(InferenceTask))
    assert public_names(Task) == public_names(TrainingTask) | public_names(InferenceTask)
