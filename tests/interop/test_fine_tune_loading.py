"""Loading a checkpoint into a model for fine-tuning: strict by default, with the warned exceptions fine-tuning
expects (another class count, another grid, other input channels), and `strict=False` loading what fits."""

import pytest
import torch
import torch.nn.functional as F

import vitlab
from vitlab.checkpoint import CheckpointMismatchError


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in after if before[k].shape != after[k].shape or not torch.equal(before[k], after[k])}


@pytest.mark.parametrize("name, overrides", [
    ("detr_small", {}),
    ("deformable_detr_small", {}),
    ("deformable_detr_small", {"with_box_refine": True, "two_stage": True}),
])
def test_a_detector_for_other_classes_keeps_all_but_its_class_heads(name, overrides):
    torch.manual_seed(0)
    release = vitlab.create_model(name, num_classes=91, **overrides)
    model = vitlab.create_model(name, num_classes=4, **overrides)
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(UserWarning, match="91 classes, the model 4"):
        vitlab.load_weights(model, release.state_dict())
    loaded, theirs = model.state_dict(), release.state_dict()
    heads = {k for k in loaded if k.startswith("class_embed.")}
    assert heads and changed(theirs, loaded) == heads  # backbone, transformer, queries, boxes: the release's
    assert not changed(fresh, {k: loaded[k] for k in heads})  # the class heads: the model's own fresh ones


def test_a_grey_model_from_an_rgb_checkpoint_sees_a_grey_image_as_the_rgb_model_does():
    torch.manual_seed(0)
    rgb = vitlab.create_model("vit_tiny_patch16_224", img_size=32).eval()
    grey = vitlab.create_model("vit_tiny_patch16_224", img_size=32, in_chans=1).eval()
    with pytest.warns(UserWarning, match="3 input channels, the model 1"):
        vitlab.load_weights(grey, rgb.state_dict())
    image = torch.rand(2, 1, 32, 32)
    torch.testing.assert_close(grey(image), rgb(image.expand(-1, 3, -1, -1)), atol=1e-5, rtol=1e-5)
    weight = rgb.state_dict()["patch_embed.proj.weight"]
    six = vitlab.create_model("vit_tiny_patch16_224", img_size=32, in_chans=6)
    with pytest.warns(UserWarning, match="3 input channels, the model 6"):
        vitlab.load_weights(six, rgb.state_dict())
    # repeated and scaled by 3/6: a grey image in six channels gives the same patch embedding as in three
    grey6, grey3 = image.expand(-1, 6, -1, -1), image.expand(-1, 3, -1, -1)
    torch.testing.assert_close(F.conv2d(grey6, six.patch_embed.proj.weight, stride=16),
                               F.conv2d(grey3, weight, stride=16), atol=1e-5, rtol=1e-5)


def test_strict_loading_refuses_what_does_not_fit_and_not_strict_loads_the_rest_with_a_warning():
    torch.manual_seed(0)
    source = vitlab.create_model("vit_tiny_patch4_28")
    state = dict(source.state_dict())
    state.pop("blocks.0.norm1.weight")
    state["extra.weight"] = torch.zeros(3)
    state["blocks.1.mlp.fc1.weight"] = torch.zeros(7, 7)
    model = vitlab.create_model("vit_tiny_patch4_28")
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointMismatchError, match="strict=False") as error:
        vitlab.load_weights(model, state)
    for key in ("blocks.0.norm1.weight", "extra.weight", "blocks.1.mlp.fc1.weight"):
        assert key in str(error.value)
    assert not changed(fresh, model.state_dict())  # refused whole: nothing half-loaded
    with pytest.warns(UserWarning, match="not strict: loaded"):
        vitlab.load_weights(model, state, strict=False)
    loaded = model.state_dict()
    kept_fresh = {"blocks.0.norm1.weight", "blocks.1.mlp.fc1.weight"}
    assert not changed(fresh, {k: loaded[k] for k in kept_fresh})
    assert not changed(source.state_dict(), {k: v for k, v in loaded.items() if k not in kept_fresh})
    with pytest.raises(CheckpointMismatchError, match="nothing that fits"):
        vitlab.load_weights(model, {"x": torch.zeros(1)}, strict=False)
