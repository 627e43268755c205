"""Checkpoints in other libraries' formats load into vitlab and give those libraries' outputs."""

import os
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import vitlab
from vitlab.interop import load_model, load_weights, model_from_checkpoint, read_checkpoint

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")


def logits_close(ours, reference_logits, images, atol=1e-5):
    with torch.no_grad():
        out = ours.eval()(images)
    torch.testing.assert_close(out, reference_logits, atol=atol, rtol=1e-5)
    return (out - reference_logits).abs().max().item()


# the files other than safetensors (DeiT's wrapped state dict, a plain .bin) are read alike at every size: they are
# proven on the two small models, and the base models' 330 MB are not written twice more
OTHER_FILES_ON = ("vit_tiny_patch16_224", "vit_small_patch16_224")


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224",
                                  "vit_base_patch32_224"])
def test_timm_checkpoints(name, tmp_path):
    torch.manual_seed(0)
    reference = timm.create_model(name, num_classes=1000).eval()
    torch.nn.init.normal_(reference.head.weight, std=0.02)  # timm may zero the head; make it count
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference(images)
    state = reference.state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    if name in OTHER_FILES_ON:
        torch.save({"model": state}, tmp_path / "deit_style.pth")  # DeiT's release wraps the state dict
        torch.save(state, tmp_path / "pytorch_model.bin")
    from_safetensors = vitlab.create_model(name, weights=str(tmp_path / "model.safetensors"))
    logits_close(from_safetensors, expected, images)
    assert read_checkpoint(tmp_path / "model.safetensors")[1].format == "timm"
    if name not in OTHER_FILES_ON:
        return
    # the other two files hold the same tensors: loaded, every parameter and buffer equals the one proven above
    model = vitlab.create_model(name)
    load_weights(model, tmp_path / "pytorch_model.bin")
    for other in (vitlab.create_model(name, weights=str(tmp_path / "deit_style.pth")), model):
        ours = other.state_dict()
        assert ours.keys() == from_safetensors.state_dict().keys()
        assert all(torch.equal(ours[key], value) for key, value in from_safetensors.state_dict().items())
    if name == "vit_tiny_patch16_224":  # without a name, the architecture is worked out from the shapes
        logits_close(model_from_checkpoint(tmp_path / "model.safetensors"), expected, images)


def hf_model(num_labels=10, classify=True, **overrides):
    config = transformers.ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                                    intermediate_size=768, image_size=224, patch_size=16, num_labels=num_labels,
                                    **overrides)
    cls = transformers.ViTForImageClassification if classify else transformers.ViTModel
    kwargs = {} if classify else {"add_pooling_layer": False}
    return cls(config, **kwargs).eval()


def test_huggingface_classifier_folder_and_file(tmp_path):
    torch.manual_seed(0)
    reference = hf_model()
    reference.save_pretrained(tmp_path / "hf")
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference(pixel_values=images).logits
    model = vitlab.create_model("vit_tiny_patch16_224", num_classes=10, weights=str(tmp_path / "hf"))
    difference = logits_close(model, expected, images)
    assert all(m.eps == 1e-12 for m in model.modules() if isinstance(m, torch.nn.LayerNorm))  # from config.json
    assert model.config.norm_eps == 1e-12
    logits_close(vitlab.create_model("vit_tiny_patch16_224", num_classes=10,
                                     weights=str(tmp_path / "hf" / "model.safetensors")), expected, images)
    # save_pretrained writes the transformers-4 key layout; the in-memory names of transformers 5 load too
    (tmp_path / "v5").mkdir()
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, tmp_path / "v5" / "model.safetensors")
    reference.config.to_json_file(tmp_path / "v5" / "config.json")
    logits_close(vitlab.create_model("vit_tiny_patch16_224", num_classes=10, weights=str(tmp_path / "v5")),
                 expected, images)
    converted = model_from_checkpoint(tmp_path / "hf")  # the architecture from config.json
    assert (converted.config.dim, converted.config.num_heads, converted.num_classes) == (192, 3, 10)
    logits_close(converted, expected, images)
    assert difference < 1e-5


def test_huggingface_backbone_and_the_v4_key_layout(tmp_path):
    torch.manual_seed(1)
    reference = hf_model(classify=False, layer_norm_eps=1e-6)
    images = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        expected = reference(pixel_values=images).last_hidden_state
    # the layout of transformers 4 and of most files on the Hub
    v4 = {}
    for key, value in reference.state_dict().items():
        key = key.replace("layers.", "encoder.layer.").replace("attention.q_proj", "attention.attention.query")
        key = key.replace("attention.k_proj", "attention.attention.key").replace(
            "attention.v_proj", "attention.attention.value").replace("attention.o_proj", "attention.output.dense")
        key = key.replace("mlp.fc1", "intermediate.dense").replace("mlp.fc2", "output.dense")
        v4[key] = value.contiguous()
    save_file(v4, tmp_path / "model.safetensors")
    reference.config.to_json_file(tmp_path / "config.json")
    model = vitlab.create_model("vit_tiny_patch16_224", num_classes=0, weights=str(tmp_path))
    with torch.no_grad():
        torch.testing.assert_close(model.eval().forward_features(images), expected, atol=1e-5, rtol=1e-5)


