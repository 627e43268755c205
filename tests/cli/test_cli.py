import subprocess
import sys

from vitlab.cli.main import main


def test_models_lists_names_and_counts(capsys):
    assert main(["models", "vit_base_patch16_*"]) == 0
    out = capsys.readouterr().out
    assert "vit_base_patch16_224" in out and "86,567,656" in out and "vit_base_patch16_384" in out


def test_models_lists_every_family(capsys):
    """Convnets and detectors have no patch size; a DETR's depth is encoder + decoder layers."""
    assert main(["models"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["resnet18_28"][2] == "—" and rows["detr_resnet50"][4] == "6+6"
    from tests.models.detr_reference import official_detr

    official = sum(p.numel() for p in official_detr().parameters())  # the paper's DETR-R50, 91 classes
    assert rows["detr_resnet50"][-1] == f"{official:,}"


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
