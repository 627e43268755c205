"""The one loop with toy tasks that know nothing of images: a few-parameter linear regression (epoch data and a
stream), and a task with two optimizers stepped by its own `train_step`. Checked: a run stopped mid-way and
resumed ends on the weights of an uninterrupted one; the best checkpoint follows the metric's direction;
accumulating 2 batches of b equals one batch of 2b."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import nn

from vitlab.engine.config import LoopConfig
from vitlab.engine.loop import TaskData, fit
from vitlab.engine.run import RunDir
from vitlab.interop import read_state_dict
from vitlab.tasks.base import Task

TRUE_W = torch.tensor([[1.5, -2.0, 0.5]])


def regression_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return x, x @ TRUE_W.T + 0.3 + 0.1 * torch.randn(n, 1, generator=g)


class EpochLoader:
    """Batches of (x, y) in an order fixed by (seed, epoch), the contract of vitlab's loaders."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int = 0) -> None:
        self.x, self.y, self.batch_size, self.seed, self.epoch = x, y, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.x) // self.batch_size

    def __iter__(self):
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))
        for i in range(len(self)):
            index = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield self.x[index], self.y[index]


class Stream:
    """Endless batches drawn from a Python RNG whose state travels with the checkpoint."""

    def __init__(self, batch_size: int) -> None:
        self.rng, self.batch_size = random.Random("toy"), batch_size

    def __iter__(self):
        while True:
            x = torch.tensor([[self.rng.gauss(0, 1) for _ in range(3)] for _ in range(self.batch_size)])
            yield x, x @ TRUE_W.T + 0.3

    def state_dict(self):
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state):
        from vitlab.engine.rng import as_tuple

        self.rng.setstate(as_tuple(state["rng"]))


@dataclass(frozen=True)
class ToyConfig:
    dropout: float = 0.2


class Regression(Task):
    name = "toy-regression"
    Config = ToyConfig
    best = ("val_loss", "min")

    def build_model(self) -> nn.Module:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Dropout(self.config.dropout), nn.Linear(3, 1))  # dropout: the global RNG matters
        model.config = self.config
        return model

    def loss(self, model, batch):
        x, y = batch
        error = model(x) - y
        return {"loss": error.pow(2).mean(), "abs_error": error.abs().mean()}

    def evaluate(self, model, data):
        x, y = data
        model.eval()
        with torch.no_grad():
            return {"loss": (model(x) - y).pow(2).mean().item()}


class TwoOptimizers(Regression):
    """Two heads, each with its own optimizer, stepped one after the other (a GAN's pattern)."""

    def build_model(self) -> nn.Module:
        torch.manual_seed(0)
        model = nn.ModuleDict({"a": nn.Linear(3, 1), "b": nn.Linear(3, 1)})
        model.config = self.config
        model.forward = model["a"].forward  # the model's output is head a's
        return model

    def optimized_modules(self, model):
        return {"a": model["a"], "b": model["b"]}

    def train_step(self, model, batch, stepper):
        x, y = batch
        loss_a = (model["a"](x) - y).pow(2).mean()
        stepper.backward(loss_a)
        stepper.step("a")
        loss_b = (model["b"](x) + y).pow(2).mean()  # b learns -y
        stepper.backward(loss_b)
        stepper.step("b")
        return {"loss": loss_a + loss_b, "loss_b": loss_b}


def run_toy(task_cls, run_dir, resume=False, stream=False, **loop):
    task = task_cls(ToyConfig())
    train = Stream(8) if stream else EpochLoader(*regression_data(64, seed=1), batch_size=8)
    data = TaskData(train=train, val=regression_data(32, seed=2), test=regression_data(32, seed=3))
    model = task.build_model()
    length = {"steps": 20, "eval_every": 5} if stream else {"epochs": 3}
    config = LoopConfig(**{**length, "lr": 0.05, "warmup_steps": 2, **loop})
    result = fit(task, model, data, config, RunDir(run_dir), resume=resume)
    return model, result


def weights(run_dir, which="last"):
    return read_state_dict(run_dir / f"{which}.safetensors")