def google_npz(path, dim=64, depth=2, heads=4, patch=16, img=32, classes=5, in_chans=3, seed=0):
    """Random arrays in the layout of the original JAX ViT release."""
    rng = np.random.default_rng(seed)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    hd, grid = dim // heads, img // patch
    w = {"embedding/kernel": r(patch, patch, in_chans, dim), "embedding/bias": r(dim), "cls": r(1, 1, dim),
         "Transformer/posembed_input/pos_embedding": r(1, 1 + grid * grid, dim),
         "Transformer/encoder_norm/scale": 1 + r(dim), "Transformer/encoder_norm/bias": r(dim),
         "head/kernel": r(dim, classes), "head/bias": r(classes)}
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        w.update({b + "LayerNorm_0/scale": 1 + r(dim), b + "LayerNorm_0/bias": r(dim),
                  b + "LayerNorm_2/scale": 1 + r(dim), b + "LayerNorm_2/bias": r(dim),
                  a + "out/kernel": r(heads, hd, dim), a + "out/bias": r(dim),
                  b + "MlpBlock_3/Dense_0/kernel": r(dim, 4 * dim), b + "MlpBlock_3/Dense_0/bias": r(4 * dim),
                  b + "MlpBlock_3/Dense_1/kernel": r(4 * dim, dim), b + "MlpBlock_3/Dense_1/bias": r(dim)})
        for n in ("query", "key", "value"):
            w[a + n + "/kernel"] = r(dim, heads, hd)
            w[a + n + "/bias"] = r(heads, hd)
    np.savez(path, **w)
    return path


def test_google_npz_equals_timms_npz_loader(tmp_path):
    path = google_npz(tmp_path / "ViT-tiny.npz")
    reference = timm.create_model("vit_tiny_patch16_224", img_size=32, embed_dim=64, depth=2, num_heads=4,
                                  num_classes=5).eval()
    timm.models.vision_transformer._load_weights(reference, str(path))
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = reference(images)
    model = model_from_checkpoint(path)  # everything, heads included, from the arrays' shapes
    assert (model.config.dim, model.config.depth, model.config.num_heads, model.num_classes) == (64, 2, 4, 5)
    logits_close(model, expected, images)
    named = vitlab.create_model("vit_tiny_patch16_224", img_size=32, dim=64, depth=2, num_heads=4, num_classes=5)
    logits_close(load_weights(named, path), expected, images)


def test_checkpoint_at_another_resolution_is_resampled(tmp_path):
    torch.manual_seed(0)
    reference = timm.create_model("vit_tiny_patch16_224", depth=1, num_classes=10)
    save_file(reference.state_dict(), tmp_path / "m.safetensors")
    model = vitlab.create_model("vit_tiny_patch16_224", depth=1, num_classes=10, img_size=384,
                                weights=str(tmp_path / "m.safetensors"))
    expected = timm.layers.resample_abs_pos_embed(reference.pos_embed.detach(), (24, 24), num_prefix_tokens=1)
    torch.testing.assert_close(model.pos_embed.detach(), expected, atol=1e-5, rtol=1e-5)


class RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"model": RunsACommand(marker)}, f)
    model = vitlab.create_model("vit_tiny_patch4_28", depth=1)
    with pytest.raises(ValueError, match="never unpickles arbitrary objects"):
        load_weights(model, tmp_path / "evil.pth")
    assert not marker.exists()


def test_convert_and_export_commands(tmp_path, capsys):
    from vitlab.cli.main import main

    path = google_npz(tmp_path / "g.npz", img=32)
    assert main(["convert", str(path), str(tmp_path / "g.safetensors")]) == 0
    assert "64 wide, 2 deep, 4 heads" in capsys.readouterr().out
    model = load_model(tmp_path / "g.safetensors").eval()
    reference = model_from_checkpoint(path).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images))
    assert main(["convert", str(tmp_path / "missing.npz"), str(tmp_path / "x.safetensors")]) == 2


@pytest.mark.parametrize("fmt", ["onnx", "exported-program"])
def test_export_with_dynamic_batch(fmt, tmp_path, capsys):
    from vitlab.cli.main import main
    from vitlab.interop import save_weights

    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch4_28", depth=2).eval()
    save_weights(model, tmp_path / "run" / "last.safetensors")
    assert main(["export", str(tmp_path / "run"), "--format", fmt]) == 0
    for batch in (1, 5):
        images = torch.randn(batch, 1, 28, 28)
        with torch.no_grad():
            expected = model(images)
        if fmt == "onnx":
            ort = pytest.importorskip("onnxruntime")
            session = ort.InferenceSession(str(tmp_path / "run" / "model.onnx"))
            out = torch.from_numpy(session.run(["logits"], {"images": images.numpy()})[0])
        else:
            program = torch.export.load(str(tmp_path / "run" / "model.pt2"))
            out = program.module()(images)
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
