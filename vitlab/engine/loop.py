"""The one training loop. It knows no task: a task hands it a model, data and `loss(model, batch) -> dict`.

    fit(task, model, data, config, run)

The loop owns what every task needs, once:
- AdamW (decay only where the model says it belongs, optional layer-wise lr decay) and a schedule, counted in
  optimizer steps: warm-up then cosine, or the Transformer paper's warm-up then 1/√step;
- a run's length in optimizer steps (`steps`) or in passes over the data (`epochs`, where the data has them);
- gradient accumulation, clipping, bf16/fp16 autocast with the gradient scaler, `torch.compile`,
  DistributedDataParallel under torchrun, an exponential moving average of the weights;
- the training step through the model's training view (`engine/lean.py`): a classifier that reads only its class
  token computes only those rows of its last block, with the same loss and gradients;
- a progress bar, a metrics row at each evaluation, atomic checkpoints in a `RunDir`, the best checkpoint by
  the validation metric the task names (`task.best = ("val_acc", "max")`), and exact resume: the data order, the
  data stream's state and every RNG stream are saved, so a killed run continues draw for draw;
- checkpoints inside an epoch too (every `checkpoint_every` minutes or `checkpoint_every_steps` steps: the
  training state and the epoch's running figures, no metrics row), and a stop on SIGTERM or a first Ctrl-C: the
  step in flight finishes, such a checkpoint is written and `RunStopped` says how to resume (every process of a
  torchrun launch stops at the same step);
- honest figures: `task.evaluate` scores the validation data at each evaluation (logged as `val_<key>`), the best
  checkpoint is chosen on those alone, and the test data is scored once, when the schedule is complete, on the
  selected checkpoint (one last row of `test_<key>`).

A task's `loss` returns {"loss": total, other: logged}; the loop averages every key over the batches between
two evaluations and logs it as `train_<key>`. A task with several optimizers (a GAN's generator and
discriminator) names their parameters in `task.optimized_modules(model)` and writes `train_step(model, batch,
stepper)`, which calls `stepper.backward(loss)` and `stepper.step(name)`: the scaler, the accumulation and the
clipping stay here, in `Stepper`.

Data: `data.train` is either an epoch loader (`len()` batches, `set_epoch(epoch)` fixes the order) or a stream
(an endless iterator with `state_dict()` / `load_state_dict()`); `data.val` and `data.test` are whatever
`task.evaluate` reads (`test` None: the data has no test part, and no test figure is made).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shlex
import signal
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from tqdm import tqdm

from .config import LoopConfig
from .distributed import DistInfo, all_reduce_sum, barrier, gather_objects
from .ema import ModelEma
from .lean import training_view
from .optim import build_optimizer, build_scheduler, inverse_sqrt, inverse_sqrt_scale, warmup_poly
from .rng import rng_state, set_rng_state, set_seed
from .run import COMMAND_LINE, RunDir
from .speed import autocast, bf16_supported, bf16_unsupported_reason, machine_record, maybe_compile


@dataclass
class TaskData:
    """What `fit` trains on (`train`: an epoch loader or a stream) and what `task.evaluate` reads: `val`, which
    selects the best checkpoint, and `test`, scored once at the end (None where the data has no test part)."""

    train: Any
    val: Any
    test: Any = None

    @property
    def eval(self) -> Any:
        """The validation data (its name before there was a test part)."""
        return self.val


VAL, TEST = "val_", "test_"


def check_selection_metric(best: tuple[str, str]) -> None:
    """The metric that picks the best checkpoint must be a validation figure: the test set is never looked at
    before the end."""
    metric, direction = best
    if not metric.startswith(VAL) or direction not in ("max", "min"):
        raise ValueError(f"a task selects its best checkpoint on a validation metric, ('val_<key>', 'max' or "
                         f"'min'); got {best!r}")


def has_epochs(loader: Any) -> bool:
    return hasattr(loader, "set_epoch") and hasattr(loader, "__len__")


# ---- optimization: one optimizer and schedule per optimized module --------------------------------------------
def build_optimization(model: nn.Module, config: LoopConfig, total_steps: int, warmup_steps: int,
                       lr_scales: dict[str, float] | None = None):
    """AdamW or SGD over the model's parameter groups and its LambdaLR schedule, stepped once per optimizer step.
    lr_scales: the task's lr factors by parameter-name prefix (DETR's backbone)."""
    optimizer = build_optimizer(model, config.lr, config.weight_decay, config.betas, config.layer_decay,
                                eps=config.adam_eps, lr_scales=lr_scales, kind=config.optimizer,
                                momentum=config.momentum)
    if config.schedule == "cosine":
        return optimizer, build_scheduler(optimizer, total_steps, warmup_steps, config.min_lr_ratio)
    if config.schedule == "poly":
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_poly(
            s, total_steps, warmup_steps, config.poly_power, config.min_lr_ratio))
    scale = inverse_sqrt_scale(1.0, 1, warmup_steps)  # the paper's shape, peaking at 1 × lr
    # LambdaLR counts from 0, the paper from 1
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: inverse_sqrt(s + 1, 1, warmup_steps, scale))
    return optimizer, schedule


def schedule_length(config: LoopConfig, steps_per_epoch: int | None) -> tuple[int, int]:
    """(total optimizer steps, warm-up steps) of a run."""
    if config.steps is not None:
        total = config.steps
    elif steps_per_epoch is not None and config.epochs is not None:
        total = config.epochs * steps_per_epoch
    else:
        raise ValueError("the training data is a stream without epochs: give the run's length as steps")
    if config.warmup_steps is not None:
        warmup = config.warmup_steps
    else:
        warmup = round((config.warmup_epochs or 0.0) * (steps_per_epoch or 0))
    if config.schedule in ("cosine", "poly"):
        warmup = min(warmup, total // 2)  # a warm-up longer than half the run would leave no room for the decay
    return total, warmup


class Stepper:
    """The one backward and optimizer step: loss scaling, accumulation over `accum_steps` batches, clipping.

    `stepping` is True on the last batch of an accumulation group; before it, `step` does nothing and the
    gradients add up (each batch's loss is divided by accum_steps, so they add up to the mean). The loop runs a
    training step under autocast; backward and the optimizer step run with autocast off wherever they are called
    (autocast is for forward passes), so a task's own `train_step` gets them as the default step does."""

    def __init__(self, optimizers: dict[str, torch.optim.Optimizer], schedulers: dict[str, Any],
                 modules: dict[str, nn.Module], scaler: torch.amp.GradScaler, config: LoopConfig,
                 device: torch.device) -> None:
        self.optimizers, self.schedulers, self.modules = optimizers, schedulers, modules
        self.scaler, self.accum, self.clip_grad = scaler, config.accum_steps, config.clip_grad
        self.device_type = device.type
        self.stepping = True

    def backward(self, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss):
            raise FloatingPointError(f"the loss became {loss.item()}; lower lr or keep clip_grad on")
        with torch.autocast(self.device_type, enabled=False):
            self.scaler.scale(loss / self.accum).backward()

    def step(self, name: str = "model") -> None:
        """Unscale, clip, step and zero the gradients of optimizer `name`, and advance its schedule."""
        if not self.stepping:
            return
        optimizer = self.optimizers[name]
        with torch.autocast(self.device_type, enabled=False):
            if self.clip_grad > 0:
                self.scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(self.modules[name].parameters(), self.clip_grad)
            self.scaler.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        self.schedulers[name].step()

    def skip(self, name: str) -> None:
        """Advance the schedule of optimizer `name` on a step where it has nothing to do (a GAN's discriminator
        before it starts), so that its learning rate follows the same clock as the others'."""
        if self.stepping:
            with warnings.catch_warnings():  # torch warns of a schedule stepped before its optimizer: intended here
                warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
                self.schedulers[name].step()

    def steps_taken(self, name: str = "model") -> int:
        """Optimizer steps taken so far by optimizer `name` (its schedule's count; saved and resumed with it)."""
        return int(self.schedulers[name].last_epoch)

    def lr(self) -> float:
        return max(group["lr"] for optimizer in self.optimizers.values() for group in optimizer.param_groups)


# ---- the loop --------------------------------------------------------------------------------------------------
class Trainable:
    """What the loop asks of a task, with the defaults of a task of one optimizer: the core of a task's training half
    (tasks/base.py's TrainingTask builds on it)."""

    best: ClassVar[tuple[str, str]]  # the validation metric that picks best.safetensors and its direction: val_acc, max
    sample_name: ClassVar[str] = "samples"  # what the throughput counts ("images" -> train_images_per_s)
    unused_parameters: ClassVar[bool] = False  # a step leaves some parameters without gradients (DDP must know)

    def loss(self, model: nn.Module, batch: Any) -> dict[str, Any]:
        """{"loss": the total to minimise; other keys: logged} (DETR's weight-dict pattern)."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, data: Any) -> dict[str, Any]:
        """Figures of `model` on `data` (the validation or the test part), named without a prefix: {"acc": ...},
        reduced over processes."""
        raise NotImplementedError

    def optimized_modules(self, model: nn.Module) -> dict[str, nn.Module]:
        """One optimizer per entry; `train_step` steps them by name."""
        return {"model": model}

    def lr_scales(self) -> dict[str, float]:
        """Learning-rate factors by parameter-name prefix ({"backbone.": 0.1}); the rest trains at the loop's lr."""
        return {}

    def num_samples(self, batch: Any) -> int:
        return len(batch[0]) if isinstance(batch, list | tuple) else len(batch)

    def train_step(self, model: nn.Module, batch: Any, stepper: Stepper) -> dict[str, Any] | None:
        """One training step of a task with several optimizers (`optimized_modules`), stepping them through
        `stepper`; None (the default): the loop takes its one step on `loss`."""
        return None


class RunStopped(Exception):
    """The run stopped when asked to (SIGTERM, a first Ctrl-C), after writing a checkpoint it resumes from."""

    EXIT_STATUS = 75  # EX_TEMPFAIL: stopped, and resumable; what `vitlab train` exits with

    def __init__(self, run_dir: str, step: int, why: str) -> None:
        self.run_dir, self.step = run_dir, step
        super().__init__(f"stopped at step {step} ({why}), with a checkpoint to resume from: "
                         f"vitlab train --resume {shlex.quote(run_dir)}")


def fit(task: Trainable, model: nn.Module, data: TaskData, config: LoopConfig, run: RunDir, *, resume: bool = False,
        run_info: dict[str, Any] | None = None, dist: DistInfo | None = None) -> dict[str, Any]:
    """Train `model` on `data.train` with `task.loss`, select on `task.evaluate(model, data.val)`, and score
    `data.test` once at the end; returns the last validation row merged with the test row.

    resume: continue from run/state.pt. run_info: what config.json records beside the loop's config. Only rank 0
    of a torchrun launch writes files and prints. Raises RunStopped when stopped by SIGTERM or a first Ctrl-C."""
    loop = _Loop(task, model, data, config, run, run_info or {}, dist)
    with _stop_on_signals(loop):
        return loop.run(resume)


@contextlib.contextmanager
def _stop_on_signals(loop: _Loop) -> Iterator[None]:
    """SIGTERM (a scheduler taking the machine back) and a first SIGINT ask the loop to stop after the step in
    flight; a second SIGINT aborts at once. Only the main thread can hold signal handlers: elsewhere (a notebook's
    worker thread) the signals keep their own."""
    def asked(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and loop.stop_requested:
            raise KeyboardInterrupt
        loop.stop_requested = signal.Signals(signum).name
        if loop.dist.is_main:
            tqdm.write(f"{loop.stop_requested}: stopping after this step, with a checkpoint"
                       + (" (Ctrl-C again aborts without one)" if signum == signal.SIGINT else ""))

    try:  # signal.signal refuses a thread that is not the interpreter's main one (its own test, not threading's)
        before = {signum: signal.signal(signum, asked) for signum in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


class _Loop:
    def __init__(self, task, model, data, config, run, run_info, dist) -> None:
        check_selection_metric(task.best)
        self.task, self.model, self.data, self.config, self.run_dir = task, model, data, config, run
        self.dist = dist or DistInfo()
        self.device = self.dist.device
        self.run_info = run_info
        model.to(self.device)
        train = data.train
        self.epochs_data = has_epochs(train)
        self.steps_per_epoch = None
        if self.epochs_data:
            if not 1 <= config.accum_steps <= len(train):
                raise ValueError(f"accum_steps must be between 1 and the {len(train)} batches of an epoch, "
                                 f"got {config.accum_steps}")
            self.steps_per_epoch = len(train) // config.accum_steps
        self.total_steps, warmup = schedule_length(config, self.steps_per_epoch)
        if config.fp16 and self.device.type != "cuda":
            raise ValueError("fp16 needs a CUDA device (float16 with a gradient scaler); on a CPU use bf16")
        modules = task.optimized_modules(model)
        lr_scales = task.lr_scales()
        optimizers, schedulers = {}, {}
        for name, module in modules.items():
            optimizers[name], schedulers[name] = build_optimization(module, config, self.total_steps, warmup,
                                                                    lr_scales)
        self.ema = ModelEma(model, config.ema_decay) if config.ema_decay else None
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.fp16)
        self.stepper = Stepper(optimizers, schedulers, modules, self.scaler, config, self.device)
        self.step, self.best, self.best_row, self.elapsed_before = 0, None, None, 0.0
        self.partial: dict[str, Any] | None = None  # the epoch's running figures at a mid-epoch checkpoint
        self.stop_requested: str | None = None  # the signal's name, once one asks the run to stop

    # -- state --------------------------------------------------------------------------------------------------
    def _restore(self) -> None:
        state = self.run_dir.load_state()
        self.model.load_state_dict(state["model"])
        for name, optimizer in self.stepper.optimizers.items():
            optimizer.load_state_dict(state["optimizers"][name])
            self.stepper.schedulers[name].load_state_dict(state["schedulers"][name])
        self.scaler.load_state_dict(state["scaler"])
        if self.ema is not None:
            if "ema" not in state:
                raise ValueError("ema_decay cannot be turned on when resuming a run that kept no EMA")
            self.ema.load_state_dict(state["ema"])
        self.step, self.best, self.elapsed_before = int(state["step"]), state["best"], float(state["elapsed_s"])
        self.best_row = state.get("best_row")
        self.partial = state.get("partial")
        mine = self._rng_for_rank(state["per_rank"])
        set_rng_state(mine["rng"])
        if mine["data"] is not None:
            self.data.train.load_state_dict(mine["data"])
        if self.dist.is_main:
            self.run_dir.keep_metrics(self.step)

    def _rng_for_rank(self, per_rank: list[dict[str, Any]]) -> dict[str, Any]:
        """This process's saved random state (and data stream); a run resumed with another number of processes
        cannot replay the same draws, and says so. Inside an epoch it cannot go on at all: where it was in the
        epoch is each process's share of the epoch's images, which another number of processes would cut
        differently (images seen twice, others skipped), so that is refused."""
        if len(per_rank) != self.dist.world_size:
            if self.partial is not None and self.epochs_data:
                raise ValueError(
                    f"{self.run_dir.path}'s last checkpoint is inside epoch {self.step // self.steps_per_epoch + 1}, "
                    f"written by {len(per_rank)} process(es); its place in the epoch is each process's share of "
                    f"the images, which {self.dist.world_size} process(es) would cut differently (some images "
                    f"twice, others never). Resume it with {len(per_rank)} process(es)"
                    + (f" (torchrun --nproc_per_node {len(per_rank)} -m vitlab train --resume ...)"
                       if len(per_rank) > 1 else " (without torchrun)"))
            if self.dist.is_main:
                warnings.warn(f"the run was trained by {len(per_rank)} process(es) and resumes with "
                              f"{self.dist.world_size}: it continues, but not draw for draw as the original would "
                              f"have", stacklevel=4)
            return per_rank[self.dist.rank % len(per_rank)]
        return per_rank[self.dist.rank]

    def _checkpoint(self, row: dict[str, Any]) -> None:
        # each rank's random streams and data stream (a collective: every rank takes part)
        data_state = None if self.epochs_data else self.data.train.state_dict()
        per_rank = gather_objects({"rng": rng_state(), "data": data_state}, self.dist)
        if self.dist.is_main:
            metric, direction = self.task.best
            value = row.get(metric)
            improved = value is not None and (self.best is None or
                                              (value > self.best if direction == "max" else value < self.best))
            self.best = value if improved else self.best
            if improved:
                self.best_row = {key: row[key] for key in ("step", "epoch", metric) if key in row}
            run = self.run_dir
            run.append_metrics(row)
            provenance = {"step": str(row["step"]), **({"epoch": str(row["epoch"])} if "epoch" in row else {}),
                          metric: str(row.get(metric, ""))}
            preprocessing = self.run_info.get("data", {}).get("preprocessing")
            if preprocessing:  # the weights say how their images are prepared, wherever the file goes
                provenance["preprocessing"] = json.dumps(preprocessing)
            run.save_weights("last", self.model, provenance)
            if improved:
                run.save_weights("best", self.model, provenance)
            if self.ema is not None:
                run.save_weights("ema", self.ema.module, provenance)
            run.save_state(self._state(per_rank, row["elapsed_s"]))
            if self.config.curves == "every":
                run.plot_curves()  # at every checkpoint, so a run stopped early still has its picture
            tqdm.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()
                                   if not isinstance(v, dict)}))
        barrier(self.dist)  # no rank runs ahead of a checkpoint it may have to resume from

    def _state(self, per_rank: list[dict[str, Any]], elapsed_s: float,
               partial: dict[str, Any] | None = None) -> dict[str, Any]:
        """What state.pt holds: everything the run continues from, draw for draw."""
        state = {
            "model": self.model.state_dict(),
            "optimizers": {n: o.state_dict() for n, o in self.stepper.optimizers.items()},
            "schedulers": {n: s.state_dict() for n, s in self.stepper.schedulers.items()},
            "scaler": self.scaler.state_dict(), "step": self.step, "best": self.best, "best_row": self.best_row,
            "elapsed_s": elapsed_s, "per_rank": per_rank,
        }
        if self.epochs_data:  # for a reader; resuming goes by the step
            epoch = self.step / self.steps_per_epoch
            state["epoch"] = int(epoch) if epoch.is_integer() else round(epoch, 4)
        if self.ema is not None:
            state["ema"] = self.ema.state_dict()
        if partial is not None:
            state["partial"] = partial
        return state

    def _checkpoint_inside(self, partial: dict[str, Any], elapsed_s: float) -> None:
        """A checkpoint between two evaluations: state.pt alone, with the figures the next metrics row averages
        so far (`partial`); no row, no weights file. A collective, as `_checkpoint`."""
        data_state = None if self.epochs_data else self.data.train.state_dict()
        per_rank = gather_objects({"rng": rng_state(), "data": data_state}, self.dist)
        if self.dist.is_main:
            self.run_dir.save_state(self._state(per_rank, elapsed_s, partial))
        barrier(self.dist)

    def _inside_checkpoint_due(self, saved_step: int, saved_at: float) -> tuple[bool, bool]:
        """(a checkpoint inside the epoch is due, the run was asked to stop), the same on every process: a
        clock or a signal differs between processes, so under torchrun the two flags are agreed on (any rank's
        stop stops all, at this step)."""
        every = self.config.checkpoint_every_steps
        due = (self.step - saved_step >= every) if every else (time.perf_counter() - saved_at >=
                                                               60 * self.config.checkpoint_every)
        stop = self.stop_requested is not None
        if self.dist.distributed:  # one small all-reduce a step, beside the gradients' own
            due_all, stop_all = all_reduce_sum([float(due), float(stop)], self.dist)
            due, stop = due_all > 0, stop_all > 0
        return due, stop

    # -- running ------------------------------------------------------------------------------------------------
    def run(self, resume: bool) -> dict[str, Any]:
        config, dist = self.config, self.dist
        if resume:
            self._restore()
        else:
            set_seed(config.seed + dist.rank)  # each process its own dropout and drop-path draws
        if dist.is_main:
            self.run_dir.path.mkdir(parents=True, exist_ok=True)
            if not resume:
                self.run_dir.file("metrics.jsonl").unlink(missing_ok=True)
            started = self.run_dir.read_config() if resume and self.run_dir.file("config.json").is_file() else {}
            command = COMMAND_LINE.get()
            invocation = {"command": started.get("command", shlex.join(command) if command else None)}
            if resume and command:
                invocation["resumed_with"] = shlex.join(command)
            self.run_dir.write_config({**self.run_info, "loop": dataclasses.asdict(config),
                                       "world_size": dist.world_size, **invocation,
                                       "machine": started.get("machine", machine_record(self.device))})
        if config.bf16 and not bf16_supported(self.device) and dist.is_main:
            warnings.warn(f"bf16: {bf16_unsupported_reason(self.device)}", stacklevel=3)
        # the compiled module shares `model`'s parameters; files are written from `model`, so keys stay plain
        self.forward_model = maybe_compile(self.model, config.compile, dynamic=False)
        view = training_view(self.model)  # the model, or its forward computing only what the loss reads
        self.train_model = self.forward_model if view is self.model else maybe_compile(view, config.compile,
                                                                                       dynamic=False)
        if dist.distributed:
            from torch.nn.parallel import DistributedDataParallel

            # a multi-task step (IPT) uses one task's head and tail: the others get no gradient that step
            self.train_model = DistributedDataParallel(
                self.train_model, device_ids=[self.device] if self.device.type == "cuda" else None,
                find_unused_parameters=self.task.unused_parameters)
        end = self._end_step()
        if self.step >= end:
            return self._nothing_to_do()
        row: dict[str, Any] = {}
        run_start = time.perf_counter()
        self.model.train()
        bar = tqdm(total=end, initial=self.step, dynamic_ncols=True, mininterval=1.0, leave=False,
                   disable=not dist.is_main)
        partial = self.partial or {}  # a run resumed inside an epoch goes on averaging its figures
        sums: dict[str, float] = dict(partial.get("sums", {}))
        seen, batches, segment_before = partial.get("seen", 0), partial.get("batches", 0), partial.get("segment_s", 0.)
        segment_start = saved_at = time.perf_counter()
        saved_step = self.step
        for batch, last_of_step in self._batches():
            losses = self._train_on(batch, last_of_step)
            for key, value in losses.items():
                sums[key] = sums.get(key, 0.0) + float(value)
            batches += 1
            seen += self.task.num_samples(batch)
            if not last_of_step:
                continue
            self.step += 1
            bar.update(1)
            if self.epochs_data:  # the epoch this step belongs to, of the epochs this schedule spans
                epochs = -(-self.total_steps // self.steps_per_epoch)
                bar.set_description(f"epoch {(self.step - 1) // self.steps_per_epoch + 1}/{epochs}", refresh=False)
            rate = seen / max(time.perf_counter() - segment_start, 1e-9)
            bar.set_postfix(loss=f"{sums['loss'] / batches:.3f}", refresh=False,
                            **{f"{self.task.sample_name}_s": f"{rate:.0f}"})
            inside_due, stop = self._inside_checkpoint_due(saved_step, saved_at)
            if self._checkpoint_due(end):
                elapsed = segment_before + time.perf_counter() - segment_start
                row = self._row(sums, batches, seen, elapsed, run_start, evaluate=self._evaluation_due(end))
                self._checkpoint(row)
                sums, seen, batches, segment_before = {}, 0, 0, 0.0
                segment_start = saved_at = time.perf_counter()
                saved_step = self.step
            elif inside_due or stop:
                segment = segment_before + time.perf_counter() - segment_start
                self._checkpoint_inside({"sums": sums, "batches": batches, "seen": seen, "segment_s": segment},
                                        self.elapsed_before + time.perf_counter() - run_start)
                saved_step, saved_at = self.step, time.perf_counter()
            if self.step >= end:
                break
            if stop:
                bar.close()
                self._stopped()
        bar.close()
        if self.step >= self.total_steps:
            row = {**row, **self._score_test(run_start)}
        if config.curves == "end" and dist.is_main and row:
            self.run_dir.plot_curves()
        return row

    def _stopped(self) -> None:
        raise RunStopped(str(self.run_dir.path), self.step, self.stop_requested or "asked to stop")

    def _score_test(self, run_start: float | None = None) -> dict[str, Any]:
        """The one look at the test data: the selected checkpoint (best.safetensors; the last weights where the run
        kept no best) scored on `data.test`, appended as the run's last row. {} when the data has no test part."""
        if self.data.test is None:
            return {}
        which = self.run_dir.selected_weights()
        weights = self.run_dir.read_weights(which)
        trained = {key: value.clone() for key, value in self.model.state_dict().items()}
        self.model.load_state_dict(weights)
        row: dict[str, Any] = {"step": self.step}
        if self.epochs_data:
            epoch = self.step / self.steps_per_epoch
            row["epoch"] = int(epoch) if epoch.is_integer() else round(epoch, 4)
        selected = self.best_row or {}
        row.update({f"selected_{key}": value for key, value in selected.items() if key in ("step", "epoch")})
        row.update({"selected_weights": which, "selected_by": self.task.best[0], "selected_value": self.best})
        row.update({TEST + key: value for key, value in self.task.evaluate(self.forward_model, self.data.test).items()})
        self.model.load_state_dict(trained)  # the model leaves `fit` as training left it
        self.model.train()
        if run_start is not None:
            row["elapsed_s"] = self.elapsed_before + time.perf_counter() - run_start
        if self.dist.is_main:
            self.run_dir.append_metrics(row)
            tqdm.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()
                                   if not isinstance(v, dict)}))
        barrier(self.dist)
        return row

    def _end_step(self) -> int:
        """Where this run stops: the schedule's end, or earlier with max_epochs/steps_this_run."""
        end = self.total_steps
        if self.config.max_steps_this_run is not None:
            end = min(end, self.step + self.config.max_steps_this_run)
        if self.config.max_epochs_this_run is not None and self.epochs_data:
            end = min(end, (self._epoch() + self.config.max_epochs_this_run) * self.steps_per_epoch)
        return end

    def _epoch(self) -> int:
        return self.step // self.steps_per_epoch

    def _batches(self) -> Iterator[tuple[Any, bool]]:
        """(batch, whether it completes an optimizer step), from where the run stands: a resumed epoch skips the
        batches it already trained on (the order is fixed by (seed, epoch), so it sees the rest as before)."""
        accum, train = self.config.accum_steps, self.data.train
        if not self.epochs_data:
            for i, batch in enumerate(train):
                yield batch, (i + 1) % accum == 0
            return
        epoch, skip = self._epoch(), (self.step % self.steps_per_epoch) * accum
        usable = self.steps_per_epoch * accum  # a last incomplete accumulation is left out, like drop_last
        while True:
            train.set_epoch(epoch)
            if skip and hasattr(train, "batches_from"):  # a loader that can start mid-epoch without loading
                batches = enumerate(train.batches_from(skip), start=skip)
            else:  # replay the skipped batches: their augmentations advance the loader's own generator
                batches = ((i, batch) for i, batch in enumerate(train) if i >= skip)
            for i, batch in batches:
                if i == usable:
                    break
                yield batch, (i + 1) % accum == 0
            epoch, skip = epoch + 1, 0

    def _train_on(self, batch: Any, last_of_step: bool) -> dict[str, torch.Tensor]:
        stepper, model = self.stepper, self.train_model
        stepper.stepping = last_of_step
        batch = self._to_device(batch)
        sync = contextlib.nullcontext() if last_of_step or not self.dist.distributed else model.no_sync()
        with sync, autocast(self.device, self.config.precision):
            losses = self.task.train_step(model, batch, stepper)
            if losses is None:
                losses = self.task.loss(model, batch)
                stepper.backward(losses["loss"])
                stepper.step("model")
        if last_of_step:
            self.scaler.update()
            if self.ema is not None:
                self.ema.update(self.model)
        return {key: value.detach() for key, value in losses.items()}

    def _to_device(self, batch: Any) -> Any:
        if isinstance(batch, torch.Tensor):
            return batch.to(self.device, non_blocking=True)
        if isinstance(batch, list | tuple):
            return type(batch)(self._to_device(item) for item in batch)
        if isinstance(batch, dict):
            return {key: self._to_device(value) for key, value in batch.items()}
        return batch

    def _checkpoint_due(self, end: int) -> bool:
        """A checkpoint (and a metrics row) at each epoch's end, or every eval_every steps of a stream, and at the
        end of the run."""
        if self.step >= end:
            return True
        if self.epochs_data:
            return self.step % self.steps_per_epoch == 0
        return self.step % self.config.eval_every == 0

    def _evaluation_due(self, end: int) -> bool:
        """Evaluate at every checkpoint of a stream, every eval_every epochs, and at the end."""
        if self.step >= end or not self.epochs_data:
            return True
        return (self._epoch() % self.config.eval_every) == 0

    def _row(self, sums, batches, seen, elapsed, run_start, evaluate: bool) -> dict[str, Any]:
        sums_all = all_reduce_sum([*sums.values(), batches, seen], self.dist)
        *totals, batches_all, seen_all = sums_all
        row: dict[str, Any] = {}
        if self.epochs_data:
            epoch = self.step / self.steps_per_epoch
            row["epoch"] = int(epoch) if epoch.is_integer() else round(epoch, 4)
        row.update({"step": self.step, "lr": self.stepper.lr()})
        row.update({f"train_{key}": total / max(batches_all, 1) for key, total in zip(sums, totals)})
        name = self.task.sample_name
        row[f"train_{name}_per_s"] = seen_all / max(elapsed, 1e-9)
        row["train_time_s"] = elapsed
        if evaluate:
            row.update({VAL + k: v for k, v in self.task.evaluate(self.forward_model, self.data.val).items()})
            if self.ema is not None:
                row.update({f"{VAL}{k}_ema": v for k, v in self.task.evaluate(self.ema.module, self.data.val).items()})
            self.model.train()
        row["elapsed_s"] = self.elapsed_before + time.perf_counter() - run_start
        return row

    def _nothing_to_do(self) -> dict[str, Any]:
        if self.dist.is_main:
            unit = f"{self.config.epochs} epochs" if self.config.steps is None else f"{self.config.steps} steps"
            tqdm.write(f"nothing to do: the run in {self.run_dir.path} has finished its {unit} (pass a larger "
                       f"epochs or steps with --resume to extend it)")
        rows = self.run_dir.read_metrics()
        last = rows[-1] if rows else {}
        if self.step >= self.total_steps and not any(key.startswith(TEST) for key in last):
            return {**last, **self._score_test()}  # killed after its last checkpoint, before the test
        return last

