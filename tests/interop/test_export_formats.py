"""`vitlab export --format timm`: a run or a weights file written as timm's own hub folder, built by timm itself
(`create_model("hf-hub:...")` through the local Hub, `"local-dir:..."`) with logits equal to vitlab's, the run's
labels and its eval transform; what timm cannot build is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import vitlab
from vitlab.cli.main import main
from vitlab.interop import load_model

timm = pytest.importorskip("timm")
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_a_classification_run_for_timm_is_built_by_timm_with_its_logits_labels_and_transform(trained, local_hub,
                                                                                           tmp_path):
    from timm.data import create_transform, resolve_data_config

    from vitlab.data.preprocessing import Preprocessing

    run = trained["cls"]
    assert main(["export", str(run), "--format", "timm", "--out", str(tmp_path / "timm")]) == 0
    local_hub.publish_folder("me/vit-timm", tmp_path / "timm")
    theirs = timm.create_model("hf-hub:me/vit-timm", pretrained=True).eval()
    ours = load_model(run / "best.safetensors").eval()
    saved = json.loads((run / "config.json").read_text())
    torch.manual_seed(0)
    for shape in ((3, 1, 28, 28), (1, 1, 28, 28)):
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(theirs(x), ours(x), atol=1e-5, rtol=0)
    assert theirs.pretrained_cfg["label_names"] == saved["data"]["classes"]
    transform = create_transform(**resolve_data_config({}, model=theirs))
    recorded = Preprocessing.from_dict(saved["data"]["preprocessing"])
    for image in sorted(EXAMPLES.glob("*.png"))[:3]:
        with Image.open(image) as picture:
            torch.testing.assert_close(transform(picture), recorded(picture), atol=1e-6, rtol=0)


def test_a_distilled_deit_file_for_timm_is_timms_distilled_deit(tmp_path):
    torch.manual_seed(0)
    deit = vitlab.create_model("deit_mini_distilled_patch7_28", depth=2, labels=tuple("abcdefghij")).eval()
    vitlab.save_weights(deit, tmp_path / "deit.safetensors")
    assert main(["export", str(tmp_path / "deit.safetensors"), "--format", "timm", "--out",
                 str(tmp_path / "timm")]) == 0
    theirs = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
    assert type(theirs).__name__ == "VisionTransformerDistilled"
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(theirs(x), deit(x), atol=1e-5, rtol=0)
    assert theirs.pretrained_cfg["label_names"] == list("abcdefghij")


def test_what_timm_cannot_build_is_refused_and_nothing_written(tmp_path, capsys):
    torch.manual_seed(0)
    vitlab.save_weights(vitlab.create_model("setr_naive_small", depth=1), tmp_path / "setr.safetensors")
    assert main(["export", str(tmp_path / "setr.safetensors"), "--format", "timm", "--out", str(tmp_path / "a")]) == 2
    assert "a setr model has no timm form" in capsys.readouterr().err
    stem = vitlab.create_model("vit_mini_convstem_28")  # the default recipe's convolutional stem
    vitlab.save_weights(stem, tmp_path / "stem.safetensors")
    assert main(["export", str(tmp_path / "stem.safetensors"), "--format", "timm", "--out", str(tmp_path / "b")]) == 2
    assert "convolutional stem" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("a user's file")
    vitlab.save_weights(vitlab.create_model("vit_tiny_patch4_28", depth=1), tmp_path / "vit.safetensors")
    assert main(["export", str(tmp_path / "vit.safetensors"), "--format", "timm", "--out", str(taken)]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["setr.safetensors", "stem.safetensors", "taken",
                                                          "vit.safetensors"]


# ---- transformers ---------------------------------------------------------------------------------------------------
def test_a_classification_run_for_transformers_loads_with_its_logits_labels_and_processor(trained, tmp_path):
    import transformers

    from vitlab.data.preprocessing import Preprocessing

    run = trained["cls"]
    with pytest.warns(UserWarning, match="flooring an odd margin"):  # the run's crop rounds one (torchvision's)
        assert main(["export", str(run), "--format", "transformers", "--out", str(tmp_path / "hf")]) == 0
    theirs = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "hf").eval()
    ours = load_model(run / "best.safetensors").eval()
    saved = json.loads((run / "config.json").read_text())
    for shape in ((3, 1, 28, 28), (1, 1, 28, 28)):
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(theirs(pixel_values=x).logits, ours(x), atol=1e-5, rtol=0)
    assert [theirs.config.id2label[i] for i in range(10)] == saved["data"]["classes"]
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    recorded = Preprocessing.from_dict(saved["data"]["preprocessing"])
    for image in sorted(EXAMPLES.glob("*.png"))[:3]:
        with Image.open(image) as picture:
            torch.testing.assert_close(processor(picture, return_tensors="pt")["pixel_values"][0], recorded(picture),
                                       atol=1e-5, rtol=0)


def test_transformers_pipeline_on_an_exported_classifier_names_what_vitlab_predict_names(tmp_path, capsys):
    """An RGB ViT whose file records a crop transform (shorter side 40, the centre 32, an odd margin floored as
    transformers' processors place it), on photographs of other sizes: transformers' own pipeline gives vitlab
    predict's top classes, with its scores."""
    import transformers
    from skimage import data as skimage_data

    from vitlab.data.preprocessing import Preprocessing

    torch.manual_seed(0)
    names = ("cat", "rocket", "coffee", "astronaut")
    vit = vitlab.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=4,
                              labels=names).eval()
    rule = Preprocessing(resize=40, crop=32, interpolation="bicubic", mean=(0.5,) * 3, std=(0.5,) * 3,
                         crop_offset="floor")
    vitlab.save_weights(vit, tmp_path / "vit.safetensors", {"preprocessing": json.dumps(rule.to_dict())})
    photos = []
    for name in ("chelsea", "rocket", "coffee"):
        photos.append(tmp_path / f"{name}.png")
        Image.fromarray(getattr(skimage_data, name)()).save(photos[-1])
    assert main(["export", str(tmp_path / "vit.safetensors"), "--format", "transformers", "--out",
                 str(tmp_path / "hf")]) == 0
    classify = transformers.pipeline("image-classification", model=str(tmp_path / "hf"))
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "vit.safetensors"), *map(str, photos), "--json", "--top-k", "4"]) == 0
    for ours, photo in zip(json.loads(capsys.readouterr().out), photos):
        theirs = classify(str(photo), top_k=4)
        assert [t["label"] for t in theirs] == [o["class"] for o in ours["top_k"]]
        assert [t["score"] for t in theirs] == pytest.approx([o["probability"] for o in ours["top_k"]], abs=1e-4)


