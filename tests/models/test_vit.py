import pytest
import torch

import vitlab
from vitlab.interop import load_weights
from vitlab.models.vit import count_parameters

# The ViT paper (Table 1) and timm give these counts with a 1000-class head.
PUBLISHED_PARAMS = {
    "vit_tiny_patch16_224": 5_717_416,
    "vit_small_patch16_224": 22_050_664,
    "vit_base_patch16_224": 86_567_656,
    "vit_large_patch16_224": 304_326_632,
}
TIMM_NAMES = [
    "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_small_patch32_224", "vit_base_patch16_224",
    "vit_base_patch32_224", "vit_base_patch16_384", "vit_large_patch16_224", "vit_large_patch16_384",
    "vit_large_patch32_224",
    "vit_huge_patch14_224",
]


def meta_model(name, **overrides):
    with torch.device("meta"):  # parameters without memory: counting a 632 M model costs nothing
        return vitlab.create_model(name, **overrides)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_counts_equal_published(name):
    assert count_parameters(meta_model(name)) == PUBLISHED_PARAMS[name]


def test_vit_huge_parameter_counts():
    # 630,764,800 is timm's vit_huge_patch14_224 as it is built by default: without a head (its only release,
    # ImageNet-21k, ships none). With a 1000-class head add 1280 × 1000 + 1000.
    assert count_parameters(meta_model("vit_huge_patch14_224", num_classes=0)) == 630_764_800
    assert count_parameters(meta_model("vit_huge_patch14_224")) == 630_764_800 + 1_281_000


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_parameter_counts_equal_timm(name):
    timm = pytest.importorskip("timm")
    with torch.device("meta"):
        reference = timm.create_model(name, num_classes=1000)
    ours = meta_model(name)
    assert count_parameters(ours) == count_parameters(reference)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in reference.state_dict().items()}


@pytest.mark.parametrize("global_pool", ["token", "avg"])
def test_outputs_equal_timm_with_the_same_weights(global_pool):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    kwargs = dict(depth=3, num_classes=7, global_pool=global_pool)
    timm_kwargs = dict(kwargs, class_token=global_pool == "token")
    if global_pool == "avg":
        timm_kwargs["fc_norm"] = False  # timm would otherwise normalise after pooling; ours (and JAX's) before
    reference = timm.create_model("vit_tiny_patch16_224", **timm_kwargs).eval()
    ours = vitlab.create_model("vit_tiny_patch16_224", class_token=global_pool == "token", **kwargs).eval()
    load_weights(ours, reference.state_dict())
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), reference(images), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.forward_features(images), reference.forward_features(images),
                                   atol=1e-5, rtol=1e-5)
        for n, reshape, norm in [(1, False, False), (2, True, True), ([0, 2], False, True)]:
            mine = ours.get_intermediate_layers(images, n, reshape=reshape, norm=norm)
            theirs = reference.get_intermediate_layers(images, n, reshape=reshape, norm=norm)
            assert len(mine) == len(theirs)
            for a, b in zip(mine, theirs):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_fused_and_explicit_model_agree():
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch4_28", depth=2).eval()
    images = torch.randn(3, 1, 28, 28)
    fused = model(images)
    for block in model.blocks:
        block.attn.fused = False
    torch.testing.assert_close(model(images), fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("where", ["last block", "last block's mlp", "final norm"])
def test_a_forward_hook_sees_every_token_because_the_full_path_runs(where):
    """A hook that captures features (as feature extractors and attention viewers do) must see (B, P + N, D)."""
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch4_28", depth=2).eval()
    images = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(images))
    seen = []

    target = {"last block": model.blocks[-1], "last block's mlp": model.blocks[-1].mlp, "final norm": model.norm}[where]
    handle = target.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    try:
        with torch.no_grad():
            logits = model(images)
    finally:
        handle.remove()
    assert seen == [(3, 1 + 49, 192)]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_distilled_training_outputs_equal_the_heads_on_every_tokens_features():
    torch.manual_seed(0)
    model = vitlab.create_model("deit_mini_distilled_patch7_28", depth=2, drop_rate=0.0).train()
    images = torch.randn(3, 1, 28, 28)
    out = model(images)
    full = model.forward_head(model.forward_features(images))
    torch.testing.assert_close(out.logits, full.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.dist_logits, full.dist_logits, atol=1e-5, rtol=1e-5)
    (out.logits.sum() + 2 * out.dist_logits.sum()).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (full.logits.sum() + 2 * full.dist_logits.sum()).backward()
    for a, b in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_num_classes_zero_gives_pooled_features():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=0).eval()
    images = torch.randn(2, 1, 28, 28)
    features = model(images)
    assert features.shape == (2, 192)
    torch.testing.assert_close(features, model.forward_features(images)[:, 0])
    avg = vitlab.create_model("vit_tiny_patch4_28", depth=1, num_classes=0, global_pool="avg", class_token=False)
    tokens = avg.forward_features(images)
    assert tokens.shape == (2, 49, 192)
    torch.testing.assert_close(avg(images), tokens.mean(1))


