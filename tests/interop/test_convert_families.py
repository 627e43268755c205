"""`vitlab convert` on a checkpoint of every registered family: vitlab's own file of each (what a run writes), and
a bare state dict where the family has a converter that reads one. The converted file must hold the same tensors
and rebuild the same architecture; the command prints what the family says about itself."""

import pytest
import torch

from vitlab.cli.main import main
from vitlab.interop import load_model, save_weights
from vitlab.interop.converters import registered_converters
from vitlab.models import get_config
from vitlab.models.registry import list_families
from vitlab.models.seq2seq import Seq2SeqConfig

SMALL = {"vit": "vit_tiny_patch4_28", "deit": "deit_mini_distilled_patch7_28", "resnet": "resnet18_28",
         "detr": "detr_small", "deformable_detr": "deformable_detr_small", "setr": "setr_mla_small",
         "ipt": "ipt_small", "edsr": "edsr_baseline", "vqgan": "vqgan_small", "gpt_prior": "gpt_prior_small",
         "mae": "mae_small"}


def small_config(family: str, shallow: bool = True):
    if family == "seq2seq":  # no preset: its vocabulary comes from the problem it is trained on
        return Seq2SeqConfig(vocab_size=12, dim=32, depth=1, num_heads=2)
    return get_config(SMALL[family], **({"depth": 2} if shallow and family in ("vit", "deit", "mae") else {}))


def built(family: str, shallow: bool = True):
    torch.manual_seed(0)
    model = small_config(family, shallow).build()
    with torch.no_grad():  # nothing left at its initial value (zeros, ones) that a lost tensor could hide behind
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.normal_()
    return model


def same_tensors(a: torch.nn.Module, b: torch.nn.Module) -> None:
    ours, theirs = a.state_dict(), b.state_dict()
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=0, msg=key)


def test_every_registered_family_is_covered():
    assert {cls.family for cls in list_families()} == set(SMALL) | {"seq2seq"}


@pytest.mark.parametrize("family", sorted(set(SMALL) | {"seq2seq"}))
def test_convert_a_vitlab_file(family, tmp_path, capsys):
    model = built(family)
    save_weights(model, tmp_path / "run.safetensors")
    assert main(["convert", str(tmp_path / "run.safetensors"), str(tmp_path / "out.safetensors")]) == 0
    out = capsys.readouterr().out
    assert model.config.describe() in out and f"{sum(p.numel() for p in model.parameters()):,} parameters" in out
    converted = load_model(tmp_path / "out.safetensors")
    assert converted.config == model.config
    same_tensors(converted, model)


READ_BARE = sorted({c.family for c in registered_converters()} - {"deit"})


@pytest.mark.parametrize("family", READ_BARE)
def test_convert_a_bare_state_dict(family, tmp_path, capsys):
    """No config in the file: the family's converter works the architecture out from the tensors (a ViT's heads from
    the registered model of its size, hence the whole preset). A VQGAN's GroupNorm group count is not in its
    tensors (taming's are all 32; the small preset's are not): it is named."""
    model = built(family, shallow=False)
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    named = ["--model", SMALL[family]] if family == "vqgan" else []
    assert main(["convert", str(tmp_path / "weights.pth"), str(tmp_path / "out.safetensors"), *named]) == 0
    assert model.config.title in capsys.readouterr().out
    converted = load_model(tmp_path / "out.safetensors")
    same_tensors(converted, model)


def test_a_file_no_converter_reads_names_the_formats(tmp_path, capsys):
    torch.save({"some.weight": torch.zeros(2)}, tmp_path / "odd.pth")
    assert main(["convert", str(tmp_path / "odd.pth"), str(tmp_path / "out.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "some.weight" in err and "a timm ViT" in err and "DETR" in err and "VQGAN" in err
