"""The hooks through which a model names its own parameter groups and adapts checkpoints (as timm's
`no_weight_decay()` / `group_matcher()`): engine/optim and the checkpoint loader call them and know no key names."""

import pytest
import torch

import vitlab
from vitlab.layers import resample_pos_embed


def test_vit_names_its_embeddings_and_layer_ids():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=3)
    params = dict(model.named_parameters())
    assert model.no_weight_decay() == {"pos_embed", "cls_token"} and model.no_weight_decay() <= set(params)
    assert model.num_layer_groups == 3 + 2
    ids = {name: model.layer_id(name) for name in params}
    assert {n for n, i in ids.items() if i == 0} == {"cls_token", "pos_embed", "patch_embed.proj.weight",
                                                     "patch_embed.proj.bias"}
    for i in range(3):
        assert {n for n, k in ids.items() if k == i + 1} == {n for n in params if n.startswith(f"blocks.{i}.")}
    assert {n for n, i in ids.items() if i == 4} == {"norm.weight", "norm.bias", "head.weight", "head.bias"}


def test_deit_adds_its_distillation_token_and_second_head():
    model = vitlab.create_model("deit_mini_distilled_patch7_28", depth=2)
    assert model.no_weight_decay() == {"pos_embed", "cls_token", "dist_token"}
    assert model.layer_id("dist_token") == 0 and model.layer_id("head_dist.weight") == model.num_layer_groups - 1
    assert model.layer_id("blocks.1.mlp.fc1.weight") == 2


def test_adapt_checkpoint_resamples_positions_and_leaves_the_rest():
    source = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=10)
    target = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=10, img_size=(36, 20))
    state = source.state_dict()
    adapted = target.adapt_checkpoint(state)
    assert state["pos_embed"].shape == (1, 1 + 49, 192)  # the caller's dict is left as it was
    expected = resample_pos_embed(state["pos_embed"], (9, 5), (7, 7), num_prefix_tokens=1)
    torch.testing.assert_close(adapted["pos_embed"], expected)
    assert all(adapted[k] is state[k] for k in state if k != "pos_embed")


def test_adapt_checkpoint_replaces_both_deit_heads_for_another_class_count():
    source = vitlab.create_model("deit_mini_distilled_patch7_28", depth=1, num_classes=10)
    target = vitlab.create_model("deit_mini_distilled_patch7_28", depth=1, num_classes=4)
    with pytest.warns(UserWarning, match="head has 10 classes, the model 4"):
        adapted = target.adapt_checkpoint(source.state_dict())
    for key in ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias"):
        torch.testing.assert_close(adapted[key], target.state_dict()[key])
    torch.testing.assert_close(adapted["dist_token"], source.dist_token.detach())


def test_a_headless_model_drops_the_checkpoints_head():
    source = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=10)
    target = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=0)
    with pytest.warns(UserWarning, match="the model 0"):
        adapted = target.adapt_checkpoint(source.state_dict())
    assert set(adapted) == set(target.state_dict())
