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


# ---- the head by names: a checkpoint that names its classes, into a model that names its own --------------------
NAMES = ("cat", "dog", "bird", "fish", "frog")


def named_vit(path, labels=NAMES):
    """A ViT trained on `labels` (random weights), saved with them: what a run or a converted release writes."""
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=len(labels),
                                labels=labels).eval()
    vitlab.save_weights(model, path)
    return model


def loaded_into(labels, path, **kwargs):
    torch.manual_seed(1)
    model = vitlab.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=len(labels),
                                labels=tuple(labels), **kwargs).eval()
    fresh = model.head.weight.detach().clone()
    return vitlab.load_weights(model, path), fresh


@pytest.mark.parametrize("labels, says", [
    (("frog", "cat", "fish", "dog", "bird"), "another order: its classifier rows are reordered"),
    (("dog", "fish"), "2 of the checkpoint's 5: their rows are kept"),
])
def test_the_same_classes_in_another_order_or_a_subset_keep_their_rows(tmp_path, labels, says):
    """The model's logit for a class is the checkpoint's logit for the class of that name, whatever its index."""
    original = named_vit(tmp_path / "named.safetensors")
    with pytest.warns(UserWarning, match=says):
        model, _ = loaded_into(labels, tmp_path / "named.safetensors")
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        theirs, mine = original(images), model(images)
    torch.testing.assert_close(mine, theirs[:, [NAMES.index(name) for name in labels]])


def test_other_classes_of_the_same_count_start_fresh_and_the_warning_names_them(tmp_path):
    named_vit(tmp_path / "named.safetensors")
    other = ("car", "bus", "tram", "bike", "boat")
    with pytest.warns(UserWarning, match=r"none of the model's classes \(car, bus, tram, bike, boat\)"):
        model, fresh = loaded_into(other, tmp_path / "named.safetensors")
    torch.testing.assert_close(model.head.weight, fresh)  # not the checkpoint's rows under other names


def test_new_classes_beside_known_ones_start_fresh_and_known_ones_keep_their_rows(tmp_path):
    original = named_vit(tmp_path / "named.safetensors")
    with pytest.warns(UserWarning, match="1 are new to it and start fresh: zebra"):
        model, fresh = loaded_into(("bird", "zebra", "cat"), tmp_path / "named.safetensors")
    torch.testing.assert_close(model.head.weight[[0, 2]], original.head.weight[[2, 0]])
    torch.testing.assert_close(model.head.weight[1], fresh[1])


def test_unnamed_classes_fall_back_to_the_count(tmp_path):
    """Without names on one side, a head of the same size is loaded as it is (nothing says it is wrong) and one of
    another size starts fresh (the fine-tuning case)."""
    torch.manual_seed(0)
    original = vitlab.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=5).eval()
    vitlab.save_weights(original, tmp_path / "unnamed.safetensors")
    model, _ = loaded_into(("a", "b", "c", "d", "e"), tmp_path / "unnamed.safetensors")
    torch.testing.assert_close(model.head.weight, original.head.weight)
    with pytest.warns(UserWarning, match="5 classes, the model 2"):
        loaded_into(("a", "b"), tmp_path / "unnamed.safetensors")


@pytest.mark.parametrize("name", ["detr_small", "deformable_detr_small"])
def test_a_detector_keeps_the_rows_of_the_classes_it_keeps_and_its_no_object_row(tmp_path, name):
    torch.manual_seed(0)
    coco_like = ("person", "bicycle", "car", "dog", "cat")
    release = vitlab.create_model(name, num_classes=5, labels=coco_like).eval()
    vitlab.save_weights(release, tmp_path / "release.safetensors")
    model = vitlab.create_model(name, num_classes=2, labels=("cat", "person")).eval()
    with pytest.warns(UserWarning, match="2 of the checkpoint's 5"):
        vitlab.load_weights(model, tmp_path / "release.safetensors")
    images = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        theirs, mine = release(images).logits, model(images).logits
    columns = [4, 0, *range(5, theirs.shape[-1])]  # cat, person, then DETR's "no object"
    torch.testing.assert_close(mine, theirs[..., columns])


def test_a_model_built_without_names_takes_the_checkpoints_where_its_head_fits(tmp_path):
    named_vit(tmp_path / "named.safetensors")
    same = vitlab.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=5)
    assert vitlab.load_weights(same, tmp_path / "named.safetensors").config.labels == NAMES
    other = vitlab.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=3)
    with pytest.warns(UserWarning, match="5 classes, the model 3"):
        assert vitlab.load_weights(other, tmp_path / "named.safetensors").config.labels == ()
