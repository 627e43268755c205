"""`vitlab train --task seq2seq` and `vitlab translate` through the CLI's main([...]): output format and user errors."""

import pytest

from vitlab.cli.main import main

TINY = ["--dim", "16", "--depth", "1", "--num-heads", "2", "--steps", "10", "--batch-size", "8",
        "--eval-every", "5", "--test-size", "10", "--max-len", "4"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("s2s") / "run"
    assert main(["train", "--task", "seq2seq", "--problem", "sort", "--out", str(out), *TINY]) == 0
    return out


def test_train_then_translate_prints_tokens_on_the_last_line(run_dir, capsys):
    capsys.readouterr()
    assert main(["translate", str(run_dir), "3 1 2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "" or all(token in "0123456789" and len(token) == 1 for token in last.split(" "))
    assert main(["train", "--resume", str(run_dir), "--steps", "15"]) == 0
    assert "after 15 steps" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["translate", "RUN", "3 12 4"], "'12' are not in this model's vocabulary (0 1 2 3 4 5 6 7 8 9)"),
    (["translate", "RUN", "   "], "the input is empty"),
    (["translate", "RUN", "3 1", "--beam-size", "0"], "--beam-size must be at least 1"),
    (["translate", "MISSING", "3 1"], "is not a finished seq2seq run"),
    (["train", "--task", "seq2seq", "--steps", "0"], "--steps must be positive"),
    (["train", "--problem", "sort"], "--problem is an option of --task seq2seq, not of --task classification"),
    (["train", "--task", "seq2seq", "--out", "RUN"], "already holds a run; continue it with --resume"),
    (["train", "--resume", "MISSING"], "nothing to resume"),
    (["train", "--task", "seq2seq", "--dim", "30", "--num-heads", "4", "--out", "NEW"],
     "--dim must be even and divisible by num_heads=4"),
])
def test_user_errors_give_one_line_and_rc_2(run_dir, tmp_path, capsys, argv, message):
    argv = [str(run_dir) if a == "RUN" else str(tmp_path / "missing") if a == "MISSING"
            else str(tmp_path / "new") if a == "NEW" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_unknown_task_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", "seq2seq", "--problem", "rotate"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'rotate'" in capsys.readouterr().err
