import math

import pytest

import vitlab
from vitlab.engine.optim import param_groups, warmup_cosine


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
