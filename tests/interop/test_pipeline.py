"""A model by name on a user's own images, against the reference libraries on the same weights (random-weight
checkpoints saved by timm and transformers with their own label maps and image processors, served by a local Hub):
`vitlab predict NAME photo --json` and `vitlab.pipeline` name the same classes with the same scores as
transformers' pipeline and timm; a detector's boxes equal transformers' post-processing in pixels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitlab
from vitlab.cli.main import main

from ..hub_publish import publish_timm, publish_transformers

skimage_data = pytest.importorskip("skimage.data")
CLASSES = ("tabby", "tiger", "lynx", "rocket", "teapot")


@pytest.fixture(scope="module")
def photo_files(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("photos")
    cat, rocket = Image.fromarray(skimage_data.chelsea()), Image.fromarray(skimage_data.rocket())
    paths = [folder / "cat.jpg", folder / "rocket.png", folder / "small.png"]
    cat.save(paths[0], quality=95)
    rocket.save(paths[1])
    cat.resize((90, 61)).save(paths[2])
    return paths


def hf_vit(local_hub, repo: str):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                       intermediate_size=96, id2label=dict(enumerate(CLASSES)),
                       label2id={name: i for i, name in enumerate(CLASSES)})
    model = ViTForImageClassification(config).eval()
    processor = ViTImageProcessor(size={"height": 32, "width": 32})
    publish_transformers(local_hub, repo, model, processor=processor)
    return model, processor


def test_a_transformers_classifier_by_name_answers_as_transformers_pipeline(local_hub, photo_files, capsys):
    from transformers import pipeline as hf_pipeline

    repo = "vitlab-test/hf-vit-pets"
    hf_vit(local_hub, repo)
    theirs = hf_pipeline("image-classification", model=repo, top_k=5)
    assert main(["predict", f"hf-hub:{repo}", *map(str, photo_files), "--json", "--top-k", "5"]) == 0
    answers = json.loads(capsys.readouterr().out)
    ours = vitlab.pipeline(model=f"hf-hub:{repo}")
    assert ours.task == "classification" and ours.labels == list(CLASSES)
    batch = ours([str(p) for p in photo_files])  # several sizes, one batch
    for path, answer, in_batch in zip(photo_files, answers, batch):
        reference = theirs(Image.open(path))
        assert answer["top_k"][0]["class"] == reference[0]["label"] == in_batch[0]["label"]
        assert [item["label"] for item in in_batch] == [item["label"] for item in reference]
        np.testing.assert_allclose([item["score"] for item in in_batch], [item["score"] for item in reference],
                                   atol=1e-5)


def test_a_timm_classifier_by_name_answers_as_timm_does(local_hub, photo_files, capsys):
    import timm
    from safetensors.torch import load
    from timm.data import create_transform, resolve_data_config

    repo = "vitlab-test/timm-vit-pets"
    torch.manual_seed(0)
    publish_timm(local_hub, repo, "vit_tiny_patch16_224", img_size=48, depth=2, num_classes=5,
                 model_config={"label_names": list(CLASSES)})
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=48, depth=2,
                                  num_classes=5).eval()
    reference.load_state_dict(load(local_hub.file(repo, "model.safetensors")))
    transform = create_transform(**resolve_data_config({}, pretrained_cfg=json.loads(
        local_hub.file(repo, "config.json"))["pretrained_cfg"]))
    assert main(["predict", f"hf-hub:{repo}", *map(str, photo_files), "--json", "--top-k", "2"]) == 0
    answers = json.loads(capsys.readouterr().out)
    with torch.no_grad():
        for path, answer in zip(photo_files, answers):
            probs = reference(transform(Image.open(path).convert("RGB"))[None]).softmax(-1)[0]
            top = probs.topk(2)
            assert [item["class"] for item in answer["top_k"]] == [CLASSES[i] for i in top.indices.tolist()]
            np.testing.assert_allclose([item["probability"] for item in answer["top_k"]], top.values.numpy(),
                                       atol=1e-5)


def hf_detr(local_hub, repo: str):
    import transformers

    torch.manual_seed(0)
    resnet = transformers.ResNetConfig(depths=[2, 2, 2, 2], layer_type="basic", hidden_sizes=[64, 128, 256, 512],
                                       out_features=["stage4"])  # a ResNet-18, what vitlab's DETR builds
    names = ("person", "bicycle", "car", "cat")
    config = transformers.DetrConfig(use_timm_backbone=False, backbone_config=resnet, use_pretrained_backbone=False,
                                     encoder_layers=1, decoder_layers=1, d_model=32, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, encoder_attention_heads=2, decoder_attention_heads=2,
                                     num_queries=10, auxiliary_loss=False, id2label=dict(enumerate(names)),
                                     label2id={name: i for i, name in enumerate(names)})
    model = transformers.DetrForObjectDetection(config).eval()
    processor = transformers.DetrImageProcessor(size={"shortest_edge": 96, "longest_edge": 160})
    publish_transformers(local_hub, repo, model, processor=processor)
    return model, processor, names


def test_a_transformers_detector_by_name_gives_transformers_boxes_in_pixels(local_hub, photo_files, capsys):
    from transformers import pipeline as hf_pipeline

    repo = "vitlab-test/hf-detr-street"
    model, processor, names = hf_detr(local_hub, repo)
    detect = vitlab.pipeline(model=f"hf-hub:{repo}", threshold=0.0)
    assert detect.task == "detection" and detect.labels == list(names)
    pictures = [Image.open(path).convert("RGB") for path in photo_files]
    answers = detect(pictures)  # three sizes: grouped by their preprocessed size
    for picture, answer in zip(pictures, answers):
        with torch.no_grad():
            outputs = model(**processor(picture, return_tensors="pt"))
        theirs = processor.post_process_object_detection(outputs, threshold=0.0,
                                                         target_sizes=[(picture.height, picture.width)])[0]
        order = theirs["scores"].argsort(descending=True)
        mine = sorted(answer, key=lambda d: -d["score"])
        assert [d["label"] for d in mine] == [names[i] for i in theirs["labels"][order].tolist()]
        np.testing.assert_allclose([d["score"] for d in mine], theirs["scores"][order].numpy(), atol=1e-5)
        np.testing.assert_allclose([d["box"] for d in mine], theirs["boxes"][order].numpy(), atol=1e-4)
    best = hf_pipeline("object-detection", model=repo)(pictures[0], threshold=0.0)
    top = max(best, key=lambda d: d["score"])
    assert max(answers[0], key=lambda d: d["score"])["label"] == top["label"]
    assert main(["predict", f"hf-hub:{repo}", str(photo_files[0]), "--json", "--threshold", "0"]) == 0
    printed = json.loads(capsys.readouterr().out)[0]["detections"]
    assert {d["label"] for d in printed} <= set(names) and len(printed) == len(answers[0])


def test_inputs_of_every_kind_give_the_same_answer(local_hub, photo_files):
    hf_vit(local_hub, "vitlab-test/hf-vit-kinds")
    classify = vitlab.pipeline(model="hf-hub:vitlab-test/hf-vit-kinds", top_k=2)
    picture = Image.open(photo_files[0])
    array = np.asarray(picture)
    kinds = [str(photo_files[0]), photo_files[0], picture, array, torch.from_numpy(array.copy()).permute(2, 0, 1),
             torch.from_numpy(array.copy()).permute(2, 0, 1).float() / 255]
    answers = [classify(kind) for kind in kinds]
    assert all(answer == answers[0] for answer in answers[:5]) and len(answers[0]) == 2
    assert answers[5][0]["label"] == answers[0][0]["label"]
    with pytest.raises(ValueError, match="not URLs"):
        classify("https://example.com/cat.jpg")
    with pytest.raises(TypeError, match="takes top_k"):
        classify(picture, threshold=0.5)


def test_bad_names_say_what_to_do(local_hub, capsys, tmp_path):
    assert main(["predict", "vit_base_patch16_224.augreg2_in21k_ft_in2k", "x.png"]) == 2
    assert "did you mean vit_base_patch16_224.augreg2_in21k_ft_in1k" in capsys.readouterr().err
    hf_vit(local_hub, "vitlab-test/hf-vit-task")
    assert main(["predict", "hf-hub:vitlab-test/hf-vit-task", "x.png", "--task", "detection"]) == 2
    assert "which does classification; not --task detection" in capsys.readouterr().err
    assert main(["eval", "hf-hub:vitlab-test/hf-vit-task"]) == 2
    assert "give the data to score it on, --data DIR" in capsys.readouterr().err
    assert main(["predict", "hf-hub:vitlab-test/hf-vit-task", "x.png", "--weights", "best"]) == 2
    assert "--weights picks the weights of a run folder" in capsys.readouterr().err


def test_a_model_by_name_runs_on_onnxruntime_with_its_labels_in_the_graph(local_hub, photo_files):
    """The graph of a named model is exported once into the hub cache, names its classes in its metadata, and
    answers as torch does."""
    from vitlab.runtime.export import read_metadata

    hf_vit(local_hub, "vitlab-test/hf-vit-onnx")
    name = "hf-hub:vitlab-test/hf-vit-onnx"
    on_torch = vitlab.pipeline(model=name)([str(p) for p in photo_files])
    on_onnx = vitlab.pipeline(model=name, runtime="onnxruntime")([str(p) for p in photo_files])
    for mine, theirs in zip(on_onnx, on_torch):
        assert [item["label"] for item in mine] == [item["label"] for item in theirs]
        np.testing.assert_allclose([i["score"] for i in mine], [i["score"] for i in theirs], atol=1e-4)
    graphs = list((local_hub.cache / "vitlab--graphs").rglob("*.onnx"))
    assert len(graphs) == 1
    assert read_metadata(graphs[0])["labels"] == list(CLASSES)


def test_a_model_by_name_is_served_beside_a_run(local_hub, photo_files):
    from vitlab.serve.runs import load_runs

    hf_vit(local_hub, "vitlab-test/hf-vit-served")
    (served,) = load_runs(["hf-hub:vitlab-test/hf-vit-served"])
    assert served.name == "vitlab-test-hf-vit-served" and served.kind == "classification"
    assert served.describe()["classes"] == list(CLASSES)
    answer = served.task.answer(served.model, served.saved, photo_files[0], photo_files[0].parent, served.context,
                                attention=False)
    assert answer["top_k"][0]["class"] == vitlab.pipeline(model="hf-hub:vitlab-test/hf-vit-served")(
        str(photo_files[0]))[0]["label"]


def test_a_detector_by_name_is_scored_on_a_users_coco_folder_matching_categories_by_name(local_hub, tmp_path,
                                                                                        capsys):
    """`vitlab eval NAME --data DIR`: the folder's categories (ids 5 and 9 here) matched to the model's by name; its
    detections (the results file) are transformers' own with the same weights, processor and mapping, and its AP
    pycocotools' on those."""
    from pathlib import Path

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from vitlab.tasks.sources import open_source

    repo = "vitlab-test/hf-detr-eval"
    model, processor, names = hf_detr(local_hub, repo)
    mini = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
    assert main(["make-scenes", "--out", str(tmp_path / "scenes"), "--train", "0", "--val", "5", "--test", "0",
                 "--size", "96", "--scale", "24-40", "--data-dir", str(mini), "--allow-partial-data"]) == 0
    annotations = tmp_path / "scenes" / "annotations" / "instances_val.json"
    coco = json.loads(annotations.read_text())
    kept = sorted({a["category_id"] for a in coco["annotations"]})[:2]
    renamed = {kept[0]: (5, "cat"), kept[1]: (9, "car")}
    coco["categories"] = [{"id": i, "name": n} for i, n in renamed.values()]
    coco["annotations"] = [{**a, "category_id": renamed[a["category_id"]][0]} for a in coco["annotations"]
                           if a["category_id"] in renamed]
    annotations.write_text(json.dumps(coco))

    ground_truth = COCO(str(annotations))
    theirs = []
    for image in coco["images"]:
        picture = Image.open(tmp_path / "scenes" / "images" / "val" / image["file_name"]).convert("RGB")
        with torch.no_grad():
            found = processor.post_process_object_detection(model(**processor(picture, return_tensors="pt")),
                                                            threshold=0.0, target_sizes=[(picture.height,
                                                                                          picture.width)])[0]
        for score, label, (x0, y0, x1, y1) in zip(found["scores"].tolist(), found["labels"].tolist(),
                                                  found["boxes"].tolist()):
            category = {"cat": 5, "car": 9}.get(names[label])
            if category is not None:
                theirs.append({"image_id": image["id"], "category_id": category, "score": score,
                               "bbox": [x0, y0, x1 - x0, y1 - y0]})
    # the detections themselves (a random detector's AP is 0 either way): vitlab's results file against transformers'
    (tmp_path / "out").mkdir()
    source = open_source(f"hf-hub:{repo}")  # as `vitlab eval NAME --data DIR` opens it
    ours = source.task.evaluate_run(source.model, source.saved, tmp_path / "out", data=str(tmp_path / "scenes"))
    assert ours["split"] == "val" and [row["category_id"] for row in ours["per_class"]] == [5, 9]
    written = json.loads(Path(ours["results_file"]).read_text())
    key = lambda d: (d["image_id"], -d["score"])  # noqa: E731
    written, theirs = sorted(written, key=key), sorted(theirs, key=key)
    assert [(d["image_id"], d["category_id"]) for d in written] == [(d["image_id"], d["category_id"]) for d in theirs]
    np.testing.assert_allclose([d["score"] for d in written], [d["score"] for d in theirs], atol=1e-4)
    np.testing.assert_allclose([d["bbox"] for d in written], [d["bbox"] for d in theirs], atol=0.01)
    evaluator = COCOeval(ground_truth, ground_truth.loadRes(theirs), iouType="bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    assert ours["map"] == pytest.approx(evaluator.stats[0], abs=1e-4)

    coco["categories"].append({"id": 11, "name": "zebra"})
    annotations.write_text(json.dumps(coco))
    capsys.readouterr()
    assert main(["eval", f"hf-hub:{repo}", "--data", str(tmp_path / "scenes")]) == 2
    assert "does not know 1 of the categories" in capsys.readouterr().err


def test_a_classifier_by_name_is_scored_on_a_users_folder_among_its_classes(local_hub, tmp_path, capsys):
    """`vitlab eval NAME --data DIR` on a folder of two of the model's five classes: each image is classified among
    those two (the model's columns for them, by name), as transformers' model answers on its own preprocessing."""
    from transformers import pipeline as hf_pipeline

    repo = "vitlab-test/hf-vit-eval"
    hf_vit(local_hub, repo)
    photos = {"rocket": skimage_data.rocket(), "tabby": skimage_data.chelsea(), "teapot": skimage_data.coffee()}
    for name in ("rocket", "tabby"):
        folder = tmp_path / "mine" / "test" / name
        folder.mkdir(parents=True)
        for i, size in enumerate((40, 64, 97)):
            Image.fromarray(photos[name]).resize((size, size * 3 // 4)).save(folder / f"{i}.png")
    assert main(["eval", f"hf-hub:{repo}", "--data", str(tmp_path / "mine"), "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    reference = hf_pipeline("image-classification", model=repo, top_k=5)
    right = 0
    for name in ("rocket", "tabby"):
        for path in sorted((tmp_path / "mine" / "test" / name).glob("*.png")):
            scores = {item["label"]: item["score"] for item in reference(Image.open(path))}
            right += max(("rocket", "tabby"), key=scores.get) == name
    assert ours["classes"] == ["rocket", "tabby"] and ours["num_images"] == 6 and ours["split"] == "test"
    assert ours["accuracy"] == pytest.approx(right / 6)
    (tmp_path / "mine" / "test" / "zebra").mkdir()
    Image.fromarray(photos["teapot"]).save(tmp_path / "mine" / "test" / "zebra" / "0.png")
    assert main(["eval", f"hf-hub:{repo}", "--data", str(tmp_path / "mine")]) == 2
    assert "does not know 1 of the folder's classes: zebra" in capsys.readouterr().err


def test_attention_maps_of_a_model_by_name_through_its_own_preprocessing(local_hub, photo_files, tmp_path, capsys):
    hf_vit(local_hub, "vitlab-test/hf-vit-attention")
    name = "hf-hub:vitlab-test/hf-vit-attention"
    assert main(["attention", name, str(photo_files[0]), "--out", str(tmp_path / "maps")]) == 0
    top = vitlab.pipeline(model=name)(str(photo_files[0]))[0]["label"]
    assert f"predicted {top}" in capsys.readouterr().out
    assert Image.open(tmp_path / "maps" / "cat_attention.png").size[1] >= 224


def test_a_restorer_and_a_vqgan_by_weights_file_restore_and_reconstruct(photo_files, tmp_path, capsys):
    """`vitlab restore` and `vitlab reconstruct` take a vitlab weights file as they take a run: the restorer's
    degradations are its heads (the answer names them), the VQGAN's images its own size."""
    from vitlab.tasks.restoration.inference import restore_image

    torch.manual_seed(0)
    ipt = vitlab.create_model("ipt_small", degradations=("sr2", "denoise30"), num_layers=1).eval()
    vitlab.save_weights(ipt, tmp_path / "ipt.safetensors")
    small = tmp_path / "small.png"
    Image.open(photo_files[2]).convert("RGB").save(small)
    assert main(["restore", str(tmp_path / "ipt.safetensors"), str(small), "--degradation", "sr2", "--out",
                 str(tmp_path / "restored"), "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    expected = restore_image(ipt, torch.from_numpy(np.asarray(Image.open(small)).copy()).permute(2, 0, 1), "sr2")
    restored = np.asarray(Image.open(item["output"]))
    assert item["degradation"] == "sr2" and restored.shape[:2] == (122, 180)
    assert np.array_equal(restored, expected.permute(1, 2, 0).numpy())
    assert main(["restore", str(tmp_path / "ipt.safetensors"), str(small), "--degradation", "derain", "--out",
                 str(tmp_path / "restored")]) == 2
    assert "sr2, denoise30" in capsys.readouterr().err
    # the pipeline answers with the picture the command writes, for a path as for an array, any degradation named
    restore = vitlab.pipeline(model=str(tmp_path / "ipt.safetensors"), degradation="sr2")
    by_path, by_array = restore([str(small), np.asarray(Image.open(small))])
    assert np.array_equal(np.asarray(by_path), restored) and np.array_equal(np.asarray(by_array), restored)
    denoised = restore(str(small), degradation="denoise30")
    assert denoised.size == Image.open(small).size  # the denoiser keeps the size, sr2 doubles it
    with pytest.raises(ValueError, match="sr2, denoise30"):
        restore(str(small), degradation="derain")

    vqgan = vitlab.create_model("vqgan_small").eval()
    vitlab.save_weights(vqgan, tmp_path / "vqgan.safetensors")
    assert main(["reconstruct", str(tmp_path / "vqgan.safetensors"), str(small), "--out", str(tmp_path / "rec"),
                 "--json"]) == 0
    (rebuilt,) = json.loads(capsys.readouterr().out)
    assert Path(rebuilt["out"]).is_file() and np.asarray(rebuilt["codes"]).shape == (8, 8)
    # the pipeline's answer: the codes the command reports, and the reconstruction of the model's own forward pass
    answer = vitlab.pipeline(model=str(tmp_path / "vqgan.safetensors"))(Image.open(small))
    assert answer["codes"] == rebuilt["codes"]
    side, grey = vqgan.config.resolution, vqgan.config.in_chans == 1
    picture = Image.open(small).convert("L" if grey else "RGB").resize((side, side), Image.BICUBIC)
    pixels = torch.from_numpy(np.asarray(picture).copy()).reshape(side, side, -1)
    with torch.no_grad():
        by_hand = vqgan(pixels.permute(2, 0, 1)[None].float() / 127.5 - 1).reconstruction[0]
    by_hand = (((by_hand + 1) / 2).clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
    assert np.array_equal(np.asarray(answer["reconstruction"]), by_hand[..., 0] if grey else by_hand)
    # a file that records its release's preprocessing (taming's: the shorter side, the centre square, [-1, 1])
    # is read as it says, not squashed
    from vitlab.data.preprocessing import Preprocessing

    rule = Preprocessing(resize=side, crop=side, antialias=False, mean=(0.5,), std=(0.5,), channels=3 - 2 * grey)
    vitlab.save_weights(vqgan, tmp_path / "taming.safetensors", {"preprocessing": json.dumps(rule.to_dict())})
    answer = vitlab.pipeline(model=str(tmp_path / "taming.safetensors"))(Image.open(small))
    with torch.no_grad():
        by_hand = vqgan(rule(Image.open(small))[None]).reconstruction[0]
    by_hand = (((by_hand + 1) / 2).clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
    assert np.array_equal(np.asarray(answer["reconstruction"]), by_hand[..., 0] if grey else by_hand)


def test_a_segmenter_by_weights_file_answers_with_a_mask_of_its_named_classes(photo_files, tmp_path, capsys):
    torch.manual_seed(0)
    names = ("sky", "road", "tree")
    setr = vitlab.create_model("setr_naive_small", num_classes=3, labels=names).eval()
    vitlab.save_weights(setr, tmp_path / "setr.safetensors")
    answer = vitlab.pipeline(model=str(tmp_path / "setr.safetensors"))(str(photo_files[2]))
    assert answer["mask"].size == Image.open(photo_files[2]).size and answer["labels"] == dict(enumerate(names))
    assert set(np.unique(np.asarray(answer["mask"]))) <= {0, 1, 2} and sum(answer["areas"].values()) == pytest.approx(1)
    assert main(["predict", str(tmp_path / "setr.safetensors"), str(photo_files[2]), "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["classes"] == {name: round(share, 4) for name, share in answer["areas"].items()}


def test_a_segmenter_answers_through_its_recorded_preprocessing_at_the_images_own_size(tmp_path):
    """A SETR whose file records a release's kind of preprocessing (mmsegmentation's keep-ratio rescale, no
    antialiasing): the image is rescaled, the class scores resized back to the image's own size (bilinear, as
    mmsegmentation's test does), each pixel its best class. By hand: the model's forward on the rescaled image, which
    is the model's crop (one window)."""
    import torch.nn.functional as F

    from vitlab.data.coco import IMAGENET_MEAN, IMAGENET_STD
    from vitlab.data.preprocessing import Preprocessing

    torch.manual_seed(0)
    setr = vitlab.create_model("setr_naive_small", num_classes=3, labels=("sky", "road", "tree"), img_size=64,
                               depth=2).eval()
    rule = Preprocessing(rescale=(64, 64), antialias=False, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    vitlab.save_weights(setr, tmp_path / "setr.safetensors", {"preprocessing": json.dumps(rule.to_dict())})
    photo = Image.fromarray(skimage_data.chelsea()).resize((90, 90))  # square: rescaled to the 64-pixel crop
    answer = vitlab.pipeline(model=str(tmp_path / "setr.safetensors"))(photo)
    with torch.no_grad():
        scores = F.interpolate(setr(rule(photo)[None]).logits, size=(90, 90), mode="bilinear", align_corners=False)
    assert answer["mask"].size == (90, 90)
    assert np.array_equal(np.asarray(answer["mask"]), scores.argmax(1)[0].numpy())
    # a landscape: rescaled to 43 × 64, smaller than the crop, so its one window is zero-padded to 64 × 64
    wide = Image.fromarray(skimage_data.chelsea()).resize((90, 60))
    answer = vitlab.pipeline(model=str(tmp_path / "setr.safetensors"))(wide)
    image = rule(wide)
    assert image.shape[1:] == (43, 64)
    with torch.no_grad():
        window = setr(F.pad(image, (0, 0, 0, 64 - 43))[None]).logits[..., :43, :64]
        scores = F.interpolate(window, size=(60, 90), mode="bilinear", align_corners=False)
    assert answer["mask"].size == (90, 60)
    assert np.array_equal(np.asarray(answer["mask"]), scores.argmax(1)[0].numpy())


def test_a_converted_file_keeps_its_sources_preprocessing(local_hub, photo_files, tmp_path):
    """`vitlab convert` writes the source's preprocessing (here a timm repo's pretrained_cfg) into the .safetensors
    metadata: the file alone answers as the hub model does."""
    publish_timm(local_hub, "vitlab-test/timm-convert", "vit_tiny_patch16_224", img_size=48, depth=1, num_classes=5,
                 model_config={"label_names": list(CLASSES)})
    name = "hf-hub:vitlab-test/timm-convert"
    assert main(["convert", name, str(tmp_path / "converted.safetensors")]) == 0
    from vitlab.interop.preprocessing import preprocessing_for

    assert preprocessing_for(tmp_path / "converted.safetensors") == preprocessing_for(name)
    assert preprocessing_for(name).resampler == "pil"
    paths = [str(p) for p in photo_files]
    assert vitlab.pipeline(model=str(tmp_path / "converted.safetensors"))(paths) == vitlab.pipeline(model=name)(paths)


def test_a_model_by_name_is_quantized_on_calibration_images_and_keeps_its_labels_in_int8(local_hub, tmp_path,
                                                                                          photo_files, capsys):
    """`vitlab quantize NAME --calibration DIR`: int8 graphs in the hub cache beside the name's fp32 one, measured on
    the calibration images (a name has no data of its own); `--precision int8` then answers with the model's names."""
    hf_vit(local_hub, "vitlab-test/hf-vit-int8")
    name = "hf-hub:vitlab-test/hf-vit-int8"
    for label, photo in (("tabby", skimage_data.chelsea()), ("rocket", skimage_data.rocket())):
        (tmp_path / "calibration" / label).mkdir(parents=True)
        for i, size in enumerate((48, 64, 80, 96)):
            Image.fromarray(photo).resize((size, size)).save(tmp_path / "calibration" / label / f"{i}.png")
    assert main(["quantize", name, "--calibration", str(tmp_path / "calibration"), "--samples", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["measured_on"] == str(tmp_path / "calibration") and report["graphs"]
    assert main(["quantize", name]) == 2
    assert "--calibration DIR" in capsys.readouterr().err
    assert main(["predict", name, str(photo_files[0]), "--runtime", "onnxruntime", "--precision", "int8",
                 "--json"]) == 0
    printed = capsys.readouterr()
    assert "no calibrated int8 graph" not in printed.err  # the graph `vitlab quantize` calibrated is found
    assert json.loads(printed.out)[0]["top_k"][0]["class"] in CLASSES


def test_scoring_a_model_folder_writes_nothing_into_it(tmp_path, capsys):
    """A Hugging Face model folder given by path is read, never written: `vitlab eval` keeps its pictures and
    results files for run folders."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    folder = tmp_path / "hf-model"
    ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=1,
                                        num_attention_heads=3, intermediate_size=96,
                                        id2label=dict(enumerate(CLASSES)))).save_pretrained(folder)
    before = sorted(p.name for p in folder.iterdir())
    for name in ("rocket", "tabby"):
        (tmp_path / "mine" / name).mkdir(parents=True)
        Image.fromarray(skimage_data.rocket() if name == "rocket" else skimage_data.chelsea()).resize((40, 30)).save(
            tmp_path / "mine" / name / "0.png")
    assert main(["eval", str(folder), "--data", str(tmp_path / "mine"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_images"] == 2
    assert sorted(p.name for p in folder.iterdir()) == before
