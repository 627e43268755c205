import math

import pytest
import torch
from torch import nn

import vitlab
from vitlab.engine.optim import param_groups, warmup_cosine
from vitlab.models import Seq2SeqConfig
from vitlab.models.family import Model


def test_weight_decay_only_on_weights():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    decay, no_decay = param_groups(model, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decayed == {"patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight",
                       "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc2.weight", "head.weight"}
    assert {"pos_embed", "cls_token", "norm.weight", "norm.bias", "blocks.0.norm1.weight",
            "blocks.0.attn.qkv.bias", "head.bias", "patch_embed.proj.bias"} <= kept
    assert decayed | kept == set(names.values())


def test_warmup_then_cosine_by_hand():
    total, warmup = 100, 10
    assert warmup_cosine(0, total, warmup) == pytest.approx(0.1)
    assert warmup_cosine(9, total, warmup) == pytest.approx(1.0)
    assert warmup_cosine(10, total, warmup) == pytest.approx(1.0)
    assert warmup_cosine(55, total, warmup) == pytest.approx(0.5)  # half way through the cosine
    assert warmup_cosine(32, total, warmup) == pytest.approx(0.5 * (1 + math.cos(math.pi * 22 / 90)))
    assert warmup_cosine(100, total, warmup, min_ratio=0.01) == pytest.approx(0.01)


def groups_by_name(model, groups):
    """name -> (weight_decay, lr_scale) of the group that holds each parameter."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["weight_decay"], g["lr_scale"]) for g in groups for p in g["params"]}


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224"])
@pytest.mark.parametrize("layer_decay", [None, 0.75])
def test_groups_equal_timms_layer_decay_groups(name, layer_decay):
    timm = pytest.importorskip("timm")
    from timm.optim._param_groups import param_groups_layer_decay, param_groups_weight_decay

    ours = vitlab.create_model(name, depth=3, img_size=32)
    theirs = timm.create_model(name, depth=3, img_size=32, pretrained=False)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    if layer_decay is None:
        reference = param_groups_weight_decay(theirs, 0.05, no_weight_decay_list=theirs.no_weight_decay())
        for group in reference:
            group["lr_scale"] = 1.0
    else:
        reference = param_groups_layer_decay(theirs, 0.05, no_weight_decay_list=theirs.no_weight_decay(),
                                             layer_decay=layer_decay)
    expected = groups_by_name(theirs, reference)
    got = groups_by_name(ours, param_groups(ours, 0.05, layer_decay))
    # one known difference: timm groups the final norm with the last block, BEiT's original code (and vitlab) with
    # the head, at the full learning rate
    for key in ("norm.weight", "norm.bias"):
        assert got.pop(key) == (0.0, 1.0)
        expected.pop(key)
    assert got == expected


class NoHooks(nn.Module):
    """A model that names no groups: a 2-d table called pos_embed is just a matrix to it."""

    def __init__(self):
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(4, 3))
        self.fc = nn.Linear(3, 2)
        self.norm = nn.LayerNorm(2)


def test_without_hooks_every_matrix_decays_and_nothing_else():
    model = NoHooks()
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert [names[id(p)] for p in decay["params"]] == ["pos_embed", "fc.weight"]
    assert [names[id(p)] for p in no_decay["params"]] == ["fc.bias", "norm.weight", "norm.bias"]


def test_layer_decay_needs_layer_groups_and_a_value_in_range():
    with pytest.raises(ValueError, match=r"layer_decay=0.75 needs a model with layer groups.*NoHooks") as info:
        param_groups(NoHooks(), 0.05, layer_decay=0.75)
    assert "--" not in str(info.value)  # library errors name the parameter, not a command-line flag
    with pytest.raises(ValueError, match="layer_decay must be in"):
        param_groups(vitlab.create_model("vit_tiny_patch4_28", depth=1), 0.05, layer_decay=1.5)
    with pytest.raises(ValueError, match=r"layer_decay=0\.5 needs"):
        param_groups(vitlab.create_model("resnet18_28"), 0.05, layer_decay=0.5)


class WithHooks(NoHooks, Model):
    """The optimizer follows whatever groups a model (a vitlab Model) names."""

    num_layer_groups = 3

    def no_weight_decay(self):
        return {"pos_embed"}

    def layer_id(self, name):
        return {"pos_embed": 0, "fc": 1, "norm": 2}[name.split(".")[0]]


def test_the_optimizer_follows_the_models_hooks():
    model = WithHooks()
    got = groups_by_name(model, param_groups(model, 0.1, layer_decay=0.5))
    assert got == {"pos_embed": (0.0, 0.25), "fc.weight": (0.1, 0.5), "fc.bias": (0.0, 0.5),
                   "norm.weight": (0.0, 1.0), "norm.bias": (0.0, 1.0)}


def test_a_learned_seq2seq_position_table_does_not_decay():
    model = Seq2SeqConfig(vocab_size=11, dim=16, depth=1, num_heads=2, pos_embed="learn").build()
    got = groups_by_name(model, param_groups(model, 0.1))
    assert got["pos_embed"] == (0.0, 1.0) and got["embed.weight"] == (0.1, 1.0)


def test_glob_scales_pick_deformable_detrs_offset_predictors_as_the_official_recipe():
    """The official Deformable DETR main.py: names containing "backbone.0" at lr_backbone, names containing
    "reference_points" or "sampling_offsets" at lr · lr_linear_proj_mult, the rest at lr."""
    model = vitlab.create_model("deformable_detr_small")
    scales = {"backbone.": 0.1, "*.sampling_offsets.*": 0.25, "*reference_points.*": 0.25}
    got = {name: scale for name, (_, scale) in groups_by_name(model, param_groups(model, 1e-4, None, scales)).items()}
    expected = {}
    for name, _ in model.named_parameters():
        if name.startswith("backbone."):
            expected[name] = 0.1
        elif "reference_points" in name or "sampling_offsets" in name:
            expected[name] = 0.25
        else:
            expected[name] = 1.0
    assert got == expected
    assert sum(scale == 0.25 for scale in got.values()) == 2 * 6 + 2  # 3 + 3 layers' offsets, one reference head


def test_poly_schedule_equals_torchs_polynomial_lr_and_sgd_has_momentum():
    from vitlab.engine.config import LoopConfig
    from vitlab.engine.loop import build_optimization

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    config = LoopConfig(lr=0.01, weight_decay=1e-4, optimizer="sgd", momentum=0.9, schedule="poly", poly_power=0.9,
                        min_lr_ratio=0.0)
    optimizer, schedule = build_optimization(model, config, total_steps=50, warmup_steps=0)
    assert isinstance(optimizer, torch.optim.SGD) and all(g["momentum"] == 0.9 for g in optimizer.param_groups)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [1e-4, 0.0]  # no decay on biases and norms
    reference = torch.optim.SGD(model.parameters(), lr=0.01)
    polynomial = torch.optim.lr_scheduler.PolynomialLR(reference, total_iters=50, power=0.9)
    for _ in range(50):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(reference.param_groups[0]["lr"], rel=1e-9, abs=1e-12)
        optimizer.step()
        schedule.step()
        reference.step()
        polynomial.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="momentum"):
        LoopConfig(momentum=1.0)
