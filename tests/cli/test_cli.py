import subprocess
import sys

from vitlab.cli.main import main


def test_models_lists_names_and_counts(capsys):
    assert main(["models", "vit_base_patch16_*"]) == 0
    out = capsys.readouterr().out
    assert "vit_base_patch16_224" in out and "86,567,656" in out and "vit_base_patch16_384" in out


def test_demo_prints_every_shape(capsys):
    assert main(["demo", "--model", "vit_tiny_patch4_28"]) == 0
    out = capsys.readouterr().out
    assert "(1, 49, 16)" in out and "(1, 50, 192)" in out and "(1, 10)" in out


def test_unknown_model_is_a_clear_error(capsys):
    assert main(["demo", "--model", "vit_tiny_patch4"]) == 2
    assert "did you mean vit_tiny_patch4_28" in capsys.readouterr().err


def test_console_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "vitlab", "models", "vit_tiny_*"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "vit_tiny_patch16_224" in result.stdout
