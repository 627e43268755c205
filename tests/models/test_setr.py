"""SETR: the encoder against timm's forward_intermediates with the same weights, each decoder against the same
computation written here from torch primitives, the MLA encoder without a class token against the official
"drop it before the blocks", shapes and auxiliary outputs."""

import pytest
import torch
import torch.nn.functional as F

import vitlab
from vitlab.models.setr import SETRConfig

TINY = dict(encoder="vit_tiny_patch16_224", img_size=64, patch_size=8, depth=4, num_classes=5, channels=16,
            mla_channels=16, mla_head_channels=8)


def tiny(decoder: str, **kw):
    torch.manual_seed(0)
    model = SETRConfig(decoder=decoder, **{**TINY, **kw}).build()
    with torch.no_grad():  # batch-norm statistics away from their init, so that eval-mode BN is tested
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.normal_(1, 0.1)
                module.bias.normal_(0, 0.1)
    return model.eval()


def timm_twin(model):
    """timm's ViT with the SETR encoder's weights."""
    timm = pytest.importorskip("timm")
    encoder = model.backbone.config
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=encoder.img_size,
                               patch_size=encoder.patch_size, depth=encoder.depth,
                               class_token=encoder.class_token, global_pool=encoder.global_pool).eval()
    state = {k: v for k, v in model.backbone.state_dict().items()}
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"norm.weight", "norm.bias"}
    return theirs


def test_encoder_taps_equal_timms_forward_intermediates():
    model = tiny("pup")
    theirs = timm_twin(model)
    images = torch.randn(2, 3, 64, 64)
    expected = theirs.forward_intermediates(images, indices=[1, 3], norm=False, output_fmt="NCHW",
                                            intermediates_only=True)
    ours = model.backbone.get_intermediate_layers(images, [1, 3], reshape=True)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b)


def bn(x, module):
    return F.batch_norm(x, module.running_mean, module.running_var, module.weight, module.bias, training=False,
                        eps=module.eps)


def ln_map(tokens, norm, grid):
    x = F.layer_norm(tokens, (tokens.shape[-1],), norm.weight, norm.bias, eps=1e-6)
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *grid)


def up(x, size=None, scale=None, align_corners=False):
    return F.interpolate(x, size=size, scale_factor=scale, mode="bilinear", align_corners=align_corners)


def last_tokens(model, images, layer=-1):
    return model.backbone.get_intermediate_layers(images, [layer])[0]


def test_naive_equals_its_formula():
    model = tiny("naive")
    images = torch.randn(2, 3, 64, 64)
    head = model.decode_head
    x = ln_map(last_tokens(model, images), head.norm, (8, 8))
    x = F.relu(bn(F.conv2d(x, head.conv_0.weight, head.conv_0.bias), head.syncbn_fc_0))  # 1×1
    x = up(F.conv2d(x, head.conv_1.weight, head.conv_1.bias), size=(64, 64))
    torch.testing.assert_close(model(images).logits, x)


def test_pup_equals_its_formula():
    model = tiny("pup")
    images = torch.randn(2, 3, 64, 64)
    head = model.decode_head
    x = ln_map(last_tokens(model, images), head.norm, (8, 8))
    assert head.num_convs == 3  # one 2× stage per halving of the 8-pixel patch (the paper's 16: four)
    for i in range(3):  # stages of 3×3 conv, BN, ReLU, 2× up (the last 2× after the 1×1 classifier)
        conv = getattr(head, f"conv_{i}")
        x = F.relu(bn(F.conv2d(x, conv.weight, conv.bias, padding=1), getattr(head, f"syncbn_fc_{i}")))
        if i < 2:
            x = up(x, scale=2)
    x = up(F.conv2d(x, head.conv_3.weight, head.conv_3.bias), scale=2)
    assert x.shape[-2:] == (64, 64)
    torch.testing.assert_close(model(images).logits, x)


