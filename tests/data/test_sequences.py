"""Toy sequence tasks: targets checked with plain Python (reversal, sorting, integer addition)."""

import random

import pytest

from vitlab.data.sequences import BOS, EOS, PAD, TASKS, SequenceTask, collate, make_test_set, sample_batch


def as_text(task, ids):
    return task.vocab.decode([*ids, EOS])


@pytest.mark.parametrize("name", ["reverse", "copy", "sort"])
def test_list_tasks(name):
    task = SequenceTask(name, num_symbols=7, min_len=2, max_len=6)
    rng = random.Random(0)
    for _ in range(50):
        src, tgt = task.sample(rng)
        source = [int(t) for t in as_text(task, src)]
        assert 2 <= len(source) <= 6 and all(0 <= s < 7 for s in source)
        expected = {"reverse": source[::-1], "copy": source, "sort": sorted(source)}[name]
        assert [int(t) for t in as_text(task, tgt)] == expected


def test_add_is_integer_addition():
    task = SequenceTask("add", min_len=1, max_len=4)
    rng = random.Random(0)
    for _ in range(100):
        src, tgt = task.sample(rng)
        a, b = "".join(as_text(task, src)).split("+")
        assert 1 <= len(a) <= 4 and (len(a) == 1 or a[0] != "0")
        assert int("".join(as_text(task, tgt))) == int(a) + int(b)
    assert task.solve(["9", "9", "+", "1"]) == ["1", "0", "0"]


def test_held_out_splits():
    task = SequenceTask("reverse", min_len=3, max_len=6)
    unseen = make_test_set(task, 200, "unseen", seed=0)
    held_out = {tuple(src) for src, _ in unseen}
    assert len(held_out) == 200  # distinct
    batch = sample_batch(task, 2000, random.Random(1), held_out)
    assert not {tuple(src) for src, _ in batch} & held_out
    longer = make_test_set(task, 50, "longer", seed=0, longer_by=2)
    assert {len(src) for src, _ in longer} <= {7, 8}
    with pytest.raises(ValueError, match="unseen, longer"):
        make_test_set(task, 5, "shorter", seed=0)


@pytest.mark.parametrize("name", TASKS)
def test_unseen_split_leaves_every_length_mostly_to_training(name):
    # The sources of each length, found by drawing as training draws until no new one appears, not from a formula.
    task = SequenceTask(name, num_symbols=3, min_len=1, max_len=4 if name != "add" else 2)
    rng = random.Random(0)
    sources: dict[int, set] = {}
    for _ in range(50_000):
        source = tuple(task.sample(rng)[0])
        sources.setdefault(len(source), set()).add(source)
    for length, all_of_length in sources.items():
        assert task.num_sources(length) == len(all_of_length), length

    unseen = make_test_set(task, 200, "unseen", seed=0)
    held_out = {tuple(src) for src, _ in unseen}
    for length, all_of_length in sources.items():
        assert len(all_of_length & held_out) <= 0.1 * len(all_of_length), length
    # every length with room to hold one out is tested (for add: unequal operands too, as training draws them)
    assert {len(src) for src in held_out} == {n for n, all_of_length in sources.items() if len(all_of_length) >= 10}
    # so training draws every length, the shortest included (it used to hold out all 10 one-symbol copies)
    trained = {tuple(src) for src, _ in sample_batch(task, 5000, random.Random(1), held_out)}
    for length, all_of_length in sources.items():
        assert all_of_length & trained, length


def test_unseen_split_of_a_tiny_task_is_refused():
    with pytest.raises(ValueError, match="too few sources"):
        make_test_set(SequenceTask("copy", num_symbols=2, max_len=3), 10, "unseen", seed=0)
    assert make_test_set(SequenceTask("copy", num_symbols=2, max_len=3), 10, "longer", seed=0)


def test_collate_pads_and_shifts_the_target():
    src, tgt_in, tgt_out = collate([([5, 6, 7], [7, 6, 5]), ([8], [8])])
    assert src.tolist() == [[5, 6, 7], [8, PAD, PAD]]
    assert tgt_in.tolist() == [[BOS, 7, 6, 5], [BOS, 8, PAD, PAD]]
    assert tgt_out.tolist() == [[7, 6, 5, EOS], [8, EOS, PAD, PAD]]


def test_bad_tokens_and_options_explain_themselves():
    task = SequenceTask("reverse")
    with pytest.raises(ValueError, match=r"'12'.*not in this model's vocabulary \(0 1 2 3 4 5 6 7 8 9\)"):
        task.vocab.encode(["3", "12"])
    with pytest.raises(ValueError, match="unknown task"):
        SequenceTask("rotate")
    with pytest.raises(ValueError, match="min_len"):
        SequenceTask("copy", min_len=5, max_len=2)