def test_a_distilled_deit_for_transformers_is_its_deit_with_teacher(tmp_path):
    import transformers

    torch.manual_seed(0)
    deit = vitlab.create_model("deit_mini_distilled_patch7_28", depth=2).eval()
    vitlab.save_weights(deit, tmp_path / "deit.safetensors")
    assert main(["export", str(tmp_path / "deit.safetensors"), "--format", "transformers", "--out",
                 str(tmp_path / "hf")]) == 0
    theirs = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == "DeiTForImageClassificationWithTeacher"
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(theirs(pixel_values=x).logits, deit(x), atol=1e-5, rtol=0)


# ---- diffusers ------------------------------------------------------------------------------------------------------
def test_a_vqgan_run_for_diffusers_is_a_vqmodel_with_equal_reconstructions(trained, tmp_path):
    """The suite's VQGAN run, and a VQGAN with attention inside its levels (diffusers' Attn*Block2D), each loaded by
    diffusers' own VQModel: the same reconstructions (to 1e-5) and the same codes."""
    from diffusers import VQModel

    run = trained["vqgan"]
    assert main(["export", str(run), "--format", "diffusers", "--out", str(tmp_path / "run")]) == 0
    torch.manual_seed(0)
    attended = vitlab.create_model("vqgan_small", ch_mult=(1, 2, 2), attn_resolutions=(8,)).eval()
    vitlab.save_weights(attended, tmp_path / "attended.safetensors")
    assert main(["export", str(tmp_path / "attended.safetensors"), "--format", "diffusers", "--out",
                 str(tmp_path / "attended")]) == 0
    for ours, folder in ((load_model(run / "best.safetensors"), "run"), (attended, "attended")):
        theirs = VQModel.from_pretrained(tmp_path / folder).eval()
        x = torch.rand(2, ours.config.in_chans, 32, 32) * 2 - 1
        with torch.no_grad():
            mine, latents = ours.eval()(x), theirs.encode(x).latents
            torch.testing.assert_close(theirs(x).sample, mine.reconstruction, atol=1e-5, rtol=0)
            _, _, (_, _, codes) = theirs.quantize(latents)
        assert torch.equal(codes.view(mine.indices.shape), mine.indices), folder
