"""DETR against the official code (the `detr` package) and Hugging Face's DetrForObjectDetection, same weights."""

import shutil

import pytest
import torch
from safetensors.torch import save_file

import vitlab
from vitlab.interop import load_model, load_weights, model_from_checkpoint, save_weights
from vitlab.layers import sine_pos_embed_2d
from vitlab.models.detection_output import DetectionOutput

from .detr_reference import nested, official, official_detr

SMALL = {"backbone": "resnet18", "dim": 64, "num_heads": 4, "enc_layers": 2, "dec_layers": 3, "ffn_dim": 128,
         "num_queries": 10, "num_classes": 7}


def padded_batch(seed=0):
    """Two images of 96 × 128 pixels, the second really 64 × 80 and padded with zeros (mask True there)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(2, 3, 96, 128, generator=generator)
    mask = torch.zeros(2, 96, 128, dtype=torch.bool)
    mask[1, 64:, :] = True
    mask[1, :, 80:] = True
    return images.masked_fill(mask[:, None], 0.0), mask


def test_sine_encoding_matches_the_official_formula():
    valid = torch.ones(2, 5, 7, dtype=torch.bool)
    valid[1, 3:] = False
    valid[1, :, 4:] = False
    ours = sine_pos_embed_2d(valid, 32)  # (B, h, w, 32)
    reference = official()["position_encoding"].PositionEmbeddingSine(16, normalize=True)
    theirs = reference(nested(torch.zeros(2, 1, 5, 7), ~valid))  # (B, 32, h, w)
    torch.testing.assert_close(ours, theirs.permute(0, 2, 3, 1), atol=1e-5, rtol=1e-5)
    # the real pixels of the padded image are encoded as if it were the only image: padding shifts nothing
    torch.testing.assert_close(ours[1, :3, :4], sine_pos_embed_2d(torch.ones(1, 3, 4, dtype=torch.bool), 32)[0])


@pytest.mark.parametrize("pre_norm", [False, True])
def test_official_checkpoint_gives_the_official_outputs(tmp_path, pre_norm):
    # 8 heads: a state dict's shapes do not tell the number of heads, and every official model has 8
    reference = official_detr(num_classes=7, backbone="resnet18", dim=64, heads=8, enc_layers=2, dec_layers=3,
                              ffn_dim=128, num_queries=10, pre_norm=pre_norm)
    path = tmp_path / "detr.pth"
    torch.save({"model": reference.state_dict()}, path)  # the layout of the official releases
    ours = model_from_checkpoint(path).eval()
    assert ours.config.pre_norm == pre_norm and ours.config.dec_layers == 3 and ours.num_classes == 7
    images, mask = padded_batch()
    with torch.no_grad():
        theirs = reference(nested(images, mask))
        mine = ours(images, mask)
    torch.testing.assert_close(mine.logits, theirs["pred_logits"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(mine.pred_boxes, theirs["pred_boxes"], atol=1e-4, rtol=1e-4)
    assert len(mine.aux_outputs) == len(theirs["aux_outputs"]) == 2
    for aux, their_aux in zip(mine.aux_outputs, theirs["aux_outputs"]):
        torch.testing.assert_close(aux.logits, their_aux["pred_logits"], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(aux.pred_boxes, their_aux["pred_boxes"], atol=1e-4, rtol=1e-4)


def test_official_resnet50_detr_loads_into_the_registered_preset(tmp_path):
    reference = official_detr(enc_layers=1, dec_layers=1, num_queries=5)
    path = tmp_path / "detr-r50.pth"
    torch.save({"model": reference.state_dict()}, path)
    ours = vitlab.create_model("detr_resnet50", enc_layers=1, dec_layers=1, num_queries=5, weights=path).eval()
    images = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        theirs = reference(nested(images, torch.zeros(1, 64, 64, dtype=torch.bool)))
        torch.testing.assert_close(ours(images).logits, theirs["pred_logits"], atol=1e-4, rtol=1e-4)


def huggingface_detr(tmp_path, backbone):
    transformers = pytest.importorskip("transformers")
    options = {"use_pretrained_backbone": False, "encoder_layers": 2, "decoder_layers": 2, "num_labels": 5,
               "num_queries": 12, "auxiliary_loss": False}
    if backbone == "timm":
        config = transformers.DetrConfig(use_timm_backbone=True, backbone="resnet50", **options)
    else:  # Hugging Face's own ResNet-18, read after its last stage or (hf-resnet-c4) after the third
        stage = "stage3" if backbone.endswith("c4") else "stage4"
        resnet = transformers.ResNetConfig(depths=[2, 2, 2, 2], layer_type="basic", hidden_sizes=[64, 128, 256, 512],
                                           out_features=[stage])
        config = transformers.DetrConfig(use_timm_backbone=False, backbone_config=resnet, **options)
    torch.manual_seed(0)
    model = transformers.DetrForObjectDetection(config).eval()
    with torch.no_grad():  # random statistics in the frozen batch norms, so the backbone is really compared
        for module in model.modules():
            if type(module).__name__ == "DetrFrozenBatchNorm2d":
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(1.0, 1.2)
                module.weight.normal_(1, 0.1)
                module.bias.normal_(0, 0.1)
    folder = tmp_path / f"hf-{backbone}"
    model.save_pretrained(folder)
    return model, folder


@pytest.mark.parametrize("backbone", ["timm", "hf-resnet", "hf-resnet-c4"])
def test_huggingface_folder_gives_the_same_outputs(tmp_path, backbone):
    reference, folder = huggingface_detr(tmp_path, backbone)
    ours = model_from_checkpoint(folder).eval()
    assert ours.config.backbone == ("resnet50" if backbone == "timm" else "resnet18")
    assert ours.config.backbone_last_stage == (3 if backbone.endswith("c4") else 4)
    images, mask = padded_batch()
    with torch.no_grad():
        for padding in (None, mask):
            pixel_mask = None if padding is None else (~padding).long()  # Hugging Face: 1 at real pixels
            theirs = reference(pixel_values=images, pixel_mask=pixel_mask)
            mine = ours(images, padding)
            torch.testing.assert_close(mine.logits, theirs.logits, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(mine.pred_boxes, theirs.pred_boxes, atol=1e-4, rtol=1e-4)

    # transformers 5's in-memory names (backbone.model, o_proj, mlp.fc1) load the same
    in_memory = tmp_path / "in-memory"
    in_memory.mkdir()
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, in_memory / "model.safetensors")
    shutil.copy(folder / "config.json", in_memory / "config.json")
    assert any(".o_proj." in key for key in reference.state_dict())
    again = model_from_checkpoint(in_memory).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(images).logits, ours(images).logits, atol=0, rtol=0)


def test_forward_shapes_gradients_and_round_trip(tmp_path):
    torch.manual_seed(0)
    model = vitlab.create_model("detr_resnet50", **SMALL)
    images, mask = padded_batch()
    out = model(images, mask)
    assert isinstance(out, DetectionOutput)
    assert out.logits.shape == (2, 10, 8) and out.pred_boxes.shape == (2, 10, 4)
    assert len(out.aux_outputs) == 2 and ((out.pred_boxes >= 0) & (out.pred_boxes <= 1)).all()
    loss = out.logits.square().mean() + out.pred_boxes.sum() + sum(a.logits.square().mean() for a in out.aux_outputs)
    loss.backward()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert not any(n.startswith(("backbone.conv1", "backbone.layer1.")) for n in trainable)  # the paper's freezing
    assert not [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    path = save_weights(model, tmp_path / "detr.safetensors")
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(load_model(path).eval()(images, mask).logits, model(images, mask).logits)


def test_detr_small_trains_everything_and_has_batch_norm():
    model = vitlab.create_model("detr_small")
    assert all(p.requires_grad for p in model.parameters())
    out = model(torch.randn(2, 3, 128, 128))
    assert out.logits.shape == (2, 25, 11)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_bad_padding_mask_is_explained():
    model = vitlab.create_model("detr_small")
    with pytest.raises(ValueError, match=r"padding_mask must be \(B, H, W\)"):
        model(torch.randn(2, 3, 64, 64), torch.zeros(2, 32, 32, dtype=torch.bool))


def test_load_weights_accepts_an_official_state_dict():
    reference = official_detr(**{"num_classes": 7, "backbone": "resnet18", "dim": 64, "heads": 4, "enc_layers": 2,
                                 "dec_layers": 3, "ffn_dim": 128, "num_queries": 10})
    ours = load_weights(vitlab.create_model("detr_resnet50", **SMALL), reference.state_dict()).eval()
    images = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        theirs = reference(nested(images, torch.zeros(1, 64, 64, dtype=torch.bool)))
        torch.testing.assert_close(ours(images).pred_boxes, theirs["pred_boxes"], atol=1e-4, rtol=1e-4)


def test_convert_writes_a_vitlab_file_with_the_same_outputs(tmp_path):
    from vitlab.cli.main import main

    reference = official_detr(num_classes=7, backbone="resnet18", dim=64, heads=8, enc_layers=1, dec_layers=2,
                              ffn_dim=128, num_queries=10)
    torch.save({"model": reference.state_dict()}, tmp_path / "detr.pth")
    assert main(["convert", str(tmp_path / "detr.pth"), str(tmp_path / "detr.safetensors")]) == 0
    model = load_model(tmp_path / "detr.safetensors").eval()
    images, mask = padded_batch()
    with torch.no_grad():
        theirs = reference(nested(images, mask))
        torch.testing.assert_close(model(images, mask).pred_boxes, theirs["pred_boxes"], atol=1e-4, rtol=1e-4)
