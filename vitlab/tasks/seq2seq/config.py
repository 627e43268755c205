"""The options of the original Transformer on a toy sequence problem. The defaults train `reverse` to ≥ 99 %
held-out accuracy in ~2 min on 2 cores."""

from __future__ import annotations

from dataclasses import dataclass

from ...data.sequences import DEFAULT_LENGTHS, TASKS, TEST_SPLITS, SequenceTask
from ...engine.options import check, check_choices, option


@dataclass(frozen=True)
class Seq2SeqConfig:
    problem: str = option("reverse", "what to learn", choices=TASKS, group="data")
    num_symbols: int = option(10, "vocabulary: symbols 0 … N-1; for add, the base", group="data")
    min_len: int | None = option(None, "shortest source; for add, digits per operand", default_text="1", group="data")
    max_len: int | None = option(None, "longest source; for add, digits per operand", default_text="10; add: 5",
                                 group="data")
    test_split: str = option("unseen", "held-out sequences: 'unseen' (same lengths, never trained on) or 'longer' "
                             "(max-len+1 … max-len+4)", choices=TEST_SPLITS, group="data")
    test_size: int = option(500, "held-out pairs", group="data")
    dim: int = option(64, "d_model", group="model")
    depth: int = option(2, "encoder blocks, and as many decoder blocks", group="model")
    num_heads: int = option(4, "attention heads", group="model")
    mlp_ratio: float = option(4.0, "d_ff / d_model", group="model")
    dropout: float = option(0.0, "dropout (the problems draw fresh data every step: nothing to overfit)", group="model")
    norm: str = option("post", "post-norm as in the paper, or pre-norm", choices=("post", "pre"), group="model")
    pos_embed: str = option("sincos", "fixed sinusoidal encoding or a learned table", choices=("sincos", "learn"),
                            group="model")
    tie_embeddings: bool = option(True, "one shared table for source, target and output", flag="--untied",
                                  group="model")
    label_smoothing: float = option(0.1, "ε_ls of §5.4")

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("num_symbols", "test_size", "dim", "depth", "num_heads"):
            check(getattr(self, name) > 0, name, "positive", getattr(self, name))
        check(0.0 <= self.label_smoothing < 1.0, "label_smoothing", "in [0, 1)", self.label_smoothing)
        check(0.0 <= self.dropout < 1.0, "dropout", "in [0, 1)", self.dropout)
        check(self.dim % self.num_heads == 0 and self.dim % 2 == 0, "dim",
              f"even and divisible by num_heads={self.num_heads} (try {self.num_heads * 16})", self.dim)
        self.sequence_task()  # checks problem, lengths and symbols

    def sequence_task(self) -> SequenceTask:
        low, high = DEFAULT_LENGTHS[self.problem]
        return SequenceTask(self.problem, self.num_symbols, self.min_len or low, self.max_len or high)


@dataclass(frozen=True)
class Seq2SeqInferenceOptions:
    """`vitlab eval` and `vitlab predict` of a seq2seq run."""

    beam_size: int = option(1, "1: greedy; more: beam search")

    def __post_init__(self) -> None:
        check(self.beam_size >= 1, "beam_size", "at least 1", self.beam_size)
