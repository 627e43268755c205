"""Deformable DETR against Hugging Face's DeformableDetrForObjectDetection (its pure-PyTorch attention), same
weights, for the plain model, with box refinement, and two-stage."""

import pytest
import torch

from vitlab.interop import load_weights, model_from_checkpoint
from vitlab.models import create_model

from .test_detr import padded_batch

VARIANTS = {"plain": {}, "box_refine": {"with_box_refine": True},
            "two_stage": {"with_box_refine": True, "two_stage": True}}


def huggingface_model(folder, **options):
    import transformers

    config = transformers.DeformableDetrConfig(
        use_timm_backbone=True, backbone="resnet50", use_pretrained_backbone=False, disable_custom_kernels=True,
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=96, decoder_ffn_dim=96, num_queries=12, two_stage_num_proposals=12, num_labels=5,
        encoder_n_points=3, decoder_n_points=2, dropout=0.0, **options)
    torch.manual_seed(0)
    model = transformers.DeformableDetrForObjectDetection(config).eval()
    with torch.no_grad():  # away from the initialisation's zeros and constants, so every weight shows
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_huggingface_folder_gives_the_same_outputs(tmp_path, variant):
    hf = huggingface_model(tmp_path, **VARIANTS[variant])
    ours = model_from_checkpoint(tmp_path).eval()
    c = ours.config
    assert (c.with_box_refine, c.two_stage, c.dim, c.num_heads, c.enc_points, c.dec_points, c.num_queries) == (
        variant != "plain", variant == "two_stage", 64, 4, 3, 2, 12)
    images, mask = padded_batch()
    for padding in (None, mask):
        with torch.no_grad():
            theirs = hf(pixel_values=images, pixel_mask=None if padding is None else (~padding).long())
            mine = ours(images, padding)
        torch.testing.assert_close(mine.logits, theirs.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(mine.pred_boxes, theirs.pred_boxes, atol=1e-4, rtol=1e-4)

    # transformers 5's in-memory names load too
    again = create_model("deformable_detr_resnet50", **{k: getattr(c, k) for k in (
        "dim", "num_heads", "enc_layers", "dec_layers", "ffn_dim", "num_queries", "num_classes", "enc_points",
        "dec_points", "with_box_refine", "two_stage", "dropout")}).eval()
    load_weights(again, hf.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(again(images, mask).logits, mine.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["plain", "box_refine"])
def test_a_padded_image_gets_the_detections_it_gets_alone(tmp_path, variant):
    """Past the backbone and its GroupNorm (which see the padding, in every implementation), padding changes
    nothing: the same maps with garbage around them, masked, give the same detections. Two-stage is left out:
    its proposals' scores of padded pixels compete in the top-k, in the paper's code too."""
    huggingface_model(tmp_path, **VARIANTS[variant])
    model = model_from_checkpoint(tmp_path).eval()
    images, _ = padded_batch(seed=3)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        sources, masks = model.levels(images[:1, :, :64, :80], None)  # 8 × 10, 4 × 5, 2 × 3, 1 × 2 maps
        padded = [torch.randn(1, s.shape[1], s.shape[2] + 3, s.shape[3] + 2, generator=generator) for s in sources]
        padded_masks = [torch.ones(1, p.shape[2], p.shape[3], dtype=torch.bool) for p in padded]
        for p, m, s in zip(padded, padded_masks, sources):
            p[..., :s.shape[2], :s.shape[3]] = s
            m[..., :s.shape[2], :s.shape[3]] = False
        alone, batched = model.detect(sources, masks), model.detect(padded, padded_masks)
    torch.testing.assert_close(batched.logits, alone.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(batched.pred_boxes, alone.pred_boxes, atol=1e-4, rtol=1e-4)


def test_forward_shapes_gradients_and_options():
    model = create_model("deformable_detr_resnet50", backbone="resnet18", dim=32, num_heads=4, enc_layers=1,
                         dec_layers=2, ffn_dim=64, num_queries=7, num_classes=3, with_box_refine=True,
                         two_stage=True)
    images, mask = padded_batch()
    out = model(images, mask)
    assert out.logits.shape == (2, 7, 3) and out.pred_boxes.shape == (2, 7, 4) and len(out.aux_outputs) == 1
    assert out.enc_outputs.logits.shape[:2] == out.enc_outputs.pred_boxes.shape[:2] == (2, 12 * 16 + 6 * 8 + 3 * 4
                                                                                         + 2 * 2)
    (out.logits.sum() + out.pred_boxes.sum() + out.aux_outputs[0].pred_boxes.sum()).backward()
    assert model.transformer.encoder[0].self_attn.sampling_offsets.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="two_stage needs with_box_refine"):
        create_model("deformable_detr_resnet50", two_stage=True)
    with pytest.raises(ValueError, match="divisible by 32"):
        create_model("deformable_detr_resnet50", dim=48)


def test_the_registered_paper_model_has_transformers_parameter_count():
    import transformers

    hf = transformers.DeformableDetrForObjectDetection(transformers.DeformableDetrConfig(
        use_timm_backbone=True, backbone="resnet50", use_pretrained_backbone=False, num_labels=91))
    ours = create_model("deformable_detr_resnet50")
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in hf.parameters()) == 40_069_665
    small = create_model("deformable_detr_small")
    assert small.config.num_queries == 25 and len(small.transformer.encoder) == len(small.transformer.decoder) == 3