def test_intermediate_layers_are_the_block_outputs():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=3).eval()
    images = torch.randn(2, 1, 28, 28)
    x = model.embed(images)
    outs = []
    for block in model.blocks:
        x = block(x)
        outs.append(x)
    last_two = model.get_intermediate_layers(images, n=2, reshape=True, return_prefix_tokens=True)
    for (patches, prefix), expected in zip(last_two, outs[1:]):
        assert patches.shape == (2, 192, 7, 7)
        torch.testing.assert_close(patches.flatten(2).transpose(1, 2), expected[:, 1:])
        torch.testing.assert_close(prefix, expected[:, :1])
    with pytest.raises(ValueError, match="n must be"):
        model.get_intermediate_layers(images, n=4)


def test_higher_resolution_model_and_loading_224_weights():
    torch.manual_seed(0)
    small = vitlab.create_model("vit_tiny_patch16_224", depth=1)
    big = vitlab.create_model("vit_tiny_patch16_224", depth=1, img_size=384)
    assert big.pos_embed.shape == (1, 1 + 24 * 24, 192)
    load_weights(big, small.state_dict())
    expected = vitlab.layers.resample_pos_embed(small.pos_embed.detach(), (24, 24), num_prefix_tokens=1)
    torch.testing.assert_close(big.pos_embed.detach(), expected)
    torch.testing.assert_close(big.cls_token, small.cls_token)
    assert big(torch.randn(1, 3, 384, 384)).shape == (1, 1000)
    with pytest.raises(ValueError, match="expected images of size 224×224, got 384×384"):
        small(torch.randn(1, 3, 384, 384))


def test_dynamic_img_size_resamples_on_the_fly():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1, dynamic_img_size=True).eval()
    images = torch.randn(1, 1, 36, 20)
    fixed = vitlab.create_model("vit_tiny_patch4_28", depth=1, img_size=(36, 20))
    load_weights(fixed, model.state_dict())  # resampled once, at load time
    torch.testing.assert_close(model(images), fixed.eval()(images), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["learn", "sincos", "none"])
def test_position_embedding_kinds(kind):
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1, pos_embed=kind)
    trainable = {name for name, p in model.named_parameters()}
    assert ("pos_embed" in trainable) == (kind == "learn")
    images = torch.randn(2, 1, 28, 28)
    assert model(images).shape == (2, 10)
    if kind == "sincos":
        torch.testing.assert_close(model.pos_embed[0, 1:], vitlab.layers.sincos_2d((7, 7), 192))


def test_linear_patch_projection_model_equals_conv_model():
    conv = vitlab.create_model("vit_tiny_patch4_28", depth=1).eval()
    linear = vitlab.create_model("vit_tiny_patch4_28", depth=1, patch_proj="linear").eval()
    state = conv.state_dict()
    state["patch_embed.proj.weight"] = state["patch_embed.proj.weight"].reshape(192, -1)
    linear.load_state_dict(state)
    images = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(linear(images), conv(images), atol=1e-5, rtol=1e-5)


