"""Training the original Transformer on a toy sequence task, and loading a trained run to translate with it.

A run folder holds
    config.json        the options, the task and the model config (everything needed to rebuild them)
    metrics.jsonl      one line per evaluation: step, learning rate, training loss, held-out exact-sequence accuracy
    last.safetensors   the weights with their config (what `vitlab translate` reads)
    state.pt           what `--resume` needs: model, optimizer, scheduler, step, RNG states
Every file is written atomically (temporary file, fsync, rename).

Glossary: B batch, S source tokens, T target tokens, V vocabulary size.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ..data.sequences import BOS, EOS, PAD, SequenceTask, collate, make_test_set, sample_batch
from ..interop.weights import read_state_dict, save_weights
from ..models.decoding import beam_search, greedy_decode
from ..models.registry import config_from_dict, config_to_dict
from ..models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from .checkpoint import load_training_state, read_jsonl, save_training_state, set_rng_state
from .optim import build_optimizer, build_scheduler, inverse_sqrt, inverse_sqrt_scale

CONFIG_FILE, METRICS_FILE, WEIGHTS_FILE = "config.json", "metrics.jsonl", "last.safetensors"
SCHEDULES = ("inverse_sqrt", "cosine")
# options a resumed run may change; the rest must stay what the run started with
RESUMABLE = ("steps", "threads")


@dataclass(frozen=True)
class Seq2SeqTrainOptions:
    """Everything a run depends on. The defaults train `reverse` to ≥ 99 % held-out accuracy in ~2 min on 2 cores."""

    task: str = "reverse"  # reverse | copy | sort | add
    out: str | None = None  # run folder (default: runs/seq2seq-TASK-TIMESTAMP)
    num_symbols: int = 10  # symbols 0 … num_symbols-1 (for add: the base)
    min_len: int | None = None  # shortest source (add: digits per operand); None: the task's default
    max_len: int | None = None  # longest source; None: the task's default
    test_split: str = "unseen"  # "unseen": same lengths, never trained on; "longer": longer than any in training
    test_size: int = 500
    dim: int = 64  # d_model
    depth: int = 2  # encoder blocks, and as many decoder blocks
    num_heads: int = 4
    mlp_ratio: float = 4.0
    dropout: float = 0.0  # the toy tasks draw fresh data every step: nothing to overfit
    norm: str = "post"
    pos_embed: str = "sincos"
    tie_embeddings: bool = True
    steps: int = 4000  # measured: reverse holds 98–99 % from step 1,500 to 2,250 and reaches 99.8 % at 4,000
    batch_size: int = 64
    schedule: str = "inverse_sqrt"  # the paper's warm-up + 1/√step with Adam; "cosine": AdamW, warm-up + cosine
    lr: float = 2e-3  # peak learning rate, reached at the end of the warm-up (either schedule)
    warmup_steps: int = 200
    weight_decay: float = 0.0  # AdamW decay (cosine schedule only)
    label_smoothing: float = 0.1  # ε_ls of §5.4
    clip_grad: float = 1.0  # max gradient norm; 0: off
    eval_every: int = 250
    seed: int = 0
    # one thread: at this size a step is hundreds of tiny kernels, where a second thread only adds synchronisation
    # (and, on a busy machine, a lot of waiting); None: torch's choice
    threads: int | None = 1
    overwrite: bool = False
    resume: bool = False

    def __post_init__(self) -> None:
        positive = {"steps": self.steps, "batch_size": self.batch_size, "dim": self.dim, "depth": self.depth,
                    "num_heads": self.num_heads, "test_size": self.test_size, "eval_every": self.eval_every,
                    "warmup_steps": self.warmup_steps, "lr": self.lr}
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.dim % self.num_heads or self.dim % 2:
            raise ValueError(f"--dim must be even and divisible by --num-heads, got dim={self.dim}, "
                             f"num_heads={self.num_heads}; try --dim {self.num_heads * 16}")
        self.make_task()  # checks task, lengths and symbols

    def make_task(self) -> SequenceTask:
        from ..data.sequences import DEFAULT_LENGTHS, TASKS

        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        low, high = DEFAULT_LENGTHS[self.task]
        return SequenceTask(self.task, self.num_symbols, self.min_len or low, self.max_len or high)


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int) -> torch.Tensor:
    """Cross-entropy against q = (1 - ε)·onehot(y) + ε/V (§5.4, Szegedy et al. 2016), averaged over non-pad tokens.

    logits: (B, T, V), target: (B, T) with `pad_id` where there is no token. Per token this is
    -(1 - ε)·log p(y) - ε/V · Σ_v log p(v), the definition `F.cross_entropy(label_smoothing=ε)` uses.
    """
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=pad_id, label_smoothing=smoothing)


def build_model(options: Seq2SeqTrainOptions, task: SequenceTask) -> Seq2SeqTransformer:
    longest = task.max_source_len + (4 if options.test_split == "longer" else 0)  # + the "longer" test lengths
    config = Seq2SeqConfig(
        vocab_size=task.vocab.size, dim=options.dim, depth=options.depth, num_heads=options.num_heads,
        mlp_ratio=options.mlp_ratio, dropout=options.dropout, norm=options.norm, pos_embed=options.pos_embed,
        max_len=2 * longest + 8, tie_embeddings=options.tie_embeddings, pad_id=PAD,
    )
    return config.build()


def build_optimization(model: nn.Module, options: Seq2SeqTrainOptions):
    """The paper's Adam(β2 = 0.98, ε = 1e-9) with `inverse_sqrt`, or AdamW with warm-up + cosine."""
    if options.schedule == "inverse_sqrt":
        optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        D, warmup = model.config.dim, options.warmup_steps
        scale = inverse_sqrt_scale(options.lr, D, warmup)
        # LambdaLR multiplies the base lr (1.0) by this; its step counts from 0, the paper's from 1
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: inverse_sqrt(s + 1, D, warmup, scale))
    else:
        optimizer = build_optimizer(model, options.lr, options.weight_decay, betas=(0.9, 0.98))
        scheduler = build_scheduler(optimizer, options.steps, options.warmup_steps)
    return optimizer, scheduler


