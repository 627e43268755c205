"""Labels belong to the model: a config carries its classes' names, filled from the data when a run trains, written
with the weights (the run's config.json, vitlab's safetensors metadata, an exported graph's metadata) and read back
from each; names that disagree with the head are refused."""

import json
from pathlib import Path

import pytest
import torch

import vitlab
from vitlab.models import config_from_dict, config_to_dict, get_config
from vitlab.models.registry import build_model


def test_labels_fit_the_head_or_are_refused_naming_both_sizes():
    config = get_config("vit_mini_patch7_28").for_data(labels=["cat", "dog", "bird"])
    assert (config.num_classes, config.labels) == (3, ("cat", "dog", "bird"))  # the count follows the names
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))) == config  # saved and read back
    with pytest.raises(ValueError, match="3 labels for a head of 10 classes"):
        get_config("vit_mini_patch7_28").for_data(classes=10, labels=["cat", "dog", "bird"])
    with pytest.raises(ValueError, match="2 labels for a head of 92 classes"):
        build_model(get_config("detr_small", num_classes=92, labels=("person", "bicycle")))
    assert get_config("vqgan_small", labels=("a",)).labels == ("a",)  # a family without classes: nothing to match


@pytest.mark.slow
def test_a_run_writes_its_classes_names_wherever_its_weights_go(trained, tmp_path):
    from vitlab import runtime
    from vitlab.cli.main import main
    from vitlab.interop import load_model
    from vitlab.interop.preprocessing import preprocessing_for
    from vitlab.runtime.export import read_metadata

    for name in ("cls", "detr"):
        run = trained[name]
        saved = json.loads((run / "config.json").read_text())
        names = tuple(saved["data"]["classes"])
        assert tuple(saved["model_config"]["labels"]) == names  # config.json
        model = load_model(run / "best.safetensors")
        assert model.config.labels == names  # the safetensors file's own metadata, read without the run
        # its preprocessing (a detector's: its data set's evaluation transform), in the file too
        assert preprocessing_for(run / "best.safetensors").to_dict() == saved["data"]["preprocessing"]
        if name == "cls":  # the graph's metadata is written the same way for every family (runtime/graphs.py)
            out = tmp_path / f"{name}.onnx"
            assert main(["export", str(run), "--format", "onnx", "--no-optimize", "--out", str(out)]) == 0
            assert tuple(read_metadata(out)["labels"]) == names  # the exported graph's
            # and its preprocessing: the weights alone answer as the run does, and so does the graph
            assert read_metadata(out)["preprocessing"] == saved["data"]["preprocessing"]
            graph = runtime.load(out)
            assert graph.labels == names and graph.preprocessing.to_dict() == saved["data"]["preprocessing"]
            photos = sorted((Path(__file__).resolve().parents[2] / "docs" / "examples").glob("*.png"))
            by_file = vitlab.pipeline(model=str(run / "best.safetensors"))([str(p) for p in photos])
            by_run = vitlab.pipeline(model=str(run))([str(p) for p in photos])  # the run also flips (its option)
            assert [answer[0]["label"] for answer in by_file] == [answer[0]["label"] for answer in by_run]


def renamed_copy(source, run):
    """A copy of the run `source` at `run` whose config.json names its data's classes otherwise; the model's own
    labels, which the copy's weights still carry."""
    import shutil

    shutil.copytree(source, run)
    saved = json.loads((run / "config.json").read_text())
    saved["data"]["classes"] = [f"not {name}" for name in saved["data"]["classes"]]
    (run / "config.json").write_text(json.dumps(saved))
    return vitlab.interop.load_model(run / "best.safetensors").config.labels


@pytest.mark.slow
def test_predict_names_the_classes_from_the_model(trained, tmp_path, capsys):
    """The names come with the weights: a run whose config.json says other class names still answers with the
    model's own."""
    from PIL import Image

    from vitlab.cli.main import main

    names = renamed_copy(trained["cls"], tmp_path / "run")
    image = tmp_path / "grey.png"
    Image.fromarray(torch.full((28, 28), 128, dtype=torch.uint8).numpy()).save(image)
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "run"), str(image), "--json", "--top-k", "10"]) == 0
    answer = json.loads(capsys.readouterr().out)[0]["top_k"]
    assert len(answer) == len(names) == 10
    assert [item["class"] for item in answer] == [names[item["index"]] for item in answer]


@pytest.mark.slow
def test_a_detectors_predictions_are_named_by_the_model(trained, tmp_path, capsys):
    from vitlab.cli.main import main

    names = renamed_copy(trained["detr"], tmp_path / "detr")
    image = sorted((trained["scenes"] / "images" / "val").glob("*.png"))[0]
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "detr"), str(image), "--threshold", "0.0", "--json"]) == 0
    detections = json.loads(capsys.readouterr().out)[0]["detections"]
    assert detections and all(d["label"] in names for d in detections)


def test_every_release_that_names_its_classes_names_each_row_of_its_head():
    """A release's label set has one name per class of the model it builds (ImageNet-1k's 1,000, COCO's 91 slots,
    ADE20K's 150, Cityscapes' 19), each name once but COCO's "N/A" slots; the others (SETR on Pascal Context, whose
    60 outputs' order is not known; IPT's restorers) name none."""
    from vitlab.models.labels import NO_CATEGORY

    named = [r for r in vitlab.list_pretrained() if r.labels]
    assert {r.dataset for r in named} >= {"ImageNet-1k val", "COCO val2017", "ADE20K val", "Cityscapes val"}
    for release in named:
        labels = release.labels()
        config = vitlab.get_config(release.model, **release.overrides)
        assert len(labels) == config.fact("classes"), release.tag
        real = [name for name in labels if name != NO_CATEGORY]
        assert len(set(real)) == len(real) and all(name == name.strip() for name in real), release.tag
    ade = vitlab.list_pretrained("setr_pup_vit_large_patch16_384.ade20k")[0].labels()
    city = vitlab.list_pretrained("setr_pup_vit_large_patch16_384.cityscapes_80k")[0].labels()
    # Cityscapes' trainIds (cityscapesScripts' labels.py) and ADE20K's objectInfo150 order, at a few known places
    assert (city[0], city[11], city[13], city[18]) == ("road", "person", "car", "bicycle")
    assert (ade[0], ade[2], ade[12], ade[20], ade[149]) == ("wall", "sky", "person", "car", "flag")
    assert not vitlab.list_pretrained("setr_pup_vit_large_patch16_384.pascal_context")[0].labels
