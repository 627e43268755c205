import pytest
import torch

import vitlab
from vitlab.interop import CheckpointMismatchError, load_model, load_weights, read_state_dict, save_weights
from vitlab.models.family import Model


def test_safetensors_round_trip_keeps_config_and_weights(tmp_path):
    model = vitlab.create_model("vit_tiny_patch4_28", depth=2, img_size=(28, 36), global_pool="avg").eval()
    path = save_weights(model, tmp_path / "sub" / "m.safetensors")
    assert not [p for p in path.parent.iterdir() if p.name != "m.safetensors"]  # no temporary file left
    again = load_model(path).eval()
    assert again.config == model.config and again.model_name == "vit_tiny_patch4_28"
    images = torch.randn(2, 1, 28, 36)
    torch.testing.assert_close(again(images), model(images))


def test_torch_checkpoint_with_model_wrapper(tmp_path):
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    torch.save({"model": model.state_dict(), "epoch": 3}, tmp_path / "ckpt.pth")
    other = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    load_weights(other, tmp_path / "ckpt.pth")
    torch.testing.assert_close(other.state_dict(), model.state_dict())


def test_training_options_saved_beside_the_model_are_read_as_the_detr_family_saves_them(tmp_path):
    """DETR's and Deformable DETR's main.py save {"model", "optimizer", "lr_scheduler", "epoch", "args"}, args an
    argparse.Namespace; a Namespace holding an arbitrary object is still refused."""
    import argparse

    model = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    torch.save({"model": model.state_dict(), "epoch": 49, "args": argparse.Namespace(lr=2e-4, backbone="resnet50",
                                                                                    lr_drop=[40])},
               tmp_path / "checkpoint.pth")
    state, _ = read_state_dict(tmp_path / "checkpoint.pth")
    torch.testing.assert_close(state, model.state_dict())
    torch.save({"model": model.state_dict(), "args": argparse.Namespace(layer=torch.nn.Linear(2, 2))},
               tmp_path / "unsafe.pth")
    with pytest.raises(ValueError, match="never unpickles arbitrary objects"):
        read_state_dict(tmp_path / "unsafe.pth")


def test_pickled_objects_are_refused(tmp_path):
    torch.save({"model": torch.nn.Linear(2, 2)}, tmp_path / "obj.pth")  # a module, not tensors
    with pytest.raises(ValueError, match="never unpickles arbitrary objects"):
        read_state_dict(tmp_path / "obj.pth")


def test_new_head_for_other_class_count_with_warning():
    source = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=10)
    target = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=3)
    head_before = target.head.weight.clone()
    with pytest.warns(UserWarning, match="head has 10 classes, the model 3"):
        load_weights(target, source.state_dict())
    torch.testing.assert_close(target.head.weight, head_before)
    torch.testing.assert_close(target.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)


def test_mismatch_lists_missing_unexpected_and_misshaped():
    source = vitlab.create_model("vit_tiny_patch4_28", depth=2)
    target = vitlab.create_model("vit_tiny_patch4_28", depth=3, dim=96)
    with pytest.raises(CheckpointMismatchError) as info:
        load_weights(target, source.state_dict())
    message = str(info.value)
    assert "missing from the checkpoint" in message and "blocks.2.attn.qkv.weight" in message
    assert "mis-shaped" in message and "blocks.0.attn.qkv.weight: checkpoint (576, 192) vs model (288, 96)" in message
    with pytest.raises(CheckpointMismatchError, match="unexpected in the checkpoint"):
        load_weights(vitlab.create_model("vit_tiny_patch4_28", depth=1), source.state_dict())


def test_create_model_with_weights_file(tmp_path):
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    path = save_weights(model, tmp_path / "m.safetensors")
    again = vitlab.create_model("vit_tiny_patch4_28", depth=1, weights=str(path))
    torch.testing.assert_close(again.state_dict(), model.state_dict())


def test_a_model_without_the_adaptation_hook_gets_the_checkpoint_as_it_is(recwarn):
    source = vitlab.create_model("resnet18_28", num_classes=10)
    target = vitlab.create_model("resnet18_28", num_classes=3)
    assert type(target).adapt_checkpoint is Model.adapt_checkpoint  # Model's default: the state as it is
    with pytest.raises(CheckpointMismatchError, match=r"net\.fc\.weight: checkpoint \(10, 512\) vs model \(3, 512\)"):
        load_weights(target, source.state_dict())
    assert not [w for w in recwarn if "head" in str(w.message)]  # no head swap: interop knows no model's keys


def test_models_create_model_builds_without_weights_and_says_where_loading_lives(tmp_path):
    path = save_weights(vitlab.create_model("vit_tiny_patch4_28", depth=1), tmp_path / "m.safetensors")
    with pytest.raises(TypeError, match=r"vitlab\.create_model\(name, weights=path\)"):
        vitlab.models.create_model("vit_tiny_patch4_28", depth=1, weights=str(path))