@torch.no_grad()
def exact_matches(model: Seq2SeqTransformer, pairs: list[tuple[list[int], list[int]]], batch_size: int = 500,
                  beam_size: int = 1) -> list[bool]:
    """For each pair, whether its decoded output (up to and including <eos>) equals the target exactly."""
    was_training = model.training
    model.eval()
    matches = []
    device = next(model.parameters()).device
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        src, _, _ = collate(chunk)
        decoded = decode(model, src.to(device), max(len(t) for _, t in chunk) + 2, beam_size).tokens.cpu()
        matches += [decoded[row, :len(target) + 1].tolist() == [*target, EOS] for row, (_, target) in enumerate(chunk)]
    model.train(was_training)
    return matches


def exact_accuracy(model: Seq2SeqTransformer, pairs: list[tuple[list[int], list[int]]], batch_size: int = 500,
                   beam_size: int = 1) -> float:
    """Share of pairs whose decoded output (up to and including <eos>) equals the target exactly."""
    matches = exact_matches(model, pairs, batch_size, beam_size)
    return sum(matches) / len(matches)


def accuracy_by_length(pairs: list[tuple[list[int], list[int]]], matches: list[bool]) -> dict[str, float]:
    """Exact accuracy per source length, {"1": 1.0, "2": 0.9, …} (string keys, as JSON keeps them): a model that
    fails only at some lengths shows it here, where one overall figure hides it."""
    by_length: dict[int, list[bool]] = {}
    for (source, _), match in zip(pairs, matches, strict=True):
        by_length.setdefault(len(source), []).append(match)
    return {str(length): round(sum(m) / len(m), 4) for length, m in sorted(by_length.items())}