@pytest.mark.parametrize(("task_cls", "stream"), [(Regression, False), (Regression, True), (TwoOptimizers, False)])
def test_stopped_and_resumed_equals_uninterrupted(tmp_path, task_cls, stream):
    straight, _ = run_toy(task_cls, tmp_path / "straight", stream=stream)
    # stop in the middle of an epoch (step 5 of 8 per epoch) or between two stream evaluations, then resume
    run_toy(task_cls, tmp_path / "split", stream=stream, max_steps_this_run=7 if stream else 5)
    state = RunDir(tmp_path / "split").load_state()
    assert state["step"] == (7 if stream else 5)
    resumed, result = run_toy(task_cls, tmp_path / "split", resume=True, stream=stream)
    assert result["step"] == (20 if stream else 24)
    for key, value in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, atol=0, rtol=0, msg=key)
    rows = RunDir(tmp_path / "split").read_metrics()
    assert [row["step"] for row in rows] == ([5, 7, 10, 15, 20, 20] if stream else [5, 8, 16, 24, 24])
    assert all(row["train_loss"] > 0 for row in rows[:-1])
    straight_rows = RunDir(tmp_path / "straight").read_metrics()
    assert rows[-1] == {**straight_rows[-1], "elapsed_s": rows[-1]["elapsed_s"]}  # the same one test row


def test_two_optimizers_both_learn_and_are_saved(tmp_path):
    model, _ = run_toy(TwoOptimizers, tmp_path / "run", epochs=10, lr=0.2, weight_decay=0.0)
    torch.testing.assert_close(model["a"].weight, TRUE_W, atol=0.1, rtol=0)
    torch.testing.assert_close(model["b"].weight, -TRUE_W, atol=0.1, rtol=0)
    state = RunDir(tmp_path / "run").load_state()
    assert set(state["optimizers"]) == {"a", "b"} and set(state["schedulers"]) == {"a", "b"}


@pytest.mark.parametrize("direction", ["min", "max"])
def test_best_checkpoint_follows_the_metrics_direction(tmp_path, direction):
    class Chosen(Regression):
        best = ("val_loss", direction)

    run_toy(Chosen, tmp_path / "run", epochs=4)
    *rows, test_row = RunDir(tmp_path / "run").read_metrics()
    losses = [row["val_loss"] for row in rows]
    assert losses[-1] < losses[0]  # it learns, so min and max pick different evaluations
    chosen = rows[losses.index(min(losses) if direction == "min" else max(losses))]
    best, metadata = weights(tmp_path / "run", "best")
    assert metadata["step"] == str(chosen["step"])
    assert float(metadata["val_loss"]) == pytest.approx(chosen["val_loss"])
    # the test part, scored once at the end, on the selected weights, by the formula
    x, y = regression_data(32, seed=3)
    expected = ((x @ best["1.weight"].T + best["1.bias"]) - y).pow(2).mean().item()
    assert test_row["test_loss"] == pytest.approx(expected, rel=1e-5)
    assert test_row["selected_step"] == chosen["step"] and test_row["selected_by"] == "val_loss"
    assert not any(key.startswith("test_") for row in rows for key in row)


def test_the_test_part_is_read_once_after_the_last_step_and_never_for_selection(tmp_path):
    class Spy(Regression):
        reads: ClassVar[list[str]] = []

        def evaluate(self, model, data):
            Spy.reads.append("test" if data is test else "val")
            return super().evaluate(model, data)

    test = regression_data(32, seed=3)
    task = Spy(ToyConfig())
    data = TaskData(train=EpochLoader(*regression_data(64, seed=1), batch_size=8), val=regression_data(32, seed=2),
                    test=test)
    fit(task, task.build_model(), data, LoopConfig(epochs=3, lr=0.05, warmup_steps=2), RunDir(tmp_path / "run"))
    assert Spy.reads == ["val", "val", "val", "test"]


def test_selecting_on_a_test_figure_is_refused(tmp_path):
    class Peeking(Regression):
        best = ("test_loss", "min")

    with pytest.raises(ValueError, match="validation metric"):
        run_toy(Peeking, tmp_path / "run")


