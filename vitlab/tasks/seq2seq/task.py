"""The original Transformer (Vaswani et al. 2017) on the loop, learning a toy sequence problem (reverse, copy,
sort, add) from batches drawn fresh at every step, and judged by exact-sequence accuracy on held-out sequences.

Glossary: B batch, S source tokens, T target tokens, V vocabulary size.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ...data.sequences import BOS, EOS, PAD, SequenceTask, collate, make_test_set, sample_batch
from ...engine.loop import TaskData
from ...engine.rng import as_tuple
from ...models.decoding import beam_search, greedy_decode
from ...models.seq2seq import Seq2SeqConfig as ModelConfig
from ...models.seq2seq import Seq2SeqTransformer
from ..base import Task, register_task
from .config import Seq2SeqConfig, Seq2SeqInferenceOptions

Pairs = list[tuple[list[int], list[int]]]


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int) -> torch.Tensor:
    """Cross-entropy against q = (1 - ε)·onehot(y) + ε/V (§5.4, Szegedy et al. 2016), averaged over non-pad tokens.

    logits: (B, T, V), target: (B, T) with `pad_id` where there is no token. Per token this is
    -(1 - ε)·log p(y) - ε/V · Σ_v log p(v), the definition `F.cross_entropy(label_smoothing=ε)` uses.
    """
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=pad_id, label_smoothing=smoothing)


class SequenceStream:
    """Endless training batches (src (B, S), tgt_in (B, T), tgt_out (B, T)) drawn from a seeded stream that never
    yields a held-out source; its state is saved with each checkpoint, so a resumed run draws what it would have."""

    def __init__(self, problem: SequenceTask, batch_size: int, seed: str, held_out: set[tuple[int, ...]]) -> None:
        self.problem, self.batch_size, self.held_out = problem, batch_size, held_out
        self.rng = random.Random(seed)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        while True:
            yield collate(sample_batch(self.problem, self.batch_size, self.rng, self.held_out))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(as_tuple(state["rng"]))


@register_task
class Seq2SeqTask(Task):
    name: ClassVar[str] = "seq2seq"
    order: ClassVar[int] = 20
    commands: ClassVar[tuple[str, ...]] = ("translate",)
    EvalOptions: ClassVar[type] = Seq2SeqInferenceOptions
    PredictOptions: ClassVar[type] = Seq2SeqInferenceOptions
    python_loop: ClassVar[str] = "a seq2seq run decodes in a Python loop: it runs on --runtime torch in fp32 only"
    Config: ClassVar[type] = Seq2SeqConfig
    best: ClassVar[tuple[str, str]] = ("val_exact_acc", "max")
    sample_name: ClassVar[str] = "sequences"

    @classmethod
    def loop_defaults(cls, config: Seq2SeqConfig) -> dict[str, Any]:
        # measured: reverse holds 98–99 % from step 1,500 to 2,250 and reaches 99.8 % at 4,000. One thread: at this
        # size a step is hundreds of tiny kernels, where a second thread only adds synchronisation
        return {"steps": 4000, "batch_size": 64, "schedule": "inverse_sqrt", "lr": 2e-3, "warmup_steps": 200,
                "weight_decay": 0.0, "betas": (0.9, 0.98), "adam_eps": 1e-9, "min_lr_ratio": 0.0,
                "clip_grad": 1.0, "eval_every": 250, "threads": 1}

    @property
    def problem(self) -> SequenceTask:
        return self.config.sequence_task()

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        c, seed = self.config, self.loop.seed
        self.val_pairs, self.test_pairs = held_out_pairs(self.problem, c.test_size, c.test_split, seed)
        held_out = {tuple(src) for src, _ in self.val_pairs + self.test_pairs}
        rank = self.dist.rank
        stream = SequenceStream(self.problem, self.loop.batch_size, f"train-{seed}" + (f"-{rank}" if rank else ""),
                                held_out)
        return TaskData(train=stream, val=self.val_pairs, test=self.test_pairs)

    def build_model(self) -> Seq2SeqTransformer:
        c, problem = self.config, self.problem
        longest = problem.max_source_len + (4 if c.test_split == "longer" else 0)  # + the "longer" test lengths
        model = ModelConfig(
            vocab_size=problem.vocab.size, dim=c.dim, depth=c.depth, num_heads=c.num_heads, mlp_ratio=c.mlp_ratio,
            dropout=c.dropout, norm=c.norm, pos_embed=c.pos_embed, max_len=2 * longest + 8,
            tie_embeddings=c.tie_embeddings, pad_id=PAD,
        ).build()
        model.model_name = f"seq2seq_{problem.name}"
        return model

    def run_info(self) -> dict[str, Any]:
        import dataclasses

        return {"problem": dataclasses.asdict(self.problem), "vocab": list(self.problem.vocab.symbols)}

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        src, tgt_in, tgt_out = batch
        return {"loss": label_smoothed_loss(model(src, tgt_in), tgt_out, self.config.label_smoothing, PAD)}

    def evaluate(self, model: nn.Module, data: Pairs) -> dict[str, Any]:
        matches = exact_matches(model, data)
        return {"exact_acc": sum(matches) / len(matches), "exact_acc_by_len": accuracy_by_length(data, matches)}

    # -- a finished run: `vitlab eval` and `vitlab predict` ----------------------------------------------------
    def evaluate_run(self, model: nn.Module, saved: dict[str, Any], run_dir, beam_size: int = 1, split: str = "test",
                     **_: Any) -> dict[str, Any]:
        c = self.config
        val, test = held_out_pairs(self.problem, c.test_size, c.test_split, self.loop.seed)
        pairs = test if split == "test" else val
        matches = exact_matches(model, pairs, beam_size=beam_size)
        return {"exact_acc": sum(matches) / len(matches), "exact_acc_by_len": accuracy_by_length(pairs, matches),
                "split": split, "num_sequences": len(pairs), "run_dir": str(run_dir)}

    def format_evaluation(self, result: dict[str, Any], which: str) -> str:
        by_length = ", ".join(f"{n}: {acc:.3f}" for n, acc in result["exact_acc_by_len"].items())
        return (f"exact-sequence accuracy: {result['exact_acc']:.4f} on {result['num_sequences']} {result['split']} "
                f"sequences ({result['run_dir']}, {which})\nby source length: {by_length}")

    def predict(self, model: nn.Module, saved: dict[str, Any], inputs: list[str], beam_size: int = 1,
                **_: Any) -> list[dict[str, Any]]:
        return [{"input": text, "output": " ".join(translate(model, self.problem, text, beam_size=beam_size))}
                for text in inputs]

    def format_prediction(self, item: dict[str, Any]) -> str:
        return f"{item['input']} -> {item['output']}"


def held_out_pairs(problem: SequenceTask, size: int, split: str, seed: int) -> tuple[Pairs, Pairs]:
    """(validation, test) pairs, `size` each, with no source in common; training never draws either's sources.
    The test pairs are the draw they always were; the validation pairs a second draw beside them."""
    test = make_test_set(problem, size, split, seed)
    val = make_test_set(problem, size, split, seed, part="val", exclude={tuple(src) for src, _ in test})
    return val, test


@torch.no_grad()
def exact_matches(model: Seq2SeqTransformer, pairs: Pairs, batch_size: int = 500, beam_size: int = 1) -> list[bool]:
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


def exact_accuracy(model: Seq2SeqTransformer, pairs: Pairs, batch_size: int = 500, beam_size: int = 1) -> float:
    """Share of pairs whose decoded output (up to and including <eos>) equals the target exactly."""
    matches = exact_matches(model, pairs, batch_size, beam_size)
    return sum(matches) / len(matches)


def accuracy_by_length(pairs: Pairs, matches: list[bool]) -> dict[str, float]:
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


def load_seq2seq_run(run_dir: str | Path, which: str | None = None) -> tuple[Seq2SeqTransformer, SequenceTask]:
    """The trained model (in eval mode) and its problem, from a folder written by `vitlab train --task seq2seq`;
    `which` weights (None: the ones the run selected, RunDir.selected_weights)."""
    from ...engine.run import RunDir

    run = RunDir(run_dir)
    which = run.selected_weights(which)
    if not run.file("config.json").is_file() or not run.weights_file(which).is_file():
        raise FileNotFoundError(f"{run_dir} is not a finished seq2seq run: expected config.json and "
                                f"{which}.safetensors in it; train one with `vitlab train --task seq2seq --out "
                                f"{run_dir}`")
    from ..launch import run_config

    saved = run_config(run)
    if saved.get("task") != "seq2seq" or "problem" not in saved:
        raise ValueError(f"{run.file('config.json')} was not written by `vitlab train --task seq2seq`; pass a "
                         f"seq2seq run folder")
    return run.load_model(which), SequenceTask(**saved["problem"])


def translate(model: Seq2SeqTransformer, problem: SequenceTask, text: str, beam_size: int = 1,
              max_new_tokens: int | None = None) -> list[str]:
    """Decode one input given as space-separated tokens ("3 1 4 1 5") -> the output tokens."""
    tokens = text.split()
    if not tokens:
        raise ValueError(f"the input is empty; give tokens from the vocabulary ({' '.join(problem.vocab.symbols)}) "
                         f"separated by spaces, e.g. \"3 1 4 1 5\"")
    src = torch.tensor([problem.vocab.encode(tokens)])  # (1, S)
    max_new_tokens = max_new_tokens or min(model.config.max_len - 1, 2 * len(tokens) + 4)
    return problem.vocab.decode(decode(model, src, max_new_tokens, beam_size).tokens[0].tolist())