def decode(model: Seq2SeqTransformer, src: torch.Tensor, max_new_tokens: int, beam_size: int = 1):
    if beam_size == 1:
        return greedy_decode(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=max_new_tokens)
    return beam_search(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=max_new_tokens, beam_size=beam_size)


def train_seq2seq(options: Seq2SeqTrainOptions) -> dict[str, Any]:
    """Train on freshly drawn batches, evaluate on the held-out set every `eval_every` steps; returns the last
    metrics row plus `run_dir`."""
    run_dir, options = _prepare_run_dir(options)
    threads_before = torch.get_num_threads()
    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        return _train(options, run_dir)
    finally:
        torch.set_num_threads(threads_before)  # leave the process as it was (a notebook, a test session)


def _train(options: Seq2SeqTrainOptions, run_dir: Path) -> dict[str, Any]:
    task = options.make_task()
    torch.manual_seed(options.seed)
    model = build_model(options, task)
    model.model_name = f"seq2seq_{task.name}"
    optimizer, scheduler = build_optimization(model, options)
    test_pairs = make_test_set(task, options.test_size, options.test_split, options.seed)
    held_out = {tuple(src) for src, _ in test_pairs}
    data_rng = random.Random(f"train-{options.seed}")
    start_step, elapsed_before = 0, 0.0
    if options.resume:
        state = load_training_state(run_dir)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_step, elapsed_before = int(state["step"]), float(state["elapsed_s"])
        data_rng.setstate(_as_tuple(state["data_rng"]))
        set_rng_state(state["rng"])
        _keep_metrics_until(run_dir / METRICS_FILE, start_step)
    else:
        _write_json(run_dir / CONFIG_FILE, {"options": dataclasses.asdict(options), "task": dataclasses.asdict(task),
                                            "model": config_to_dict(model.config), "vocab": list(task.vocab.symbols)})
        (run_dir / METRICS_FILE).write_text("")
    model.train()
    run_start, losses, row = time.perf_counter(), [], {}
    bar = tqdm(range(start_step, options.steps), desc=f"{task.name}", initial=start_step, total=options.steps,
               dynamic_ncols=True, mininterval=1.0, leave=False)
    for step in bar:
        src, tgt_in, tgt_out = collate(sample_batch(task, options.batch_size, data_rng, held_out))
        loss = label_smoothed_loss(model(src, tgt_in), tgt_out, options.label_smoothing, PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if options.clip_grad > 0:
            nn.utils.clip_grad_norm_(model.parameters(), options.clip_grad)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise ArithmeticError(f"the loss became {losses[-1]} at step {step + 1}; lower --lr (now {options.lr})")
        if (step + 1) % options.eval_every == 0 or step + 1 == options.steps:
            matches = exact_matches(model, test_pairs)
            row = {"step": step + 1, "lr": lr, "loss": sum(losses) / len(losses),
                   "test_exact_acc": sum(matches) / len(matches),
                   "test_exact_acc_by_len": accuracy_by_length(test_pairs, matches),
                   "elapsed_s": elapsed_before + time.perf_counter() - run_start}
            losses = []
            _checkpoint(run_dir, row, model, optimizer, scheduler, data_rng)
            bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['test_exact_acc']:.3f}")
            tqdm.write(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()
                                   if k != "test_exact_acc_by_len"}))  # one short line; the file has it all
    bar.close()
    if not row:
        rows = read_jsonl(run_dir / METRICS_FILE)
        row = rows[-1] if rows else {}
    return {**row, "run_dir": str(run_dir)}


def _checkpoint(run_dir: Path, row: dict[str, Any], model: Seq2SeqTransformer, optimizer, scheduler,
                data_rng: random.Random) -> None:
    """Metrics row, weights, then the resume state: a kill between two writes loses at most this evaluation."""
    _append_jsonl(run_dir / METRICS_FILE, row)
    save_weights(model, run_dir / WEIGHTS_FILE, {"step": str(row["step"])})
    save_training_state(run_dir, model=model.state_dict(), optimizer=optimizer.state_dict(),
                        scheduler=scheduler.state_dict(), step=row["step"], elapsed_s=row["elapsed_s"],
                        data_rng=data_rng.getstate())