def test_a_run_killed_before_its_test_scores_it_on_resume(tmp_path):
    run_toy(Regression, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    rows = run.read_metrics()
    run.keep_metrics(rows[-1]["step"] - 1)  # as if killed after the last checkpoint, before the test row
    run.append_metrics(rows[-2])
    _, result = run_toy(Regression, tmp_path / "run", resume=True)
    again = run.read_metrics()
    assert again[-1]["test_loss"] == pytest.approx(rows[-1]["test_loss"]) and result["test_loss"] == again[-1][
        "test_loss"]
    assert sum("test_loss" in row for row in again) == 1


def test_without_a_test_part_there_is_no_test_row(tmp_path):
    task = Regression(ToyConfig())
    data = TaskData(train=EpochLoader(*regression_data(64, seed=1), batch_size=8), val=regression_data(32, seed=2))
    result = fit(task, task.build_model(), data, LoopConfig(epochs=2, lr=0.05), RunDir(tmp_path / "run"))
    rows = RunDir(tmp_path / "run").read_metrics()
    assert len(rows) == 2 and "val_loss" in result and not any(k.startswith("test_") for r in rows for k in r)


def test_accumulating_two_batches_equals_the_double_batch(tmp_path):
    class NoDropout(Regression):
        def build_model(self):
            torch.manual_seed(0)
            model = nn.Linear(3, 1)
            model.config = self.config
            return model

    def run(name, batch, accum):
        task = NoDropout(ToyConfig())
        data = TaskData(EpochLoader(*regression_data(64, seed=1), batch_size=batch), regression_data(32, seed=2))
        model = task.build_model()
        fit(task, model, data, LoopConfig(epochs=3, lr=0.05, warmup_steps=2, batch_size=batch, accum_steps=accum),
            RunDir(tmp_path / name))
        return model

    double, accumulated = run("double", 16, 1), run("accumulated", 8, 2)
    for key, value in double.state_dict().items():
        torch.testing.assert_close(accumulated.state_dict()[key], value, atol=1e-6, rtol=0)


def test_loop_options_are_checked_with_their_names():
    with pytest.raises(ValueError, match="accum_steps must be at least 1"):
        LoopConfig(accum_steps=0)
    with pytest.raises(ValueError, match=r"ema_decay must be 0 \(off\) or in \(0, 1\)"):
        LoopConfig(ema_decay=1.5)
    with pytest.raises(ValueError, match="steps must be given without epochs"):
        LoopConfig(epochs=2, steps=10)
    with pytest.raises(ValueError, match="schedule must be one of cosine, inverse_sqrt"):
        LoopConfig(schedule="linear")


@pytest.mark.parametrize(("curves", "drawn_after_rows"), [("every", [1, 2, 3]), ("end", [2, 4]), ("never", [])])
def test_curves_are_drawn_at_every_checkpoint_or_once_per_run(tmp_path, monkeypatch, curves, drawn_after_rows):
    """`every` draws curves.png at each of the 3 epochs' checkpoints; `end` once when the run stops, whether
    it finished (its test row included) or was stopped to resume later (here after 2 epochs, then resumed for the
    third); `never` not at all."""
    drawn = []  # how many metrics rows the run had each time its picture was drawn
    monkeypatch.setattr(RunDir, "plot_curves", lambda run: drawn.append(len(run.read_metrics())))
    run_toy(Regression, tmp_path / "run", curves=curves, max_epochs_this_run=2)
    run_toy(Regression, tmp_path / "run", resume=True, curves=curves)
    assert drawn == drawn_after_rows


def test_curves_default_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("VITLAB_CURVES", raising=False)
    assert LoopConfig().curves == "every"
    monkeypatch.setenv("VITLAB_CURVES", "end")
    assert LoopConfig().curves == "end"
    monkeypatch.setenv("VITLAB_CURVES", "sometimes")
    with pytest.raises(ValueError, match="curves must be one of every, end, never"):
        LoopConfig()


# ---- checkpoints inside an epoch, and stopping when asked ----------------------------------------------------------
TIMINGS = ("train_time_s", "elapsed_s", "train_examples_per_s")


def without_timings(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if key not in TIMINGS and not key.endswith("_per_s")}
            for row in rows]


class Killed(Exception):
    """A process killed at this moment: nothing after it runs (no handler writes anything)."""


def killed_at(task_cls, call: int):
    """The task, its process killed inside its `call`-th training step (between the forward and the update)."""

    class Dying(task_cls):
        calls = 0

        def loss(self, model, batch):
            Dying.calls += 1
            if Dying.calls == call:
                raise Killed
            return super().loss(model, batch)

    return Dying


