"""Every registered model, in a tiny variant: forward, no NaN, gradients everywhere, save/load, determinism."""

import pytest
import torch

import vitlab
from vitlab.interop import load_model, save_weights
from vitlab.models import DistilledOutput


def tiny(name, seed=0):
    config = vitlab.get_config(name)
    torch.manual_seed(seed)
    if config.family == "resnet":  # a convnet has no depth knob to turn down: it is small at 28×28 already
        return vitlab.create_model(name, num_classes=5)
    # one block, a small image of a few patches: same code paths, a fraction of the cost
    patch = config.patch_size if isinstance(config.patch_size, int) else config.patch_size[0]
    return vitlab.create_model(name, depth=1, img_size=2 * patch, num_classes=5)


# the detectors, SETR, IPT, EDSR, VQGAN and the GPT prior have their own tests: test_detr.py,
# test_deformable_detr.py, test_setr.py, test_ipt.py, tests/tasks/test_restoration_task.py, test_vqgan.py,
# test_gpt_prior.py, and MAE test_mae.py
NOT_CLASSIFIERS = ("detr", "deformable_detr", "setr", "ipt", "edsr", "vqgan", "gpt_prior", "mae")
CLASSIFIERS = [name for name in vitlab.list_models() if vitlab.get_config(name).family not in NOT_CLASSIFIERS]


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_registered_model(name, tmp_path):
    model = tiny(name)
    config = model.config
    images = torch.randn(2, config.in_chans, config.img_size, config.img_size)
    outputs = model(images)
    # a distilled DeiT answers with both heads in training, as a DistilledOutput
    heads = (outputs.logits, outputs.dist_logits) if isinstance(outputs, DistilledOutput) else (outputs,)
    assert len(heads) == (2 if config.family == "deit" else 1)
    for logits in heads:
        assert logits.shape == (2, 5)
        assert torch.isfinite(logits).all()

    sum(logits.square().sum() for logits in heads).backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not no_grad, f"no gradient reaches {no_grad}"

    path = save_weights(model, tmp_path / "model.safetensors")
    reloaded = load_model(path).eval()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(images), model(images))
        # same seed, same model (fresh ones: the training-mode pass above moved BatchNorm statistics)
        torch.testing.assert_close(tiny(name).eval()(images), tiny(name).eval()(images), atol=0, rtol=0)
        assert not torch.equal(tiny(name, seed=1).eval()(images), tiny(name).eval()(images))