def test_mla_equals_its_formula():
    model = tiny("mla")
    images = torch.randn(2, 3, 64, 64)
    assert model.mla_layers == (0, 1, 2, 3)  # four evenly spaced taps of a 4-block encoder
    taps = model.backbone.get_intermediate_layers(images, [0, 1, 2, 3])
    neck, head = model.neck, model.decode_head

    def cbr(x, seq, padding):
        return F.relu(bn(F.conv2d(x, seq[0].weight, padding=padding), seq[1]))

    projected = [cbr(ln_map(t, getattr(neck, f"norm_{i}"), (8, 8)), getattr(neck.mla, f"mla_p{i + 2}_1x1"), 0)
                 for i, t in enumerate(taps)]
    p5 = projected[3]
    p4 = p5 + projected[2]
    p3 = p4 + projected[1]
    p2 = p3 + projected[0]  # top-down: the shallowest stream holds the sum of all four
    streams = [cbr(p, getattr(neck.mla, f"mla_p{i + 2}"), 1) for i, p in enumerate((p2, p3, p4, p5))]
    upsampled = []
    for i, s in enumerate(streams):
        seq = getattr(head.mlahead, f"head{i + 2}")
        s = F.relu(bn(F.conv2d(F.relu(bn(F.conv2d(s, seq[0].weight, padding=1), seq[1])), seq[3].weight, padding=1),
                      seq[4]))
        upsampled.append(up(s, scale=4, align_corners=True))
    x = up(F.conv2d(torch.cat(upsampled, 1), head.cls.weight, head.cls.bias, padding=1), size=(64, 64))
    torch.testing.assert_close(model(images).logits, x)

    model.train()  # the auxiliary heads run in training; batch norm kept in eval mode to compare
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.eval()
    with torch.no_grad():
        out = model(images)
    torch.testing.assert_close(out.logits, x)
    assert len(out.aux_logits) == 4
    for stream, aux_head, aux in zip(streams, model.auxiliary_head, out.aux_logits):  # stream i -> aux head i
        torch.testing.assert_close(aux, up(F.conv2d(stream, aux_head.aux.weight), size=(64, 64)))


def test_mla_encoder_without_class_token_is_the_official_drop_before_the_blocks():
    """The official VIT_MLA adds the position embedding to [cls; patches], then drops the class token before the
    blocks. A class-token ViT's weights loaded into the MLA encoder (`encoder_state`) give the same taps."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(1)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, patch_size=8, depth=4).eval()
    model = tiny("mla")
    model.backbone.load_state_dict(model.encoder_state(vit.state_dict()))
    images = torch.randn(2, 3, 64, 64)
    x = vit.patch_embed(images)
    x = torch.cat([vit.cls_token.expand(2, -1, -1), x], 1) + vit.pos_embed
    x = x[:, 1:]  # the official: cls dropped after the positions, before the blocks
    expected = []
    for block in vit.blocks:
        x = block(x)
        expected.append(x)
    for a, b in zip(model.backbone.get_intermediate_layers(images, [0, 1, 2, 3]), expected):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("decoder", ["naive", "pup", "mla"])
def test_outputs_auxiliary_heads_and_other_sizes(decoder):
    model = tiny(decoder)
    expected_aux = {"naive": 3, "pup": 4, "mla": 4}[decoder]
    assert len(model.auxiliary_head) == expected_aux
    model.train()
    out = model(torch.randn(2, 3, 64, 64))
    assert out.logits.shape == (2, 5, 64, 64) and len(out.aux_logits) == expected_aux
    assert all(a.shape == (2, 5, 64, 64) for a in out.aux_logits)
    (out.logits.sum() + sum(a.sum() for a in out.aux_logits)).backward()
    unused = [n for n, p in model.named_parameters() if p.grad is None]
    assert not unused  # every parameter trains (DDP needs no find_unused_parameters)
    model.eval()
    out = model(torch.randn(1, 3, 48, 80))  # another size: positions resampled, logits at the input's size
    assert out.logits.shape == (1, 5, 48, 80) and out.aux_logits == []
    assert len(SETRConfig(decoder=decoder, aux=False, **TINY).build().auxiliary_head) == 0


def test_paper_layers_and_registered_presets():
    config = vitlab.models.get_config("setr_pup_vit_large_patch16_384")
    assert config.layers(24) == ((9, 14, 19, 23), (5, 11, 17, 23))  # the official configs' in_index, mla_index
    assert vitlab.models.get_config("setr_naive_vit_large_patch16_384").layers(24)[0] == (9, 14, 19)
    encoder = config.encoder_config()
    assert (encoder.dim, encoder.depth, encoder.num_heads, encoder.img_size) == (1024, 24, 16, 768)
    with torch.device("meta"):  # the paper's PUP: four stages, conv_0 … conv_3 and the classifier conv_4
        head = config.build().decode_head
    assert head.num_convs == 4 and head.conv_4.weight.shape == (19, 256, 1, 1)
    for name in ("setr_naive_small", "setr_pup_small", "setr_mla_small"):
        model = vitlab.create_model(name)
        assert model(torch.randn(1, 3, 128, 128)).logits.shape == (1, 11, 128, 128)