@pytest.mark.parametrize("stream", [False, True])
def test_a_run_killed_inside_an_epoch_resumes_from_its_inside_checkpoint_to_the_same_bits(tmp_path, stream):
    """Checkpoints every 3 steps, the process killed in step 14 (the epoch's 6th, or between two stream rows): the
    run resumes at step 11 or 13 (not at the epoch's start or the last row), ends on the uninterrupted run's
    weights bit for bit, and its metrics rows are the uninterrupted run's (the epoch's training figures included:
    its first steps' losses travelled in the checkpoint), each once."""
    straight, _ = run_toy(Regression, tmp_path / "straight", stream=stream)
    with pytest.raises(Killed):
        run_toy(killed_at(Regression, 14), tmp_path / "killed", stream=stream, checkpoint_every_steps=3)
    state = RunDir(tmp_path / "killed").load_state()
    assert state["step"] == (13 if stream else 11)  # the last inside checkpoint before the kill
    assert state["partial"]["batches"] == 3  # the steps since the last metrics row (at 10, or the epoch's end 8)
    resumed, _ = run_toy(Regression, tmp_path / "killed", resume=True, stream=stream, checkpoint_every_steps=3)
    for key, value in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, atol=0, rtol=0, msg=key)
    assert without_timings(RunDir(tmp_path / "killed").read_metrics()) == without_timings(
        RunDir(tmp_path / "straight").read_metrics())


def test_a_checkpoint_inside_an_epoch_resumes_only_with_the_processes_that_wrote_it(tmp_path):
    """Inside an epoch, where a run was is each process's share of the epoch's images: a checkpoint written there
    by two processes (each with its own random streams) is refused to one, saying how to resume it; at an epoch's
    end the same checkpoint resumes with a warning (the next epoch is cut afresh)."""
    import torch as th

    with pytest.raises(Killed):
        run_toy(killed_at(Regression, 14), tmp_path / "inside", checkpoint_every_steps=3)
    run = RunDir(tmp_path / "inside")
    state = run.load_state()
    assert state["partial"] is not None
    state["per_rank"] = [state["per_rank"][0]] * 2  # as two processes under torchrun would have written it
    th.save(state, run.file("state.pt"))
    with pytest.raises(ValueError, match=r"inside epoch 2, written by 2 process\(es\).*Resume it with 2 "
                                         r"process\(es\) \(torchrun --nproc_per_node 2"):
        run_toy(Regression, tmp_path / "inside", resume=True, checkpoint_every_steps=3)
    run_toy(Regression, tmp_path / "epochs", max_epochs_this_run=1)
    run = RunDir(tmp_path / "epochs")
    state = run.load_state()
    state["per_rank"] = [state["per_rank"][0]] * 2
    th.save(state, run.file("state.pt"))
    with pytest.warns(UserWarning, match="trained by 2 process\\(es\\) and resumes with 1"):
        run_toy(Regression, tmp_path / "epochs", resume=True)


def in_a_clean_child(target, *args) -> int:
    """Run `target(*args)` in a child process and return its exit code (negative: the signal that ended it). The
    child is forked from multiprocessing's fork server, a process that never ran autograd: a fork of this test
    process cannot run a backward pass once autograd started its device threads here (an earlier test in the same
    worker may have: "Unable to handle autograd's threading in combination with fork-based multiprocessing"). The
    server imports this module once, so each child starts in milliseconds."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    child = context.Process(target=target, args=args)
    child.start()
    child.join()
    return child.exitcode


class Preempted(Regression):
    """The toy task, sent SIGTERM in the middle of its 11th step (a scheduler taking the machine back)."""

    calls = 0

    def loss(self, model, batch):
        import os
        import signal

        Preempted.calls += 1
        if Preempted.calls == 11:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().loss(model, batch)


def train_until_preempted(folder) -> None:
    """In a child: the toy run, preempted at step 11; exits 75 where RunStopped said what the test expects and the
    process's own SIGTERM handler is back, 2 where not, 3 where the run did not stop (1, with its traceback in the
    test's report, where it raised)."""
    import signal
    import sys

    from vitlab.engine.loop import RunStopped

    torch.set_num_threads(1)
    before = signal.getsignal(signal.SIGTERM)
    try:
        run_toy(Preempted, folder)
    except RunStopped as stopped:
        said = str(stopped)
        ok = "stopped at step 11 (SIGTERM)" in said and "vitlab train --resume" in said
        sys.exit(RunStopped.EXIT_STATUS if ok and signal.getsignal(signal.SIGTERM) is before else 2)
    sys.exit(3)


