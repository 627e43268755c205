import json

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import vitlab
from vitlab.viz import attention_rollout, collect_attention, fuse_heads, rollout_map
from vitlab.viz.inspect import patch_filter_components, position_similarity


def test_identity_attention_rolls_out_to_identity():
    eye = torch.eye(5).expand(3, 2, 4, 5, 5)  # (L, B, heads, N, N)
    torch.testing.assert_close(attention_rollout(eye), torch.eye(5).expand(2, 5, 5))


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard", [0.0, 0.5])
def test_rollout_rows_are_distributions(fusion, discard):
    attention = torch.rand(3, 2, 4, 6, 6).softmax(-1)
    rollout = attention_rollout(attention, fusion, discard)
    assert (rollout >= 0).all()
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 6))


def test_rollout_by_hand_for_two_layers():
    a1, a2 = torch.rand(4, 4).softmax(-1), torch.rand(4, 4).softmax(-1)
    attention = torch.stack([a1, a2])[:, None, None]  # one head, one image
    eye = torch.eye(4)
    r1 = (a1 + eye) / (a1 + eye).sum(-1, keepdim=True)
    r2 = (a2 + eye) / (a2 + eye).sum(-1, keepdim=True)
    torch.testing.assert_close(attention_rollout(attention)[0], r2 @ r1)


def test_head_fusion_and_discard():
    attention = torch.tensor([[[0.1, 0.9], [0.5, 0.5]], [[0.7, 0.3], [0.2, 0.8]]])  # (heads=2, 2, 2)
    torch.testing.assert_close(fuse_heads(attention, "max"), torch.tensor([[0.7, 0.9], [0.5, 0.8]]))
    torch.testing.assert_close(fuse_heads(attention, "min"), torch.tensor([[0.1, 0.3], [0.2, 0.5]]))
    with pytest.raises(ValueError, match="head_fusion"):
        fuse_heads(attention, "median")
    row = torch.tensor([[[0.4, 0.1, 0.3, 0.2]]]).expand(1, 4, 4).clone()
    from vitlab.viz.attention import _discard_lowest

    kept = _discard_lowest(row, 0.67)  # 2 of the 3 off-diagonal entries of each row go
    # row 0: the diagonal (0.4) stays, 0.3 is the largest of the rest; row 1: its diagonal (0.1) stays too
    torch.testing.assert_close(kept[0, 0], torch.tensor([0.4, 0.0, 0.3, 0.0]))
    torch.testing.assert_close(kept[0, 1], torch.tensor([0.4, 0.1, 0.0, 0.0]))


def forced_model(target_patch: int):
    """A 1-block ViT whose every query attends to one patch: that token alone carries a spike in channel 0,
    the keys read channel 0, and all queries share a positive bias."""
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1, dim=32, num_heads=2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.blocks[0].norm1.weight.fill_(1.0)
        model.pos_embed[0, 1 + target_patch, 0] = 10.0
        qkv = model.blocks[0].attn.qkv
        qkv.bias[:32] = 5.0  # q = 5 everywhere
        qkv.weight[32:64, 0] = 5.0  # k reads channel 0: large only for the spiked token
    return model


@pytest.mark.parametrize("target", [0, 17, 48])
def test_rollout_highlights_the_patch_the_weights_force(target):
    model = forced_model(target)
    images = torch.randn(2, 1, 28, 28)
    maps, attention = rollout_map(model, images)
    assert maps.shape == (2, 7, 7)
    assert attention[0, :, :, :, 1 + target].min() > 0.99  # every query, every head
    for b in range(2):
        assert maps[b].flatten().argmax().item() == target


def test_collected_maps_are_the_explicit_probabilities_and_forward_stays_fused(monkeypatch):
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch4_28", depth=3).eval()
    images = torch.randn(2, 1, 28, 28)
    attention = collect_attention(model, images)
    assert attention.shape == (3, 2, 3, 50, 50)
    x = model.embed(images)
    for layer, block in enumerate(model.blocks):
        _, probs = block.attn(block.norm1(x), return_attn=True)
        torch.testing.assert_close(attention[layer], probs)
        x = block(x)
    calls = []
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model(images)
    assert len(calls) == 3  # the ordinary forward pass still uses the fused kernel in every block
    assert all(block.attn.fused for block in model.blocks)


def test_position_similarity_and_filter_components():
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    sim = position_similarity(model)
    assert sim.shape == (7, 7, 7, 7)
    torch.testing.assert_close(torch.diagonal(sim.reshape(49, 49)), torch.ones(49))
    components, _ = patch_filter_components(model, count=10)
    assert components.shape == (10, 1, 4, 4)
    flat = components.reshape(10, -1)
    torch.testing.assert_close(flat @ flat.T, torch.eye(10), atol=1e-5, rtol=0)  # orthonormal directions


def test_attention_and_inspect_commands_write_pngs_of_the_expected_size(tmp_path, capsys):
    from vitlab.cli.main import main
    from vitlab.interop import save_weights

    model = vitlab.create_model("vit_tiny_patch4_28", depth=2)
    save_weights(model, tmp_path / "run" / "last.safetensors")
    (tmp_path / "run" / "config.json").write_text(json.dumps({"task": "classification", "data": {
        "img_size": 28, "channels": 1, "mean": [0.286], "std": [0.353], "classes": [f"c{i}" for i in range(10)]}}))
    Image.fromarray((torch.rand(28, 28) * 255).byte().numpy()).save(tmp_path / "a.png")
    Image.fromarray((torch.rand(40, 56, 3) * 255).byte().numpy()).save(tmp_path / "b.png")  # RGB, not square
    assert main(["attention", str(tmp_path / "run"), str(tmp_path / "a.png"), str(tmp_path / "b.png"),
                 "--out", str(tmp_path / "maps"), "--layer", "0", "--head-fusion", "max"]) == 0
    # 28×28 is enlarged 8× to 224; panels: input, rollout, 3 heads
    assert Image.open(tmp_path / "maps" / "a_attention.png").size == (5 * 224, 224)
    assert Image.open(tmp_path / "maps" / "b_attention.png").size == (5 * 240, 240)  # the 40×40 centre, 6×
    assert main(["inspect", str(tmp_path / "run"), "--out", str(tmp_path / "maps")]) == 0
    assert Image.open(tmp_path / "maps" / "position_similarity.png").size == (560, 600)
    # 4×4×1 filters have 16 principal directions: 3 rows of 7 panels, 1 inch each, plus the title
    assert Image.open(tmp_path / "maps" / "patch_filters_pca.png").size == (700, 340)
    assert main(["attention", str(tmp_path / "run"), str(tmp_path / "a.png"), "--out", str(tmp_path / "m"),
                 "--layer", "5"]) == 2
