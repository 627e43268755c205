"""DeiT against timm: parameter counts and shapes, outputs with the same weights, loading timm/official files."""

import dataclasses
import warnings

import pytest
import timm
import torch

import vitlab
from vitlab.interop import load_weights
from vitlab.interop.convert import model_from_checkpoint
from vitlab.models import DistilledOutput
from vitlab.models.deit import DistilledVisionTransformer
from vitlab.models.vit import count_parameters

DEIT_NAMES = [
    "deit_tiny_patch16_224", "deit_small_patch16_224", "deit_base_patch16_224",
    "deit_tiny_distilled_patch16_224", "deit_small_distilled_patch16_224", "deit_base_distilled_patch16_224",
]


@pytest.mark.parametrize("name", DEIT_NAMES)
def test_parameter_counts_and_shapes_equal_timm(name):
    with torch.device("meta"):
        ours, theirs = vitlab.create_model(name), timm.create_model(name, pretrained=False)
    assert count_parameters(ours) == sum(p.numel() for p in theirs.parameters())
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}


def small_pair(seed=0, depth=2):
    """timm's distilled DeiT-Ti at 64×64 (cut to `depth` blocks: same code), and ours with its weights."""
    torch.manual_seed(seed)
    theirs = timm.create_model("deit_tiny_distilled_patch16_224", depth=depth, img_size=64, num_classes=7)
    ours = vitlab.create_model("deit_tiny_distilled_patch16_224", depth=depth, img_size=64, num_classes=7)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def test_outputs_equal_timm_in_eval_and_training():
    ours, theirs = small_pair()
    images = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        ours.eval(), theirs.eval()
        torch.testing.assert_close(ours(images), theirs(images), atol=1e-5, rtol=0)
        ours.train(), theirs.train()
        theirs.set_distilled_training(True)
        output = ours(images)
        t_cls, t_dist = theirs(images)  # timm: a tuple (class head, distillation head)
    assert isinstance(output, DistilledOutput)
    torch.testing.assert_close(output.logits, t_cls, atol=1e-5, rtol=0)
    torch.testing.assert_close(output.dist_logits, t_dist, atol=1e-5, rtol=0)
    torch.testing.assert_close(output.averaged(), (t_cls + t_dist) / 2, atol=1e-5, rtol=0)


def test_two_tokens_two_heads_and_the_average_at_evaluation():
    model = vitlab.create_model("deit_mini_distilled_patch7_28").eval()
    assert isinstance(model, DistilledVisionTransformer) and model.num_prefix_tokens == 2
    images = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        tokens = model.forward_features(images)  # (B, 2 + 16, D)
        assert tokens.shape == (4, 18, 128)
        by_hand = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
        torch.testing.assert_close(model(images), by_hand)
        model.train()
        output = model(images)  # no dropout in this model: training mode gives the same numbers
    y_cls, y_dist = output.logits, output.dist_logits
    torch.testing.assert_close(y_cls, model.head(tokens[:, 0]))
    torch.testing.assert_close(y_dist, model.head_dist(tokens[:, 1]))
    assert not torch.allclose(y_cls, y_dist)  # two different heads on two different tokens
    torch.testing.assert_close(output.averaged(), by_hand)  # what evaluation returns
    with pytest.raises(dataclasses.FrozenInstanceError):
        output.logits = y_dist


@pytest.mark.parametrize("wrapper", [None, "model"])
def test_a_timm_or_official_deit_file_loads_to_timm_outputs(tmp_path, wrapper):
    _, theirs = small_pair(seed=1, depth=12)  # all 12 blocks, so the file matches DeiT-Ti's shape for its heads
    state = theirs.state_dict()
    path = tmp_path / "deit.pth"
    torch.save({wrapper: state} if wrapper else state, path)  # DeiT's releases wrap the weights in {"model": ...}
    ours = load_weights(vitlab.create_model("deit_tiny_distilled_patch16_224", img_size=64, num_classes=7),
                        path).eval()
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), theirs.eval()(images), atol=1e-5, rtol=0)
    # without a model name the architecture comes from the file: the distillation token makes it a DeiT
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = model_from_checkpoint(path).eval()
    assert isinstance(built, DistilledVisionTransformer)
    with torch.no_grad():
        torch.testing.assert_close(built(images), theirs(images), atol=1e-5, rtol=0)


def test_fine_tuning_replaces_both_heads_and_resamples_positions():
    _, theirs = small_pair()
    model = vitlab.create_model("deit_tiny_distilled_patch16_224", depth=2, img_size=96, num_classes=3)
    with pytest.warns(UserWarning, match="new head"):
        load_weights(model, theirs.state_dict())
    assert model.pos_embed.shape == (1, 2 + 36, 192)
    torch.testing.assert_close(model.pos_embed[:, :2], theirs.pos_embed[:, :2])  # both prefix tokens kept apart
    assert model.head_dist.weight.shape == (3, 192)


def test_a_hugging_face_deit_with_teacher_folder_gives_its_outputs(tmp_path):
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher

    torch.manual_seed(0)
    config = DeiTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        image_size=32, patch_size=8, num_labels=5)
    theirs = DeiTForImageClassificationWithTeacher(config).eval()
    theirs.save_pretrained(tmp_path)
    ours = model_from_checkpoint(tmp_path)
    assert isinstance(ours, DistilledVisionTransformer) and ours.config.norm_eps == config.layer_norm_eps
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = theirs(pixel_values=images)
        torch.testing.assert_close(ours.eval()(images), out.logits, atol=1e-5, rtol=0)
        output = ours.train()(images)
    torch.testing.assert_close(output.logits, out.cls_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(output.dist_logits, out.distillation_logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pos_embed", ["learn", "sincos"])
def test_the_position_table_is_built_once_for_both_prefix_tokens(pos_embed, monkeypatch):
    """The config says how many prefix tokens there are, so the table is made once, with room for two; the same
    shape as timm's table."""
    import vitlab.models.vit as vit_module

    calls = []
    for name in ("learned_pos_embed", "sincos_pos_embed"):
        original = getattr(vit_module, name)
        monkeypatch.setattr(vit_module, name, lambda *a, _f=original, _n=name, **k: calls.append(a) or _f(*a, **k))
    model = vitlab.create_model("deit_mini_distilled_patch7_28", pos_embed=pos_embed)
    assert len(calls) == 1 and calls[0][-1] == 2  # (grid, D, num_prefix_tokens)
    assert model.config.num_prefix_tokens == model.num_prefix_tokens == 2
    assert model.pos_embed.shape == (1, 2 + 16, 128)
    assert vitlab.create_model("deit_mini_patch7_28").pos_embed.shape == (1, 1 + 16, 128)