def test_a_sigterm_stops_the_run_after_its_step_with_a_checkpoint_and_the_resume_command(tmp_path):
    """SIGTERM in the middle of step 11 (inside epoch 2): the step finishes, a checkpoint is written, RunStopped
    names the resume command; resumed, the run ends on the uninterrupted weights. The signal's handler is the
    process's own again afterwards. The run is in a child process: only a main thread can hold a signal handler
    (a test worker's may not be one), and a SIGTERM it does not catch must not end the test session."""
    from vitlab.engine.loop import RunStopped

    straight, _ = run_toy(Regression, tmp_path / "straight")
    assert in_a_clean_child(train_until_preempted, tmp_path / "run") == RunStopped.EXIT_STATUS
    assert RunDir(tmp_path / "run").load_state()["step"] == 11
    resumed, _ = run_toy(Regression, tmp_path / "run", resume=True)
    for key, value in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, atol=0, rtol=0, msg=key)


def test_an_inside_checkpoint_follows_the_clock_and_zero_minutes_is_refused(tmp_path, monkeypatch):
    from vitlab.engine import loop as loop_module
    from vitlab.engine.options import OptionError

    clock = iter(range(0, 10_000, 7))  # each reading of the clock 7 s after the last
    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: float(next(clock)))
    saves = []
    monkeypatch.setattr(RunDir, "save_state", lambda self, state: saves.append((state["step"], "partial" in state)))
    run_toy(Regression, tmp_path / "run", checkpoint_every=0.5)  # 30 s
    inside = [step for step, partial in saves if partial]
    assert inside and all(step % 8 for step in inside)  # between the epoch checkpoints (steps 8, 16, 24)
    assert [step for step, partial in saves if not partial] == [8, 16, 24]
    with pytest.raises(OptionError, match="checkpoint_every must be a positive number of minutes"):
        LoopConfig(epochs=1, checkpoint_every=0)


def resumable(folder) -> bool:
    return (folder / "state.pt").exists() or (folder / "state.prev.pt").exists()


def train_until_killed(folder, kind: str, nth: int) -> None:
    """In a child: the toy run (resumed where a checkpoint is), SIGKILLed at its `nth` moment of `kind`: inside a
    training step, inside an evaluation, or half-way through writing state.pt."""
    import os
    import signal

    torch.set_num_threads(1)
    calls = {"step": 0, "evaluation": 0, "save": 0}

    def moment(what: str) -> None:
        calls[what] += 1
        if what == kind and calls[what] == nth:
            os.kill(os.getpid(), signal.SIGKILL)  # no handler runs, nothing is cleaned up

    class Doomed(Regression):
        def loss(self, model, batch):
            moment("step")
            return super().loss(model, batch)

        def evaluate(self, model, data):
            moment("evaluation")
            return super().evaluate(model, data)

    real_save = torch.save

    def half_then_killed(obj, f, *args, **kwargs):
        if kind == "save" and calls["save"] + 1 == nth:
            f.write(b"\0" * 1000)  # part of the file, then the machine is gone
            f.flush()
        moment("save")
        return real_save(obj, f, *args, **kwargs)

    torch.save = half_then_killed
    run_toy(Doomed, folder, resume=resumable(folder), checkpoint_every_steps=2, epochs=6)


def test_a_run_killed_at_ten_random_moments_ends_as_if_never_stopped(tmp_path):
    """Fault injection: a process training the toy run is SIGKILLed (no handler, nothing cleaned up) at ten random
    moments, inside training steps, inside evaluations and half-way through writing state.pt, each time resumed by
    the next one; the run then ends on the uninterrupted run's weights bit for bit, with each metrics row once and
    the same. Each process is a fork of the fork server's, so ten starts cost milliseconds."""
    import random
    import signal

    straight, _ = run_toy(Regression, tmp_path / "straight", checkpoint_every_steps=2, epochs=6)  # 48 steps
    folder = tmp_path / "run"
    chooser = random.Random(0)
    within = {"step": 8, "evaluation": 2, "save": 4}  # each process dies before it could finish the run
    moments = [(kind, chooser.randint(1, within[kind])) for kind in chooser.choices(list(within), k=10)]
    killed = 0
    for kind, nth in moments:
        code = in_a_clean_child(train_until_killed, folder, kind, nth)
        assert code == -signal.SIGKILL or code == 0, (kind, nth, code)  # killed, or the run ended before its moment
        killed += code == -signal.SIGKILL
    assert killed == 10 and {kind for kind, _ in moments} == set(within)
    resumed, _ = run_toy(Regression, folder, resume=resumable(folder), checkpoint_every_steps=2, epochs=6)
    for key, value in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, atol=0, rtol=0, msg=key)
    assert without_timings(RunDir(folder).read_metrics()) == without_timings(
        RunDir(tmp_path / "straight").read_metrics())