def load_seq2seq_run(run_dir: str | os.PathLike) -> tuple[Seq2SeqTransformer, SequenceTask]:
    """The trained model (in eval mode) and its task, from a folder written by `train_seq2seq`."""
    run_dir = Path(run_dir)
    weights, config_path = run_dir / WEIGHTS_FILE, run_dir / CONFIG_FILE
    if not weights.is_file() or not config_path.is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a finished seq2seq run: expected {CONFIG_FILE} and {WEIGHTS_FILE} in it; "
            f"train one with `vitlab train-seq2seq --out {run_dir}`"
        )
    saved = json.loads(config_path.read_text())
    if "task" not in saved or "model" not in saved:
        raise ValueError(f"{config_path} was not written by `vitlab train-seq2seq`; pass a seq2seq run folder")
    task = SequenceTask(**saved["task"])
    model = config_from_dict(saved["model"]).build()
    state, _ = read_state_dict(weights)
    model.load_state_dict(state)
    return model.eval(), task


def translate(model: Seq2SeqTransformer, task: SequenceTask, text: str, beam_size: int = 1,
              max_new_tokens: int | None = None) -> list[str]:
    """Decode one input given as space-separated tokens ("3 1 4 1 5") -> the output tokens."""
    tokens = text.split()
    if not tokens:
        raise ValueError(f"the input is empty; give tokens from the vocabulary ({' '.join(task.vocab.symbols)}) "
                         f"separated by spaces, e.g. \"3 1 4 1 5\"")
    src = torch.tensor([task.vocab.encode(tokens)])  # (1, S)
    max_new_tokens = max_new_tokens or min(model.config.max_len - 1, 2 * len(tokens) + 4)
    return task.vocab.decode(decode(model, src, max_new_tokens, beam_size).tokens[0].tolist())


# run-folder plumbing -------------------------------------------------------------------------------------------


def resume_options(run_dir: str | os.PathLike, **changes: Any) -> Seq2SeqTrainOptions:
    """The options a run in `run_dir` started with, marked for resuming; only `steps` and `threads` may change
    (a None value keeps the saved one)."""
    config_path = Path(run_dir) / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"nothing to resume in {run_dir}: {CONFIG_FILE} is missing; start a new run "
                                f"with `vitlab train-seq2seq --out {run_dir}`")
    fixed = [key for key, value in changes.items() if value is not None and key not in RESUMABLE]
    if fixed:
        raise ValueError(f"a resumed run keeps its options; only {', '.join(RESUMABLE)} may change, not "
                         f"{', '.join(fixed)}")
    saved = json.loads(config_path.read_text())["options"]
    saved.update({key: value for key, value in changes.items() if value is not None})
    return Seq2SeqTrainOptions(**{**saved, "out": str(run_dir), "resume": True, "overwrite": False})


def _prepare_run_dir(options: Seq2SeqTrainOptions) -> tuple[Path, Seq2SeqTrainOptions]:
    if options.resume:
        if not options.out or not (Path(options.out) / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"nothing to resume in {options.out}: {CONFIG_FILE} is missing; start a new run")
        return Path(options.out), options
    run_dir = Path(options.out or f"runs/seq2seq-{options.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    if (run_dir / CONFIG_FILE).exists() and not options.overwrite:
        raise ValueError(f"{run_dir} already holds a run; pass --overwrite to start over or --resume to continue it")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir, dataclasses.replace(options, out=str(run_dir))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _keep_metrics_until(path: Path, step: int) -> None:
    """A run killed after writing metrics but before its checkpoint: drop the rows after the checkpoint."""
    rows = [row for row in read_jsonl(path) if row["step"] <= step] if path.exists() else []
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
