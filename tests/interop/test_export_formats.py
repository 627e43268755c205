"""`vitlab export --format timm|transformers|diffusers`: a run or a weights file written in that library's own form
and loaded by the library itself (timm's `create_model("hf-hub:...")` through the local Hub or `"local-dir:..."`,
transformers' Auto classes and pipelines, diffusers' VQModel), with vitlab's outputs, labels and preprocessing; what
a library cannot build is refused by name."""

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
    vitlab.save_weights(vitlab.create_model("detr_small", enc_layers=1, dec_layers=1, pre_norm=True),
                        tmp_path / "detr.safetensors")
    assert main(["export", str(tmp_path / "detr.safetensors"), "--format", "transformers", "--out",
                 str(tmp_path / "c")]) == 2
    assert "transformers' DETR is post-norm" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detr.safetensors", "setr.safetensors", "stem.safetensors",
                                                          "taken", "vit.safetensors"]


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


# ---- transformers: the detectors ------------------------------------------------------------------------------------
def detections_agree(ours: list[dict], theirs: list[dict], scores_to: float = 1e-4, pixels_to: float = 1.01) -> None:
    """vitlab predict's detections (scores rounded to 4 places, boxes to 0.1 px) and transformers' pipeline's
    (boxes truncated to whole pixels): the same scores in order, and, wherever a score stands apart from its
    neighbours (so that the order is not a tie's), the same label and box."""
    ours, theirs = sorted(ours, key=lambda d: -d["score"]), sorted(theirs, key=lambda d: -d["score"])
    assert len(ours) == len(theirs) > 0
    scores = [d["score"] for d in ours]
    assert scores == pytest.approx([t["score"] for t in theirs], abs=scores_to)
    apart = [i for i in range(len(scores)) if all(abs(scores[i] - scores[j]) > 3 * scores_to for j in (i - 1, i + 1)
                                                  if 0 <= j < len(scores))]
    assert len(apart) >= 3
    for i in apart:
        box = theirs[i]["box"]
        assert ours[i]["label"] == theirs[i]["label"]
        assert ours[i]["box"] == pytest.approx([box["xmin"], box["ymin"], box["xmax"], box["ymax"]], abs=pixels_to)


