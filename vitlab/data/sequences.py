"""Toy sequence-to-sequence tasks for the original Transformer: reverse, copy, sort and add.

Each example is a source and a target sequence of symbols. Symbols are the digits 0 … num_symbols-1 (and "+" for
`add`); as token ids they follow three special tokens:

    0 <pad>   1 <bos>   2 <eos>   3 "0"   4 "1"   …   (3 + num_symbols) "+" (add only)

The decoder reads `<bos> y1 … yT` and is trained to predict `y1 … yT <eos>` (teacher forcing).

Held-out test split: "unseen" draws test sequences from the training distribution and never trains on them;
"longer" tests on sources longer than any seen in training (length generalisation). "unseen" takes at most
`MAX_HELD_OUT_SHARE` of the sources of any one length, so every length keeps most of its sources for training
(with 10 symbols there are only 10 sources of length 1; holding all of them out would test a length that training
never saw, not unseen sources of a seen length).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
TASKS = ("reverse", "copy", "sort", "add")
TEST_SPLITS = ("unseen", "longer")
# source lengths (for add: digits per operand) when the user gives none
DEFAULT_LENGTHS = {"reverse": (1, 10), "copy": (1, 10), "sort": (1, 10), "add": (1, 5)}
# the most of one source length's sources that the "unseen" split may hold out of training
MAX_HELD_OUT_SHARE = 0.1


@dataclass(frozen=True)
class Vocab:
    """Token strings <-> ids; `symbols` are the task's own tokens, after the three specials."""

    symbols: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(SPECIALS) + len(self.symbols)

    def encode(self, tokens: list[str]) -> list[int]:
        """Token strings -> ids; an unknown token raises a ValueError that lists the vocabulary."""
        index = {symbol: i + len(SPECIALS) for i, symbol in enumerate(self.symbols)}
        unknown = [token for token in tokens if token not in index]
        if unknown:
            raise ValueError(
                f"token(s) {', '.join(repr(t) for t in unknown)} are not in this model's vocabulary "
                f"({' '.join(self.symbols)}); write the input as those tokens separated by spaces"
            )
        return [index[token] for token in tokens]

    def decode(self, ids: list[int]) -> list[str]:
        """Ids -> token strings, stopping at <eos>; <pad> and <bos> are left out."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(self.symbols[i - len(SPECIALS)])
        return out


@dataclass(frozen=True)
class SequenceTask:
    """A task and the distribution it draws from: source lengths in [min_len, max_len], symbols 0 … num_symbols-1.

    For `add` the lengths are the digit counts of each operand, the symbols are the digits of base
    `num_symbols`, the source is `a + b` and the target the digits of the sum, most significant first.
    """

    name: str = "reverse"
    num_symbols: int = 10
    min_len: int = 1
    max_len: int = 10

    def __post_init__(self) -> None:
        if self.name not in TASKS:
            raise ValueError(f"unknown task {self.name!r}; choose one of {', '.join(TASKS)}")
        if not 2 <= self.num_symbols <= 1000:
            raise ValueError(f"num_symbols must be between 2 and 1000, got {self.num_symbols}")
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"lengths must satisfy 1 <= min_len <= max_len, got min_len={self.min_len}, "
                             f"max_len={self.max_len}")

    @property
    def vocab(self) -> Vocab:
        symbols = tuple(str(d) for d in range(self.num_symbols))
        return Vocab((*symbols, "+") if self.name == "add" else symbols)

    @property
    def max_source_len(self) -> int:
        return 2 * self.max_len + 1 if self.name == "add" else self.max_len

    def sample(self, rng: random.Random, length: int | None = None) -> tuple[list[int], list[int]]:
        """One (source ids, target ids) pair, without specials; `length` overrides the drawn length."""
        n = self.num_symbols
        if self.name == "add":
            a, b = (self._number(rng, length or rng.randint(self.min_len, self.max_len)) for _ in range(2))
            source = [*self._digits(a), n, *self._digits(b)]  # symbol n is "+"
            target = self._digits(a + b)
        else:
            length = length or rng.randint(self.min_len, self.max_len)
            source = [rng.randrange(n) for _ in range(length)]
            target = {"reverse": source[::-1], "copy": list(source), "sort": sorted(source)}[self.name]
        offset = len(SPECIALS)
        return [s + offset for s in source], [t + offset for t in target]

    def solve(self, source_tokens: list[str]) -> list[str]:
        """The right answer for a source given as token strings (for checks and tests)."""
        ids = [i - len(SPECIALS) for i in self.vocab.encode(source_tokens)]
        if self.name == "add":
            plus = ids.index(self.num_symbols)
            a, b = self._value(ids[:plus]), self._value(ids[plus + 1:])
            return self.vocab.decode([d + len(SPECIALS) for d in self._digits(a + b)])
        target = {"reverse": ids[::-1], "copy": ids, "sort": sorted(ids)}[self.name]
        return self.vocab.decode([t + len(SPECIALS) for t in target])

    def num_sources(self, source_length: int) -> int:
        """How many distinct sources of `source_length` tokens `sample(rng)` can draw (for add: operands of any
        digit counts in [min_len, max_len] on either side of the "+")."""
        if self.name != "add":
            return self.num_symbols ** source_length if self.min_len <= source_length <= self.max_len else 0
        operand_digits = range(self.min_len, self.max_len + 1)
        return sum(self._count_numbers(a) * self._count_numbers(source_length - 1 - a)
                   for a in operand_digits if source_length - 1 - a in operand_digits)

    def _count_numbers(self, digits: int) -> int:
        """Numbers with exactly `digits` digits (no leading zero; 0 is the one-digit zero)."""
        return self.num_symbols ** digits - (self.num_symbols ** (digits - 1) if digits > 1 else 0)

    def _number(self, rng: random.Random, digits: int) -> int:
        low = self.num_symbols ** (digits - 1) if digits > 1 else 0
        return rng.randrange(low, self.num_symbols ** digits)

    def _digits(self, value: int) -> list[int]:
        digits = []
        while True:
            value, digit = divmod(value, self.num_symbols)
            digits.append(digit)
            if value == 0:
                return digits[::-1]

    def _value(self, digits: list[int]) -> int:
        value = 0
        for d in digits:
            value = value * self.num_symbols + d
        return value


def held_out_quota(task: SequenceTask, source_length: int) -> int:
    """How many sources of this length the "unseen" split may take: `MAX_HELD_OUT_SHARE` of them, rounded down."""
    return int(MAX_HELD_OUT_SHARE * task.num_sources(source_length) + 1e-9)  # 1e-9: 0.1 * 30 must give 3, not 2


def make_test_set(task: SequenceTask, size: int, split: str, seed: int,
                  longer_by: int = 4, part: str = "test",
                  exclude: set[tuple[int, ...]] | None = None) -> list[tuple[list[int], list[int]]]:
    """Up to `size` distinct held-out pairs; `part` names the draw ("test", or "val" for the validation pairs,
    another draw whose sources are none of `exclude`'s).

    "unseen": drawn as training draws (training skips these sources), but at most `MAX_HELD_OUT_SHARE` of the
    sources of any one source length, so short lengths are tested less often than they are trained on.
    "longer": lengths max_len+1 … max_len+longer_by (for add: both operands that many digits), which training
    never draws.
    """
    if split not in TEST_SPLITS:
        raise ValueError(f"unknown test split {split!r}; choose one of {', '.join(TEST_SPLITS)}")
    rng = random.Random(f"{part}-{seed}")
    taken: dict[int, int] = {}
    pairs, seen = [], set(exclude or ())
    for _ in range(50 * size):  # distinct sources; small spaces (short lengths) simply run out of new ones
        if split == "unseen":
            pair = task.sample(rng)
            length = len(pair[0])
            if taken.get(length, 0) >= held_out_quota(task, length):
                continue
        else:
            pair = task.sample(rng, rng.randint(task.max_len + 1, task.max_len + longer_by))
            length = len(pair[0])
        if tuple(pair[0]) not in seen:
            seen.add(tuple(pair[0]))
            taken[length] = taken.get(length, 0) + 1
            pairs.append(pair)
            if len(pairs) == size:
                break
    if size > 0 and not pairs:
        raise ValueError(
            f"the {task.name} task with {task.num_symbols} symbols and lengths {task.min_len}–{task.max_len} has too "
            f"few sources to hold any out of training (at most {MAX_HELD_OUT_SHARE:.0%} of each length's); use more "
            f"symbols or longer sequences, or the 'longer' test split"
        )
    return pairs


def sample_batch(task: SequenceTask, batch_size: int, rng: random.Random,
                 exclude: set[tuple[int, ...]]) -> list[tuple[list[int], list[int]]]:
    """A training batch of fresh pairs whose sources are not in `exclude` (the held-out sources)."""
    pairs = []
    while len(pairs) < batch_size:
        pair = task.sample(rng)
        if tuple(pair[0]) not in exclude:
            pairs.append(pair)
    return pairs


def collate(pairs: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad a list of pairs into tensors: src (B, S), decoder input `<bos> y` (B, T), labels `y <eos>` (B, T)."""
    B = len(pairs)
    S = max(len(src) for src, _ in pairs)
    T = max(len(tgt) for _, tgt in pairs) + 1
    src = torch.full((B, S), PAD, dtype=torch.long)
    tgt_in = torch.full((B, T), PAD, dtype=torch.long)
    tgt_out = torch.full((B, T), PAD, dtype=torch.long)
    for b, (source, target) in enumerate(pairs):
        src[b, : len(source)] = torch.tensor(source)
        tgt_in[b, : len(target) + 1] = torch.tensor([BOS, *target])
        tgt_out[b, : len(target) + 1] = torch.tensor([*target, EOS])
    return src, tgt_in, tgt_out