def test_non_square_image_and_patch():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1, img_size=(24, 40), patch_size=(6, 8))
    assert model.patch_embed.grid_size == (4, 5)
    assert model(torch.randn(2, 1, 24, 40)).shape == (2, 10)


def test_drop_path_rates_rise_linearly():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=5, drop_path_rate=0.2)
    rates = [getattr(b.drop_path1, "drop_prob", 0.0) for b in model.blocks]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])


def test_invalid_configs():
    with pytest.raises(ValueError, match="needs class_token=True"):
        vitlab.create_model("vit_tiny_patch4_28", class_token=False)
    with pytest.raises(ValueError, match="global_pool"):
        vitlab.create_model("vit_tiny_patch4_28", global_pool="max")


# ---- the hybrid stem: stem_channels alone says it; configs saved by version 1 read as they were built ----------

def stem_parameters(in_chans, widths, dim):
    """Conv3x3 (no bias) + BatchNorm (weight, bias) per stage, then the 1×1 projection to dim (weight, bias)."""
    count, channels = 0, in_chans
    for width in widths:
        count += channels * width * 9 + 2 * width
        channels = width
    return count + channels * dim + dim


@pytest.mark.parametrize(("name", "twin", "readme_count"), [
    ("vit_mini_convstem_28", "vit_mini_patch7_28", 1_302_890),
    ("vit_tiny_convstem_28", "vit_tiny_patch7_28", 2_792_618),
])
def test_convstem_presets_are_the_plain_twin_with_a_stem(name, twin, readme_count):
    from vitlab.layers.patch_embed import ConvStemPatchEmbed, PatchEmbed

    hybrid, plain = vitlab.create_model(name), vitlab.create_model(twin)
    c = hybrid.config
    assert c.stem_channels == (32, 64, 128) and c.patch_proj == "conv" and not plain.config.stem_channels
    assert type(hybrid.patch_embed) is ConvStemPatchEmbed and type(plain.patch_embed) is PatchEmbed
    patch_proj = sum(p.numel() for p in plain.patch_embed.parameters())
    expected = count_parameters(plain) - patch_proj + stem_parameters(1, c.stem_channels, c.dim)
    assert count_parameters(hybrid) == expected == readme_count  # the registered-models table in the docs


@pytest.mark.parametrize("preset", ["vit_mini_convstem_28", "vit_mini_patch7_28", "deit_mini_distilled_patch7_28"])
def test_a_saved_config_builds_what_it_built(preset):
    """config_to_dict as JSON and back: the same config, the same model (a hybrid's stem, a plain model's none)."""
    import json

    from vitlab.models import config_from_dict, config_to_dict

    saved = json.loads(json.dumps(config_to_dict(vitlab.models.get_config(preset))))
    assert isinstance(saved["stem_channels"], list)  # JSON has no tuples
    config = config_from_dict(saved)
    assert config == vitlab.models.get_config(preset)
    with torch.device("meta"):
        model, expected = config.build(), vitlab.create_model(preset)
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in expected.state_dict().items()}


def test_a_saved_config_with_fields_this_vitlab_does_not_know_is_refused():
    from vitlab.models import config_from_dict, config_to_dict

    saved = {**config_to_dict(vitlab.models.get_config("vit_mini_patch7_28")), "config_version": 2, "layer_scale": 1}
    with pytest.raises(ValueError, match=r"fields ViTConfig does not know \(config_version, layer_scale\): it was "
                                         r"written by another version of vitlab"):
        config_from_dict(saved)


def test_stem_options_explain_themselves():
    from vitlab.models.vit import ViTConfig

    with pytest.raises(ValueError, match=r"for the hybrid \(a convolutional stem\) give stem_channels"):
        ViTConfig(patch_proj="convstem")
    with pytest.raises(ValueError, match="own 1×1 convolution"):
        ViTConfig(patch_proj="linear", stem_channels=(32, 64))
    with pytest.raises(ValueError, match="patch_proj must be"):
        ViTConfig(patch_proj="pixel")
    with pytest.raises(ValueError, match="positive"):
        ViTConfig(stem_channels=(32, 0))