def padded_pair(height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two images of (height, width), the second padded at the bottom and right."""
    images, padding = torch.randn(2, 3, height, width), torch.zeros(2, height, width, dtype=torch.bool)
    padding[1, height * 3 // 4:] = True
    padding[1, :, width * 2 // 3:] = True
    return images, padding


def assert_same_detector(theirs, ours, sizes=((64, 64), (48, 80), (80, 48))) -> None:
    """Logits to 1e-5, boxes to 1e-4, at every size, with and without padding."""
    for height, width in sizes:
        images, padding = padded_pair(height, width)
        for mask in (None, padding):
            with torch.no_grad():
                hf = theirs(pixel_values=images, pixel_mask=None if mask is None else (~mask).long())
                mine = ours(images, mask)
            torch.testing.assert_close(hf.logits, mine.logits, atol=1e-5, rtol=0)
            torch.testing.assert_close(hf.pred_boxes, mine.pred_boxes, atol=1e-4, rtol=0)


def test_a_detection_run_for_transformers_is_its_detr_with_its_boxes_labels_processor_and_pipeline(
        trained, tmp_path, capsys):
    import transformers

    from vitlab.data.preprocessing import Preprocessing

    run = trained["detr"]
    assert main(["export", str(run), "--format", "transformers", "--out", str(tmp_path / "hf")]) == 0
    theirs, loading = transformers.AutoModelForObjectDetection.from_pretrained(tmp_path / "hf",
                                                                               output_loading_info=True)
    assert type(theirs).__name__ == "DetrForObjectDetection"
    assert not any(loading.values())  # no weight missing, unexpected or resized
    ours = load_model(run / "best.safetensors").eval()
    torch.manual_seed(0)
    assert_same_detector(theirs.eval(), ours)
    saved = json.loads((run / "config.json").read_text())
    assert [theirs.config.id2label[i] for i in range(ours.config.num_classes)] == saved["data"]["classes"]

    pictures = sorted((trained["scenes"] / "images" / "test").glob("*.png"))
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    recorded = Preprocessing.from_dict(saved["data"]["preprocessing"])
    detect = transformers.pipeline("object-detection", model=str(tmp_path / "hf"))
    capsys.readouterr()
    assert main(["predict", str(run), *map(str, pictures), "--json", "--threshold", "0"]) == 0
    for path, answer in zip(pictures, json.loads(capsys.readouterr().out)):
        with Image.open(path) as picture:
            torch.testing.assert_close(processor(picture, return_tensors="pt")["pixel_values"][0],
                                       recorded(picture), atol=1e-5, rtol=0)
        detections_agree(answer["detections"], detect(str(path), threshold=0.0))


@pytest.mark.parametrize("variant", [{}, {"with_box_refine": True}, {"with_box_refine": True, "two_stage": True}],
                         ids=["plain", "box_refine", "two_stage"])
def test_a_deformable_detr_for_transformers_gives_its_logits_boxes_and_pipeline_answers(tmp_path, variant, capsys):
    """Each refining head its own (as training leaves them), every weight moved off its initial value so that
    every one shows; a file recording its labels and preprocessing, then transformers' pipeline on photographs of
    two shapes resized by the record (the longer side to 96)."""
    import transformers
    from skimage import data as skimage_data

    from vitlab.data.preprocessing import Preprocessing

    torch.manual_seed(0)
    names = tuple(f"thing{i}" for i in range(10))
    model = vitlab.create_model("deformable_detr_small", enc_layers=1, dec_layers=2, labels=names, **variant).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    rule = Preprocessing(max_size=96, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), resampler="float")
    vitlab.save_weights(model, tmp_path / "ddetr.safetensors", {"preprocessing": json.dumps(rule.to_dict())})
    with pytest.warns(UserWarning, match="less than one grey level"):  # a detection run's float resizing
        assert main(["export", str(tmp_path / "ddetr.safetensors"), "--format", "transformers", "--out",
                     str(tmp_path / "hf")]) == 0
    theirs, loading = transformers.AutoModelForObjectDetection.from_pretrained(tmp_path / "hf",
                                                                               output_loading_info=True)
    assert not any(loading.values())
    assert (theirs.config.with_box_refine, theirs.config.two_stage) == (model.config.with_box_refine,
                                                                        model.config.two_stage)
    assert_same_detector(theirs.eval(), model)
    if variant:
        return  # the pipeline's answers follow from the outputs; once is enough
    photos = [tmp_path / "landscape.png", tmp_path / "portrait.png"]
    Image.fromarray(skimage_data.chelsea()).save(photos[0])
    Image.fromarray(skimage_data.rocket()).transpose(Image.Transpose.ROTATE_90).save(photos[1])
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    detect = transformers.pipeline("object-detection", model=str(tmp_path / "hf"))
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "ddetr.safetensors"), *map(str, photos), "--json", "--threshold",
                 "0"]) == 0
    grey_level = torch.tensor(rule.std)[:, None, None] * 255
    for path, answer in zip(photos, json.loads(capsys.readouterr().out)):
        with Image.open(path) as picture:
            theirs = processor(picture, return_tensors="pt")["pixel_values"][0]
            assert theirs.shape[1:] == (96, 64) if "portrait" in path.name else theirs.shape[2] == 96
            assert ((theirs - rule(picture)).abs() * grey_level).max() < 1
        # inputs a fraction of a grey level apart: scores to 1e-3, boxes to 2 px of a 96-pixel side's rescaling
        detections_agree(answer["detections"], detect(str(path), threshold=0.0), scores_to=1e-3, pixels_to=2 *
                         max(picture.size) / 96)


def test_a_one_channel_run_exported_for_transformers_answers_in_vitlab_as_the_run(trained, tmp_path, capsys):
    """The grey Fashion-MNIST run in transformers' form reads back in vitlab as a one-channel model with its
    processor's rule (one mean, no RGB conversion): the same classes, in the same order, for a photo of a pullover
    (the probabilities to the resizing's rounding: the processor resizes as transformers does)."""
    run = trained["cls"]
    assert main(["export", str(run), "--format", "transformers", "--out", str(tmp_path / "hf")]) == 0
    image = str(EXAMPLES / "test1-pullover.png")
    answers = []
    for source in (run, tmp_path / "hf"):
        capsys.readouterr()
        assert main(["predict", str(source), image, "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)[0]["top_k"])
    assert [c["class"] for c in answers[1]] == [c["class"] for c in answers[0]]
    assert [c["probability"] for c in answers[1]] == pytest.approx([c["probability"] for c in answers[0]],
                                                                  abs=2e-3)
